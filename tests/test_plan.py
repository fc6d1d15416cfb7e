"""The index run's plan (mdrag.ingest.plan): diffing and crash repair, from a manifest and a scan, with no store."""

from __future__ import annotations

from mdrag.ingest.manifest import FileState, Manifest
from mdrag.ingest.plan import first_build_order, mismatched, nothing_to_do, plan_update, to_hash
from mdrag.ingest.scan import ScanResult

A, B = "/docs", "/more"


def _state(root: str, rel: str, mtime_ns: int = 1, size: int = 10, digest: str = "h", chunks: int = 1) -> FileState:
    return FileState(root, rel, mtime_ns, size, digest, [f"{rel}#{i}" for i in range(chunks)])


def _files(**states: FileState) -> dict[str, FileState]:
    return {f"{s.root}/{s.rel_path}": s for s in states.values()}


def test_plan_sorts_new_edited_touched_moved_deleted_and_unchanged_files() -> None:
    files = _files(
        same=_state(A, "same.md"),
        touched=_state(A, "touched.md", digest="t"),
        edited=_state(A, "edited.md", digest="e"),
        gone=_state(A, "gone.md"),
        moved=_state(A, "sub/moved.md"),
    )
    found = ScanResult(
        files={
            f"{A}/same.md": (A, "same.md", 1, 10),
            f"{A}/touched.md": (A, "touched.md", 2, 10),  # mtime changed, same bytes
            f"{A}/edited.md": (A, "edited.md", 1, 11),
            f"{A}/new.md": (A, "new.md", 1, 10),
            # Same stat, but the folder /docs/sub is now indexed as a folder of its own.
            f"{A}/sub/moved.md": (f"{A}/sub", "moved.md", 1, 10),
        },
        skipped={f"{A}/big.md": (A, "over index.max_file_mb")},
    )
    roots = [A, f"{A}/sub"]
    assert to_hash(files, roots, found) == [f"{A}/edited.md", f"{A}/touched.md"]
    plan = plan_update(files, roots, found, {f"{A}/touched.md": "t", f"{A}/edited.md": "changed"})
    assert plan.todo == [
        (f"{A}/new.md", None),
        (f"{A}/sub/moved.md", None),
        (f"{A}/big.md", "over index.max_file_mb"),
        (f"{A}/edited.md", None),
    ]
    assert plan.touched == {f"{A}/touched.md": (2, 10)}
    assert plan.unchanged == [f"{A}/same.md"]
    assert plan.delete == [f"{A}/gone.md"]
    assert plan.kept == []
    assert files[f"{A}/touched.md"].mtime_ns == 1  # the plan changes nothing: the indexer applies it


def test_an_unreadable_changed_file_is_skipped_with_the_reason() -> None:
    files = _files(x=_state(A, "x.md"))
    found = ScanResult(files={f"{A}/x.md": (A, "x.md", 5, 10)})
    plan = plan_update(files, [A], found, {f"{A}/x.md": PermissionError(13, "Permission denied")})
    assert plan.todo == [(f"{A}/x.md", "cannot read: [Errno 13] Permission denied")]
    assert not plan.touched


def test_files_of_a_missing_or_partly_unreadable_folder_are_kept_not_deleted() -> None:
    files = _files(a=_state(A, "a.md"), b=_state(B, "locked/b.md"), c=_state(B, "c.md"))
    found = ScanResult(missing=[A], unreadable=[f"{B}/locked"])
    plan = plan_update(files, [A, B], found, {})
    assert sorted(plan.kept) == [f"{A}/a.md", f"{B}/c.md", f"{B}/locked/b.md"]
    assert plan.delete == []
    # A folder listed whole: what is not found is deleted; a folder not listed in the run is left alone.
    plan = plan_update(files, [B], ScanResult(), {})
    assert sorted(plan.delete) == [f"{B}/c.md", f"{B}/locked/b.md"]
    assert f"{A}/a.md" not in plan.kept + plan.delete


def test_a_file_found_under_a_folder_not_listed_before_has_moved() -> None:
    files = _files(x=_state(A, "x.md"))
    # Listing only another folder that now holds it: it is parsed again, under its new folder.
    found = ScanResult(files={f"{A}/x.md": (B, "x.md", 1, 10)})
    assert plan_update(files, [B], found, {}).todo == [(f"{A}/x.md", None)]


def test_nothing_to_do_only_when_the_clean_manifest_describes_every_file() -> None:
    m = Manifest("i", "uri", {}, {}, roots=[A], files=_files(x=_state(A, "x.md")))
    found = ScanResult(files={f"{A}/x.md": (A, "x.md", 1, 10)})
    assert nothing_to_do(m, [A], found)
    assert not nothing_to_do(m, [A, B], found)  # a new folder
    assert not nothing_to_do(m, [A], ScanResult(files={f"{A}/x.md": (A, "x.md", 2, 10)}))
    assert not nothing_to_do(m, [A], ScanResult(skipped={f"{A}/x.md": (A, "too big")}))
    m.dirty = True
    assert not nothing_to_do(m, [A], found)


def test_crash_repair_re_indexes_files_whose_stored_chunks_differ_from_the_manifest() -> None:
    files = _files(
        whole=_state(A, "whole.md", chunks=2),
        half=_state(A, "half.md", chunks=2),  # killed while its chunks were written
        none=_state(A, "none.md"),
        extra=_state(A, "extra.md"),  # the store holds a chunk the manifest does not list
    )
    stored = {
        "whole.md#0": f"{A}/whole.md",
        "whole.md#1": f"{A}/whole.md",
        "half.md#0": f"{A}/half.md",
        "extra.md#0": f"{A}/extra.md",
        "extra.md#9": f"{A}/extra.md",
    }
    assert mismatched(files, stored) == [f"{A}/half.md", f"{A}/none.md", f"{A}/extra.md"]
    assert mismatched(files, {}) == list(files)


def test_a_first_build_orders_skipped_files_then_small_folder_pages_then_the_rest_smallest_first() -> None:
    sizes = {
        "a-big.md": 50_000,
        "z-small.md": 100,
        "b.md": 100,  # as small as z-small.md: by path
        "README.md": 5_000,  # the folder's own page, shallowest: ahead of the small files
        "guide/README.md": 300,
        "site/INDEX.HTML": 200,  # any case, any extension
        "api/_index.md": 9_000,  # over 8 KiB: a document like the others, by size
        "notes/readme-old.md": 10,  # not a folder's own page: by size
    }
    found = ScanResult(
        files={f"{A}/{rel}": (A, rel, 1, size) for rel, size in sizes.items()},
        skipped={f"{A}/huge.pdf": (A, "over index.max_file_mb")},
    )
    todo = [(p, None) for p in sorted(found.files)] + [(f"{A}/huge.pdf", "over index.max_file_mb")]
    order = [p.removeprefix(f"{A}/") for p, _ in first_build_order(todo, found)]
    assert order == [
        "huge.pdf",  # nothing to read or embed
        "README.md",
        "guide/README.md",
        "site/INDEX.HTML",
        "notes/readme-old.md",
        "b.md",
        "z-small.md",
        "api/_index.md",
        "a-big.md",
    ]
    # A later step of the build orders what is left the same way.
    rest = first_build_order([t for t in todo if t[0] != f"{A}/README.md"][::-1], found)
    assert [p.removeprefix(f"{A}/") for p, _ in rest] == [p for p in order if p != "README.md"]

"""What an index run does with each file, worked out from the manifest and a scan, with no store.

Pure functions: :func:`to_hash` names the files whose content hash decides
(their mtime or size changed), :func:`plan_update` turns the manifest's files,
the scan and those hashes into a :class:`UpdatePlan` (what to parse, what to keep,
what to delete), and :func:`mismatched` names, after a crash, the files whose
chunks in the store are not those the manifest lists; :func:`first_build_order` orders a first build's files
so that those a user most likely asks about first are searchable soonest. :func:`rebuild_reason`
says when every file must be chunked again, and :func:`recall_skips` which
files a parse failed on, unchanged since, are not parsed again.
:mod:`mdrag.ingest.pipeline` reads the files and the store and applies the plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mdrag.chunking import ChunkSettings
from mdrag.embedding.base import Embedder
from mdrag.errors import MdragError
from mdrag.ingest.manifest import FileState, Manifest, SkippedFile, diff
from mdrag.ingest.scan import ScanResult
from mdrag.store.base import Store
from mdrag.version import __version__

__all__ = [
    "CHUNK_FORMAT",
    "UpdatePlan",
    "chunking_of",
    "first_build_order",
    "kept_files",
    "mismatched",
    "nothing_to_do",
    "plan_update",
    "rebuild_reason",
    "recall_skips",
    "refuse_rebuild_with_folders_missing",
    "skip_key",
    "to_hash",
]


@dataclass
class _Sorted:
    """The files of the folders a run lists, by what the scan found for them."""

    added: list[str]
    stat_changed: list[str]  # mtime or size differ: the content hash decides
    unchanged: list[str]
    moved: list[str]  # now found under another indexed folder: new chunk ids
    removed: list[str]  # gone from a folder that was listed whole
    kept: list[str]  # not found, but their folder is missing, empty or unreadable: kept


def _sort(files: Mapping[str, FileState], roots: Sequence[str], found: ScanResult) -> _Sorted:
    scoped = {p: s for p, s in files.items() if s.root in roots}
    d = diff(scoped, {p: (mt, sz) for p, (_, _, mt, sz) in found.files.items()})
    # A file found now that the manifest holds under a folder not listed in this run: it moved.
    elsewhere = [p for p in d.added if p in files]
    added = [p for p in d.added if p not in files]
    moved = elsewhere + [p for p in d.unchanged if (files[p].root, files[p].rel_path) != found.files[p][:2]]
    unchanged = [p for p in d.unchanged if p not in set(moved)]
    gone = [p for p in d.removed if p not in found.skipped]  # skipped files are handled as skipped
    removed = [p for p in gone if found.complete(files[p].root) and not found.kept(p)]
    kept = [p for p in gone if p not in set(removed)]
    return _Sorted(added, d.stat_changed, unchanged, moved, removed, kept)


@dataclass
class UpdatePlan:
    """What a run does with the files of the folders it lists."""

    # Files to parse, chunk and write, in order, each with None, or with the reason it is skipped
    # (the scan's reason, or why its bytes could not be read): a skipped file that was indexed loses
    # its chunks. Which chunks need embedding is decided as they are written (content hash lookups).
    todo: list[tuple[str, str | None]] = field(default_factory=list)
    # Files whose mtime or size changed but whose content did not: path -> (mtime_ns, size) to record.
    touched: dict[str, tuple[int, int]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)  # same mtime and size, same place
    delete: list[str] = field(default_factory=list)  # gone from a folder listed whole: their chunks go
    kept: list[str] = field(default_factory=list)  # not found, their folder missing, empty or unreadable


def to_hash(files: Mapping[str, FileState], roots: Sequence[str], found: ScanResult) -> list[str]:
    """The files whose mtime or size changed: :func:`plan_update` needs their content hashes."""
    return _sort(files, roots, found).stat_changed


def plan_update(
    files: Mapping[str, FileState],
    roots: Sequence[str],
    found: ScanResult,
    hashes: Mapping[str, str | OSError],
) -> UpdatePlan:
    """The plan for the indexed ``files`` (the manifest's) under ``roots`` (the folders listed) given the scan.

    ``hashes`` maps each file of :func:`to_hash` to the sha256 of its bytes, or
    the OSError that reading it raised (the file is then skipped with that reason).
    """
    s = _sort(files, roots, found)
    plan = UpdatePlan(unchanged=s.unchanged, delete=s.removed, kept=s.kept)
    plan.todo = [(p, None) for p in s.added + s.moved]
    plan.todo += [(p, reason) for p, (_, reason) in found.skipped.items()]
    for p in s.stat_changed:
        h = hashes[p]
        if isinstance(h, OSError):
            plan.todo.append((p, f"cannot read: {h}"))
            continue
        known, (root, rel, mtime_ns, size) = files[p], found.files[p]
        if h == known.hash and (known.root, known.rel_path) == (root, rel):
            plan.touched[p] = (mtime_ns, size)
        else:
            plan.todo.append((p, None))
    return plan


#: A folder's own page (index.md, _index.md, README.md, index.html, index.rst...: by its name, in any case, with
#: any extension), which a first build reads ahead of the other files up to this size: a longer one is a document
#: like the others, and takes its place by size.
_FRONT_PAGE_MAX = 8 * 1024
_FRONT_PAGES = frozenset({"index", "_index", "readme"})


def first_build_order(todo: Sequence[tuple[str, str | None]], found: ScanResult) -> list[tuple[str, str | None]]:
    """The files to do of a first build (or a rebuild), ``plan.todo``, in the order that makes those a user most
    likely asks about first searchable soonest, at no cost to the build (its steps commit the files in this order):

    - the files skipped with a reason (nothing to read or embed);
    - each folder's own page (index.md, README.md...) of up to 8 KiB, the shallowest first: what the folder is about;
    - every other file by size, the smallest first: the most files searchable the soonest, a very large file last.

    Ties by path: the same files in the same state give the same order, at every step of the build.
    """

    def key(item: tuple[str, str | None]) -> tuple[int, int, str]:
        path, reason = item
        if reason is not None or path not in found.files:
            return (0, 0, path)
        _, rel, _, size = found.files[path]
        name = rel.rsplit("/", 1)[-1].lower()
        if size <= _FRONT_PAGE_MAX and name.split(".", 1)[0] in _FRONT_PAGES:
            return (1, rel.count("/"), path)
        return (2, size, path)

    return sorted(todo, key=key)


def kept_files(files: Mapping[str, FileState], roots: Sequence[str], found: ScanResult) -> list[str]:
    """The indexed ``files`` under ``roots`` not found because their folder is missing, empty or unreadable."""
    return _sort(files, roots, found).kept


def nothing_to_do(old: Manifest, roots: Sequence[str], found: ScanResult) -> bool:
    """Whether a clean manifest still describes every file found, and the folder set is the same."""
    if old.dirty or old.retired_roots or not set(roots) - set(found.missing) <= set(old.roots):
        return False
    s = _sort(old.files, roots, found)
    return not (s.added or s.stat_changed or s.moved or s.removed or any(f in old.files for f in found.skipped))


def mismatched(files: Mapping[str, FileState], stored: Mapping[str, str]) -> list[str]:
    """The files whose chunks in the store are not exactly those the manifest lists: re-indexed after a crash.

    ``stored`` maps each chunk id in the store (under the manifest's folders) to its file's path.
    """
    by_path: dict[str, set[str]] = {}
    for cid, path in stored.items():
        by_path.setdefault(path, set()).add(cid)
    return [p for p, s in files.items() if set(s.chunks) != by_path.get(p, set())]


#: What parsing and chunking give for a file: raised when a release changes it (2: chunks keep a code fence
#: whole and leave no fragments, line spans, PDF outline sections, DOCX notes and text boxes, HTML main content;
#: 3: an HTML aside with no text does not split the section it interrupts; PDF running headers and footers left out;
#: 4: text before the first heading is under the title, neighbours share at most a third of either, langchain line
#: spans hold heading lines; 5: notes vaults read as their app shows them, mdrag.parsers.vault: a plain Markdown
#: file's chunks, ids and text are those of 4; 6: blocks an HTML folder's pages repeat are left out,
#: mdrag.ingest.boilerplate; 7: a Markdown table's delimiter row written short, its header repeated before the
#: rows of each chunk of a cut table, never a chunk's end; HTML and DOCX chunks carry the lines of the text `get`
#: writes out; 8: an HTML page's short named items share sections headed by their names, asciidoc's NAME line
#: kept; 9: a passage several HTML pages of a folder repeat is kept on one of them, mdrag.ingest.passages; 10: on
#: the page where it sits under a heading of its own first, and a manual page whose main content is one list keeps
#: its sections), so an index built by an older release is chunked again rather than mixing both.
CHUNK_FORMAT = 10


def chunking_of(store: Store, embedder: Embedder, settings: ChunkSettings) -> dict[str, object]:
    """What decides the stored chunks: a change re-chunks (vectors are reused by content hash)."""
    return {
        **settings.as_dict(),
        "max_tokens": embedder.max_tokens,
        "bm25_stemming": store.prepare_text is not None,
        "format": CHUNK_FORMAT,
    }


def rebuild_reason(old: Manifest, store: Store, embedder: Embedder, chunking: dict[str, object]) -> str | None:
    """Why every file must be chunked again (the model, the store or the chunking changed), or None."""
    if old.model != embedder.identity:
        was, now = (f"{m.get('model')} ({m.get('precision', 'fp32')})" for m in (old.model, embedder.identity))
        return f"embedding model changed from {was} to {now}"
    if old.store_uri != store.uri:
        return f"the index's store is not the one its manifest records ({old.store_uri}; now {store.uri})"
    if old.chunking.get("format") != chunking["format"]:
        return "this release of mdrag parses and chunks files differently"
    if old.chunking != chunking:
        return "chunk settings changed"
    return None


def refuse_rebuild_with_folders_missing(old: Manifest, found: ScanResult, why: str) -> None:
    """A run that re-indexes everything cannot re-read a missing folder: it would lose that folder's chunks."""
    gone = [r for r in old.roots if not found.complete(r) and any(f.root == r for f in old.files.values())]
    if gone:
        raise MdragError(
            f"every file must be indexed again ({why}), but these folders of the index are missing, empty or "
            f"unreadable: {', '.join(gone)}. Their chunks are kept: bring the folders back (mount the disk), or "
            "take them out with `mdrag remove DIR`, then run `mdrag index` again."
        )


def skip_key(parse_limits: tuple[float, float | None] | None) -> str:
    """What a parse failure depends on besides the file: mdrag's release and the parse limits."""
    return json.dumps([__version__, list(parse_limits) if parse_limits else None])


_SKIPPED_BEFORE = " (as at an earlier run, the file unchanged since: tried again when it changes, or with --rebuild)"


def recall_skips(found: ScanResult, skips: dict[str, SkippedFile], key: str) -> None:
    """Move the files a parse failed on, unchanged since (same mtime, size and ``key``), from
    ``found.files`` to ``found.skipped``: they are reported as skipped without being parsed again (a
    file that made the parser time out would cost its full time limit at every run and every save)."""
    for path, s in skips.items():
        now = found.files.get(path)
        if now is not None and (now[0], now[2], now[3], s.key) == (s.root, s.mtime_ns, s.size, key):
            del found.files[path]
            found.skipped[path] = (s.root, s.reason + _SKIPPED_BEFORE)

"""What an index run does with each file, worked out from the manifest and a scan, with no store.

Pure functions: :func:`to_hash` names the files whose content hash decides
(their mtime or size changed), :func:`plan_update` turns the manifest's files,
the scan and those hashes into a :class:`UpdatePlan` (what to parse, what to keep,
what to delete), and :func:`mismatched` names, after a crash, the files whose
chunks in the store are not those the manifest lists. :mod:`mdrag.indexer`
reads the files and the store and applies the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mdrag.manifest import FileState, Manifest, diff
from mdrag.scan import ScanResult

__all__ = ["UpdatePlan", "kept_files", "mismatched", "nothing_to_do", "plan_update", "to_hash"]


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

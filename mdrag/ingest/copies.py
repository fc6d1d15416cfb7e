"""Files of one index whose bytes are the same: one of them is chunked and embedded, the others are its copies.

A copy is recorded in the manifest with ``copy_of`` naming that file (its *original*) and no chunks of its
own: the original's chunks stand for both, and a search shows them once, listing the copies' paths with them
(:mod:`mdrag.retrieval.copies`). Where a group of identical files forms anew, its first path (sorted) is the
original; a file identical to an original that is already indexed, and unchanged, becomes its copy.

A copy is recorded only while its original holds its bytes: before a run writes, every copy whose original
changes in the run, is gone, or no longer has its hash is taken out of the manifest (:func:`release`) and is
done again with the run's files (it may become an original itself: indexed with chunks of its own). A copy of
a file the run writes is recorded once that file is written (:meth:`CopyPlan.record_after`), so a manifest
saved at any point, or left by a run killed at any point, never lists a copy of other bytes than its own; a
copy not yet recorded is a file the next run finds to do.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from mdrag.ingest.manifest import FileState, Manifest, SkippedFile
from mdrag.ingest.scan import ScanResult
from mdrag.ingest.summary import IndexSummary

__all__ = ["CopyPlan", "plan_copies", "release"]

log = logging.getLogger(__name__)

Todo = list[tuple[str, str | None]]  # files to do, each with None or the reason it is skipped


def release(files: dict[str, FileState], changing: set[str], gone: set[str], found: ScanResult) -> list[str]:
    """Take out of ``files`` the copies (but those of ``gone``, which the run deletes) whose original is in
    ``changing`` (the run parses it again or deletes it), is gone from ``files``, is a copy itself, or no
    longer has their hash; their paths, sorted (they have no chunks: nothing is lost, and the run does them
    again). A copy under a folder the run did not scan is added to ``found`` as it is on disk now (one that
    cannot be read is left out of the index, said in the log)."""
    out = []
    for path, state in sorted(files.items()):
        if state.copy_of is None or path in gone:
            continue
        original = files.get(state.copy_of)
        if state.copy_of in changing or original is None or (original.copy_of, original.hash) != (None, state.hash):
            out.append(path)
    for path in out:
        state = files.pop(path)
        if path not in found.files and path not in found.skipped:
            try:
                st = os.stat(path)
            except OSError as e:
                log.warning("%s: its original changed and it cannot be read (%s): left out of the index", path, e)
                continue
            found.files[path] = (state.root, state.rel_path, st.st_mtime_ns, st.st_size)
    return [p for p in out if p in found.files or p in found.skipped]


@dataclass
class CopyPlan:
    """Which of a run's files to do are copies of which, decided from their content hashes before it parses."""

    now: dict[str, str] = field(default_factory=dict)  # path -> its original, indexed and unchanged in the run
    after: dict[str, list[str]] = field(default_factory=dict)  # original the run writes -> its copies
    hashes: dict[str, str] = field(default_factory=dict)  # path -> sha256, of the files of ``now`` and ``after``

    @property
    def count(self) -> int:
        """The copies: files to do that are not parsed."""
        return len(self.now) + sum(len(c) for c in self.after.values())

    def record_now(self, m: Manifest, found: ScanResult, retired: list[str], summary: IndexSummary) -> None:
        """Record the copies of originals that the run leaves as they are (before it writes anything)."""
        for path, original in self.now.items():
            _record(m, found, retired, summary, path, original)

    def record_after(self, m: Manifest, found: ScanResult, retired: list[str], summary: IndexSummary, key: str) -> int:
        """Record the copies of the originals the run wrote; those of an original whose parse failed are
        skipped with its reason. Returns how many are left (their original not done: a stop, or its bytes
        changed since they were hashed), for the next run."""
        left = 0
        for original, copies in self.after.items():
            state = m.files.get(original)
            skipped = m.skipped.get(original)
            if state is not None and state.copy_of is None and state.hash == self.hashes[original]:
                for path in copies:
                    _record(m, found, retired, summary, path, original)
            elif skipped is not None and found.files.get(original, ())[2:] == (skipped.mtime_ns, skipped.size):
                for path in copies:
                    _skip(m, found, retired, summary, path, skipped, key)
            else:
                left += len(copies)
        return left


def _record(
    m: Manifest, found: ScanResult, retired: list[str], summary: IndexSummary, path: str, original: str
) -> None:
    """``path`` is a copy of ``original`` (indexed): its own chunks, if it had some, go after the commit."""
    root, rel, mtime_ns, size = found.files[path]
    source = m.files[original]
    prev = m.files.get(path)
    if prev is not None:
        retired.extend(prev.chunks)
        summary.modified += 1
    else:
        summary.added += 1
    summary.copies += 1
    m.skipped.pop(path, None)
    m.files[path] = FileState(root, rel, mtime_ns, size, source.hash, note=source.note, copy_of=original)
    log.info("%s: the same bytes as %s: indexed once, listed with it", path, original)


def _skip(
    m: Manifest,
    found: ScanResult,
    retired: list[str],
    summary: IndexSummary,
    path: str,
    skipped: SkippedFile,
    key: str,
) -> None:
    """``path`` has the bytes of a file whose parse failed: skipped with the same reason."""
    root, _, mtime_ns, size = found.files[path]
    if path in m.files:
        retired.extend(m.files.pop(path).chunks)
    m.skipped[path] = SkippedFile(root, mtime_ns, size, skipped.reason, key)
    summary.skipped += 1
    summary.skipped_files.append((path, skipped.reason))
    log.warning("skipped %s: %s (the same bytes as a file skipped so)", path, skipped.reason)


def plan_copies(
    files: dict[str, FileState],
    todo: Todo,
    delete: list[str],
    found: ScanResult,
    hash_of: Callable[[str], str | OSError],
) -> tuple[Todo, CopyPlan]:
    """The files of ``todo`` to parse, and the others as copies (see :class:`CopyPlan`), given the
    indexed ``files`` and what the scan found; the run deletes the files of ``delete``. The copies of
    files the run parses again or deletes are released (:func:`release`) and done with ``todo``. Only
    files of the same size as another are hashed (``hash_of``: the sha256 of a file's bytes, or why it
    cannot be read)."""
    listed = {p for p, _ in todo}
    todo = todo + [(p, None) for p in release(files, listed | set(delete), set(delete), found) if p not in listed]
    doing = {p for p, err in todo if err is None and p in found.files}
    # an original stays as it is in the run: not parsed again, skipped (its chunks go) or deleted
    leaving = {p for p, _ in todo} | set(delete)
    originals = {p: s for p, s in files.items() if s.copy_of is None and p not in leaving}
    sizes = Counter([found.files[p][3] for p in doing] + [s.size for s in originals.values()])
    by_hash: dict[str, list[str]] = {}
    plan = CopyPlan()
    for path in sorted(doing):
        if sizes[found.files[path][3]] < 2:
            continue
        h = hash_of(path)
        if isinstance(h, str):  # a file that cannot be read is left to be skipped with the reason
            by_hash.setdefault(h, []).append(path)
            plan.hashes[path] = h
    indexed: dict[str, str] = {}  # hash -> the first indexed original of it (sorted)
    for path, state in sorted(originals.items()):
        if state.hash in by_hash:
            indexed.setdefault(state.hash, path)
    for h, paths in by_hash.items():
        if h in indexed:
            plan.now.update(dict.fromkeys(paths, indexed[h]))
        elif len(paths) > 1:
            plan.after[paths[0]] = paths[1:]
    copies = set(plan.now) | {p for c in plan.after.values() for p in c}
    plan.hashes = {p: h for p, h in plan.hashes.items() if p in copies or p in plan.after}
    return [t for t in todo if t[0] not in copies], plan

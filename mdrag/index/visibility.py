"""Which committed state the searches of one index see: this process's runs, other processes' commits
through the store or the manifest, and how far a first build is while nothing is committed.

:class:`Visibility` drives a :class:`~mdrag.index.snapshot.Snapshot` (the state
searches read, held in memory) from the index's manifest: a run of this process
begins and ends it and commits through it; a search follows the last commit of
any process, read from the manifest only when its file changed.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from mdrag.errors import IndexBuildingError
from mdrag.index.snapshot import Snapshot, State
from mdrag.ingest.manifest import Manifest
from mdrag.retrieval.copies import Copies

__all__ = ["ManifestState", "Visibility"]

log = logging.getLogger(__name__)

# How long a commit waits for the searches that still read the state it replaces
# before it deletes the replaced chunks anyway (and says so in the log).
_READERS_GRACE_S = 60.0


class ManifestState(NamedTuple):
    """The manifest as searches read it (see :meth:`Visibility.manifest_state`)."""

    stamp: tuple[int, int, int] | None  # its file's (inode, mtime, size); None: there is none
    building: bool  # it records a first build that has committed nothing yet
    committed: State
    partial: tuple[int, int] | None = None  # (files committed, files in all) of a first build done in part


class Visibility:
    """The committed state of one index as its searches see it, across this process's runs and others'."""

    def __init__(self, manifest_path: Path, name: str, snapshot: Snapshot) -> None:
        self.manifest_path = manifest_path  # where other processes' commits are recorded
        self.name = name  # named in the messages
        # What searches see: a running update is invisible until it commits, then visible all at once.
        self.snapshot = snapshot
        self.progress: tuple[int, int | None] | None = None  # (files done, to do) of this process's update
        self._seen_manifest: ManifestState | None = None  # see manifest_state
        self.seen_roots: list[str] = []  # the index's folders, as the manifest manifest_state last parsed lists them
        self.seen_shared: frozenset[str] = frozenset()  # relative paths of files in several of them (x.md in two)
        self.seen_copies = Copies(None)  # the files recorded as copies of others, as that manifest lists them

    def commit(self, ids: set[str], roots: frozenset[str]) -> None:
        """A run's new state becomes what searches see: ``ids`` are visible, chunks under ``roots`` filtered.

        The replaced chunks are deleted when this returns: the searches that still
        read the old state may finish first (for up to ``_READERS_GRACE_S``).
        """
        still = self.snapshot.commit(ids, roots, _READERS_GRACE_S)
        if still:
            log.warning(
                "index %r: %d searches still read the state before this update after %g s; deleting the "
                "chunks it replaced now, so those searches may miss some results",
                self.name,
                still,
                _READERS_GRACE_S,
            )

    def committed(self) -> State:
        """The last committed state as the manifest records it (none yet: no chunk is visible)."""
        m = Manifest.load(self.manifest_path)
        return m.visible() if m is not None else (frozenset(), None)

    def begin_run(self) -> None:
        """This process's update or removal starts: searches see the last commit until it commits."""
        self.progress = (0, None)
        self.snapshot.begin(self.committed())

    def end_run(self) -> None:
        """What a failed run wrote stays invisible (the next run deletes it); searches follow the store again."""
        self.progress = None
        self.snapshot.end()

    def follow_committed(self, manifest: ManifestState, transactional: bool) -> None:
        """Outside this process's runs, searches see the last commit of any process: all a ``transactional``
        store shows, or, for a store without transactions, the ids ``manifest`` records as committed."""
        if transactional:
            self.snapshot.follow("store", lambda: None)
            return
        self.snapshot.follow(("manifest", manifest.stamp), lambda: manifest.committed)

    def manifest_state(self) -> ManifestState:
        """The manifest file's (inode, mtime, size) (None: there is none), whether it records a first build
        that has not committed, and its committed state; the file is parsed again only when its stamp changes."""
        try:
            st = self.manifest_path.stat()
        except OSError:
            self.seen_roots, self.seen_shared, self.seen_copies = [], frozenset(), Copies(None)
            return ManifestState(None, False, (frozenset(), None))
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        seen = self._seen_manifest
        if seen is None or seen.stamp != stamp:
            m = Manifest.load(self.manifest_path)
            committed = m.visible() if m is not None else (frozenset(), None)
            partial = (m.partial[0], m.partial[1]) if m is not None and m.partial else None
            seen = self._seen_manifest = ManifestState(stamp, m is not None and m.building, committed, partial)
            self.seen_roots = list(m.roots) if m is not None else []
            names = Counter(f.rel_path for f in m.files.values()) if m is not None else Counter()
            self.seen_shared = frozenset(name for name, n in names.items() if n > 1)
            self.seen_copies = Copies(m)
        return seen

    def building(self) -> IndexBuildingError | None:
        """How far the index's first build is (this process's or another's), as the error a search of it
        gets; None once the index holds a committed state (or no build has started). Reads the manifest only."""
        manifest = self.manifest_state()
        first = manifest.building or (manifest.stamp is None and self.progress is not None)
        return self.building_error() if first else None

    def building_error(self) -> IndexBuildingError:
        """The error a search of an index with nothing committed yet gets: how far its first build is."""
        progress = self.progress
        running_here = progress is not None
        if progress is None:
            m = Manifest.load(self.manifest_path)
            progress = (m.progress[0], m.progress[1]) if m is not None and m.progress else (0, None)
        done, total = progress
        where = f"{done} of {total} files done" if total is not None else "scanning its folders"
        msg = f"index {self.name!r} is being built ({where}): search again when it is done"
        if not running_here:
            msg += " (if no `mdrag index` or `mdrag serve` is running, its first build was stopped: run `mdrag index`)"
        return IndexBuildingError(msg, done, total)

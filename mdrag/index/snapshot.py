"""The committed state the searches of this process read, shared by its threads: chunk ids, in memory.

A running update writes chunks that stay invisible until it commits; then the
new state is visible all at once. A commit waits for the searches still reading
the state before it, so the chunks it replaces are not deleted under them; a run
waits, before it writes, for the searches that read with no filter.

It holds no file and knows no manifest: which state it holds, outside this
process's runs, is :class:`~mdrag.index.visibility.Visibility`'s to say
(:meth:`Snapshot.follow`): a transactional store needs no filter, since other
processes' runs reach it whole at their commit; a store without transactions is
read through the ids the manifest records as committed.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterator
from contextlib import contextmanager

from mdrag.retrieval.search import Visible

__all__ = ["Snapshot", "State"]

log = logging.getLogger(__name__)

#: A committed state: (chunk ids, the folders they account for; None: every folder), or None: no filter.
State = tuple[frozenset[str], frozenset[str] | None] | None

BEGIN_WAIT_S = 5.0  # a run waits at most this long for the searches that read with no filter


class Snapshot:
    """The committed state that searches read, shared by threads (all of it under one lock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # Committed chunk ids: searches return only these. None: no filter.
        self._ids: frozenset[str] | None = None
        # The folders those ids account for; chunks of other folders (written by
        # other indexers into the same collection) are not filtered. None: all.
        self._roots: frozenset[str] | None = None
        self._run = False  # a run of this process writes: it alone changes the state (begin .. end)
        self._source: Hashable = None  # what follow() last took the state from (None: nothing yet)
        self._hidden: frozenset[str] = frozenset()  # chunks written by a running update, not yet committed
        self._generation = 0  # bumped at each commit seen
        self._readers: Counter[int] = Counter()  # searches running, by the generation they read
        self._unfiltered = 0  # of those, the searches that read with no filter (every chunk in the store)

    @property
    def generation(self) -> int:
        """How many commits this snapshot has seen (its own, and those it followed): what a cache of the
        committed content is keyed by."""
        with self._cond:
            return self._generation

    @property
    def committed(self) -> frozenset[str] | None:
        """The ids searches may return now (None: every chunk)."""
        with self._cond:
            return self._ids

    def _set(self, state: State) -> bool:
        """Take ``state``; whether it changed."""
        ids, roots = state if state is not None else (None, None)
        if (ids, roots) == (self._ids, self._roots):
            return False
        self._ids, self._roots = ids, roots
        return True

    def follow(self, source: Hashable, read: Callable[[], State]) -> None:
        """Outside this process's runs: take the committed state from ``read()`` when ``source`` (a
        stamp of where ``read`` looks) differs from the last one. ``read`` runs unlocked; a run that
        begins meanwhile wins over what it read."""
        with self._cond:
            if self._run or (source is not None and source == self._source):
                return
        state = read()
        with self._cond:
            if not self._run:
                if self._set(state) and state is not None:
                    self._generation += 1  # another process committed
                self._source = source

    def begin(self, state: State, wait_s: float = BEGIN_WAIT_S) -> None:
        """A run of this process starts writing: searches see ``state`` (the last commit) until it commits.

        The searches already reading with no filter would see what the run writes: it waits up to
        ``wait_s`` for them to end (searches that start now read ``state``)."""
        with self._cond:
            self._run = True
            self._hidden = frozenset()
            self._set(state)
            if not self._cond.wait_for(lambda: self._unfiltered == 0, timeout=wait_s):
                log.warning("%d searches still read the index as the update starts writing", self._unfiltered)

    def written(self, ids: Collection[str]) -> None:
        """A running update wrote these chunks: those not visible are hidden from searches until it commits."""
        with self._cond:
            visible = self._ids
            new = [i for i in ids if visible is None or i not in visible]
            if new:
                self._hidden = self._hidden.union(new)

    def end(self) -> None:
        """The run is over (committed or not: what it did not commit stays invisible, and the next run
        deletes it, and searches no longer hide it); searches follow the store's or the manifest's state again."""
        with self._cond:
            self._run = False
            self._hidden = frozenset()
            self._source = None

    def commit(self, ids: set[str], roots: frozenset[str], grace_s: float) -> int:
        """``ids`` become what searches see; chunks under ``roots`` (and the folders before) are filtered.

        Waits up to ``grace_s`` for the searches that still read the state before
        (the caller deletes the chunks it replaces next); returns how many of them
        were still reading when it gave up, else 0.
        """
        with self._cond:
            old = self._generation
            self._ids, self._hidden = frozenset(ids), frozenset()
            self._roots = roots | (self._roots or frozenset())
            self._generation += 1
            if self._cond.wait_for(lambda: self._readers[old] == 0, timeout=grace_s):
                return 0
            return self._readers[old]

    @contextmanager
    def reading(self) -> Iterator[Visible]:
        """The state a search reads, held until the block ends (a commit waits for it)."""
        with self._cond:
            generation = self._generation
            visible = Visible(self._ids, self._roots, self._hidden)
            self._readers[generation] += 1
            self._unfiltered += visible.ids is None
        try:
            yield visible
        finally:
            with self._cond:
                self._unfiltered -= visible.ids is None
                self._readers[generation] -= 1
                if not self._readers[generation]:
                    del self._readers[generation]
                self._cond.notify_all()

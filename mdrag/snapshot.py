"""What the searches of one index see while an update runs beside them: the committed chunk ids.

A running update writes chunks that stay invisible until it commits; then the
new state is visible all at once. A commit waits for the searches still reading
the state before it, so the chunks it replaces are not deleted under them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mdrag.search import Visible

__all__ = ["Snapshot"]


class Snapshot:
    """The committed state that searches read, shared by threads (all of it under one lock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # Committed chunk ids: searches return only these. None: no filter (nothing committed yet).
        self._ids: frozenset[str] | None = None
        # The folders those ids account for; chunks of other folders (written by
        # other indexers into the same collection) are not filtered. None: all.
        self._roots: frozenset[str] | None = None
        self._loaded = False  # the two above hold the manifest's state or a commit's
        self._pending = 0  # chunks written by a running update and not yet committed
        self._generation = 0  # bumped at each commit
        self._readers: Counter[int] = Counter()  # searches running, by the generation they read

    @property
    def generation(self) -> int:
        """How many commits this snapshot has seen: what a cache of the committed state is keyed by."""
        with self._cond:
            return self._generation

    def load(self, read: Callable[[], tuple[frozenset[str], frozenset[str]] | None]) -> None:
        """Take the committed (ids, roots) from ``read()`` (the manifest), unless a commit set them already.

        ``read`` runs unlocked: a commit meanwhile wins over what it read. None:
        nothing committed yet (no filter), and ``read`` is called again next time.
        """
        with self._cond:
            if self._loaded:
                return
        state = read()
        if state is None:
            return
        with self._cond:
            if not self._loaded:
                self._ids, self._roots = state
                self._loaded = True

    def written(self, n: int) -> None:
        """A running update wrote ``n`` chunks that are not visible yet (searches fetch that many more)."""
        with self._cond:
            self._pending += n

    def abandon(self) -> None:
        """The update ended without committing what it wrote: it stays invisible (the next run deletes it)."""
        with self._cond:
            self._pending = 0

    def commit(self, ids: set[str], roots: frozenset[str], grace_s: float) -> int:
        """``ids`` become what searches see; chunks under ``roots`` (and the folders before) are filtered.

        Waits up to ``grace_s`` for the searches that still read the state before
        (the caller deletes the chunks it replaces next); returns how many of them
        were still reading when it gave up, else 0.
        """
        with self._cond:
            old = self._generation
            self._ids, self._pending = frozenset(ids), 0
            self._roots = roots | (self._roots or frozenset())
            self._loaded = True
            self._generation += 1
            if self._cond.wait_for(lambda: self._readers[old] == 0, timeout=grace_s):
                return 0
            return self._readers[old]

    @contextmanager
    def reading(self) -> Iterator[Visible]:
        """The state a search reads, held until the block ends (a commit waits for it)."""
        with self._cond:
            generation = self._generation
            visible = Visible(self._ids, self._roots, self._pending)
            self._readers[generation] += 1
        try:
            yield visible
        finally:
            with self._cond:
                self._readers[generation] -= 1
                if not self._readers[generation]:
                    del self._readers[generation]
                self._cond.notify_all()

"""A search's candidates, best first, read from the store only as far as the search looks.

A store ranks with what it holds in memory (:class:`~mdrag.store.base.Ranked`:
each row's key, cosine and ranking score); reading a row's fields and making
its :class:`~mdrag.store.base.Hit` costs more than ranking it, and a search keeps
``k`` of several times as many candidates. :class:`Candidates` reads the rows a
batch at a time, as a search walks the list, and each batch twice the last.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from mdrag.store.base import Hit, Ranked

__all__ = ["Candidates"]


class Candidates:
    """Candidates from one or two ranked lists in their final order: the ``n``-th is row ``at[n]`` of list
    ``lists[source[n]]``, with its cosine ``scores[n]``, ``rank_scores[n]`` and its 1-based ranks in the dense
    and BM25 lists (0: not in it). Iterating reads the rows (a row deleted since it was ranked is left out);
    a second walk reads only past where the first stopped."""

    def __init__(
        self,
        lists: Sequence[Ranked],
        source: np.ndarray,
        at: np.ndarray,
        scores: np.ndarray,
        rank_scores: np.ndarray,
        ranks: tuple[np.ndarray, np.ndarray],
        batch: int,
    ) -> None:
        self.lists = lists
        self.source, self.at, self.scores, self.rank_scores = source, at, scores, rank_scores
        self.dense_ranks, self.bm25_ranks = ranks
        self._batch = max(1, batch)
        self._read: list[Hit | None] = []  # the rows read so far, in order (None: deleted)

    @classmethod
    def of(cls, ranked: Ranked, dense: bool, batch: int) -> Candidates:
        """The rows of one list in its order, each with its rank in it: a dense list's, or a BM25 list's."""
        n = len(ranked)
        rank, none = np.arange(1, n + 1), np.zeros(n, dtype=np.int64)
        ranks = (rank, none) if dense else (none, rank)
        return cls([ranked], none, np.arange(n), ranked.scores, ranked.rank_scores, ranks, batch)

    def only(self, keep: np.ndarray) -> Candidates:
        """These candidates but those where ``keep`` (a mask, in this order) is False, none read yet."""
        ranks = (self.dense_ranks[keep], self.bm25_ranks[keep])
        return Candidates(
            self.lists, self.source[keep], self.at[keep], self.scores[keep], self.rank_scores[keep], ranks, self._batch
        )

    def __len__(self) -> int:
        return len(self.at)

    def __iter__(self) -> Iterator[Hit]:
        i = 0
        while i < len(self.at):
            if i == len(self._read):
                self._more()
            row = self._read[i]
            i += 1
            if row is not None:
                yield row

    def _more(self) -> None:
        """Read the next batch of rows, twice as many as were read before (``batch`` at first)."""
        start = len(self._read)
        end = min(len(self.at), start + max(self._batch, start))
        got: dict[int, Hit | None] = {}
        span = np.arange(start, end)
        for s, ranked in enumerate(self.lists):
            pick = span[self.source[start:end] == s]
            if not len(pick):
                continue
            rows = ranked.read(
                self.at[pick].tolist(),
                self.rank_scores[pick].tolist(),
                [int(r) or None for r in self.dense_ranks[pick]],
                [int(r) or None for r in self.bm25_ranks[pick]],
            )
            got.update(zip(pick.tolist(), rows))
        self._read.extend(got[i] for i in range(start, end))

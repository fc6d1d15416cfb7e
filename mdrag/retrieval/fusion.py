"""Hybrid ranking: one list from a query's dense (cosine) and BM25 candidate lists.

The store returns each list, best first (:class:`~mdrag.store.base.Ranked`,
its rows not read; or :class:`~mdrag.store.base.Hit` values, ``rank_score``:
the list's own score); the fused list keeps every row once (as the first list
that holds it returned it), with its 1-based ``dense_rank`` and ``bm25_rank``
(None where a list did not return it), and ``rank_score`` set to the fused
score. Fusion reads keys and scores only (arrays); the rows are read as the
search walks the fused list (:class:`~mdrag.retrieval.candidates.Candidates`).

"weighted" adds the two scores, each min-max normalised over its own list, in
the proportion ``dense_weight``; a row missing from a list counts that list's
lowest score. It keeps a clear first place in one list near the top when the
other list ranks it low, where reciprocal-rank fusion ("rrf", constant 60),
which sees ranks only, puts rows that are middling in both above it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mdrag.retrieval.candidates import Candidates
from mdrag.settings import DEFAULTS
from mdrag.store.base import Hit, Ranked

__all__ = ["FUSIONS", "RRF_K", "fuse", "fused"]

FUSIONS = ("weighted", "rrf")
RRF_K = 60  # the usual constant of reciprocal-rank fusion


def fuse(
    dense: Sequence[Hit],
    bm25: Sequence[Hit],
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
) -> list[Hit]:
    """The hits of both lists, best first by ``method`` ("weighted" or "rrf")."""
    return list(fused(Ranked.of(dense), Ranked.of(bm25), method, dense_weight, batch=len(dense) + len(bm25)))


def fused(
    dense: Ranked,
    bm25: Ranked,
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
    batch: int = 10,
) -> Candidates:
    """The rows of both lists, best first by ``method`` ("weighted" or "rrf"), read ``batch`` at first."""
    if method not in FUSIONS:
        raise ValueError(f"unknown fusion {method!r}: use one of {', '.join(FUSIONS)}")
    nd, nb = len(dense), len(bm25)
    first = {key: i for i, key in enumerate(dense.keys)}
    # each BM25 row's place among the fused rows: its dense row's, or after the dense rows, in BM25 order
    in_dense = np.fromiter((first.get(key, -1) for key in bm25.keys), dtype=np.int64, count=nb)
    new = in_dense < 0
    slot = np.where(new, nd + np.cumsum(new) - 1, in_dense)
    n = nd + int(new.sum())
    dense_rank = np.zeros(n, dtype=np.int64)
    dense_rank[:nd] = np.arange(1, nd + 1)
    bm25_rank = np.zeros(n, dtype=np.int64)
    bm25_rank[slot] = np.arange(1, nb + 1)
    if method == "rrf":
        score = np.zeros(n)
        for listed in (dense_rank, bm25_rank):
            score = score + np.where(listed > 0, 1 / (RRF_K + np.maximum(listed, 1)), 0.0)
    else:
        d, b = np.zeros(n), np.zeros(n)
        d[:nd] = _normalised(dense.rank_scores)
        b[slot] = _normalised(bm25.rank_scores)
        score = dense_weight * d + (1 - dense_weight) * b
    source = np.zeros(n, dtype=np.int64)
    source[nd:] = 1
    at = np.arange(n)
    at[nd:] = np.flatnonzero(new)
    cosine = np.concatenate([dense.scores, bm25.scores[new]])
    order = np.argsort(-score, kind="stable")
    ranks = (dense_rank[order], bm25_rank[order])
    return Candidates([dense, bm25], source[order], at[order], cosine[order], score[order], ranks, batch)


def _normalised(scores: np.ndarray) -> np.ndarray:
    """Each score scaled to 0..1 over its list (lowest 0, highest 1; all 1 when equal)."""
    if not len(scores):
        return scores
    low, high = scores.min(), scores.max()
    span = high - low
    return (scores - low) / span if span else np.ones(len(scores))

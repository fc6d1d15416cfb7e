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
which sees ranks only, puts rows that are middling in both above it. A search
of a short query fuses by rank (:func:`fusion_for`).

Only each list's first ``pool`` rows are fused (their ranks, and the span that
normalises their scores); rows past them count as missing from that list, and
rows past the pool of both lists follow the fused ones, by their best rank. A
search asks for a fixed pool, whatever its k: a longer list does not move the
lowest score that normalisation reads, so the first results of any k agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mdrag.retrieval.candidates import Candidates
from mdrag.settings import DEFAULTS
from mdrag.store.base import Hit, Ranked

__all__ = ["FUSIONS", "POOL", "RRF_K", "SHORT_RRF_K", "SHORT_WORDS", "fuse", "fused", "fusion_for"]

FUSIONS = ("weighted", "rrf")
RRF_K = 60  # the usual constant of reciprocal-rank fusion
# Rows of each list that fusion ranks: what k 10 with collapse took before the pool was fixed (RESULTS.md,
# "Hybrid ranking that does not depend on k").
POOL = 120
# A query of at most SHORT_WORDS words names a term or an option: its cosines lie close together, and min-max
# normalisation stretches their small differences over the whole span, as far as BM25's clear ones. Weighted
# fusion ranks such a query by reciprocal rank, with this constant (RESULTS.md, "Hybrid that does not lose to
# its parts").
SHORT_WORDS = 3
SHORT_RRF_K = 10


def fusion_for(query: str, method: str) -> tuple[str, int]:
    """The fusion ``query`` gets, and its reciprocal-rank constant: ``method``, but "rrf" with
    :data:`SHORT_RRF_K` for a "weighted" search of at most :data:`SHORT_WORDS` words."""
    if method == "weighted" and len(query.split()) <= SHORT_WORDS:
        return "rrf", SHORT_RRF_K
    return method, RRF_K


def fuse(
    dense: Sequence[Hit],
    bm25: Sequence[Hit],
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
    pool: int = POOL,
) -> list[Hit]:
    """The hits of both lists, best first by ``method`` ("weighted" or "rrf") over each list's first ``pool``
    rows (see :func:`fused`)."""
    rows = fused(Ranked.of(dense), Ranked.of(bm25), method, dense_weight, len(dense) + len(bm25), pool)
    return list(rows)


def fused(
    dense: Ranked,
    bm25: Ranked,
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
    batch: int = 10,
    pool: int = POOL,
    rrf_k: int = RRF_K,
) -> Candidates:
    """The rows of both lists, best first by ``method`` ("weighted" or "rrf", its constant ``rrf_k``) over each
    list's first ``pool`` rows, read ``batch`` at first; ties, and the rows past both pools, by their best rank
    in either list (a dense row first)."""
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
            pooled = (listed > 0) & (listed <= pool)
            score = score + np.where(pooled, 1 / (rrf_k + np.maximum(listed, 1)), 0.0)
    else:
        d, b = np.zeros(n), np.zeros(n)
        d[: min(nd, pool)] = _normalised(dense.rank_scores[:pool])
        b[slot[:pool]] = _normalised(bm25.rank_scores[:pool])
        score = dense_weight * d + (1 - dense_weight) * b
    source = np.zeros(n, dtype=np.int64)
    source[nd:] = 1
    at = np.arange(n)
    at[nd:] = np.flatnonzero(new)
    cosine = np.concatenate([dense.scores, bm25.scores[new]])
    unlisted = n + 1  # a rank no list gives
    best = np.minimum(np.where(dense_rank > 0, dense_rank, unlisted), np.where(bm25_rank > 0, bm25_rank, unlisted))
    order = np.lexsort((source, best, -score))  # by score, then best rank, then a dense row first
    ranks = (dense_rank[order], bm25_rank[order])
    return Candidates([dense, bm25], source[order], at[order], cosine[order], score[order], ranks, batch)


def _normalised(scores: np.ndarray) -> np.ndarray:
    """Each score scaled to 0..1 over its list (lowest 0, highest 1; all 1 when equal)."""
    if not len(scores):
        return scores
    low, high = scores.min(), scores.max()
    span = high - low
    return (scores - low) / span if span else np.ones(len(scores))

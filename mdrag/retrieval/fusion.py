"""Hybrid ranking: one list from a query's dense (cosine) and BM25 candidate lists.

The store returns each list, best first, as :class:`~mdrag.store.base.Hit`
values (``rank_score``: the list's own score); the fused list keeps every hit
once (as the first list that holds it returned it), with its 1-based
``dense_rank`` and ``bm25_rank`` (None where a list did not return it), and
``rank_score`` set to the fused score.

"weighted" adds the two scores, each min-max normalised over its own list, in
the proportion ``dense_weight``; a row missing from a list counts that list's
lowest score. It keeps a clear first place in one list near the top when the
other list ranks it low, where reciprocal-rank fusion ("rrf", constant 60),
which sees ranks only, puts rows that are middling in both above it.

Only each list's first ``pool`` rows are fused (their ranks, and the span that
normalises their scores); rows past them count as missing from that list, and
rows past the pool of both lists follow the fused ones, by their best rank. A
search asks for a fixed pool, whatever its k: a longer list does not move the
lowest score that normalisation reads, so the first results of any k agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mdrag.settings import DEFAULTS
from mdrag.store.base import Hit

__all__ = ["FUSIONS", "POOL", "RRF_K", "fuse"]

FUSIONS = ("weighted", "rrf")
RRF_K = 60  # the usual constant of reciprocal-rank fusion
# Rows of each list that fusion ranks: what k 10 with collapse took before the pool was fixed (RESULTS.md,
# "Hybrid ranking that does not depend on k").
POOL = 120


def fuse(
    dense: Sequence[Hit],
    bm25: Sequence[Hit],
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
    pool: int = POOL,
) -> list[Hit]:
    """The hits of both lists, best first by ``method`` ("weighted" or "rrf") over each list's first ``pool``
    rows; ties, and the rows past both pools, by their best rank in either list, then id."""
    rows: dict[str, Hit] = {}
    for rank, row in enumerate(dense, 1):
        rows[row.id] = replace(rows.get(row.id) or row, dense_rank=rank, bm25_rank=None)
    for rank, row in enumerate(bm25, 1):
        rows[row.id] = replace(rows.get(row.id) or replace(row, dense_rank=None), bm25_rank=rank)
    if method == "rrf":
        for key, row in rows.items():
            score = sum(1 / (RRF_K + r) for r in (row.dense_rank, row.bm25_rank) if r is not None and r <= pool)
            rows[key] = replace(row, rank_score=score)
    elif method == "weighted":
        d, b = _normalised(dense[:pool]), _normalised(bm25[:pool])
        for key, row in rows.items():
            rows[key] = replace(row, rank_score=dense_weight * d.get(key, 0.0) + (1 - dense_weight) * b.get(key, 0.0))
    else:
        raise ValueError(f"unknown fusion {method!r}: use one of {', '.join(FUSIONS)}")
    return sorted(rows.values(), key=lambda r: (-r.rank_score, _best_rank(r), r.id))


def _best_rank(row: Hit) -> int:
    """A fused row's best rank in either list (each row is in at least one)."""
    return min(r for r in (row.dense_rank, row.bm25_rank) if r is not None)


def _normalised(ranked: Sequence[Hit]) -> dict[str, float]:
    """Each hit's score scaled to 0..1 over its list (lowest 0, highest 1; all 1 when equal)."""
    if not ranked:
        return {}
    scores = [float(r.rank_score) for r in ranked]
    low, high = min(scores), max(scores)
    span = high - low
    return {r.id: (s - low) / span if span else 1.0 for r, s in zip(ranked, scores)}

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mdrag.settings import DEFAULTS
from mdrag.store.base import Hit

__all__ = ["FUSIONS", "RRF_K", "fuse"]

FUSIONS = ("weighted", "rrf")
RRF_K = 60  # the usual constant of reciprocal-rank fusion


def fuse(
    dense: Sequence[Hit],
    bm25: Sequence[Hit],
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
) -> list[Hit]:
    """The hits of both lists, best first by ``method`` ("weighted" or "rrf")."""
    rows: dict[str, Hit] = {}
    for rank, row in enumerate(dense, 1):
        rows[row.id] = replace(rows.get(row.id) or row, dense_rank=rank, bm25_rank=None)
    for rank, row in enumerate(bm25, 1):
        rows[row.id] = replace(rows.get(row.id) or replace(row, dense_rank=None), bm25_rank=rank)
    if method == "rrf":
        for key, row in rows.items():
            score = sum(1 / (RRF_K + r) for r in (row.dense_rank, row.bm25_rank) if r is not None)
            rows[key] = replace(row, rank_score=score)
    elif method == "weighted":
        d, b = _normalised(dense), _normalised(bm25)
        for key, row in rows.items():
            rows[key] = replace(row, rank_score=dense_weight * d.get(key, 0.0) + (1 - dense_weight) * b.get(key, 0.0))
    else:
        raise ValueError(f"unknown fusion {method!r}: use one of {', '.join(FUSIONS)}")
    return sorted(rows.values(), key=lambda r: -r.rank_score)


def _normalised(ranked: Sequence[Hit]) -> dict[str, float]:
    """Each hit's score scaled to 0..1 over its list (lowest 0, highest 1; all 1 when equal)."""
    if not ranked:
        return {}
    scores = [float(r.rank_score) for r in ranked]
    low, high = min(scores), max(scores)
    span = high - low
    return {r.id: (s - low) / span if span else 1.0 for r, s in zip(ranked, scores)}

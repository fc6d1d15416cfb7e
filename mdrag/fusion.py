"""Hybrid ranking: one list from a query's dense (cosine) and BM25 candidate lists.

The store returns each list, best first, as row dicts (``id``, ``rank_score``:
the list's own score); the fused list keeps every row once, with its 1-based
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
from typing import Any

from mdrag.settings import DEFAULTS

__all__ = ["FUSIONS", "RRF_K", "fuse"]

FUSIONS = ("weighted", "rrf")
RRF_K = 60  # the usual constant of reciprocal-rank fusion


def fuse(
    dense: Sequence[dict[str, Any]],
    bm25: Sequence[dict[str, Any]],
    method: str = DEFAULTS["search.fusion"][1],
    dense_weight: float = DEFAULTS["search.dense_weight"][1],
) -> list[dict[str, Any]]:
    """The rows of both lists, best first by ``method`` ("weighted" or "rrf")."""
    rows: dict[Any, dict[str, Any]] = {}
    for name, ranked in (("dense", dense), ("bm25", bm25)):
        for rank, row in enumerate(ranked, 1):
            kept = rows.setdefault(row["id"], {**row, "dense_rank": None, "bm25_rank": None})
            kept[f"{name}_rank"] = rank
    if method == "rrf":
        for row in rows.values():
            row["rank_score"] = sum(1 / (RRF_K + r) for r in (row["dense_rank"], row["bm25_rank"]) if r is not None)
    elif method == "weighted":
        d, b = _normalised(dense), _normalised(bm25)
        for key, row in rows.items():
            row["rank_score"] = dense_weight * d.get(key, 0.0) + (1 - dense_weight) * b.get(key, 0.0)
    else:
        raise ValueError(f"unknown fusion {method!r}: use one of {', '.join(FUSIONS)}")
    return sorted(rows.values(), key=lambda r: -r["rank_score"])


def _normalised(ranked: Sequence[dict[str, Any]]) -> dict[Any, float]:
    """Each row's score scaled to 0..1 over its list (lowest 0, highest 1; all 1 when equal)."""
    if not ranked:
        return {}
    scores = [float(r["rank_score"]) for r in ranked]
    low, high = min(scores), max(scores)
    span = high - low
    return {r["id"]: (s - low) / span if span else 1.0 for r, s in zip(ranked, scores)}

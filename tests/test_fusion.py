"""Hybrid fusion (mdrag.fusion): ranks kept per list, and a strong first place in one list is not buried."""

from __future__ import annotations

import pytest

from mdrag.fusion import RRF_K, fuse


def _list(prefix: str, scores: list[float]) -> list[dict[str, object]]:
    return [{"id": f"{prefix}{i}", "rank_score": s, "score": 0.5} for i, s in enumerate(scores)]


def test_each_row_keeps_its_rank_in_each_list() -> None:
    dense = _list("d", [0.9, 0.8, 0.7])
    bm25 = [dense[2], *_list("b", [12.0, 9.0])]
    fused = {r["id"]: r for r in fuse(dense, bm25, "rrf")}
    assert (fused["d2"]["dense_rank"], fused["d2"]["bm25_rank"]) == (3, 1)
    assert (fused["d0"]["dense_rank"], fused["d0"]["bm25_rank"]) == (1, None)
    assert (fused["b1"]["dense_rank"], fused["b1"]["bm25_rank"]) == (None, 3)
    assert fused["d2"]["rank_score"] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(dense, bm25, "sum")


def test_a_clear_first_place_in_one_list_stays_in_the_top_three() -> None:
    """The otel miss: dense ranks the answer's two chunks 1st and 2nd by a clear margin, BM25 30th and 17th;
    chunks middling in both lists must not push them down."""
    dense_scores = [0.75, 0.73] + [0.56 - 0.002 * i for i in range(38)]
    dense = _list("x", dense_scores)
    gold = dense[:2]
    middling = dense[2:12]  # dense ranks 3..12
    bm25 = _list("b", [20.0 - 0.3 * i for i in range(40)])
    for i, row in [*enumerate(middling, 4), (29, gold[0]), (16, gold[1])]:  # BM25 ranks 5..14, 30 and 17
        bm25[i] = {**row, "rank_score": bm25[i]["rank_score"]}
    top3 = [r["id"] for r in fuse(dense, bm25)[:3]]  # the default fusion
    assert gold[0]["id"] in top3 and gold[1]["id"] in top3, top3
    buried = [r["id"] for r in fuse(dense, bm25, "rrf")]
    assert buried.index(gold[0]["id"]) > 3, "reciprocal ranks alone put middling rows above it"

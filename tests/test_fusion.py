"""Hybrid fusion (mdrag.retrieval.fusion): ranks kept per list, and a strong first place in one list is not buried."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.index import Index
from mdrag.retrieval.fusion import POOL, RRF_K, SHORT_RRF_K, fuse, fused, fusion_for
from mdrag.store.base import Hit, Ranked


def _list(prefix: str, scores: list[float]) -> list[Hit]:
    return [
        Hit(f"{prefix}{i}", "", "", "", "", "", [], 0, 0, 0, 0, 0, "", {}, score=0.5, rank_score=s)
        for i, s in enumerate(scores)
    ]


def test_each_row_keeps_its_rank_in_each_list() -> None:
    dense = _list("d", [0.9, 0.8, 0.7])
    bm25 = [dense[2], *_list("b", [12.0, 9.0])]
    fused = {r.id: r for r in fuse(dense, bm25, "rrf")}
    assert (fused["d2"].dense_rank, fused["d2"].bm25_rank) == (3, 1)
    assert (fused["d0"].dense_rank, fused["d0"].bm25_rank) == (1, None)
    assert (fused["b1"].dense_rank, fused["b1"].bm25_rank) == (None, 3)
    assert fused["d2"].rank_score == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(dense, bm25, "sum")


def test_a_short_query_is_fused_by_rank_with_a_small_constant() -> None:
    """A query of up to three words names a term: weighted fusion stretched its close cosines as far as BM25's
    clear scores, and the page BM25 put first fell behind broader pages the dense list preferred by hundredths."""
    assert fusion_for("KEYTIMEOUT", "weighted") == ("rrf", SHORT_RRF_K)
    assert fusion_for("extended glob  qualifiers", "weighted") == ("rrf", SHORT_RRF_K)
    assert fusion_for("why does my glob pattern fail", "weighted") == ("weighted", RRF_K)
    assert fusion_for("KEYTIMEOUT", "rrf") == ("rrf", RRF_K)  # a fusion the user chose stays as it is
    # dense: the term's page 6th; BM25: first. With the constant 10 it leads rows that are high in one list only
    dense = _list("d", [0.41, 0.409, 0.408, 0.407, 0.406, 0.39, 0.2])
    bm25 = [replace(dense[5], rank_score=14.0), *_list("b", [3.0, 2.9, 2.8])]
    ranked = fused(Ranked.of(dense), Ranked.of(bm25), "rrf", 0.5, 20, POOL, SHORT_RRF_K)
    assert [r.id for r in ranked][:2] == ["d5", "d0"]
    assert ranked.rank_scores[0] == pytest.approx(1 / (SHORT_RRF_K + 6) + 1 / (SHORT_RRF_K + 1))


def test_a_clear_first_place_in_one_list_stays_in_the_top_three() -> None:
    """The otel miss: dense ranks the answer's two chunks 1st and 2nd by a clear margin, BM25 30th and 17th;
    chunks middling in both lists must not push them down."""
    dense_scores = [0.75, 0.73] + [0.56 - 0.002 * i for i in range(38)]
    dense = _list("x", dense_scores)
    gold = dense[:2]
    middling = dense[2:12]  # dense ranks 3..12
    bm25 = _list("b", [20.0 - 0.3 * i for i in range(40)])
    for i, row in [*enumerate(middling, 4), (29, gold[0]), (16, gold[1])]:  # BM25 ranks 5..14, 30 and 17
        bm25[i] = replace(row, rank_score=bm25[i].rank_score)
    top3 = [r.id for r in fuse(dense, bm25)[:3]]  # the default fusion
    assert gold[0].id in top3 and gold[1].id in top3, top3
    buried = [r.id for r in fuse(dense, bm25, "rrf")]
    assert buried.index(gold[0].id) > 3, "reciprocal ranks alone put middling rows above it"


@pytest.mark.parametrize("method", ["weighted", "rrf"])
def test_a_longer_list_does_not_change_the_first_fused_rows(method: str) -> None:
    """A search with a larger k asks each list for more rows: the lowest score that normalises a list, and the
    rows past the first places of one list that the other ranks high, must not move the fused first rows."""
    dense = _list("d", [0.9 - 0.003 * i for i in range(300)])
    bm25 = _list("b", [30.0 - 0.02 * i for i in range(300)])
    bm25[3] = replace(dense[POOL + 50], rank_score=bm25[3].rank_score)  # dense ranks it past the pool
    bm25[200] = replace(dense[1], rank_score=bm25[200].rank_score)  # and BM25 ranks this one past it
    bm25[0] = replace(bm25[0], rank_score=60.0)  # a clear first place: more span once the list is longer
    short = fuse(dense[:POOL], bm25[:POOL], method)
    for depth in (POOL + 10, 2 * POOL, 300):
        long = fuse(dense[:depth], bm25[:depth], method)
        assert [r.id for r in long[: len(short)]] == [r.id for r in short], (method, depth)
        assert [r.rank_score for r in long[:20]] == [r.rank_score for r in short[:20]]
    tail = fuse(dense, bm25, method)[len(short) :]
    assert all(r.rank_score == 0 for r in tail) and len(short) + len(tail) == 300 + 298  # each row once


@pytest.mark.slow
def test_the_otel_java_agent_answer_dense_ranks_first_stays_in_the_top_three(
    shared_data: Path, minilm: Embedder
) -> None:
    """Real otel docs: the section that answers is the dense list's clear first and BM25's 40th or so;
    reciprocal-rank fusion (the old default, forced here) drops it below sections middling in both."""
    java = shared_data / "markdown_otel_docs" / "content" / "en" / "docs" / "zero-code" / "java"
    if not java.is_dir():
        pytest.skip(f"the otel docs are not in {java} (see shared/data/README.md)")
    question = "the agent slows my app down, how to make it cheaper"
    gold = ("agent/performance.md", "Guidelines to reduce agent overhead")

    def places(fusion: str | None) -> tuple[int | None, list[tuple[str, str]]]:
        # the sections' ranking itself: each takes a place (search.per_page 0)
        overrides = {"index": name, "search.per_page": 0} | ({} if fusion is None else {"search.fusion": fusion})
        with Index(load_config(overrides), embedder=minilm) as idx:
            results = idx.search(question)
        top = [(r.rel_path, (r.heading_path or [""])[-1]) for r in results]
        hit = next((r for r in results if (r.rel_path, (r.heading_path or [""])[-1]) == gold), None)
        assert hit is not None and hit.dense_rank == 1 and (hit.bm25_rank or 999) > 20, top
        return top.index(gold) + 1, top

    name = "otel_java"  # each test has its own mdrag home
    with Index(load_config({"index": name}), embedder=minilm) as idx:
        idx.update([java])
    rank, top = places(None)  # the default settings (weighted fusion)
    assert rank <= 3, top
    rank, top = places("rrf")
    assert rank > 3, top

"""A warm search reads few rows: hybrid fusion works on keys and scores, and the FAISS store reads the fields of
only the rows the search looks at; BM25's one-segment merge scores as its segments did. The results stay those
of fusing whole rows (the lists fused as hits, compared field by field)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from mdrag.config import load_config
from mdrag.retrieval.fusion import RRF_K, fused
from mdrag.retrieval.search import SearchOptions, search
from mdrag.store.base import Hit, Ranked
from mdrag.store.bm25 import Bm25
from mdrag.store.faiss import FaissStore
from mdrag.store.faiss import rows as sqlite_rows
from tests.test_store_contract import IDENTITY, make_chunks, vectors


def _hits(prefix: str, scores: list[float], cosines: list[float]) -> list[Hit]:
    return [
        Hit(f"{prefix}{i}", "", "", "", "", "", [], 0, 0, 0, 0, 0, "", {}, score=c, rank_score=s)
        for i, (s, c) in enumerate(zip(scores, cosines))
    ]


def _fused_as_rows(dense: list[Hit], bm25: list[Hit], method: str, weight: float) -> list[Hit]:
    """The reference: each row once (as the first list returned it), ranks set, sorted by the fused score."""
    rows: dict[str, Hit] = {}
    for rank, row in enumerate(dense, 1):
        rows[row.id] = replace(rows.get(row.id) or row, dense_rank=rank, bm25_rank=None)
    for rank, row in enumerate(bm25, 1):
        rows[row.id] = replace(rows.get(row.id) or replace(row, dense_rank=None), bm25_rank=rank)

    def norm(hits: list[Hit]) -> dict[str, float]:
        s = [float(h.rank_score) for h in hits]
        low, span = min(s), max(s) - min(s)
        return {h.id: (v - low) / span if span else 1.0 for h, v in zip(hits, s)}

    d, b = norm(dense), norm(bm25)
    for key, row in rows.items():
        if method == "rrf":
            score = sum(1 / (RRF_K + r) for r in (row.dense_rank, row.bm25_rank) if r is not None)
        else:
            score = weight * d.get(key, 0.0) + (1 - weight) * b.get(key, 0.0)
        rows[key] = replace(row, rank_score=score)
    return sorted(rows.values(), key=lambda r: -r.rank_score)


@pytest.mark.parametrize("method", ["weighted", "rrf"])
def test_fusing_keys_and_scores_gives_the_rows_fusing_whole_rows_gives(method: str) -> None:
    rng = np.random.default_rng(7)
    for trial in range(30):
        ids = [f"c{i}" for i in range(60)]
        dense_ids = list(rng.choice(ids, 30, replace=False))
        bm25_ids = list(rng.choice(ids, 30, replace=False))
        ties = trial % 3 == 0  # equal scores: the order must be the stable one
        dense = _hits("", sorted(rng.integers(0, 5, 30) / 4 if ties else rng.random(30), reverse=True), rng.random(30))
        dense = [replace(h, id=i) for h, i in zip(dense, dense_ids)]
        bm25 = _hits("", sorted(rng.random(30) * 20, reverse=True), rng.random(30))
        bm25 = [replace(h, id=i) for h, i in zip(bm25, bm25_ids)]
        got = list(fused(Ranked.of(dense), Ranked.of(bm25), method, 0.7, batch=3))
        assert got == _fused_as_rows(dense, bm25, method, 0.7)


def _store(n: int) -> FaissStore:
    store = FaissStore.from_config(load_config(), "reads", IDENTITY, None)
    store.open()
    chunks = [replace(c, content_hash=hashlib.sha256(c.embed_text.encode()).hexdigest()) for c in make_chunks(1, n)]
    store.upsert(chunks, vectors(1, n))
    store.end_run(set(), set(), whole=True)
    return store


class _Vector:
    """An embedder that is never asked: the search is given the query's vector."""

    def embed_query(self, text: str) -> np.ndarray:
        raise AssertionError("the vector was given")


def test_a_hybrid_search_reads_the_rows_it_keeps_not_every_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(200)
    read: list[int] = []
    real = sqlite_rows.RowCache.read

    def counting(self: sqlite_rows.RowCache, db: object, wanted: list[int], *rest: object) -> object:
        read.extend(wanted)
        return real(self, db, wanted, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite_rows.RowCache, "read", counting)
    query = vectors(2, 1)[0]
    options = SearchOptions(k=3, threshold=None, mode="hybrid", collapse="none", per_page=0)
    found = search(store, _Vector(), "chunk common word3", options, vector=query)  # type: ignore[arg-type]
    assert len(found) == 3
    # the two lists hold 60 candidates or more (30 each at least): only the first batch is read
    assert 3 <= len(read) <= 6, len(read)
    whole = store.search(query, 30, mode="dense")
    assert [r.chunk_id for r in search(store, _Vector(), "x", replace(options, mode="dense"), vector=query)] == [
        h.id for h in whole[:3]
    ]
    store.close()


def test_a_row_deleted_after_the_ranking_is_left_out_not_an_error() -> None:
    """A FAISS search ranks under the store's lock and reads its rows later: a row another thread deleted
    meanwhile (and that no search had read) is left out."""
    store = _store(40)
    query = vectors(2, 1)[0]
    ranked = store.ranked(query, 10, mode="dense")
    ((first,),) = sqlite_rows.ids_of(store.db, [ranked.keys[0]])  # not read (nor cached) by the search
    store.delete_ids([first])
    store.end_run(set(), set(), whole=False)
    rows = ranked.read([0, 1], ranked.rank_scores[:2].tolist(), [1, 2], [None, None])
    assert rows[0] is None and rows[1] is not None and rows[1].dense_rank == 2
    store.close()


def test_bm25_scores_the_same_once_its_segments_are_merged() -> None:
    words = ["alpha", "beta", "gamma", "delta", "config", "menu", "render", "hook", "taxonomy", "image"]
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(words, int(rng.integers(3, 40)))) for _ in range(400)]
    queries = [" ".join(rng.choice(words, 3)) for _ in range(40)]
    segmented, merged = Bm25(), Bm25()
    for b in (segmented, merged):
        for start in range(0, 400, 50):  # a search after each batch: a segment each, unless merged
            b.add(list(range(start, start + 50)), texts[start : start + 50])
            _search(b, "alpha", merge=b is merged)
        b.remove([3, 77, 250])
    assert len(segmented.segments) == 8 and len(merged.segments) == 1
    for q in queries:
        assert _search(merged, q, merge=True) == _search(segmented, q, merge=False)
    assert len(segmented.segments) == 8 and len(merged.segments) == 1


def _search(bm25: Bm25, query: str, merge: bool) -> list[tuple[int, float]]:
    """A search of ``bm25``: one that follows another search (merges its segments), or a first one (does not)."""
    bm25._searched = merge
    return bm25.search(query, 50, None)

"""Searches of the Milvus store (see :mod:`mdrag.store.milvus`): dense by cosine, BM25 by the text, and
how wide Milvus Lite walks its HNSW graph so that its lists match exact ones."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from mdrag.store.base import Filter, Hit
from mdrag.store.milvus import filters, tagsets
from mdrag.store.milvus.rows import FIELDS

# A filtered dense search ranks the matching chunks exactly when there are at most this many
# (Milvus Lite's HNSW index, searched with a filter, misses some of the best matches). The
# matches are read, at most this many plus one, rather than counted: Milvus Lite's count costs more.
_EXACT_ROWS = 512
_HNSW_EF = 64  # Milvus Lite's default HNSW search breadth
# Milvus Lite's HNSW walk for k results is this many times k wide (at least _HNSW_EF), where the FAISS
# store ranks exactly (below 20,000 chunks): Milvus Lite's own walk of 64 misses chunks of the exact top
# k, the more the deeper the list, and the stores' hybrid lists then differ; a walk of 16 x k makes them
# differ only where chunks have equal cosines, for a few percent of a search (RESULTS.md, "Figures that
# were in code comments"; benchmarks/store_parity.py).
_EF_PER_RESULT = 16


class Collection(Protocol):
    """What a search asks of the store: reads of its collection."""

    uri: str
    collection: str
    has_bm25: bool  # it has the BM25 sparse field
    prepare_text: Callable[[str], str] | None  # applied to BM25 queries (stemming), if set

    @property
    def client(self) -> Any: ...  # the connected MilvusClient

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...  # a client request, errors as StoreError

    def count_where(self, expr: str) -> int: ...  # rows passing ``expr`` ("" for all)

    def lite(self) -> bool: ...


def search(store: Collection, vector: np.ndarray, k: int, where: Filter | None, mode: str, text: str) -> list[Hit]:
    """The ``k`` best chunks passing ``where``, best first (:meth:`mdrag.store.milvus.MilvusStore.search`).

    Milvus Lite's HNSW walk is ``_EF_PER_RESULT`` times ``k`` wide, so that its
    dense lists match the exact ones (the FAISS store's, below 20,000 chunks)
    but for rare misses. A filter never costs recall: Milvus Lite's HNSW index,
    searched with a filter, skips the chunks that fail it during its walk of the
    graph and misses some of the best that pass when they are few. A filtered dense
    search therefore ranks the matching chunks exactly when there are at most
    ``_EXACT_ROWS``; past that, Milvus Lite's walk is widened in proportion to
    the share of chunks that may fail the filter (the walk then reaches several
    times more chunks than hold the ``k`` best that pass). BM25 search reads every
    posting list: exact.
    """
    if mode not in ("dense", "bm25"):
        raise ValueError(f"unknown store search mode {mode!r}: dense or bm25")
    if mode == "bm25" and not store.has_bm25:
        mode = "dense"
    if mode == "bm25" and store.prepare_text is not None:
        text = store.prepare_text(text)
    expr = tagsets.to_expr(store, where)
    params: dict[str, Any] = {"metric_type": "COSINE" if mode == "dense" else "BM25"}
    if mode == "dense" and expr:
        matching = store.call("query", store.collection, filter=expr, output_fields=["vector"], limit=_EXACT_ROWS + 1)
        if len(matching) <= _EXACT_ROWS:
            return _exact_dense(store, vector, k, matching)
        if store.lite():  # at least len(matching) pass: the share that fails is at most 1 - that / total
            total = store.count_where("")
            wide = min(total, max(_HNSW_EF, 4 * k) * math.ceil(total / len(matching)))
            params["params"] = {"ef": max(wide, _EF_PER_RESULT * k)}
    if mode == "dense" and "params" not in params and store.lite():
        params["params"] = {"ef": max(_HNSW_EF, _EF_PER_RESULT * k)}
    if mode == "dense":
        res = store.call(
            "search",
            store.collection,
            data=[vector.astype(np.float32).tolist()],
            limit=k,
            filter=expr,
            output_fields=FIELDS,
            search_params=params,
        )
    else:
        res = store.call(
            "search",
            store.collection,
            data=[text],
            anns_field="sparse",
            limit=k,
            filter=expr,
            output_fields=[*FIELDS, "vector"],
            search_params=params,
        )
    out = []
    rows = [dict(hit["entity"]) for hit in res[0]] if res else []
    tagsets.restore(store, rows)
    for hit, row in zip(res[0] if res else [], rows):
        row["id"] = hit["id"]
        # Milvus Lite reports BM25 as a negative distance: rank_score is the score itself.
        row["rank_score"] = abs(float(hit["distance"])) if mode == "bm25" else float(hit["distance"])
        stored = row.pop("vector", None)
        row["score"] = float(np.dot(np.asarray(stored, dtype=np.float32), vector)) if stored else row["rank_score"]
        out.append(Hit(**row))
    return out


def _exact_dense(store: Collection, vector: np.ndarray, k: int, rows: list[dict[str, Any]]) -> list[Hit]:
    """The ``k`` of ``rows`` (their ``id`` and ``vector``) most similar to ``vector``, ranked exactly
    here (cosine), as :func:`search` returns them."""
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(vector) or 1.0)
    cosine = (vectors @ vector.astype(np.float32)) / np.where(norms > 0, norms, 1.0)
    best = sorted(range(len(ids)), key=lambda i: (-cosine[i], ids[i]))[:k]
    top = [ids[i] for i in best]
    found = {
        r["id"]: r for r in store.call("query", store.collection, filter=filters.in_("id", top), output_fields=FIELDS)
    }
    tagsets.restore(store, found.values())
    out = []
    for i in best:
        row = found.get(ids[i])
        if row is not None:  # deleted between the two queries
            out.append(Hit(**row, score=float(cosine[i]), rank_score=float(cosine[i])))
    return out

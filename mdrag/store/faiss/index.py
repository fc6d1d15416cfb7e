"""The FAISS store's vector index, held in memory, and its ``.faiss`` file (see :mod:`mdrag.store.faiss`).

A FAISS ``IndexIDMap2`` keyed by the chunks' SQLite row numbers, over a flat
index (exact) or an HNSW graph (M 16, efConstruction 100, ef 64: recall@10
0.9985 at 100k chunks, as Milvus Lite's AUTOINDEX; ef grows with the graph
past 100k: :func:`ef_search`). Deleted rows leave a flat index at once; an
HNSW graph keeps them, skipped by searches, until it is built again.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from mdrag.fileio import file_sha256_cached

log = logging.getLogger(__name__)

_GATHER = 3  # a filter passing at most 1/_GATHER of the chunks: a product over their vectors only
# efConstruction 100: near 200's recall at half its build time, at 100k chunks (RESULTS.md, "Figures that
# were in code comments").
_HNSW_M, _HNSW_EF_BUILD, _HNSW_EF = 16, 100, 64
# A bigger graph needs a wider walk for the same recall (benchmarks/hnsw_ef.py; RESULTS.md, "Figures that
# were in code comments"): ef is 64 up to _HNSW_EF_ROWS chunks and grows as (rows / _HNSW_EF_ROWS) ** 0.6
# from there: 255 at a million.
_HNSW_EF_ROWS = 100_000


def ef_search(rows: int) -> int:
    """The HNSW search breadth for a graph of ``rows`` chunks (see _HNSW_EF_ROWS)."""
    return max(_HNSW_EF, math.ceil(_HNSW_EF * math.pow(rows / _HNSW_EF_ROWS, 0.6)))


def unit(v: np.ndarray) -> np.ndarray:
    """``v``'s rows scaled to unit length (zero rows stay zero), as contiguous float32."""
    v = np.asarray(v, dtype=np.float32)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.ascontiguousarray(v / np.where(norm > 0, norm, 1.0), dtype=np.float32)


def faiss_digest(path: Path) -> str:
    """``sha256:<hex>`` of the ``.faiss`` file, or "" when it cannot be read (read again only when the
    file changed: a run checks it several times)."""
    try:
        return "sha256:" + file_sha256_cached(path)
    except OSError:
        return ""


def _new_index(dim: int, hnsw: bool) -> Any:
    inner: Any
    if hnsw:
        inner = faiss.IndexHNSWFlat(dim, _HNSW_M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = _HNSW_EF_BUILD
        inner.hnsw.efSearch = _HNSW_EF
    else:
        inner = faiss.IndexFlatIP(dim)
    return faiss.IndexIDMap2(inner)


class VectorIndex:
    """The vectors of a store's rows, by row number: a flat index or an HNSW graph."""

    def __init__(self, dim: int, hnsw: bool = False, index: Any = None) -> None:
        """A new, empty index (flat, or an HNSW graph), or ``index`` read from a ``.faiss`` file."""
        self.dim = dim
        self.index: Any = index if index is not None else _new_index(dim, hnsw)  # IndexIDMap2, ids = chunks.n
        self.hnsw = isinstance(faiss.downcast_index(self.index.index), faiss.IndexHNSW)  # else flat
        self.dead: set[int] = set()  # deleted rows an HNSW graph still holds (skipped by searches)
        self.dead_sel: tuple[Any, Any] | None = None  # the ID selector that skips them
        self.pos: np.ndarray | None = None  # row number -> position in the index (-1: none); None: stale

    @classmethod
    def read(cls, path: Path) -> VectorIndex | None:
        """The index saved in ``path``; None, logged, when FAISS cannot read it."""
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as e:
            log.warning("cannot read %s (%s): building it from SQLite", path, e)
            return None
        return cls(index.d, index=index)

    def ids(self) -> set[int]:
        """The row numbers the index holds (an HNSW graph's dead ones included)."""
        return set(faiss.vector_to_array(self.index.id_map).tolist())

    def rebuilt(self, rows: np.ndarray, hnsw: bool) -> VectorIndex:
        """A new index of these rows (their vectors taken from this one): HNSW or flat."""
        vecs = self.vectors(rows) if len(rows) else np.zeros((0, self.dim), np.float32)
        new = VectorIndex(self.dim, hnsw)
        t = time.perf_counter()
        if len(rows):
            new.index.add_with_ids(np.ascontiguousarray(vecs), rows)
        log.info(
            "built the %s index of %d chunks in %.1f s", "HNSW" if hnsw else "flat", len(rows), time.perf_counter() - t
        )
        return new

    def save(self, path: Path) -> bool:
        """Write the index to ``path`` (an atomic rename); False, logged, when it could not be written."""
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            faiss.write_index(self.index, str(tmp))
            os.replace(tmp, path)
        except (OSError, RuntimeError) as e:
            tmp.unlink(missing_ok=True)
            log.warning("could not save %s (%s): the next start builds it from SQLite", path, e)
            return False
        return True

    def add(self, rows: list[int], vecs: np.ndarray) -> None:
        self.index.add_with_ids(vecs, np.asarray(rows, dtype=np.int64))
        self.pos = None

    def remove(self, rows: list[int]) -> None:
        """Forget these rows: removed from a flat index; an HNSW graph keeps them, skipped, until rebuilt."""
        if self.hnsw:
            self.dead.update(rows)
            self.dead_sel = None
        else:
            self.index.remove_ids(faiss.IDSelectorBatch(np.asarray(rows, dtype=np.int64)))
            self.pos = None

    def positions(self) -> np.ndarray:
        """Row number -> position in the vector index (-1 when not there)."""
        if self.pos is None:
            ids = faiss.vector_to_array(self.index.id_map)
            pos = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int64)
            pos[ids] = np.arange(len(ids))
            self.pos = pos
        return self.pos

    def xb(self) -> np.ndarray:
        """Every stored vector, by position: a view of the index's own storage."""
        inner: Any = faiss.downcast_index(self.index.index)
        flat: Any = faiss.downcast_index(inner.storage) if self.hnsw else inner
        n = flat.ntotal
        return faiss.rev_swig_ptr(flat.get_xb(), n * self.dim).reshape(n, self.dim)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.xb()[self.positions()[rows]])

    def nearest(
        self, q: np.ndarray, k: int, live: int, hide: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of the ``k`` nearest of the ``live`` chunks, less the ``hide`` rows: exact (flat)
        or HNSW."""
        params = None
        if self.hnsw:
            params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # missing from faiss's stub
            params.efSearch = max(ef_search(live), k)
            if hide is not None:  # the graph's walk skips the dead and the hidden rows
                skip = faiss.IDSelectorBatch(np.union1d(np.asarray(sorted(self.dead), dtype=np.int64), hide))
                sel = (skip, faiss.IDSelectorNot(skip))  # the first must outlive the second
                params.sel = sel[1]
            elif self.dead:
                if self.dead_sel is None:
                    dead = faiss.IDSelectorBatch(np.asarray(sorted(self.dead), dtype=np.int64))
                    self.dead_sel = (dead, faiss.IDSelectorNot(dead))  # the first must outlive the second
                params.sel = self.dead_sel[1]
        elif hide is not None:  # flat: the nearest k + len(hide), less the hidden ones among them
            rows, sims = self.nearest(q, k + len(hide), live)
            keep = ~np.isin(rows, hide)
            return rows[keep][:k], sims[keep][:k]
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # this thread's setting: one query gains nothing from more, and waits for them
        try:
            dist, ids = self.index.search(q[None, :], min(k, live), params=params)
        finally:
            faiss.omp_set_num_threads(threads)
        keep = ids[0] >= 0
        return ids[0][keep], dist[0][keep]

    def nearest_among(self, q: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of the ``k`` nearest of these chunks, exactly."""
        pos = self.positions()[rows]
        if len(rows) * _GATHER <= self.index.ntotal:
            sims = self.xb()[pos] @ q
        else:  # most chunks pass: one product over all of them, then pick
            sims = (self.xb() @ q)[pos]
        top = np.argpartition(-sims, k - 1)[:k] if len(sims) > k else np.arange(len(sims))
        top = top[np.lexsort((rows[top], -sims[top]))]
        return rows[top], sims[top]

"""What a FAISS store holds in memory, and its searches (see :mod:`mdrag.store.faiss`).

The vector index (:class:`mdrag.store.faiss.index.VectorIndex`), the BM25
index (made by the first BM25 search, or the first change once a saved one is
known: read from the file the last run saved when it holds exactly the rows in
memory, else built from SQLite), the row
numbers held, and caches: the rows each recent filter passes, the row numbers
of the last ``hidden`` ids searched with, and decoded rows for search results.
The store keeps it equal to what SQLite holds, under its lock.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from mdrag.store.base import Filter, Hit
from mdrag.store.bm25 import Bm25
from mdrag.store.faiss import rows as sql
from mdrag.store.faiss.index import VectorIndex, unit

log = logging.getLogger(__name__)


class Memory:
    """One FAISS store's chunks in memory: their vectors, their BM25 index, and caches over them."""

    def __init__(self, dim: int, hnsw: bool = False, index: VectorIndex | None = None) -> None:
        self.index = index if index is not None else VectorIndex(dim, hnsw)  # the vectors by row number (chunks.n)
        self.bm25: Bm25 | None = None  # made on first use: see bm25_index
        # Reads the BM25 index the last run saved (None when it is missing or not the file that run wrote),
        # to be used while memory holds the rows it was saved with; None once memory changed, or read.
        self.saved_bm25: Callable[[], Bm25 | None] | None = None
        self.rows: set[int] = set()  # row numbers held in memory
        self.passing: dict[Filter, np.ndarray] = {}  # the rows each recent filter passes, until the next change
        # The last ``hidden`` ids searched with and their row numbers: a running update's set grows as it writes.
        self.hidden: tuple[frozenset[str], np.ndarray] = (frozenset(), np.zeros(0, dtype=np.int64))
        self.row_cache = sql.RowCache()  # decoded rows for search results (a new Memory after a rollback)

    def rebuild(self, hnsw: bool) -> None:
        """A new vector index of the live rows: HNSW or flat."""
        self.index = self.index.rebuilt(np.asarray(sorted(self.rows), dtype=np.int64), hnsw)

    def add(self, rows: list[int], vecs: np.ndarray, texts: list[str]) -> None:
        if rows:
            self._take_saved()  # before the change, while memory holds the rows it was saved with
            self.index.add(rows, vecs)
            if self.bm25 is not None:
                self.bm25.add(rows, texts)
            self.rows.update(rows)
            self.passing.clear()

    def remove(self, rows: Iterable[int]) -> None:
        """Forget these rows: removed from a flat index; an HNSW graph keeps them, skipped, until rebuilt."""
        rows = [r for r in rows if r in self.rows]
        if rows:
            self._take_saved()
            self.index.remove(rows)
            if self.bm25 is not None:
                self.bm25.remove(rows)
            self.rows.difference_update(rows)
            self.passing.clear()

    def _take_saved(self) -> None:
        """Read the saved BM25 index, if one is known and none is in memory, and keep it when it holds exactly
        the rows in memory (another index, however whole, would score wrongly: it is left for SQLite's)."""
        load, self.saved_bm25 = self.saved_bm25, None
        if load is None or self.bm25 is not None:
            return
        bm25 = load()
        if bm25 is None:
            return
        held = np.fromiter(self.rows, dtype=np.int64, count=len(self.rows))
        if bm25.n == len(held) and (not len(held) or (held.max() < len(bm25.alive) and bm25.alive[held].all())):
            self.bm25 = bm25
        else:
            log.warning("the saved BM25 index holds other chunks than the store: building the BM25 index from SQLite")

    def bm25_index(self, db: sqlite3.Connection) -> Bm25:
        """The BM25 index of the rows in memory: the one the last run saved, or built from SQLite, the first
        time a search (or a run's end, which saves it) needs it."""
        self._take_saved()
        if self.bm25 is None:
            self.bm25 = sql.bm25_index(db, self.rows)
        return self.bm25

    def hidden_rows(self, db: sqlite3.Connection, hidden: frozenset[str]) -> np.ndarray:
        """The row numbers of the ``hidden`` chunks, looked up only for the ids new since the last call."""
        known, rows = self.hidden
        if hidden is known:
            return rows
        if not known <= hidden:  # another run's set: looked up whole
            known, rows = frozenset(), np.zeros(0, dtype=np.int64)
        found = sql.rows_of(db, sorted(hidden - known))
        rows = np.union1d(rows, np.asarray(found, np.int64))
        self.hidden = (hidden, rows)
        return rows

    def search(
        self,
        db: sqlite3.Connection,
        vector: np.ndarray,
        k: int,
        where: Filter | None,
        candidates: Callable[[Filter], np.ndarray],
        mode: str,
        query: Callable[[], str],
        hidden: frozenset[str],
    ) -> list[Hit]:
        """The ``k`` best chunks passing ``where`` (the rows ``candidates`` finds) and not ``hidden``: dense,
        or BM25 on the text ``query`` gives."""
        rows, cosines, ranks = self.ranked(db, vector, k, where, candidates, mode, query, hidden)
        return self.row_cache.hits(db, rows, cosines, ranks)

    def ranked(
        self,
        db: sqlite3.Connection,
        vector: np.ndarray,
        k: int,
        where: Filter | None,
        candidates: Callable[[Filter], np.ndarray],
        mode: str,
        query: Callable[[], str],
        hidden: frozenset[str],
    ) -> tuple[np.ndarray, list[float], list[float]]:
        """What :meth:`search` returns, its rows not read: their row numbers, cosines and the ranking's scores."""
        q = unit(np.asarray(vector, dtype=np.float32).reshape(-1))
        cand = None
        if where:
            cand = self.passing.get(where)
            if cand is None:
                cand = candidates(where)
                if len(self.passing) >= 64:
                    self.passing.clear()
                self.passing[where] = cand
        hide = self.hidden_rows(db, hidden) if hidden else None
        if cand is not None and hide is not None:
            cand = np.setdiff1d(cand, hide, assume_unique=True)
        if k <= 0 or not self.rows or (cand is not None and len(cand) == 0):
            return np.zeros(0, dtype=np.int64), [], []
        if mode == "bm25":
            allowed = None
            bm25 = self.bm25_index(db)
            if cand is not None:
                allowed = np.zeros(max(len(bm25.alive), int(cand.max()) + 1), dtype=bool)
                allowed[cand] = True
            elif hide is not None:
                allowed = np.ones(max(len(bm25.alive), int(hide.max()) + 1), dtype=bool)
                allowed[hide] = False
            ranked = bm25.search(query(), k, allowed)
            rows = np.asarray([r for r, _ in ranked], dtype=np.int64)
            ranks = [s for _, s in ranked]
            cosines = (self.index.vectors(rows) @ q).tolist() if len(rows) else []
        elif cand is not None:
            rows, sims = self.index.nearest_among(q, cand, k)
            cosines = ranks = sims.tolist()
        else:
            rows, sims = self.index.nearest(q, k, len(self.rows), hide)
            cosines = ranks = sims.tolist()
        return rows, cosines, ranks


def store_mode(mode: str) -> str:
    """``mode``, a store search's: ValueError unless it is "dense" or "bm25"."""
    if mode not in ("dense", "bm25"):
        raise ValueError(f"unknown store search mode {mode!r}: dense or bm25")
    return mode


def bm25_query(prepare: Callable[[str], str] | None, text: str) -> Callable[[], str]:
    """What gives the BM25 query of ``text``: prepared (stemmed) when a BM25 search asks for it."""
    return lambda: prepare(text) if prepare else text


def picked(
    rows: np.ndarray, cosines: list[float], asked: tuple[Any, ...]
) -> tuple[list[int], list[float], Any, Any, Any]:
    """The arguments of :meth:`mdrag.store.faiss.rows.RowCache.read` for a :class:`~mdrag.store.base.Ranked`
    list's ``read(at, rank_scores, dense_ranks, bm25_ranks)``: the row numbers and cosines at ``at``."""
    at, rank, dense, bm25 = asked
    return [int(rows[i]) for i in at], [cosines[i] for i in at], rank, dense, bm25


def save_bm25(bm25: Bm25, path: Path) -> str:
    """Write ``bm25`` to ``path`` (the store's ``.bm25`` file; an atomic rename): its ``sha256:<hex>``, or ""
    (logged) when it could not be written (searches then build the BM25 index from SQLite)."""
    data = bm25.to_bytes()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        log.warning("could not save %s (%s): searches build the BM25 index from SQLite", path, e)
        return ""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def saved_bm25(path: Path, recorded: str | None) -> Callable[[], Bm25 | None] | None:
    """What reads the ``.bm25`` file SQLite names as ``recorded`` (None when it names none): the index, or
    None, logged, when the file is missing, is not that one, or does not read."""
    if not recorded:
        return None

    def read() -> Bm25 | None:
        try:
            data = path.read_bytes()
        except OSError as e:
            log.warning("cannot read %s (%s): building the BM25 index from SQLite", path, e)
            return None
        if "sha256:" + hashlib.sha256(data).hexdigest() != recorded:
            log.warning("%s is not the file its last run wrote: building the BM25 index from SQLite", path)
            return None
        try:
            return Bm25.from_bytes(data)
        except ValueError as e:
            log.warning("cannot read %s (%s): building the BM25 index from SQLite", path, e)
            return None

    return read

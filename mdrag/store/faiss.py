"""Chunks in SQLite, vectors in a FAISS index held in memory: the ``faiss`` store backend.

Files, under ``<cache>/faiss/``:

- ``<index>.sqlite``: the source of truth (SQLite in WAL mode). One row per
  chunk: its fields, ``headings`` and ``metadata`` as JSON, the text BM25
  ranks, and its vector as a float32 blob; a ``tags`` table for tag filters,
  and a ``meta`` table holding the model identity and a commit counter.
- ``<index>.faiss``: the vector index (FAISS ``IndexIDMap2``, keyed by the
  chunks' SQLite row numbers), written at the end of each run with an atomic
  rename, and named in SQLite by its sha256 in the same commit. It is only a
  faster start: a missing, stale or damaged file is built again from SQLite.
- ``<index>.lock``: the writers' lock (:mod:`filelock`).

A store proves it is whole: each run records in ``meta`` what it left (the
``.faiss`` file's sha256, the counts of chunk and tag rows, a digest of the
chunk ids). Opening checks the cheap ones (:meth:`FaissStore.check`),
``mdrag status --verify`` all of them, and :meth:`FaissStore.repair` builds the
vector index and the tag rows again from the stored vectors and metadata.

Nothing here is pickled: SQLite rows, JSON and FAISS's own format hold
everything, and loading them runs no code.

Reads never touch disk for ranking. Dense search: a flat index (exact) below
20,000 chunks, an HNSW graph from there (M 16, efConstruction 100, ef 64:
recall@10 0.9985 at 100k chunks, as Milvus Lite's AUTOINDEX; ef grows with
the graph past 100k: :func:`_ef_search`); a filtered
search is always exact, a product over the vectors of every chunk that passes
(found in SQLite, parameters only). Each search runs FAISS on one OpenMP
thread (a per-thread setting): one query gains nothing from more, and on a busy
machine waits for them (HNSW at 100k: 8 ms on two threads, 0.4 ms on one).
BM25 is an in-memory inverted index over the same texts Milvus ranks
(:class:`mdrag.store.bm25.Bm25`); SQLite's FTS5 ``bm25()`` was measured at 131 ms per Hugo
question on 100k chunks (it scores every match), too slow for a search path.

A run's writes are one SQLite transaction, held under the writers' lock from
the first write to :meth:`FaissStore.end_run`, which commits; a process killed
mid-run leaves SQLite at its last commit, and :meth:`FaissStore.close` without
``end_run`` rolls back. Other processes see a run once it is committed: every
read first asks SQLite whether another connection committed (``PRAGMA
data_version``) and, if so, loads what changed (row numbers are never reused,
so the new and deleted rows are the set difference).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faiss
import filelock
import numpy as np

from mdrag.errors import (
    ConfigError,
    ModelMismatchError,
    StoreDamagedError,
    StoreError,
    StoreInUseError,
    StoreUnavailableError,
)
from mdrag.ingest.manifest import file_sha256_cached
from mdrag.store import StoreBackend, same_location
from mdrag.store.base import ROW_FIELDS, Filter, Hit
from mdrag.store.bm25 import Bm25
from mdrag.types import Chunk

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["FaissStore"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_BATCH = 500  # values per SQL `IN (...)` list
_GATHER = 3  # a filter passing at most 1/_GATHER of the chunks: a product over their vectors only
# From this many chunks, dense search without a filter walks an HNSW graph (approximate, as Milvus's
# AUTOINDEX); below it, and with a filter, it is exact. Measured at 100k chunks (benchmarks/faiss_store.py
# vectors, 2 cores): efConstruction 40 / 100 / 200 build in 12 / 49 / 95 s, recall@10 at ef 64 0.958 /
# 0.9985 / 0.9995 (Milvus Lite's AUTOINDEX, efConstruction 200: 0.999), search 0.3 ms.
_HNSW_MIN = 20_000
_HNSW_M, _HNSW_EF_BUILD, _HNSW_EF = 16, 100, 64
# A bigger graph needs a wider walk for the same recall (benchmarks/hnsw_ef.py: store_scale.py's vectors,
# 200 queries, one thread): at 100,000 ef 64 gives recall@10 0.99; at 1,000,000 ef 64 / 128 / 256 / 512
# give 0.851 / 0.950 / 0.989 / 0.994 in 0.38 / 0.55 / 0.80 / 1.80 ms. So ef is 64 up to _HNSW_EF_ROWS
# chunks and grows as (rows / _HNSW_EF_ROWS) ** 0.6 from there: 255 at a million.
_HNSW_EF_ROWS = 100_000


def _ef_search(rows: int) -> int:
    """The HNSW search breadth for a graph of ``rows`` chunks (see _HNSW_EF_ROWS)."""
    return max(_HNSW_EF, math.ceil(_HNSW_EF * (rows / _HNSW_EF_ROWS) ** 0.6))


_ROW_CACHE = 16384  # decoded rows kept for search results (a hybrid search reads a few hundred)
_LOCK_POLL_S = 0.05  # how often a writer waiting for another process's run tries its lock again

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    n INTEGER PRIMARY KEY AUTOINCREMENT,  -- the FAISS id, never reused: readers diff by it
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL, context TEXT NOT NULL, path TEXT NOT NULL, rel_path TEXT NOT NULL,
    root TEXT NOT NULL, headings TEXT NOT NULL, level INTEGER NOT NULL, position INTEGER NOT NULL,
    page INTEGER NOT NULL, line_start INTEGER NOT NULL, line_end INTEGER NOT NULL,
    content_hash TEXT NOT NULL, metadata TEXT NOT NULL, bm25_text TEXT NOT NULL, vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks (content_hash);
CREATE INDEX IF NOT EXISTS chunks_root ON chunks (root);
CREATE INDEX IF NOT EXISTS chunks_path ON chunks (path);
CREATE INDEX IF NOT EXISTS chunks_rel_path ON chunks (rel_path);
CREATE TABLE IF NOT EXISTS tags (tag TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (tag, n)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_n ON tags (n);
"""
_FIELDS = ", ".join(ROW_FIELDS)


def _disk_full(e: BaseException) -> bool:
    """Whether ``e`` is SQLite's "database or disk is full"."""
    code = getattr(e, "sqlite_errorcode", None)  # Python 3.11+
    return isinstance(e, sqlite3.OperationalError) and (code == 13 or "disk is full" in str(e))  # SQLITE_FULL


# SQLite's messages for a damaged file -> what mdrag says (SQLite's own may quote bytes of the file).
_DAMAGE_KINDS = {
    "file is not a database": "not an SQLite database",
    "malformed database schema": "its schema is damaged",
    "database disk image is malformed": "its pages are damaged",
}


def _damage_kind(e: Exception) -> str:
    """The kind of damage SQLite found, in words of mdrag's (never text from the file itself)."""
    msg = str(e)
    kind = next((said for key, said in _DAMAGE_KINDS.items() if msg.startswith(key)), None)
    return kind or f"SQLite error {getattr(e, 'sqlite_errorname', type(e).__name__)}"


def _batches(values: Sequence[Any], size: int = _BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.ascontiguousarray(v / np.where(norm > 0, norm, 1.0), dtype=np.float32)


def _tags(metadata: dict[str, Any]) -> set[str]:
    """The tags a chunk carries, as :meth:`Filter.matches` reads them."""
    tags = metadata.get("tags")
    if isinstance(tags, str):
        return {tags}
    return {t for t in tags if isinstance(t, str)} if isinstance(tags, list) else set()


def _ids_digest(db: sqlite3.Connection) -> str:
    """sha256 of the chunk ids, sorted."""
    digest = hashlib.sha256()
    for (cid,) in db.execute("SELECT id FROM chunks ORDER BY id"):
        digest.update(cid.encode() + b"\n")
    return digest.hexdigest()


def _tags_digest(db: sqlite3.Connection) -> str:
    """sha256 of the tag rows, in their primary key's order (a read of the tags table only)."""
    digest = hashlib.sha256()
    for tag, n in db.execute("SELECT tag, n FROM tags ORDER BY tag, n"):
        digest.update(f"{tag}\0{n}\n".encode())
    return digest.hexdigest()


def _tag_rows(db: sqlite3.Connection) -> Iterator[tuple[str, int]]:
    """The rows the tags table should hold: (tag, row number) for each chunk's tags (its metadata)."""
    for n, metadata in db.execute("SELECT n, metadata FROM chunks"):
        for tag in _tags(json.loads(metadata)):
            yield tag, n


def _prefix_end(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: no such bound)."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF:
        return None
    nxt = last + 1 if last + 1 != 0xD800 else 0xE000  # skip the surrogates, which UTF-8 cannot hold
    return prefix[:-1] + chr(nxt)


class FaissStore:
    """One index's chunks in SQLite, its vectors in a FAISS index held in memory (see the module docstring)."""

    lock_wait_s = 10.0  # how long a writer waits for another process's run to end before StoreInUseError

    def __init__(
        self, folder: str | Path, index: str, identity: dict[str, Any], prepare_text: Callable[[str], str] | None
    ) -> None:
        if not _NAME.match(index):
            raise StoreError(f"invalid index name {index!r}: use a letter, then letters, digits or '_' (64 at most)")
        self.folder = Path(folder).expanduser().absolute()  # SQLite URIs (read-only opens) need it absolute
        self.name = index
        self.path = self.folder / f"{index}.sqlite"  # the source of truth
        self.faiss_path = self.folder / f"{index}.faiss"  # the saved vector index: a faster start
        self.uri = str(self.path)
        self.identity = identity  # {"model": ..., "dimension": ...} of the embedder
        self.prepare_text = prepare_text  # applied to BM25 text and BM25 queries (stemming), if set
        self.has_bm25 = True
        self.transactional = True  # a run is one SQLite transaction: other processes see it at end_run
        self.hides = True  # search() leaves out ``hidden`` chunks by row number: no rows fetched to drop
        self._tags_checked: tuple[tuple[int, Any], str | None] | None = None  # see _tags_lost
        self._lock = threading.RLock()  # one call at a time on the connection and the in-memory index
        self._unlocked = threading.Condition(self._lock)  # a writer waiting for another process lets searches in
        self._opening = False  # open() runs: a writer waits holding the lock (the store is half loaded)
        # not thread-local: a run may start writing in one thread and end in another
        self._writer = filelock.FileLock(str(self.folder / f"{index}.lock"), thread_local=False)
        self._db: sqlite3.Connection | None = None
        self._in_run = False  # a write transaction is open, and the writers' lock held
        self._version = -1  # PRAGMA data_version when memory last matched SQLite
        self._index: Any = None  # faiss.IndexIDMap2 over IndexFlatIP or IndexHNSWFlat, ids = chunks.n
        self._bm25: Bm25 | None = None  # built from SQLite by the first BM25 search (writers need none)
        self._rows: set[int] = set()  # row numbers held in memory
        self._pos: np.ndarray | None = None  # row number -> position in the vector index (-1: none); None: stale
        self._foreign: dict[str, Any] | None = None  # the identity of another model, found in SQLite by _sync
        self._passing: dict[Filter, np.ndarray] = {}  # the rows each recent filter passes, until the next change
        # The last ``hidden`` ids searched with and their row numbers: a running update's set grows as it writes.
        self._hidden: tuple[frozenset[str], np.ndarray] = (frozenset(), np.zeros(0, dtype=np.int64))
        # Decoded rows by row number, most recently returned last. A row number names one content for good
        # (never reused) except after a rollback, which clears this cache (_reset_memory, close).
        self._row_cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._hnsw = False  # the vector index is an HNSW graph (else flat)
        self._dead: set[int] = set()  # deleted rows an HNSW graph still holds (skipped by searches)
        self._dead_sel: tuple[Any, Any] | None = None  # the ID selector that skips them

    @classmethod
    def from_config(
        cls, config: Config, name: str, identity: dict[str, Any], prepare_text: Callable[[str], str] | None
    ) -> FaissStore:
        """The store of index ``name`` under ``<cache>/faiss/``."""
        return cls(config.cache_dir / "faiss", name, identity, prepare_text)

    # -- life cycle ---------------------------------------------------------
    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("the store is not open")
        return self._db

    def open(self, create: bool = True, replace_mismatch: bool = False) -> bool:
        """Open the SQLite file, check the model identity, and load the vectors and BM25 index into memory.

        Returns False when the index does not exist and ``create`` is False.
        """
        with self._lock:
            self._opening = True
            try:
                return self._open(create, replace_mismatch)
            finally:
                self._opening = False

    def _open(self, create: bool, replace_mismatch: bool) -> bool:
        with self._lock:
            if self._db is not None:
                self.close()
            if not self.path.exists() and not create:
                return False
            writable = self._writable()
            if create and not writable:
                raise StoreUnavailableError(
                    f"The FAISS store folder {self.folder} is read-only: mdrag can search it but not index "
                    "into it. Index where mdrag can write (MDRAG_HOME)."
                )
            try:
                if writable:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
                    self.db.execute("PRAGMA journal_mode=WAL")
                    self.db.execute("PRAGMA synchronous=NORMAL")
                    self.db.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back after a large run
                else:
                    self._db = self._connect_read_only()
                stored = self._stored_identity()
                if stored is None:
                    if not create:
                        self.close()
                        return False
                    self._create()
                elif not self._same_model(stored):
                    if not replace_mismatch:
                        raise self._mismatch(stored)
                    log.warning("%s Rebuilding it now.", self._mismatch(stored))
                    self.drop()
                    self._create()
                self._load()
            except sqlite3.DatabaseError as e:
                self.close()
                raise self._damaged(e) from e
            except OSError as e:
                self.close()
                raise StoreError(
                    f"Cannot open the FAISS store {self.path}: {e}. Check that its folder is writable."
                ) from e
            except BaseException:
                self.close()
                raise
            return True

    def _writable(self) -> bool:
        """Whether this process may write the store's folder (or create it) and its SQLite file."""
        if self.path.exists():
            return os.access(self.folder, os.W_OK) and os.access(self.path, os.W_OK)
        folder = self.folder
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent  # the folder is created: its first existing parent must be writable
        return os.access(folder, os.W_OK)

    def _connect_read_only(self) -> sqlite3.Connection:
        """SQLite opened read-only, for searching a store in a folder this process may not write (a
        read-only home or mount): SQLite cannot create its shared-memory file there, so the file is
        opened as immutable, unless a write-ahead log is left beside it (a writer that did not close),
        whose commits are read too."""
        wal = Path(f"{self.path}-wal").exists()
        uri = f"{self.path.as_uri()}?mode=ro" + ("" if wal else "&immutable=1")
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)

    def _write_error(self, e: Exception) -> StoreError:
        """A failed write as mdrag says it: a full disk, a read-only folder, or the SQLite error."""
        if _disk_full(e):
            return StoreError(
                f"Cannot write the FAISS store {self.path}: the disk is full ({e}). Free some space on that "
                "disk and run `mdrag index` again: what was indexed is kept, and that run repairs the rest."
            )
        if isinstance(e, sqlite3.OperationalError) and "readonly" in str(e):
            return StoreUnavailableError(
                f"The FAISS store {self.path} is read-only ({e}): mdrag can search it but not index into it. "
                "Index where mdrag can write (MDRAG_HOME)."
            )
        return StoreError(f"Cannot write the FAISS store {self.path}: {e}")

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """SQLite errors of a write call, said as :meth:`_write_error` says them."""
        try:
            yield
        except sqlite3.Error as e:
            raise self._write_error(e) from e

    def _damaged(self, e: Exception) -> StoreError:
        if _disk_full(e):
            return self._write_error(e)
        if isinstance(e, sqlite3.OperationalError) and ("readonly" in str(e) or "unable to open" in str(e)):
            return StoreUnavailableError(
                f"Cannot open the FAISS store {self.path} for writing ({e}). Check that its folder exists and "
                "is writable, or set MDRAG_HOME to a folder mdrag may write."
            )
        if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
            return StoreInUseError(
                f"The FAISS store {self.path} is locked by another process (a running `mdrag index`?). "
                "Wait for it to finish, or stop it, and try again."
            )
        return StoreDamagedError(
            f"The index store is damaged: SQLite cannot read {self.path} ({_damage_kind(e)}). `mdrag index "
            "--rebuild` moves it aside (into the cache's damaged/ folder) and builds the index again from its folders."
        )

    def _stored_identity(self) -> dict[str, Any] | None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            return None
        row = self.db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        return json.loads(row[0]) if row else None

    def _same_model(self, stored: dict[str, Any]) -> bool:
        return stored.get("model") == self.identity.get("model") and int(stored.get("dimension", -1)) == int(
            self.identity["dimension"]
        )

    def _mismatch(self, stored: dict[str, Any]) -> ModelMismatchError:
        return ModelMismatchError.between(self.name, stored, self.identity)

    def _create(self) -> None:
        self._begin()
        for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
            self.db.execute(statement)
        stored = self._stored_identity()
        if stored is not None and not self._same_model(stored):  # another process created it meanwhile
            self.db.execute("ROLLBACK")
            self._end_write()
            raise self._mismatch(stored)
        self._set("identity", json.dumps(self.identity, sort_keys=True))
        self._commit(run=False)
        log.info("created the FAISS store %s (%d-d)", self.path, self._dim)

    def _set(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(value)))

    def _get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        """Close; a run not ended by :meth:`end_run` is rolled back (the indexer's repair redoes it)."""
        with self._lock:
            if self._db is not None:
                if self._in_run:
                    log.warning("%s: a run was not ended; its writes are rolled back", self.path)
                    try:
                        self.db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                    self._end_write()
                self._db.close()
                self._db = None
            self._index = None
            self._bm25 = None
            self._rows = set()
            self._pos = None
            self._passing.clear()
            self._row_cache.clear()
            self._tags_checked = None  # data_version counts per connection
            self._hidden = (frozenset(), np.zeros(0, dtype=np.int64))  # row numbers start again in a new file
            self._version = -1

    def drop(self) -> None:
        """Delete every chunk and the model identity, at once (committed)."""
        with self._lock, self._writing():
            self._begin()
            self.db.execute("DELETE FROM chunks")
            self.db.execute("DELETE FROM tags")
            self.db.execute("DELETE FROM meta WHERE key != 'commits'")
            self._commit(run=False)
            self.faiss_path.unlink(missing_ok=True)
            self._reset_memory()

    def set_aside(self) -> Path | None:
        """Move the SQLite and FAISS files into ``<cache>/damaged/<index>-<time>/``; None when there are none."""
        with self._lock:
            self.close()
            files = [
                p
                for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"), self.faiss_path)
                if p.exists()
            ]
            if not self.path.exists():
                return None
            dest = self.folder.parent / "damaged" / f"faiss-{self.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            dest.mkdir(parents=True, exist_ok=True)
            for p in files:
                os.replace(p, dest / p.name)
            log.warning("moved the damaged FAISS store %s to %s", self.path, dest)
            return dest

    def unchanged_since_last_run(self) -> bool:
        """Whether SQLite's last commit was an :meth:`end_run` and the ``.faiss`` file is the one it wrote.

        Answered without opening the store (a read-only look at SQLite), so that a run
        with nothing to do loads nothing.
        """
        with self._lock:
            if self._in_run:
                return False
            if self._db is not None:
                return self._last_commit_was_run(self._db)
            if not self.path.exists():
                return False
            try:
                with closing(sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, timeout=5)) as db:
                    return self._last_commit_was_run(db)
            except sqlite3.Error:
                return False

    def _last_commit_was_run(self, db: sqlite3.Connection) -> bool:
        try:
            got = self._recorded(db)
            if got.get("commits") is None or got.get("commits") != got.get("run_commit") or not got.get("faiss_file"):
                return False
            if db.execute("SELECT 1 FROM meta WHERE key = 'identity'").fetchone() is None:
                return False  # the model identity was lost: opening the store (to write it again) is the repair
            return not self._mismatches(db, got)
        except (sqlite3.Error, OSError):
            return False

    @staticmethod
    def _recorded(db: sqlite3.Connection) -> dict[str, str]:
        """What the last commit recorded in ``meta`` (see :meth:`_record_run`), with its commit counters."""
        keys = ("commits", "run_commit", "faiss_file", "rows", "tag_rows", "ids", "tags_digest")
        return dict(db.execute(f"SELECT key, value FROM meta WHERE key IN ({_marks(len(keys))})", keys))  # noqa: S608

    def _mismatches(
        self, db: sqlite3.Connection, got: dict[str, str], thorough: bool = False, faiss_file: bool = True
    ) -> dict[str, str]:
        """What differs from what the last run recorded, by kind ("faiss", "rows", "tags", "ids",
        "sqlite"): a message naming the file. Empty after a commit that was not a run's end.
        ``faiss_file``: check the ``.faiss`` file's checksum (a read of the whole file)."""
        if got.get("commits") is None or got.get("commits") != got.get("run_commit"):
            return {}
        found: dict[str, str] = {}
        recorded = got.get("faiss_file", "")
        if faiss_file and recorded.startswith("sha256:") and recorded != self._faiss_digest():
            found["faiss"] = (
                f"the vector index file {self.faiss_path} is missing or damaged (not the file its run wrote)"
            )
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for kind, table, key in (("rows", "chunks", "rows"), ("tags", "tags", "tag_rows")):
            if table not in tables:
                found[kind] = f"the {table} table of {self.path} is missing"
                continue
            held = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608
            if key in got and held != int(got[key]):
                found[kind] = f"the {table} table of {self.path} holds {held} rows, its last run left {got[key]}"
        if "tags" not in found and "tags_digest" in got and got["tags_digest"] != _tags_digest(db):
            found["tags"] = f"the tags table of {self.path} is not the one its last run left"
        if thorough and not found.keys() & {"rows", "tags"}:
            found.update(self._thorough_mismatches(db, got))
        return found

    def _thorough_mismatches(self, db: sqlite3.Connection, got: dict[str, str]) -> dict[str, str]:
        """What only a read of every row finds: SQLite's own check, the chunk ids, the tag rows."""
        found: dict[str, str] = {}
        check = [r[0] for r in db.execute("PRAGMA quick_check")]
        if check != ["ok"]:  # not repaired from the data: some of it cannot be read
            raise StoreDamagedError(
                f"The index store is damaged: SQLite's check finds damaged pages in {self.path}. `mdrag index "
                "--rebuild` moves it aside (into the cache's damaged/ folder) and builds the index again from its "
                "folders."
            )
        if "ids" in got and got["ids"] != _ids_digest(db):
            found["ids"] = f"the chunk ids in {self.path} are not the ones its last run left"
        if self._tag_differences(db):
            found["tagged"] = f"the tags table of {self.path} does not match the chunks' metadata"
        if self._bad_vectors(db):
            found["vectors"] = f"some chunk vectors in {self.path} are damaged (not of unit length)"
        return found

    def _bad_vectors(self, db: sqlite3.Connection) -> set[int]:
        """The row numbers whose stored vector is not a unit vector of the model's dimension (every vector
        a run writes is one): damaged bytes, which a vector index built from SQLite would rank by."""
        bad: set[int] = set()
        cur = db.execute("SELECT n, vector FROM chunks")
        while part := cur.fetchmany(4096):
            size = 4 * self._dim
            bad.update(n for n, blob in part if len(blob) != size)
            good = [(n, blob) for n, blob in part if len(blob) == size]
            if good:
                vecs = np.frombuffer(b"".join(b for _, b in good), dtype=np.float32).reshape(len(good), self._dim)
                with np.errstate(all="ignore"):
                    norms = np.linalg.norm(vecs, axis=1)
                bad.update(n for (n, _), ok in zip(good, np.abs(norms - 1) < 1e-3) if not ok)
        return bad

    @staticmethod
    def _tag_differences(db: sqlite3.Connection) -> set[int]:
        """The row numbers whose tag rows differ from their chunk's metadata (either may be the damaged one)."""
        return {n for _, n in set(db.execute("SELECT tag, n FROM tags")) ^ set(_tag_rows(db))}

    def check(self, thorough: bool = False) -> list[str]:
        """What differs from what the last run recorded (see the module docstring), each naming the file;
        [] when whole. Cheap: the ``.faiss`` file's checksum and the row counts; ``thorough`` also reads
        every row (SQLite's quick_check, the chunk ids, the tag rows)."""
        with self._lock:
            db = self._read()
            try:
                return list(self._mismatches(db, self._recorded(db), thorough).values())
            except sqlite3.DatabaseError as e:
                raise self._damaged(e) from e

    def repair(self, thorough: bool = False) -> tuple[list[str], set[str]]:
        """Build the vector index and the tag rows again from the stored vectors and metadata when they
        differ from what the last run recorded (nothing is embedded again): what was repaired, and the
        ids of the chunks whose rows are suspect (``thorough``: their tag rows and metadata disagree, and
        either may be the damaged one), whose files the indexer indexes again. Missing chunk rows are not
        this store's to repair: the indexer compares them with its manifest (their tag rows are dropped)."""
        with self._lock:
            db = self._read()
            try:
                found = self._mismatches(db, self._recorded(db), thorough)
                suspect = self._tag_differences(db) if "tagged" in found else set()
                bad = self._bad_vectors(db) if "vectors" in found else set()
                ids = {r[0] for n in _batches(sorted(suspect | bad)) for r in self._ids_of(db, n)}
            except sqlite3.DatabaseError as e:
                raise self._damaged(e) from e
            fixed = [found[k] for k in ("faiss", "tags", "rows", "tagged", "vectors") if k in found]
            if fixed:
                with self._writing():
                    self._begin()
                    if bad:  # their files are indexed again; a damaged vector must not be reused by content hash
                        self._delete_rows(sorted(bad))
                    for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                        self.db.execute(statement)  # a table or index that was dropped (all IF NOT EXISTS)
                    self._rebuild_tags()
                    self._rebuild_index(self._hnsw or len(self._rows) >= _HNSW_MIN)
                    self._save_faiss()
                    self._commit(run=True)
            said = [
                f"{found[k]}: built again from the stored vectors and metadata"
                for k in ("faiss", "tags", "tagged")
                if k in found
            ]
            return said, ids

    @staticmethod
    def _ids_of(db: sqlite3.Connection, rows: Sequence[int]) -> list[tuple[str]]:
        return db.execute(f"SELECT id FROM chunks WHERE n IN ({_marks(len(rows))})", list(rows)).fetchall()  # noqa: S608

    def _rebuild_tags(self) -> None:
        self.db.execute("DELETE FROM tags")
        self.db.executemany("INSERT INTO tags (tag, n) VALUES (?, ?)", _tag_rows(self.db))

    # -- writes -------------------------------------------------------------
    def _begin(self) -> None:
        """Start a write transaction under the writers' lock, unless one is open."""
        if self._in_run:
            return
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                # Waiting for another process's run, searches in this one go on (the lock is let go
                # meanwhile), but while open() loads the store.
                self._writer.acquire(timeout=self.lock_wait_s if self._opening else 0)
                break
            except filelock.Timeout:
                left = deadline - time.monotonic()
                if self._opening or left <= 0:
                    raise StoreInUseError(
                        f"The FAISS store {self.path} is being written by another process (a running `mdrag "
                        "index`, or `mdrag serve` updating it). Wait for it to finish, or stop it, and try again."
                    ) from None
                self._unlocked.wait(min(_LOCK_POLL_S, left))
        try:
            self._sync()  # what the previous writer committed
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._writer.release()
            raise
        self._in_run = True

    def _end_write(self) -> None:
        self._in_run = False
        self._writer.release()

    def _commit(self, run: bool) -> None:
        """Commit the open transaction; should that fail (a full disk), roll it back, so that memory and
        SQLite hold what was last committed, and raise."""
        try:
            commits = int(self._get("commits") or 0) + 1
            self._set("commits", commits)
            if run:
                self._set("run_commit", commits)
            self.db.execute("COMMIT")
        except sqlite3.Error:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite rolled it back already
            self._end_write()
            self._load()
            raise
        self._end_write()

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Insert or replace chunks by id (a replaced chunk gets a new row number)."""
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        with self._lock:
            latest = {c.id: i for i, c in enumerate(chunks)}  # one id twice in a batch: the last wins
            keep = sorted(latest.values())
            chunks = [chunks[i] for i in keep]
            vecs = _unit(np.asarray(vectors)[keep]) if keep else np.zeros((0, self._dim), np.float32)
            with self._writing():
                self._begin()
                with self._undo_on_error():
                    self._insert(chunks, vecs)

    def _insert(self, chunks: Sequence[Chunk], vecs: np.ndarray) -> None:
        self._delete_rows(self._rows_of([c.id for c in chunks]))
        rows: list[int] = []
        texts: list[str] = []
        for c, v in zip(chunks, vecs):
            bm25 = self.prepare_text(c.embed_text) if self.prepare_text else c.embed_text
            cur = self.db.execute(
                f"INSERT INTO chunks (id, {_FIELDS}, bm25_text, vector) VALUES ({_marks(len(ROW_FIELDS) + 3)})",  # noqa: S608
                (
                    c.id, c.text, c.context, c.path, c.rel_path, c.root, json.dumps(list(c.heading_path)),
                    c.level, c.position, c.page or 0, c.line_start or 0, c.line_end or 0, c.content_hash,
                    json.dumps(c.metadata), bm25, v.tobytes(),
                ),
            )  # fmt: skip
            row = int(cur.lastrowid or 0)
            self.db.executemany("INSERT INTO tags (tag, n) VALUES (?, ?)", [(t, row) for t in _tags(c.metadata)])
            rows.append(row)
            texts.append(bm25)
        self._add_memory(rows, vecs, texts)

    def delete_ids(self, ids: Iterable[str]) -> None:
        wanted = sorted(set(ids))
        with self._lock:
            rows = self._rows_of(wanted)
            if rows:
                with self._writing():
                    if not self._in_run:  # the run starts here: another process may commit before it is ours
                        self._begin()
                        rows = self._rows_of(wanted)
                    with self._undo_on_error():
                        self._delete_rows(rows)

    @contextmanager
    def _undo_on_error(self) -> Iterator[None]:
        """A write call that fails leaves SQLite and memory as they were before it; one that SQLite
        answered by rolling the whole run back (a full disk, an I/O error) leaves them at the last commit,
        and the run ended."""
        self.db.execute("SAVEPOINT write_call")
        try:
            yield
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK TO write_call")
                self.db.execute("RELEASE write_call")
                self._load_snapshot()  # memory from scratch: rows it dropped are back in SQLite
            else:
                self._end_write()
                self._load()
            raise
        self.db.execute("RELEASE write_call")

    def _rows_of(self, ids: Sequence[str]) -> list[int]:
        out: list[int] = []
        for part in _batches(ids):
            out += [r[0] for r in self.db.execute(f"SELECT n FROM chunks WHERE id IN ({_marks(len(part))})", part)]  # noqa: S608
        return out

    def _delete_rows(self, rows: list[int]) -> None:
        if not rows:
            return
        for part in _batches(rows):
            self.db.execute(f"DELETE FROM chunks WHERE n IN ({_marks(len(part))})", part)  # noqa: S608
            self.db.execute(f"DELETE FROM tags WHERE n IN ({_marks(len(part))})", part)  # noqa: S608
        self._remove_memory(rows)

    def end_run(self, written: set[str], live: set[str], whole: bool) -> None:
        """Choose and tidy the vector index, save it (atomic rename), record it, and commit the run."""
        with self._lock, self._writing():
            self._begin()
            live_rows = len(self._rows)
            hnsw = live_rows >= _HNSW_MIN
            if (hnsw and not self._hnsw) or (self._hnsw and live_rows < _HNSW_MIN // 2):
                self._rebuild_index(hnsw)
            elif self._hnsw and len(self._dead) > live_rows // 4:
                self._rebuild_index(True)  # drop the deleted vectors the graph still holds
            self._save_faiss()
            self._commit(run=True)

    def _save_faiss(self) -> None:
        """Write the ``.faiss`` file and note in SQLite (same transaction) which file it is."""
        tmp = self.faiss_path.with_name(f"{self.faiss_path.name}.{os.getpid()}.tmp")
        try:
            faiss.write_index(self._index, str(tmp))
            os.replace(tmp, self.faiss_path)
        except (OSError, RuntimeError) as e:
            tmp.unlink(missing_ok=True)
            log.warning("could not save %s (%s): the next start builds it from SQLite", self.faiss_path, e)
            self._set("faiss_file", "")
        else:
            self._set("faiss_file", self._faiss_digest())
        self._record_run()

    def _record_run(self) -> None:
        """Note in SQLite (same transaction) what the run leaves: the counts of chunk and tag rows, and a
        digest of the chunk ids (see :meth:`check`)."""
        self._set("rows", self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])
        self._set("tag_rows", self.db.execute("SELECT count(*) FROM tags").fetchone()[0])
        self._set("ids", _ids_digest(self.db))
        self._set("tags_digest", _tags_digest(self.db))

    def _faiss_digest(self) -> str:
        """``sha256:<hex>`` of the ``.faiss`` file, or "" when it cannot be read (read again only when the
        file changed: a run checks it several times)."""
        try:
            return "sha256:" + file_sha256_cached(self.faiss_path)
        except OSError:
            return ""

    def _faiss_file_current(self) -> bool:
        recorded = self._get("faiss_file")
        return bool(recorded) and recorded == self._faiss_digest()

    # -- memory ---------------------------------------------------------------
    @property
    def _dim(self) -> int:
        return int(self.identity["dimension"])

    def _new_index(self, hnsw: bool) -> Any:
        inner: Any
        if hnsw:
            inner = faiss.IndexHNSWFlat(self._dim, _HNSW_M, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = _HNSW_EF_BUILD
            inner.hnsw.efSearch = _HNSW_EF
        else:
            inner = faiss.IndexFlatIP(self._dim)
        return faiss.IndexIDMap2(inner)

    def _set_index(self, index: Any) -> None:
        self._index = index
        self._hnsw = isinstance(faiss.downcast_index(index.index), faiss.IndexHNSW)
        self._dead = set()
        self._dead_sel = None
        self._pos = None

    def _reset_memory(self, hnsw: bool = False) -> None:
        self._set_index(self._new_index(hnsw))
        self._bm25 = None
        self._rows = set()
        self._passing.clear()
        self._row_cache.clear()
        self._hidden = (frozenset(), np.zeros(0, dtype=np.int64))  # row numbers start again in a new file

    def _rebuild_index(self, hnsw: bool) -> None:
        """A new vector index of the live rows: HNSW from ``_HNSW_MIN`` chunks, else flat."""
        rows = np.asarray(sorted(self._rows), dtype=np.int64)
        vecs = self._vectors(rows) if len(rows) else np.zeros((0, self._dim), np.float32)
        index = self._new_index(hnsw)
        t = time.perf_counter()
        if len(rows):
            index.add_with_ids(np.ascontiguousarray(vecs), rows)
        self._set_index(index)
        log.info(
            "built the %s index of %d chunks in %.1f s", "HNSW" if hnsw else "flat", len(rows), time.perf_counter() - t
        )

    def _add_memory(self, rows: list[int], vecs: np.ndarray, texts: list[str]) -> None:
        if rows:
            self._index.add_with_ids(vecs, np.asarray(rows, dtype=np.int64))
            if self._bm25 is not None:
                self._bm25.add(rows, texts)
            self._rows.update(rows)
            self._pos = None
            self._passing.clear()

    def _remove_memory(self, rows: Iterable[int]) -> None:
        """Forget these rows: removed from a flat index; an HNSW graph keeps them, skipped, until rebuilt."""
        rows = [r for r in rows if r in self._rows]
        if rows:
            if self._hnsw:
                self._dead.update(rows)
                self._dead_sel = None
            else:
                self._index.remove_ids(faiss.IDSelectorBatch(np.asarray(rows, dtype=np.int64)))
                self._pos = None
            if self._bm25 is not None:
                self._bm25.remove(rows)
            self._rows.difference_update(rows)
            self._passing.clear()

    def _load(self) -> None:
        """Fill memory from the ``.faiss`` file when SQLite names it as current, else from SQLite."""
        self.db.execute("BEGIN")  # one snapshot for every read below
        try:
            self._load_snapshot()
        finally:
            self.db.execute("COMMIT")

    def _load_snapshot(self) -> None:
        self._version = self._data_version()
        self._foreign = None
        stored = {r[0] for r in self.db.execute("SELECT n FROM chunks")}
        index: Any = None
        if self._faiss_file_current():
            try:
                index = faiss.read_index(str(self.faiss_path))
            except RuntimeError as e:
                log.warning("cannot read %s (%s): building it from SQLite", self.faiss_path, e)
        elif "faiss" in self._mismatches(self.db, self._recorded(self.db)):
            log.warning(
                "%s is not the file its last run wrote (damaged?): building the vector index from SQLite; "
                "`mdrag index` writes it again",
                self.faiss_path,
            )
        held = set(faiss.vector_to_array(index.id_map).tolist()) if index is not None else set()
        if index is not None and index.d == self._dim and stored <= held:
            self._reset_memory()
            self._set_index(index)
            self._rows = held
            self._remove_memory(held - stored)  # rows an HNSW graph still held when it was saved
        else:
            if index is not None:
                log.warning("%s does not match %s: building it from SQLite", self.faiss_path, self.path)
            self._reset_memory()  # flat (exact): quick to fill; the next run's end_run builds the graph
            self._load_rows(None)

    def _bm25_index(self) -> Bm25:
        """The BM25 index of the rows in memory, built from SQLite the first time a search needs it."""
        if self._bm25 is None:
            t = time.perf_counter()
            bm25 = Bm25()
            cur = self.db.execute("SELECT n, bm25_text FROM chunks")
            while part := cur.fetchmany(4096):
                part = [(r, text) for r, text in part if r in self._rows]
                bm25.add([r for r, _ in part], [text for _, text in part])
            self._bm25 = bm25
            log.info("built the BM25 index of %d chunks in %.2f s", bm25.n, time.perf_counter() - t)
        return self._bm25

    def _load_rows(self, rows: list[int] | None) -> None:
        """Load these rows (all when None) from SQLite into memory."""
        if rows is None:
            cur = self.db.execute("SELECT n, vector, bm25_text FROM chunks")
            parts: Iterable[list[Any]] = iter(lambda: cur.fetchmany(4096), [])
        else:
            parts = (
                self.db.execute(f"SELECT n, vector, bm25_text FROM chunks WHERE n IN ({_marks(len(p))})", p).fetchall()  # noqa: S608
                for p in _batches(rows)
            )
        for part in parts:
            if part:
                vecs = np.frombuffer(b"".join(r[1] for r in part), dtype=np.float32).reshape(len(part), self._dim)
                self._add_memory([r[0] for r in part], vecs, [r[2] for r in part])

    def _data_version(self) -> int:
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    def _sync(self) -> None:
        """Load what other processes committed since memory last matched SQLite.

        Row numbers are never reused, so what changed is the difference between
        the rows in memory and the rows in SQLite.
        """
        if self._in_run:
            return  # this process is the writer: nobody else commits
        version = self._data_version()
        if version == self._version:
            return
        self.db.execute("BEGIN")  # one snapshot for every read below
        try:
            stored = self._stored_identity()
            self._foreign = stored if stored is not None and not self._same_model(stored) else None
            if stored is None or self._foreign:
                self._reset_memory()
            else:
                self._reconcile()
                if self._hnsw and len(self._dead) > len(self._rows) // 4 and self._faiss_file_current():
                    self._load_snapshot()  # the writer has rebuilt the graph without them: take its file
            self._version = version
        finally:
            self.db.execute("COMMIT")

    def _reconcile(self) -> None:
        """Make memory hold exactly the rows SQLite holds (row numbers are never reused: a set difference)."""
        rows = {r[0] for r in self.db.execute("SELECT n FROM chunks")}
        self._remove_memory(self._rows - rows)
        self._load_rows(sorted(rows - self._rows))

    def _positions(self) -> np.ndarray:
        """Row number -> position in the vector index (-1 when not there)."""
        if self._pos is None:
            ids = faiss.vector_to_array(self._index.id_map)
            pos = np.full(int(ids.max()) + 1 if len(ids) else 1, -1, dtype=np.int64)
            pos[ids] = np.arange(len(ids))
            self._pos = pos
        return self._pos

    def _xb(self) -> np.ndarray:
        """Every stored vector, by position: a view of the index's own storage."""
        inner: Any = faiss.downcast_index(self._index.index)
        flat: Any = faiss.downcast_index(inner.storage) if self._hnsw else inner
        n = flat.ntotal
        return faiss.rev_swig_ptr(flat.get_xb(), n * self._dim).reshape(n, self._dim)

    def _vectors(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self._xb()[self._positions()[rows]])

    def _nearest(self, q: np.ndarray, k: int, hide: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of the ``k`` nearest live chunks, less the ``hide`` rows: exact (flat) or HNSW."""
        params = None
        if self._hnsw:
            params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
            params.efSearch = max(_ef_search(len(self._rows)), k)
            if hide is not None:  # the graph's walk skips the dead and the hidden rows
                skip = faiss.IDSelectorBatch(np.union1d(np.asarray(sorted(self._dead), dtype=np.int64), hide))
                sel = (skip, faiss.IDSelectorNot(skip))  # the first must outlive the second
                params.sel = sel[1]
            elif self._dead:
                if self._dead_sel is None:
                    dead = faiss.IDSelectorBatch(np.asarray(sorted(self._dead), dtype=np.int64))
                    self._dead_sel = (dead, faiss.IDSelectorNot(dead))  # the first must outlive the second
                params.sel = self._dead_sel[1]
        elif hide is not None:  # flat: the nearest k + len(hide), less the hidden ones among them
            rows, sims = self._nearest(q, k + len(hide))
            keep = ~np.isin(rows, hide)
            return rows[keep][:k], sims[keep][:k]
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # this thread's setting: one query gains nothing from more, and waits for them
        try:
            dist, ids = self._index.search(q[None, :], min(k, len(self._rows)), params=params)
        finally:
            faiss.omp_set_num_threads(threads)
        keep = ids[0] >= 0
        return ids[0][keep], dist[0][keep]

    def _nearest_among(self, q: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosines) of the ``k`` nearest of these chunks, exactly."""
        pos = self._positions()[rows]
        if len(rows) * _GATHER <= self._index.ntotal:
            sims = self._xb()[pos] @ q
        else:  # most chunks pass: one product over all of them, then pick
            sims = (self._xb() @ q)[pos]
        top = np.argpartition(-sims, k - 1)[:k] if len(sims) > k else np.arange(len(sims))
        top = top[np.lexsort((rows[top], -sims[top]))]
        return rows[top], sims[top]

    # -- reads --------------------------------------------------------------
    def _read(self) -> sqlite3.Connection:
        try:
            self._sync()
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from e
        if self._foreign is not None:
            raise self._mismatch(self._foreign)
        return self.db

    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        with self._lock:
            db = self._read()
            found: dict[str, np.ndarray] = {}
            for part in _batches(sorted(set(hashes))):
                q = f"SELECT content_hash, vector FROM chunks WHERE content_hash IN ({_marks(len(part))})"  # noqa: S608
                for h, blob in db.execute(q, part):
                    found.setdefault(h, np.frombuffer(blob, dtype=np.float32).copy())
            return found

    def _where_roots(self, roots: Sequence[str] | None) -> tuple[str, list[str]]:
        if not roots:
            return "", []
        return f" WHERE root IN ({_marks(len(roots))})", list(roots)

    def all_ids(self, roots: Sequence[str] | None = None) -> set[str]:
        return set(self.id_paths(roots))

    def id_paths(self, roots: Sequence[str] | None = None) -> dict[str, str]:
        with self._lock:
            db = self._read()
            out: dict[str, str] = {}
            for part in _batches(list(roots)) if roots else [None]:
                where, params = self._where_roots(part)
                out.update(db.execute(f"SELECT id, path FROM chunks{where}", params).fetchall())  # noqa: S608
            return out

    def count(self, roots: Sequence[str] | None = None) -> int:
        with self._lock:
            db = self._read()
            total = 0
            for part in _batches(list(roots)) if roots else [None]:
                where, params = self._where_roots(part)
                total += int(db.execute(f"SELECT count(*) FROM chunks{where}", params).fetchone()[0])  # noqa: S608
            return total

    def roots(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._read().execute("SELECT DISTINCT root FROM chunks ORDER BY root")]

    def search_texts(self, share: int = 16) -> Iterator[str]:
        digits = "0123456789abcdef"[: max(1, min(share, 16))] if share < 16 else ""
        for prefix in digits or [""]:
            with self._lock:
                db = self._read()
                if prefix:
                    q = "SELECT bm25_text FROM chunks WHERE substr(id, 1, 1) = ?"
                    texts = [r[0] for r in db.execute(q, (prefix,))]
                else:
                    texts = [r[0] for r in db.execute("SELECT bm25_text FROM chunks")]
            yield from texts

    def _tags_lost(self) -> str | None:
        """Why the tag rows are not what the last run left (a tag filter would miss chunks), or None. Checked
        again only when the database changed (another connection's commit, or this one's: its counter)."""
        key = (self._data_version(), self._get("commits"))
        if self._tags_checked is None or self._tags_checked[0] != key:
            lost = self._mismatches(self.db, self._recorded(self.db), faiss_file=False).get("tags")
            self._tags_checked = (key, lost)
        return self._tags_checked[1]

    def _candidates(self, where: Filter) -> np.ndarray:
        """The row numbers of the chunks that pass ``where``: SQL with the values as parameters."""
        conds: list[str] = []
        params: list[Any] = []
        if where.path_prefix:
            field = "path" if where.path_prefix.startswith("/") else "rel_path"
            try:
                raw = where.path_prefix.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ConfigError(f"path prefixes must be valid Unicode text: {where.path_prefix!r}") from e
            # compared as bytes: SQLite's text functions stop at a NUL character
            conds.append(f"{field} >= ? AND substr(CAST({field} AS BLOB), 1, ?) = ?")
            params += [where.path_prefix, len(raw), raw]
            end = _prefix_end(where.path_prefix)
            if end is not None:
                conds.append(f"{field} < ?")
                params.append(end)
        lost = self._tags_lost() if where.tags and not self._in_run else None
        if lost:
            raise StoreDamagedError(f"The index store is damaged: {lost}. Run `mdrag index` to repair it.")
        for tag in where.tags:
            conds.append("n IN (SELECT n FROM tags WHERE tag = ?)")
            params.append(tag)
        if where.root:
            conds.append("root = ?")
            params.append(where.root)
        sql = "SELECT n FROM chunks" + (" WHERE " + " AND ".join(conds) if conds else "")
        try:
            rows = [r[0] for r in self.db.execute(sql, params)]
        except (UnicodeEncodeError, sqlite3.ProgrammingError) as e:
            raise ConfigError(f"filter values must be valid Unicode text: {e}") from e
        return np.asarray(rows, dtype=np.int64)

    def search(
        self,
        vector: np.ndarray,
        k: int,
        where: Filter | None = None,
        mode: str = "dense",
        text: str = "",
        hidden: frozenset[str] = frozenset(),
    ) -> list[Hit]:
        """The ``k`` best chunks passing ``where`` and not ``hidden``, exactly (see :class:`mdrag.store.base.Store`)."""
        if mode not in ("dense", "bm25"):
            raise ValueError(f"unknown store search mode {mode!r}: dense or bm25")
        try:
            return self._search(vector, k, where, mode, text, hidden)
        except sqlite3.ProgrammingError:
            raise
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from e

    def _hidden_rows(self, hidden: frozenset[str]) -> np.ndarray:
        """The row numbers of the ``hidden`` chunks, looked up only for the ids new since the last call."""
        known, rows = self._hidden
        if hidden is known:
            return rows
        if not known <= hidden:  # another run's set: looked up whole
            known, rows = frozenset(), np.zeros(0, dtype=np.int64)
        found = [
            r[0]
            for part in _batches(sorted(hidden - known))
            for r in self.db.execute(f"SELECT n FROM chunks WHERE id IN ({_marks(len(part))})", part)  # noqa: S608
        ]
        rows = np.union1d(rows, np.asarray(found, np.int64))
        self._hidden = (hidden, rows)
        return rows

    def _search(
        self, vector: np.ndarray, k: int, where: Filter | None, mode: str, text: str, hidden: frozenset[str]
    ) -> list[Hit]:
        with self._lock:
            self._read()
            q = _unit(np.asarray(vector, dtype=np.float32).reshape(-1))
            cand = None
            if where:
                cand = self._passing.get(where)
                if cand is None:
                    cand = self._candidates(where)
                    if len(self._passing) >= 64:
                        self._passing.clear()
                    self._passing[where] = cand
            hide = self._hidden_rows(hidden) if hidden else None
            if cand is not None and hide is not None:
                cand = np.setdiff1d(cand, hide, assume_unique=True)
            if k <= 0 or not self._rows or (cand is not None and len(cand) == 0):
                return []
            if mode == "bm25":
                allowed = None
                bm25 = self._bm25_index()
                if cand is not None:
                    allowed = np.zeros(max(len(bm25.alive), int(cand.max()) + 1), dtype=bool)
                    allowed[cand] = True
                elif hide is not None:
                    allowed = np.ones(max(len(bm25.alive), int(hide.max()) + 1), dtype=bool)
                    allowed[hide] = False
                query = self.prepare_text(text) if self.prepare_text else text
                ranked = bm25.search(query, k, allowed)
                rows = np.asarray([r for r, _ in ranked], dtype=np.int64)
                ranks = [s for _, s in ranked]
                cosines = (self._vectors(rows) @ q).tolist() if len(rows) else []
            elif cand is not None:
                rows, sims = self._nearest_among(q, cand, k)
                cosines = ranks = sims.tolist()
            else:
                rows, sims = self._nearest(q, k, hide)
                cosines = ranks = sims.tolist()
            return self._rows_out(rows, cosines, ranks)

    def _rows_out(self, rows: np.ndarray, cosines: list[float], ranks: list[float]) -> list[Hit]:
        """The rows' fields, from the row cache or SQLite, with their scores."""
        cache = self._row_cache
        wanted = rows.tolist()
        missing = [n for n in wanted if n not in cache]
        for part in _batches(missing):
            q = f"SELECT n, id, {_FIELDS} FROM chunks WHERE n IN ({_marks(len(part))})"  # noqa: S608
            for r in self.db.execute(q, part):
                row = dict(zip(("id", *ROW_FIELDS), r[1:]))
                row["headings"] = json.loads(row["headings"])
                row["metadata"] = json.loads(row["metadata"])
                cache[r[0]] = row
        out = []
        for n, cos, rank in zip(wanted, cosines, ranks):
            cache.move_to_end(n)
            row = cache[n]
            # its headings and metadata values are the cache's: read them, do not change them
            out.append(Hit(**row, score=float(cos), rank_score=float(rank)))
        while len(cache) > _ROW_CACHE:
            cache.popitem(last=False)
        return out


def _location(config: Config, name: str) -> str:
    """Where index ``name`` is kept: ``<cache>/faiss/<name>.sqlite``, as :meth:`FaissStore.from_config` puts it."""
    return str(config.cache_dir / "faiss" / f"{name}.sqlite")


def _owns(config: Config, name: str, recorded: str | None) -> str | None:
    """Index ``name`` is in FAISS when its manifest says so (an index without one goes to FAISS anyway)."""
    where = _location(config, name)
    if recorded is not None and same_location(recorded, where):
        return f"index {name!r} was built in FAISS ({where})"
    return None


#: This backend, as the ``mdrag.stores`` entry point ``faiss`` registers it (pyproject.toml).
BACKEND = StoreBackend(
    name="faiss", title="FAISS", store=FaissStore.from_config, location=_location, owns=_owns, new_indexes=True
)

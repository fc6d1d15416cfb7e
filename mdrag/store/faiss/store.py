"""Chunks in SQLite, vectors in a FAISS index held in memory: the ``faiss`` store backend.

Files, under ``<cache>/faiss/``: ``<index>.sqlite``, the source of truth (SQLite in WAL mode,
:mod:`mdrag.store.faiss.rows`); ``<index>.faiss``, the vector index (:mod:`mdrag.store.faiss.index`),
written at the end of each run with an atomic rename and named in SQLite by its sha256 in the same commit
(only a faster start: a missing, stale or damaged file is built again from SQLite); ``<index>.bm25``, the
BM25 index (:meth:`mdrag.store.bm25.Bm25.to_bytes`), written and named the same way by the same commit,
read by the first BM25 search of a process instead of every chunk's text (a missing, stale or damaged file,
or one of an index written before it existed, is built from SQLite); ``<index>.lock``, the writers' lock
(:mod:`filelock`). Nothing is pickled.

A store proves it is whole: each run records in ``meta`` what it left, and a digest with each vector
(:mod:`mdrag.store.faiss.vectors`). Opening checks the cheap records (:meth:`FaissStore.check`), ``mdrag
status --verify`` all of them, and :meth:`FaissStore.repair` builds the vector index, the tag rows and the
BM25 texts again from SQLite.

Reads never touch disk for ranking (:mod:`mdrag.store.faiss.memory`): dense search is exact below
``_HNSW_MIN`` chunks and with a filter, an HNSW graph from there; BM25 is an in-memory inverted index
(:class:`mdrag.store.bm25.Bm25`): SQLite's FTS5 ``bm25()`` scores every match, too slow for a search path
at 100k chunks (RESULTS.md, "Figures that were in code comments").

A run's writes are one SQLite transaction, held under the writers' lock from the first write to
:meth:`FaissStore.end_run`, which commits; a process killed mid-run leaves SQLite at its last commit, and
:meth:`FaissStore.close` without ``end_run`` rolls back. Other processes see a run once it is committed:
every read first asks SQLite whether another connection committed (``PRAGMA data_version``) and, if so,
loads what changed (row numbers are never reused, so the new and deleted rows are the set difference).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mdrag.errors import ModelMismatchError, StoreError, StoreInUseError, StoreUnavailableError
from mdrag.settings import INDEX_NAME_RULE, valid_index_name
from mdrag.store.base import Filter, Hit, Ranked
from mdrag.store.faiss import rows as sql
from mdrag.store.faiss import vectors as fv
from mdrag.store.faiss.index import VectorIndex, faiss_digest, unit
from mdrag.store.faiss.memory import Memory, bm25_query, picked, save_bm25, saved_bm25, store_mode
from mdrag.store.faiss.rows import batches, damaged, get_meta, set_meta
from mdrag.types import Chunk

if TYPE_CHECKING:
    import filelock

    from mdrag.config import Config

__all__ = ["FaissStore"]

T = TypeVar("T")

log = logging.getLogger(__name__)

# From this many chunks, dense search without a filter walks an HNSW graph (approximate, as Milvus's
# AUTOINDEX); below it, and with a filter, it is exact (see mdrag.store.faiss.index for its parameters).
_HNSW_MIN = 20_000
_LOCK_POLL_S = 0.05  # how often a writer waiting for another process's run tries its lock again


class FaissStore:
    """One index's chunks in SQLite, its vectors in a FAISS index held in memory (see the module docstring)."""

    lock_wait_s = 10.0  # how long a writer waits for another process's run to end before StoreInUseError

    def __init__(
        self, folder: str | Path, index: str, identity: dict[str, Any], prepare_text: Callable[[str], str] | None
    ) -> None:
        if not valid_index_name(index):  # a file name in the home: never a path
            raise StoreError(f"invalid index name {index!r}: use {INDEX_NAME_RULE}")
        self.folder = Path(folder).expanduser().absolute()  # SQLite URIs (read-only opens) need it absolute
        self.name = index
        self.path = self.folder / f"{index}.sqlite"  # the source of truth
        self.faiss_path = self.folder / f"{index}.faiss"  # the saved vector index: a faster start
        self.bm25_path = self.folder / f"{index}.bm25"  # the saved BM25 index: a faster first BM25 search
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
        self._file_lock: filelock.BaseFileLock | None = None  # the writers' lock, made on first use (see _writer)
        self._making = threading.Lock()  # guards its making
        self._db: sqlite3.Connection | None = None
        self._in_run = False  # a write transaction is open, and the writers' lock held
        self._version = -1  # PRAGMA data_version when memory last matched SQLite
        self._foreign: dict[str, Any] | None = None  # the identity of another model, found in SQLite by _sync
        self._mem = Memory(self._dim)  # the vectors, the BM25 index and caches over them
        self._left_out: set[int] = set()  # rows whose stored vector is damaged: never searched, re-embedded

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
        """Open the SQLite file, check the model identity, and load the vectors and BM25 index into memory;
        False when the index does not exist and ``create`` is False."""
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
            writable = sql.writable(self.folder, self.path)
            if create and not writable:
                raise StoreUnavailableError(
                    f"The FAISS store folder {self.folder} is read-only: mdrag can search it but not index "
                    "into it. Index where mdrag can write (MDRAG_HOME)."
                )
            try:
                if writable:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    self._db = sql.connect(self.path)
                else:
                    self._db = sql.connect_read_only(self.path)
                stored = sql.stored_identity(self.db)
                if stored is None:
                    if not create:
                        self.close()
                        return False
                    self._create()
                elif not sql.same_model(stored, self.identity):
                    if not replace_mismatch:
                        raise self._mismatch(stored)
                    log.warning("%s Rebuilding it now.", self._mismatch(stored))
                    self.drop()
                    self._create()
                self._load()
            except sqlite3.DatabaseError as e:
                self.close()
                raise damaged(self.path, e) from e
            except OSError as e:
                self.close()
                raise StoreError(
                    f"Cannot open the FAISS store {self.path}: {e}. Check that its folder is writable."
                ) from e
            except BaseException:
                self.close()
                raise
            return True

    def _mismatch(self, stored: dict[str, Any]) -> ModelMismatchError:
        return ModelMismatchError.between(self.name, stored, self.identity)

    def _create(self) -> None:
        self._begin()
        sql.create_tables(self.db)
        stored = sql.stored_identity(self.db)
        if stored is not None and not sql.same_model(stored, self.identity):  # another process created it meanwhile
            self.db.execute("ROLLBACK")
            self._end_write()
            raise self._mismatch(stored)
        set_meta(self.db, "identity", json.dumps(self.identity, sort_keys=True))
        self._commit(run=False)
        log.info("created the FAISS store %s (%d-d)", self.path, self._dim)

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
            self._mem = Memory(self._dim)
            self._tags_checked = None  # data_version counts per connection
            self._version = -1

    def drop(self) -> None:
        """Delete every chunk and the model identity, at once (committed)."""
        with self._lock, sql.writing(self.path):
            self._begin()
            self.db.execute("DELETE FROM chunks")
            sql.clear_tags(self.db)
            self.db.execute("DELETE FROM meta WHERE key != 'commits'")
            self._commit(run=False)
            self.faiss_path.unlink(missing_ok=True)
            self.bm25_path.unlink(missing_ok=True)
            self._reset_memory()

    def set_aside(self) -> Path | None:
        """Move the SQLite and FAISS files into ``<cache>/damaged/<index>-<time>/``; None when there are none."""
        with self._lock:
            self.close()
            self.bm25_path.unlink(missing_ok=True)  # built from the chunks' texts: nothing to keep
            return sql.set_aside(self.path, self.faiss_path, self.name)

    def rows_without_records(self) -> int:
        """The chunk rows of a store that lost the records naming its model (its meta table); 0 when none."""
        return sql.rows_held(self.path) if self._db is None and self.path.exists() else 0

    def unchanged_since_last_run(self) -> bool:
        """Whether SQLite's last commit was an :meth:`end_run` and the ``.faiss`` file is the one it wrote.

        Answered without opening the store (a read-only look at SQLite), so that a run
        with nothing to do loads nothing.
        """
        with self._lock:
            if self._in_run:
                return False
            if self._db is not None:
                return sql.last_commit_was_run(self._db, self.path, self.faiss_path, self._dim)
            return sql.last_commit_was_run(None, self.path, self.faiss_path, self._dim)

    def _mismatches(
        self, db: sqlite3.Connection, got: dict[str, str], thorough: bool = False, faiss_file: bool = True
    ) -> dict[str, str]:
        """What differs from what the last run recorded (see :func:`mdrag.store.faiss.rows.mismatches`)."""
        faiss = self.faiss_path if faiss_file else None
        return sql.mismatches(db, self.path, faiss, self._dim, got, thorough, self.prepare_text)

    def check(self, thorough: bool = False) -> list[str]:
        """What differs from what the last run recorded (see the module docstring), each naming the file; [] when
        whole. Cheap: the ``.faiss`` file's checksum and the row counts; ``thorough`` also reads every row."""
        with self._lock:
            db = self._read()
            try:
                return list(self._mismatches(db, sql.recorded(db), thorough).values())
            except sqlite3.DatabaseError as e:
                raise damaged(self.path, e) from e

    def repair(self, thorough: bool = False) -> tuple[list[str], set[str]]:
        """Build the vector index and the tag rows again from the stored vectors and metadata when they differ
        from what the last run recorded: what was repaired, and the ids of the chunks whose rows are suspect
        (a damaged vector or text, deleted; ``thorough``: tag rows and metadata that disagree), whose files the
        indexer indexes again; a changed BM25 text is made again from its chunk's text. Missing rows are the
        indexer's to repair, by its manifest (their tag rows go)."""
        with self._lock:
            db = self._read()
            try:
                found = self._mismatches(db, sql.recorded(db), thorough)
                suspect = sql.tag_differences(db) if found.keys() & {"tags", "tagged"} else set()
                left = (fv.bad_vectors(db, self._dim, self.path) if "vectors" in found else set()) | self._left_out
                bad = left | (sql.edited_texts(db) if "texts" in found else set())
                bm25 = sql.bm25_differences(db, self.prepare_text) if "bm25" in found else {}
                ids = {r[0] for n in batches(sorted(suspect | bad)) for r in sql.ids_of(db, n)}
                if left:  # their files are named before their rows are deleted
                    found["left"] = fv.said(db, left, self.path, "were damaged: embedded again")
            except sqlite3.DatabaseError as e:
                raise damaged(self.path, e) from e
            if bad or any(k in found for k in ("faiss", "tags", "rows", "tagged", "bm25")) or not sql.current(db):
                with sql.writing(self.path):
                    self._begin()
                    if bad:  # their files are indexed again; a damaged row must not be reused by content hash
                        self._delete_rows(sorted(bad))
                        self._left_out.clear()
                    if bm25:  # the BM25 index is built again from the texts written
                        sql.write_bm25_texts(self.db, {n: t for n, t in bm25.items() if n not in bad})
                        self._mem.bm25 = self._mem.saved_bm25 = None
                    sql.create_tables(self.db)  # a table or index that was dropped
                    sql.rebuild_tags(self.db)
                    self._mem.rebuild(self._mem.index.hnsw or len(self._mem.rows) >= _HNSW_MIN)
                    self._save_faiss()
                    self._commit(run=True)
            again = ": built again from the stored vectors and metadata"
            said = [found[k] + again for k in ("faiss", "tags", "tagged") if k in found]
            said += [found["bm25"] + ": made again from their text"] if "bm25" in found else []
            return said + ([found["left"]] if "left" in found else []), ids

    # -- writes -------------------------------------------------------------
    @property
    def _writer(self) -> filelock.BaseFileLock:
        """The writers' lock, made (and :mod:`filelock` imported) on first use: a search never takes it. Not
        thread-local: a run may start writing in one thread and end in another."""
        lock = self._file_lock
        if lock is None:
            with self._making:
                if self._file_lock is None:
                    import filelock

                    self._file_lock = filelock.FileLock(str(self.folder / f"{self.name}.lock"), thread_local=False)
                lock = self._file_lock
        return lock

    def _begin(self) -> None:
        """Start a write transaction under the writers' lock, unless one is open."""
        if self._in_run:
            return
        from filelock import Timeout

        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                # Waiting for another process's run, searches in this one go on (the lock is let go
                # meanwhile), but while open() loads the store.
                self._writer.acquire(timeout=self.lock_wait_s if self._opening else 0)
                break
            except Timeout:
                left = deadline - time.monotonic()
                if self._opening or left <= 0:
                    raise StoreInUseError(
                        f"The FAISS store {self.path} is being written by another process (a running `mdrag "
                        "index`, or `mdrag serve` updating it). Wait for it to finish, or stop it, and try again."
                    ) from None
                self._unlocked.wait(min(_LOCK_POLL_S, left))
        try:
            self._sync()  # what the previous writer committed
            sql.begin_write(self.db, self._dim, self.path)  # a store of an older release is upgraded
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
            commits = int(get_meta(self.db, "commits") or 0) + 1
            set_meta(self.db, "commits", commits)
            if run:
                set_meta(self.db, "run_commit", commits)
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
            vecs = unit(np.asarray(vectors)[keep]) if keep else np.zeros((0, self._dim), np.float32)
            with sql.writing(self.path):
                self._begin()
                with self._undo_on_error():
                    self._insert(chunks, vecs)

    def _insert(self, chunks: Sequence[Chunk], vecs: np.ndarray) -> None:
        self._delete_rows(sql.rows_of(self.db, [c.id for c in chunks]))
        rows: list[int] = []
        texts: list[str] = []
        for c, v in zip(chunks, vecs):
            bm25 = self.prepare_text(c.embed_text) if self.prepare_text else c.embed_text
            rows.append(sql.insert(self.db, c, v, bm25))
            texts.append(bm25)
        self._add_memory(rows, vecs, texts)

    def delete_ids(self, ids: Iterable[str]) -> None:
        wanted = sorted(set(ids))
        with self._lock:
            rows = sql.rows_of(self.db, wanted)
            if rows:
                with sql.writing(self.path):
                    if not self._in_run:  # the run starts here: another process may commit before it is ours
                        self._begin()
                        rows = sql.rows_of(self.db, wanted)
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

    def _delete_rows(self, rows: list[int]) -> None:
        if not rows:
            return
        sql.delete_rows(self.db, rows)
        self._mem.remove(rows)

    def end_run(self, written: set[str], live: set[str], whole: bool) -> None:
        """Choose and tidy the vector index, save it (atomic rename), record it, and commit the run."""
        with self._lock, sql.writing(self.path):
            self._begin()
            live_rows = len(self._mem.rows)
            hnsw = live_rows >= _HNSW_MIN
            if (hnsw and not self._mem.index.hnsw) or (self._mem.index.hnsw and live_rows < _HNSW_MIN // 2):
                self._mem.rebuild(hnsw)
            elif self._mem.index.hnsw and len(self._mem.index.dead) > live_rows // 4:
                self._mem.rebuild(True)  # drop the deleted vectors the graph still holds
            self._save_faiss()
            self._commit(run=True)

    def _save_faiss(self) -> None:
        """Write the ``.faiss`` and ``.bm25`` files and note in SQLite (same transaction) which files they are."""
        saved = self._mem.index.save(self.faiss_path)
        set_meta(self.db, "faiss_file", faiss_digest(self.faiss_path) if saved else "")
        set_meta(self.db, "bm25_file", save_bm25(self._mem.bm25_index(self.db), self.bm25_path))
        sql.record_run(self.db)

    def _faiss_file_current(self) -> bool:
        recorded = get_meta(self.db, "faiss_file")
        return bool(recorded) and recorded == faiss_digest(self.faiss_path)

    # -- memory ---------------------------------------------------------------
    @property
    def _dim(self) -> int:
        return int(self.identity["dimension"])

    def _reset_memory(self, hnsw: bool = False) -> None:
        self._mem = Memory(self._dim, hnsw)  # row numbers start again in a new file

    def _add_memory(self, rows: list[int], vecs: np.ndarray, texts: list[str]) -> None:
        self._mem.add(rows, vecs, texts)

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
        index: VectorIndex | None = None
        if self._faiss_file_current():
            index = VectorIndex.read(self.faiss_path)
        elif "faiss" in self._mismatches(self.db, sql.recorded(self.db)):
            log.warning(
                "%s is not the file its last run wrote (damaged?): building the vector index from SQLite; "
                "`mdrag index` writes it again",
                self.faiss_path,
            )
        held = index.ids() if index is not None else set()
        if index is not None and index.dim == self._dim and stored <= held:
            self._mem = Memory(self._dim, index=index)
            self._mem.rows = held
            self._mem.remove(held - stored)  # rows an HNSW graph still held when it was saved
        else:
            if index is not None:
                log.warning("%s does not match %s: building it from SQLite", self.faiss_path, self.path)
            self._reset_memory()  # flat (exact): quick to fill; the next run's end_run builds the graph
            self._load_rows(None)
        # memory holds this snapshot's rows: the .bm25 file its last run saved holds the same
        self._mem.saved_bm25 = saved_bm25(self.bm25_path, get_meta(self.db, "bm25_file"))

    def _load_rows(self, rows: list[int] | None) -> None:
        """Load these rows (all when None) from SQLite into memory."""
        for part, vecs, texts in fv.vector_rows(self.db, rows, self._dim, self._left_out, self.path):
            self._add_memory(part, vecs, texts)

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
            stored = sql.stored_identity(self.db)
            self._foreign = stored if stored is not None and not sql.same_model(stored, self.identity) else None
            if stored is None or self._foreign:
                self._reset_memory()
            else:
                self._reconcile()
                if (
                    self._mem.index.hnsw
                    and len(self._mem.index.dead) > len(self._mem.rows) // 4
                    and self._faiss_file_current()
                ):
                    self._load_snapshot()  # the writer has rebuilt the graph without them: take its file
            self._version = version
        finally:
            self.db.execute("COMMIT")

    def _reconcile(self) -> None:
        """Make memory hold exactly the rows SQLite holds (row numbers are never reused: a set difference)."""
        rows = {r[0] for r in self.db.execute("SELECT n FROM chunks")}
        self._mem.remove(self._mem.rows - rows)
        self._load_rows(sorted(rows - self._mem.rows - self._left_out))

    # -- reads --------------------------------------------------------------
    def _read(self) -> sqlite3.Connection:
        try:
            self._sync()
        except sqlite3.DatabaseError as e:
            raise damaged(self.path, e) from e
        if self._foreign is not None:
            raise self._mismatch(self._foreign)
        return self.db

    @contextmanager
    def _reads(self) -> Iterator[None]:
        """Under the lock; a page SQLite cannot read is the store's damage, said as every read says it."""
        with self._lock:
            try:
                yield
            except sqlite3.DatabaseError as e:
                raise damaged(self.path, e) from e

    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        with self._reads():
            return fv.vectors_by_hash(self._read(), hashes, self._dim)

    def all_ids(self, roots: Sequence[str] | None = None) -> set[str]:
        return set(self.id_paths(roots))

    def id_paths(self, roots: Sequence[str] | None = None) -> dict[str, str]:
        with self._reads():
            return sql.id_paths(self._read(), roots)

    def count(self, roots: Sequence[str] | None = None) -> int:
        with self._reads():
            return sql.count(self._read(), roots)

    def roots(self) -> list[str]:
        with self._reads():
            return [r[0] for r in self._read().execute("SELECT DISTINCT root FROM chunks ORDER BY root")]

    def search_texts(self, share: int = 16) -> Iterator[str]:
        digits = "0123456789abcdef"[: max(1, min(share, 16))] if share < 16 else ""
        for prefix in digits or [""]:
            with self._lock:
                texts = sql.search_texts(self._read(), prefix)
            yield from texts

    def _tags_lost(self) -> str | None:
        """Why the tag rows are not what the last run left (a tag filter would miss chunks), or None. Checked
        again only when the database changed (another connection's commit, or this one's: its counter)."""
        key = (self._data_version(), get_meta(self.db, "commits"))
        if self._tags_checked is None or self._tags_checked[0] != key:
            lost = self._mismatches(self.db, sql.recorded(self.db), faiss_file=False).get("tags")
            self._tags_checked = (key, lost)
        return self._tags_checked[1]

    def _candidates(self, where: Filter) -> np.ndarray:
        """The row numbers of the chunks that pass ``where`` (see :func:`mdrag.store.faiss.rows.candidates`)."""
        return sql.candidates(self.db, where, lambda: None if self._in_run else self._tags_lost())

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
        asked = (vector, k, where, self._candidates, store_mode(mode), bm25_query(self.prepare_text, text), hidden)
        return self._searching(lambda: self._mem.search(self.db, *asked))

    def ranked(
        self,
        vector: np.ndarray,
        k: int,
        where: Filter | None = None,
        mode: str = "dense",
        text: str = "",
        hidden: frozenset[str] = frozenset(),
    ) -> Ranked:
        """What :meth:`search` returns, its rows read from SQLite (or the cache) only when a search asks."""
        asked = (vector, k, where, self._candidates, store_mode(mode), bm25_query(self.prepare_text, text), hidden)
        rows, cos, ranks = self._searching(lambda: self._mem.ranked(self.db, *asked))
        read = lambda *a: self._searching(lambda: self._mem.row_cache.read(self.db, *picked(rows, cos, a)))  # noqa: E731
        return Ranked(rows.tolist(), np.asarray(cos), np.asarray(ranks), read)

    def _searching(self, call: Callable[[], T]) -> T:
        """``call()`` under the lock, on what SQLite holds now; a page SQLite cannot read is the store's damage."""
        try:
            with self._lock:
                self._read()
                return call()
        except sqlite3.ProgrammingError:
            raise
        except sqlite3.DatabaseError as e:
            raise damaged(self.path, e) from e

"""The FAISS store's SQLite file (see :mod:`mdrag.store.faiss`): its schema, its errors in mdrag's words,
the ``meta`` records a run leaves and the checks against them, and the reads.

One row per chunk in ``chunks``: its fields, ``headings`` and ``metadata`` as
JSON, the text BM25 ranks, its vector as a float32 blob and that vector's digest
(:mod:`mdrag.store.faiss.vectors`, which checks them) and the number of its
set of tags; each set of tags once in ``tagsets``, and a ``tags`` table listing
each set's tags for tag filters (:mod:`mdrag.store.faiss.tagsets`); a ``meta``
table holding the model identity, a commit counter and what the last run left
(the ``.faiss`` file's sha256, the counts of chunk and tag rows, digests of the
chunk ids and of the tags and their sets).
Every value goes to SQLite as a parameter, never as SQL text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from mdrag.errors import ConfigError, StoreDamagedError, StoreError, StoreInUseError, StoreUnavailableError
from mdrag.store.base import ROW_FIELDS, Filter, Hit, bm25_text, holds_its_bm25, holds_its_text, same_embedder
from mdrag.store.bm25 import Bm25
from mdrag.store.faiss import tagsets
from mdrag.store.faiss import vectors as faiss_vectors
from mdrag.store.faiss.index import faiss_digest
from mdrag.types import Chunk

log = logging.getLogger(__name__)

_BATCH = 500  # values per SQL `IN (...)` list
_ROW_CACHE = 16384  # decoded rows kept for search results (a hybrid search reads a few hundred)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    n INTEGER PRIMARY KEY AUTOINCREMENT,  -- the FAISS id, never reused: readers diff by it
    id TEXT NOT NULL UNIQUE,
    text TEXT NOT NULL, context TEXT NOT NULL, path TEXT NOT NULL, rel_path TEXT NOT NULL,
    root TEXT NOT NULL, headings TEXT NOT NULL, level INTEGER NOT NULL, position INTEGER NOT NULL,
    page INTEGER NOT NULL, line_start INTEGER NOT NULL, line_end INTEGER NOT NULL,
    content_hash TEXT NOT NULL, metadata TEXT NOT NULL, bm25_text TEXT NOT NULL, vector BLOB NOT NULL,
    vector_digest BLOB,  -- see mdrag.store.faiss.vectors (a store written before it gets it at its next write)
    tagset INTEGER NOT NULL DEFAULT 0  -- its set of tags (tagsets.n), 0 for none (mdrag.store.faiss.tagsets)
);
CREATE INDEX IF NOT EXISTS chunks_hash ON chunks (content_hash);
CREATE INDEX IF NOT EXISTS chunks_root ON chunks (root);
CREATE INDEX IF NOT EXISTS chunks_path ON chunks (path);
CREATE INDEX IF NOT EXISTS chunks_rel_path ON chunks (rel_path);
CREATE INDEX IF NOT EXISTS chunks_tagset ON chunks (tagset);
CREATE TABLE IF NOT EXISTS tagsets (
    n INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL UNIQUE, tags TEXT NOT NULL
);
-- n: a set of tags (tagsets.n), or in a store of an older release not yet written, a chunk (chunks.n)
CREATE TABLE IF NOT EXISTS tags (tag TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (tag, n)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_n ON tags (n);
"""
FIELDS = ", ".join(ROW_FIELDS)


def create_tables(db: sqlite3.Connection) -> None:
    """Create the tables and indexes that are missing (all IF NOT EXISTS); in a write transaction."""
    for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
        db.execute(statement)


def begin_write(db: sqlite3.Connection, dim: int, path: Path) -> None:
    """Begin a write transaction, upgrading a store of an older release (:func:`faiss_vectors.begin_write`,
    :func:`tagsets.upgrade`)."""
    faiss_vectors.begin_write(db, dim, path)
    if tagsets.upgrade(db, path) and get_meta(db, "commits") == get_meta(db, "run_commit"):
        record_run(db)  # what its last run left, in the new form


# -- errors -------------------------------------------------------------------
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


def write_error(path: Path, e: Exception) -> StoreError:
    """A failed write of the store ``path`` as mdrag says it: a full disk, a read-only folder, or the SQLite
    error."""
    if _disk_full(e):
        return StoreError(
            f"Cannot write the FAISS store {path}: the disk is full ({e}). Free some space on that "
            "disk and run `mdrag index` again: what was indexed is kept, and that run repairs the rest."
        )
    if isinstance(e, sqlite3.OperationalError) and "readonly" in str(e):
        return StoreUnavailableError(
            f"The FAISS store {path} is read-only ({e}): mdrag can search it but not index into it. "
            "Index where mdrag can write (MDRAG_HOME)."
        )
    return StoreError(f"Cannot write the FAISS store {path}: {e}")


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """SQLite errors of a write call to the store ``path``, said as :func:`write_error` says them."""
    try:
        yield
    except sqlite3.Error as e:
        raise write_error(path, e) from e


def damaged(path: Path, e: Exception) -> StoreError:
    """A failed read of the store ``path`` as mdrag says it: a full disk, a folder it may not write, a lock,
    or damage."""
    if _disk_full(e):
        return write_error(path, e)
    if isinstance(e, sqlite3.OperationalError) and ("readonly" in str(e) or "unable to open" in str(e)):
        return StoreUnavailableError(
            f"Cannot open the FAISS store {path} for writing ({e}). Check that its folder exists and "
            "is writable, or set MDRAG_HOME to a folder mdrag may write."
        )
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return StoreInUseError(
            f"The FAISS store {path} is locked by another process (a running `mdrag index`?). "
            "Wait for it to finish, or stop it, and try again."
        )
    return StoreDamagedError(
        f"The index store is damaged: SQLite cannot read {path} ({_damage_kind(e)}). `mdrag index "
        "--rebuild` moves it aside (into the cache's damaged/ folder) and builds the index again from its folders."
    )


# -- SQL helpers ----------------------------------------------------------------
def batches(values: Sequence[Any], size: int = _BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def marks(n: int) -> str:
    return ",".join("?" * n)


def tags_of(metadata: dict[str, Any]) -> set[str]:
    """The tags a chunk carries, as :meth:`Filter.matches` reads them."""
    return tagsets.tags_in(metadata.get("tags"))


def _prefix_end(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: no such bound)."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF:
        return None
    nxt = last + 1 if last + 1 != 0xD800 else 0xE000  # skip the surrogates, which UTF-8 cannot hold
    return prefix[:-1] + chr(nxt)


# -- meta and identity ----------------------------------------------------------
def set_meta(db: sqlite3.Connection, key: str, value: Any) -> None:
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(value)))


def get_meta(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def stored_identity(db: sqlite3.Connection) -> dict[str, Any] | None:
    """The model identity the store was built with; None when it has none (a new or emptied store)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" not in tables:
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
    return json.loads(row[0]) if row else None


def same_model(stored: dict[str, Any], identity: dict[str, Any]) -> bool:
    return same_embedder(stored, identity)


# -- integrity: what a run records, and the checks against it ----------------------
def _ids_digest(db: sqlite3.Connection) -> str:
    """sha256 of the chunk ids, sorted."""
    digest = hashlib.sha256()
    for (cid,) in db.execute("SELECT id FROM chunks ORDER BY id"):
        digest.update(cid.encode() + b"\n")
    return digest.hexdigest()


def _tags_digest(db: sqlite3.Connection) -> str:
    """sha256 of the tag rows, in their primary key's order, then of the sets of tags (a read of those two
    tables only)."""
    digest = hashlib.sha256()
    for tag, n in db.execute("SELECT tag, n FROM tags ORDER BY tag, n"):
        digest.update(f"{tag}\0{n}\n".encode())
    if tagsets.grouped(db):
        for n, set_digest, value in db.execute("SELECT n, digest, tags FROM tagsets ORDER BY n"):
            digest.update(f"{n}\0{set_digest}\0{value}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _tag_rows(db: sqlite3.Connection) -> Iterator[tuple[str, int]]:
    """The rows the tags table should hold: (tag, set number) for each set's tags; in a store of an older
    release, (tag, row number) for each chunk's tags (its metadata)."""
    if tagsets.grouped(db):
        yield from tagsets.expected_rows(db)
        return
    for n, metadata in db.execute("SELECT n, metadata FROM chunks"):
        for tag in tags_of(json.loads(metadata)):
            yield tag, n


def rebuild_tags(db: sqlite3.Connection) -> None:
    """The tag rows again, from the sets of tags (from the chunks' metadata in a store of an older release)."""
    if tagsets.grouped(db):
        tagsets.rebuild(db)
        return
    db.execute("DELETE FROM tags")
    db.executemany("INSERT INTO tags (tag, n) VALUES (?, ?)", _tag_rows(db))


def clear_tags(db: sqlite3.Connection) -> None:
    """Delete every tag row and set of tags."""
    db.execute("DELETE FROM tags")
    if tagsets.grouped(db):
        db.execute("DELETE FROM tagsets")


def record_run(db: sqlite3.Connection) -> None:
    """Note in SQLite (same transaction) what the run leaves: the counts of chunk and tag rows, and a
    digest of the chunk ids (see :meth:`FaissStore.check`)."""
    set_meta(db, "rows", db.execute("SELECT count(*) FROM chunks").fetchone()[0])
    set_meta(db, "tag_rows", db.execute("SELECT count(*) FROM tags").fetchone()[0])
    set_meta(db, "ids", _ids_digest(db))
    set_meta(db, "tags_digest", _tags_digest(db))


def recorded(db: sqlite3.Connection) -> dict[str, str]:
    """What the last commit recorded in ``meta`` (see :func:`record_run`), with its commit counters."""
    keys = ("commits", "run_commit", "faiss_file", "rows", "tag_rows", "ids", "tags_digest")
    return dict(db.execute(f"SELECT key, value FROM meta WHERE key IN ({marks(len(keys))})", keys))  # noqa: S608


def mismatches(
    db: sqlite3.Connection,
    path: Path,
    faiss_file: Path | None,
    dim: int,
    got: dict[str, str],
    thorough: bool = False,
    prepare: Callable[[str], str] | None = None,
) -> dict[str, str]:
    """What differs in the store ``path`` from what the last run recorded, by kind ("faiss", "rows", "tags",
    "ids", "sqlite"; ``thorough``: also "tagged", "vectors", "texts", "bm25"): a message naming the file. Empty
    after a commit that was not a run's end. ``faiss_file``: the ``.faiss`` file whose checksum to check (a read
    of the whole file), or None. ``prepare``: what the store applies to BM25 texts (see :func:`bm25_differences`)."""
    if got.get("commits") is None or got.get("commits") != got.get("run_commit"):
        return {}
    found: dict[str, str] = {}
    recorded = got.get("faiss_file", "")
    if faiss_file is not None and recorded.startswith("sha256:") and recorded != faiss_digest(faiss_file):
        found["faiss"] = f"the vector index file {faiss_file} is missing or damaged (not the file its run wrote)"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for kind, table, key in (("rows", "chunks", "rows"), ("tags", "tags", "tag_rows")):
        if table not in tables:
            found[kind] = f"the {table} table of {path} is missing"
            continue
        held = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608
        if key in got and held != int(got[key]):
            found[kind] = f"the {table} table of {path} holds {held} rows, its last run left {got[key]}"
    if "tags" not in found and "tags_digest" in got and got["tags_digest"] != _tags_digest(db):
        found["tags"] = f"the tags table of {path} is not the one its last run left"
    if thorough and not found.keys() & {"rows", "tags"}:
        found.update(_thorough_mismatches(db, path, dim, got, prepare))
    return found


def _thorough_mismatches(
    db: sqlite3.Connection, path: Path, dim: int, got: dict[str, str], prepare: Callable[[str], str] | None
) -> dict[str, str]:
    """What only a read of every row finds: SQLite's own check, the chunk ids, the tag rows, the vectors, the
    texts against their content hash and the BM25 texts against the texts."""
    found: dict[str, str] = {}
    check = [r[0] for r in db.execute("PRAGMA quick_check")]
    if check != ["ok"]:  # not repaired from the data: some of it cannot be read
        raise StoreDamagedError(
            f"The index store is damaged: SQLite's check finds damaged pages in {path}. `mdrag index "
            "--rebuild` moves it aside (into the cache's damaged/ folder) and builds the index again from its "
            "folders."
        )
    if "ids" in got and got["ids"] != _ids_digest(db):
        found["ids"] = f"the chunk ids in {path} are not the ones its last run left"
    if tag_differences(db):
        found["tagged"] = f"the tags table of {path} does not match the chunks' metadata"
    if bad := faiss_vectors.bad_vectors(db, dim, path):
        found["vectors"] = faiss_vectors.said(db, bad, path, "are damaged (not the vectors their run stored)")
    if edited := edited_texts(db):
        found["texts"] = f"the text of {len(edited)} chunk(s) in {path} is not the text its run stored (edited)"
    if bm25 := bm25_differences(db, prepare):
        found["bm25"] = f"the BM25 text of {len(bm25)} chunk(s) in {path} is not their text as BM25 reads it (changed)"
    return found


def bm25_differences(db: sqlite3.Connection, prepare: Callable[[str], str] | None) -> dict[int, str]:
    """The rows whose BM25 text is not their text and context as BM25 reads them (``prepare``: the stemming the
    store applies), each with the text it should hold."""
    bad: dict[int, str] = {}
    cur = db.execute("SELECT n, context, text, bm25_text FROM chunks")
    while part := cur.fetchmany(4096):
        for n, ctx, text, bm25 in part:
            if not holds_its_bm25(bm25, text, ctx, prepare):
                bad[n] = bm25_text(text, ctx, prepare)
    return bad


def write_bm25_texts(db: sqlite3.Connection, texts: dict[int, str]) -> None:
    """Write these rows' BM25 texts again (see :func:`bm25_differences`)."""
    db.executemany("UPDATE chunks SET bm25_text = ? WHERE n = ?", [(t, n) for n, t in texts.items()])


def edited_texts(db: sqlite3.Connection) -> set[int]:
    """The row numbers whose text (with its context) no longer has the content hash its run recorded."""
    bad: set[int] = set()
    cur = db.execute("SELECT n, context, text, content_hash FROM chunks")
    while part := cur.fetchmany(4096):
        bad.update(n for n, ctx, text, digest in part if not holds_its_text(text, ctx, digest))
    return bad


def tag_differences(db: sqlite3.Connection) -> set[int]:
    """The row numbers of the chunks whose tags may be wrong: their set's tag rows differ from the set, or
    the set is not what was written (in a store of an older release: whose tag rows differ from their
    metadata). Either may be the damaged one."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    held = set(db.execute("SELECT tag, n FROM tags")) if "tags" in tables else set()  # a lost table: built again
    differ = {n for _, n in held ^ set(_tag_rows(db))}
    if not tagsets.grouped(db):
        return differ
    return tagsets.holders(db, differ | tagsets.unsound(db))


# -- reads ------------------------------------------------------------------------
def ids_of(db: sqlite3.Connection, rows: Sequence[int]) -> list[tuple[str]]:
    return db.execute(f"SELECT id FROM chunks WHERE n IN ({marks(len(rows))})", list(rows)).fetchall()  # noqa: S608


def rows_of(db: sqlite3.Connection, ids: Sequence[str]) -> list[int]:
    """The row numbers of the chunks with these ids."""
    out: list[int] = []
    for part in batches(ids):
        out += [r[0] for r in db.execute(f"SELECT n FROM chunks WHERE id IN ({marks(len(part))})", part)]  # noqa: S608
    return out


def _where_roots(roots: Sequence[str] | None) -> tuple[str, list[str]]:
    if not roots:
        return "", []
    return f" WHERE root IN ({marks(len(roots))})", list(roots)


def id_paths(db: sqlite3.Connection, roots: Sequence[str] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in batches(list(roots)) if roots else [None]:
        where, params = _where_roots(part)
        out.update(db.execute(f"SELECT id, path FROM chunks{where}", params).fetchall())  # noqa: S608
    return out


def count(db: sqlite3.Connection, roots: Sequence[str] | None = None) -> int:
    total = 0
    for part in batches(list(roots)) if roots else [None]:
        where, params = _where_roots(part)
        total += int(db.execute(f"SELECT count(*) FROM chunks{where}", params).fetchone()[0])  # noqa: S608
    return total


def candidates(db: sqlite3.Connection, where: Filter, tags_lost: Callable[[], str | None]) -> np.ndarray:
    """The row numbers of the chunks that pass ``where``: SQL with the values as parameters. ``tags_lost``:
    why the tag rows cannot be trusted (a tag filter would miss chunks), or None."""
    conds: list[str] = []  # the file's place (path_prefix, root), then its tags: all must hold
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
    if where.root:
        conds.append("root = ?")
        params.append(where.root)
    if conds and where.paths:  # or the file is one of these
        conds = [f"(({' AND '.join(conds)}) OR path IN ({marks(len(where.paths))}))"]
        params += list(where.paths)
    lost = tags_lost() if where.tags else None
    if lost:
        raise StoreDamagedError(f"The index store is damaged: {lost}. Run `mdrag index` to repair it.")
    column = "tagset" if where.tags and tagsets.grouped(db) else "n"  # n: a store of an older release
    for tag in where.tags:
        conds.append(f"{column} IN (SELECT n FROM tags WHERE tag = ?)")
        params.append(tag)
    sql = "SELECT n FROM chunks" + (" WHERE " + " AND ".join(conds) if conds else "")
    try:
        rows = [r[0] for r in db.execute(sql, params)]
    except (UnicodeEncodeError, sqlite3.ProgrammingError) as e:
        raise ConfigError(f"filter values must be valid Unicode text: {e}") from e
    return np.asarray(rows, dtype=np.int64)


class RowCache:
    """Decoded rows by row number, most recently returned last. A row number names one content for good
    (never reused) except after a rollback, which clears this cache."""

    def __init__(self) -> None:
        self.rows: OrderedDict[int, dict[str, Any]] = OrderedDict()  # row number -> its fields, decoded

    def clear(self) -> None:
        self.rows.clear()

    def hits(self, db: sqlite3.Connection, rows: np.ndarray, cosines: list[float], ranks: list[float]) -> list[Hit]:
        """The rows' fields, from the cache or SQLite, with their scores."""
        wanted = rows.tolist()
        nones = [None] * len(wanted)
        return [h for h in self.read(db, wanted, cosines, ranks, nones, nones) if h is not None]

    def read(
        self,
        db: sqlite3.Connection,
        wanted: Sequence[int],
        cosines: Sequence[float],
        ranks: Sequence[float],
        dense: Sequence[int | None],
        bm25: Sequence[int | None],
    ) -> list[Hit | None]:
        """The rows numbered ``wanted``, from the cache or SQLite, with their scores and ranks; None for a row
        that SQLite no longer holds."""
        cache = self.rows
        missing = [n for n in wanted if n not in cache]
        set_of: dict[int, int] = {}  # row number -> its set of tags
        column = "tagset" if missing and tagsets.grouped(db) else "0"  # 0: a store of an older release
        for part in batches(missing):
            q = f"SELECT n, id, {FIELDS}, {column} FROM chunks WHERE n IN ({marks(len(part))})"  # noqa: S608
            for r in db.execute(q, part):
                row = dict(zip(("id", *ROW_FIELDS), r[1:-1]))
                row["headings"] = json.loads(row["headings"])
                row["metadata"] = json.loads(row["metadata"])
                cache[r[0]] = row
                set_of[r[0]] = r[-1]
        sets = tagsets.values(db, set_of.values())
        for n, s in set_of.items():
            if s in sets:
                cache[n]["metadata"]["tags"] = sets[s]
        out: list[Hit | None] = []
        for n, cos, rank, d, b in zip(wanted, cosines, ranks, dense, bm25):
            held = cache.get(n)
            if held is None:
                out.append(None)
                continue
            cache.move_to_end(n)
            # its headings and metadata values are the cache's: read them, do not change them
            out.append(Hit(**held, score=float(cos), rank_score=float(rank), dense_rank=d, bm25_rank=b))
        while len(cache) > _ROW_CACHE:
            cache.popitem(last=False)
        return out


# -- the file -----------------------------------------------------------------------
def writable(folder: Path, path: Path) -> bool:
    """Whether this process may write the store's folder (or create it) and its SQLite file."""
    if path.exists():
        return os.access(folder, os.W_OK) and os.access(path, os.W_OK)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the folder is created: its first existing parent must be writable
    return os.access(folder, os.W_OK)


def connect(path: Path) -> sqlite3.Connection:
    """SQLite opened for writing, in WAL mode (one connection for every thread: callers hold a lock)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back after a large run
    return db


def connect_read_only(path: Path) -> sqlite3.Connection:
    """SQLite opened read-only, for searching a store in a folder this process may not write (a
    read-only home or mount): SQLite cannot create its shared-memory file there, so the file is
    opened as immutable, unless a write-ahead log is left beside it (a writer that did not close),
    whose commits are read too."""
    wal = Path(f"{path}-wal").exists()
    uri = f"{path.as_uri()}?mode=ro" + ("" if wal else "&immutable=1")
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)


# -- writes -------------------------------------------------------------------------
def insert(db: sqlite3.Connection, c: Chunk, v: np.ndarray, bm25: str) -> int:
    """Insert chunk ``c`` with its vector (and that vector's digest), its BM25 text and its tag rows: its new
    row number."""
    blob = v.tobytes()
    metadata, tagset = tagsets.put(db, c.metadata)
    cur = db.execute(
        f"INSERT INTO chunks (id, {FIELDS}, bm25_text, vector, {faiss_vectors.COLUMN}, tagset) "  # noqa: S608
        f"VALUES ({marks(len(ROW_FIELDS) + 5)})",
        (
            c.id, c.text, c.context, c.path, c.rel_path, c.root, json.dumps(list(c.heading_path)),
            c.level, c.position, c.page or 0, c.line_start or 0, c.line_end or 0, c.content_hash,
            metadata, bm25, blob, faiss_vectors.digest(c.content_hash, blob), tagset,
        ),
    )  # fmt: skip
    return int(cur.lastrowid or 0)


def delete_rows(db: sqlite3.Connection, rows: list[int]) -> None:
    """Delete these rows, and the sets of tags no other row holds."""
    for part in batches(rows):
        q = f"SELECT DISTINCT tagset FROM chunks WHERE n IN ({marks(len(part))})"  # noqa: S608
        sets = [r[0] for r in db.execute(q, part)]
        db.execute(f"DELETE FROM chunks WHERE n IN ({marks(len(part))})", part)  # noqa: S608
        tagsets.drop_unused(db, sets)


# -- what memory is built from ------------------------------------------------------
def bm25_index(db: sqlite3.Connection, rows: set[int]) -> Bm25:
    """The BM25 index of these rows' texts."""
    t = time.perf_counter()
    bm25 = Bm25()
    cur = db.execute("SELECT n, bm25_text FROM chunks")
    while part := cur.fetchmany(4096):
        part = [(r, text) for r, text in part if r in rows]
        bm25.add([r for r, _ in part], [text for _, text in part])
    log.info("built the BM25 index of %d chunks in %.2f s", bm25.n, time.perf_counter() - t)
    return bm25


def search_texts(db: sqlite3.Connection, prefix: str) -> list[str]:
    """The BM25 texts of the chunks whose id starts with ``prefix`` (all when "")."""
    if prefix:
        q = "SELECT bm25_text FROM chunks WHERE substr(id, 1, 1) = ?"
        return [r[0] for r in db.execute(q, (prefix,))]
    return [r[0] for r in db.execute("SELECT bm25_text FROM chunks")]


def last_commit_was_run(db: sqlite3.Connection | None, path: Path, faiss_path: Path, dim: int) -> bool:
    """Whether the store's last commit was a run's end, whose records still match its files. ``db``: its
    connection, or None to look without opening the store (a read-only connection of its own)."""
    if db is None:
        if not path.exists():
            return False
        try:
            with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)) as ro:
                return last_commit_was_run(ro, path, faiss_path, dim)
        except sqlite3.Error:
            return False
    try:
        got = recorded(db)
        if got.get("commits") is None or got.get("commits") != got.get("run_commit") or not got.get("faiss_file"):
            return False
        if db.execute("SELECT 1 FROM meta WHERE key = 'identity'").fetchone() is None:
            return False  # the model identity was lost: opening the store (to write it again) is the repair
        if not current(db):
            return False  # a store of an older release: the next run upgrades it
        # the rows by their folder, as `status` and searches count them (another index than count(*)'s)
        by_root = sum(n for _, n in db.execute("SELECT root, count(*) FROM chunks GROUP BY root"))
        return str(by_root) == got.get("rows") and not mismatches(db, path, faiss_path, dim, got)
    except sqlite3.DatabaseError as e:
        if type(e) is sqlite3.DatabaseError:  # pages SQLite cannot read: what `status` says, not a run of nothing
            raise damaged(path, e) from e
        return False
    except (sqlite3.Error, OSError):
        return False


def current(db: sqlite3.Connection) -> bool:
    """Whether the store is of this release's form (False: the next write upgrades it): its vectors' digests
    recorded, each set of tags stored once."""
    return faiss_vectors.has_digests(db) and tagsets.grouped(db)


def rows_held(path: Path) -> int:
    """The rows of the chunks table of the SQLite file ``path``, read-only; 0 when it cannot be read."""
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)) as ro:
            return int(ro.execute("SELECT count(*) FROM chunks").fetchone()[0])
    except sqlite3.Error:
        return 0


def set_aside(path: Path, faiss_path: Path, name: str) -> Path | None:
    """Move the closed store's SQLite and FAISS files into ``<cache>/damaged/<index>-<time>/``; None when
    there are none."""
    files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), faiss_path) if p.exists()]
    if not path.exists():
        return None
    dest = path.parent.parent / "damaged" / f"faiss-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True, exist_ok=True)
    for p in files:
        os.replace(p, dest / p.name)
    log.warning("moved the damaged FAISS store %s to %s", path, dest)
    return dest

"""The FAISS store's stored vectors (see :mod:`mdrag.store.faiss`): the digest a run records with each, and
the checks that keep a damaged one out of a vector index built from SQLite.

A stored vector is sound when it has the model's dimension, a norm of 1 (a run
writes unit vectors) and the digest its run recorded in ``vector_digest``: the
first 16 bytes of the sha256 of its chunk's content hash and its bytes. Length
and norm find zeroed or cut bytes; the digest finds a vector swapped with
another row's or replaced by another chunk's, which is a unit vector too.
A store written before digests were recorded has no such column: the first
write transaction after the upgrade adds it and records the digests of the
vectors that pass length and norm (:func:`begin_write`); until then, and in a
read-only home, its vectors are checked by length and norm only.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

COLUMN = "vector_digest"  # the chunks table's column holding each vector's digest
_PART = 4096  # rows read at a time
_BATCH = 500  # values per SQL `IN (...)` list
_NAMED = 10  # files a message names; more are counted


def digest(content_hash: str, blob: bytes) -> bytes:
    """The digest a run records with a vector: sha256 of its chunk's content hash and its bytes, 16 bytes."""
    return hashlib.sha256(content_hash.encode() + blob).digest()[:16]


def has_digests(db: sqlite3.Connection) -> bool:
    """Whether the store records its vectors' digests (a store written before they were does not)."""
    return any(r[1] == COLUMN for r in db.execute("PRAGMA table_info(chunks)"))


def sound(part: Sequence[Sequence[Any]], dim: int, digests: bool) -> tuple[list[int], np.ndarray]:
    """Which rows of ``part`` hold a sound vector: their positions in it, and their vectors. Each row
    is (row number, vector blob, content hash, digest or None, ...); ``digests``: the store records them,
    and a row without one is damaged."""
    sized = [i for i, r in enumerate(part) if len(r[1]) == 4 * dim]
    vecs = np.frombuffer(b"".join(part[i][1] for i in sized), dtype=np.float32).reshape(len(sized), dim)
    with np.errstate(all="ignore"):
        ok = np.abs(np.linalg.norm(vecs, axis=1) - 1) < 1e-3
    if digests:
        for j, i in enumerate(sized):
            if ok[j]:
                _, blob, content_hash, recorded = part[i][:4]
                ok[j] = recorded == digest(content_hash, blob)
    return [i for i, good in zip(sized, ok) if good], vecs[ok]


def _select(db: sqlite3.Connection, extra: str = "") -> str:
    """The columns :func:`sound` reads (NULL for a digest the store does not record), then ``extra``."""
    return f"SELECT n, vector, content_hash, {COLUMN if has_digests(db) else 'NULL'}{extra} FROM chunks"


def _marks(n: int) -> str:
    return ",".join("?" * n)


def vector_rows(
    db: sqlite3.Connection, rows: list[int] | None, dim: int, left_out: set[int], path: Path
) -> Iterator[tuple[list[int], np.ndarray, list[str]]]:
    """These rows (all when None) in parts: (row numbers, their vectors, their BM25 texts). A row whose
    vector is not sound is damaged: it is left out, added to ``left_out`` and named in a warning with its
    file, never ranked by its damaged bytes."""
    digests = has_digests(db)
    q = _select(db, ", bm25_text")
    if rows is None:
        cur = db.execute(q)
        parts: Iterable[list[Any]] = iter(lambda: cur.fetchmany(_PART), [])
    else:
        parts = (
            db.execute(f"{q} WHERE n IN ({_marks(len(p))})", p).fetchall()  # noqa: S608
            for p in (rows[i : i + _BATCH] for i in range(0, len(rows), _BATCH))
        )
    damaged: set[int] = set()
    for part in parts:
        good, vecs = sound(part, dim, digests)
        damaged.update({r[0] for r in part} - {part[i][0] for i in good})
        if good:
            yield [part[i][0] for i in good], vecs, [part[i][4] for i in good]
    if damaged - left_out:
        log.warning(
            "%s: left out of searches; the next `mdrag index` embeds their files again",
            said(db, damaged - left_out, path, "are damaged"),
        )
    left_out.update(damaged)


def bad_vectors(db: sqlite3.Connection, dim: int, path: Path) -> set[int]:
    """The row numbers whose stored vector is not sound (every row read)."""
    digests = has_digests(db)
    if not digests and db.execute("SELECT 1 FROM chunks LIMIT 1").fetchone():
        log.warning(
            "the chunk vectors in %s were stored before mdrag recorded their digests: checked by their length "
            "and norm only, until the next `mdrag index` records them",
            path,
        )
    bad: set[int] = set()
    cur = db.execute(_select(db))
    while part := cur.fetchmany(_PART):
        good = {part[i][0] for i in sound(part, dim, digests)[0]}
        bad.update(r[0] for r in part if r[0] not in good)
    return bad


def said(db: sqlite3.Connection, rows: set[int], path: Path, verb: str) -> str:
    """``rows`` in words: "<count> chunk vector(s) in <store> <verb> (in <files>)"."""
    files: set[str] = set()
    ordered = sorted(rows)
    for i in range(0, len(ordered), _BATCH):
        part = ordered[i : i + _BATCH]
        q = f"SELECT DISTINCT path FROM chunks WHERE n IN ({_marks(len(part))})"  # noqa: S608
        files.update(r[0] for r in db.execute(q, part))
    named = sorted(files)[:_NAMED]
    more = f" and {len(files) - len(named)} more" if len(files) > len(named) else ""
    where = f" (in {len(files)} file(s): {', '.join(named)}{more})" if files else ""
    return f"{len(rows)} chunk vector(s) in {path} {verb}{where}"


def vectors_by_hash(db: sqlite3.Connection, hashes: Iterable[str], dim: int) -> dict[str, np.ndarray]:
    """A sound stored vector for each of these content hashes that has one: a damaged vector is never reused
    for a new chunk (its text is embedded again)."""
    digests = has_digests(db)
    found: dict[str, np.ndarray] = {}
    wanted = sorted(set(hashes))
    for i in range(0, len(wanted), _BATCH):
        part = wanted[i : i + _BATCH]
        rows = db.execute(f"{_select(db)} WHERE content_hash IN ({_marks(len(part))})", part).fetchall()  # noqa: S608
        good, vecs = sound(rows, dim, digests)
        for j, vec in zip(good, vecs):
            found.setdefault(rows[j][2], vec.copy())
    return found


def begin_write(db: sqlite3.Connection, dim: int, path: Path) -> None:
    """Begin a write transaction; in a store written before vector digests were recorded, add their column
    and record the digests of the vectors that pass length and norm (once, in this transaction)."""
    db.execute("BEGIN IMMEDIATE")
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)")}
    if not columns or COLUMN in columns:  # a new file (its tables are created with it), or done
        return
    db.execute(f"ALTER TABLE chunks ADD COLUMN {COLUMN} BLOB")
    recorded, last = 0, -1
    while part := db.execute(
        "SELECT n, vector, content_hash, NULL FROM chunks WHERE n > ? ORDER BY n LIMIT ?", (last, _PART)
    ).fetchall():
        good = sound(part, dim, digests=False)[0]
        db.executemany(
            f"UPDATE chunks SET {COLUMN} = ? WHERE n = ?",  # noqa: S608
            [(digest(part[i][2], part[i][1]), part[i][0]) for i in good],
        )
        recorded, last = recorded + len(good), part[-1][0]
    log.info("%s: recorded the digests of %d chunk vector(s) stored before mdrag recorded them", path, recorded)

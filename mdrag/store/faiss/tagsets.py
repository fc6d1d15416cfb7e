"""A FAISS store's tags: each set of tags stored once, however many chunks carry it.

Every chunk of a note carries the note's tags (its frontmatter ``tags`` and, in a vault, its inline
``#tags``). Stored with each chunk, a note of 2,000 tags cut into 144 chunks made 288,000 tag rows. So a
chunk's ``metadata["tags"]`` is kept in ``tagsets`` (its JSON value, once per distinct value, named by
its sha256) and the chunk row holds that set's number (``chunks.tagset``, 0 for none); the ``tags``
table lists each set's tags (tag, set number) for tag filters. A read puts the value back in the
chunk's metadata, so a chunk's metadata reads as it was written. A set no chunk holds any more is deleted
with the last chunk that held it.

A store written before (its ``tags`` rows per chunk, the tags in each chunk's metadata) is read as it is,
and converted in the first write transaction of this release (:func:`upgrade`), which says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_BATCH = 500  # values per SQL `IN (...)` list
_PART = 2000  # chunk rows converted per read when a store is upgraded


def grouped(db: sqlite3.Connection) -> bool:
    """Whether the store keeps each set of tags once (False: a store of an older release, not yet written)."""
    return "tagset" in {r[1] for r in db.execute("PRAGMA table_info(chunks)")}


def tags_in(value: Any) -> set[str]:
    """The tags a ``metadata["tags"]`` value holds, as :meth:`mdrag.store.base.Filter.matches` reads them."""
    if isinstance(value, str):
        return {value}
    return {t for t in value if isinstance(t, str)} if isinstance(value, list) else set()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def put(db: sqlite3.Connection, metadata: dict[str, Any]) -> tuple[str, int]:
    """A chunk's metadata as stored (JSON, less its ``tags``) and the number of its set of tags (added
    when no chunk holds it yet; 0: the chunk has no ``tags``)."""
    if "tags" not in metadata:
        return json.dumps(metadata), 0
    rest = json.dumps({k: v for k, v in metadata.items() if k != "tags"})
    value = json.dumps(metadata["tags"])
    digest = _digest(value)
    row = db.execute("SELECT n FROM tagsets WHERE digest = ?", (digest,)).fetchone()
    if row is not None:
        return rest, int(row[0])
    n = int(db.execute("INSERT INTO tagsets (digest, tags) VALUES (?, ?)", (digest, value)).lastrowid or 0)
    db.executemany("INSERT INTO tags (tag, n) VALUES (?, ?)", [(t, n) for t in tags_in(metadata["tags"])])
    return rest, n


def drop_unused(db: sqlite3.Connection, sets: Iterable[int]) -> None:
    """Delete those of these sets that no chunk holds any more, with their tag rows."""
    wanted = sorted(set(sets) - {0})
    for i in range(0, len(wanted), _BATCH):
        part = wanted[i : i + _BATCH]
        marks = ",".join("?" * len(part))
        held = {r[0] for r in db.execute(f"SELECT DISTINCT tagset FROM chunks WHERE tagset IN ({marks})", part)}  # noqa: S608
        unused = [n for n in part if n not in held]
        if unused:
            marks = ",".join("?" * len(unused))
            db.execute(f"DELETE FROM tags WHERE n IN ({marks})", unused)  # noqa: S608
            db.execute(f"DELETE FROM tagsets WHERE n IN ({marks})", unused)  # noqa: S608


def values(db: sqlite3.Connection, sets: Iterable[int]) -> dict[int, Any]:
    """Set number -> its ``metadata["tags"]`` value, for these sets (a set that is missing is left out)."""
    wanted = sorted(set(sets) - {0})
    out: dict[int, Any] = {}
    for i in range(0, len(wanted), _BATCH):
        part = wanted[i : i + _BATCH]
        q = f"SELECT n, tags FROM tagsets WHERE n IN ({','.join('?' * len(part))})"  # noqa: S608
        out.update((n, json.loads(value)) for n, value in db.execute(q, part))
    return out


def expected_rows(db: sqlite3.Connection) -> Iterator[tuple[str, int]]:
    """The rows the tags table should hold: (tag, set number) for each set's tags."""
    for n, value in db.execute("SELECT n, tags FROM tagsets"):
        for tag in tags_in(json.loads(value)):
            yield tag, n


def _mislabelled(db: sqlite3.Connection) -> set[int]:
    """The sets whose value is not the one their digest names."""
    return {n for n, digest, value in db.execute("SELECT n, digest, tags FROM tagsets") if _digest(value) != digest}


def unsound(db: sqlite3.Connection) -> set[int]:
    """The sets that are not what was written: a value that is not the one its digest names, or a set that
    chunks hold and that is missing."""
    bad = _mislabelled(db)
    q = "SELECT DISTINCT tagset FROM chunks WHERE tagset != 0 AND tagset NOT IN (SELECT n FROM tagsets)"
    return bad | {r[0] for r in db.execute(q)}


def holders(db: sqlite3.Connection, sets: Iterable[int]) -> set[int]:
    """The row numbers of the chunks that hold these sets."""
    wanted = sorted(set(sets) - {0})
    out: set[int] = set()
    for i in range(0, len(wanted), _BATCH):
        part = wanted[i : i + _BATCH]
        q = f"SELECT n FROM chunks WHERE tagset IN ({','.join('?' * len(part))})"  # noqa: S608
        out.update(r[0] for r in db.execute(q, part))
    return out


def rebuild(db: sqlite3.Connection) -> None:
    """The tag rows again from the sets, a set that is not what was written deleted first (the chunks that
    held it are indexed again: :func:`unsound`)."""
    bad = sorted(_mislabelled(db))
    for i in range(0, len(bad), _BATCH):
        part = bad[i : i + _BATCH]
        db.execute(f"DELETE FROM tagsets WHERE n IN ({','.join('?' * len(part))})", part)  # noqa: S608
    db.execute("DELETE FROM tags")
    db.executemany("INSERT INTO tags (tag, n) VALUES (?, ?)", expected_rows(db))


def upgrade(db: sqlite3.Connection, path: Path) -> bool:
    """In a write transaction on a store of an older release (tag rows per chunk, the tags in each chunk's
    metadata): add ``chunks.tagset`` and the ``tagsets`` table, and keep each set of tags once; whether
    it did. The row numbers, vectors and texts stay: the vector index and BM25 files are still current."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)")}
    if not columns or "tagset" in columns:  # a new file (its tables are created with it), or done
        return False
    before = int(db.execute("SELECT count(*) FROM tags").fetchone()[0])
    db.execute("ALTER TABLE chunks ADD COLUMN tagset INTEGER NOT NULL DEFAULT 0")
    db.execute(
        "CREATE TABLE IF NOT EXISTS tagsets (n INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL UNIQUE, "
        "tags TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX IF NOT EXISTS chunks_tagset ON chunks (tagset)")
    db.execute("DELETE FROM tags")
    last = -1
    while part := db.execute("SELECT n, metadata FROM chunks WHERE n > ? ORDER BY n LIMIT ?", (last, _PART)).fetchall():
        updates = []
        for n, text in part:
            metadata = json.loads(text)
            if "tags" in metadata:
                updates.append((*put(db, metadata), n))
        db.executemany("UPDATE chunks SET metadata = ?, tagset = ? WHERE n = ?", updates)
        last = part[-1][0]
    after = int(db.execute("SELECT count(*) FROM tags").fetchone()[0])
    log.warning(
        "%s: upgraded the FAISS store of an older release: each set of tags is stored once (%d tag rows, "
        "%d before); searches and filters are unchanged",
        path,
        after,
        before,
    )
    return True

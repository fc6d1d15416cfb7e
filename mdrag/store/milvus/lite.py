"""Milvus Lite's upkeep: what mdrag keeps and checks of a Milvus Lite collection's files, and its BM25 padding.

The Milvus store (:mod:`mdrag.store.milvus`) talks to Milvus through its
client; what only Milvus Lite needs lives here:

- A fingerprint of a collection's files lets a run that finds nothing changed
  skip opening the store (:meth:`LiteFiles.unchanged`).
- A collection proves it is whole: each run records the sha256 of its vector
  index files and its row count (:meth:`LiteFiles.record_sums`); an index file
  that differs is set aside when the store opens, and Milvus Lite builds it
  again from the stored vectors.
- Milvus Lite keeps BM25 statistics per segment, so a small update's segment
  is padded with a sample of the index (:func:`padding`), and the index is
  written again whole once small updates add up to a tenth of it.
- Milvus Lite runs in process and holds a lock on its folder; a folder it may
  not write is searched through a private view (:func:`lite_view`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from mdrag.fileio import file_sha256_cached, write_atomic
from mdrag.store import uri_scheme

__all__ = [
    "BM25_REWRITE_SHARE",
    "LiteFiles",
    "lite_locked",
    "lite_read_only",
    "lite_release",
    "lite_use",
    "lite_view",
    "padding",
    "refresh_bm25",
]

log = logging.getLogger(__name__)

# Milvus Lite: rewrite the index whole once small updates have written this share of it.
BM25_REWRITE_SHARE = 0.1
#: The URI schemes of a Milvus server or cluster (``http://host:19530``, ``unix:/run/milvus.sock``): any other
#: milvus_uri is a Milvus Lite file. The backend claims them (``BACKEND.schemes``).
SERVER_SCHEMES = ("http", "https", "tcp", "grpc", "unix")
ROWS_KEY = "mdrag.rows_since_rewrite"  # collection property: chunks written by small updates since a rewrite
_BM25_SEGMENT_ROWS = 512  # Milvus Lite: fewest chunks a run writes in one segment (see padding)
_INDEX_FILES_WAIT_S = 30.0  # how long a run waits for Milvus Lite to write its segments' index files
_INDEX_FILES_STILL_S = 0.3  # ... and for them to stay unchanged this long: written whole
# The data files of a collection (its rows, and its deletes' delta files): their sha256 is recorded too.
_DATA = ("partitions/*/data/*", "partitions/*/delta/*")

# Milvus Lite runs in process and holds a lock on its file until released: count
# the open stores per file, and release the file when the last one closes, so
# that another process can open it.
_lite_users: dict[str, int] = {}
_lite_lock = threading.Lock()


def is_server(uri: str) -> bool:
    """Whether ``uri`` names a Milvus server or cluster rather than a Milvus Lite file (ConfigError for a
    ``scheme://`` URI that no store backend reads: :func:`mdrag.store.uri_scheme`)."""
    return uri_scheme(uri) in SERVER_SCHEMES


def padding(written: set[str], live: set[str]) -> list[str]:
    """The chunks to write again with a small update's ``written`` ones, so that their segment has BM25
    statistics like the whole index's.

    Milvus Lite computes BM25 statistics per segment: chunks written alone would
    score far too low. Writing a random sample of the other chunks again with
    them makes their segment a sample of the index, with its term frequencies.
    """
    if len(written) >= _BM25_SEGMENT_ROWS:
        return []
    others = sorted(live - written)
    return random.Random(len(others)).sample(others, min(len(others), _BM25_SEGMENT_ROWS - len(written)))


class Rewrites(Protocol):
    """What keeping BM25 statistics whole asks of the Milvus store."""

    collection: str

    @property
    def per_segment_bm25(self) -> bool: ...  # Milvus Lite's BM25 statistics are per segment

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...  # a client request

    def rewrite(self, ids: Iterable[str]) -> None: ...  # write these rows again, together

    def flush(self) -> None: ...

    def rows_since_rewrite(self) -> int: ...  # the collection's ROWS_KEY property


def refresh_bm25(store: Rewrites, live: set[str], written: int, whole: bool) -> None:
    """Keep Milvus Lite's per-segment BM25 statistics close to the whole index's, at a run's end.

    Small updates write segments that are samples of the index (:func:`padding`);
    once they add up to ``BM25_REWRITE_SHARE`` of the index, every chunk is written
    again, together. The count of chunks so written is kept in the collection's properties.
    """
    before = store.rows_since_rewrite()
    rows = 0 if whole or not store.per_segment_bm25 else before + written
    if live and rows >= BM25_REWRITE_SHARE * len(live):
        log.info("rewriting %d chunks so that BM25 statistics cover the whole index", len(live))
        store.rewrite(live)
        store.flush()
        rows = 0
    if rows != before:
        store.call("alter_collection_properties", store.collection, properties={ROWS_KEY: str(rows)})


class LiteFiles:
    """One Milvus Lite collection's files, as mdrag keeps and checks them, read without connecting."""

    def __init__(self, uri: str, collection: str) -> None:
        self.db = Path(uri).expanduser()  # the Milvus Lite database folder
        self.collection = collection
        self.folder = self.db / "collections" / collection  # the collection's files
        # What mdrag knows of the collection: beside the database folder, so that writing it changes no
        # file of the collection.
        self.state = self.db.with_name(self.db.name + ".mdrag") / f"{collection}.json"
        # The sha256 of the index files and the row count of the last run, beside the fingerprint.
        self.sums = self.state.with_name(f"{collection}.sums.json")

    # -- fingerprint ----------------------------------------------------------
    def unchanged(self) -> bool:
        """Whether the collection's files are as they were when the fingerprint was last recorded, and its
        data and index files have the sha256 their run recorded (a file damaged in place, its time kept)."""
        try:
            recorded = json.loads(self.state.read_text(encoding="utf-8")).get("fingerprint")
        except (OSError, ValueError, AttributeError):
            return False
        fingerprint = self.fingerprint()
        if fingerprint is None or fingerprint != recorded or self.sums_lost():
            return False
        return not self.changed_index_files(data=True) and not self.changed_index_files()

    def record_fingerprint(self) -> None:
        fingerprint = self.fingerprint()
        if fingerprint is None:
            return
        try:
            write_atomic(self.state, json.dumps({"fingerprint": fingerprint}))
        except OSError as e:  # only a shortcut for the next run is lost
            log.debug("cannot record the store's fingerprint in %s: %s", self.state, e)

    def forget_fingerprint(self) -> None:
        try:
            self.state.unlink(missing_ok=True)
        except OSError as e:
            log.debug("cannot remove %s: %s", self.state, e)

    def fingerprint(self) -> str | None:
        """A digest of the collection's files; None when they cannot be read.

        It changes whenever Milvus Lite commits anything to the collection (its
        manifest, its write-ahead log) and whenever one of its data or index
        files changes or goes missing, so an unchanged fingerprint means the
        store holds what the last run left there. The collection's own manifest
        and schema count by their bytes (a few KB), so that either damaged in
        place, its time kept, changes it too; the data and index files have
        their sha256 checked against the run's (see :meth:`unchanged`).
        """
        coll = self.folder
        try:
            files = [coll / "manifest.json", coll / "schema.json"]
            folders = [coll / "wal"]
            for partition in sorted((coll / "partitions").iterdir()):
                folders += [partition / "data", partition / "delta", partition / "indexes"]
            for folder in folders:
                if folder.is_dir():
                    files += sorted(folder.iterdir())
            parts = [f"{p.relative_to(coll)}:{st.st_size}:{st.st_mtime_ns}" for p in files for st in [p.stat()]]
            parts += [hashlib.sha256(p.read_bytes()).hexdigest() for p in files[:2]]  # small: read whole
        except OSError:
            return None
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    # -- checksums ------------------------------------------------------------
    def recorded_sums(self) -> dict[str, Any]:
        try:
            got = json.loads(self.sums.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return got if isinstance(got, dict) else {}

    def sums_lost(self) -> bool:
        """Whether the collection has files and no whole record of their checksums (:meth:`record_sums`): it was
        deleted or emptied (or a run could not write it), and its files cannot be checked until a run has
        checked every row and recorded it again."""
        got = self.recorded_sums()
        return self.folder.is_dir() and not all(k in got for k in ("index_files", "data_files", "rows"))

    def sums_lost_message(self) -> str:
        return (
            f"the checksum record {self.sums} of {self.folder} is missing or empty (its data and index files "
            "cannot be checked until a run has checked every row and recorded it again)"
        )

    def record_again(self, rows: int) -> str:
        """Record the checksums of a collection whose record was lost (:meth:`sums_lost`), once its rows
        (``rows`` of them) were checked: what was done, as a warning says it."""
        self.record_sums(rows)
        return (
            f"the checksum record {self.sums} of {self.folder} was missing or empty: every row checked, and "
            "recorded again"
        )

    def index_digests(self, patterns: tuple[str, ...] = ("partitions/*/indexes/*",)) -> dict[str, str]:
        """The sha256 of each of the collection's index files (``patterns``: other files), by path within
        the collection."""
        coll = self.folder
        out = {}
        for path in sorted(p for pattern in patterns for p in coll.glob(pattern)):
            out[str(path.relative_to(coll))] = file_sha256_cached(path)
        return out

    def record_sums(self, rows: int) -> None:
        """Record what the run leaves: its index files' sha256 (once Milvus Lite has written them) and
        ``rows``, the row count."""
        self.wait_for_index_files()
        try:
            sums = {"index_files": self.index_digests(), "data_files": self.index_digests(_DATA), "rows": rows}
            write_atomic(self.sums, json.dumps(sums))
        except OSError as e:  # only a check is lost
            log.debug("cannot record the store's checksums in %s: %s", self.sums, e)

    def wait_for_index_files(self, wait_s: float = _INDEX_FILES_WAIT_S) -> None:
        """Wait until each data segment of the collection has its index file, written whole: Lite
        writes them in the background after a flush (a moment later, longer on a busy machine and for a
        large segment). A file not there when the run records its checksums would not be checked; one
        hashed while Lite still writes it would read as damaged at the next open. Written whole: every
        index file's size and mtime unchanged for ``_INDEX_FILES_STILL_S``."""
        coll = self.folder
        deadline = time.monotonic() + wait_s
        seen: dict[Path, tuple[int, int]] = {}
        still_since = time.monotonic()
        while True:
            data = {p.name.split(".", 1)[0] for p in coll.glob("partitions/*/data/data_*")}
            stats: dict[Path, tuple[int, int]] = {}
            for p in coll.glob("partitions/*/indexes/*"):
                try:
                    st = p.stat()
                except OSError:  # replaced as we looked
                    continue
                stats[p] = (st.st_size, st.st_mtime_ns)
            now = time.monotonic()
            if stats != seen:
                seen, still_since = stats, now
            elif data <= {p.name.split(".", 1)[0] for p in stats} and now - still_since >= _INDEX_FILES_STILL_S:
                return
            if now > deadline:
                log.debug("%s: index files still missing or being written after %g s: not checked", coll, wait_s)
                return
            time.sleep(0.05)

    def changed_index_files(self, data: bool = False) -> list[Path]:
        """The index files (``data``: the data files) whose sha256 is not the one their run recorded (files
        it did not record pass)."""
        recorded = self.recorded_sums().get("data_files" if data else "index_files") or {}
        try:
            now = (self.index_digests(_DATA) if data else self.index_digests()) if recorded else {}
        except OSError:
            return []
        return [self.folder / rel for rel, digest in now.items() if rel in recorded and recorded[rel] != digest]

    def forget_sums(self) -> None:
        self.sums.unlink(missing_ok=True)

    # -- setting aside ----------------------------------------------------------
    def index_files(self) -> list[Path]:
        """The collection's vector index files."""
        return sorted(self.folder.glob("partitions/*/indexes/*"))

    def move_aside(self, files: list[Path]) -> list[tuple[Path, Path]]:
        """Move these index files into the cache's damaged/ folder: (from, to) pairs (the store is closed)."""
        dest = self.db.parent / "damaged" / f"{self.collection}-indexes-{time.strftime('%Y%m%d-%H%M%S')}"
        moved = [(f, dest / f.parent.parent.name / f.name) for f in files]
        for src, dst in moved:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        return moved

    @staticmethod
    def put_back(moved: list[tuple[Path, Path]]) -> None:
        """Undo :meth:`move_aside` (the store is closed)."""
        for src, dst in moved:
            os.replace(dst, src)
        shutil.rmtree(moved[0][1].parent.parent, ignore_errors=True)

    def set_aside(self) -> Path | None:
        """Move the whole collection into ``<cache>/damaged/<collection>-<time>`` (the store is closed);
        where it went, or None when it has no folder."""
        where = self.folder
        if not where.is_dir():
            return None
        dest = self.db.parent / "damaged" / f"{self.collection}-{time.strftime('%Y%m%d-%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.forget_fingerprint()
        self.forget_sums()
        os.replace(where, dest)
        log.warning("moved the damaged collection %s to %s", where, dest)
        return dest


# -- the in-process server's lock --------------------------------------------


def _lite_key(uri: str) -> str:
    return os.path.abspath(os.path.expanduser(uri))


def lite_use(uri: str) -> None:
    """Count one more open store on this Milvus Lite file (see :func:`lite_release`)."""
    with _lite_lock:
        _lite_users[_lite_key(uri)] = _lite_users.get(_lite_key(uri), 0) + 1


def lite_release(uri: str) -> None:
    """One store on this Milvus Lite file closed: the file is released when the last one closes."""
    key = _lite_key(uri)
    with _lite_lock:
        _lite_users[key] = _lite_users.get(key, 1) - 1
        if _lite_users[key] > 0:
            return
        del _lite_users[key]
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:
        return
    server_manager_instance.release_server(key)


def lite_locked(uri: str) -> bool:
    """Whether another process holds the Milvus Lite file's lock (pymilvus hides the cause)."""
    lock = Path(uri).expanduser() / "LOCK"  # milvus_lite's lock file inside the database folder
    if not lock.is_file():
        return False
    try:
        import fcntl
    except ImportError:  # Windows: no way to tell
        return False
    with open(lock, "rb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


# -- read-only Milvus Lite folders ------------------------------------------
# Milvus Lite writes whenever it opens a folder (its LOCK file, a new write-ahead
# log), so it cannot open one it may not write: a read-only mount, or a folder of
# another user. Search and status open a private view of such a folder instead.


def lite_read_only(uri: str) -> bool:
    """Whether the Milvus Lite folder exists and Milvus Lite cannot open it for writing (its LOCK file)."""
    db = Path(uri).expanduser()
    if not db.is_dir():
        return False
    try:
        fd = os.open(db / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)  # as Milvus Lite opens it
    except OSError as e:
        return e.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    os.close(fd)
    return False


def lite_view(uri: str) -> str:
    """A private writable view of a read-only Milvus Lite folder: its tree, each file a symlink.

    Milvus Lite writes new files (LOCK, write-ahead logs) and replaces files by
    renaming over them; both land in the view, and the originals are only read.
    A write into an original through a link fails, as the folder is read-only.
    The view costs one symlink per file, whatever the size of the index.
    """
    src = Path(uri).expanduser().resolve()
    view = Path(tempfile.mkdtemp(prefix="mdrag-readonly-")) / src.name  # pymilvus wants the name's ".db"
    try:
        for dirpath, _, filenames in os.walk(src):
            rel = Path(dirpath).relative_to(src)
            (view / rel).mkdir(parents=True, exist_ok=True)
            for name in filenames:
                if not (rel == Path(".") and name == "LOCK"):
                    (view / rel / name).symlink_to(Path(dirpath) / name)
    except OSError:
        shutil.rmtree(view.parent, ignore_errors=True)
        raise
    log.info("%s is read-only: searching it through %s", uri, view)
    return str(view)

"""Chunks and vectors in Milvus: a Milvus Lite file by default, or a server URI.

One collection per index. The model that wrote the vectors is recorded in the
collection's properties, and a store opened with another model refuses to
work. Writes are searchable at once; an indexing run flushes once, when it
ends (:meth:`MilvusStore.end_run`), since every flush seals a segment. The
collection is loaded on open (a reopened Milvus Lite collection is "released"
until loaded).

Every read is Strong: it sees every write acknowledged before it began, from
this process or another. The indexer reads its own writes (vectors it may
reuse, the ids its repair compares with the manifest, counts), and a search
right after an update must find what the update wrote; Milvus's default for
new collections, Bounded, may serve a read from a few seconds back. Collections
are created Strong, and each read asks for Strong as well, so that collections
created before (Bounded) behave the same. Milvus Lite reads its own writes at
any level.

Milvus Lite's own upkeep lives here too (:meth:`MilvusStore.end_run`): it keeps
BM25 statistics per segment, so a small update's segment is padded with a
sample of the index, and the index is written again whole once small updates
add up to a tenth of it; and a fingerprint of its files lets a run that finds
nothing changed skip opening the store (:meth:`MilvusStore.unchanged_since_last_run`).
A Milvus Lite collection also proves it is whole: each run records the sha256 of
its vector index files and its row count (:meth:`MilvusStore.check`); an index
file that differs is set aside when the store opens, and Milvus Lite builds it
again from the stored vectors.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.errors import ModelMismatchError, StoreDamagedError, StoreError, StoreInUseError, StoreUnavailableError
from mdrag.knobs import STORE_MAX_ROWS
from mdrag.manifest import file_sha256_cached, write_atomic
from mdrag.redact import redact_url
from mdrag.store import filters
from mdrag.store import is_server_uri as _is_remote
from mdrag.store.base import Filter, Hit
from mdrag.types import Chunk

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["MIN_SERVER_VERSION", "MilvusStore", "collection_name", "server_too_old"]

log = logging.getLogger(__name__)

#: The oldest Milvus server mdrag works with: the BM25 function (full-text search) came in Milvus 2.5, and
#: in Milvus Lite 2.5 (a `milvus-lite server` reports "milvus_lite-3.2.2"; mdrag installs 2.5 or later).
MIN_SERVER_VERSION = (2, 5)
_VERSION = re.compile(r"(?:^|[\s(v-])(\d+)\.(\d+)")  # "v2.3.5", "2.6.1-rc", "milvus_lite-3.2.2"

_IDENTITY_KEY = "mdrag.identity"
_ROWS_KEY = "mdrag.rows_since_rewrite"  # collection property: chunks written by small updates since a rewrite
# Milvus Lite: rewrite the index whole once small updates have written this share of it.
_BM25_REWRITE_SHARE = 0.1
_BM25_SEGMENT_ROWS = 512  # Milvus Lite: fewest chunks a run writes in one segment (see _pad_segment)
# A filtered dense search ranks the matching chunks exactly when there are at most this many
# (Milvus Lite's HNSW index, searched with a filter, misses some of the best matches). The
# matches are read, at most this many plus one, rather than counted: Milvus Lite's count costs more.
_EXACT_ROWS = 512
_HNSW_EF = 64  # Milvus Lite's default HNSW search breadth
# Milvus Lite's HNSW walk for k results is this many times k wide (at least _HNSW_EF), where the FAISS
# store ranks exactly (below 20,000 chunks). Milvus Lite's own walk of 64 misses chunks of the exact
# top k, the more the deeper the list: on the graphs it built of the Hugo and otel docs (3,516 and
# 10,654 chunks; their 291 questions) it missed some of the top 40 (what a search of k 10 asks for)
# for 144 questions, and of the top 120 (a hybrid search's dense list) for all 291, whose hybrid lists
# then differed from FAISS's (another lowest dense score to normalise by). A walk of 16 x k missed
# none of the top 120, one chunk of the top 40 for 2 questions (with no answer in the docs), of the
# top 10 for 6 (asked for with collapse none only: k 10 asks for 40 rows otherwise); through
# mdrag.search the stores' file lists then differed only where chunks have equal cosines. It costs
# at most 8% of a Milvus Lite dense or hybrid search (p50; benchmarks/store_parity.py, RESULTS.md).
_EF_PER_RESULT = 16
_SELF_SAMPLE = 64  # stored vectors `status --verify` asks the vector index for (see MilvusStore._lost_vectors)
_TEXT_MAX = 65535  # VARCHAR limit in bytes
_PATH_MAX = 4096
_INDEX_FILES_WAIT_S = 30.0  # how long a run waits for Milvus Lite to write its segments' index files
_INDEX_FILES_STILL_S = 0.3  # ... and for them to stay unchanged this long: written whole
_QUERY_BATCH = 1000  # ids or hashes per `in [...]` expression
# A gRPC server refuses a message over its limit (256 MiB by default in Milvus and
# Milvus Lite), so writes go in requests of at most this many estimated bytes
# (text, JSON and vector; one oversized row goes alone) and this many rows.
_REQUEST_BYTES = 32 * 1024 * 1024
_REQUEST_ROWS = 2048
_ROW_OVERHEAD = 128  # bytes a row costs beyond its values: field tags, numbers, JSON punctuation
_OUTPUT = [
    "text", "context", "path", "rel_path", "root", "headings", "level",
    "position", "page", "line_start", "line_end", "content_hash", "metadata",
]  # fmt: skip
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_WRITES = {
    "upsert",
    "insert",
    "delete",
    "flush",
    "create_collection",
    "drop_collection",
    "alter_collection_properties",
}  # refused on a view
_READS = {"query", "search"}  # read with _CONSISTENCY
_CONSISTENCY = "Strong"  # reads see every acknowledged write: see the module's docstring

# Milvus Lite runs in process and holds a lock on its file until released: count
# the open stores per file, and release the file when the last one closes, so
# that another process can open it.
_lite_users: dict[str, int] = {}
_lite_lock = threading.Lock()


def _pymilvus() -> Any:
    """Import pymilvus and quiet its own log handlers: mdrag reports store errors
    itself, with the URI and what to do, instead of pymilvus's RPC tracebacks."""
    import pymilvus

    # grpc._server: Milvus Lite's in-process server logs a harmless "AllocTimestamp
    # not implemented" traceback each time a collection is created.
    for name in ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer", "grpc._server", "milvus_lite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return pymilvus


def server_too_old(reported: str, minimum: tuple[int, int]) -> bool:
    """Whether a Milvus server that reports the version ``reported`` (``v2.3.5``, ``2.6.1-rc``,
    ``milvus_lite-3.2.2``) is older than ``minimum`` (major, minor). A version that cannot be read is not:
    that is logged, and mdrag goes on."""
    m = _VERSION.search(reported)
    if m is None:
        log.warning(
            "cannot read the Milvus server's version %r: going on as if it were %d.%d or later", reported, *minimum
        )
        return False
    return (int(m.group(1)), int(m.group(2))) < minimum


def collection_name(index: str) -> str:
    """The collection of index ``index``; names are checked, never pasted."""
    if not _NAME.match(index):
        raise StoreError(f"invalid index name {index!r}: use a letter, then letters, digits or '_' (64 at most)")
    return f"mdrag_{index}"


def _clip(s: str, limit: int) -> str:
    b = s.encode("utf-8", "surrogatepass")
    return s if len(b) <= limit else b[:limit].decode("utf-8", "ignore")


class MilvusStore:
    """The vector store of one index (one collection)."""

    query_limit = STORE_MAX_ROWS  # most rows one Milvus query returns

    def __init__(
        self,
        uri: str,
        index: str,
        identity: dict[str, Any],
        token: str | None = None,
        prepare_text: Callable[[str], str] | None = None,
    ) -> None:
        self.uri = uri  # Milvus Lite file path, or http(s):// server URI
        self.collection = collection_name(index)  # collection holding this index
        self.identity = identity  # {"model": ..., "dimension": ...} of the embedder
        self._token = token  # server credentials; never logged
        self._client: Any = None  # pymilvus.MilvusClient, connected in open()
        self.prepare_text = prepare_text  # applied to BM25 text and BM25 queries (stemming), if set
        self.has_bm25 = True  # the collection has the BM25 sparse field (collections before 0.1 do not)
        self.transactional = False  # writes are searchable at once, from any process
        self.hides = False  # an `id not in [...]` filter of thousands of ids costs more than fetching them
        self._lite_engine: bool | None = None  # the server is Milvus Lite: see per_segment_bm25
        self._view: str | None = None  # a read-only Lite folder is opened through this view: see _lite_view
        # The store is as the last run left it (see unchanged_since_last_run): found so when it was
        # opened, made false by any write, true again at end_run. Recorded when it closes.
        self._as_left = False

    @classmethod
    def from_config(
        cls,
        config: Config,
        name: str,
        identity: dict[str, Any],
        prepare_text: Callable[[str], str] | None = None,
    ) -> MilvusStore:
        """The store of index ``name`` at the configured ``milvus_uri`` (a Milvus Lite file by default)."""
        return cls(config.milvus_uri, name, identity, config["milvus_token"], prepare_text)

    # -- connection -------------------------------------------------------
    def open(self, create: bool = True, replace_mismatch: bool = False, _retry: bool = True) -> bool:
        """Connect, check the model identity, load the collection.

        Returns False when the collection does not exist and ``create`` is False.
        A collection written by another model raises ModelMismatchError, or with
        ``replace_mismatch`` (an indexing run) is dropped and created anew. A
        Milvus Lite collection that cannot be loaded is tried once more without
        its index files (see :meth:`_set_aside_index_files`).
        """
        try:
            fresh = self._client is None
            if fresh:
                as_left = self.unchanged_since_last_run()
                self._set_aside_changed_index_files()
                self._connect(create)
            exists = self.client.has_collection(self.collection)
            if not exists:
                if not create:
                    return False
                if self.set_aside() is not None:  # a collection's files that Milvus Lite no longer knows
                    self._connect(create)
                self._create()
            else:
                try:
                    self._check_identity()
                except ModelMismatchError as e:
                    if not replace_mismatch:
                        raise
                    log.warning("%s Rebuilding it now.", e)
                    self.drop()
                    self._create()
            self._check_fields()
            self._ensure_loaded()
            if fresh:
                self._as_left = as_left and exists
        except (ModelMismatchError, StoreError):
            raise
        except Exception as e:
            error = self._open_error(e, create)
            if _retry and isinstance(error, StoreDamagedError) and (moved := self._set_aside_index_files()):
                try:
                    exists = self.open(create, replace_mismatch, _retry=False)
                except StoreError:
                    self._put_back(moved)  # not (only) the index files: the collection stays as it was
                    raise
                log.warning(
                    "Milvus Lite could not load the collection %s (%s); it loads without its %d index "
                    "file(s), which it builds again from the data: the damaged ones are in %s",
                    self.collection,
                    _reason(e),
                    len(moved),
                    moved[0][1].parent.parent,
                )
                return exists
            raise error from e
        return True

    def _set_aside_index_files(self, files: list[Path] | None = None) -> list[tuple[Path, Path]]:
        """Move a Milvus Lite collection's index files (or these of them) into the cache's damaged/ folder:
        (from, to) pairs.

        Milvus Lite writes a segment's index file in place, after the segment's data is
        committed, and loads any index file it finds: a process killed while it wrote one
        leaves a file it cannot load. Index files hold nothing the data files do not
        (Milvus Lite builds them again on load), so the collection is tried without them.
        """
        if _is_remote(self.uri) or self._view is not None:
            return []
        db = Path(self.uri).expanduser()
        files = files or sorted((db / "collections" / self.collection).glob("partitions/*/indexes/*"))
        if not files:
            return []
        self.close()
        dest = db.parent / "damaged" / f"{self.collection}-indexes-{time.strftime('%Y%m%d-%H%M%S')}"
        moved = [(f, dest / f.parent.parent.name / f.name) for f in files]
        for src, dst in moved:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        return moved

    def _set_aside_changed_index_files(self) -> None:
        """Move the index files that differ from what their run wrote into the cache's damaged/ folder
        (Milvus Lite builds them again from the data when it loads the collection); StoreDamagedError
        when they cannot be moved (a read-only folder)."""
        changed = self._changed_index_files()
        if not changed:
            return
        moved = [] if _lite_read_only(self.uri) else self._set_aside_index_files(changed)
        if not moved:
            raise StoreDamagedError(
                f"The index store is damaged: {changed[0]} is not the vector index file its run wrote. Run "
                "`mdrag index` where the folder is writable to build it again from the stored vectors."
            )
        log.warning(
            "%d vector index file(s) of %s are not the ones their run wrote (damaged?): moved to %s; Milvus "
            "Lite builds them again from the stored vectors",
            len(moved),
            self.collection,
            moved[0][1].parent.parent,
        )

    def _sums_file(self) -> Path | None:
        """Where the sha256 of the index files and the row count of the last run are kept (see
        :meth:`check`): beside the fingerprint. None for a server."""
        state = self._state_file()
        return None if state is None else state.with_name(f"{self.collection}.sums.json")

    def _recorded_sums(self) -> dict[str, Any]:
        sums = self._sums_file()
        try:
            got = json.loads(sums.read_text(encoding="utf-8")) if sums is not None else {}
        except (OSError, ValueError):
            return {}
        return got if isinstance(got, dict) else {}

    def _index_digests(self) -> dict[str, str]:
        """The sha256 of each of a Milvus Lite collection's index files, by path within the collection."""
        coll = Path(self.uri).expanduser() / "collections" / self.collection
        out = {}
        for path in sorted(coll.glob("partitions/*/indexes/*")):
            out[str(path.relative_to(coll))] = file_sha256_cached(path)
        return out

    def _record_sums(self) -> None:
        """Record what the run leaves: its index files' sha256 and the row count (Milvus Lite)."""
        sums = self._sums_file()
        if sums is None or self._view is not None:
            return
        self._wait_for_index_files()
        try:
            write_atomic(sums, json.dumps({"index_files": self._index_digests(), "rows": self._count("")}))
        except OSError as e:  # only a check is lost
            log.debug("cannot record the store's checksums in %s: %s", sums, e)

    def _wait_for_index_files(self, wait_s: float = _INDEX_FILES_WAIT_S) -> None:
        """Wait until each data segment of a Milvus Lite collection has its index file, written whole: Lite
        writes them in the background after a flush (a moment later, longer on a busy machine and for a
        large segment). A file not there when the run records its checksums would not be checked; one
        hashed while Lite still writes it would read as damaged at the next open. Written whole: every
        index file's size and mtime unchanged for ``_INDEX_FILES_STILL_S``."""
        coll = Path(self.uri).expanduser() / "collections" / self.collection
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

    def _changed_index_files(self) -> list[Path]:
        """The index files whose sha256 is not the one their run recorded (files it did not record pass)."""
        recorded = self._recorded_sums().get("index_files") or {}
        coll = Path(self.uri).expanduser() / "collections" / self.collection
        try:
            now = self._index_digests() if recorded else {}
        except OSError:
            return []
        return [coll / rel for rel, digest in now.items() if rel in recorded and recorded[rel] != digest]

    def check(self, thorough: bool = False) -> list[str]:
        """What differs from what the last run recorded, each naming the file; [] when whole. Cheap: the
        index files' sha256 (opening sets aside those that differ); ``thorough`` also counts the rows and
        asks the vector index for a sample of its own vectors (:meth:`_lost_vectors`)."""
        found = [f"the vector index file {p} is not the one its run wrote" for p in self._changed_index_files()]
        rows = self._recorded_sums().get("rows")
        if thorough and isinstance(rows, int) and (held := self._count("")) != rows:
            found.append(f"the collection {self.collection} in {self.uri} holds {held} rows, its last run left {rows}")
        if thorough and (lost := self._lost_vectors()):
            found.append(lost)
        return found

    def _lost_vectors(self) -> str:
        """Whether the vector index finds the chunks it holds: a sample of ``_SELF_SAMPLE`` stored vectors,
        each searched for, must each come back with a cosine of 1 (itself, or a chunk of the same text).
        An index damaged where its files' checksums do not look (a Milvus server, or files with no
        recorded checksum) finds other chunks. "" when it finds them, else what it found, naming the store."""
        ids = sorted(self.all_ids())
        if not ids:
            return ""
        sample = random.Random(len(ids)).sample(ids, min(_SELF_SAMPLE, len(ids)))
        rows = self._call("query", self.collection, filter=filters.in_("id", sample), output_fields=["vector"])
        if not rows:
            return ""
        res = self._call(
            "search",
            self.collection,
            data=[[float(x) for x in r["vector"]] for r in rows],
            limit=1,
            output_fields=["id"],
            search_params={"metric_type": "COSINE"},
        )
        missed = sum(1 for hits in res if not hits or float(hits[0]["distance"]) < 1 - 1e-3)
        if missed <= len(rows) // 16:  # HNSW is approximate: a few may be missed in a large index
            return ""
        where = Path(self.uri).expanduser() / "collections" / self.collection if not _is_remote(self.uri) else self.uri
        return (
            f"the vector index of {where} does not find its own vectors ({missed} of {len(rows)} searched for "
            "were not found)"
        )

    def repair(self, thorough: bool = False) -> tuple[list[str], set[str]]:
        """Opening already set aside the index files that differ (Milvus Lite builds them again); with
        ``thorough``, a vector index that does not find its own vectors (see :meth:`check`) is dropped and
        built again from the stored vectors (nothing is embedded again). What was repaired; no chunk is
        suspect (chunk rows that were lost are the indexer's to repair)."""
        lost = self._lost_vectors() if thorough else ""
        if not lost:
            return [], set()
        self._call("release_collection", self.collection)
        self._call("drop_index", self.collection, "vector")
        ip = self.client.prepare_index_params()
        ip.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
        self._call("create_index", self.collection, ip)
        self._call("load_collection", self.collection)
        self._as_left = False
        return [f"{lost}: built again from the stored vectors"], set()

    def _forget_sums(self) -> None:
        sums = self._sums_file()
        if sums is not None:
            sums.unlink(missing_ok=True)

    def _put_back(self, moved: list[tuple[Path, Path]]) -> None:
        self.close()
        for src, dst in moved:
            os.replace(dst, src)
        shutil.rmtree(moved[0][1].parent.parent, ignore_errors=True)

    def _open_error(self, e: Exception, create: bool) -> StoreError:
        """Why the store could not be opened: unreachable, in use by another process, or damaged."""
        if _is_remote(self.uri):
            return StoreUnavailableError(
                f"Cannot reach the Milvus store at {self.uri}: {_reason(e)}. Start the Milvus server or fix milvus_uri."
            )
        self.close()  # this process's own Milvus Lite server holds the file's lock: release it first
        if create and _lite_read_only(self.uri):
            return StoreUnavailableError(
                f"The Milvus Lite folder {self.uri} is read-only: mdrag can search it but not index "
                "into it. Index where mdrag can write (MDRAG_HOME or milvus_uri)."
            )
        if _lite_locked(self.uri):
            return StoreInUseError(
                f"The Milvus Lite file {self.uri} is in use by another process (a running "
                "`mdrag index` or `mdrag serve`?). Wait for it to finish, or stop it, and try again."
            )
        where = Path(self.uri).expanduser() / "collections" / self.collection
        if where.is_dir():
            return StoreDamagedError(
                f"The index store is damaged: Milvus Lite cannot open {where} ({_reason(e)}). "
                "`mdrag index --rebuild` moves it aside (into the cache's damaged/ folder) and builds the "
                "index again from its folders."
            )
        return StoreUnavailableError(
            f"Cannot open the Milvus Lite file {self.uri}: {_reason(e)}. Check that its folder exists and is writable."
        )

    def set_aside(self) -> Path | None:
        """Move a damaged Milvus Lite collection out of the database, so the index can be built anew.

        Returns where it went (``<cache>/damaged/<collection>-<time>``), or None when there is
        nothing to move (a server URI, or no collection folder). Closes the store when it moves one.
        """
        if _is_remote(self.uri):
            return None
        db = Path(self.uri).expanduser()
        where = db / "collections" / self.collection
        if not where.is_dir():
            return None
        self.close()
        dest = db.parent / "damaged" / f"{self.collection}-{time.strftime('%Y%m%d-%H%M%S')}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._forget_fingerprint()
        self._forget_sums()
        os.replace(where, dest)
        log.warning("moved the damaged collection %s to %s", where, dest)
        return dest

    def _connect(self, create: bool = True) -> None:
        MilvusClient = _pymilvus().MilvusClient
        uri = self.uri
        if not _is_remote(self.uri):
            Path(self.uri).expanduser().parent.mkdir(parents=True, exist_ok=True)
            if not create and _lite_read_only(self.uri):  # search or status of a read-only index
                uri = self._view = _lite_view(self.uri)
        # pymilvus pings every 10 s even when idle; gRPC servers with default
        # settings (milvus-lite, in process or as a server) answer that with
        # GOAWAY "too many pings" and the next call fails. Ping only during calls,
        # and no more often than those servers accept (5 minutes).
        grpc_options = {"grpc.keepalive_time_ms": 300_000, "grpc.keepalive_permit_without_calls": 0}
        kwargs: dict[str, Any] = {"timeout": 10, "grpc_options": grpc_options}
        if self._token:
            kwargs["token"] = self._token
        try:
            self._client = MilvusClient(uri, **kwargs)
        except Exception:
            self._drop_view()
            raise
        if not _is_remote(uri):
            with _lite_lock:
                _lite_users[_lite_key(uri)] = _lite_users.get(_lite_key(uri), 0) + 1
        else:
            self._check_server()

    def _check_server(self) -> None:
        """Refuse a Milvus server older than :data:`MIN_SERVER_VERSION`: it has no BM25 function, so creating
        a collection fails (a 2.3 server was seen to abort on it). Asked once, as the server is connected."""
        try:
            version = str(self.client.get_server_version())
        except Exception as e:  # asked again where it matters (see _lite)
            log.warning("the Milvus server at %s did not say its version (%s)", redact_url(self.uri), _reason(e))
            return
        self._lite_engine = version.startswith("milvus_lite")
        if server_too_old(version, MIN_SERVER_VERSION):
            self.close()
            least = ".".join(map(str, MIN_SERVER_VERSION))
            raise StoreError(
                f"The Milvus server at {redact_url(self.uri)} is version {version}, and mdrag needs Milvus {least} "
                f"or later (or Milvus Lite {least} or later), for its BM25 full-text search. Upgrade the server "
                "(docker-compose.milvus.yml runs one), or unset milvus_uri to keep the index on this machine."
            )

    def close(self) -> None:
        """Disconnect; a Milvus Lite file is released when its last store closes.

        The fingerprint of a Milvus Lite collection's files is recorded then, when the
        store is as the last run left it (see :meth:`unchanged_since_last_run`).
        """
        if self._client is None:
            return
        record, view = self._as_left, self._view
        self._as_left = False
        try:
            self._client.close()
        finally:
            self._client = None
            if not _is_remote(self.uri):
                _lite_release(self._view or self.uri)
            self._drop_view()
        if view is None:
            self._record_fingerprint() if record else self._forget_fingerprint()

    def _drop_view(self) -> None:
        if self._view is not None:
            shutil.rmtree(Path(self._view).parent, ignore_errors=True)
            self._view = None

    def unchanged_since_last_run(self) -> bool:
        """Whether a Milvus Lite collection's files are as they were when the store was last closed after
        a run (:meth:`end_run`); read without connecting. Always False for a server URI."""
        state = self._state_file()
        if state is None:
            return False
        try:
            recorded = json.loads(state.read_text(encoding="utf-8")).get("fingerprint")
        except (OSError, ValueError, AttributeError):
            return False
        fingerprint = self._fingerprint()
        return fingerprint is not None and fingerprint == recorded

    def _state_file(self) -> Path | None:
        """Where mdrag keeps what it knows of a Milvus Lite collection (its fingerprint): beside the
        database folder, so that writing it changes no file of the collection. None for a server."""
        if _is_remote(self.uri):
            return None
        db = Path(self.uri).expanduser()
        return db.with_name(db.name + ".mdrag") / f"{self.collection}.json"

    def _record_fingerprint(self) -> None:
        state, fingerprint = self._state_file(), self._fingerprint()
        if state is None or fingerprint is None:
            return
        try:
            write_atomic(state, json.dumps({"fingerprint": fingerprint}))
        except OSError as e:  # only a shortcut for the next run is lost
            log.debug("cannot record the store's fingerprint in %s: %s", state, e)

    def _forget_fingerprint(self) -> None:
        state = self._state_file()
        if state is not None:
            try:
                state.unlink(missing_ok=True)
            except OSError as e:
                log.debug("cannot remove %s: %s", state, e)

    def _fingerprint(self) -> str | None:
        """A digest of a Milvus Lite collection's files, read without connecting; None otherwise.

        It changes whenever Milvus Lite commits anything to the collection (its
        manifest, its write-ahead log) and whenever one of its data or index
        files changes or goes missing, so an unchanged fingerprint means the
        store holds what the last run left there.
        """
        if _is_remote(self.uri):
            return None
        coll = Path(self.uri).expanduser() / "collections" / self.collection
        try:
            files = [coll / "manifest.json", coll / "schema.json"]
            folders = [coll / "wal"]
            for partition in sorted((coll / "partitions").iterdir()):
                folders += [partition / "data", partition / "indexes"]
            for folder in folders:
                if folder.is_dir():
                    files += sorted(folder.iterdir())
            parts = [f"{p.relative_to(coll)}:{st.st_size}:{st.st_mtime_ns}" for p in files for st in [p.stat()]]
        except OSError:
            return None
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    @property
    def client(self) -> Any:
        if self._client is None:
            raise StoreError("the store is not open")
        return self._client

    def _create(self) -> None:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        dim = int(self.identity["dimension"])
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        # enable_analyzer lets a BM25 function be added on `text` without a migration.
        s.add_field("text", DataType.VARCHAR, max_length=_TEXT_MAX, enable_analyzer=True)
        s.add_field("context", DataType.VARCHAR, max_length=1024)
        s.add_field("path", DataType.VARCHAR, max_length=_PATH_MAX)
        s.add_field("rel_path", DataType.VARCHAR, max_length=_PATH_MAX)
        s.add_field("root", DataType.VARCHAR, max_length=_PATH_MAX)
        s.add_field("headings", DataType.JSON)
        s.add_field("level", DataType.INT64)
        s.add_field("position", DataType.INT64)
        s.add_field("page", DataType.INT64)  # 0 when the format has no pages
        s.add_field("line_start", DataType.INT64)  # 0 when unknown
        s.add_field("line_end", DataType.INT64)
        s.add_field("content_hash", DataType.VARCHAR, max_length=64)
        s.add_field("metadata", DataType.JSON)
        s.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        # Full-text search: Milvus computes BM25 term weights from bm25_text (the
        # heading context and the chunk text) into `sparse` on insert.
        s.add_field("bm25_text", DataType.VARCHAR, max_length=_TEXT_MAX, enable_analyzer=True)
        s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        s.add_function(
            Function(
                name="bm25",
                function_type=FunctionType.BM25,
                input_field_names=["bm25_text"],
                output_field_names=["sparse"],
            )
        )
        ip = self.client.prepare_index_params()
        ip.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
        ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self.client.create_collection(
            self.collection,
            schema=s,
            index_params=ip,
            properties={_IDENTITY_KEY: json.dumps(self.identity, sort_keys=True)},
            consistency_level=_CONSISTENCY,
        )
        log.info("created collection %s (%d-d) in %s", self.collection, dim, self.uri)

    def stored_identity(self) -> dict[str, Any] | None:
        props = self.client.describe_collection(self.collection).get("properties") or {}
        raw = props.get(_IDENTITY_KEY)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _check_identity(self) -> None:
        stored = self.stored_identity()
        if stored is None:
            raise ModelMismatchError(
                f"Collection {self.collection} in {self.uri} was not written by mdrag (no model "
                "identity). Use another index name (--index), or rebuild it with `mdrag index --rebuild`."
            )
        if stored.get("model") != self.identity.get("model") or int(stored.get("dimension", -1)) != int(
            self.identity["dimension"]
        ):
            raise ModelMismatchError.between(self.collection[6:], stored, self.identity)

    def _check_fields(self) -> None:
        fields = {f["name"] for f in self.client.describe_collection(self.collection).get("fields", [])}
        self.has_bm25 = "sparse" in fields
        if not self.has_bm25:
            log.warning(
                "index %r has no full-text (BM25) field: searches are dense only; "
                "rebuild it with `mdrag index --rebuild DIR` for hybrid search",
                self.collection[6:],
            )

    def _ensure_loaded(self) -> None:
        state = str(self.client.get_load_state(self.collection).get("state", ""))
        if "Loaded" not in state:
            self.client.load_collection(self.collection)

    def drop(self) -> None:
        """Delete the whole collection (a rebuild with another model)."""
        self._as_left = False
        self._forget_fingerprint()
        self._forget_sums()
        if self.client.has_collection(self.collection):
            self.client.drop_collection(self.collection)

    # -- writes ------------------------------------------------------------
    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Insert or replace chunks by id; searchable at once, sealed by :meth:`flush`.

        A run flushes once, in :meth:`end_run`: every flush seals a segment, and small
        segments cost search time (and, in Milvus Lite, BM25 quality).
        """
        self._as_left = False
        rows = (_row(c, v, self.has_bm25, self.prepare_text) for c, v in zip(chunks, vectors))
        self._write(rows)

    def _write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Upsert ``rows`` in requests that fit the transport, each built only when it is sent.

        The whole write would be one gRPC message otherwise, refused past the
        server's limit, and held in memory as Python lists of floats.
        """
        for request in _requests(rows):
            self._call("upsert", self.collection, request)

    @property
    def per_segment_bm25(self) -> bool:
        """Whether BM25 statistics are per segment (Milvus Lite) rather than global (Milvus).

        Milvus Lite 3.2.2 (embedded, or served by ``milvus-lite server``)
        computes BM25's document frequencies and average length within each
        segment, so chunks written by a small update, alone in a small segment,
        get much lower BM25 scores than the rest. A Milvus server merges the
        statistics of all segments.

        The server is asked once; a server that cannot say what it is raises
        StoreError rather than being guessed at (a wrong guess leaves small
        updates with skewed BM25 scores, or rewrites rows for nothing).
        """
        return self.has_bm25 and self._lite()

    def rewrite(self, ids: Iterable[str]) -> None:
        """Write these rows again, unchanged, so that they share one set of segments (sealed by a flush)."""
        self._as_left = False
        ids = sorted(ids)
        fields = ["id", *_OUTPUT, "vector", "bm25_text"]
        for i in range(0, len(ids), _QUERY_BATCH):
            expr = filters.in_("id", ids[i : i + _QUERY_BATCH])
            rows = self._call("query", self.collection, filter=expr, output_fields=fields)
            self._write({k: r[k] for k in fields} for r in rows)

    def delete_ids(self, ids: Iterable[str]) -> None:
        """Delete these chunks (ids not stored are ignored); sealed by :meth:`end_run`'s flush."""
        self._as_left = False
        ids = list(ids)
        for i in range(0, len(ids), _QUERY_BATCH):
            expr = filters.in_("id", ids[i : i + _QUERY_BATCH])
            self._call("delete", self.collection, filter=expr)

    def flush(self) -> None:
        self._call("flush", self.collection)

    def end_run(self, written: set[str], live: set[str], whole: bool) -> None:
        """An indexing run is done writing: pad a small update's segment (Milvus Lite), flush once
        (every flush seals a segment), and write the index again whole when small updates add up to
        ``_BM25_REWRITE_SHARE`` of it (Milvus Lite; see :attr:`per_segment_bm25`)."""
        if written and not whole and self.per_segment_bm25:
            self._pad_segment(written, live)
        self.flush()
        self._refresh_bm25(live, len(written), whole)
        self._record_sums()
        self._as_left = True

    def _pad_segment(self, written: set[str], live: set[str]) -> None:
        """Give a small update's segment BM25 statistics like the whole index's.

        Milvus Lite computes BM25 statistics per segment (see :attr:`per_segment_bm25`):
        chunks written alone would score far too low. Writing a random sample of the
        other chunks again with them makes their segment a sample of the index, with
        its term frequencies.
        """
        if len(written) >= _BM25_SEGMENT_ROWS:
            return
        others = sorted(live - written)
        sample = random.Random(len(others)).sample(others, min(len(others), _BM25_SEGMENT_ROWS - len(written)))
        if sample:
            self.rewrite(sample)

    def _refresh_bm25(self, live: set[str], written: int, whole: bool) -> None:
        """Keep Milvus Lite's per-segment BM25 statistics close to the whole index's.

        Small updates write segments that are samples of the index (:meth:`_pad_segment`);
        once they add up to ``_BM25_REWRITE_SHARE`` of the index, every chunk is written
        again, together. The count of chunks so written is kept in the collection's properties.
        """
        before = self.rows_since_rewrite()
        rows = 0 if whole or not self.per_segment_bm25 else before + written
        if live and rows >= _BM25_REWRITE_SHARE * len(live):
            log.info("rewriting %d chunks so that BM25 statistics cover the whole index", len(live))
            self.rewrite(live)
            self.flush()
            rows = 0
        if rows != before:
            self._call("alter_collection_properties", self.collection, properties={_ROWS_KEY: str(rows)})

    def rows_since_rewrite(self) -> int:
        """Chunks written by small updates since the collection was last written whole (see :meth:`end_run`)."""
        props = self._call("describe_collection", self.collection).get("properties") or {}
        try:
            return int(props.get(_ROWS_KEY) or 0)
        except ValueError:
            return 0

    # -- reads -------------------------------------------------------------
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors for these content hashes: the embedding cache."""
        hashes = sorted(set(hashes))
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), _QUERY_BATCH):
            expr = filters.in_("content_hash", hashes[i : i + _QUERY_BATCH])
            rows = self._call("query", self.collection, filter=expr, output_fields=["content_hash", "vector"])
            for r in rows:
                found.setdefault(r["content_hash"], np.asarray(r["vector"], dtype=np.float32))
        return found

    def all_ids(self, roots: Sequence[str] | None = None) -> set[str]:
        """Every chunk id in the collection, or under these indexed folders (used to repair after a crash)."""
        return {r["id"] for r in self._all_rows(["id"], roots)}

    def id_paths(self, roots: Sequence[str] | None = None) -> dict[str, str]:
        """Chunk id -> file path, for the whole collection or these indexed folders."""
        return {r["id"]: r["path"] for r in self._all_rows(["id", "path"], roots)}

    def search_texts(self, share: int = 16) -> Iterator[str]:
        """The text BM25 ranks (the chunk's text where the collection has no BM25 field) of every chunk,
        or of about ``share``/16 of them: the chunks whose id starts with one of the first ``share`` hex
        digits (ids are hex digests, so the sample is uniform)."""
        field = "bm25_text" if self.has_bm25 else "text"
        prefixes = [""] if share >= 16 else list("0123456789abcdef"[: max(share, 1)])
        for prefix in prefixes:
            for row in self._all_rows([field], None, prefix):
                yield row[field]

    def _all_rows(self, fields: list[str], roots: Sequence[str] | None, prefix: str = "") -> list[dict[str, Any]]:
        """``fields`` of every row, or of the rows under these indexed folders.

        Ids are hex digests, so the collection is read in buckets by id prefix,
        each split 16 ways while it is larger than one query may return
        (Milvus caps a query at :data:`~mdrag.knobs.STORE_MAX_ROWS` rows; Milvus Lite has no query iterator).
        """
        limit = self.query_limit
        expr = filters.and_(
            filters.like_prefix("id", prefix) if prefix else "", filters.in_("root", roots) if roots else ""
        )
        rows: list[dict[str, Any]] = self._call(
            "query", self.collection, filter=expr, output_fields=fields, limit=limit
        )
        if len(rows) < limit:
            return rows
        return [row for c in "0123456789abcdef" for row in self._all_rows(fields, roots, prefix + c)]

    def count(self, roots: Sequence[str] | None = None) -> int:
        """Chunks in the collection, or under these indexed folders."""
        return self._count(filters.in_("root", roots) if roots else "")

    def roots(self) -> list[str]:
        """The chunks' folders, one query each (Milvus has no DISTINCT): a chunk under none found so far."""
        found: list[str] = []
        while True:
            expr = f"not ({filters.in_('root', found)})" if found else ""
            rows = self._call("query", self.collection, filter=expr, output_fields=["root"], limit=1)
            if not rows:
                return sorted(found)
            found.append(rows[0]["root"])

    def search(
        self,
        vector: np.ndarray,
        k: int,
        where: Filter | None = None,
        mode: str = "dense",
        text: str = "",
        hidden: frozenset[str] = frozenset(),  # ranked with the rest: hides is False
    ) -> list[Hit]:
        """The ``k`` best chunks passing ``where``, best first.

        ``mode`` "dense" ranks by cosine; "bm25" by BM25 on the text (hybrid
        ranking fuses the two lists: mdrag.fusion). Every row's ``score`` is its
        cosine similarity to ``vector``, whatever ranked it, so one threshold
        means the same in every mode; ``rank_score`` is the ranking mode's own score.

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
        if mode == "bm25" and not self.has_bm25:
            mode = "dense"
        if mode == "bm25" and self.prepare_text is not None:
            text = self.prepare_text(text)
        expr = filters.to_expr(where)
        params: dict[str, Any] = {"metric_type": "COSINE" if mode == "dense" else "BM25"}
        if mode == "dense" and expr:
            matching = self._call(
                "query", self.collection, filter=expr, output_fields=["vector"], limit=_EXACT_ROWS + 1
            )
            if len(matching) <= _EXACT_ROWS:
                return self._exact_dense(vector, k, matching)
            if self._lite():  # at least len(matching) pass: the share that fails is at most 1 - that / total
                total = self._count("")
                wide = min(total, max(_HNSW_EF, 4 * k) * math.ceil(total / len(matching)))
                params["params"] = {"ef": max(wide, _EF_PER_RESULT * k)}
        if mode == "dense" and "params" not in params and self._lite():
            params["params"] = {"ef": max(_HNSW_EF, _EF_PER_RESULT * k)}
        if mode == "dense":
            res = self._call(
                "search",
                self.collection,
                data=[vector.astype(np.float32).tolist()],
                limit=k,
                filter=expr,
                output_fields=_OUTPUT,
                search_params=params,
            )
        else:
            res = self._call(
                "search",
                self.collection,
                data=[text],
                anns_field="sparse",
                limit=k,
                filter=expr,
                output_fields=[*_OUTPUT, "vector"],
                search_params=params,
            )
        out = []
        for hit in res[0] if res else []:
            row = dict(hit["entity"])
            row["id"] = hit["id"]
            # Milvus Lite reports BM25 as a negative distance: rank_score is the score itself.
            row["rank_score"] = abs(float(hit["distance"])) if mode == "bm25" else float(hit["distance"])
            stored = row.pop("vector", None)
            row["score"] = float(np.dot(np.asarray(stored, dtype=np.float32), vector)) if stored else row["rank_score"]
            out.append(Hit(**row))
        return out

    def _exact_dense(self, vector: np.ndarray, k: int, rows: list[dict[str, Any]]) -> list[Hit]:
        """The ``k`` of ``rows`` (their ``id`` and ``vector``) most similar to ``vector``, ranked exactly
        here (cosine), as :meth:`search` returns them."""
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(vector) or 1.0)
        cosine = (vectors @ vector.astype(np.float32)) / np.where(norms > 0, norms, 1.0)
        best = sorted(range(len(ids)), key=lambda i: (-cosine[i], ids[i]))[:k]
        top = [ids[i] for i in best]
        found = {
            r["id"]: r
            for r in self._call("query", self.collection, filter=filters.in_("id", top), output_fields=_OUTPUT)
        }
        out = []
        for i in best:
            row = found.get(ids[i])
            if row is not None:  # deleted between the two queries
                out.append(Hit(**row, score=float(cosine[i]), rank_score=float(cosine[i])))
        return out

    def _count(self, expr: str) -> int:
        rows = self._call("query", self.collection, filter=expr, output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def _lite(self) -> bool:
        """Whether the server is Milvus Lite (embedded, or ``milvus-lite server``); asked once."""
        if self._lite_engine is None:
            client = self.client  # StoreError when not connected
            try:
                version = str(client.get_server_version())
            except Exception as e:
                raise StoreError(
                    f"Cannot tell which Milvus serves {self.uri} (its version request failed: {_reason(e)}). "
                    f"Check that milvus_uri points at a Milvus {'.'.join(map(str, MIN_SERVER_VERSION))} or later "
                    "server, or at a Milvus Lite file."
                ) from e
            self._lite_engine = version.startswith("milvus_lite")
        return self._lite_engine

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(...)``, with failures as StoreError naming the URI."""
        if self._view is not None and method in _WRITES:
            raise StoreError(f"the Milvus Lite folder {self.uri} is read-only: cannot {method}")
        if method in _READS:
            kwargs["consistency_level"] = _CONSISTENCY
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except Exception as e:
            raise StoreError(f"Milvus {method} on {self.collection} at {self.uri} failed: {_reason(e)}") from e


def _row(c: Chunk, v: np.ndarray, bm25: bool, prepare: Callable[[str], str] | None = None) -> dict[str, Any]:
    row = {
        "id": c.id,
        "text": _clip(c.text, _TEXT_MAX),
        "context": _clip(c.context, 1024),
        "path": _clip(c.path, _PATH_MAX),
        "rel_path": _clip(c.rel_path, _PATH_MAX),
        "root": _clip(c.root, _PATH_MAX),
        "headings": list(c.heading_path),
        "level": c.level,
        "position": c.position,
        "page": c.page or 0,
        "line_start": c.line_start or 0,
        "line_end": c.line_end or 0,
        "content_hash": c.content_hash,
        "metadata": c.metadata,
        "vector": np.asarray(v, dtype=np.float32).tolist(),
    }
    if bm25:
        row["bm25_text"] = _clip(prepare(c.embed_text) if prepare else c.embed_text, _TEXT_MAX)
    return row


def _requests(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """``rows`` in lists of at most ``_REQUEST_ROWS`` rows and ``_REQUEST_BYTES`` estimated bytes."""
    request: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        row_size = _row_bytes(row)
        if request and (size + row_size > _REQUEST_BYTES or len(request) >= _REQUEST_ROWS):
            yield request
            request, size = [], 0
        request.append(row)
        size += row_size
    if request:
        yield request


def _row_bytes(row: dict[str, Any]) -> int:
    """About the bytes ``row`` takes in a write request, from its values' lengths.

    Strings count their characters (text is mostly ASCII; the request cap leaves
    room for the 2-4 bytes of other characters), JSON values the characters of
    their ``repr``, and a vector four bytes per float.
    """
    size = _ROW_OVERHEAD + 4 * len(row["vector"])
    for key, value in row.items():
        if isinstance(value, str):
            size += len(value)
        elif key != "vector" and isinstance(value, dict | list):
            size += len(repr(value))
    return size


def _lite_key(uri: str) -> str:
    return os.path.abspath(os.path.expanduser(uri))


def _lite_release(uri: str) -> None:
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


# -- read-only Milvus Lite folders ------------------------------------------
# Milvus Lite writes whenever it opens a folder (its LOCK file, a new write-ahead
# log), so it cannot open one it may not write: a read-only mount, or a folder of
# another user. Search and status open a private view of such a folder instead.


def _lite_read_only(uri: str) -> bool:
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


def _lite_view(uri: str) -> str:
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


def _lite_locked(uri: str) -> bool:
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


def _reason(e: Exception) -> str:
    msg = getattr(e, "message", None) or str(e)
    return msg.strip().splitlines()[0][:300] if msg else type(e).__name__

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

Milvus Lite's own upkeep (BM25 padding of small updates, the fingerprint and
checksums of its files, read-only folders) lives in :mod:`mdrag.store.milvus.lite`;
the store calls it at :meth:`MilvusStore.end_run`, and when it opens and closes.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.errors import ModelMismatchError, StoreDamagedError, StoreError
from mdrag.knobs import STORE_MAX_ROWS
from mdrag.redact import redact_url
from mdrag.store.base import Filter, Hit, same_embedder
from mdrag.store.milvus import check as milvus_check
from mdrag.store.milvus import filters, tagsets
from mdrag.store.milvus import rows as milvus_rows
from mdrag.store.milvus import search as milvus_search
from mdrag.store.milvus.check import reason
from mdrag.store.milvus.lite import (
    ROWS_KEY,
    LiteFiles,
    is_server,
    lite_read_only,
    lite_release,
    lite_use,
    lite_view,
    padding,
    refresh_bm25,
)
from mdrag.store.milvus.names import collection_name
from mdrag.store.milvus.rows import CONSISTENCY, FIELDS, IDENTITY_KEY
from mdrag.types import Chunk

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["MilvusStore", "collection_name"]

log = logging.getLogger(__name__)

_QUERY_BATCH = 1000  # ids or hashes per `in [...]` expression
_WRITES = {
    "upsert",
    "insert",
    "delete",
    "flush",
    "create_collection",
    "drop_collection",
    "alter_collection_properties",
}  # refused on a view
_READS = {"query", "search"}  # read with CONSISTENCY


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
        self.collection = collection_name(index)
        self.identity = identity  # {"model": ..., "dimension": ...} of the embedder
        self._token = token  # server credentials; never logged
        self._client: Any = None  # pymilvus.MilvusClient, connected in open()
        self.prepare_text = prepare_text  # applied to BM25 text and BM25 queries (stemming), if set
        self.has_bm25 = True  # the collection has the BM25 sparse field (collections before 0.1 do not)
        self.transactional = False  # writes are searchable at once, from any process
        self.hides = False  # an `id not in [...]` filter of thousands of ids costs more than fetching them
        self._lite_engine: bool | None = None  # the server is Milvus Lite: see per_segment_bm25
        self._view: str | None = None  # a read-only Lite folder is opened through this view: see lite_view
        # A Milvus Lite collection's files, as mdrag keeps and checks them; None for a server.
        self._files = None if is_server(uri) else LiteFiles(uri, self.collection)
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
        return cls(config.effective("milvus_uri"), name, identity, config["milvus_token"], prepare_text)

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
                milvus_rows.create(self.client, self.collection, self.identity, self.uri)
            else:
                try:
                    self._check_identity()
                except ModelMismatchError as e:
                    if not replace_mismatch:
                        raise
                    log.warning("%s Rebuilding it now.", e)
                    self.drop()
                    milvus_rows.create(self.client, self.collection, self.identity, self.uri)
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
                    self.close()
                    LiteFiles.put_back(moved)  # not (only) the index files: the collection stays as it was
                    raise
                log.warning(
                    "Milvus Lite could not load the collection %s (%s); it loads without its %d index "
                    "file(s), which it builds again from the data: the damaged ones are in %s",
                    self.collection,
                    reason(e),
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
        if self._files is None or self._view is not None:
            return []
        files = files or self._files.index_files()
        if not files:
            return []
        self.close()
        return self._files.move_aside(files)

    def _set_aside_changed_index_files(self) -> None:
        """Move the index files that differ from what their run wrote into the cache's damaged/ folder
        (Milvus Lite builds them again from the data when it loads the collection); StoreDamagedError
        when they cannot be moved (a read-only folder), or when a data file differs: its rows cannot be
        trusted, and no command serves them (`mdrag index --rebuild` builds the index again)."""
        if self._files is not None and (data := self._files.changed_index_files(data=True)):
            raise milvus_check.changed_data_error(data)
        changed = self._files.changed_index_files() if self._files is not None else []
        if not changed:
            return
        moved = [] if lite_read_only(self.uri) else self._set_aside_index_files(changed)
        if not moved:
            raise milvus_check.changed_files_error(changed)
        log.warning(
            "%d vector index file(s) of %s are not the ones their run wrote (damaged?): moved to %s; Milvus "
            "Lite builds them again from the stored vectors",
            len(moved),
            self.collection,
            moved[0][1].parent.parent,
        )

    def _record_sums(self) -> None:
        """Record what the run leaves: its index files' sha256 and the row count (Milvus Lite)."""
        if self._files is None or self._view is not None:
            return
        self._files.record_sums(self.count_where(""))

    @property
    def verify_reads(self) -> str:
        """What :meth:`check` with ``thorough`` reads, naming the store, as `status --verify` says it."""
        return milvus_check.verify_reads(self._files, self.uri)

    def check(self, thorough: bool = False) -> list[str]:
        """What differs from what the last run recorded, each naming the file; [] when whole (opening sets
        aside the index files that differ): :func:`mdrag.store.milvus.check.found_damage`."""
        return milvus_check.found_damage(self, self._files, thorough)

    def repair(self, thorough: bool = False) -> tuple[list[str], set[str]]:
        """What :func:`mdrag.store.milvus.check.repair` repairs (``thorough``, or a Lite checksum record lost):
        what was repaired, and the ids of the chunks deleted, whose files are indexed again."""
        said, suspect = milvus_check.repair(self, self._files, thorough)
        self._as_left = self._as_left and not said
        return said, suspect

    def _open_error(self, e: Exception, create: bool) -> StoreError:
        """Why the store could not be opened: unreachable, in use by another process, or damaged."""
        if not is_server(self.uri):
            self.close()  # this process's own Milvus Lite server holds the file's lock: release it first
        return milvus_check.open_error(e, self.uri, self.collection, create)

    def set_aside(self) -> Path | None:
        """Move a damaged Milvus Lite collection out of the database, so the index can be built anew.

        Returns where it went (``<cache>/damaged/<collection>-<time>``), or None when there is
        nothing to move (a server URI, or no collection folder). Closes the store when it moves one.
        """
        if self._files is None or not self._files.folder.is_dir():
            return None
        self.close()
        return self._files.set_aside()

    def _connect(self, create: bool = True) -> None:
        MilvusClient = milvus_rows.pymilvus().MilvusClient
        uri = self.uri
        if not is_server(self.uri):
            Path(self.uri).expanduser().parent.mkdir(parents=True, exist_ok=True)
            if not create and lite_read_only(self.uri):  # search or status of a read-only index
                uri = self._view = lite_view(self.uri)
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
        if not is_server(uri):
            lite_use(uri)
        else:
            self._check_server()

    def _check_server(self) -> None:
        """Refuse a Milvus server too old for BM25 full-text search (:func:`mdrag.store.milvus.check.too_old`).
        Asked once, as the server is connected."""
        try:
            version = str(self.client.get_server_version())
        except Exception as e:  # asked again where it matters (see lite)
            log.warning("the Milvus server at %s did not say its version (%s)", redact_url(self.uri), reason(e))
            return
        self._lite_engine = version.startswith("milvus_lite")
        if error := milvus_check.too_old(version, self.uri):
            self.close()
            raise error

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
            if not is_server(self.uri):
                lite_release(self._view or self.uri)
            self._drop_view()
        if view is None and self._files is not None:
            self._files.record_fingerprint() if record else self._files.forget_fingerprint()

    def _drop_view(self) -> None:
        if self._view is not None:
            shutil.rmtree(Path(self._view).parent, ignore_errors=True)
            self._view = None

    def unchanged_since_last_run(self) -> bool:
        """Whether a Milvus Lite collection's files are as they were when the store was last closed after
        a run (:meth:`end_run`); read without connecting. Always False for a server URI."""
        return self._files is not None and self._files.unchanged()

    @property
    def client(self) -> Any:
        if self._client is None:
            raise StoreError("the store is not open")
        return self._client

    def stored_identity(self) -> dict[str, Any] | None:
        props = self.client.describe_collection(self.collection).get("properties") or {}
        raw = props.get(IDENTITY_KEY)
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
        if not same_embedder(stored, self.identity):
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
        tagsets.opened(self)  # its sets of tags are loaded again at their first use
        state = str(self.client.get_load_state(self.collection).get("state", ""))
        if "Loaded" not in state:
            self.client.load_collection(self.collection)

    def drop(self) -> None:
        """Delete the whole collection (a rebuild with another model)."""
        self._as_left = False
        if self._files is not None:
            self._files.forget_fingerprint()
            self._files.forget_sums()
        if self.client.has_collection(self.collection):
            self.client.drop_collection(self.collection)
        tagsets.forget(self)

    # -- writes ------------------------------------------------------------
    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Insert or replace chunks by id; searchable at once, sealed by :meth:`flush`.

        A run flushes once, in :meth:`end_run`: every flush seals a segment, and small
        segments cost search time (and, in Milvus Lite, BM25 quality).
        """
        self._as_left = False
        rows = (milvus_rows.chunk_row(c, v, self.has_bm25, self.prepare_text) for c, v in zip(chunks, vectors))
        self._write(rows)

    def _write(self, rows: Iterable[dict[str, Any]]) -> None:
        """Upsert ``rows`` in requests that fit the transport, each built only when it is sent.

        The whole write would be one gRPC message otherwise, refused past the
        server's limit, and held in memory as Python lists of floats.
        """
        for request in milvus_rows.requests(rows):
            tagsets.put(self, request)  # each set of tags once, written first
            self.call("upsert", self.collection, request)

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
        return self.has_bm25 and self.lite()

    def rewrite(self, ids: Iterable[str]) -> None:
        """Write these rows again, unchanged, so that they share one set of segments (sealed by a flush)."""
        self._as_left = False
        ids = sorted(ids)
        fields = ["id", *FIELDS, "vector", "bm25_text"]
        for i in range(0, len(ids), _QUERY_BATCH):
            expr = filters.in_("id", ids[i : i + _QUERY_BATCH])
            rows = self.call("query", self.collection, filter=expr, output_fields=fields)
            self._write({k: r[k] for k in fields} for r in rows)

    def delete_ids(self, ids: Iterable[str]) -> None:
        """Delete these chunks (ids not stored are ignored); sealed by :meth:`end_run`'s flush."""
        self._as_left = False
        ids = list(ids)
        for i in range(0, len(ids), _QUERY_BATCH):
            tagsets.delete(self, filters.in_("id", ids[i : i + _QUERY_BATCH]))  # and the sets no row names

    def flush(self) -> None:
        self.call("flush", self.collection)

    def end_run(self, written: set[str], live: set[str], whole: bool) -> None:
        """An indexing run is done writing: pad a small update's segment (Milvus Lite), flush once
        (every flush seals a segment), and write the index again whole when small updates add up to
        ``BM25_REWRITE_SHARE`` of it, or when the run ends a first build run in steps (Milvus Lite; see
        :attr:`per_segment_bm25`)."""
        if written and not whole and self.per_segment_bm25 and (sample := padding(written, live)):
            self.rewrite(sample)  # a small update's segment gets BM25 statistics like the whole index's
        elif whole and self.per_segment_bm25 and not live <= written:
            # The last step of a first build run in steps: every step left segments of its own, with their own
            # BM25 statistics, cut where the clock ended each step. Written again together, the index ranks as
            # a build in one run leaves it, however its steps fell.
            log.info("writing the %d chunks of a first build's steps again together (BM25 statistics)", len(live))
            self.rewrite(live)
        self.flush()
        refresh_bm25(self, live, len(written), whole)
        self._record_sums()
        self._as_left = True

    def rows_since_rewrite(self) -> int:
        """Chunks written by small updates since the collection was last written whole (see :meth:`end_run`)."""
        props = self.call("describe_collection", self.collection).get("properties") or {}
        try:
            return int(props.get(ROWS_KEY) or 0)
        except ValueError:
            return 0

    # -- reads -------------------------------------------------------------
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors for these content hashes: the embedding cache."""
        hashes = sorted(set(hashes))
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), _QUERY_BATCH):
            expr = filters.in_("content_hash", hashes[i : i + _QUERY_BATCH])
            rows = self.call("query", self.collection, filter=expr, output_fields=["content_hash", "vector"])
            for r in rows:
                found.setdefault(r["content_hash"], np.asarray(r["vector"], dtype=np.float32))
        return found

    def all_ids(self, roots: Sequence[str] | None = None) -> set[str]:
        """Every chunk id in the collection, or under these indexed folders (used to repair after a crash)."""
        return {r["id"] for r in self.all_rows(["id"], roots)}

    def id_paths(self, roots: Sequence[str] | None = None) -> dict[str, str]:
        """Chunk id -> file path, for the whole collection or these indexed folders."""
        return {r["id"]: r["path"] for r in self.all_rows(["id", "path"], roots)}

    def search_texts(self, share: int = 16) -> Iterator[str]:
        """The text BM25 ranks (the chunk's text where the collection has no BM25 field) of every chunk,
        or of about ``share``/16 of them: the chunks whose id starts with one of the first ``share`` hex
        digits (ids are hex digests, so the sample is uniform)."""
        field = "bm25_text" if self.has_bm25 else "text"
        prefixes = [""] if share >= 16 else list("0123456789abcdef"[: max(share, 1)])
        for prefix in prefixes:
            for row in self.all_rows([field], None, prefix):
                yield row[field]

    def all_rows(self, fields: list[str], roots: Sequence[str] | None, prefix: str = "") -> list[dict[str, Any]]:
        """``fields`` of every row, or of the rows under these indexed folders.

        Ids are hex digests, so the collection is read in buckets by id prefix,
        each split 16 ways while it is larger than one query may return
        (Milvus caps a query at :data:`~mdrag.knobs.STORE_MAX_ROWS` rows; Milvus Lite has no query iterator).
        """
        limit = self.query_limit
        expr = filters.and_(
            filters.like_prefix("id", prefix) if prefix else "", filters.in_("root", roots) if roots else ""
        )
        rows: list[dict[str, Any]] = self.call("query", self.collection, filter=expr, output_fields=fields, limit=limit)
        if len(rows) < limit:
            return rows
        return [row for c in "0123456789abcdef" for row in self.all_rows(fields, roots, prefix + c)]

    def count(self, roots: Sequence[str] | None = None) -> int:
        """Chunks in the collection, or under these indexed folders."""
        return self.count_where(filters.in_("root", roots) if roots else "")

    def roots(self) -> list[str]:
        """The chunks' folders, one query each (Milvus has no DISTINCT): a chunk under none found so far."""
        found: list[str] = []
        while True:
            expr = f"not ({filters.in_('root', found)})" if found else ""
            rows = self.call("query", self.collection, filter=expr, output_fields=["root"], limit=1)
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
        ranking fuses the two lists: mdrag.retrieval.fusion). Every row's ``score`` is its
        cosine similarity to ``vector``, whatever ranked it, so one threshold
        means the same in every mode; ``rank_score`` is the ranking mode's own score.
        How a filter and Milvus Lite's HNSW walk keep recall: :func:`mdrag.store.milvus.search.search`.
        """
        return milvus_search.search(self, vector, k, where, mode, text)

    def count_where(self, expr: str) -> int:
        """Rows passing the filter expression ``expr`` ("" for all)."""
        rows = self.call("query", self.collection, filter=expr, output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def lite(self) -> bool:
        """Whether the server is Milvus Lite (embedded, or ``milvus-lite server``); asked once."""
        if self._lite_engine is None:
            client = self.client  # StoreError when not connected
            try:
                version = str(client.get_server_version())
            except Exception as e:
                raise StoreError(
                    f"Cannot tell which Milvus serves {self.uri} (its version request failed: {reason(e)}). "
                    f"Check that milvus_uri points at a Milvus {milvus_check.least_version()} or later "
                    "server, or at a Milvus Lite file."
                ) from e
            self._lite_engine = version.startswith("milvus_lite")
        return self._lite_engine

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(...)``, with failures as StoreError naming the URI."""
        if self._view is not None and method in _WRITES:
            raise StoreError(f"the Milvus Lite folder {self.uri} is read-only: cannot {method}")
        if method in _READS:
            kwargs["consistency_level"] = CONSISTENCY
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except Exception as e:
            raise StoreError(f"Milvus {method} on {self.collection} at {self.uri} failed: {reason(e)}") from e

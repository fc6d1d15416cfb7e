"""Damage to a Milvus collection (see :mod:`mdrag.store.milvus`): what opening, `mdrag status` and
`status --verify` find (and say they read), what each error says, and the repairs: chunks whose text was
edited are deleted (their files are indexed again), a vector index that lost its vectors is built again."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from mdrag.errors import StoreDamagedError, StoreError, StoreInUseError, StoreUnavailableError
from mdrag.redact import redact_url
from mdrag.store.base import bm25_text, cut_short, holds_its_bm25, holds_its_text
from mdrag.store.milvus import filters
from mdrag.store.milvus.lite import LiteFiles, is_server, lite_locked, lite_read_only
from mdrag.store.milvus.rows import FIELDS

log = logging.getLogger(__name__)

#: The oldest Milvus server mdrag works with: the BM25 function (full-text search) came in Milvus 2.5, and
#: in Milvus Lite 2.5 (a `milvus-lite server` reports "milvus_lite-3.2.2"; mdrag installs 2.5 or later).
MIN_SERVER_VERSION = (2, 5)
_VERSION = re.compile(r"(?:^|[\s(v-])(\d+)\.(\d+)")  # "v2.3.5", "2.6.1-rc", "milvus_lite-3.2.2"
_SELF_SAMPLE = 64  # stored vectors `status --verify` asks the vector index for (see lost_vectors)


class Collection(Protocol):
    """What a check asks of the store: reads of its collection."""

    uri: str  # the Milvus Lite file, or the server's URI
    collection: str
    has_bm25: bool  # the collection has the BM25 text field
    prepare_text: Callable[[str], str] | None  # applied to BM25 texts (stemming), if set

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...  # a client request, errors as StoreError

    def count_where(self, expr: str) -> int: ...  # rows passing ``expr`` ("" for all)

    def all_ids(self, roots: Sequence[str] | None = None) -> set[str]: ...

    def all_rows(self, fields: list[str], roots: Sequence[str] | None) -> list[dict[str, Any]]: ...

    def delete_ids(self, ids: Iterable[str]) -> None: ...


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


def least_version() -> str:
    """:data:`MIN_SERVER_VERSION` as a user reads it ("2.5")."""
    return ".".join(map(str, MIN_SERVER_VERSION))


def too_old(version: str, uri: str) -> StoreError | None:
    """The error of a Milvus server at ``uri`` that reports ``version`` older than :data:`MIN_SERVER_VERSION`:
    it has no BM25 function, so creating a collection fails (a 2.3 server was seen to abort on it)."""
    if not server_too_old(version, MIN_SERVER_VERSION):
        return None
    least = least_version()
    return StoreError(
        f"The Milvus server at {redact_url(uri)} is version {version}, and mdrag needs Milvus {least} "
        f"or later (or Milvus Lite {least} or later), for its BM25 full-text search. Upgrade the server "
        "(docker-compose.milvus.yml runs one), or unset milvus_uri to keep the index on this machine."
    )


def reason(e: Exception) -> str:
    """The first line of an error from pymilvus or Milvus, for a message that names what failed."""
    msg = getattr(e, "message", None) or str(e)
    return msg.strip().splitlines()[0][:300] if msg else type(e).__name__


def found_damage(store: Collection, files: LiteFiles | None, thorough: bool) -> list[str]:
    """What differs from what the last run recorded, each naming the file; [] when whole. Cheap: the
    index files' sha256; ``thorough`` also the data files', counts the rows, reads every row's text
    (:func:`damaged_texts`) and asks the vector index for a sample of its own vectors (:func:`lost_vectors`):
    :func:`verify_reads` says which of these it can do."""
    changed = files.changed_index_files() if files is not None else []
    found = [f"the vector index file {p} is not the one its run wrote" for p in changed]
    if files is not None and files.sums_lost():
        found.append(files.sums_lost_message())
    if thorough and files is not None and (data := files.changed_index_files(data=True)):
        raise changed_data_error(data)
    rows = files.recorded_sums().get("rows") if files is not None else None
    if thorough and isinstance(rows, int) and (held := store.count_where("")) != rows:
        found.append(f"the collection {store.collection} in {store.uri} holds {held} rows, its last run left {rows}")
    edited, bm25 = damaged_texts(store) if thorough else (set(), {})
    if edited:
        found.append(edited_message(store, edited))
    if bm25:
        found.append(bm25_message(store, bm25))
    if thorough and (lost := lost_vectors(store)):
        found.append(lost)
    return found


def verify_reads(files: LiteFiles | None, uri: str) -> str:
    """What the thorough check of :func:`found_damage` reads of the collection at ``uri`` with these files
    (None: a Milvus server, whose files are not on this machine), as `status --verify` says it."""
    rows = f"every row's text against its content hash and {_SELF_SAMPLE} sampled vectors"
    if files is None:
        return f"{rows} of the Milvus server at {uri}, not its files (they are not on this machine)"
    if files.sums_lost():
        return f"{rows} of the index store {uri}, not its data files (their checksum record {files.sums} is missing)"
    return f"the row count, the data files' sha256, {rows} of the index store {uri}"


def _where(store: Collection) -> str:
    """The collection as a message names it: its folder (Milvus Lite), or the server's URI."""
    return store.uri if is_server(store.uri) else str(Path(store.uri).expanduser() / "collections" / store.collection)


def damaged_texts(store: Collection) -> tuple[set[str], dict[str, str]]:
    """The ids of the chunks whose text (with its context) no longer has the content hash its run stored
    (the sha256 of the text that was embedded: :attr:`mdrag.types.Chunk.embed_text`), and, of the others, the
    BM25 text each chunk should hold whose BM25 text is not its text as BM25 reads it
    (:func:`~mdrag.store.base.holds_its_bm25`). Every row is read; a text Milvus holds cut to its field's
    size cannot be checked, and passes."""
    bad: set[str] = set()
    bm25: dict[str, str] = {}
    for r in store.all_rows(["id", "text", "context", "content_hash", *(["bm25_text"] * store.has_bm25)], None):
        text, context = r["text"], r["context"]
        if cut_short(text, context):
            continue
        if not holds_its_text(text, context, r["content_hash"]):
            bad.add(r["id"])
        elif store.has_bm25 and not cut_short(r["bm25_text"], ""):
            if not holds_its_bm25(r["bm25_text"], text, context, store.prepare_text):
                bm25[r["id"]] = bm25_text(text, context, store.prepare_text)
    return bad, bm25


def edited_message(store: Collection, edited: set[str]) -> str:
    return f"the text of {len(edited)} chunk(s) in {_where(store)} is not the text its run stored (edited)"


def bm25_message(store: Collection, bm25: dict[str, str]) -> str:
    return f"the BM25 text of {len(bm25)} chunk(s) in {_where(store)} is not their text as BM25 reads it (changed)"


def write_bm25(store: Collection, bm25: dict[str, str]) -> None:
    """Write these chunks' rows again with the BM25 text each should hold (their vectors and fields kept)."""
    ids = sorted(bm25)
    for i in range(0, len(ids), 1000):
        expr = filters.in_("id", ids[i : i + 1000])
        rows = store.call("query", store.collection, filter=expr, output_fields=["id", *FIELDS, "vector"])
        rows = [{**r, "bm25_text": bm25[r["id"]]} for r in rows]
        store.call("upsert", store.collection, rows)


def lost_vectors(store: Collection) -> str:
    """Whether the vector index finds the chunks it holds: a sample of ``_SELF_SAMPLE`` stored vectors,
    each searched for, must each come back with a cosine of 1 (itself, or a chunk of the same text).
    An index damaged where its files' checksums do not look (a Milvus server, or files with no
    recorded checksum) finds other chunks. "" when it finds them, else what it found, naming the store."""
    ids = sorted(store.all_ids())
    if not ids:
        return ""
    sample = random.Random(len(ids)).sample(ids, min(_SELF_SAMPLE, len(ids)))
    rows = store.call("query", store.collection, filter=filters.in_("id", sample), output_fields=["vector"])
    if not rows:
        return ""
    res = store.call(
        "search",
        store.collection,
        data=[[float(x) for x in r["vector"]] for r in rows],
        limit=1,
        output_fields=["id"],
        search_params={"metric_type": "COSINE"},
    )
    missed = sum(1 for hits in res if not hits or float(hits[0]["distance"]) < 1 - 1e-3)
    if missed <= len(rows) // 16:  # HNSW is approximate: a few may be missed in a large index
        return ""
    return (
        f"the vector index of {_where(store)} does not find its own vectors ({missed} of {len(rows)} searched for "
        "were not found)"
    )


def repair(store: Collection, files: LiteFiles | None, thorough: bool) -> tuple[list[str], set[str]]:
    """What the thorough check finds that the store can repair, from the data it holds, when ``thorough`` or
    when the collection's checksum record was lost (then written again): what was repaired (each a message),
    and the ids of the chunks whose text was edited, deleted so that their files are indexed again (a damaged
    row must not be reused by its content hash). A data file that differs from what its run wrote raises:
    its rows cannot be trusted, only `mdrag index --rebuild` repairs it."""
    record_lost = files is not None and files.sums_lost()
    if not (thorough or record_lost):
        return [], set()
    if files is not None and (data := files.changed_index_files(data=True)):
        raise changed_data_error(data)
    said: list[str] = []
    edited, bm25 = damaged_texts(store)
    if edited:
        said.append(f"{edited_message(store, edited)}: deleted, and their files indexed again")
        store.delete_ids(edited)
    if bm25:
        said.append(f"{bm25_message(store, bm25)}: made again from their text")
        write_bm25(store, bm25)
    if lost := lost_vectors(store):
        rebuild_vector_index(store)
        said.append(f"{lost}: built again from the stored vectors")
    if record_lost and files is not None:
        rows = store.count_where("")
        recorded = files.record_again(rows)
        if rows:  # an empty collection (a first run killed before its first write) had nothing to lose
            said.append(recorded)
    return said, edited


def rebuild_vector_index(store: Collection) -> None:
    """Drop the collection's vector index and build it again from the stored vectors (nothing is embedded)."""
    store.call("release_collection", store.collection)
    store.call("drop_index", store.collection, "vector")
    ip = store.call("prepare_index_params")
    ip.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
    store.call("create_index", store.collection, ip)
    store.call("load_collection", store.collection)


def changed_files_error(changed: list[Path]) -> StoreDamagedError:
    """The error of index files that differ from what their run wrote and cannot be moved aside."""
    return StoreDamagedError(
        f"The index store is damaged: {changed[0]} is not the vector index file its run wrote. Run "
        "`mdrag index` where the folder is writable to build it again from the stored vectors."
    )


def changed_data_error(changed: list[Path]) -> StoreDamagedError:
    """The error of data files that differ from what their run wrote: the rows cannot be trusted."""
    return StoreDamagedError(
        f"The index store is damaged: {changed[0]} is not the data file its run wrote"
        + (f" (nor are {len(changed) - 1} more)" if len(changed) > 1 else "")
        + ". `mdrag index --rebuild` moves the collection aside (into the cache's damaged/ folder) and builds "
        "the index again from its folders."
    )


def open_error(e: Exception, uri: str, collection: str, create: bool) -> StoreError:
    """Why the store at ``uri`` could not be opened: unreachable, in use by another process, or damaged.
    A Milvus Lite store must be closed first (this process's own Milvus Lite server holds the file's lock)."""
    if is_server(uri):
        return StoreUnavailableError(
            f"Cannot reach the Milvus store at {uri}: {reason(e)}. Start the Milvus server or fix milvus_uri."
        )
    if create and lite_read_only(uri):
        return StoreUnavailableError(
            f"The Milvus Lite folder {uri} is read-only: mdrag can search it but not index "
            "into it. Index where mdrag can write (MDRAG_HOME or milvus_uri)."
        )
    if lite_locked(uri):
        return StoreInUseError(
            f"The Milvus Lite file {uri} is in use by another process (a running "
            "`mdrag index` or `mdrag serve`?). Wait for it to finish, or stop it, and try again."
        )
    where = Path(uri).expanduser() / "collections" / collection
    if where.is_dir():
        return StoreDamagedError(
            f"The index store is damaged: Milvus Lite cannot open {where} ({reason(e)}). "
            "`mdrag index --rebuild` moves it aside (into the cache's damaged/ folder) and builds the "
            "index again from its folders."
        )
    return StoreUnavailableError(
        f"Cannot open the Milvus Lite file {uri}: {reason(e)}. Check that its folder exists and is writable."
    )

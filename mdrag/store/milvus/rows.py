"""The Milvus store's collection schema, its rows, and the write requests they go in (see
:mod:`mdrag.store.milvus`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from mdrag.store.base import CONTEXT_MAX_BYTES, TEXT_MAX_BYTES
from mdrag.types import Chunk

log = logging.getLogger(__name__)

IDENTITY_KEY = "mdrag.identity"  # collection property: the model identity, as JSON
CONSISTENCY = "Strong"  # reads see every acknowledged write: see mdrag.store.milvus.store's docstring
_TEXT_MAX = TEXT_MAX_BYTES  # VARCHAR limit in bytes
_PATH_MAX = 4096
_CONTEXT_MAX = CONTEXT_MAX_BYTES
# A gRPC server refuses a message over its limit (256 MiB by default in Milvus and
# Milvus Lite), so writes go in requests of at most this many estimated bytes
# (text, JSON and vector; one oversized row goes alone) and this many rows.
_REQUEST_BYTES = 32 * 1024 * 1024
_REQUEST_ROWS = 2048
FIELDS = [
    "text", "context", "path", "rel_path", "root", "headings", "level",
    "position", "page", "line_start", "line_end", "content_hash", "metadata",
]  # fmt: skip  # what a read returns of a row, beside its id
_ROW_OVERHEAD = 128  # bytes a row costs beyond its values: field tags, numbers, JSON punctuation


def pymilvus() -> Any:
    """Import pymilvus and quiet its own log handlers: mdrag reports store errors
    itself, with the URI and what to do, instead of pymilvus's RPC tracebacks."""
    import pymilvus

    # grpc._server: Milvus Lite's in-process server logs a harmless "AllocTimestamp
    # not implemented" traceback each time a collection is created.
    for name in ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer", "grpc._server", "milvus_lite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return pymilvus


def _clip(s: str, limit: int) -> str:
    b = s.encode("utf-8", "surrogatepass")
    return s if len(b) <= limit else b[:limit].decode("utf-8", "ignore")


def create(client: Any, collection: str, identity: dict[str, Any], uri: str) -> None:
    """Create ``collection``: its schema, BM25 function and indexes, with the model ``identity`` as a property."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    dim = int(identity["dimension"])
    s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    # enable_analyzer lets a BM25 function be added on `text` without a migration.
    s.add_field("text", DataType.VARCHAR, max_length=_TEXT_MAX, enable_analyzer=True)
    s.add_field("context", DataType.VARCHAR, max_length=_CONTEXT_MAX)
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
    ip = client.prepare_index_params()
    ip.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
    ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(
        collection,
        schema=s,
        index_params=ip,
        properties={IDENTITY_KEY: json.dumps(identity, sort_keys=True)},
        consistency_level=CONSISTENCY,
    )
    log.info("created collection %s (%d-d) in %s", collection, dim, uri)


def chunk_row(c: Chunk, v: np.ndarray, bm25: bool, prepare: Callable[[str], str] | None = None) -> dict[str, Any]:
    row = {
        "id": c.id,
        "text": _clip(c.text, _TEXT_MAX),
        "context": _clip(c.context, _CONTEXT_MAX),
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


def requests(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
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

"""The Milvus store's tags: each set of tags stored once, however many chunks carry it.

Every chunk of a note carries the note's tags. Kept in each chunk's ``metadata``, a note of 20,000 inline
tags made every one of its 1,427 rows carry all of them: 264 s to index in Milvus Lite, 1.6 GB of memory,
and 18 s for one tag-filtered search. So a chunk row's ``metadata`` holds, instead of its ``tags``, the
sha256 of their JSON value (``metadata["tagset"]``, a list of that one digest: Milvus matches a
JSON key against a list of values only where it holds a list), and the value is kept once in a second collection,
``<collection>_tagsets`` (its ``digest``, the value under ``tags["tags"]``, and the two-number vector
every Milvus collection must have). A tag filter asks that collection which sets hold the tag, and
matches the chunk rows that name one of them (or, rows written before, hold the tag themselves); a read
puts the value back, so a chunk's metadata reads as it was written. A set no row names any more is
deleted with the last row that named it.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Iterable
from typing import Any, Protocol

from mdrag.store.milvus import filters

KEY = "tagset"  # the metadata key a chunk row holds instead of its tags: their set's digest
_SUFFIX = "_tagsets"
_DIM = 2  # the vector Milvus requires of a collection: unused
_BATCH = 1000  # digests per `in [...]` expression
# Client -> the set collections it has created or loaded (a new connection loads them again).
_ready: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


class Collection(Protocol):
    """What these functions ask of the store."""

    uri: str
    collection: str  # the chunks' collection

    @property
    def client(self) -> Any: ...  # the connected MilvusClient

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...  # a client request, errors as StoreError


def name(collection: str) -> str:
    """The collection that holds the sets of tags of the chunks' collection ``collection``."""
    return collection + _SUFFIX


def _exists(store: Collection, create: bool) -> bool:
    """Whether the set collection exists (created with ``create``), loaded for reads."""
    coll = name(store.collection)
    ready = _ready.setdefault(store.client, set())
    if coll in ready:
        return True
    if not store.call("has_collection", coll):
        if not create:
            return False
        from pymilvus import DataType, MilvusClient

        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("digest", DataType.VARCHAR, is_primary=True, max_length=64)
        s.add_field("tags", DataType.JSON)
        s.add_field("vector", DataType.FLOAT_VECTOR, dim=_DIM)
        ip = store.client.prepare_index_params()
        ip.add_index("vector", index_type="FLAT", metric_type="L2")
        store.call("create_collection", coll, schema=s, index_params=ip, consistency_level="Strong")
    if "Loaded" not in str(store.call("get_load_state", coll).get("state")):
        store.call("load_collection", coll)
    ready.add(coll)
    return True


def opened(store: Collection) -> None:
    """The store was opened: the set collection is loaded again (if it exists) at its first use."""
    _ready.get(store.client, set()).discard(name(store.collection))


def forget(store: Collection) -> None:
    """Drop the set collection (the chunks' collection is dropped)."""
    coll = name(store.collection)
    _ready.get(store.client, set()).discard(coll)
    if store.call("has_collection", coll):
        store.call("drop_collection", coll)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def put(store: Collection, rows: list[dict[str, Any]]) -> None:
    """Replace each row's ``metadata["tags"]`` by its set's digest (a new dict: the chunk's own stays), and
    write the sets first, so that no row names a set that is not there."""
    sets: dict[str, Any] = {}
    for row in rows:
        metadata = row.get("metadata")
        if isinstance(metadata, dict) and "tags" in metadata:
            digest = _digest(json.dumps(metadata["tags"]))
            sets[digest] = metadata["tags"]
            row["metadata"] = {**{k: v for k, v in metadata.items() if k != "tags"}, KEY: [digest]}
    if sets:
        _exists(store, create=True)
        data = [{"digest": d, "tags": {"tags": v}, "vector": [0.0] * _DIM} for d, v in sets.items()]
        store.call("upsert", name(store.collection), data)


def _query(store: Collection, expr: str, fields: list[str]) -> list[dict[str, Any]]:
    return list(store.call("query", name(store.collection), filter=expr, output_fields=fields))


def holding(store: Collection, tag: str) -> list[str]:
    """The digests of the sets that hold ``tag``."""
    if not _exists(store, create=False):
        return []
    return [r["digest"] for r in _query(store, filters.json_contains("tags", "tags", tag), ["digest"])]


def to_expr(store: Collection, where: Any) -> str:
    """:func:`mdrag.store.milvus.filters.to_expr` of ``where``, each tag matched through the sets that hold it."""
    if not where or not where.tags:
        return filters.to_expr(where)
    from dataclasses import replace

    exprs = [filters.to_expr(replace(where, tags=()))]
    for tag in where.tags:
        held = filters.json_contains("metadata", "tags", tag)  # a row written before the sets
        digests = holding(store, tag)
        exprs.append(f"{held} or {filters.json_contains_any('metadata', KEY, digests)}" if digests else held)
    return filters.and_(*exprs)


def restore(store: Collection, rows: Iterable[dict[str, Any]]) -> None:
    """Put each row's tags back in its metadata, from the set its metadata names."""
    named = [r for r in rows if isinstance(r.get("metadata"), dict) and KEY in r["metadata"]]
    digests = sorted({d for r in named for d in r["metadata"][KEY]})
    values: dict[str, Any] = {}
    if digests and not _exists(store, create=False):
        digests = []  # lost: the rows are read without their tags
    for i in range(0, len(digests), _BATCH):
        for r in _query(store, filters.in_("digest", digests[i : i + _BATCH]), ["digest", "tags"]):
            values[r["digest"]] = r["tags"].get("tags")
    for r in named:
        metadata = {k: v for k, v in r["metadata"].items() if k != KEY}
        found = [values[d] for d in r["metadata"][KEY] if d in values]
        if found:
            metadata["tags"] = found[0]
        r["metadata"] = metadata


def named_by(store: Collection, expr: str) -> set[str]:
    """The digests the rows passing ``expr`` name."""
    rows = store.call("query", store.collection, filter=expr, output_fields=["metadata"])
    return {d for r in rows if isinstance(r.get("metadata"), dict) for d in r["metadata"].get(KEY) or ()}


def drop_unused(store: Collection, digests: Iterable[str]) -> None:
    """Delete those of these sets that no row names any more."""
    wanted = sorted(set(digests))
    if not wanted or not _exists(store, create=False):
        return
    for i in range(0, len(wanted), _BATCH):
        part = wanted[i : i + _BATCH]
        unused = set(part) - named_by(store, filters.json_contains_any("metadata", KEY, part))
        if unused:
            store.call("delete", name(store.collection), filter=filters.in_("digest", sorted(unused)))


def delete(store: Collection, expr: str) -> None:
    """Delete the chunk rows passing ``expr``, and the sets of tags no row names any more."""
    named = named_by(store, expr)
    store.call("delete", store.collection, filter=expr)
    drop_unused(store, named)

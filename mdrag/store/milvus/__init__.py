"""The Milvus store: a Milvus Lite file or a Milvus server (the store: :mod:`.store`).

Its modules, by job: ``backend`` (its ``BACKEND`` declaration and settings: light, what the registry reads),
``names`` (the collection of an index), ``store`` (:class:`MilvusStore`), ``rows`` (the collection's schema,
its rows, the write requests), ``search`` (dense and BM25 searches), ``filters`` (a filter as a Milvus
expression), ``check`` (damage, its repairs, the server's version), ``lite`` (Milvus Lite's files and upkeep).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdrag.store.milvus.backend import BACKEND
from mdrag.store.milvus.names import collection_name

if TYPE_CHECKING:
    from mdrag.store.milvus.store import MilvusStore

__all__ = ["BACKEND", "MilvusStore", "collection_name"]


def __getattr__(name: str) -> Any:
    if name == "MilvusStore":  # imported when first asked for: the registry reads BACKEND alone
        from mdrag.store.milvus.store import MilvusStore

        return MilvusStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

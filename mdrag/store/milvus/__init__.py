"""The Milvus store: a Milvus Lite file or a Milvus server (the store: :mod:`.store`).

Its modules, by job: ``store`` (:class:`MilvusStore` and its ``BACKEND`` declaration), ``rows`` (the
collection's schema, its rows, the write requests), ``search`` (dense and BM25 searches), ``filters`` (a
filter as a Milvus expression), ``check`` (damage, its repairs, the server's version), ``lite`` (Milvus
Lite's files and upkeep).
"""

from mdrag.store.milvus.store import BACKEND, MilvusStore, collection_name

__all__ = ["BACKEND", "MilvusStore", "collection_name"]

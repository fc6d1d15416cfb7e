"""Vector stores. Milvus (a Milvus Lite file, or a server by URI) is the one built in."""

from mdrag.store.milvus import MilvusStore, collection_name

__all__ = ["MilvusStore", "collection_name"]

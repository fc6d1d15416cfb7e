"""The Milvus collection that holds an index."""

from __future__ import annotations

from mdrag.errors import StoreError
from mdrag.settings import INDEX_NAME_RULE, valid_index_name

__all__ = ["collection_name"]


def collection_name(index: str) -> str:
    """The collection of index ``index`` (checked, never pasted): ``mdrag_<name>``, or, for a name with '-' or
    '.', which collection names refuse, ``mdragx_<name>`` with '_', '-', '.' written ``_u``, ``_h``, ``_d``: one
    collection per name (``my-docs`` and ``my_docs`` are two), and the names of before keep theirs."""
    if not valid_index_name(index):
        raise StoreError(f"invalid index name {index!r}: use {INDEX_NAME_RULE}")
    if "-" not in index and "." not in index:
        return f"mdrag_{index}"
    return "mdragx_" + index.replace("_", "_u").replace("-", "_h").replace(".", "_d")

"""mdrag: local-first retrieval and question answering over your documentation.

>>> import mdrag                                                   # doctest: +SKIP
>>> with mdrag.open_index() as index:
...     index.update(["docs"])
...     hits = index.search("how do I configure the cache?", k=5)
...     answer = index.ask("how do I configure the cache?")

Heavy libraries (torch, pymilvus) load only when first used.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mdrag.errors import (
    ConfigError,
    EmbeddingError,
    MdragError,
    ModelMismatchError,
    ParseError,
    StoreError,
    StoreUnavailableError,
    UnsupportedFormatError,
)
from mdrag.types import Chunk, Document, SearchResult, Section
from mdrag.version import __version__

# The library prints nothing: its log records reach the handlers an application sets up, and no others (without
# this, Python's last-resort handler prints WARNING records on stderr). The command line sets up its own.
logging.getLogger("mdrag").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from mdrag.answering.ask import Answer
    from mdrag.config import Config, load_config
    from mdrag.index import Index, open_index

__all__ = [
    "Answer",
    "Chunk",
    "Config",
    "ConfigError",
    "Document",
    "EmbeddingError",
    "Index",
    "MdragError",
    "ModelMismatchError",
    "ParseError",
    "SearchResult",
    "Section",
    "StoreError",
    "StoreUnavailableError",
    "UnsupportedFormatError",
    "__version__",
    "load_config",
    "open_index",
]

_LAZY = {
    "Answer": "mdrag.answering.ask",
    "Index": "mdrag.index",
    "open_index": "mdrag.index",
    "Config": "mdrag.config",
    "load_config": "mdrag.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mdrag' has no attribute {name!r}")

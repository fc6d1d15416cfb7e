"""Stores: where an index's chunks and vectors live (the interface: :mod:`mdrag.store.base`).

A backend is one module under ``mdrag/store/`` with a class that implements
:class:`~mdrag.store.base.Store` and has the constructor ``from_config(config,
name, identity, prepare_text)``, plus one line in :data:`BACKENDS`. The setting
``store.backend`` (env ``MDRAG_STORE``, flag ``--store``) picks one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.store.base import Store

__all__ = ["BACKENDS", "make_store"]

#: Backend name (the setting ``store.backend``) -> "module:class", imported when used.
BACKENDS = {
    "milvus": "mdrag.store.milvus:MilvusStore",
    "faiss": "mdrag.store.faiss:FaissStore",
}


def make_store(
    config: Config, name: str, identity: dict[str, Any], prepare_text: Callable[[str], str] | None = None
) -> Store:
    """The store of index ``name`` on the configured backend (not opened yet).

    ``identity``: the embedder's identity, recorded in the store; ``prepare_text``:
    applied to BM25 texts and queries (stemming).
    """
    backend = config["store.backend"]
    if backend not in BACKENDS:
        raise ConfigError(f"store.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    module_name, _, class_name = BACKENDS[backend].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:  # a dependency of the backend: say which one
            raise ConfigError(
                f"store.backend is {backend!r}, but {e.name} is not installed: install it, "
                "or set store.backend (MDRAG_STORE, --store) to another backend"
            ) from e
        raise ConfigError(
            f"store.backend is {backend!r}, but this mdrag has no {backend} backend ({module_name}): "
            f"set store.backend (MDRAG_STORE, --store) to one of {', '.join(b for b in BACKENDS if b != backend)}"
        ) from e
    store: Store = getattr(module, class_name).from_config(config, name, identity, prepare_text)
    return store

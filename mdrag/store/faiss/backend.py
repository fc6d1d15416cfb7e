"""The FAISS backend as it declares itself (``BACKEND``): light, so that the registry reads it without
importing numpy, faiss or the store (:mod:`.store`, imported when a store is made)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mdrag.store import StoreBackend, same_location

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.store.base import Store

__all__ = ["BACKEND", "location", "owns"]


def _store(config: Config, name: str, identity: dict[str, Any], prepare_text: Callable[[str], str] | None) -> Store:
    from mdrag.store.faiss.store import FaissStore

    return FaissStore.from_config(config, name, identity, prepare_text)


def location(config: Config, name: str) -> str:
    """Where index ``name`` is kept: ``<cache>/faiss/<name>.sqlite``, as :meth:`FaissStore.from_config` puts it."""
    return str(config.cache_dir / "faiss" / f"{name}.sqlite")


def owns(config: Config, name: str, recorded: str | None) -> str | None:
    """Index ``name`` is in FAISS when its manifest says so (an index without one goes to FAISS anyway)."""
    where = location(config, name)
    if recorded is not None and same_location(recorded, where):
        return f"index {name!r} was built in FAISS ({where})"
    return None


#: This backend, as the ``mdrag.stores`` entry point ``faiss`` registers it (pyproject.toml).
BACKEND = StoreBackend(name="faiss", title="FAISS", store=_store, location=location, owns=owns, new_indexes=True)

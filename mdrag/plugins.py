"""Backends that declare themselves by entry point: the stores and the embedders.

mdrag registers its own backends in its ``pyproject.toml`` exactly as a third
party registers one in its own::

    [project.entry-points."mdrag.stores"]
    lance = "mdrag_lance:BACKEND"        # a mdrag.store.base.StoreBackend; store.backend: lance

    [project.entry-points."mdrag.embedders"]
    cohere = "mdrag_cohere:EMBEDDER"     # a mdrag.embedding.base.EmbedderBackend; embedding.provider: cohere

    [project.entry-points."mdrag.local_embedders"]
    coreml = "mdrag_coreml:EMBEDDER"     # runs the local model; embedding.backend: coreml

The entry point's name is the backend's name, the value of the setting that
picks it. The settings and the command line's choices read the names alone,
which imports no backend; a backend's module (with the declaration at its end)
is imported when that backend is first used. Parsers have their own group,
``mdrag.parsers`` (:mod:`mdrag.parsers`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from typing import Any

__all__ = ["EMBEDDERS", "LOCAL_EMBEDDERS", "STORES", "entry_points", "load", "names"]

log = logging.getLogger(__name__)

STORES = "mdrag.stores"  # store backends: the values of store.backend
EMBEDDERS = "mdrag.embedders"  # embedders other than the local model: the values of embedding.provider
LOCAL_EMBEDDERS = "mdrag.local_embedders"  # how the local model runs: the values of embedding.backend


@functools.cache
def _all_entry_points() -> Any:
    """Every installed distribution's entry points, read once per process: each read opens the metadata of
    every installed package (tens of milliseconds where torch and its kin are installed), and a command
    asks for several groups. An ``EntryPoints`` (a ``SelectableGroups`` before Python 3.12): ``.select()``."""
    return importlib.metadata.entry_points()


@functools.cache
def entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of ``group`` by name, sorted by name (read once per process)."""
    found = {ep.name: ep for ep in _all_entry_points().select(group=group)}
    if not found and group in (STORES, LOCAL_EMBEDDERS):  # mdrag registers its own here: its metadata is stale
        log.error(
            "no %s entry points: the metadata of the installed mdrag predates them, or a stale mdrag.egg-info "
            "in the working folder hides it; reinstall mdrag (`pip install -e .`, or `make setup`)",
            group,
        )
    return dict(sorted(found.items()))


def names(group: str) -> list[str]:
    """The names registered in ``group``, sorted; nothing is imported."""
    return list(entry_points(group))


def load(group: str, name: str, kind: type[Any]) -> Any:
    """The declaration that entry point ``name`` of ``group`` names, imported now.

    Raises LookupError when no entry point has that name, ImportError when its
    module (or a library it needs) cannot be imported, and TypeError when the
    object is not a ``kind`` named ``name``.
    """
    ep = entry_points(group).get(name)
    if ep is None:
        raise LookupError(f"no {group} entry point is named {name!r}")
    declared = ep.load()
    if not isinstance(declared, kind) or getattr(declared, "name", None) != name:
        raise TypeError(f"the {group} entry point {name!r} ({ep.value}) is not a {kind.__name__} named {name!r}")
    return declared

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
import importlib
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["EMBEDDERS", "LOCAL_EMBEDDERS", "STORES", "EntryPoint", "entry_points", "load", "names"]

log = logging.getLogger(__name__)

STORES = "mdrag.stores"  # store backends: the values of store.backend
EMBEDDERS = "mdrag.embedders"  # embedders other than the local model: the values of embedding.provider
LOCAL_EMBEDDERS = "mdrag.local_embedders"  # how the local model runs: the values of embedding.backend


@dataclass(frozen=True)
class EntryPoint:
    """An entry point as a distribution's ``entry_points.txt`` declares it: the attributes and ``load()`` of
    importlib.metadata's ``EntryPoint``, read without importing importlib.metadata (with the zipfile, email
    and csv modules it brings, a tenth of the imports of a one-shot command that are not the model's)."""

    name: str
    value: str  # "module:attribute", perhaps with [extras]
    group: str

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].partition("[")[0].strip()

    def load(self) -> Any:
        """The object named, its module imported now."""
        found: Any = importlib.import_module(self.module)
        for part in filter(None, self.attr.split(".")):
            found = getattr(found, part)
        return found


_METADATA = (".dist-info", ".egg-info")


def _normalized(folder: str) -> str:
    """The distribution's name in a metadata folder's name (``mdrag_docs-0.2.0.dist-info``), as
    importlib.metadata compares them: lower case, runs of ``-``, ``_`` and ``.`` as one ``_``."""
    return re.sub(r"[-_.]+", "_", folder.rpartition(".")[0].partition("-")[0]).lower()


def _read(path: str, group_of: dict[str, list[EntryPoint]]) -> None:
    """Add the entry points of the ``entry_points.txt`` at ``path`` (none when it is missing)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return
    group = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
        elif group is not None and "=" in line:
            name, _, value = line.partition("=")
            group_of.setdefault(group, []).append(EntryPoint(name.strip(), value.strip(), group))


def _scan() -> dict[str, list[EntryPoint]] | None:
    """Every installed distribution's entry points by group, read from the metadata folders on ``sys.path``
    in its order, one distribution of each name (the first), as importlib.metadata finds them; None where
    that takes more than folders (a zip file on the path, a finder of distributions of its own)."""
    from importlib.machinery import PathFinder

    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return None
    group_of: dict[str, list[EntryPoint]] = {}
    seen: set[str] = set()
    for entry in sys.path:
        folder = entry or "."
        if os.path.isfile(folder):
            return None
        try:
            listed = os.listdir(folder)
        except OSError:
            continue
        for name in listed:
            if name.endswith(_METADATA) and _normalized(name) not in seen:
                seen.add(_normalized(name))
                _read(os.path.join(folder, name, "entry_points.txt"), group_of)
    return group_of


@functools.cache
def _all_entry_points() -> dict[str, list[EntryPoint]]:
    """Every installed distribution's entry points by group, read once per process: each read opens the
    metadata of every installed package (tens of milliseconds where torch and its kin are installed), and a
    command asks for several groups."""
    found = _scan()
    if found is not None:
        return found
    import importlib.metadata

    everything = importlib.metadata.entry_points()  # a SelectableGroups before Python 3.12: .groups, .select()
    return {
        group: [EntryPoint(ep.name, ep.value, group) for ep in everything.select(group=group)]
        for group in everything.groups
    }


@functools.cache
def entry_points(group: str) -> dict[str, EntryPoint]:
    """The entry points of ``group`` by name, sorted by name (read once per process)."""
    found = {ep.name: ep for ep in _all_entry_points().get(group, [])}
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

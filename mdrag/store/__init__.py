"""Stores: where an index's chunks and vectors live (the interface: :mod:`mdrag.store.base`).

A backend is one module under ``mdrag/store/`` with a class that implements
:class:`~mdrag.store.base.Store` and has the constructor ``from_config(config,
name, identity, prepare_text)``, plus one line in :data:`BACKENDS`. The setting
``store.backend`` (env ``MDRAG_STORE``, flag ``--store``) picks one, or with
``auto`` (the default) lets :func:`resolve_backend` pick one per index.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError
from mdrag.redact import redact_url

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.store.base import Store

__all__ = ["BACKENDS", "is_server_uri", "make_store", "resolve_backend"]

log = logging.getLogger(__name__)

#: Backend name (the setting ``store.backend``) -> "module:class", imported when used.
BACKENDS = {
    "milvus": "mdrag.store.milvus:MilvusStore",
    "faiss": "mdrag.store.faiss:FaissStore",
}

# A manifest's ``store_uri`` is its second key (after ``index``): read from the file's start.
_STORE_URI_KEY = re.compile(r'"store_uri"\s*:\s*')
_MANIFEST_HEAD = 65536


def is_server_uri(uri: str) -> bool:
    """Whether ``uri`` names a Milvus server or cluster rather than a Milvus Lite file."""
    return uri.startswith(("http://", "https://", "tcp://", "grpc://", "unix:"))


def resolve_backend(config: Config, name: str | None = None) -> tuple[str, str]:
    """The store backend of index ``name`` (default: the ``index`` setting), and why: (backend, reason).

    An explicit ``store.backend`` is used as it is. ``auto`` picks, without loading either store:

    - ``milvus`` when ``milvus_uri`` is a server URI (a Milvus server or cluster is only reached
      that way);
    - ``milvus`` when the index is already in the Milvus Lite file ``milvus_uri`` (by default
      ``<cache>/milvus.db``): its manifest names that file as its store, or, with no manifest
      (or one that does not parse), the file holds the index's collection folder;
    - ``faiss`` otherwise: a new index, one in FAISS, or one whose recorded store is no longer
      configured (which an explicit ``milvus`` would rebuild as well).
    """
    name = name or config["index"]
    backend = str(config["store.backend"])
    if backend != "auto":
        where = {"flag": "--store", "env": "MDRAG_STORE", "file": "the config file"}.get(
            config.sources.get("store.backend", "default"), "the default"
        )
        return backend, f"store.backend is {backend} (from {where})"
    uri = config["milvus_uri"]
    if uri and is_server_uri(uri):
        return "milvus", f"store.backend auto: milvus_uri is a Milvus server ({redact_url(uri)})"
    lite = config.milvus_uri
    recorded = _recorded_store_uri(config.manifest_path(name))
    if recorded is not None:
        if _same_path(recorded, lite):
            return "milvus", f"store.backend auto: index {name!r} was built in the Milvus Lite file {lite}"
        faiss_path = config.cache_dir / "faiss" / f"{name}.sqlite"
        if _same_path(recorded, str(faiss_path)):
            return "faiss", f"store.backend auto: index {name!r} was built in FAISS ({faiss_path})"
        return "faiss", (
            f"store.backend auto: index {name!r} was built in {redact_url(recorded)}, which is not "
            f"configured (milvus_uri is {lite}): FAISS, and the index is built again"
        )
    if (Path(lite).expanduser() / "collections" / f"mdrag_{name}").is_dir():
        return "milvus", f"store.backend auto: the Milvus Lite file {lite} holds index {name!r}"
    return "faiss", f"store.backend auto: index {name!r} is new (FAISS)"


def _recorded_store_uri(manifest: Path) -> str | None:
    """The ``store_uri`` that the manifest at ``manifest`` records, or None (no manifest, or none readable).

    Read from the file's first bytes when it is there, as :meth:`mdrag.manifest.Manifest.save`
    writes it, so that a large manifest is not parsed whole; its checksum is not checked.
    """
    try:
        with open(manifest, "rb") as f:
            head = f.read(_MANIFEST_HEAD)
            whole = not f.read(1)
    except OSError:
        return None
    text = head.decode("utf-8", "replace")
    m = _STORE_URI_KEY.search(text)
    if m is not None:
        try:
            value, _ = json.JSONDecoder().raw_decode(text, m.end())
        except ValueError:
            value = None
        if isinstance(value, str):
            return value
    if whole:
        return None
    try:  # a manifest whose keys were reordered (by hand): parse it all
        value = json.loads(manifest.read_bytes()).get("store_uri")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _same_path(a: str, b: str) -> bool:
    if a == b:
        return True
    if is_server_uri(a) or is_server_uri(b):
        return False
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def make_store(
    config: Config,
    name: str,
    identity: dict[str, Any],
    prepare_text: Callable[[str], str] | None = None,
    backend: str | None = None,
) -> Store:
    """The store of index ``name`` on its backend (not opened yet).

    ``identity``: the embedder's identity, recorded in the store; ``prepare_text``:
    applied to BM25 texts and queries (stemming); ``backend``: one of :data:`BACKENDS`,
    by default the one :func:`resolve_backend` picks (logged with its reason).
    """
    if backend is None:
        backend, reason = resolve_backend(config, name)
        log.info("index %r: %s store (%s)", name, backend, reason)
    if backend not in BACKENDS:
        raise ConfigError(f"store.backend must be one of auto, {', '.join(BACKENDS)}, got {backend!r}")
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

"""The Milvus backend as it declares itself (``BACKEND``): light, so that the registry reads it (its settings,
its URI schemes) without importing pymilvus, numpy or the store (:mod:`.store`, imported when a store is made).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.extras import Extra, require_extra
from mdrag.redact import redact_url
from mdrag.settings import backend_setting
from mdrag.store import StoreBackend, same_location
from mdrag.store.milvus.lite import SERVER_SCHEMES, is_server
from mdrag.store.milvus.names import collection_name

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.store.base import Store

__all__ = ["BACKEND", "EXTRA", "SETTINGS"]


def _store(config: Config, name: str, identity: dict[str, Any], prepare_text: Callable[[str], str] | None) -> Store:
    from mdrag.store.milvus.store import MilvusStore

    return MilvusStore.from_config(config, name, identity, prepare_text)


def _chosen(config: Config) -> str | None:
    """A Milvus server or cluster in ``milvus_uri`` is where every index goes: it is only reached that way."""
    uri = config["milvus_uri"]
    if uri and is_server(uri):
        return f"milvus_uri is a Milvus server ({redact_url(uri)})"
    return None


def _requires(config: Config, name: str) -> None:
    """A Milvus server needs pymilvus, a Milvus Lite file milvus-lite too: the ``milvus`` extra."""
    uri = config.effective("milvus_uri")
    if is_server(uri):
        require_extra(EXTRA, f"index {name!r} in the Milvus server {redact_url(uri)}", ("pymilvus",))
    else:
        require_extra(EXTRA, f"index {name!r} in the Milvus Lite file {uri}")


def _location(config: Config, name: str) -> str:
    """Every index is in the one Milvus Lite file (or server) of ``milvus_uri``, as a collection of its own."""
    uri: str = config.effective("milvus_uri")
    return uri


def _owns(config: Config, name: str, recorded: str | None) -> str | None:
    """Index ``name`` is in the Milvus Lite file when its manifest names that file, or, with no manifest to
    say, when the file holds its collection's folder (``<file>/collections/mdrag_<name>``)."""
    lite = config.effective("milvus_uri")
    if recorded is not None:
        return f"index {name!r} was built in the Milvus Lite file {lite}" if same_location(recorded, lite) else None
    if (Path(lite).expanduser() / "collections" / collection_name(name)).is_dir():
        return f"the Milvus Lite file {lite} holds index {name!r}"
    return None


#: The ``milvus`` extra: a server needs pymilvus alone, a Milvus Lite file milvus-lite too (:func:`_requires`).
EXTRA = Extra(
    "milvus", ("pymilvus", "milvus_lite"), "the Milvus store: a Milvus Lite file, a server or a cluster by URI"
)

#: The settings this backend reads.
SETTINGS = {
    "milvus_uri": backend_setting(
        str | None,
        None,
        "a Milvus Lite file, or `http://host:19530` for a Milvus server (which `store.backend` `auto` then uses)",
        env="MARKDOWN_QA_MILVUS_URI",
        shown="`$MDRAG_HOME/cache/milvus.db`",
        flag="--milvus-uri",
        metavar="URI",
        cache_file="milvus.db",
        docsets_file="docsets.db",
    ),
    "milvus_token": backend_setting(
        str | None,
        None,
        "credentials for a Milvus server (`user:password` or a token)",
        secret=True,
        shown="unset",
    ),
}

#: This backend, as the ``mdrag.stores`` entry point ``milvus`` registers it (pyproject.toml).
BACKEND = StoreBackend(
    name="milvus",
    title="Milvus",
    store=_store,
    location=_location,
    owns=_owns,
    chosen=_chosen,
    requires=_requires,
    schemes=SERVER_SCHEMES,
    extra=EXTRA,
    settings=SETTINGS,
)

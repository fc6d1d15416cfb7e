"""Stores: where an index's chunks and vectors live (the interface: :mod:`mdrag.store.base`).

A backend is one module (or a package, as ``faiss`` and ``milvus`` are) with a class
that implements :class:`~mdrag.store.base.Store`, ending with its
:class:`StoreBackend` declaration, plus one line in the
``mdrag.stores`` entry-point group (:mod:`mdrag.plugins`): mdrag's own FAISS and
Milvus backends are registered there as a third party's would be. The setting
``store.backend`` (env ``MDRAG_STORE``, flag ``--store``) picks one, or with
``auto`` (the default) lets :func:`resolve_backend` pick one per index from what
the backends declare.

A store URI is a file path unless a registered backend claims its scheme
(:attr:`StoreBackend.schemes`; Milvus claims ``http``, ``tcp`` and the like): the core
knows no backend's schemes, and a ``scheme://`` URI that no backend claims is an
error (:func:`uri_scheme`), never a path.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag import plugins
from mdrag.errors import ConfigError
from mdrag.extras import Extra, require_extra
from mdrag.redact import redact_url

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.settings import Field
    from mdrag.store.base import Store

__all__ = [
    "StoreBackend",
    "check_backend",
    "in_home",
    "moved_uri",
    "make_store",
    "resolve_backend",
    "same_location",
    "store_backends",
    "uri_scheme",
]

log = logging.getLogger(__name__)

# A manifest's ``store_uri`` is its second key (after ``index``): read from the file's start.
_STORE_URI_KEY = re.compile(r'"store_uri"\s*:\s*')
_MANIFEST_HEAD = 65536
# What may be a URI's scheme (RFC 3986): "http" of "http://host". One letter is a Windows drive ("C:\\docs").
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")


def _chosen_by_nothing(config: Config) -> str | None:
    return None


@dataclass(frozen=True)
class StoreBackend:
    """A store backend as it declares itself, once, at the end of its module.

    ``store.backend: auto`` asks each registered backend, in name order: first
    whether the configuration alone picks it (``chosen``), then whether the index
    is its own (``owns``); an index no backend owns goes to the one that takes
    ``new_indexes``.
    """

    name: str  # the value of store.backend that picks it (its entry point's name)
    title: str  # how the reasons `auto` gives name it ("FAISS")
    # The store of index `name` (not opened yet): (config, name, embedder identity, prepare_text) -> Store.
    store: Callable[[Config, str, dict[str, Any], Callable[[str], str] | None], Store]
    # Where it keeps index `name` by default: the store URI that the index's manifest records.
    location: Callable[[Config, str], str]
    # Why index `name` is its own, or None: (config, name, the store URI its manifest records or None).
    owns: Callable[[Config, str, str | None], str | None]
    # Why the configuration alone picks it for every index (Milvus: a server as its URI setting), or None.
    chosen: Callable[[Config], str | None] = _chosen_by_nothing
    new_indexes: bool = False  # `auto` puts an index that no backend owns here
    # Raises MissingExtraError (mdrag.extras) when a library it needs for index `name` is not installed:
    # called when an Index picks the backend, before any model loads, and again by make_store. By default:
    # every module of `extra`, when it declares one.
    requires: Callable[[Config, str], None] | None = None
    # The URI schemes (lowercase, without ':') of the stores it reaches by URI rather than as a file: a store
    # URI with one of them is its own and never a path ("http" for a Milvus server at http://host:19530).
    schemes: tuple[str, ...] = ()
    # The extra (or package) that brings the libraries it needs: what the error of a missing one names.
    extra: Extra | None = None
    # The settings it reads, by key, each made with mdrag.settings.backend_setting(TYPE, ...): mdrag.settings
    # collects them with its own (config file, environment variable, `mdrag config`, the docs' table, a flag).
    # Keep the module that declares the backend light: the settings import it (not its store) to read them.
    settings: Mapping[str, Field] = field(default_factory=dict)

    def check_installed(self, config: Config, name: str) -> None:
        """Raise MissingExtraError when a library it needs for index ``name`` is not installed."""
        if self.requires is not None:
            self.requires(config, name)
        elif self.extra is not None:
            require_extra(self.extra, f"store.backend: {self.name}")


def store_backends() -> dict[str, StoreBackend]:
    """Every registered store backend by name, each module imported; one that cannot be is logged and left out."""
    found: dict[str, StoreBackend] = {}
    for name in plugins.names(plugins.STORES):
        try:
            found[name] = plugins.load(plugins.STORES, name, StoreBackend)
        except (ImportError, TypeError) as e:
            log.warning("store backend %r left out: %s: %s", name, type(e).__name__, e)
    return found


def uri_scheme(uri: str) -> str | None:
    """The scheme of store URI ``uri`` when a registered backend claims it (:attr:`StoreBackend.schemes`), in
    lowercase: ``"http"`` for ``http://127.0.0.1:19530``; None for a file path. A ``scheme://`` URI that no
    backend claims raises ConfigError naming the schemes that are known: it is never taken for a path."""
    scheme, claimed = _scheme(uri)
    if scheme is not None and not claimed:
        raise ConfigError(
            f"the store URI {redact_url(uri)} has the scheme {scheme}://, which no installed store backend reads "
            f"({_known()}): install the backend that reads it, or give a file path"
        )
    return scheme


def _scheme(uri: str) -> tuple[str | None, bool]:
    """The scheme of store URI ``uri`` (lowercase) and whether a registered backend claims it; (None, False)
    for a file path. An unclaimed scheme counts only before ``//``: "notes:v2.db" is a file."""
    m = _SCHEME.match(uri)
    if m is None:
        return None, False
    scheme = m[1].lower()
    if scheme in _claimed_schemes():
        return scheme, True
    return (scheme, False) if uri[m.end() :].startswith("//") else (None, False)


def _claimed_schemes() -> dict[str, str]:
    """Each scheme a registered store backend claims, and that backend's name."""
    return {scheme: b.name for b in store_backends().values() for scheme in b.schemes}


def _known() -> str:
    """The schemes known, as an error names them: "the schemes known: grpc (milvus), http (milvus), ..."."""
    claimed = sorted(_claimed_schemes().items())
    return "the schemes known: " + (", ".join(f"{s} ({b})" for s, b in claimed) or "none")


def _is_path(uri: str) -> bool:
    """Whether store URI ``uri`` is a file path: no scheme a backend claims, nor an unclaimed ``scheme://``."""
    return _scheme(uri)[0] is None


def resolve_backend(config: Config, name: str | None = None) -> tuple[str, str]:
    """The store backend of index ``name`` (default: the ``index`` setting), and why: (backend, reason).

    An explicit ``store.backend`` is used as it is. ``auto`` picks, without opening a store, from
    what each backend declares (:class:`StoreBackend`): the one the configuration picks (Milvus, for a
    server as its URI); else the one that owns the index, by the store its manifest records or,
    with no manifest (or one that does not parse), by what is on disk (Milvus Lite's collection
    folder); else the one that takes new indexes (FAISS): a new index, or one whose recorded store is
    no longer configured (which an explicit backend would rebuild as well).
    """
    name = name or config["index"]
    backend = str(config["store.backend"])
    if backend != "auto":
        where = {"flag": "--store", "env": "MDRAG_STORE", "file": "the config file"}.get(
            config.sources.get("store.backend", "default"), "the default"
        )
        return backend, f"store.backend is {backend} (from {where})"
    backends = list(store_backends().values())
    for b in backends:
        if why := b.chosen(config):
            return b.name, f"store.backend auto: {why}"
    manifest = config.manifest_path(name)
    recorded = _recorded_store_uri(manifest)
    if recorded is not None:
        scheme, claimed = _scheme(recorded)
        if scheme is not None and not claimed:  # a backend no longer installed: never read as a path
            raise ConfigError(
                f"index {name!r} was built in {redact_url(recorded)}, a store URI whose scheme no installed store "
                f"backend reads ({_known()}): install the backend that built it, or set "
                "store.backend (MDRAG_STORE, --store) to build the index again in another"
            )
        # a home that was copied or moved: its store came along with its manifest
        recorded = moved_uri(recorded, manifest) or recorded
    for b in backends:
        if why := b.owns(config, name, recorded):
            return b.name, f"store.backend auto: {why}"
    new = next((b for b in backends if b.new_indexes), None)
    if new is None:
        raise ConfigError("store.backend is auto, but no store backend that takes new indexes is installed")
    if recorded is not None:
        places = ", ".join(f"{b.name} {redact_url(b.location(config, name))}" for b in backends)
        return new.name, (
            f"store.backend auto: index {name!r} was built in {redact_url(recorded)}, which is not "
            f"configured ({places}): {new.title}, and the index is built again"
        )
    return new.name, f"store.backend auto: index {name!r} is new ({new.title})"


def _recorded_store_uri(manifest: Path) -> str | None:
    """The ``store_uri`` that the manifest at ``manifest`` records, or None (no manifest, or none readable).

    Read from the file's first bytes when it is there, as :meth:`mdrag.ingest.manifest.Manifest.save`
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


def moved_uri(recorded: str, manifest: Path) -> str | None:
    """Where the store that a manifest recorded at ``recorded`` is now, when the home that holds both
    was copied or moved: the file at the same place under the manifest's cache folder (its
    ``manifests`` folder's parent) when it exists and ``recorded`` is not there already; else None.
    Whether it holds the index is for the caller to check (its chunk ids)."""
    if not _is_path(recorded):  # a store reached by URI stays where it is
        return None
    cache = manifest.parent.parent
    parts = Path(recorded).parts
    if cache.name not in parts:
        return None
    below = parts[len(parts) - 1 - parts[::-1].index(cache.name) + 1 :]  # after the last folder named like it
    if not below:
        return None
    here = cache.joinpath(*below)
    if same_location(str(here), recorded) or not here.exists():
        return None
    return str(here)


def in_home(uri: str, manifest: Path) -> bool:
    """Whether the store at ``uri`` lives in the cache folder of the manifest ``manifest`` (the FAISS store,
    the default Milvus Lite file): then every chunk in it is that manifest's index's. A store elsewhere (a
    Milvus server, another home's Milvus Lite file) may hold other indexers' folders too."""
    if not _is_path(uri):
        return False
    try:
        return Path(uri).expanduser().resolve().is_relative_to(manifest.parent.parent.resolve())
    except (OSError, ValueError):
        return False


def same_location(a: str, b: str) -> bool:
    """Whether store URIs ``a`` and ``b`` name the same place (files compared with links resolved; a URI
    with a scheme by its text)."""
    if a == b:
        return True
    if not _is_path(a) or not _is_path(b):
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
    applied to BM25 texts and queries (stemming); ``backend``: a registered backend's
    name, by default the one :func:`resolve_backend` picks (logged with its reason).
    """
    if backend is None:
        backend, reason = resolve_backend(config, name)
        log.info("index %r: %s store (%s)", name, backend, reason)
    declared = _declared(backend)
    declared.check_installed(config, name)
    return declared.store(config, name, identity, prepare_text)


def check_backend(config: Config, name: str, backend: str) -> None:
    """Raise now what :func:`make_store` would raise later: an unknown backend (ConfigError), or one whose
    libraries are not installed (MissingExtraError, naming the extra to install). Opens nothing."""
    _declared(backend).check_installed(config, name)


def _declared(backend: str) -> StoreBackend:
    """The registered store backend ``backend``; ConfigError when there is none, or it cannot be imported."""
    registered = plugins.names(plugins.STORES)
    if backend not in registered:
        raise ConfigError(f"store.backend must be one of auto, {', '.join(registered)}, got {backend!r}")
    module_name = plugins.entry_points(plugins.STORES)[backend].module
    others = ", ".join(b for b in registered if b != backend)
    try:
        declared: StoreBackend = plugins.load(plugins.STORES, backend, StoreBackend)
    except ModuleNotFoundError as e:
        if e.name != module_name:  # a dependency of the backend: say which one
            raise ConfigError(
                f"store.backend is {backend!r}, but {e.name} is not installed: install it, "
                "or set store.backend (MDRAG_STORE, --store) to another backend"
            ) from e
        raise ConfigError(
            f"store.backend is {backend!r}, but this mdrag has no {backend} backend ({module_name}): "
            f"set store.backend (MDRAG_STORE, --store) to one of {others}"
        ) from e
    return declared

"""Each docset's own mdrag index: its name, where it is stored, and bringing it in line with the docset's folder.

``mdrag knowledge init/refresh`` and the MCP server (:mod:`mdrag.frontends.mcp`) both
build a docset's index with :func:`update_docset_index`. Each docset has its
own index (:func:`index_name`) in the store that ``store.backend`` picks: with
``auto`` (the default), FAISS under ``$MDRAG_HOME/cache/faiss/`` for a new
index, or the Milvus Lite file ``$MDRAG_HOME/cache/docsets.db`` (or the
configured ``milvus_uri``) for one already there or with ``milvus``. An index
under the name mdrag gave a docset before the names were hashed is taken apart
as the docset is indexed anew.

This module loads no front end (neither the MCP SDK nor websockets), and
:mod:`mdrag.index` only when an index is opened.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from hashlib import sha1
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.config import Config, load_config
from mdrag.errors import DocsetError, MdragError
from mdrag.knowledge.model import Docset

if TYPE_CHECKING:
    from mdrag.index import Index
    from mdrag.ingest.progress import IndexProgress
    from mdrag.ingest.summary import IndexSummary

__all__ = ["docset_config", "docset_folder", "docset_index", "index_name", "update_docset_index"]

log = logging.getLogger(__name__)

_HASHED = re.compile(r"_[0-9a-f]{8}$")


def index_name(docset_id: str, project: Path) -> str:
    """The mdrag index of a project's docset: ``docset_<slug>_<hash>``, distinct for distinct docsets.

    The slug is the id with other characters than [A-Za-z0-9_] as ``_``, cut to
    fit the 64 characters of an index name; the hash (8 hex digits of the SHA-1
    of the project folder and the id) tells apart ids with the same slug, such
    as ``react-dom`` and ``react.dom``, and one id in two projects (each keeps
    its own folder in its index; a shared index would lose one at each update).
    """
    slug = re.sub(r"[^A-Za-z0-9_]", "_", docset_id)[:48]
    key = f"{Path(project).resolve()}\n{docset_id}"
    return f"docset_{slug}_{sha1(key.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _legacy_index_name(docset_id: str) -> str:
    """The index name mdrag gave a docset before :func:`index_name` added the hash (several ids shared one)."""
    name = "docset_" + re.sub(r"[^A-Za-z0-9_]", "_", docset_id)
    return name if len(name) <= 64 else name[:55] + "_" + sha1(docset_id.encode()).hexdigest()[:8]


def _docsets_config(name: str, base: Config | None = None) -> Config:
    """Settings of the docset index ``name``: ``base`` (default: the user's), in the docsets store."""
    from mdrag.settings import FIELDS, declared_extra

    base = base or load_config()
    overrides: dict[str, Any] = {"index": name}
    for key in FIELDS:  # a store backend's own file for docsets' indexes (Milvus: docsets.db), unless one is set
        if file := declared_extra(key, "docsets_file"):
            overrides[key] = base[key] or str(base.cache_dir / file)
    return base.with_overrides(overrides)


def docset_config(docset_id: str, project: Path, config: Config | None = None) -> Config:
    """The settings of the index of the project's docset ``docset_id``: its name, in the docsets store.

    ``config``: the settings to start from (flags applied), default the user's."""
    return _docsets_config(index_name(docset_id, project), config)


def docset_index(docset_id: str, project: Path, config: Config | None = None) -> Index:
    """The index of the project's docset ``docset_id`` in the docsets store (opened by its first use).

    ``config``: the settings to start from (flags applied), default the user's."""
    from mdrag.index import Index

    return Index(docset_config(docset_id, project, config))


def docset_folder(ds: Docset) -> str:
    """The docset's folder; DocsetError saying how to fill it when it does not exist."""
    folder = str(ds.local_path)
    if not Path(folder).is_dir():
        what = (  # a docset without web sources: `init` cannot fill it, it only indexes what is there
            f"Run `mdrag knowledge init {ds.id}` to fetch its sources, or create the folder and put the "
            "documentation there."
            if ds.web_sources
            else "Create it and put the documentation there (the docset has no web_sources to fetch it from)."
        )
        raise DocsetError(f"docset {ds.id!r} has no files yet: its folder {folder} does not exist. {what}")
    return folder


def update_docset_index(
    index: Index,
    ds: Docset,
    progress: Callable[[IndexProgress], None] | None = None,
    cancel: threading.Event | None = None,
    **how: Any,
) -> IndexSummary:
    """Bring ``index`` (see :func:`docset_index`) in line with the docset's folder; only changes are embedded.

    A folder the index held before (the docset's ``local_path`` moved) is taken
    out; the docset's index from before the hashed names (:func:`index_name`)
    loses the docset's folder, and is deleted when nothing else is left in it.
    ``progress``, ``cancel`` and ``how`` (``pause``, ``batch_chunks``: an
    :class:`~mdrag.index.keeper.IndexKeeper`'s steps) as for :meth:`mdrag.index.Index.update`.
    """
    folder = docset_folder(ds)
    summary = index.update([folder], progress=progress, cancel=cancel, **how)
    moved = [r for r in summary.folders if r != str(Path(folder).resolve())]
    if moved:  # the docset's folder moved: its old one leaves the index
        index.remove(moved)
    try:
        _retire_legacy_index(index, ds.id, folder)
    except MdragError as e:  # the docset's index is fine: only disk space is not given back
        log.warning("docset %s: its index under the old name could not be deleted: %s", ds.id, e)
    return summary


def _retire_legacy_index(index: Index, docset_id: str, folder: str) -> None:
    """Take ``folder`` out of the docset's index under its old name, and drop that index once it is empty.

    The old name may have been shared by other docsets (the reason for the new
    names), or by this docset id in other projects: their folders stay.
    """
    name = _legacy_index_name(docset_id)
    if _HASHED.search(name):  # it may be another docset's current index
        return
    config = _docsets_config(name, index.config)
    if not config.manifest_path(name).is_file():
        return
    from mdrag.index import Index

    legacy = Index(config, index.embedder)
    try:
        resolved = str(Path(folder).resolve())
        folders = legacy.folders
        if resolved in folders and len(folders) > 1:
            legacy.remove([resolved])
        elif folders in ([resolved], []):
            if legacy.store.open(create=False):
                legacy.store.drop()
            legacy.store.close()
            legacy.manifest_path.unlink(missing_ok=True)
            log.info("deleted index %s: docset %s is now indexed as %s", name, docset_id, index.name)
    finally:
        legacy.close()

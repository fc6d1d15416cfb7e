"""The docsets' indexes kept current for a long-running front end: open, refresh when due, search, report.

:class:`DocsetIndexes` holds, for the docsets of a :class:`~mdrag.knowledge.KnowledgeBase`, one
:class:`~mdrag.index.served.ServedIndex` each: the docset's own mdrag index (:mod:`mdrag.knowledge.docsets`)
and an :class:`~mdrag.index.keeper.IndexKeeper` that updates it in a worker thread (a gate shared by the keepers
lets one docset's update run at a time: they would only share the CPU).

- :meth:`DocsetIndexes.start` starts updating every docset's index (those with a folder);
  :meth:`DocsetIndexes.close` stops the updates (at their next file: the next start finishes them) and
  closes the indexes.
- :meth:`DocsetIndexes.ensure_current` opens a docset's index on first use and asks for an update when its
  folder moved or its last update is older than ``refresh_interval``.
- :meth:`~mdrag.index.served.ServedIndex.search` is the readiness policy, as for any served index.
- :meth:`DocsetIndexes.cached_search` serves quick answers from ready indexes: searches kept by index,
  update and query, run one at a time.

The MCP server (:mod:`mdrag.frontends.mcp`) is their front end. Nothing here knows of asyncio or MCP: the
methods that search, wait or close block, and an async front end runs them in a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import MdragError
from mdrag.index.served import ServedIndex
from mdrag.knobs import MCP_HINT_CACHE_SIZE, MCP_HINT_SECTIONS, MCP_REFRESH_INTERVAL_S
from mdrag.knowledge.docsets import docset_folder, docset_index, index_name, update_docset_index

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.index import Index
    from mdrag.ingest.summary import IndexSummary
    from mdrag.knowledge.base import KnowledgeBase
    from mdrag.knowledge.model import Docset
    from mdrag.types import SearchResult

__all__ = ["CachedSearch", "DocsetIndexes", "DocsetIndexesClosedError"]

log = logging.getLogger(__name__)


class DocsetIndexesClosedError(MdragError):
    """:meth:`DocsetIndexes.open` after :meth:`DocsetIndexes.close` (or before :meth:`DocsetIndexes.start`)."""


class DocsetIndexes:
    """The docsets' indexes of ``kb``, opened on first use and kept current by one keeper each.

    ``config``: the settings the indexes start from (None: the user's, read when used);
    ``refresh_interval``: seconds before :meth:`ensure_current` asks for an update again.
    """

    def __init__(
        self, kb: KnowledgeBase, config: Config | None = None, refresh_interval: float = MCP_REFRESH_INTERVAL_S
    ) -> None:
        self.kb = kb  # the docsets, their folders as configured now
        self.config = config  # the settings each index starts from
        self.refresh_interval = refresh_interval  # seconds before a search asks for an update again
        self._open: dict[str, ServedIndex] = {}  # by index name
        self._serving = False  # between start() and close(): indexes may open
        self._lock = threading.Lock()  # guards the two above: a front end may open indexes from several threads
        self._gate = threading.Lock()  # one docset's update at a time: they would share the CPU
        self._cache = _SearchCache()  # the searches of cached_search

    def start(self) -> None:
        """Let indexes open, and start an update of every docset's index (those with a folder), one after
        the other; a config that cannot be read is logged, and the indexes open as they are used."""
        with self._lock:
            self._serving = True
        try:
            docsets = self.kb.config().docsets
        except MdragError as e:
            log.warning("docset indexes not updated at start: %s", e)
            return
        for ds in docsets:
            if Path(ds.local_path).is_dir():  # a docset with no files yet is reported when it is searched
                try:
                    self.open(self.kb.resolve(ds.id))  # resolve: its folder checked again
                except MdragError as e:
                    log.warning("docset %s: index not updated: %s", ds.id, e)

    def opened(self) -> list[ServedIndex]:
        """The indexes open now."""
        with self._lock:
            return list(self._open.values())

    def open(self, ds: Docset) -> ServedIndex:
        """The docset's index and keeper, made (and its first update started) on first use;
        :class:`DocsetIndexesClosedError` outside :meth:`start` and :meth:`close`."""
        name = self._name(ds)
        with self._lock:
            entry = self._open.get(name)
            if entry is None:
                if not self._serving:
                    raise DocsetIndexesClosedError("the docset indexes are closed: start them again to open one")
                entry = self._make(ds)
                self._open[name] = entry
                entry.keeper.start()
            return entry

    def ensure_current(self, ds: Docset) -> ServedIndex:
        """The docset's index (see :meth:`open`), with an update asked for when it is due (see
        :meth:`~mdrag.index.served.ServedIndex.due`); DocsetError when its folder is missing or left the project
        (checked again)."""
        folder = docset_folder(self.kb.resolve(ds.id))
        entry = self.open(ds)
        if not entry.busy and entry.due(folder, self.refresh_interval):
            entry.keeper.request("refresh")
        return entry

    def cached_search(self, ds: Docset, query: str) -> CachedSearch | None:
        """The docset's ranked sections for quick answers, kept by index, update and query: None unless its
        index is open and ready (see :meth:`~mdrag.index.served.ServedIndex.ready`)."""
        name = self._name(ds)
        with self._lock:
            entry = self._open.get(name)
        if entry is None or not entry.ready(ds.local_path):
            return None
        return self._cache.lookup(entry.index, (entry.index.name, entry.updates, query))

    def close(self) -> None:
        """Stop the updates (at their next file: the next start finishes them) and close the indexes (and so
        the Milvus Lite file). Blocks until the keepers' workers end."""
        with self._lock:
            self._serving = False
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            try:
                entry.keeper.close()
                entry.index.close()
            except Exception:
                log.warning("closing index %s failed", entry.index.name, exc_info=True)

    def _name(self, ds: Docset) -> str:
        return index_name(ds.id, self.kb.config().root.parent)

    def _make(self, ds: Docset) -> ServedIndex:
        """The docset's index (not opened yet: its first use opens it) and its keeper (not started)."""
        from mdrag.index.keeper import IndexKeeper

        index = docset_index(ds.id, self.kb.config().root.parent, self.config)

        def update(folders: object, **how: Any) -> IndexSummary:
            return update_docset_index(index, self.kb.resolve(ds.id), **how)  # its folder as configured now

        return ServedIndex(index, IndexKeeper(index, update=update, gate=self._gate), bool(index.folders))


class _SearchCache:
    """Searches of ready indexes, least recently used out first; one runs at a time (they would slow each
    other), in a thread of its own, so that a caller with a small time budget may stop waiting for it and
    find it kept later."""

    def __init__(self, k: int = MCP_HINT_SECTIONS, size: int = MCP_HINT_CACHE_SIZE) -> None:
        self.k = k  # results per search
        self.size = size  # searches kept
        self.hits: OrderedDict[tuple[str, int, str], list[SearchResult]] = OrderedDict()
        self.busy = False  # a search runs (in its own thread)
        self.lock = threading.Lock()  # guards the two above

    def lookup(self, index: Index, key: tuple[str, int, str]) -> CachedSearch:
        """The search for ``key``: kept already, started now in its own thread (when none runs), or neither
        (another search runs: a later call starts it)."""
        with self.lock:
            start = self.hits.get(key) is None and not self.busy
            if start:
                self.busy = True
        search = CachedSearch(self, index, key, threading.Event())
        if start:  # started here, whatever becomes of the caller: only the search itself clears busy
            threading.Thread(target=search.run, name="mdrag-hint", daemon=True).start()
        else:
            search.finished.set()
        return search


@dataclass(frozen=True, eq=False)
class CachedSearch:
    """One search of :meth:`DocsetIndexes.cached_search`: wait for ``finished`` as long as the caller may (it
    blocks: a caller may abandon it), then read :meth:`results`."""

    cache: _SearchCache
    index: Index
    key: tuple[str, int, str]  # the index's name, its updates (an update makes earlier results stale), the query
    finished: threading.Event  # set once the search ended (at once when it was kept, or another one runs)

    def run(self) -> None:
        """Search and keep the results; a failure is logged (the results are extra)."""
        try:
            found = self.index.search(self.key[2], self.cache.k)
            with self.cache.lock:
                self.cache.hits[self.key] = found
                while len(self.cache.hits) > self.cache.size:
                    self.cache.hits.popitem(last=False)
        except Exception:
            log.warning("a cached search of index %s failed", self.index.name, exc_info=True)
        finally:
            with self.cache.lock:
                self.cache.busy = False
            self.finished.set()

    def results(self) -> list[SearchResult] | None:
        """The kept results, None when the search has not finished."""
        with self.cache.lock:
            hits = self.cache.hits.get(self.key)
            if hits is not None:
                self.cache.hits.move_to_end(self.key)
            return hits

"""The docsets' indexes kept current for a long-running front end: open, refresh when due, search, report.

:class:`DocsetIndexes` holds, for the docsets of a :class:`~mdrag.knowledge.KnowledgeBase`, one
:class:`DocsetIndex` each: the docset's own mdrag index (:mod:`mdrag.knowledge.docsets`) and an
:class:`~mdrag.index.keeper.IndexKeeper` that updates it in a worker thread (a gate shared by the keepers
lets one docset's update run at a time: they would only share the CPU).

- :meth:`DocsetIndexes.start` starts updating every docset's index (those with a folder);
  :meth:`DocsetIndexes.close` stops the updates (at their next file: the next start finishes them) and
  closes the indexes.
- :meth:`DocsetIndexes.ensure_current` opens a docset's index on first use and asks for an update when its
  folder moved or its last update is older than ``refresh_interval``.
- :meth:`DocsetIndex.search` is the readiness policy: an index being refreshed is searched as it was; one
  whose first build runs (here or in another process) gives no results but its progress
  (:class:`UpdateProgress`); :meth:`DocsetIndex.state` reports its size and last update
  (:class:`DocsetIndexState`).
- :meth:`DocsetIndexes.cached_search` serves quick answers from ready indexes: searches kept by index,
  update and query, run one at a time.

The MCP server (:mod:`mdrag.frontends.mcp`) is their front end. Nothing here knows of asyncio or MCP: the
methods that search, wait or close block, and an async front end runs them in a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import IndexBuildingError, MdragError
from mdrag.knobs import MCP_HINT_CACHE_SIZE, MCP_HINT_SECTIONS, MCP_REFRESH_INTERVAL_S
from mdrag.knowledge.docsets import docset_folder, docset_index, index_name, update_docset_index

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.index import Index
    from mdrag.index.keeper import IndexKeeper
    from mdrag.ingest.summary import IndexSummary
    from mdrag.knowledge.base import KnowledgeBase
    from mdrag.knowledge.model import Docset
    from mdrag.types import SearchResult

__all__ = [
    "CachedSearch",
    "DocsetIndex",
    "DocsetIndexState",
    "DocsetIndexes",
    "DocsetIndexesClosedError",
    "DocsetSearch",
    "UpdateProgress",
    "files_progress",
]

log = logging.getLogger(__name__)


class DocsetIndexesClosedError(MdragError):
    """:meth:`DocsetIndexes.open` after :meth:`DocsetIndexes.close` (or before :meth:`DocsetIndexes.start`)."""


@dataclass(frozen=True)
class UpdateProgress:
    """How far a docset index's running update is."""

    state: str  # scanning | indexing | queued (it waits for another docset's update)
    files_done: int
    files_total: int | None  # None until its scan has counted the files

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "files_done": self.files_done, "files_total": self.files_total}


@dataclass(frozen=True)
class DocsetIndexState:
    """A docset index's size and what its last update in this process did (all zero before one finished)."""

    index: str  # the index's name
    refreshed: bool  # its last update finished while the caller waited
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_deleted: int = 0
    chunks_total: int | None = None
    seconds: float = 0.0  # how long the last update took
    age_s: float | None = None  # seconds since the last update ended (None: none has)
    updating: UpdateProgress | None = None  # the running update
    error: str | None = None  # why the last update failed

    def to_dict(self) -> dict[str, Any]:
        """The state as the MCP ``search`` tool reports it: ``updating`` and ``error`` only when set."""
        d: dict[str, Any] = {
            "index": self.index,
            "refreshed": self.refreshed,
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "chunks_deleted": self.chunks_deleted,
            "chunks_total": self.chunks_total,
            "seconds": self.seconds,
            "age_s": self.age_s,
        }
        if self.updating is not None:
            d["updating"] = self.updating.to_dict()
        if self.error is not None:
            d["error"] = self.error
        return d


@dataclass(frozen=True)
class DocsetSearch:
    """What a search of a docset's index gave."""

    results: list[SearchResult] | None  # None: the index has none to give yet (its first build runs, ...)
    progress: UpdateProgress | None  # the running update (or another process's first build); None: none runs


@dataclass(frozen=True, eq=False)
class DocsetIndex:
    """One docset's mdrag index and the keeper that updates it."""

    index: Index  # the docset's own index in the docsets store
    keeper: IndexKeeper  # runs its updates in a worker thread, one docset at a time (a shared gate)
    built: bool  # it held a committed state when it was opened (the keeper's state says so later)

    @property
    def busy(self) -> bool:
        """An update is asked for or running."""
        return self.keeper.busy

    @property
    def updates(self) -> int:
        """Updates finished (each step of a long one counts)."""
        return self.keeper.state.updates

    @property
    def error(self) -> str | None:
        """Why the last update failed (None when it succeeded, or none ran)."""
        return self.keeper.state.error

    def wait(self, timeout: float | None = None) -> bool:
        """Until the updates asked for so far are done; False when ``timeout`` ran out."""
        return self.keeper.wait(None, timeout)

    def due(self, folder: str, refresh_interval: float) -> bool:
        """Whether the index needs an update: its folder moved, or it is older than ``refresh_interval``."""
        st = self.keeper.state
        if st.finished_at is None or (st.error is None and str(Path(folder).resolve()) not in st.folders):
            return True
        return time.monotonic() - st.finished_at >= refresh_interval

    def ready(self, folder: str | Path) -> bool:
        """Its last update succeeded and holds ``folder``: a search answers from the docset's files."""
        st = self.keeper.state
        return st.state == "ready" and str(Path(folder).resolve()) in st.folders

    def progress(self, building: IndexBuildingError | None = None) -> UpdateProgress | None:
        """How far the running update is (``building``: another process's first build, when none runs
        here); None when none runs."""
        st = self.keeper.state
        if building is not None and (st.indexing is None or st.indexing[1] is None):  # this one waits for it
            state = "indexing" if building.total is not None else "scanning"
            return UpdateProgress(state, building.done, building.total)
        if st.indexing is not None:
            done, total = st.indexing
            state = "queued" if st.queued else ("indexing" if total is not None else "scanning")
            return UpdateProgress(state, done, total)
        if self.keeper.busy:
            return UpdateProgress("queued" if st.queued else "scanning", 0, None)
        return None

    def first_build(self) -> UpdateProgress | None:
        """How far the index's first build is when it holds no files yet and an update runs; None when it
        holds files or none runs. Blocks: it reads the index's manifest."""
        return None if self.index.files else self.progress()

    def state(self, refreshed: bool) -> DocsetIndexState:
        """The index's size and what its last update did; ``refreshed``: that update finished while the
        caller waited."""
        st = self.keeper.state
        s = st.summary
        return DocsetIndexState(
            index=self.index.name,
            refreshed=refreshed,
            chunks_embedded=s.chunks_embedded if s else 0,
            chunks_reused=s.chunks_reused if s else 0,
            chunks_deleted=s.chunks_deleted if s else 0,
            chunks_total=s.chunks_total if s else None,
            seconds=round(s.seconds, 3) if s else 0.0,
            age_s=round(time.monotonic() - st.finished_at, 1) if st.finished_at is not None else None,
            updating=self.progress(),
            error=st.error,
        )

    def search(self, query: str, k: int) -> DocsetSearch:
        """Up to ``k`` results, or none while the index has none to give: its first build runs (here or in
        another process, whose progress comes with it) and has committed no step yet (once one has, its files
        are searched: :meth:`mdrag.index.Index.partial` says how many), or the state an earlier run left
        cannot be searched and an update replaces it.
        Blocks: it embeds the query."""
        found, building = self._search(query, k)
        return DocsetSearch(found, self.progress(building))

    def _search(self, query: str, k: int) -> tuple[list[SearchResult] | None, IndexBuildingError | None]:
        st = self.keeper.state
        if st.state == "empty":  # an empty folder: no collection either
            return [], None
        if st.state != "ready" and self.keeper.busy:  # a first build may run, here or in another process
            building = self.index.building()
            if building is not None or not self.built:
                return None, building
        try:
            return self.index.search(query, k), None
        except IndexBuildingError as e:
            return None, e
        except MdragError as e:
            if not self.keeper.busy:
                raise
            # not built yet, or the state left by an earlier run cannot be searched (another model, damaged):
            # the update makes or replaces it
            log.log(
                logging.DEBUG if st.state == "loading" else logging.WARNING,
                "index %s cannot be searched until its update ends: %s",
                self.index.name,
                e,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            return None, None


def files_progress(entries: Sequence[DocsetIndex]) -> tuple[int, int] | None:
    """Files done and to do over the entries' running updates; None until each has counted its files."""
    states = [e.keeper.state.indexing for e in entries]
    if not all(s is not None and s[1] is not None for s in states):
        return None
    return sum(s[0] for s in states if s is not None), sum(s[1] or 0 for s in states if s is not None)


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
        self._open: dict[str, DocsetIndex] = {}  # by index name
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

    def opened(self) -> list[DocsetIndex]:
        """The indexes open now."""
        with self._lock:
            return list(self._open.values())

    def open(self, ds: Docset) -> DocsetIndex:
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

    def ensure_current(self, ds: Docset) -> DocsetIndex:
        """The docset's index (see :meth:`open`), with an update asked for when it is due (see
        :meth:`DocsetIndex.due`); DocsetError when its folder is missing or left the project (checked again)."""
        folder = docset_folder(self.kb.resolve(ds.id))
        entry = self.open(ds)
        if not entry.busy and entry.due(folder, self.refresh_interval):
            entry.keeper.request("refresh")
        return entry

    def cached_search(self, ds: Docset, query: str) -> CachedSearch | None:
        """The docset's ranked sections for quick answers, kept by index, update and query: None unless its
        index is open and ready (see :meth:`DocsetIndex.ready`)."""
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

    def _make(self, ds: Docset) -> DocsetIndex:
        """The docset's index (not opened yet: its first use opens it) and its keeper (not started)."""
        from mdrag.index.keeper import IndexKeeper

        index = docset_index(ds.id, self.kb.config().root.parent, self.config)

        def update(folders: object, **how: Any) -> IndexSummary:
            return update_docset_index(index, self.kb.resolve(ds.id), **how)  # its folder as configured now

        return DocsetIndex(index, IndexKeeper(index, update=update, gate=self._gate), bool(index.folders))


class _SearchCache:
    """Searches of ready indexes, least recently used out first; one runs at a time (they would slow each
    other), so that a caller with a small time budget may leave it to finish and find it kept later."""

    def __init__(self, k: int = MCP_HINT_SECTIONS, size: int = MCP_HINT_CACHE_SIZE) -> None:
        self.k = k  # results per search
        self.size = size  # searches kept
        self.hits: OrderedDict[tuple[str, int, str], list[SearchResult]] = OrderedDict()
        self.busy = False  # a search runs (in the thread of some caller)
        self.lock = threading.Lock()  # guards the two above (callers' threads write them)

    def lookup(self, index: Index, key: tuple[str, int, str]) -> CachedSearch:
        with self.lock:
            pending = self.hits.get(key) is None and not self.busy
            if pending:
                self.busy = True
        return CachedSearch(self, index, key, pending)


@dataclass(frozen=True, eq=False)
class CachedSearch:
    """One search of :meth:`DocsetIndexes.cached_search`: :meth:`run` it when ``pending`` (it blocks: a
    caller may abandon it), then read :meth:`results`."""

    cache: _SearchCache
    index: Index
    key: tuple[str, int, str]  # the index's name, its updates (an update makes earlier results stale), the query
    pending: bool  # not kept yet, and this search may run

    def run(self) -> None:
        """Search and keep the results; a failure is logged (the results are extra)."""
        if not self.pending:
            return
        try:
            found = self.index.search(self.key[2], self.cache.k)
            with self.cache.lock:
                self.cache.hits[self.key] = found
                while len(self.cache.hits) > self.cache.size:
                    self.cache.hits.popitem(last=False)
        except Exception:
            log.warning("a cached search of index %s failed", self.index.name, exc_info=True)
        finally:
            self.cache.busy = False

    def results(self) -> list[SearchResult] | None:
        """The kept results, None when the search has not finished."""
        with self.cache.lock:
            hits = self.cache.hits.get(self.key)
            if hits is not None:
                self.cache.hits.move_to_end(self.key)
            return hits

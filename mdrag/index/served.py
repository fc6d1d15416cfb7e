"""Indexes served by a long-running front end: each open :class:`~mdrag.index.Index` with the
:class:`~mdrag.index.keeper.IndexKeeper` that keeps it current, and the readiness policy of its searches.

- :class:`ServedIndex` is one of them: :meth:`ServedIndex.search` answers from the last committed state (an
  index being updated is searched as it was; one whose first build runs gives no results but its progress,
  :class:`UpdateProgress`), :meth:`ServedIndex.state` reports its size and last update.
- :class:`ServedIndexes` serves named indexes (those `mdrag index` makes), opened by name, each watched:
  a file that changes in one of their folders is indexed while the front end runs.

The docsets of a project are served the same way by :class:`~mdrag.knowledge.indexes.DocsetIndexes`. The MCP
server is the front end of both; nothing here knows of asyncio or MCP: the methods that search, wait or close
block, and an async front end runs them in a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError, IndexBuildingError, MdragError

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.index import Index
    from mdrag.index.keeper import IndexKeeper
    from mdrag.types import SearchResult

__all__ = [
    "IndexSearch",
    "ServedIndex",
    "ServedIndexState",
    "ServedIndexes",
    "ServedIndexesClosedError",
    "UpdateProgress",
    "files_progress",
    "index_names",
]

log = logging.getLogger(__name__)


class ServedIndexesClosedError(MdragError):
    """An index asked for after the front end stopped serving (or before it started)."""


@dataclass(frozen=True)
class UpdateProgress:
    """How far a served index's running update is."""

    state: str  # scanning | indexing | queued (it waits for another docset's update)
    files_done: int
    files_total: int | None  # None until its scan has counted the files

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "files_done": self.files_done, "files_total": self.files_total}


@dataclass(frozen=True)
class ServedIndexState:
    """A served index's size and what its last update in this process did (all zero before one finished)."""

    index: str
    refreshed: bool  # its last update finished while the caller waited
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_deleted: int = 0
    chunks_total: int | None = None
    seconds: float = 0.0  # how long the last update took
    age_s: float | None = None  # seconds since the last update ended (None: none has)
    updating: UpdateProgress | None = None
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
class IndexSearch:
    """What a search of a served index gave."""

    results: list[SearchResult] | None  # None: the index has none to give yet (its first build runs, ...)
    progress: UpdateProgress | None  # the running update (or another process's first build); None: none runs


@dataclass(frozen=True, eq=False)
class ServedIndex:
    """One served index and the keeper that updates it (a docset's, or a named index of `mdrag index`)."""

    index: Index
    keeper: IndexKeeper  # runs its updates in a worker thread, one index at a time (a shared gate)
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

    def state(self, refreshed: bool) -> ServedIndexState:
        """The index's size and what its last update did; ``refreshed``: that update finished while the
        caller waited."""
        st = self.keeper.state
        s = st.summary
        return ServedIndexState(
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

    def search(
        self, query: str, k: int, filters: Mapping[str, Any] | None = None, mode: str | None = None
    ) -> IndexSearch:
        """Up to ``k`` results, or none while the index has none to give: its first build runs (here or in
        another process, whose progress comes with it) and has committed no step yet (once one has, its files
        are searched: :meth:`mdrag.index.Index.partial` says how many), or the state an earlier run left
        cannot be searched and an update replaces it.
        Blocks: it embeds the query."""
        found, building = self._search(query, k, filters, mode)
        return IndexSearch(found, self.progress(building))

    def _search(
        self, query: str, k: int, filters: Mapping[str, Any] | None, mode: str | None
    ) -> tuple[list[SearchResult] | None, IndexBuildingError | None]:
        st = self.keeper.state
        if st.state == "empty":  # an empty folder: no collection either
            return [], None
        if st.state != "ready" and self.keeper.busy:  # a first build may run, here or in another process
            building = self.index.building()
            if building is not None or not self.built:
                return None, building
        try:
            return self.index.search(query, k, filters=filters, mode=mode), None
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


def files_progress(entries: Sequence[ServedIndex]) -> tuple[int, int] | None:
    """Files done and to do over the entries' running updates; None until each has counted its files."""
    states = [e.keeper.state.indexing for e in entries]
    if not all(s is not None and s[1] is not None for s in states):
        return None
    return sum(s[0] for s in states if s is not None), sum(s[1] or 0 for s in states if s is not None)


def index_names(config: Config) -> list[str]:
    """The names of the indexes `mdrag index` made under ``config``'s home (those with a manifest), sorted."""
    folder = config.manifest_path("x").parent
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


class ServedIndexes:
    """Named indexes made by `mdrag index`, served while a front end runs: :meth:`start` opens each and
    starts its keeper (an update of its folders, then its folders watched and rescanned every
    ``rescan_interval`` seconds), :meth:`get` gives one by name, :meth:`close` stops them.

    ``names``: the indexes to serve (each must exist: ConfigError naming the known ones otherwise);
    ``config``: the settings they open with (each with its own ``index``).
    """

    def __init__(self, names: Sequence[str], config: Config, rescan_interval: float | None = None) -> None:
        self.config = config
        self.names = list(dict.fromkeys(names))  # in the order given, once each
        self.rescan_interval = rescan_interval
        self._open: dict[str, ServedIndex] = {}
        self._lock = threading.Lock()  # guards _open
        self._gate = threading.Lock()  # one index's update at a time: they would only share the CPU
        missing = [n for n in self.names if not config.manifest_path(n).exists()]
        if missing:
            known = index_names(config)
            raise ConfigError(
                f"no index named {', '.join(repr(n) for n in missing)} under {config.home}: make it with "
                f"`mdrag index DIR --index {missing[0]}`"
                + (f" (the indexes there: {', '.join(known)})" if known else " (there is no index there yet)")
            )

    def start(self) -> None:
        """Open every index and start its keeper (its first update, then watching its folders)."""
        from mdrag.index import Index
        from mdrag.index.keeper import IndexKeeper

        with self._lock:
            for name in self.names:
                if name in self._open:
                    continue
                index = Index(self.config.with_overrides({"index": name}))
                keeper = IndexKeeper(index, gate=self._gate, watch=True, rescan_interval=self.rescan_interval)
                self._open[name] = ServedIndex(index, keeper, bool(index.folders))
                keeper.start()

    def get(self, name: str) -> ServedIndex:
        """The served index ``name``; ConfigError naming the served ones when it is not one of them."""
        with self._lock:
            entry = self._open.get(name)
            if entry is None and name in self.names:
                raise ServedIndexesClosedError("the server is stopping: start it again")
        if entry is None:
            raise ConfigError(f"index {name!r} is not served here: use one of {', '.join(self.names)}")
        return entry

    def opened(self) -> list[ServedIndex]:
        """The indexes open now, in the order given."""
        with self._lock:
            return [self._open[n] for n in self.names if n in self._open]

    def close(self) -> None:
        """Stop the keepers (a running update stops at its next file: the next start finishes it) and close
        the indexes. Blocks until the keepers' workers end."""
        with self._lock:
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            try:
                entry.keeper.close()
                entry.index.close()
            except Exception:
                log.warning("closing index %s failed", entry.index.name, exc_info=True)

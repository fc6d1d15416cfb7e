"""The index keeper: keeps one open :class:`~mdrag.index.Index` current for a long-running front end.

It updates the index when it starts; with ``watch`` it watches the index's
folders and updates the files that change, and with ``rescan_interval`` it
rescans them every so often (:mod:`mdrag.index.watching`, each in a thread).
The WebSocket server keeps its index with both; the MCP server keeps one per
docset, asks it for an update when a ``search`` finds the index older than its
refresh interval, and waits for it; a Python program may keep one too
(docs/python.md). Front ends report its :class:`KeeperState`; it knows nothing
of asyncio, anyio, WebSockets or MCP. One worker thread runs the updates, one
at a time, while searches go on in other threads and read the last committed
state (:mod:`mdrag.index.snapshot`).

- **Bounded steps.** A long update commits what it has every ``step_s``
  seconds and goes on in a new step, so that readers see it grow rather than
  wait for its end.
- **Watched changes first.** A change to a few files pauses a running update
  at its next file (it commits what it wrote), is indexed alone, and the long
  update then goes on where it stopped.
- **Small batches.** Updates embed ``batch_chunks`` chunks at a time, so the
  embedder never holds the CPU for long against the searches.
- **Progress.** Files done and to do, over every step of an update, in
  :attr:`IndexKeeper.state` and in the log.
- **One update at a time across indexes.** Keepers given one ``gate`` (a lock)
  run their updates one after the other (the MCP server's docsets): they would
  only share the CPU. A keeper waiting for the gate says so (``queued``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mdrag.errors import IndexingCancelledError, MdragError
from mdrag.index.index import Index
from mdrag.index.watching import FolderWatcher, Periodic
from mdrag.ingest.progress import IndexProgress
from mdrag.ingest.summary import IndexSummary

__all__ = ["IndexKeeper", "KeeperState", "Updater", "add_step"]

#: Runs one update: ``(folders, **how)`` where ``how`` holds :meth:`mdrag.index.Index.update`'s ``cancel``,
#: ``batch_chunks`` and either ``only`` or ``progress`` and ``pause``; the default is ``index.update``.
Updater = Callable[..., IndexSummary]

log = logging.getLogger(__name__)

STEP_S = 10.0  # a long update commits at least this often
BATCH_CHUNKS = 64  # chunks per embed and write round of the keeper's updates
#: A change of more files than this (a folder copied in) is a long update, in steps, not one that goes ahead.
FEW_FILES = 32
_LOG_EVERY_S = 5.0  # how often a running update's progress is logged


@dataclass(frozen=True)
class KeeperState:
    """What a front end reports about its index."""

    state: str = "loading"  # loading (nothing committed yet) | ready | empty | failed
    files: int = 0  # indexed files, as last committed
    chunks: int = 0  # indexed chunks, as last committed
    indexing: tuple[int, int | None] | None = None  # (files done, files to do) of the running update
    reason: str | None = None  # why the running update runs
    error: str | None = None  # why the last update failed (None when it succeeded)
    updates: int = 0  # updates finished (each step of a long update counts)
    folders: list[str] = field(default_factory=list)  # the index's folders after the last update
    summary: IndexSummary | None = None  # what the last successful update (or step of one) did
    finished_at: float | None = None  # time.monotonic() when the last update ended, failed or not
    queued: bool = False  # the running update waits for another index's update (a shared gate)
    # ready, from part of the files: a first build committed some of its steps (files of files_total)
    partial: tuple[int, int] | None = None

    def message(self) -> str:
        """One line for people: ``ready: 7 files, 7 chunks``, ``indexing: 120 of 1089 files``, ..."""
        what = {
            "loading": "loading the index: not ready yet, retry shortly",
            "ready": f"ready: {self.files} files, {self.chunks} chunks",
            "empty": "no indexed content: start the server with folders (mdrag serve DIR)",
            "failed": f"the index could not be loaded: {self.error}",
        }[self.state]
        doing = self.doing()
        if doing and self.partial is not None:
            return f"{doing}; results come from the {self.partial[0]} indexed so far"
        if doing:
            what = f"{doing} ({what})" if self.state == "ready" else f"{doing}; {what}"
        return what

    def doing(self) -> str:
        """How far the running update is (``indexing: 120 of 1089 files``), or "" when none runs."""
        if self.indexing is None:
            return ""
        done, total = self.indexing
        return f"indexing: {done} of {total} files" if total is not None else "indexing: scanning the folders"


class IndexKeeper:
    """Runs ``index``'s updates in a worker thread: :meth:`start`, :meth:`request`, :meth:`state`, :meth:`close`.

    ``folders``: what the first update adds (none: the index's own folders);
    later updates update the index's folders as they are then (another process's
    `mdrag index DIR` or `mdrag remove DIR` changes them). ``update`` replaces
    ``index.update`` (see :data:`Updater`), ``gate`` is held while an update runs.

    ``watch``: once the index is loaded (:attr:`KeeperState.state` is no longer ``loading``), watch its
    folders (those the last update named: a folder another process adds is watched too) and update the
    documents that change, ahead of a running update (:meth:`wait_watching` says when a watch is in place).
    ``rescan_interval``: ask for an update of everything every so many seconds (None: never; settable
    while it runs, as :attr:`rescan_interval`).
    """

    def __init__(
        self,
        index: Index,
        folders: Sequence[str | Path] = (),
        step_s: float = STEP_S,
        on_change: Callable[[KeeperState], object] | None = None,
        update: Updater | None = None,
        gate: threading.Lock | None = None,
        watch: bool = False,
        rescan_interval: float | None = None,
    ) -> None:
        self.index = index
        self.step_s = step_s  # how long one step of a full update runs before it commits
        self.batch_chunks = BATCH_CHUNKS  # chunks per embed round of an update: fewer, a pause is heeded sooner
        self.on_change = on_change  # told each new state, from the worker thread
        self._updater = update
        self._gate = gate
        self._folders = [str(Path(f).expanduser().resolve()) for f in folders]
        self._cond = threading.Condition()  # guards everything below
        self._state = KeeperState(folders=list(self._folders))
        self._full: str | None = None  # why a full update is asked for (None: none is)
        self._paths: set[str] = set()  # changed files waiting to go ahead
        self._issued = 0  # request numbers handed out
        self._waiting: dict[int, str] = {}  # request number -> "full" or "paths", not yet done
        self._pause = threading.Event()  # the running step commits what it wrote and returns
        self._cancel = threading.Event()  # the running update stops at its next file (close)
        self._stepping = False  # a full update is running
        self._first = True
        self._long = False  # a full update is under way (between its steps too)
        self._closed = False
        self._thread: threading.Thread | None = None
        # watches the folders and asks for updates of what changes (with watch)
        self._watcher = FolderWatcher(self._watched_folders, self._ask, f"mdrag-watch-{index.name}") if watch else None
        # asks for a rescan every rescan_interval seconds (its thread starts once there is an interval)
        self._rescans = Periodic(rescan_interval, self._rescan, f"mdrag-rescan-{index.name}")

    # -- the front end's side ---------------------------------------------------

    def __enter__(self) -> IndexKeeper:
        """``with IndexKeeper(index, watch=True) as keeper:`` starts it, and closes it at the end."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def state(self) -> KeeperState:
        with self._cond:
            return self._state

    def start(self) -> int:
        """Start the worker and the first update (request number returned: see :meth:`wait`)."""
        ticket = self.request("startup")
        self._thread = threading.Thread(target=self._work, name="mdrag-keeper", daemon=True)
        self._thread.start()
        if self._watcher is not None:
            self._watcher.start()
        self._rescans.start()
        return ticket

    @property
    def rescan_interval(self) -> float | None:
        """Seconds between the periodic rescans (None: none); a new value applies at once."""
        return self._rescans.interval

    @rescan_interval.setter
    def rescan_interval(self, seconds: float | None) -> None:
        self._rescans.interval = seconds

    @property
    def watching(self) -> tuple[str, ...] | None:
        """The folders a file watch is in place on now (None: none is, or the keeper does not watch)."""
        return self._watcher.watching if self._watcher is not None else None

    def wait_watching(self, folders: Iterable[str | Path] | None = None, timeout: float | None = None) -> bool:
        """Wait until a file watch is in place (on ``folders`` at least, when given): a change made
        afterwards will be seen. False when ``timeout`` ran out, or the keeper does not watch or is closed."""
        return self._watcher.wait_watching(folders, timeout) if self._watcher is not None else False

    def request(self, reason: str, paths: Iterable[str] | None = None) -> int:
        """Ask for an update: of everything (``paths`` None), or of these changed files, which go ahead of a
        running update (more than ``FEW_FILES``: an update of everything). Requests that wait together are
        served by one update. Returns the request's number."""
        with self._cond:
            if self._closed:
                raise MdragError("the index keeper is closed")
            self._issued += 1
            changed = _files(paths) if paths is not None else set()
            if paths is None or len(changed) > FEW_FILES:  # many files (a folder dropped in): a long update
                self._full = self._full or reason
                self._waiting[self._issued] = "full"
            else:
                self._paths.update(changed)
                self._waiting[self._issued] = "paths"
                if self._stepping:
                    self._pause.set()
            self._cond.notify_all()
            return self._issued

    @property
    def busy(self) -> bool:
        """An update is asked for or running."""
        with self._cond:
            return bool(self._waiting)

    def wait(self, ticket: int | None = None, timeout: float | None = None) -> bool:
        """Wait until request ``ticket`` (None: the last one made) and every one before it are done;
        False when ``timeout`` ran out."""
        with self._cond:
            last = self._issued if ticket is None else ticket
            return self._cond.wait_for(lambda: self._closed or min(self._waiting, default=last + 1) > last, timeout)

    def close(self) -> None:
        """Stop: the watch and the rescans end, a running update stops at its next file (the next start
        finishes it), then the worker ends."""
        if self._watcher is not None:
            self._watcher.close()
        self._rescans.close()
        with self._cond:
            self._closed = True
            self._cancel.set()
            self._pause.set()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    # -- the watch and the rescans ---------------------------------------------------

    def _ask(self, reason: str, paths: Iterable[str] | None = None) -> None:
        """:meth:`request`, from the watch or the rescans: nothing once the keeper is closed."""
        with self._cond:
            if not self._closed:
                self.request(reason, paths)

    def _rescan(self) -> None:
        if self.state.state != "loading":  # a first build under way reads everything anyway
            self._ask("periodic rescan")

    def _watched_folders(self) -> list[str] | None:
        """The folders to watch: none while the index loads, then those the last update named (before the
        first one: the folders given and the index's own)."""
        st = self.state
        if st.state == "loading":
            return None
        if st.updates:
            return list(st.folders)
        try:
            own = self.index.folders
        except MdragError as e:
            log.debug("index %r: no folders yet: %s", self.index.name, e)
            own = []
        return list(dict.fromkeys([*self._folders, *own]))

    # -- the worker ----------------------------------------------------------------

    def _work(self) -> None:
        self.index.yield_to_searches()  # its updates run beside searches, which come first
        self._set(**self._counts())  # an index that holds a committed state is served while it updates
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._full is not None or bool(self._paths))
                if self._closed:
                    return
                if self._paths:
                    self._update_paths()
                    continue
                reason, self._full = self._full or "rescan", None
                covered = self._take("full")
            self._update_all(reason)
            self._done(covered)

    def _take(self, kind: str) -> list[int]:
        """The waiting requests of ``kind`` that the update starting now serves (called under the lock)."""
        return [n for n, k in self._waiting.items() if k == kind]

    def _done(self, covered: list[int]) -> None:
        with self._cond:
            for n in covered:
                self._waiting.pop(n, None)
            self._cond.notify_all()

    def _update_paths(self) -> None:
        """Index the changed files alone (called under the lock, which it releases while it runs)."""
        paths, self._paths = self._paths, set()
        covered = self._take("paths")
        self._cond.release()
        if self._state.indexing is None:
            self._set(indexing=(0, None), reason="files changed")
        try:
            self._run(
                "files changed",
                functools.partial(self._update, self.index.folders or None, only=paths),
                ends=not self._long,
            )
        finally:
            self._cond.acquire()
        for n in covered:
            self._waiting.pop(n, None)
        self._cond.notify_all()

    def _update(self, folders: Sequence[str] | None, **how: Any) -> IndexSummary:
        update = self._updater or self.index.update
        return update(folders, cancel=self._cancel, batch_chunks=self.batch_chunks, **how)

    def _update_all(self, reason: str) -> None:
        """A full update, committed in steps of at most ``step_s``; changed files go ahead between steps."""
        first, self._first = self._first, False
        self._set(indexing=(0, None), reason=reason)  # scanning the folders
        self._long = True
        try:
            self._steps(reason, first)
        finally:
            self._long = False
            self._set(indexing=None, reason=None)

    def _steps(self, reason: str, first: bool) -> None:
        done_before = 0
        so_far: IndexSummary | None = None  # what the steps before did
        while True:
            # after its first step, the index's folders as they are (another process may add or remove one)
            folders = (self._folders or None) if first and so_far is None else self.index.folders
            if not first and not folders and self._updater is None:
                return  # the index has no folders to update

            def progress(p: IndexProgress, base: int = done_before) -> None:
                if (base + p.files_done, base + p.files_total) != self.state.indexing:  # files, not each chunk
                    self._progress(reason, base + p.files_done, base + p.files_total)

            timer = threading.Timer(self.step_s, self._pause.set)
            timer.daemon = True
            with self._cond:
                self._stepping = True
                if self._paths:
                    self._pause.set()
            timer.start()
            try:
                summary = self._run(
                    reason,
                    functools.partial(self._update, folders, progress=progress, pause=self._pause),
                    first,
                    so_far=so_far,
                )
            finally:
                timer.cancel()
                with self._cond:
                    self._stepping = False
                    if not self._closed:
                        self._pause.clear()
            if summary is None or not summary.remaining:
                return
            so_far = add_step(so_far, summary)
            done_before = (self.state.indexing or (done_before, None))[0]
            with self._cond:
                if self._closed:
                    return
                if self._paths:
                    self._update_paths()

    def _run(
        self,
        reason: str,
        update: Callable[[], IndexSummary],
        first: bool = False,
        ends: bool = True,
        so_far: IndexSummary | None = None,
    ) -> IndexSummary | None:
        """Run one update; its outcome goes into the state (an error is logged, and the index stays as it was).
        ``ends``: no long update goes on after it (its progress is then cleared once nothing remains);
        ``so_far``: what the earlier steps of this update did (the state's summary counts them too)."""
        self._last_log = time.monotonic()
        try:
            with self._gated():
                summary = update()
        except IndexingCancelledError:
            log.info("stopped an update of index %r before it finished; the next start completes it", self.index.name)
            return None
        except Exception as e:  # an unexpected error too: later updates go on
            log.error(
                "update of index %r (%s) failed: %s (the index stays as it was)",
                self.index.name,
                reason,
                e,
                exc_info=not isinstance(e, MdragError),
            )
            error = str(e) if isinstance(e, MdragError) else f"unexpected error ({type(e).__name__}: {e})"
            failed = first and self._state.state == "loading"
            self._set(
                indexing=None,
                reason=None,
                error=error,
                finished_at=time.monotonic(),
                **({"state": "failed"} if failed else {}),
            )
            return None
        if summary.added or summary.modified or summary.deleted:
            log.info(
                "update of index %r (%s): %d added, %d modified, %d deleted; %d chunks embedded%s",
                self.index.name,
                reason,
                summary.added,
                summary.modified,
                summary.deleted,
                summary.chunks_embedded,
                f"; {summary.remaining} files to go" if summary.remaining else "",
            )
        counts = self._counts()
        still = summary.remaining > 0 or not ends  # a first build is ready once a step committed (partial)
        self._set(
            **counts,
            error=None,
            updates=self._state.updates + 1,
            folders=list(summary.folders),
            summary=add_step(so_far, summary),
            finished_at=time.monotonic(),
            **({} if still else {"indexing": None, "reason": None}),
        )
        return summary

    @contextlib.contextmanager
    def _gated(self) -> Iterator[None]:
        """Hold the gate (when there is one) while an update runs; ``queued`` while it waits for it."""
        if self._gate is None:
            yield
            return
        if not self._gate.acquire(blocking=False):
            self._set(queued=True)
            try:
                while not self._gate.acquire(timeout=0.2):
                    if self._cancel.is_set():
                        raise IndexingCancelledError(f"update of index {self.index.name!r} stopped before it started")
            finally:
                self._set(queued=False)
        try:
            yield
        finally:
            self._gate.release()

    def _counts(self) -> dict[str, object]:
        """The committed files and chunks, and the state they make."""
        try:
            st = self.index.status()
        except MdragError as e:
            log.debug("index %r: no status yet: %s", self.index.name, e)
            return {}
        if not st.exists or st.building or st.model_mismatch:
            return {}  # nothing committed yet, or another embedder's (the update builds it again): still loading
        part = st.partial
        return {
            "files": st.files,
            "chunks": st.chunks,
            "state": "ready" if st.chunks else "empty",
            "partial": (part["files_done"], part["files_total"]) if part else None,
        }

    def _progress(self, reason: str, done: int, total: int) -> None:
        self._set(indexing=(done, total), reason=reason)
        now = time.monotonic()
        if now - self._last_log >= _LOG_EVERY_S or done == total:
            self._last_log = now
            log.info("indexing index %r (%s): %d of %d files", self.index.name, reason, done, total)

    def _set(self, **changes: Any) -> None:
        with self._cond:
            before = self._state
            self._state = replace(self._state, **changes)
            state = self._state
        loaded = (before.state == "loading") != (state.state == "loading")
        if self._watcher is not None and (loaded or set(before.folders) != set(state.folders)):
            self._watcher.rewatch()  # watch the folders the index now has
        if self.on_change is not None:
            self.on_change(state)


_ADDED_UP = (
    "added", "modified", "deleted", "touched", "copies", "chunks_embedded", "chunks_reused", "chunks_deleted",
    "seconds", "embed_seconds", "waited_s", "parser_errors",
)  # fmt: skip


def add_step(before: IndexSummary | None, step: IndexSummary) -> IndexSummary:
    """The summary of an update's steps so far: ``before`` (the earlier steps) and ``step``, the last."""
    if before is None:
        return step
    # A later step finds the files an earlier one skipped in the manifest (not parsed again): each is one skip,
    # with the reason it was skipped for in this update.
    skipped = dict(before.skipped_files)
    for path, reason in step.skipped_files:
        skipped.setdefault(path, reason)
    return replace(
        step,
        **{f: getattr(before, f) + getattr(step, f) for f in _ADDED_UP},
        # the files the earlier steps added or modified are the last step's unchanged ones: counted once
        unchanged=max(0, step.unchanged - before.added - before.modified),
        rebuild=before.rebuild or step.rebuild,
        repaired=before.repaired or step.repaired,
        skipped=len(skipped),
        skipped_files=list(skipped.items()),
        warnings=before.warnings + [w for w in step.warnings if w not in before.warnings],
    )


def _files(paths: Iterable[str]) -> set[str]:
    """Absolute paths of the changed files: a folder stands for the files under it (one moved in)."""
    out: set[str] = set()
    for p in paths:
        path = Path(p).expanduser().absolute()
        if path.is_dir():
            out.update(str(Path(d, f)) for d, _, names in os.walk(path) for f in names)
        else:
            out.add(str(path))
    return out

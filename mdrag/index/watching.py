"""Watching for a long-running front end, each in its own thread: an index's folders, a periodic call, the
config file.

:class:`FolderWatcher` and :class:`Periodic` serve the :class:`~mdrag.index.keeper.IndexKeeper` (``watch``,
``rescan_interval``): they ask it for an update when watched files change and at each rescan.
:class:`ConfigWatcher` tells a front end that the config file in its home changed (the WebSocket server
then applies the settings it may apply live). None knows of asyncio: a callback runs in the watcher's
thread, and :meth:`close` stops the thread within a fraction of a second.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from mdrag.config import CONFIG_FILES

__all__ = ["ConfigWatcher", "FolderWatcher", "Periodic"]

log = logging.getLogger(__name__)

DEBOUNCE_MS = 500  # changes this close together are one request (an editor's save is several events)
CONFIG_DEBOUNCE_MS = 300
#: How long watchfiles waits before it yields nothing: its first (empty) yield says the watcher is installed.
RUST_TIMEOUT_MS = 1000
_HOME_POLL_S = 0.5  # how often a config watcher looks for a home that does not exist yet


def _resolved(folders: Iterable[str | Path]) -> tuple[str, ...]:
    return tuple(str(Path(f).expanduser().resolve()) for f in folders)


class FolderWatcher:
    """Watches folders in a thread and asks for updates: ``on_request("files changed", paths)`` for changed
    documents (hidden files and folders below a watched folder are not indexed, so not watched), and
    ``on_request("folders added", folders)`` for folders that appeared since the last watch, once the new
    watch is in place (what changed in them before it was is read then).

    ``folders()`` says what to watch; None: nothing yet. After :meth:`rewatch` the watcher asks again
    (within about a second) and, when the answer differs, watches the folders it then names: a change
    made while one watch gives way to the next may be missed (the periodic rescan reads it).
    """

    def __init__(
        self,
        folders: Callable[[], Sequence[str] | None],
        on_request: Callable[[str, list[str]], object],
        name: str = "mdrag-watch",
    ) -> None:
        self._folders = folders
        self._on_request = on_request
        self._name = name  # the thread's
        self._stop = threading.Event()  # set by close(): the watch ends within watchfiles' step (50 ms)
        self._recheck = threading.Event()  # set by rewatch() and close(): ask folders() again
        self._cond = threading.Condition()  # guards _watched, and tells wait_watching() of its changes
        self._watched: tuple[str, ...] | None = None  # the folders watched now (None: no watch in place)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def rewatch(self) -> None:
        """The folders to watch may have changed: the watcher asks ``folders()`` again."""
        self._recheck.set()

    def close(self) -> None:
        """Stop watching; returns once the thread has ended (a request under way ends first)."""
        self._stop.set()
        self._recheck.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def watching(self) -> tuple[str, ...] | None:
        """The folders a watch is in place on now (None: none is, or it is being replaced)."""
        with self._cond:
            return self._watched

    def wait_watching(self, folders: Iterable[str | Path] | None = None, timeout: float | None = None) -> bool:
        """Wait until a watch is in place (on ``folders`` at least, when given): a change made afterwards
        will be seen. False when ``timeout`` ran out or the watcher was closed."""
        want = set(_resolved(folders)) if folders is not None else set()

        def watched() -> bool:
            return not self._stop.is_set() and self._watched is not None and want <= set(self._watched)

        with self._cond:
            self._cond.wait_for(lambda: self._stop.is_set() or watched(), timeout)
            return watched()

    def _set_watched(self, watched: tuple[str, ...] | None) -> None:
        with self._cond:
            self._watched = watched
            self._cond.notify_all()

    def _roots(self) -> list[str] | None:
        """The folders to watch that exist (None: nothing to watch yet)."""
        folders = self._folders()
        return None if folders is None else [f for f in folders if Path(f).is_dir()]

    def _run(self) -> None:
        from mdrag.parsers import supported_extensions

        exts = tuple(supported_extensions())
        before: list[str] | None = None  # the folders the last watch watched (None: none yet)
        while True:
            self._recheck.clear()
            if self._stop.is_set():
                return
            roots = self._roots()
            if roots is None:
                self._recheck.wait()
                continue
            added = [] if before is None else [f for f in roots if f not in before]
            before = roots
            try:
                if roots:
                    self._watch(roots, added, exts)
                else:
                    self._set_watched(())
                    self._recheck.wait()
            except Exception as e:  # a folder gone while the watch starts, too many watches (inotify's limit)
                log.warning(
                    "cannot watch %s: %s; changes there are seen at the next rescan",
                    ", ".join(roots),
                    e,
                    exc_info=not isinstance(e, OSError),
                )
                self._recheck.wait()
            finally:
                self._set_watched(None)

    def _watch(self, roots: list[str], added: list[str], exts: tuple[str, ...]) -> None:
        """Watch ``roots`` until close(), or until a rewatch names other folders."""
        import watchfiles
        from watchfiles import Change

        def relevant(change: Change, path: str) -> bool:
            # hidden files and folders are not indexed: below the folder, not in the folder's own path
            root = max((r for r in roots if path.startswith(r.rstrip(os.sep) + os.sep)), key=len, default="")
            if f"{os.sep}." in path[len(root.rstrip(os.sep)) :]:
                return False
            # a document; or a folder renamed, moved in or out (what is gone cannot be told from a file)
            return path.lower().endswith(exts) or change == Change.deleted or Path(path).is_dir()

        # yield_on_timeout: the first (empty) yield says the watch is in place; then one at least every
        # RUST_TIMEOUT_MS, when a rewatch is looked at
        watch = watchfiles.watch(
            *roots,
            watch_filter=relevant,
            debounce=DEBOUNCE_MS,
            stop_event=self._stop,
            rust_timeout=RUST_TIMEOUT_MS,
            yield_on_timeout=True,
            raise_interrupt=False,
        )
        with contextlib.closing(watch):
            for changes in watch:
                if self.watching is None:
                    self._set_watched(tuple(roots))
                if added:
                    self._on_request("folders added", added)
                    added = []
                if changes:
                    self._on_request("files changed", sorted(path for _, path in changes))
                if self._recheck.is_set():
                    self._recheck.clear()
                    now = self._roots()
                    if now is None or set(now) != set(roots):
                        self._recheck.set()  # the loop in _run watches them
                        return


class Periodic:
    """Calls ``fn()`` in a thread every ``interval`` seconds (None: never), counted from :meth:`start` and
    then from each call. ``interval`` may change while it runs: the next call comes ``interval`` after the
    last one (at once when that is past)."""

    def __init__(self, interval: float | None, fn: Callable[[], object], name: str = "mdrag-periodic") -> None:
        self._interval = interval
        self._fn = fn
        self._name = name  # the thread's
        self._cond = threading.Condition()  # guards everything below
        self._started = False
        self._closed = False
        self._thread: threading.Thread | None = None  # started with a first interval that is not None

    @property
    def interval(self) -> float | None:
        with self._cond:
            return self._interval

    @interval.setter
    def interval(self, seconds: float | None) -> None:
        with self._cond:
            self._interval = seconds
            self._cond.notify_all()
            self._spawn()

    def start(self) -> None:
        with self._cond:
            self._started = True
            self._spawn()

    def close(self) -> None:
        """Stop; returns once the thread has ended (a call under way ends first)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _spawn(self) -> None:
        """Start the thread once there is something to call (called under the lock)."""
        if self._started and not self._closed and self._thread is None and self._interval is not None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        with self._cond:
            while not self._closed:
                left = None if self._interval is None else last + self._interval - time.monotonic()
                if left is None or left > 0:
                    self._cond.wait(left)
                    continue
                self._cond.release()
                try:
                    self._fn()
                except Exception:  # the next call may fare better
                    log.exception("a periodic call failed")
                finally:
                    self._cond.acquire()
                last = time.monotonic()


class ConfigWatcher:
    """Calls ``on_change()`` in a thread when the config file in ``home`` (config.yaml, .yml or .toml) is
    written, made or removed. A home that does not exist yet (a first start) is waited for, and a config file
    already in it when it appears counts as a change."""

    def __init__(self, home: Path, on_change: Callable[[], object], name: str = "mdrag-config-watch") -> None:
        self.home = home
        self._on_change = on_change
        self._name = name  # the thread's
        self._stop = threading.Event()
        self._watching = threading.Event()  # a watch is in place
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        late = not self.home.is_dir()  # a first start: the home comes later, maybe with a config file
        self._thread = threading.Thread(target=self._run, args=(late,), name=self._name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching; returns once the thread has ended (a callback under way ends first)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def wait_watching(self, timeout: float | None = None) -> bool:
        """Wait until the watch is in place: a change made afterwards will be seen. False on timeout."""
        return self._watching.wait(timeout)

    def _changed(self) -> None:
        try:
            self._on_change()
        except Exception:  # a later change may apply
            log.exception("could not apply a change to the config file")

    def _run(self, late: bool) -> None:
        import watchfiles

        while not self.home.is_dir():
            if self._stop.wait(_HOME_POLL_S):
                return
        try:
            for changes in watchfiles.watch(
                self.home,
                watch_filter=lambda _c, p: Path(p).name in CONFIG_FILES,
                debounce=CONFIG_DEBOUNCE_MS,
                stop_event=self._stop,
                rust_timeout=RUST_TIMEOUT_MS,
                yield_on_timeout=True,
                recursive=False,
                raise_interrupt=False,
            ):
                first = not self._watching.is_set()
                self._watching.set()
                # a late home: a file written there before the watch was in place counts too
                if changes or (first and late and any((self.home / name).is_file() for name in CONFIG_FILES)):
                    self._changed()
        except Exception as e:  # the home removed while the watch starts, too many watches
            log.warning("cannot watch the config file in %s: %s; changes to it need a restart", self.home, e)

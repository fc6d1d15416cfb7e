"""One update or removal of an index at a time, across processes: the index's writers' lock."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import filelock

from mdrag.errors import IndexingCancelledError, MdragError, StoreUnavailableError

__all__ = ["Writers"]

log = logging.getLogger(__name__)

# While a run waits for another process's run on the index, how often it checks whether it was cancelled.
_WAIT_POLL_S = 0.2


class Writers:
    """One update or removal of an index at a time, across processes: the index's writers' lock.

    A file lock (:mod:`filelock`) beside the manifest, ``<index>.lock``, taken before
    the manifest is read: a run that waited for another process's run reads what
    that run left, so it finds its work done instead of doing it again. The holder
    writes its process id to ``<index>.pid``, for the message of a run that waits.
    Reentrant within one :class:`Index` (the CLI holds it around a run and the
    closing of the store; the run takes it again).
    """

    def __init__(self, manifest_path: Path, index: str) -> None:
        self.index = index  # named in the messages
        self.path = manifest_path.with_suffix(".lock")
        self._pid_path = manifest_path.with_suffix(".pid")  # who holds the lock (may lag behind it for an instant)
        self._lock = filelock.FileLock(str(self.path), thread_local=False)  # held by an Index, not a thread
        self.waited = 0.0  # seconds the holding now in force waited for another process's run

    @contextmanager
    def hold(self, cancel: threading.Event | None = None) -> Iterator[None]:
        """Hold the lock for the block; waiting for another process's run says so, until ``cancel`` is set."""
        if self._lock.is_locked:  # held by this Index already: taken again
            self._lock.acquire()
        else:
            self._acquire(cancel)
        try:
            yield
        finally:
            self._lock.release()

    def _acquire(self, cancel: threading.Event | None) -> None:
        t0 = time.monotonic()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._lock.acquire(timeout=0)
                self.waited = 0.0
            except filelock.Timeout:
                self._wait(cancel)
                self.waited = time.monotonic() - t0
                log.info("the other run on index %r finished after %.1f s", self.index, self.waited)
            try:
                self._pid_path.write_text(f"{os.getpid()}\n")
            except OSError:
                self._lock.release()
                raise
        except OSError as e:
            raise self._error(e) from e

    def _wait(self, cancel: threading.Event | None) -> None:
        """Take the lock once another process's run lets it go, saying so first; IndexingCancelledError
        once ``cancel`` is set."""
        log.warning(
            "waiting for another mdrag run on index %r (pid %s) to finish; this run then does what it left",
            self.index,
            self._holder(),
        )
        while True:
            if cancel is not None and cancel.is_set():
                raise IndexingCancelledError(
                    f"cancelled while waiting for another mdrag run on index {self.index!r}; nothing was written"
                )
            try:
                self._lock.acquire(timeout=_WAIT_POLL_S)
                return
            except filelock.Timeout:
                continue

    def _holder(self) -> str:
        """The process id of the run holding the lock, as it wrote it ("unknown" if unreadable)."""
        try:
            return self._pid_path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def _error(self, e: OSError) -> MdragError:
        """Why the lock cannot be taken, and what to do."""
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return StoreUnavailableError(
                f"The index's cache folder {self.path.parent} is read-only: mdrag can search the index but not "
                "update it. Index where mdrag can write (MDRAG_HOME)."
            )
        return MdragError(
            f"cannot take the writers' lock {self.path} of index {self.index!r}: {e.strerror or e}. "
            "Check that disk and run the command again."
        )

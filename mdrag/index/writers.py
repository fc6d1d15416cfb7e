"""One update or removal of an index at a time, across processes: the index's writers' lock."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mdrag.errors import IndexingCancelledError, MdragError, StoreUnavailableError
from mdrag.fileio import write_atomic

if TYPE_CHECKING:
    import filelock

__all__ = ["Running", "Writers"]

log = logging.getLogger(__name__)

# While a run waits for another process's run on the index, how often it checks whether it was cancelled.
_WAIT_POLL_S = 0.2
_RECORD_EVERY_S = 0.5  # how often a run writes its progress record (and at its first and last file)


@dataclass(frozen=True)
class Running:
    """The run that holds an index's writers' lock now, as its progress record says (see :meth:`Writers.running`)."""

    pid: int
    files_done: int  # files done: of the whole build, for a first build in steps
    files_total: int | None  # files to do (None: it scans its folders)
    first_build: bool  # the index's first build (readers see only what its steps committed)

    def message(self) -> str:
        """``being built: 89 of 768 files (pid 4242)``, or ``being updated: ...``."""
        what = "being built" if self.first_build else "being updated"
        where = f"{self.files_done} of {self.files_total} files" if self.files_total is not None else "scanning"
        return f"{what}: {where} (pid {self.pid})"


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
        self._file_lock: filelock.BaseFileLock | None = None  # made on first use (see _lock)
        self._making = threading.Lock()  # guards its making
        self.waited = 0.0  # seconds the holding now in force waited for another process's run
        # How far the run of the holder is, for other processes' `status`: JSON, written atomically.
        self._record_path = manifest_path.with_suffix(".progress")
        self._recorded: tuple[float, tuple[int, int | None, bool] | None] = (0.0, None)  # when, what it wrote last

    @property
    def _lock(self) -> filelock.BaseFileLock:
        """The file lock, held by an Index, not a thread; made (and :mod:`filelock` imported) on first use: a
        command that writes nothing never takes it."""
        lock = self._file_lock
        if lock is None:
            with self._making:
                if self._file_lock is None:
                    import filelock

                    self._file_lock = filelock.FileLock(str(self.path), thread_local=False)
                lock = self._file_lock
        return lock

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
        from filelock import Timeout

        t0 = time.monotonic()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._lock.acquire(timeout=0)
                self.waited = 0.0
            except Timeout:
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
        from filelock import Timeout

        while True:
            if cancel is not None and cancel.is_set():
                raise IndexingCancelledError(
                    f"cancelled while waiting for another mdrag run on index {self.index!r}; nothing was written"
                )
            try:
                self._lock.acquire(timeout=_WAIT_POLL_S)
                return
            except Timeout:
                continue

    def record(self, done: int, total: int | None, first_build: bool) -> None:
        """Write how far this process's run is (at most every ``_RECORD_EVERY_S``, and at its first and
        last file), for :meth:`running` in other processes; never fails the run."""
        what = (done, total, first_build)
        when, last = self._recorded
        now = time.monotonic()
        if what == last or (now - when < _RECORD_EVERY_S and last is not None and done not in (0, total)):
            return
        self._recorded = (now, what)
        record = Running(os.getpid(), done, total, first_build)
        try:
            write_atomic(self._record_path, json.dumps(asdict(record)))
        except OSError as e:
            log.debug("could not write the progress record %s: %s", self._record_path, e)

    def clear_record(self) -> None:
        """The run is over, or lets the lock go: its progress record goes."""
        self._recorded = (0.0, None)
        with contextlib.suppress(OSError):
            self._record_path.unlink(missing_ok=True)

    def running(self) -> Running | None:
        """The run of any process (this one too) that holds the lock and is indexing now, as its progress
        record says; None when none is (a record left by a process that is gone, or by a run that ended
        while its process lives on, does not count)."""
        try:
            d = json.loads(self._record_path.read_text())
            found = Running(int(d["pid"]), int(d["files_done"]), d["files_total"], bool(d["first_build"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if _alive(found.pid) and self._held() else None

    @property
    def held_on(self) -> bool:
        """Whether this process holds the lock beyond the holding in force (the CLI, around a run's steps)."""
        return self._file_lock is not None and self._file_lock.lock_counter > 1

    def _held(self) -> bool:
        """Whether a process (this one too) holds the lock now: tried without taking it (shared, at once)."""
        try:
            import fcntl
        except ImportError:  # not on POSIX: whether its holder lives decides
            return True
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: it exists
        return True
    return True

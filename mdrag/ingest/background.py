"""Work an index run does in threads while it goes on: files parsed ahead, the model loaded.

Parsing (Python) overlaps embedding (native code that releases the GIL), and
the embedder's model loads while the first files are parsed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar

from mdrag.embedding.base import Embedder
from mdrag.errors import IndexingCancelledError

__all__ = ["WarmUp", "ahead"]

log = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")

_PARSE_AHEAD = 64  # parsed files waiting for the embedder, at most
_CANCEL_POLL_S = 0.1  # while waiting for a parsed file, how often a run checks whether it was cancelled


def ahead(
    items: Sequence[A], work: Callable[[A], R], depth: int = _PARSE_AHEAD, cancel: threading.Event | None = None
) -> Generator[tuple[A, R], None, None]:
    """``(item, work(item))`` in order, computed by a thread up to ``depth`` items ahead.

    The thread overlaps parsing (Python) with embedding (native code that
    releases the GIL); the bounded queue keeps memory bounded. An exception in
    ``work`` is raised here; stopping early stops the thread. Once ``cancel``
    is set, IndexingCancelledError is raised before the next item, without
    waiting for the thread's current ``work`` to return (it stops after it).
    """
    q: queue.Queue[tuple[A, R] | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(x: tuple[A, R] | BaseException | None) -> None:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return
            except queue.Full:
                continue

    def run() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                put((item, work(item)))
            put(None)
        except BaseException as e:  # handed to the consumer, which raises it
            put(e)

    def get() -> tuple[A, R] | BaseException | None:
        while True:
            if cancel is not None and cancel.is_set():
                raise IndexingCancelledError("indexing was cancelled before it finished; the next run completes it")
            try:
                return q.get(timeout=_CANCEL_POLL_S if cancel is not None else None)
            except queue.Empty:
                continue

    t = threading.Thread(target=run, name="mdrag-parse", daemon=True)
    t.start()
    cancelled = False
    try:
        while (x := get()) is not None:
            if isinstance(x, BaseException):
                raise x
            yield x
    except IndexingCancelledError:
        cancelled = True
        raise
    finally:
        stop.set()
        if not cancelled:  # a cancelled run does not wait for a parse in progress: it writes nothing
            t.join()


class WarmUp:
    """Load the embedder's model in a thread; :meth:`finish` waits for it and says how long the load took."""

    def __init__(self, embedder: Embedder) -> None:
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(embedder,), name="mdrag-model-load", daemon=True)
        self._thread.start()

    def _run(self, embedder: Embedder) -> None:
        t = time.perf_counter()
        try:
            embedder.warm_up()
        except Exception as e:  # the first embed call loads it again and raises the error where it is handled
            log.debug("loading the model ahead of the first batch failed: %s", e)
        self.seconds = time.perf_counter() - t

    @property
    def ready(self) -> bool:
        """Whether the model is loaded (or its load failed)."""
        return not self._thread.is_alive()

    def finish(self) -> float:
        self._thread.join()
        return self.seconds

"""A thread at a lower OS priority, for embedding that must give way to searches.

An index updated while it is searched (``mdrag serve`` keeping its index
current) embeds hundreds of chunks while each search embeds one query with the
same model. Run side by side on the same cores, the update's batches take the
CPU from the queries. :func:`run_yielding` runs the update's model calls in one
thread of this process whose nice value is :data:`NICE` higher (Linux gives
each thread its own nice value): when a query needs a core, the scheduler gives
it to the query first, and the update takes what the queries leave.

Only the model's own work runs there, on one thread (see
:meth:`mdrag.embedding.onnx.OnnxEmbedder.background`): a niced thread holds
Python's GIL for a moment per call, never for long, so it cannot keep a search
waiting on the GIL while it waits for a core. The models themselves are loaded
by the caller, at its priority: threads a runtime starts while loading (OpenVINO
starts its shared worker threads then) inherit the priority of the thread that
loads, and the queries use those threads too.

While it works, queries are embedded on one thread
(:meth:`mdrag.embedding.onnx.OnnxEmbedder.embed_query`): a model run split
over two threads waits at each step for the slower one, and the second one
waits for the core the yielding thread holds (the scheduler takes up to a
slice to hand it over).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["NICE", "run_yielding", "yielding_busy"]

log = logging.getLogger(__name__)

T = TypeVar("T")

NICE = 10  # added to the nice value of the yielding thread (19 is the lowest priority)
BUSY_S = 1.0  # after a call, the yielding thread counts as busy this long (the next batch is on its way)

_executor: ThreadPoolExecutor | None = None  # the yielding thread, started on first use
_lock = threading.Lock()  # guards the three fields around it
_calls = 0  # calls submitted and not yet returned
_last_end = -BUSY_S  # time.monotonic() when the last call returned


def _lower_priority() -> None:
    """Raise the calling thread's nice value by :data:`NICE` (Linux only: elsewhere a nice value is per process)."""
    if not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + NICE))
    except OSError as e:  # a sandbox that forbids it: the thread keeps the process's priority
        log.info("could not lower the priority of the indexing thread: %s", e)


def run_yielding(fn: Callable[[], T]) -> T:
    """``fn()`` run in the yielding thread (one call at a time); its result, or its exception raised here."""
    global _executor, _calls, _last_end
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(1, thread_name_prefix="mdrag-yielding", initializer=_lower_priority)
        executor = _executor
        _calls += 1
    try:
        return executor.submit(fn).result()
    finally:
        with _lock:
            _calls -= 1
            _last_end = time.monotonic()


def yielding_busy() -> bool:
    """Whether the yielding thread works now, or did within the last :data:`BUSY_S` seconds."""
    with _lock:
        return _calls > 0 or time.monotonic() - _last_end < BUSY_S

"""A small thread-safe LRU cache whose values are read once: :class:`LRUCache`."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LRUCache"]

V = TypeVar("V")


class LRUCache(Generic[V]):
    """The values read last, by key, bounded by their number and their total size; a value being read by
    one thread is waited for by another that asks for it, not read twice."""

    def __init__(self, entries: int, limit: int, size: Callable[[V], int]) -> None:
        self.entries = entries  # values kept at most
        self.limit = limit  # their total size at most (a bigger value is not kept)
        self.size = size  # the size of a value
        self._lock = threading.Lock()  # guards the fields below
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()  # key -> value, its size; oldest use first
        self._held = 0  # the total size of the items
        self._reading: dict[Hashable, threading.Lock] = {}  # key -> held while one thread reads it

    def get(self, key: Hashable, read: Callable[[], V]) -> V:
        """The value for ``key``: kept, or ``read()`` (once, whichever threads ask) and kept."""
        with self._lock:
            found = self._hit(key)
            if found is not None:
                return found
            reading = self._reading.setdefault(key, threading.Lock())
        with reading:
            with self._lock:
                found = self._hit(key)
                if found is not None:
                    return found
            try:
                value = read()
            finally:
                with self._lock:
                    self._reading.pop(key, None)
            self._keep(key, value)
            return value

    def _hit(self, key: Hashable) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def _keep(self, key: Hashable, value: V) -> None:
        size = self.size(value)
        if size > self.limit:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._held -= old[1] if old else 0
            self._items[key] = (value, size)
            self._held += size
            while len(self._items) > self.entries or self._held > self.limit:
                _, (_, dropped) = self._items.popitem(last=False)
                self._held -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._held = 0

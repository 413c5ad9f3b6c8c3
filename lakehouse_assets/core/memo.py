"""Per-process caches of what immutable files determine.

An Iceberg metadata file or manifest list never changes once written (a commit writes new ones), so
whatever is computed from one alone can be kept under its location for the life of the process: a
new commit has new locations and is computed afresh. Bounded (least recently used out), thread-safe.
The reader also keeps JVM objects in one, under the Spark session they were made in (core/read/reader.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

V = TypeVar("V")


class ByImmutableFiles:
    """At most `max_weight` in all (each value weighs `weight(value)`, 1 by default)."""

    def __init__(self, max_weight: int, weight: Callable[[object], int] = lambda _: 1):
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._max = max_weight
        self._weight = weight
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value under `key` (which must name the immutable files it comes from), computed once."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]  # type: ignore[return-value]
        value = compute()
        weight = self._weight(value)
        if weight <= self._max:
            with self._lock:
                if key not in self._entries:
                    self._entries[key] = (value, weight)
                    self._total += weight
                while self._total > self._max:
                    self._total -= self._entries.popitem(last=False)[1][1]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._total = 0

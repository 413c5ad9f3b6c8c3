"""Per-process caches of what immutable files determine.

An Iceberg metadata file or manifest list never changes once written (a commit writes new ones), so
whatever is computed from one alone can be kept under its location for the life of the process: a
new commit has new locations and is computed afresh. Bounded (least recently used out), thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

V = TypeVar("V")


class ByImmutableFiles:
    def __init__(self, max_entries: int):
        self._entries: OrderedDict[Hashable, object] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V], keep: Callable[[V], bool] = lambda _: True) -> V:
        """The value under `key` (which must name the immutable files it comes from), computed once."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]  # type: ignore[return-value]
        value = compute()
        if keep(value):
            with self._lock:
                self._entries[key] = value
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

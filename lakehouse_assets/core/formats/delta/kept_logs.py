"""The Delta log a write read, kept for the process's next write to the same table.

Loading a Delta log replays its last checkpoint and every commit after it: its cost follows the table (every
live file's entry) and how long ago the last checkpoint was. A process that writes one table again and again (a
stream's micro-batches, a loop of small appends, Dagster's materializations in one process) instead follows the
log its last write read (core/formats/delta/followed_log.py): only the commit files since are read, so the cost
follows what changed.

A kept log belongs to one write at a time: `take` removes it, and the mirror gives it back after its Delta commit
(core/formats/delta/committer.py), so two writes in one process never share a `FollowedLog`. It is used only
while it is still a read of the same log:
- the key holds the Iceberg table's uuid and the storage options, so a dropped and re-created table (or new
  credentials) loads afresh;
- the commit file of the version it was read at must still be the file it was (size and modification time): a
  Delta log deleted, or deleted and created again, under the table is loaded afresh;
- no checkpoint may have been written since it was kept (`_delta_log/_last_checkpoint`): log cleanup removes the
  commit files a newer checkpoint covers, which delta-rs may still read for the kept log (its transaction versions).
  Checkpoints come from maintenance, rarely: the next use after one loads the log afresh, once.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from ...io.storage import StorageConfig, join_uri
from .followed_log import FollowedLog

MAX_KEPT = 8  # tables; a log's entries take memory in proportion to its live files


def _key(root_uri: str, table_uuid: str, storage: StorageConfig) -> tuple:
    return root_uri, table_uuid, tuple(sorted((storage.delta_options(root_uri) or {}).items()))


def _commit_file(root_uri: str, storage: StorageConfig, version: int) -> tuple[int | None, int | None] | None:
    """Size and modification time of `_delta_log/<version>.json`; None when it is gone."""
    fs, path = storage.filesystem(join_uri(root_uri, f"_delta_log/{version:020d}.json"))
    info = fs.get_file_info(path)
    return None if info.size is None else (info.size, info.mtime_ns)


def _last_checkpoint(root_uri: str, storage: StorageConfig) -> int | None:
    """The version `_delta_log/_last_checkpoint` names; None when there is none."""
    fs, path = storage.filesystem(join_uri(root_uri, "_delta_log/_last_checkpoint"))
    try:
        with fs.open_input_stream(path) as f:
            return int(json.loads(f.read())["version"])
    except FileNotFoundError:
        return None


class KeptDeltaLogs:
    """At most `max_kept` logs, least recently given back out first. Thread-safe."""

    def __init__(self, max_kept: int = MAX_KEPT):
        self._logs: OrderedDict[tuple, tuple[FollowedLog, tuple, int | None]] = OrderedDict()
        self._max = max_kept
        self._lock = threading.Lock()

    def take(self, root_uri: str, table_uuid: str, storage: StorageConfig) -> FollowedLog | None:
        """The log kept for this table, brought up to date; None when there is none, or it is no longer a read of
        the table's log (the caller loads it)."""
        with self._lock:
            entry = self._logs.pop(_key(root_uri, table_uuid, storage), None)
        if entry is None:
            return None
        delta, read_at, checkpoint = entry
        try:
            if _commit_file(root_uri, storage, delta.version()) != read_at or _last_checkpoint(root_uri, storage) != checkpoint:
                return None
            delta.update_incremental()
        except Exception:  # noqa: BLE001 - a kept log is an optimisation: any doubt loads the log afresh
            return None
        return delta

    def give_back(self, root_uri: str, table_uuid: str, storage: StorageConfig, delta: FollowedLog) -> None:
        try:
            read_at = _commit_file(root_uri, storage, delta.version())
            checkpoint = _last_checkpoint(root_uri, storage)
        except Exception:  # noqa: BLE001 - not kept, loaded next time
            return
        if read_at is None:
            return
        with self._lock:
            key = _key(root_uri, table_uuid, storage)
            self._logs.pop(key, None)
            self._logs[key] = (delta, read_at, checkpoint)
            while len(self._logs) > self._max:
                self._logs.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._logs.clear()


KEPT = KeptDeltaLogs()

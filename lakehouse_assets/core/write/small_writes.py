"""Warn when a table receives many tiny commits (each one adds a snapshot, a Delta version and small files).

Rule (from the Iceberg snapshot summaries in the table metadata; no manifest or data file is read):
the last `lakehouse.small-writes.commits` snapshots (default 20, this write included) were all
committed within `lakehouse.small-writes.window-seconds` (default 3600) and their data files average
less than `lakehouse.small-writes.file-bytes` (default 1 MiB). All three are table properties, read
before the write writes anything: a value that is not a whole number refuses the write there, naming
the property, rather than failing a write that already committed. Commits that add no files (deletes,
repairs) are not counted. The advice: batch rows into fewer, larger writes (or run maintenance to compact).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from ..errors import SpecError
from ..formats import history
from ..properties import TableProperties

COMMITS = TableProperties.SMALL_WRITES_COMMITS
WINDOW_SECONDS = TableProperties.SMALL_WRITES_WINDOW_SECONDS
FILE_BYTES = TableProperties.SMALL_WRITES_FILE_BYTES
DEFAULTS = TableProperties.SMALL_WRITES_DEFAULTS


@dataclass(frozen=True)
class SmallWritesRule:
    """The table's thresholds for the advice; `commits` 0 (or less) turns it off."""

    commits: int
    window_seconds: int
    file_bytes: int

    @classmethod
    def for_table(cls, identifier: str, table: Table) -> "SmallWritesRule":
        return cls(*(_setting(identifier, table, key) for key in (COMMITS, WINDOW_SECONDS, FILE_BYTES)))

    def advice(self, identifier: str, table: Table) -> str | None:
        """The advice to write larger batches, or None when recent commits are not many and tiny."""
        if self.commits <= 0:
            return None  # disabled
        recent = []
        for snap in history.ancestors(table):
            if len(recent) >= self.commits:
                break
            summary = history.summary(snap)
            if int(summary.get("added-data-files", 0)) > 0:
                recent.append((snap.timestamp_ms, int(summary["added-data-files"]), int(summary.get("added-files-size", 0)), int(summary.get("added-records", 0))))
        if len(recent) < self.commits:
            return None
        span_ms = recent[0][0] - recent[-1][0]
        files, size, rows = sum(r[1] for r in recent), sum(r[2] for r in recent), sum(r[3] for r in recent)
        if span_ms > self.window_seconds * 1000 or size / files >= self.file_bytes:
            return None
        return (
            f"Table {identifier}: the last {len(recent)} commits came within {span_ms / 1000:.0f} s and added "
            f"{rows} rows in {files} files averaging {size // files} bytes (below {self.file_bytes}). Every commit adds an Iceberg "
            "snapshot, a Delta version and small files that slow down readers: write larger batches less often (e.g. "
            "accumulate rows upstream or use a coarser schedule), and compact the table with maintenance. Tune or disable "
            f"this warning with the table properties {COMMITS} (0 disables), {WINDOW_SECONDS} and {FILE_BYTES}."
        )


def _setting(identifier: str, table: Table, key: str) -> int:
    raw = table.properties.get(key)
    if raw is None:
        return DEFAULTS[key]
    try:
        return int(raw)
    except ValueError:
        raise SpecError(
            f"Table {identifier}: table property {key}={raw!r} is not a whole number. Nothing was written. Set it to an integer "
            f"({COMMITS}=0 turns the small-writes advice off), or remove it for the default {DEFAULTS[key]}."
        ) from None

"""Warn when a table receives many tiny commits (each one adds a snapshot, a Delta version and small files).

Rule (from the Iceberg snapshot summaries in the table metadata; no manifest or data file is read):
the last `lakehouse.small-writes.commits` snapshots (default 20, this write included) were all
committed within `lakehouse.small-writes.window-seconds` (default 3600) and their data files average
less than `lakehouse.small-writes.file-bytes` (default 1 MiB). All three are table properties.
Commits that add no files (deletes, repairs) are not counted. The advice: batch rows into fewer,
larger writes (or run maintenance to compact).
"""

from __future__ import annotations

from pyiceberg.table import Table

from ..formats import history
from ..properties import TableProperties

COMMITS = TableProperties.SMALL_WRITES_COMMITS
WINDOW_SECONDS = TableProperties.SMALL_WRITES_WINDOW_SECONDS
FILE_BYTES = TableProperties.SMALL_WRITES_FILE_BYTES
DEFAULTS = TableProperties.SMALL_WRITES_DEFAULTS


def _setting(table: Table, key: str) -> int:
    return int(table.properties.get(key, DEFAULTS[key]))


def small_writes_warning(identifier: str, table: Table) -> str | None:
    """The advice to write larger batches, or None when recent commits are not many and tiny."""
    commits, window_ms, file_bytes = _setting(table, COMMITS), _setting(table, WINDOW_SECONDS) * 1000, _setting(table, FILE_BYTES)
    if commits <= 0:
        return None  # disabled
    recent = []
    for snap in history.ancestors(table):
        if len(recent) >= commits:
            break
        summary = history.summary(snap)
        if int(summary.get("added-data-files", 0)) > 0:
            recent.append((snap.timestamp_ms, int(summary["added-data-files"]), int(summary.get("added-files-size", 0)), int(summary.get("added-records", 0))))
    if len(recent) < commits:
        return None
    span_ms = recent[0][0] - recent[-1][0]
    files, size, rows = sum(r[1] for r in recent), sum(r[2] for r in recent), sum(r[3] for r in recent)
    if span_ms > window_ms or size / files >= file_bytes:
        return None
    return (
        f"Table {identifier}: the last {len(recent)} commits came within {span_ms / 1000:.0f} s and added "
        f"{rows} rows in {files} files averaging {size // files} bytes (below {file_bytes}). Every commit adds an Iceberg "
        "snapshot, a Delta version and small files that slow down readers: write larger batches less often (e.g. "
        "accumulate rows upstream or use a coarser schedule), and compact the table with maintenance. Tune or disable "
        f"this warning with the table properties {COMMITS} (0 disables), {WINDOW_SECONDS} and {FILE_BYTES}."
    )

"""Table history from metadata only: the ancestor chain of Iceberg snapshots and the snapshot <-> Delta version map.

Every mirrored Delta commit records its Iceberg snapshot id in commitInfo
(`DeltaCommitKeys.ICEBERG_SNAPSHOT_ID`), so the mapping is read from the Delta log itself.
Nothing here reads a manifest or a data file.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Iterator

from ..properties import DeltaCommitKeys, SummaryKeys

if TYPE_CHECKING:  # (pyiceberg's table module: imported where a table is loaded, not where a code location loads)
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


def ancestors(table: Table, snapshot: Snapshot | None = None) -> Iterator[Snapshot]:
    """`snapshot` (default: current) and its parents, newest first, up to the oldest retained one."""
    snap = snapshot if snapshot is not None else table.current_snapshot()
    by_id = snapshots_by_id(table)
    while snap is not None:
        yield snap
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None


def snapshots_by_id(table: Table) -> dict[int, Snapshot]:
    """Every retained snapshot by id: pyiceberg's `snapshot_by_id` scans the list, so a walk through the
    history with it costs the square of the history's length."""
    return {s.snapshot_id: s for s in table.metadata.snapshots}


def summary(snapshot: Snapshot) -> dict[str, str]:
    """The snapshot summary's properties (Iceberg's counts and the `lakehouse.*` keys)."""
    return dict(snapshot.summary.additional_properties) if snapshot.summary else {}


def find_snapshot_by_write_id(table: Table, write_id: str) -> Snapshot | None:
    """A snapshot of the current branch written with this idempotency key."""
    return next((s for s in ancestors(table) if summary(s).get(SummaryKeys.WRITE_ID) == write_id), None)


def consumed_snapshot(table: Table, upstream: str) -> int | None:
    """The upstream snapshot whose changes the newest commit of `table` that recorded one includes (None: none did).
    Commits that consumed nothing (maintenance, other writers) are skipped: the walk stops at the newest that did."""
    key = SummaryKeys.CONSUMED_PREFIX + upstream
    for s in ancestors(table):
        if (value := summary(s).get(key)) is not None:
            return int(value)
    return None


def find_snapshot_by_writer(table: Table, key: str, value: str) -> Snapshot | None:
    """The newest snapshot of the current branch whose writer record (`SummaryKeys.WRITER`) has `key` == `value`."""
    for s in ancestors(table):
        try:
            writer = json.loads(summary(s).get(SummaryKeys.WRITER, "{}"))
        except ValueError:
            continue
        if isinstance(writer, dict) and writer.get(key) == value:
            return s
    return None


def snapshots_after(table: Table, target: Snapshot | None, sequence_number: int | None) -> list[Snapshot] | None:
    """Ancestors of `target` with a sequence number above `sequence_number`, oldest first.

    None when the chain was expired before reaching it (the caller falls back to a whole-state diff).
    """
    chain = []
    snap = target
    by_id = snapshots_by_id(table)
    while snap is not None and (sequence_number is None or snap.sequence_number > sequence_number):
        chain.append(snap)
        if snap.parent_snapshot_id is None:
            break
        parent = by_id.get(snap.parent_snapshot_id)
        if parent is None:
            return None
        snap = parent
    return list(reversed(chain))


def delta_versions_by_snapshot(delta) -> dict[int, int]:
    """Iceberg snapshot id -> the Delta version that mirrored it (first one wins), from the retained Delta log."""
    out: dict[int, int] = {}
    for commit in sorted(delta.history(), key=lambda c: c["version"]):
        sid = commit.get(DeltaCommitKeys.ICEBERG_SNAPSHOT_ID)
        if sid is not None:
            out.setdefault(int(sid), commit["version"])
    return out


def delta_version_of(delta, snapshot_id: int) -> int | None:
    """The Delta version whose commitInfo names `snapshot_id` (`delta_versions_of` for one snapshot): the mirror's
    latest snapshot is near the head of the log, so this reads a few commits rather than the whole history."""
    return delta_versions_of(delta, [snapshot_id]).get(snapshot_id)


def delta_versions_of(delta, snapshot_ids) -> dict[int, int]:
    """Snapshot id -> the Delta version that mirrored it, for `snapshot_ids`, searching the newest commits first
    until all are found: the cost grows with how far back the oldest one lies, not with the whole history."""
    wanted = {str(s) for s in snapshot_ids}
    limit = max(2, 2 * len(wanted))
    while wanted:
        commits = delta.history(limit)
        out: dict[int, int] = {}
        for c in commits:
            if (sid := c.get(DeltaCommitKeys.ICEBERG_SNAPSHOT_ID)) in wanted:
                out[int(sid)] = min(out.get(int(sid), c["version"]), c["version"])
        if len(out) == len(wanted) or len(commits) < limit:
            return out
        limit *= 4
    return {}


def oldest_delta_version(delta) -> int:
    """The oldest Delta version whose log entry is still present."""
    history = delta.history()
    return min(c["version"] for c in history) if history else delta.version()


def iso_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()

"""Points in time across both formats: Iceberg snapshot id <-> Delta version <-> timestamp.

Every mirrored Delta commit records its Iceberg snapshot id in commitInfo, so the mapping is read
from the Delta log itself. Metadata-only Delta versions (schema changes) map to the snapshot before
them: same files, same rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyiceberg.table import Table

from ..errors import RetentionError
from ..formats import history
from ..formats.delta.committer import DeltaMirror
from ..properties import TableProperties


@dataclass(frozen=True)
class PointInTime:
    iceberg_snapshot_id: int | None
    delta_version: int | None


def snapshot_to_delta_versions(mirror: DeltaMirror) -> dict[int, int]:
    """Iceberg snapshot id -> the Delta version that mirrored it."""
    delta = mirror.load()
    if delta is None:
        return {}
    return history.delta_versions_by_snapshot(delta)


def resolve(table: Table, mirror: DeltaMirror | None, *, snapshot_id: int | None = None, delta_version: int | None = None,
            as_of: dt.datetime | None = None) -> PointInTime:
    """The same point in time in both formats, from any one of snapshot id, Delta version or timestamp."""
    name = ".".join(table.name())
    mapping = snapshot_to_delta_versions(mirror) if mirror is not None else {}
    if as_of is not None:
        when = as_of if as_of.tzinfo else as_of.replace(tzinfo=dt.timezone.utc)
        snap = table.snapshot_as_of_timestamp(int(when.timestamp() * 1000))
        if snap is None:
            raise RetentionError(f"Table {name} has no snapshot at or before {when.isoformat()} (before its first commit or expired).")
        snapshot_id = snap.snapshot_id
    if snapshot_id is not None:
        if table.snapshot_by_id(snapshot_id) is None:
            raise RetentionError(f"Table {name} has no snapshot {snapshot_id}; it may have been expired. See `lakehouse history {name}`.")
        return PointInTime(snapshot_id, mapping.get(snapshot_id))
    if delta_version is not None:
        at_or_before = [(v, s) for s, v in mapping.items() if v <= delta_version]
        return PointInTime(max(at_or_before)[1] if at_or_before else None, delta_version)
    snap = table.current_snapshot()
    return PointInTime(snap.snapshot_id if snap else None, mapping.get(snap.snapshot_id) if snap else None)


def check_retention(table: Table, identifier: str, snapshot_id, delta_version, as_of) -> None:
    """Time travel beyond the maintenance retention window is refused in both formats alike."""
    min_ts = table.properties.get(TableProperties.RETENTION_MIN_TIMESTAMP)
    min_version = table.properties.get(TableProperties.RETENTION_DELTA_MIN_VERSION)
    fix = "Read a newer version, or raise snapshot_retention_days / min_snapshots_to_keep before the next maintenance run."
    if snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None and min_ts is not None:
        raise RetentionError(
            f"Table {identifier}: snapshot {snapshot_id} is not retained (snapshots before "
            f"{history.iso_ms(int(min_ts))} were expired by maintenance). {fix}"
        )
    if delta_version is not None and min_version is not None and delta_version < int(min_version):
        raise RetentionError(
            f"Table {identifier}: Delta version {delta_version} is outside the retention window "
            f"(the oldest retained version is {min_version}). {fix}"
        )
    if as_of is not None and min_ts is not None:
        as_of_ms = int(as_of.timestamp() * 1000)  # same convention as the snapshot lookup below
        if as_of_ms < int(min_ts):
            raise RetentionError(
                f"Table {identifier}: {as_of.isoformat()} is before the retention window (the oldest retained "
                f"snapshot is from {history.iso_ms(int(min_ts))}). {fix}"
            )

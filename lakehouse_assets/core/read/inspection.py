"""What a warehouse's tables hold and held, from metadata only: the tables and their state, a table's retained
commits in both formats, one point in time as (Iceberg snapshot, Delta version), the snapshot a Dagster run
left, and how far a table has consumed an upstream table's changes."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from ..errors import RetentionError, TableNotFound
from ..formats import history
from ..formats.file_columns import enabled as mapping_enabled
from ..io.storage import normalize_uri
from ..properties import SummaryKeys
from ..schema.spec import spec_terms
from ..table import branches, tables
from ..table.context import TableContext
from . import time_travel


def _delta_of(ctx: TableContext, table):
    return ctx.mirror(table).load() if ctx.delta_enabled(table) else None


def table_summaries(ctx: TableContext) -> list[dict[str, Any]]:
    """One row per table: location, current snapshot and Delta version, partitioning, formats, branches."""
    out = []
    for name in ctx.table_names():
        table = ctx.load(name)
        delta = _delta_of(ctx, table)
        current = table.current_snapshot()
        out.append(
            {
                "name": name,
                "location": normalize_uri(table.location()),
                "iceberg_metadata_location": table.metadata_location,
                "iceberg_snapshot_id": current.snapshot_id if current else None,
                "delta_version": delta.version() if delta is not None else None,
                "partition_by": spec_terms(table.spec(), table.schema()),
                "formats": tables.formats(table),
                "delta_column_mapping": mapping_enabled(table.properties),  # renames and drops work in both formats
                "branches": branches.branches(table),  # Iceberg only: Delta mirrors main
            }
        )
    return out


def commit_history(ctx: TableContext, identifier: str, branch: str | None = None) -> list[dict[str, Any]]:
    """Every retained commit of main (or of `branch`), newest first, with the Delta version that mirrors it."""
    table = ctx.load(identifier)
    delta = _delta_of(ctx, table)
    delta_versions = history.delta_versions_by_snapshot(delta) if delta is not None else {}
    head = branches.require_head(identifier, table, branch) if branches.target_branch(identifier, branch) else None
    out = []
    for snap in history.ancestors(table, head):
        s = history.summary(snap)
        out.append(
            {
                "iceberg_snapshot_id": snap.snapshot_id,
                "iceberg_sequence_number": snap.sequence_number,
                "delta_version": delta_versions.get(snap.snapshot_id),
                "timestamp": history.iso_ms(snap.timestamp_ms),
                "operation": s.get(SummaryKeys.OPERATION, snap.summary.operation.value if snap.summary else None),
                "files_added": int(s.get("added-data-files", 0)),
                "files_removed": int(s.get("deleted-data-files", 0)),
                "rows_added": int(s.get("added-records", 0)),
                "rows_removed": int(s.get("deleted-records", 0)),
                "total_rows": int(s.get("total-records", 0)),
                "writer": json.loads(s.get(SummaryKeys.WRITER, "{}")),
                "write_id": s.get(SummaryKeys.WRITE_ID),
                "branch": s.get(SummaryKeys.BRANCH),  # written to this branch (None: to main)
            }
        )
    return out


def point_in_time(ctx: TableContext, identifier: str, *, snapshot_id: int | None = None, delta_version: int | None = None, as_of: dt.datetime | None = None):
    """The same point in time as (Iceberg snapshot id, Delta version), from any one of the three."""
    table = ctx.load(identifier)
    mirror = ctx.mirror(table) if ctx.delta_enabled(table) else None
    return time_travel.resolve(table, mirror, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of)


def snapshot_of_run(ctx: TableContext, identifier: str, run_id: str) -> int:
    """The snapshot the Dagster run `run_id` left the table at (its last write to it)."""
    snap = history.find_snapshot_by_writer(ctx.load(identifier), "dagster_run_id", run_id)
    if snap is None:
        raise RetentionError(f"Table {identifier} has no retained snapshot written by run {run_id} (it never wrote the table, or that snapshot was expired).")
    return snap.snapshot_id


def consumed_snapshot(ctx: TableContext, identifier: str, upstream: str) -> int | None:
    """The snapshot of `upstream` whose changes table `identifier` includes (None: never, or no table yet)."""
    try:
        table = ctx.load(identifier)
    except TableNotFound:
        return None
    return history.consumed_snapshot(table, upstream)

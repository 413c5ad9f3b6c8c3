"""Commits that other engines (or plain Python) make to a table reach Dagster as materializations of its asset.

A table is written by Dagster runs, but also by Spark jobs, Trino, pyiceberg scripts or `Lakehouse.write`
outside Dagster. Dagster would not know the table changed: downstream assets with automation conditions
would not run, and incremental inputs would wait for the next Dagster write. This sensor reads each table's
Iceberg history (metadata only) and reports every new commit that no Dagster run made as a runless
`AssetMaterialization` of the table's asset, with the snapshot, the operation and the engine. Automation
conditions and sensors that watch the asset then start the downstream runs as for any materialization.

The cursor holds the newest snapshot seen per table; the first evaluation only records where the tables are.
Commits that change no rows (compaction) are not reported.
"""

from __future__ import annotations

import json
import os

from dagster import AssetMaterialization, DefaultSensorStatus, SensorDefinition, SensorEvaluationContext, SensorResult, SkipReason, sensor

from ..core.formats import history
from ..core.properties import Operation, SummaryKeys
from .maintenance import asset_key_for_table
from .resources import LakehouseResource

SENSOR_NAME = "lakehouse_foreign_commits_sensor"
INTERVAL_S = int(os.environ.get("LAKEHOUSE_FOREIGN_COMMITS_SENSOR_INTERVAL_S", "60"))


def foreign_commits(table, seen_snapshot_id: int) -> list:
    """Snapshots committed after `seen_snapshot_id` (oldest first) that no Dagster run wrote and that changed rows."""
    from pyiceberg.table.snapshots import Operation as IcebergOperation  # (pyiceberg's table module: not at code location load)

    out = []
    for snap in history.ancestors(table):
        if snap.snapshot_id == seen_snapshot_id:
            break
        summary = history.summary(snap)
        try:
            writer = json.loads(summary.get(SummaryKeys.WRITER, "{}"))
        except ValueError:
            writer = {}
        by_dagster = isinstance(writer, dict) and bool(writer.get("dagster_run_id"))
        no_rows_changed = summary.get(SummaryKeys.OPERATION) == Operation.COMPACTION or (snap.summary and snap.summary.operation == IcebergOperation.REPLACE)
        if not by_dagster and not no_rows_changed:
            out.append(snap)
    return list(reversed(out))


def materialization(identifier: str, snap) -> AssetMaterialization:
    summary = history.summary(snap)
    engine = summary.get("engine-name") or ("lakehouse" if SummaryKeys.OPERATION in summary else "unknown")
    return AssetMaterialization(
        asset_key=asset_key_for_table(identifier),
        description=f"Commit by another engine ({engine}): Iceberg snapshot {snap.snapshot_id}",
        metadata={
            "lakehouse/iceberg_snapshot_id": snap.snapshot_id,
            "lakehouse/operation": summary.get(SummaryKeys.OPERATION) or (snap.summary.operation.value if snap.summary else "unknown"),
            "lakehouse/engine": engine,
            "dagster/row_count": int(summary.get("total-records", 0) or 0),
        },
    )


def build_foreign_commits_sensor(interval_s: int = INTERVAL_S, running: bool = True) -> SensorDefinition:
    @sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=interval_s,
        default_status=DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED,
        description="Reports commits that other engines made to a table as materializations of its asset, so downstream automation runs.",
    )
    def foreign_commits_sensor(context: SensorEvaluationContext, lakehouse: LakehouseResource):
        lh = lakehouse.get()
        cursor: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
        events = []
        for identifier in lh.table_names():
            table = lh.load(identifier)
            current = table.current_snapshot()
            if current is None:
                continue
            seen = cursor.get(identifier)
            if seen is not None and seen != current.snapshot_id:
                for snap in foreign_commits(table, seen):
                    context.log.info(f"Table {identifier}: snapshot {snap.snapshot_id} was committed outside Dagster")
                    events.append(materialization(identifier, snap))
            cursor[identifier] = current.snapshot_id
        if not events:
            return SensorResult(skip_reason=SkipReason("no table has commits from outside Dagster"), cursor=json.dumps(cursor, sort_keys=True))
        return SensorResult(asset_events=events, cursor=json.dumps(cursor, sort_keys=True))

    return foreign_commits_sensor


foreign_commits_sensor = build_foreign_commits_sensor()

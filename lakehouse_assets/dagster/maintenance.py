"""Maintenance in Dagster: one job (UI, CLI, GraphQL), a nightly schedule, a compaction sensor, a Delta-lag
sensor and a Delta-checkpoint sensor. Every run records what it did as AssetObservations on each table's asset.

Contract (other code and tests rely on it): job `lakehouse_maintenance_job`, one op `lakehouse_maintenance`
with config `tables` (empty = every table), `operations` (default ["full_maintenance"]), `dry_run`, and
optional settings overriding the table's own (`lakehouse.maintenance.*` properties) and the defaults.
"""

# No `from __future__ import annotations`: Dagster resolves Config field types at import time.
import os
from enum import Enum
from typing import Any, Optional

from dagster import (
    AssetKey,
    AssetObservation,
    Config,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    MetadataValue,
    OpExecutionContext,
    RunConfig,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    schedule,
    sensor,
)
from dagster_pyspark import PySparkResource
from pydantic import Field

from ..core import maintenance as core
from .resources import LakehouseResource

JOB_NAME = "lakehouse_maintenance_job"
OP_NAME = "lakehouse_maintenance"
# Sensor thresholds: compaction is requested when this many small files could be merged, or when at
# least COMPACTION_RATIO_MIN_FILES of them are this share of the table's files (a young table written
# a few times is left alone). Environment variables override them per deployment.
COMPACTION_MIN_SMALL_FILES = int(os.environ.get("LAKEHOUSE_COMPACTION_MIN_SMALL_FILES", "50"))
COMPACTION_MIN_SMALL_RATIO = float(os.environ.get("LAKEHOUSE_COMPACTION_MIN_SMALL_RATIO", "0.5"))
COMPACTION_RATIO_MIN_FILES = int(os.environ.get("LAKEHOUSE_COMPACTION_RATIO_MIN_FILES", "10"))
# ... or when this many data files carry position deletes past the table's folding thresholds (merge-on-read:
# compaction_deleted_fraction, compaction_delete_files).
COMPACTION_MIN_FOLDABLE_FILES = int(os.environ.get("LAKEHOUSE_COMPACTION_MIN_FOLDABLE_FILES", "1"))
# When the automation runs, per deployment (read when the code location loads): the nightly schedule's
# cron (UTC) and how often the daemon evaluates each sensor.
MAINTENANCE_CRON = os.environ.get("LAKEHOUSE_MAINTENANCE_CRON", "0 3 * * *")
COMPACTION_SENSOR_INTERVAL_S = int(os.environ.get("LAKEHOUSE_COMPACTION_SENSOR_INTERVAL_S", "300"))
DELTA_LAG_SENSOR_INTERVAL_S = int(os.environ.get("LAKEHOUSE_DELTA_LAG_SENSOR_INTERVAL_S", "60"))
DELTA_CHECKPOINT_SENSOR_INTERVAL_S = int(os.environ.get("LAKEHOUSE_DELTA_CHECKPOINT_SENSOR_INTERVAL_S", "300"))


# The operations the core registers (core/maintenance/__init__.py), as a Dagster config enum.
MaintenanceOperation = Enum("MaintenanceOperation", {name: name for name in core.OPERATIONS})


class MaintenanceConfig(Config):
    tables: list[str] = Field(default=[], description="Table identifiers (namespace.table); empty = every table.")
    operations: list[MaintenanceOperation] = Field(
        # Dagster wants enum defaults as their names; values arrive as MaintenanceOperation members or names.
        default=["full_maintenance"], description="Operations, run in the order given."
    )
    dry_run: bool = Field(default=False, description="Report what would be done; change nothing.")
    snapshot_retention_days: Optional[float] = Field(default=None, description="Default 7 (or the table's property).")
    min_snapshots_to_keep: Optional[int] = Field(default=None, description="Default 5.")
    compaction_target_mb: Optional[float] = Field(default=None, description="Default 128.")
    orphan_grace_hours: Optional[float] = Field(default=None, description="Default 24.")
    delta_log_retention_days: Optional[float] = Field(default=None, description="Default: the snapshot retention.")

    def settings(self) -> dict[str, Any]:
        names = ("snapshot_retention_days", "min_snapshots_to_keep", "compaction_target_mb", "orphan_grace_hours", "delta_log_retention_days")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


def asset_key_for_table(identifier: str) -> AssetKey:
    """Inverse of io_manager.table_identifier: namespace parts are the key prefix."""
    return AssetKey(identifier.split("."))


def observation_metadata(result: dict[str, Any]) -> dict[str, Any]:
    """Numbers the UI plots over time: what the run did and the table's health after it."""
    health = result.get("health", {})
    steps = result.get("steps") or [result]
    total = lambda key: sum(int(s.get(key) or 0) for s in steps)  # noqa: E731
    md: dict[str, Any] = {
        "operation": MetadataValue.text(result["operation"]),
        "dry_run": MetadataValue.bool(bool(result.get("dry_run"))),
        "files_rewritten": MetadataValue.int(total("files_rewritten")),
        "files_added": MetadataValue.int(total("files_added")),
        "files_removed": MetadataValue.int(total("files_removed")),
        "bytes_reclaimed": MetadataValue.int(total("bytes_reclaimed") + total("iceberg_metadata_bytes_reclaimed")),
        "snapshots_expired": MetadataValue.int(total("snapshots_expired")),
        "small_file_count": MetadataValue.int(int(health.get("small_files", 0))),
        "compactable_file_count": MetadataValue.int(int(health.get("compactable_files", 0))),
        "data_file_count": MetadataValue.int(int(health.get("data_files", 0))),
        # Merge-on-read read cost, until compaction folds the deletes in.
        "files_with_deletes": MetadataValue.int(int(health.get("files_with_deletes", 0))),
        "deleted_rows": MetadataValue.int(int(health.get("deleted_rows", 0))),
        "deleted_rows_per_file": MetadataValue.float(float(health.get("deleted_rows_per_file", 0.0))),
        "snapshot_count": MetadataValue.int(int(health.get("snapshot_count", 0))),
        "delta_log_length": MetadataValue.int(int(health.get("delta_log_files") or 0)),
        "delta_commits_since_checkpoint": MetadataValue.int(int(health.get("delta_commits_since_checkpoint") or 0)),
        "seconds": MetadataValue.float(float(result.get("seconds", 0.0))),
    }
    if health.get("delta_version") is not None:
        md["delta_version"] = MetadataValue.int(int(health["delta_version"]))
    if health.get("iceberg_snapshot_id") is not None:
        md["iceberg_snapshot_id"] = MetadataValue.int(int(health["iceberg_snapshot_id"]))
    if any(s.get("aborted") for s in steps):
        md["compaction_aborted"] = MetadataValue.bool(True)
    return md


@op(name=OP_NAME, description="Run maintenance operations on lakehouse tables; report each as an AssetObservation.")
def lakehouse_maintenance(context: OpExecutionContext, config: MaintenanceConfig, lakehouse: LakehouseResource, pyspark: PySparkResource) -> None:
    lh = lakehouse.get()
    tables = config.tables or lh.table_names()
    failures = []
    for identifier in tables:
        for operation in config.operations:
            name = MaintenanceOperation(operation).value
            spark = pyspark.spark_session if core.REGISTRY[name].uses_spark else None
            try:
                result = lh.maintain(identifier, name, dry_run=config.dry_run, spark=spark, **config.settings())
            except Exception as e:  # noqa: BLE001 - one table's failure must not stop the others
                context.log.error(f"Table {identifier}: {name} failed: {type(e).__name__}: {e}")
                failures.append(f"{identifier}: {name}: {e}")
                continue
            context.log.info(
                f"Table {identifier}: {name}{' (dry run)' if config.dry_run else ''}: "
                f"{sum(int(s.get('files_rewritten') or 0) for s in result.get('steps') or [result])} files rewritten, "
                f"{result.get('files_removed', 0)} removed, {result.get('snapshots_expired', 0)} snapshots expired"
            )
            context.log_event(
                AssetObservation(asset_key=asset_key_for_table(identifier), description=f"lakehouse maintenance: {name}", metadata=observation_metadata(result))
            )
    if failures:
        raise RuntimeError(f"{len(failures)} maintenance operation(s) failed: " + "; ".join(failures))


@job(name=JOB_NAME, executor_def=in_process_executor, description="Lakehouse table maintenance (both formats).")
def lakehouse_maintenance_job():
    lakehouse_maintenance()


def maintenance_run_config(tables: list[str], operations: list[str], dry_run: bool = False, **settings) -> RunConfig:
    cfg = MaintenanceConfig(tables=tables, operations=[MaintenanceOperation(o).value for o in operations], dry_run=dry_run, **settings)
    return RunConfig(ops={OP_NAME: cfg})


def build_maintenance_schedule(
    cron: str = MAINTENANCE_CRON, settings: Optional[dict[str, Any]] = None, running: bool = True, name: str = "lakehouse_nightly_maintenance"
) -> ScheduleDefinition:
    """full_maintenance on every table at `cron` (UTC), with `settings` (MaintenanceConfig's retention
    fields) overriding the tables' own where given."""
    settings = dict(settings or {})

    @schedule(
        name=name,
        job=lakehouse_maintenance_job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED,
        description=f"full_maintenance on every table, at cron {cron!r} UTC" + (f", with {settings}" if settings else "") + ".",
    )
    def _schedule(context: ScheduleEvaluationContext) -> RunRequest:
        return RunRequest(
            run_key=f"nightly:{context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else 'now'}",
            run_config=maintenance_run_config([], ["full_maintenance"], **settings),
            tags={"lakehouse/maintenance": "nightly"},
        )

    return _schedule


def _table_run_request(identifier: str, operation: str, snapshot_id) -> RunRequest:
    """One request per table state: a sensor never asks twice for the same work on an unchanged table."""
    return RunRequest(
        run_key=f"{operation}:{identifier}:{snapshot_id}",
        run_config=maintenance_run_config([identifier], [operation]),
        tags={"lakehouse/maintenance": operation, "lakehouse/table": identifier},
    )


def _sensor_status(running: bool) -> DefaultSensorStatus:
    return DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED


def _table_sensor(name: str, interval_s: int, running: bool, description: str, nothing: str, request_for) -> SensorDefinition:
    """A sensor that asks each table, in turn, what maintenance it needs: `request_for(context, lh, identifier)`
    returns (operation, the table state the request is for) or None; `nothing` is the skip reason when none does."""

    @sensor(name=name, job=lakehouse_maintenance_job, minimum_interval_seconds=interval_s, default_status=_sensor_status(running), description=description)
    def table_sensor(context: SensorEvaluationContext, lakehouse: LakehouseResource):
        lh = lakehouse.get()
        requests = []
        for identifier in lh.table_names():
            if (wanted := request_for(context, lh, identifier)) is not None:
                requests.append(_table_run_request(identifier, *wanted))
        return requests or SkipReason(nothing)

    return table_sensor


def build_compaction_sensor(interval_s: int = COMPACTION_SENSOR_INTERVAL_S, running: bool = True) -> SensorDefinition:
    def request_for(context: SensorEvaluationContext, lh, identifier: str):
        health = core.table_health(lh.context, identifier)
        count, ratio = health["compactable_files"], health["compactable_ratio"]
        if count >= COMPACTION_MIN_SMALL_FILES or (count >= COMPACTION_RATIO_MIN_FILES and ratio >= COMPACTION_MIN_SMALL_RATIO):
            context.log.info(f"Table {identifier}: {count} small files can be merged ({ratio:.0%} of its files): requesting compaction")
            return "compaction", health["iceberg_snapshot_id"]
        if health.get("foldable_files", 0) >= COMPACTION_MIN_FOLDABLE_FILES:
            context.log.info(
                f"Table {identifier}: {health['deleted_rows']} deleted rows in {health['files_with_deletes']} files, "
                f"{health['foldable_files']} past the table's folding thresholds: requesting compaction"
            )
            return "compaction", health["iceberg_snapshot_id"]
        return None

    return _table_sensor(
        "lakehouse_compaction_sensor", interval_s, running,
        f"Requests compaction of a table with >= {COMPACTION_MIN_SMALL_FILES} mergeable small files, a mergeable ratio >= "
        f"{COMPACTION_MIN_SMALL_RATIO}, or >= {COMPACTION_MIN_FOLDABLE_FILES} files whose deleted rows pass its folding thresholds.",
        "no table has enough small files or deleted rows to compact", request_for,
    )


def build_delta_lag_sensor(interval_s: int = DELTA_LAG_SENSOR_INTERVAL_S, running: bool = True) -> SensorDefinition:
    def request_for(context: SensorEvaluationContext, lh, identifier: str):
        lag = lh.delta_lag(identifier)  # metadata only, and the log this process follows: cheap enough every minute
        if lag == 0:
            return None
        context.log.info(f"Table {identifier}: Delta lags Iceberg ({'unknown' if lag is None else lag} snapshot(s)): requesting repair")
        snapshot = lh.load(identifier).current_snapshot()
        return "repair", snapshot.snapshot_id if snapshot else None

    return _table_sensor(
        "lakehouse_delta_lag_sensor", interval_s, running,
        "Requests a repair when a table's Delta log lags its Iceberg snapshots (the Delta commit failed after Iceberg's).",
        "every Delta log is up to date", request_for,
    )


def build_delta_checkpoint_sensor(interval_s: int = DELTA_CHECKPOINT_SENSOR_INTERVAL_S, running: bool = True) -> SensorDefinition:
    def request_for(context: SensorEvaluationContext, lh, identifier: str):
        stats = core.delta_log_stats(lh.context, lh.load(identifier))  # lists the log; no live file is read
        if not stats.get("delta_checkpoint_due"):
            return None
        context.log.info(
            f"Table {identifier}: {stats['delta_commits_since_checkpoint']} Delta commits since the last checkpoint "
            f"(delta.checkpointInterval {stats['delta_checkpoint_interval']}): requesting a checkpoint"
        )
        return "delta_checkpoint", stats["delta_version"]

    return _table_sensor(
        "lakehouse_delta_checkpoint_sensor", interval_s, running,
        "Requests a Delta checkpoint of a table once its delta.checkpointInterval commits have landed since the last one. "
        "No write writes a checkpoint (it walks every live file): Delta readers replay the commits after it.",
        "no Delta log has reached its checkpoint interval since its last checkpoint", request_for,
    )


nightly_maintenance_schedule = build_maintenance_schedule()
compaction_sensor = build_compaction_sensor()
delta_lag_sensor = build_delta_lag_sensor()
delta_checkpoint_sensor = build_delta_checkpoint_sensor()

maintenance_jobs = [lakehouse_maintenance_job]
maintenance_schedules = [nightly_maintenance_schedule]
maintenance_sensors = [compaction_sensor, delta_lag_sensor, delta_checkpoint_sensor]

"""Rolling a table back in Dagster: one job, launchable from the UI with the same choices as the CLI.

Contract: job `lakehouse_rollback_job`, one op `lakehouse_rollback` with config `table` and exactly one of
`snapshot_id`, `delta_version`, `as_of` (ISO 8601) and `run_id` (a Dagster run: the table as it left it).
The rollback is recorded as an AssetObservation on the table's asset; the core (core/maintenance/rollback.py) does the
work and refuses what it cannot give back exactly.
"""

# No `from __future__ import annotations`: Dagster resolves Config field types at import time.
import datetime as dt
from typing import Optional

from dagster import AssetObservation, Config, MetadataValue, OpExecutionContext, RunConfig, in_process_executor, job, op
from pydantic import Field

from .maintenance import asset_key_for_table
from .resources import LakehouseResource

JOB_NAME = "lakehouse_rollback_job"
OP_NAME = "lakehouse_rollback"


class RollbackConfig(Config):
    table: str = Field(description="Table identifier (namespace.table).")
    snapshot_id: Optional[int] = Field(default=None, description="Roll back to this Iceberg snapshot.")
    delta_version: Optional[int] = Field(default=None, description="Roll back to this Delta version.")
    as_of: Optional[str] = Field(default=None, description="Roll back to the table as of this time (ISO 8601; UTC unless it names a zone).")
    run_id: Optional[str] = Field(default=None, description="Roll back to the table as this Dagster run left it.")


@op(name=OP_NAME, description="Give a lakehouse table back the rows of an earlier point, in both formats, as one new commit in each.")
def lakehouse_rollback(context: OpExecutionContext, config: RollbackConfig, lakehouse: LakehouseResource) -> None:
    as_of = dt.datetime.fromisoformat(config.as_of) if config.as_of else None
    if as_of is not None and as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=dt.timezone.utc)
    result = lakehouse.get().rollback(config.table, snapshot_id=config.snapshot_id, delta_version=config.delta_version, as_of=as_of, run_id=config.run_id)
    target = {k: v for k, v in (("snapshot_id", config.snapshot_id), ("delta_version", config.delta_version), ("as_of", config.as_of), ("run_id", config.run_id)) if v is not None}
    context.log.info(f"Table {config.table}: rolled back to {target} as snapshot {result.iceberg_snapshot_id} / Delta version {result.delta_version}")
    context.log_event(
        AssetObservation(
            asset_key=asset_key_for_table(config.table),
            description=f"lakehouse rollback to {target}",
            metadata={
                "iceberg_snapshot_id": MetadataValue.int(result.iceberg_snapshot_id),
                "delta_version": MetadataValue.int(result.delta_version) if result.delta_version is not None else MetadataValue.null(),
                "files_added": MetadataValue.int(result.files_added),
                "files_removed": MetadataValue.int(result.files_removed),
                "delta_lagging": MetadataValue.bool(result.delta_lagging),
            },
        )
    )


@job(name=JOB_NAME, executor_def=in_process_executor, description="Roll a lakehouse table back to an earlier point (both formats, history kept).")
def lakehouse_rollback_job():
    lakehouse_rollback()


def rollback_run_config(table: str, **target) -> RunConfig:
    return RunConfig(ops={OP_NAME: RollbackConfig(table=table, **target)})

"""Deleting and updating rows by condition in Dagster: two jobs, launchable from the UI with the condition as config.

Contract: job `lakehouse_delete_job` (op `lakehouse_delete`, config `table`, `where`, optional `write_id`) and job
`lakehouse_update_job` (op `lakehouse_update`, config `table`, `set` {column: Spark SQL expression}, `where`, optional
`write_id`). The change is recorded as an AssetMaterialization of the table's asset (its rows changed, so what reads it
is stale); the core (core/write/by_condition.py) does the work and refuses bad input with nothing changed.
"""

# No `from __future__ import annotations`: Dagster resolves Config field types at import time.
from typing import Optional

from dagster import AssetMaterialization, Config, MetadataValue, OpExecutionContext, RunConfig, in_process_executor, job, op
from dagster_pyspark import PySparkResource
from pydantic import Field

from ..core.model import WriteResult
from .maintenance import asset_key_for_table
from .resources import LakehouseResource

DELETE_JOB, DELETE_OP = "lakehouse_delete_job", "lakehouse_delete"
UPDATE_JOB, UPDATE_OP = "lakehouse_update_job", "lakehouse_update"


class DeleteConfig(Config):
    table: str = Field(description="Table identifier (namespace.table).")
    where: str = Field(description="The rows to delete: a Spark SQL condition over the table's columns, e.g. \"id = 42\".")
    write_id: Optional[str] = Field(default=None, description="An idempotency key: a second run with it commits nothing.")


class UpdateConfig(Config):
    table: str = Field(description="Table identifier (namespace.table).")
    set: dict[str, str] = Field(description="Column -> its new value, a Spark SQL expression over the row, e.g. {\"status\": \"'closed'\"}.")
    where: str = Field(description="The rows to update: a Spark SQL condition over the table's columns.")
    write_id: Optional[str] = Field(default=None, description="An idempotency key: a second run with it commits nothing.")


@op(name=DELETE_OP, description="Delete the rows of a lakehouse table that a condition matches, in both formats.")
def lakehouse_delete(context: OpExecutionContext, config: DeleteConfig, lakehouse: LakehouseResource, pyspark: PySparkResource) -> None:
    result = lakehouse.get().delete(config.table, config.where, write_id=config.write_id, writer={"dagster_run_id": context.run_id}, spark=pyspark.spark_session)
    _record(context, config.table, f"delete where {config.where}", result, result.rows_removed)


@op(name=UPDATE_OP, description="Set columns of the rows of a lakehouse table that a condition matches, in both formats.")
def lakehouse_update(context: OpExecutionContext, config: UpdateConfig, lakehouse: LakehouseResource, pyspark: PySparkResource) -> None:
    result = lakehouse.get().update(config.table, dict(config.set), config.where, write_id=config.write_id, writer={"dagster_run_id": context.run_id}, spark=pyspark.spark_session)
    _record(context, config.table, f"update {', '.join(config.set)} where {config.where}", result, result.rows_written)


def _record(context: OpExecutionContext, table: str, what: str, result: WriteResult, rows: int) -> None:
    """Log the outcome; a change that committed is a materialization of the table's asset."""
    if result.duplicate_of_earlier_write or not rows:
        context.log.info(f"Table {table}: {what}: {'already done (same write id)' if result.duplicate_of_earlier_write else 'no row matched'}; nothing committed")
        return
    context.log.info(f"Table {table}: {what}: {rows} row(s) as snapshot {result.iceberg_snapshot_id} / Delta version {result.delta_version}")
    context.log_event(
        AssetMaterialization(
            asset_key=asset_key_for_table(table),
            description=f"lakehouse {what}",
            metadata={
                "rows": MetadataValue.int(rows),
                "iceberg_snapshot_id": MetadataValue.int(result.iceberg_snapshot_id),
                "delta_version": MetadataValue.int(result.delta_version) if result.delta_version is not None else MetadataValue.null(),
                "files_added": MetadataValue.int(result.files_added),
                "files_removed": MetadataValue.int(result.files_removed),
                "delta_lagging": MetadataValue.bool(result.delta_lagging),
            },
        )
    )


@job(name=DELETE_JOB, executor_def=in_process_executor, description="Delete rows of a lakehouse table by condition (both formats).")
def lakehouse_delete_job():
    lakehouse_delete()


@job(name=UPDATE_JOB, executor_def=in_process_executor, description="Update rows of a lakehouse table by condition (both formats).")
def lakehouse_update_job():
    lakehouse_update()


def delete_run_config(table: str, where: str, write_id: Optional[str] = None) -> RunConfig:
    return RunConfig(ops={DELETE_OP: DeleteConfig(table=table, where=where, write_id=write_id)})


def update_run_config(table: str, set: dict, where: str, write_id: Optional[str] = None) -> RunConfig:
    return RunConfig(ops={UPDATE_OP: UpdateConfig(table=table, set=set, where=where, write_id=write_id)})

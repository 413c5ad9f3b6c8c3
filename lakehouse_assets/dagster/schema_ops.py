"""Renames and drops in Dagster: one job (launch it from the UI, the CLI or GraphQL with run config).

Contract: job `lakehouse_alter_job`, one op `lakehouse_alter` with config `table`, `rename`
({"old": "new"}), `drop` (["column"]) and `upgrade` (turn Delta column mapping on first, which a
Delta-mirrored table needs once for renames and drops). The change is recorded as an AssetObservation on the
table's asset. The core (core/write/alter.py) does the work and refuses what it cannot do correctly.
"""

# No `from __future__ import annotations`: Dagster resolves Config field types at import time.
from dagster import AssetObservation, Config, MetadataValue, OpExecutionContext, RunConfig, in_process_executor, job, op
from pydantic import Field

from .maintenance import asset_key_for_table
from .resources import LakehouseResource

JOB_NAME = "lakehouse_alter_job"
OP_NAME = "lakehouse_alter"


class AlterConfig(Config):
    table: str = Field(description="Table identifier (namespace.table).")
    rename: dict[str, str] = Field(default={}, description='Columns to rename, {"old": "new"}.')
    drop: list[str] = Field(default=[], description="Columns to drop.")
    upgrade: bool = Field(default=False, description="Turn Delta column mapping on first (metadata only; needed once by a Delta-mirrored table).")


@op(name=OP_NAME, description="Rename and drop columns of a lakehouse table in metadata only (no data file rewritten).")
def lakehouse_alter(context: OpExecutionContext, config: AlterConfig, lakehouse: LakehouseResource) -> None:
    lh = lakehouse.get()
    if config.upgrade:
        upgraded = lh.upgrade(config.table)
        context.log.info(f"Table {config.table}: " + ("Delta column mapping turned on" if upgraded["upgraded"] else f"no upgrade needed: {upgraded['reason']}"))
    result = lh.alter(config.table, rename=config.rename, drop=config.drop)
    context.log.info(f"Table {config.table}: renamed {result['renamed']}, dropped {result['dropped']}; schema {result['schema_id_before']} -> {result['schema_id']}")
    context.log_event(
        AssetObservation(
            asset_key=asset_key_for_table(config.table),
            description="lakehouse alter: " + ", ".join([f"rename {o} -> {n}" for o, n in result["renamed"].items()] + [f"drop {c}" for c in result["dropped"]]),
            metadata={
                "schema_id": MetadataValue.int(result["schema_id"]),
                "columns": MetadataValue.json(result["columns"]),
                "data_files_rewritten": MetadataValue.int(0),
                **({"delta_version": MetadataValue.int(result["delta_version"])} if result.get("delta_version") is not None else {}),
            },
        )
    )


@job(name=JOB_NAME, executor_def=in_process_executor, description="Rename and drop columns of a lakehouse table (metadata only).")
def lakehouse_alter_job():
    lakehouse_alter()


def alter_run_config(table: str, rename: dict[str, str] | None = None, drop: list[str] | None = None, upgrade: bool = False) -> RunConfig:
    return RunConfig(ops={OP_NAME: AlterConfig(table=table, rename=dict(rename or {}), drop=list(drop or []), upgrade=upgrade)})

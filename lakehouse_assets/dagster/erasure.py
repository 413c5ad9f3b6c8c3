"""Right-to-erasure requests in Dagster: erase a list of subjects from every asset that declares its subject column.

An asset declares the column that identifies a person with metadata `lakehouse/subject_column` (e.g. "customer_id").
Job `lakehouse_erase_job` (op `lakehouse_erase`, config `subject_ids`, optional `assets`) erases the rows whose subject
column holds one of the ids from each such asset's table, its contract's quarantine table too
(core/maintenance/erase.py), records the change as an AssetMaterialization, and records the erasure proof as the
asset's `subjects_erased` check. That check can also run on its own with the same config: it proves, without changing
anything, that no file under the table's root holds the subjects.

Neither the ids nor the condition are logged or written to the tables: the materializations and checks carry counts
and the erasure's id. Dagster keeps the run's config (the ids) in its own run storage: delete the run once
the request is answered (`dagster run delete <run id>`) when that storage must not hold them either.
"""

# No `from __future__ import annotations`: Dagster resolves Config field types at import time.
from typing import Any, Iterable, Mapping, Optional

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    Config,
    MetadataValue,
    OpExecutionContext,
    RunConfig,
    asset_check,
    in_process_executor,
    job,
    op,
)
from dagster_pyspark import PySparkResource
from pydantic import Field

from ..core.errors import InputError
from .contracts import quarantine_key
from .io_manager import table_identifier
from .resources import LakehouseResource

SUBJECT_COLUMN_KEY = "lakehouse/subject_column"
ERASE_JOB, ERASE_OP = "lakehouse_erase_job", "lakehouse_erase"
CHECK_NAME = "subjects_erased"
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


class ErasureConfig(Config):
    subject_ids: list[str] = Field(default_factory=list, description="The subjects: values of each asset's subject column, as text. The check, run with the asset's materialization and no ids, has nothing to prove and passes.")
    assets: Optional[list[str]] = Field(default=None, description="Only these assets (\"ns/table\"); default: every asset that declares its subject column.")


def subject_assets(assets: Iterable[AssetsDefinition]) -> dict[AssetKey, str]:
    """{asset key: its subject column} of the assets that declare one."""
    out = {}
    for assets_def in assets:
        for key in assets_def.keys:
            column = (assets_def.metadata_by_key.get(key) or {}).get(SUBJECT_COLUMN_KEY)
            column = getattr(column, "value", column)
            if column is not None:
                if not isinstance(column, str) or not column:
                    raise InputError(f"Asset {key.to_user_string()}: metadata {SUBJECT_COLUMN_KEY!r} must name a column, e.g. \"customer_id\"; got {column!r}.")
                out[key] = column
    return out


def subject_condition(identifier: str, column: str, data_type: str, ids: list[str]) -> str:
    """`column IN (...)` with each id as a literal of the column's type (numbers checked, strings quoted)."""
    if not ids:
        raise InputError(f"Table {identifier}: no subject ids to erase; give subject_ids, e.g. [\"42\"]. Nothing was changed.")
    literals = []
    for value in ids:
        text = str(value)
        if data_type in _INTEGRAL or data_type.startswith("decimal") or data_type in ("float", "double"):
            try:
                int(text) if data_type in _INTEGRAL else float(text)
            except ValueError:
                raise InputError(f"Table {identifier}: subject column {column!r} is {data_type}, and one of the subject ids is not a number of that type. Nothing was changed.") from None
            literals.append(text.strip())
        elif data_type == "string":
            literals.append("'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'")
        else:
            raise InputError(f"Table {identifier}: subject column {column!r} is {data_type}; a subject column must be a string or a number. Nothing was changed.")
    return f"`{column}` IN ({', '.join(literals)})"


def _condition(lakehouse, key: AssetKey, column: str, ids: list[str]) -> tuple[str, str]:
    from ..core.schema.type_mapping import iceberg_to_spark_schema

    identifier = table_identifier(key)
    schema = iceberg_to_spark_schema(lakehouse.load(identifier).schema())
    if column not in schema.fieldNames():
        raise InputError(f"Asset {key.to_user_string()}: its subject column {column!r} is not a column of table {identifier} (columns: {', '.join(schema.fieldNames())}).")
    return identifier, subject_condition(identifier, column, schema[column].dataType.simpleString(), ids)


def _proof_metadata(proofs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The proofs of a table and its quarantine table: files and places, never a value."""
    return {
        "remnants_found": MetadataValue.int(sum(int(p["remnants_found"]) for p in proofs)),
        "remnants": MetadataValue.json({p["table"]: p["remnants"] for p in proofs}),
        "files_checked": MetadataValue.json({p["table"]: p["files_checked"] for p in proofs}),
    }


def build_erasure(assets: Iterable[AssetsDefinition]) -> tuple[list, list]:
    """(the erase job, the `subjects_erased` checks) for the assets that declare a subject column; none when no asset does."""
    subjects = subject_assets(assets)
    if not subjects:
        return [], []

    @op(name=ERASE_OP, description="Erase subjects from every asset that declares its subject column, both formats, with the history that held them.")
    def lakehouse_erase(context: OpExecutionContext, config: ErasureConfig, lakehouse: LakehouseResource, pyspark: PySparkResource) -> None:
        wanted = {AssetKey.from_user_string(a) for a in config.assets} if config.assets else set(subjects)
        if unknown := sorted(k.to_user_string() for k in wanted - set(subjects)):
            raise InputError(f"Assets {unknown} declare no {SUBJECT_COLUMN_KEY!r}; assets that do: {sorted(k.to_user_string() for k in subjects)}.")
        lh = lakehouse.get()
        for key in sorted(wanted, key=lambda k: k.to_user_string()):
            identifier, where = _condition(lh, key, subjects[key], list(config.subject_ids))
            report = lh.erase(identifier, where, dependents=True, spark=pyspark.spark_session)
            context.log.info(f"Table {identifier}: erasure {report['erasure_id']}: {report['rows_erased']} row(s), {report['files_deleted']} file(s) deleted, proof {'passed' if report['proof']['erased'] else 'FAILED'}")
            context.log_event(AssetMaterialization(asset_key=key, description=f"lakehouse erase {report['erasure_id']}", metadata={
                "rows_erased": MetadataValue.int(report["rows_erased"]),
                "files_rewritten": MetadataValue.int(report["files_rewritten"]),
                "files_deleted": MetadataValue.int(report["files_deleted"]),
                "snapshots_removed": MetadataValue.int(report["snapshots_removed"]),
                "oldest_snapshot_id": MetadataValue.int(report["oldest_snapshot_id"]) if report["oldest_snapshot_id"] else MetadataValue.null(),
                "audit_record": MetadataValue.text(report["audit_record"]),
            }))
            proofs = [report["proof"], *([report["quarantine"]["proof"]] if report.get("quarantine") else [])]
            context.log_event(AssetCheckEvaluation(asset_key=key, check_name=CHECK_NAME, passed=all(p["erased"] for p in proofs), metadata=_proof_metadata(proofs)))
            if failed := [p for p in proofs if not p["erased"]]:
                raise InputError(f"Table {identifier}: the erasure proof found remnant(s): {[(p['table'], p['remnants']) for p in failed]}.")

    @job(name=ERASE_JOB, executor_def=in_process_executor, description="Erase subjects (right to erasure) from every asset that declares its subject column.")
    def lakehouse_erase_job():
        lakehouse_erase()

    return [lakehouse_erase_job], [_check(key, column) for key, column in subjects.items()]


def _check(key: AssetKey, column: str):
    @asset_check(asset=key, name=CHECK_NAME, description=f"No file under the table's root, in either format, holds the given subjects' rows ({column}).")
    def _erased(context: AssetCheckExecutionContext, config: ErasureConfig, lakehouse: LakehouseResource, pyspark: PySparkResource) -> AssetCheckResult:
        if not config.subject_ids:
            return AssetCheckResult(passed=True, metadata={"subjects": MetadataValue.int(0)}, description="No subject ids given: nothing to prove.")
        lh = lakehouse.get()
        identifier, where = _condition(lh, key, column, list(config.subject_ids))
        quarantine = table_identifier(quarantine_key(key))
        tables = [identifier, *([quarantine] if quarantine in lh.table_names() else [])]
        proofs = [lh.prove_erased(t, where, spark=pyspark.spark_session) for t in tables]
        return AssetCheckResult(passed=all(p["erased"] for p in proofs), metadata={"subjects": MetadataValue.int(len(config.subject_ids)), **_proof_metadata(proofs)})

    return _erased


def erase_run_config(subject_ids: list[str], assets: Optional[list[str]] = None) -> RunConfig:
    return RunConfig(ops={ERASE_OP: ErasureConfig(subject_ids=list(subject_ids), assets=assets)})

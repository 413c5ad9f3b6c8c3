"""apply_deletes: make a table with other engines' Iceberg delete files whole again, in both formats.

Rewrites, in Spark, exactly the data files that delete files remove rows from, applying the Iceberg
spec's rules (`deletes.applies`): position deletes by (file path, row position), equality deletes by a
null-safe semi-join on the equality columns. Only file paths reach the driver. The result is ONE
snapshot through the commit pipeline (core/write/transaction.py) that removes those data files and every
delete file: a snapshot of data files only, which the Delta mirror then follows.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.manifest import DataFile

from ..errors import DeleteFilesError
from ..formats.deletes import table_files
from ..formats.delta import partition_constants
from ..io.storage import delete_files
from ..model import FileChanges
from ..properties import Operation, SummaryKeys
from ..read.delete_rows import PATH as _PATH
from ..read.delete_rows import POSITION as _POS
from ..read.delete_rows import dropped_rows
from ..read.reader import read_parquet_files
from ..schema.type_mapping import iceberg_to_spark_schema
from ..spark.session import active_session
from ..table.context import TableContext
from ..table.evolution import column_names_moved
from ..write import transaction
from ..write.target import WriteTarget


def apply_deletes(ctx: TableContext, identifier: str, spark=None) -> dict[str, Any]:
    """Rewrite the data files that delete files remove rows from and drop the delete files: one snapshot."""
    table = ctx.load(identifier)
    files = table_files(table)
    result: dict[str, Any] = {"table": identifier, "delete_files": len(files.deletes), "data_files_rewritten": 0, "rows_deleted": 0}
    if not files.deletes:
        result["applied"] = False
        return result
    spark = active_session(spark)
    schema = table.schema()
    spark_schema = iceberg_to_spark_schema(schema, field_ids=column_names_moved(table))  # by field id after renames
    by_uri = {e.data_file.file_path: e.data_file for e in files.data}
    drops = dropped_rows(spark, identifier, table, files, spark_schema, ctx.storage)
    changes = FileChanges(removed_delete_files=[e.data_file for e in files.deletes])
    try:
        affected = [r[0] for r in drops.select(_PATH).distinct().collect()] if drops is not None else []  # file paths only
        deleted_rows = drops.count() if drops is not None else 0
        removes: list[DataFile] = [by_uri[u] for u in affected]
        changes.removes += removes
        if affected:
            target = WriteTarget(identifier, table, schema, ctx.storage, cast_files=True)
            _write_kept_rows(spark, identifier, target, spark_schema, removes, drops, deleted_rows, changes)
    except BaseException:
        delete_files(ctx.storage, changes.created)
        raise
    finally:
        if drops is not None:
            drops.unpersist()
    summary = {SummaryKeys.OPERATION: Operation.APPLY_DELETES, SummaryKeys.APPLIED_DELETE_FILES: str(len(files.deletes))}
    wr = transaction.commit(ctx, identifier, table, changes, summary, mode=Operation.APPLY_DELETES)
    result.update(
        applied=True,
        data_files_rewritten=len(removes),
        data_files_added=len(changes.adds),
        rows_deleted=deleted_rows,
        iceberg_snapshot_id=wr.iceberg_snapshot_id,
        delta_version=wr.delta_version,
        delta_lagging=wr.delta_lagging,
    )
    return result


def _write_kept_rows(spark, identifier: str, target: WriteTarget, spark_schema, removes: list[DataFile], drops, deleted_rows: int, changes: FileChanges) -> None:
    """The affected files' rows minus the dropped ones, written as new files into `changes`; checked by count."""
    constants = partition_constants.of_files(target.table, removes, target.schema)
    kept = read_parquet_files(spark, [f.file_path for f in removes], spark_schema, target.storage, path_column=_PATH, position_column=_POS, constants=constants)
    adds = target.write(kept.join(drops, [_PATH, _POS], "left_anti").drop(_PATH, _POS), changes, counts_as_written=False)
    expected = sum(f.record_count for f in removes) - deleted_rows
    if sum(f.record_count for f in adds) != expected:
        raise DeleteFilesError(
            f"Table {identifier}: applying deletes wrote {sum(f.record_count for f in adds)} rows where {expected} were expected; "
            "nothing was committed."
        )

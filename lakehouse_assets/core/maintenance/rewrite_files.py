"""rewrite_files: put other engines' Iceberg data files of a column-mapped table under the columns' physical names.

Under Delta column mapping, Delta readers find a column in a file by its physical name, which stays the
same when the column is renamed (`formats/delta/column_mapping.py`). An Iceberg writer of another engine (Spark,
Trino, pyiceberg) names columns by their current names and tags them with field ids: right for Iceberg
readers, but Delta readers would read NULL for a renamed or later-added column. The mirror refuses such
files (`delta_refusals.misnamed_refusals`); this rewrites exactly those files, read by field id and written
by the project's writer (physical names and field ids), as ONE snapshot with the rows unchanged (a
compaction to Delta, `dataChange=false`), which the mirror then follows.

Only files that snapshots Delta has not mirrored yet added are candidates: the project's own files are always
written under the physical names, and mirrored ones were checked when they were mirrored. So the footers read
grow with the change, not with the table.
"""

from __future__ import annotations

from typing import Any

from ..errors import DeleteFilesError
from ..formats import file_columns, history
from ..formats.deletes import applies, table_files
from ..formats.delta import partition_constants
from ..io.storage import delete_files
from ..model import FileChanges
from ..properties import Operation, SummaryKeys
from ..read.reader import read_parquet_files
from ..spark.session import active_session
from ..table.context import TableContext
from ..write import transaction
from ..write.target import WriteTarget


def rewrite_misnamed_files(ctx: TableContext, identifier: str, spark=None) -> dict[str, Any]:
    """Rewrite the live data files that hold columns under other names than their physical ones: one snapshot."""
    table = ctx.load(identifier)
    schema = table.schema()
    result: dict[str, Any] = {"table": identifier, "data_files_rewritten": 0}
    renamed = file_columns.renamed_in_files(table, schema)
    files = table_files(table)
    live = {e.data_file.file_path: e.data_file for e in files.data}
    candidates = _unmirrored_foreign_files(ctx, table, live) if renamed else []
    misnamed = file_columns.misnamed_files(table, candidates, renamed)
    if not misnamed:
        return {**result, "rewritten": False}
    _refuse_deleted_rows(identifier, files, set(misnamed))
    spark = active_session(spark)
    target = WriteTarget(identifier, table, schema, ctx.storage, cast_files=True)
    changes = FileChanges()
    try:
        constants = partition_constants.of_files(table, [live[u] for u in misnamed], schema)  # partition columns a file lacks
        rows = read_parquet_files(spark, misnamed, target.spark_schema(), ctx.storage, cast_files=True, constants=constants)  # by field id
        changes.removes += [live[u] for u in misnamed]
        adds = target.write(rows, changes, counts_as_written=False)
        before = sum(live[u].record_count for u in misnamed)
        if sum(f.record_count for f in adds) != before:
            raise RuntimeError(f"Table {identifier}: rewriting {len(misnamed)} file(s) wrote {sum(f.record_count for f in adds)} rows where {before} were read; nothing was committed.")
    except BaseException:
        delete_files(ctx.storage, changes.created)
        raise
    wr = transaction.commit(ctx, identifier, table, changes, {SummaryKeys.OPERATION: Operation.COMPACTION}, mode=Operation.COMPACTION)
    return {
        **result,
        "rewritten": True,
        "data_files_rewritten": len(misnamed),
        "data_files_added": len(changes.adds),
        "iceberg_snapshot_id": wr.iceberg_snapshot_id,
        "delta_version": wr.delta_version,
        "delta_lagging": wr.delta_lagging,
    }


def _refuse_deleted_rows(identifier: str, files, misnamed: set[str]) -> None:
    """A file some delete file removes rows from would be rewritten with those rows: refused, naming the fix."""
    hit = sorted({e.data_file.file_path for e in files.data if e.data_file.file_path in misnamed for d in files.deletes if applies(d, e)})
    if hit:
        raise DeleteFilesError(
            f"Table {identifier}: {len(hit)} data file(s) to rewrite under the physical column names have rows deleted by "
            f"delete files (e.g. {hit[0]}); rewriting them as they are would bring those rows back. Nothing was written. "
            f"Run `lakehouse repair {identifier} --apply-deletes` first, then `--rewrite-files`."
        )


def _unmirrored_foreign_files(ctx: TableContext, table, live: dict) -> list[str]:
    """Live files added by snapshots of other engines that Delta has not mirrored (every live file if Delta's
    position in the history is unknown)."""
    mirror = ctx.mirror(table)
    delta = mirror.load()
    pending = mirror.pending_snapshots(table, table.current_snapshot(), mirror.mirrored_sequence_number(delta)) if delta is not None else None
    if pending is None:
        return sorted(live)
    from ..formats.snapshot_changes import snapshot_change

    out = []
    for snap in pending:
        if SummaryKeys.OPERATION in history.summary(snap):
            continue  # the project's own write: physical names
        out += [f.file_path for f in snapshot_change(table, snap).adds if f.file_path in live]
    return sorted(set(out))

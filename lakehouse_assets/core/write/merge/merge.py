"""Merge (upsert + CDC delete) by key: one plan, two strategies, so Iceberg and Delta keep the identical file set.

1. `merge_batch.prepare_batch` validates the batch before anything is written (null and duplicate keys,
   control columns) and measures its keys.
2. `merge_plan.plan_of` finds the candidate files from metadata (key ranges or an In-set, the window).
3. The table's strategy writes: copy-on-write (the default, write/merge/rewrite.py) rewrites the files holding a
   key; merge-on-read (write/merge/on_read.py, Iceberg's `write.merge.mode`) writes only the batch's upserts and
   the positions of the rows it replaces. Both match the candidates the same way (write/merge/matching.py) and
   may write the Delta change data of the rows they change themselves (write/merge/changes.py).
The commit pipeline commits the plan as ONE Iceberg snapshot, which the Delta mirror turns into ONE Delta commit.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from ...model import FileChanges, MergeOptions
from ...properties import SummaryKeys, TableProperties
from ...schema.type_mapping import iceberg_to_spark_schema
from ...schema.window import Slice
from ..target import WriteTarget
from . import on_read
from .batch import KeyStats
from .plan import MergeStats, plan_of
from .rewrite import copy_on_write


def plan(
    spark, target: "WriteTarget", batch, key_stats: KeyStats, opts: MergeOptions, changes: "FileChanges", window: Slice | None = None
) -> MergeStats:
    """Write the merge into `changes` by the table's strategy; returns the pruning stats (`merge_plan.plan_of`)."""
    merge = plan_of(target, batch, key_stats, opts, window)
    if on_read.chosen(target.table):
        merge.stats.strategy = TableProperties.MERGE_ON_READ
        on_read.merge_by_position(spark, merge, changes)
    else:
        copy_on_write(spark, merge, changes)
    return merge.stats


def summary_properties(stats: MergeStats, opts: MergeOptions) -> dict[str, str]:
    """Recorded in the snapshot summary (and the Delta commitInfo): evidence of what pruning left to rewrite, and
    what a merge-on-read merge deleted by position."""
    by_position = stats.strategy == TableProperties.MERGE_ON_READ
    out = {
        SummaryKeys.MERGE_KEYS: ",".join(opts.keys),
        SummaryKeys.MERGE_LIVE_FILES: str(stats.live_files),
        SummaryKeys.MERGE_CANDIDATE_FILES: str(stats.candidate_files),
        SummaryKeys.MERGE_REWRITTEN_FILES: str(0 if by_position else stats.matched_files),
        SummaryKeys.MERGE_STRATEGY: stats.strategy,
    }
    if by_position:
        out |= {SummaryKeys.MERGE_DELETED_FILES: str(stats.delete_files), SummaryKeys.MERGE_ROWS_DELETED: str(stats.rows_deleted)}
    return out


def concurrent_conflict(
    spark, table: Table, base_snapshot_id: int | None, batch, opts: MergeOptions, storage, cast_files: bool, touched: set[str]
) -> str | None:
    """Why the snapshots committed after `base_snapshot_id` invalidate a merge planned on it (None: they do not).

    They do when they removed a data file the merge rewrites or deletes rows from (`touched`, their URIs), added
    delete files for one (or delete files whose data file is unknown), or added data files holding a key of the batch
    (those rows would then exist twice). Files they removed that the merge does not touch hold none of its keys (the
    merge read every file that may). Only the new files are read, keys only, in a distributed semi-join; no row
    reaches the driver.
    """
    from ...formats.position_deletes import referenced_data_file
    from ...formats.snapshot_changes import snapshot_change
    from ...read.reader import read_parquet_files
    from ..conflicts import describe, since

    snaps = since(table, base_snapshot_id)
    if isinstance(snaps, str):
        return snaps
    added: list[DataFile] = []
    for s in snaps:
        change = snapshot_change(table, s)
        if gone := [f.file_path for f in change.removes if f.file_path in touched]:
            return f"{describe(s)} removed {len(gone)} data file(s) the merge rewrites or deletes rows from (e.g. {gone[0]})"
        if deleted := [d for d in change.delete_files_added if referenced_data_file(d) in touched or referenced_data_file(d) is None]:
            return f"{describe(s)} deleted rows of data file(s) the merge rewrites or deletes rows from (delete file {deleted[0].file_path})"
        added += change.adds
    keys = list(opts.keys)
    if not added or not set(keys) <= {f.name for f in table.schema().fields}:
        return None
    spark_schema = iceberg_to_spark_schema(table.schema())
    new_rows = read_parquet_files(spark, [f.file_path for f in added], spark_schema, storage, cast_files=cast_files)
    if new_rows.select(*keys).join(batch.select(*keys).distinct(), keys, "left_semi").limit(1).count():
        return f"{', '.join(describe(s) for s in snaps)} added rows with merge keys ({', '.join(keys)}) that this batch also writes"
    return None

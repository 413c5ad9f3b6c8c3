"""Write modes as plans: each turns a DataFrame into the files to add and the files to remove, and commits nothing.

    append              the new files
    overwrite           the new files; every live file removed
    overwrite_window    the new files (all rows inside the window or slice, see window.py); live files
                        wholly inside it removed; files straddling its edges rewritten without its rows
                        (merge-on-read, `write.delete.mode`: those rows deleted by position instead)
    merge               see write/merge/merge.py (`merge.plan`): matched files rewritten without the batch's keys
                        (merge-on-read, `write.merge.mode`: those rows deleted by position instead),
                        plus the batch's upserts; with a window, only rows inside it are matched
    widen               added to another plan when a column type widens on a Delta-mirrored table

Every plan records each file it writes in `FileChanges.created` as soon as it exists, so whoever
runs the plan can remove them if a later step fails; `transaction.commit` makes the plan visible.
"""

from __future__ import annotations

from ..formats.deletes import refuse_delete_files, table_files
from ..formats.iceberg import committer as ic
from ..model import FileChanges, WriteRequest
from ..properties import Operation, TableProperties
from ..schema.window import Slice, check_inside, files_inside
from .merge import merge as merge_
from .merge import on_read as merge_on_read
from .target import WriteTarget


def plan(target: WriteTarget, request: WriteRequest, df, changes: FileChanges, *, widen_types: bool, key_stats=None, session=None) -> dict[str, str]:
    """Run the request's mode into `changes`; returns the summary keys the mode adds (merge's pruning evidence).

    `df`: a Spark DataFrame, or a pyarrow Table written in this process (no merge); `session()`: the Spark session
    for reading existing files, started only when a step reads them (default: `df`'s)."""
    session = session or (lambda: df.sparkSession)
    extra: dict[str, str] = {}
    if request.merge is not None or request.window is not None or widen_types:
        # These read or rewrite existing data files: with another engine's delete files they would resurrect rows.
        what = "A merge" if request.merge is not None else "A window overwrite" if request.window is not None else "Widening a column"
        mode = TableProperties.MERGE_MODE if request.merge is not None else TableProperties.DELETE_MODE
        if not widen_types and merge_on_read.chosen(target.table, mode):
            merge_on_read.check_deletes(target.table, what)  # its own position deletes it applies; others are refused
        else:
            refuse_delete_files(target.table, what)
    if request.merge is not None:
        stats = merge_.plan(df.sparkSession, target, df, key_stats, request.merge, changes, window=request.window)
        extra = merge_.summary_properties(stats, request.merge)
    elif request.window is not None:
        overwrite_window(target, df, request.window, changes, session)
    elif request.mode == Operation.OVERWRITE:
        overwrite(target, df, changes)
    else:
        append(target, df, changes)
    if widen_types:
        widen(target, session(), changes)
    return extra


def append(target: WriteTarget, df, changes: FileChanges) -> FileChanges:
    target.write(df, changes)
    return changes


def overwrite(target: WriteTarget, df, changes: FileChanges) -> FileChanges:
    target.write(df, changes)
    # Every data file goes, and with them the delete files other engines wrote against them.
    current = table_files(target.table)
    changes.removes += [e.data_file for e in current.data]
    changes.removed_delete_files += [e.data_file for e in current.deletes]
    return changes


def overwrite_window(target: WriteTarget, df, window: Slice, changes: FileChanges, session=None) -> FileChanges:
    session = session or (lambda: df.sparkSession)
    adds = target.write(df, changes)
    check_inside(target.identifier, target.table, adds, window, lambda files: target.read(session(), files))
    candidates = ic.live_data_files(target.table, row_filter=window.expression(target.table))
    whole, partial = files_inside(target.table, window, candidates)
    if partial and merge_on_read.chosen(target.table, TableProperties.DELETE_MODE):
        changes.removes += whole
        by_uri = {f.file_path: f for f in partial}
        positions = merge_on_read.positions_where(session(), target, partial, lambda schema: ~window.outside_filter(schema))
        merge_on_read.delete_positions(target, {by_uri[u]: p for u, p in positions.items()}, changes)
        return changes
    changes.removes += whole + partial
    if partial:
        kept = target.read(session(), partial)
        kept = kept.filter(window.outside_filter(kept.schema))
        target.write(kept, changes, counts_as_written=False)
    return changes


def widen(target: WriteTarget, spark, changes: FileChanges) -> FileChanges:
    """Widening a Delta-mirrored table: rewrite the live files this write does not already replace.

    Iceberg widens in metadata, but Delta without its typeWidening feature (which delta-rs cannot
    write) requires every file to hold the declared types. Rewriting once, in Spark, keeps a single
    file set for both formats; the Delta mirror then replaces its schema and file list in one commit.
    """
    replaced = {f.file_path for f in changes.removes}
    rest = [f for f in ic.live_data_files(target.table) if f.file_path not in replaced]
    if rest:
        target.write(target.read(spark, rest, cast_files=True), changes, counts_as_written=False)
        changes.removes += rest
    return changes

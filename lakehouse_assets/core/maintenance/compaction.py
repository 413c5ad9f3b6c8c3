"""Compaction: bin-pack small files per partition (one Spark job of pyarrow tasks), committed through
the commit pipeline as one Iceberg snapshot and one Delta version (remove + add with dataChange=false); the rows are unchanged.

On a merge-on-read table it also folds position deletes back in: a data file whose deletes pass a threshold
(`MaintenanceSettings.folds`: the share of its rows deleted, the number of delete files) is rewritten with its
partition's small files, and every rewritten file is read without its deleted rows. The commit removes the
file-scoped delete files of the files it removes (`deletes.RowDelta`), so readers open clean files again."""

from __future__ import annotations

import logging
import math

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from ..errors import CommitConflict, CommitError
from ..formats.deletes import refuse_delete_files
from ..formats.iceberg import committer as ic
from ..formats.position_deletes import referenced_data_file
from ..io.storage import delete_files
from ..model import FileChanges
from ..properties import Operation, SummaryKeys
from ..read.deleted_positions import IcebergPositionDeletes
from ..spark.session import active_session
from ..table.context import TableContext
from ..table.evolution import types_were_widened
from ..write import transaction
from ..write.compaction_tasks import compact_in_one_job
from ..write.target import WriteTarget
from .delete_figures import FileDeletes, files_with_deletes
from .reports import CompactionReport
from .settings import MaintenanceSettings

log = logging.getLogger("lakehouse.maintenance")


def plan_compaction(
    table: Table, settings: MaintenanceSettings, live: list[DataFile] | None = None, deletes: dict[str, FileDeletes] | None = None
) -> list[list[DataFile]]:
    """Groups of live files, one group per partition, each worth rewriting: its small files, and the files whose
    position deletes (`deletes`, by data file path) pass a folding threshold (such a file alone is worth it)."""
    groups: dict[tuple, list[DataFile]] = {}
    folding: set[tuple] = set()
    default_spec = table.metadata.default_spec_id
    for f in ic.live_data_files(table) if live is None else live:
        fold = f.file_path in (deletes or {}) and settings.folds(deletes[f.file_path])
        if f.spec_id != default_spec or (f.file_size_in_bytes >= settings.small_file_bytes and not fold):
            continue
        key = (f.spec_id, tuple(f.partition))
        groups.setdefault(key, []).append(f)
        if fold:
            folding.add(key)
    return [g for key, g in groups.items() if key in folding or settings.worth_compacting(key[0], default_spec, len(g))]


def compaction(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> CompactionReport:
    """Rewrite each partition's small files into target-size files; re-plan when another writer commits first.

    pyiceberg 0.12 has no REPLACE snapshot: the commit is an overwrite that removes exactly the rewritten
    files and adds their replacement, tagged lakehouse.operation=compaction (the Delta mirror then writes
    dataChange=false). Its concurrency validation rejects the commit when another writer committed in
    between, so an append is never lost.
    """
    result: CompactionReport = {"operation": "compaction", "table": identifier, "dry_run": dry_run, "attempts": 0, "conflicts": 0}
    for attempt in range(1, settings.compaction_max_attempts + 1):
        table = ctx.load(identifier)
        if not dry_run:
            refuse_delete_files(table, "Compaction", applies_position_deletes=True)
        groups, folded, spent = _plan(ctx, table, settings)
        removes = [f for g in groups for f in g]
        before = table.current_snapshot()
        result.update(
            partitions_compacted=len(groups),
            files_rewritten=len(removes),
            bytes_rewritten=sum(f.file_size_in_bytes for f in removes),
            rows_rewritten=sum(f.record_count for f in removes),
            files_with_deletes_folded=len(folded),
            deleted_rows_folded=sum(d.deleted_rows for d in folded.values()),
        )
        if dry_run or not groups:
            result.update(files_added=0, files_removed=0, iceberg_snapshot_id=None, delta_version=None, committed=False)
            if not groups:
                result["files_rewritten"] = 0
            return result
        result["attempts"] = attempt
        # A widened Iceberg-only table keeps narrower files: read them through the casting reader.
        target = WriteTarget(identifier, table, table.schema(), ctx.storage, cast_files=types_were_widened(table), target_file_size=settings.target_bytes)
        changes = FileChanges(removes=list(removes), removed_delete_files=spent)
        adds = _rewrite_groups(active_session(spark), target, groups, changes, result, settings, folded)
        summary = {SummaryKeys.OPERATION: Operation.COMPACTION, SummaryKeys.COMPACTION_FILES_REWRITTEN: str(len(removes))}
        try:
            wr = transaction.commit(ctx, identifier, table, changes, summary, mode=Operation.COMPACTION)
        except CommitConflict as e:
            # Another writer committed first: the pipeline removed our files (best effort); re-plan from the new state.
            cause = e.__cause__ or e
            result["conflicts"] += 1
            result["last_conflict"] = f"{type(cause).__name__}: {cause}"
            log.warning("Table %s: compaction attempt %d conflicted with a concurrent commit (%s); files removed", identifier, attempt, cause)
            continue
        result.update(
            committed=True,
            files_added=len(adds),
            files_removed=0,  # rewritten files stay on storage while retained snapshots/versions reference them
            bytes_added=sum(f.file_size_in_bytes for f in adds),
            iceberg_snapshot_id=wr.iceberg_snapshot_id,
            parent_snapshot_id=before.snapshot_id if before else None,
            delta_version=wr.delta_version,
            delta_lagging=wr.delta_lagging,
        )
        return result
    result.update(committed=False, aborted=True, files_added=0, files_removed=0, iceberg_snapshot_id=None, delta_version=None)
    log.warning("Table %s: compaction gave up after %d conflicting attempts; the table is unchanged", identifier, result["attempts"])
    return result


def _plan(ctx: TableContext, table: Table, settings: MaintenanceSettings):
    """The groups to rewrite, the position deletes of their files (folded in), and the delete files that then go."""
    deletes = files_with_deletes(table, ctx.storage)
    live = ic.live_data_files(table)
    groups = plan_compaction(table, settings, live, deletes)
    removes = {f.file_path for g in groups for f in g}
    folded = {p: deletes[p] for p in removes if p in deletes}
    return groups, folded, _spent_delete_files(ctx.storage, folded, {f.file_path for f in live} - removes)


def _spent_delete_files(storage, folded: dict[str, FileDeletes], kept: set[str]) -> list[DataFile]:
    """The delete files of the folded files that name no data file the compaction keeps: once their data files are
    rewritten they delete nothing. (A file-scoped one goes with its data file anyway: `deletes.RowDelta`.) Another
    engine's delete file may name several data files: its paths are read (a few bytes per deleted row)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out: dict[str, DataFile] = {}
    for d in {d.file_path: d for f in folded.values() for d in f.delete_files}.values():
        if referenced_data_file(d) is not None:
            continue
        fs, path = storage.filesystem(d.file_path)
        named = set(pc.unique(pq.read_table(path, filesystem=fs, columns=["file_path"]).column("file_path")).to_pylist())
        if not named & kept:
            out[d.file_path] = d
    return list(out.values())


def _rewrite_groups(
    spark, target: WriteTarget, groups, changes: FileChanges, result: CompactionReport, settings: MaintenanceSettings, folded: dict[str, FileDeletes]
) -> list[DataFile]:
    """Write each group's files again as target-size files into `changes` (nothing committed), without the rows
    `folded` deletes; checked by row count."""
    deleted = {path: IcebergPositionDeletes(path, tuple(d.file_path for d in f.delete_files)) for path, f in folded.items()}
    try:
        # Each partition's files rewritten as they are, in one job without a shuffle (compaction_tasks).
        adds = compact_in_one_job(spark, target, groups, changes, deleted)
        if adds is None:  # a file of another spec (the plan takes the current spec only): Spark's shuffled write
            rows = _shuffled_input(spark, target, changes.removes, result["bytes_rewritten"], settings, deleted)
            adds = target.write(rows, changes, counts_as_written=False)
        expected = result["rows_rewritten"] - result["deleted_rows_folded"]
        if sum(f.record_count for f in adds) != expected:
            raise CommitError(f"Table {target.identifier}: compaction wrote {sum(f.record_count for f in adds)} rows for {expected} input rows; nothing committed.")
        return adds
    except BaseException:
        delete_files(target.storage, changes.created)
        raise


def _shuffled_input(spark, target: WriteTarget, removes: list[DataFile], total_bytes: int, settings: MaintenanceSettings, deleted):
    """The files' rows (without the `deleted` positions) as a DataFrame for the writer (which shuffles a partitioned
    table's rows by key)."""
    df = target.read(spark, removes, deleted=deleted)
    if not target.table.spec().fields:
        # Unpartitioned: one output per target size. A shuffle, not a coalesce: the writer coalesces to the tasks it
        # plans from the size estimate, and Spark collapses a coalesce over a coalesce into the outer one (it would
        # undo this count), while a coalesce over a shuffle keeps the smaller of the two.
        df = df.repartition(max(1, math.ceil(total_bytes / settings.target_bytes)))
    return df

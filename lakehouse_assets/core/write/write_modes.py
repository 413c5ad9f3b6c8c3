"""Write modes as plans: each turns a DataFrame into the files to add and the files to remove, and commits nothing.

    append              the new files
    overwrite           the new files; every live file removed
    overwrite_window    the new files (all rows inside the window or slice, see window.py); live files
                        wholly inside it removed; files straddling its edges rewritten without its rows
    merge               see merge.py (`merge.plan`): matched files rewritten without the batch's keys,
                        plus the batch's upserts
    widen               added to another plan when a column type widens on a Delta-mirrored table

Every plan records each file it writes in `FileChanges.created` as soon as it exists, so whoever
runs the plan can remove them if a later step fails; `transaction.commit` makes the plan visible.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from ..formats import iceberg_committer as ic
from ..formats import partition_constants
from ..formats.deletes import refuse_delete_files, table_files
from ..io.storage import StorageConfig, join_uri, normalize_uri
from ..model import FileChanges, WriteRequest, WrittenFile
from ..properties import Operation
from ..read.reader import ParquetFileReader, read_parquet_files
from ..schema.type_mapping import SPARK_FIELD_ID_KEY, iceberg_to_spark_schema
from ..schema.window import Slice, check_inside, files_inside
from ..table.evolution import column_names_moved
from . import merge as merge_
from .parquet_files import FileWriter
from .writer import file_writer, write_table_files


@dataclass(frozen=True)
class WriteTarget:
    """One table as a write sees it: where files go and in which schema. Plans write through it."""

    identifier: str
    table: Table
    schema: Schema  # the schema the files are written with (the table's, evolved by this write)
    storage: StorageConfig
    cast_files: bool = False  # existing files may hold narrower types than `schema` (after a widening)
    target_file_size: int | None = None

    def write(self, df, changes: FileChanges, *, counts_as_written: bool = True) -> list[DataFile]:
        """Write `df` as table files, record them in `changes`, and return their Iceberg DataFiles."""
        written = write_table_files(df, self.table, self.storage, schema=self.schema, target_file_size=self.target_file_size)
        return self.record(written, changes, counts_as_written=counts_as_written)

    def record(self, written: list[WrittenFile], changes: FileChanges, *, counts_as_written: bool = True) -> list[DataFile]:
        """Files the executors wrote for this table: recorded in `changes`; their Iceberg DataFiles."""
        root = normalize_uri(self.table.location())
        changes.created += [join_uri(root, f.path) for f in written]
        adds = ic.data_files_from_written(self.table, root, written, self.schema)
        changes.adds += adds
        if counts_as_written:
            changes.rows_written += sum(f.record_count for f in written)
        return adds

    def read(self, spark, files: list[DataFile], *, cast_files: bool | None = None, path_column: str | None = None):
        """Existing files as a DataFrame in the write's schema."""
        cast = self.cast_files if cast_files is None else cast_files
        constants = partition_constants.of_files(self.table, files, self.schema)
        return read_parquet_files(spark, [f.file_path for f in files], self.spark_schema(), self.storage, path_column=path_column, cast_files=cast, constants=constants)

    def spark_schema(self):
        """The write's schema for Spark; with Parquet field ids after renames (existing files are read by id)."""
        return iceberg_to_spark_schema(self.schema, field_ids=column_names_moved(self.table))

    def row_reader(self, spark_schema=None) -> ParquetFileReader:
        """A pyarrow reader of existing files' whole rows for executor tasks, in the write's types (by field id
        after renames). `spark_schema`: `self.spark_schema()`, when the caller has it already."""
        from ..spark.compat import arrow_schema as to_arrow_schema

        spark_schema = spark_schema or self.spark_schema()
        field_ids = {f.name: f.metadata[SPARK_FIELD_ID_KEY] for f in spark_schema.fields if SPARK_FIELD_ID_KEY in (f.metadata or {})}
        return ParquetFileReader(self.storage, to_arrow_schema(spark_schema), field_ids=field_ids or None, constants=self.partition_constants() or None)

    def partition_constants(self) -> dict:
        """Identity partition values of the table's files that lack those columns (`partition_constants`; empty,
        at no cost, unless the table holds such files): what executor readers of whole files need."""
        return partition_constants.of_table(self.table, self.schema)

    def file_writer(self, settings: dict, write_id: str) -> FileWriter:
        """The writer's own file writer for executor tasks whose rows carry their partition key, with the
        table's Parquet settings (`writer.table_write_settings`)."""
        return file_writer(settings, write_id, self.storage)


def plan(target: WriteTarget, request: WriteRequest, df, changes: FileChanges, *, widen_types: bool, key_stats=None) -> dict[str, str]:
    """Run the request's mode into `changes`; returns the summary keys the mode adds (merge's pruning evidence)."""
    extra: dict[str, str] = {}
    if request.merge is not None or request.window is not None or widen_types:
        # These read or rewrite existing data files: with another engine's delete files they would resurrect rows.
        what = "A merge" if request.merge is not None else "A window overwrite" if request.window is not None else "Widening a column"
        refuse_delete_files(target.table, what)
    if request.merge is not None:
        stats = merge_.plan(df.sparkSession, target, df, key_stats, request.merge, changes)
        extra = merge_.summary_properties(stats, request.merge)
    elif request.window is not None:
        overwrite_window(target, df, request.window, changes)
    elif request.mode == Operation.OVERWRITE:
        overwrite(target, df, changes)
    else:
        append(target, df, changes)
    if widen_types:
        widen(target, df.sparkSession, changes)
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


def overwrite_window(target: WriteTarget, df, window: Slice, changes: FileChanges) -> FileChanges:
    adds = target.write(df, changes)
    check_inside(target.identifier, target.table, adds, window, lambda files: target.read(df.sparkSession, files))
    candidates = ic.live_data_files(target.table, row_filter=window.expression(target.table))
    whole, partial = files_inside(target.table, window, candidates)
    changes.removes += whole + partial
    if partial:
        kept = target.read(df.sparkSession, partial)
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

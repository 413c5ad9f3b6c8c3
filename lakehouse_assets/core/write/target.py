"""`WriteTarget`: one table as a write sees it, the handle every write plan writes and reads files through.

Write modes, merge tasks, compaction tasks and maintenance rewrites all need the same few things of the
table they change: where new files go and in which schema, how to record what they wrote, and how to read
existing files back in the write's types (by field id after renames, with partition values a file lacks).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from ..formats.delta import partition_constants
from ..formats.iceberg import committer as ic
from ..io.storage import StorageConfig, join_uri, normalize_uri
from ..model import FileChanges, WrittenFile
from ..read.reader import ParquetFileReader, read_parquet_files
from ..schema.type_mapping import SPARK_FIELD_ID_KEY, iceberg_to_spark_schema
from ..table.evolution import column_names_moved
from . import arrow_frames
from .parquet_files import FileWriter
from .writer import file_writer, table_write_settings, write_table_files


@dataclass(frozen=True)
class WriteTarget:
    """One table as a write sees it: where files go and in which schema. Plans write through it."""

    identifier: str
    table: Table
    schema: Schema  # the schema the files are written with (the table's, evolved by this write)
    storage: StorageConfig
    cast_files: bool = False  # existing files may hold narrower types than `schema` (after a widening)
    target_file_size: int | None = None
    change_feed: bool = False  # the Delta side keeps a change data feed: a write that knows its changed rows writes them

    def write(self, df, changes: FileChanges, *, counts_as_written: bool = True) -> list[DataFile]:
        """Write `df` as table files, record them in `changes`, and return their Iceberg DataFiles. A pyarrow Table (a
        small frame) is written in this process, by the same file kit and with the same settings as a Spark job's."""
        if isinstance(df, pa.Table):
            settings = table_write_settings(self.table, self.schema, self.target_file_size)
            return self.record(arrow_frames.write_files(df, storage=self.storage, **settings), changes, counts_as_written=counts_as_written)
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

    def read(
        self, spark, files: list[DataFile], *, cast_files: bool | None = None, path_column: str | None = None,
        position_column: str | None = None, deleted=None, columns=None,
    ):
        """Existing files as a DataFrame in the write's schema (`path_column`, `position_column`: each row's file and
        position in it; `deleted`: the files' deleted positions, left out; `columns`: only these, for a reader that
        cannot prune columns itself)."""
        from pyspark.sql.types import StructType

        cast = self.cast_files if cast_files is None else cast_files
        constants = partition_constants.of_files(self.table, files, self.schema)
        schema = self.spark_schema()
        if columns is not None:
            schema = StructType([f for f in schema.fields if f.name in set(columns)])
        return read_parquet_files(
            spark, [f.file_path for f in files], schema, self.storage,
            path_column=path_column, cast_files=cast, position_column=position_column, constants=constants, deleted=deleted,
            spark_positions=True,  # plans map the path column back with `file_uris` (merge/on_read.py collect_positions)
        )

    def spark_schema(self):
        """The write's schema for Spark; with Parquet field ids after renames (existing files are read by id)."""
        return iceberg_to_spark_schema(self.schema, field_ids=column_names_moved(self.table))

    def row_reader(self, files: list[DataFile], spark_schema=None) -> ParquetFileReader:
        """A pyarrow reader of the whole rows of `files` (existing ones) for executor tasks, in the write's types (by
        field id after renames). `spark_schema`: `self.spark_schema()`, when the caller has it already."""
        from ..spark.compat import arrow_schema as to_arrow_schema

        spark_schema = spark_schema or self.spark_schema()
        field_ids = {f.name: f.metadata[SPARK_FIELD_ID_KEY] for f in spark_schema.fields if SPARK_FIELD_ID_KEY in (f.metadata or {})}
        return ParquetFileReader(self.storage, to_arrow_schema(spark_schema), field_ids=field_ids or None, constants=self.partition_constants(files) or None)

    def partition_constants(self, files: list[DataFile]) -> dict:
        """Identity partition values of those of `files` that lack those columns (`partition_constants`; empty, at
        no cost, unless the table holds such files): what executor readers of whole files need. From the files
        given, never the table's manifests: the cost follows what the write reads."""
        return partition_constants.of_files(self.table, files, self.schema)

    def file_writer(self, settings: dict, write_id: str) -> FileWriter:
        """The writer's own file writer for executor tasks whose rows carry their partition key, with the
        table's Parquet settings (`writer.table_write_settings`)."""
        return file_writer(settings, write_id, self.storage)

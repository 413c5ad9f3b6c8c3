"""Spark DataFrames over a list of Parquet files chosen by Iceberg scan planning or a Delta version.

On file:// Spark's own Parquet reader opens the files. On object stores Spark's JVM has no S3
connector here, so the files are opened on the executors with pyarrow (the driver only ships paths).
Columns are matched by name, or by Parquet field id when the Spark schema carries ids
(`iceberg_to_spark_schema(field_ids=True)`, for tables whose columns were renamed or whose dropped
names were reused); columns missing from older files read as null.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..io.storage import StorageConfig
from ..spark.archives import keep_spark_archives_indexed
from ..spark.compat import default_parallelism, has_input_file_name
from ..spark.parquet_relation import parquet_files
from .deleted_positions import DeletedPositions, kept_rows


@dataclass
class ParquetFileReader:
    """mapInArrow function: path rows in, table rows out (runs on the executors)."""

    storage: StorageConfig
    arrow_schema: pa.Schema
    path_column: str | None = None
    field_ids: dict[str, int] | None = None  # column -> Parquet field id to match by (instead of the name)
    position_column: str | None = None  # each row's position in its file (what position deletes name)
    constants: dict[str, dict[str, object]] | None = None  # file URI -> {column: value} for columns the file lacks
    deleted: dict[str, DeletedPositions] | None = None  # file URI -> where its deleted positions are (rows left out)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from ..schema.conform import conform_batch

        keep_spark_archives_indexed()  # for this worker's later tasks
        for batch in batches:
            for uri in batch.column(0).to_pylist():
                fs, path = self.storage.filesystem(uri)
                # INT96 (Spark's and Hive's old timestamps) as microseconds: pyarrow's default nanoseconds
                # wrap outside 1677-2262 (a 9999-12-31 sentinel would come back as another date, or fail).
                parquet = pq.ParquetFile(fs.open_input_file(path), coerce_int96_timestamp_unit="us")
                source = self._source_columns(parquet.schema_arrow)  # table column -> the file's column
                data_schema = pa.schema([f for f in self.arrow_schema if f.name not in (self.path_column, self.position_column)])
                names = [n for n in data_schema.names if n in source]
                table_name = {source[n]: n for n in names}  # the file's column -> table column
                position = 0
                gone = self.deleted[uri].positions(self.storage) if self.deleted and uri in self.deleted else None
                for rb in self._batches(parquet, [source[n] for n in names]):
                    rb = pa.RecordBatch.from_arrays(rb.columns, names=[table_name[c] for c in rb.schema.names]) if names else rb
                    out = conform_batch(rb, data_schema)
                    if fill := {n: v for n, v in (self.constants or {}).get(uri, {}).items() if n not in source and n in data_schema.names}:
                        out = _with_constants(out, fill)
                    if self.path_column:
                        out = out.append_column(self.path_column, pa.array([uri] * out.num_rows, pa.string()))
                    rows = out.num_rows
                    if self.position_column:
                        out = out.append_column(self.position_column, pa.array(range(position, position + rows), pa.int64()))
                    if gone is not None:
                        out = out.filter(kept_rows(gone, position, rows))
                    position += rows
                    yield out

    def rows_at(self, uri: str, positions: pa.Array, known: pa.Table | None = None) -> pa.Table:
        """The rows of `uri` at `positions` (sorted int64 positions in the file), as this reader reads them. Each
        batch keeps only its rows of them as it is read: a file's whole rows are never held at once. `known`: some
        of its columns as read already, every row in file order (a merge's key columns): taken from it, not
        decoded again. Needs a reader that leaves no rows out (no `deleted`), so that batch offsets are file positions."""
        import numpy as np

        if self.deleted:
            raise ValueError("rows_at needs a reader that leaves no deleted rows out: its batch offsets are file positions")
        given = set(known.column_names) if known is not None else set()
        rest = pa.schema([f for f in self.arrow_schema if f.name not in given])
        wanted = positions.to_numpy(zero_copy_only=False)
        taken, start = [], 0
        for rb in replace(self, arrow_schema=rest)(path_batches(uri)) if len(rest) and len(wanted) else ():
            low, high = np.searchsorted(wanted, [start, start + rb.num_rows])
            if high > low:
                taken.append(rb.take(pa.array(wanted[low:high] - start)))
            start += rb.num_rows
        read = pa.Table.from_batches(taken, schema=rest)
        if known is None:
            return read
        at = known.take(positions)
        return pa.Table.from_arrays(
            [at.column(f.name).cast(f.type) if f.name in given else read.column(f.name) for f in self.arrow_schema], schema=self.arrow_schema
        )

    @staticmethod
    def _batches(parquet: pq.ParquetFile, columns: list[str]) -> Iterator[pa.RecordBatch]:
        if columns:
            yield from parquet.iter_batches(columns=columns, batch_size=65536)
            return
        # None of the wanted columns is in this file (all added later): its rows still count, as nulls.
        rows = parquet.metadata.num_rows
        for start in range(0, rows, 65536):
            yield pa.RecordBatch.from_struct_array(pa.array([{}] * min(65536, rows - start), pa.struct([])))  # rows, no columns

    def _source_columns(self, file_schema: pa.Schema) -> dict[str, str]:
        """Table column -> the file's column that holds it."""
        if not self.field_ids:
            return _by_name(self.arrow_schema.names, file_schema.names)
        by_id = {int(f.metadata[_ARROW_FIELD_ID]): f.name for f in file_schema if f.metadata and _ARROW_FIELD_ID in f.metadata}
        out = {n: by_id[i] for n, i in self.field_ids.items() if i in by_id}
        # Columns without an id (the path column) keep matching by name.
        out.update({n: n for n in file_schema.names if n not in self.field_ids and n not in out})
        return out


_ARROW_FIELD_ID = b"PARQUET:field_id"


def _with_constants(batch: pa.RecordBatch, values: dict[str, object]) -> pa.RecordBatch:
    """`batch` with the columns named in `values` holding that value on every row (Iceberg's identity partition
    rule for a column the file lacks)."""
    columns = list(batch.columns)
    for name, value in values.items():
        i = batch.schema.get_field_index(name)
        columns[i] = pa.repeat(pa.scalar(value, type=batch.schema.field(i).type), batch.num_rows)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _by_name(wanted: list[str], present: list[str]) -> dict[str, str]:
    """Each wanted column's column in a file: the same name, else the one name equal to it ignoring case,
    as Spark's Parquet reader resolves them by default (another engine's file may spell `ID` for `id`)."""
    exact = set(present)
    folded: dict[str, list[str]] = {}
    for n in present:
        folded.setdefault(n.lower(), []).append(n)
    out = {}
    for w in wanted:
        if w in exact:
            out[w] = w
        elif len(same := folded.get(w.lower(), [])) == 1:
            out[w] = same[0]
        elif same:
            raise ValueError(f"the file has several columns named {w!r} ignoring case ({', '.join(same)}): which one holds it is ambiguous")
    return out


def read_parquet_files(
    spark,
    uris: list[str],
    spark_schema,
    storage: StorageConfig,
    path_column: str | None = None,
    cast_files: bool = False,
    position_column: str | None = None,
    constants: dict[str, dict[str, object]] | None = None,
    deleted: dict[str, DeletedPositions] | None = None,
    spark_positions: bool = False,
):
    """`path_column` adds each row's file, as Spark spells it on file:// (or exactly as given in `uris` when
    pyarrow reads): pass the distinct values to `file_uris` to get the URIs back (merge finds matched files so).
    `position_column` adds each row's 0-based position in its file (applying position deletes needs it), from the
    pyarrow reader; `spark_positions`: from Spark's own reader (its row index) where it can read the files, for a
    caller that maps the path column's values back with `file_uris` (Spark spells paths its own way).

    `cast_files`: some files hold narrower types than `spark_schema` (widened columns); read them with
    pyarrow, which casts, instead of Spark's Parquet reader, which refuses.

    `constants`: {file URI: {column: value}} for identity partition columns some files lack
    (`partition_constants`); those files' rows get the value. The files are then read with pyarrow.

    `deleted`: {file URI: its deleted positions} for files with position deletes or a deletion vector; their
    deleted rows are left out as each file is read, on the executors (`deleted_positions`). The other files
    are read as without it, so the cost grows with the files that have deletes only.
    """
    if deleted and (dirty := [u for u in uris if u in deleted]):
        clean = [u for u in uris if u not in deleted]
        args = (spark_schema, storage, path_column, cast_files, position_column, constants)
        rows = _read_files(spark, dirty, *args, {u: deleted[u] for u in dirty})
        return read_parquet_files(spark, clean, *args, spark_positions=spark_positions).unionByName(rows) if clean else rows
    return _read_files(spark, uris, spark_schema, storage, path_column, cast_files, position_column, constants, None, spark_positions)


def _read_files(spark, uris, spark_schema, storage, path_column, cast_files, position_column, constants, deleted, spark_positions=False):
    """`read_parquet_files` of files that all have deletes (`deleted`) or none (None)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from ..schema.type_mapping import SPARK_FIELD_ID_KEY

    field_ids = {f.name: f.metadata[SPARK_FIELD_ID_KEY] for f in spark_schema.fields if SPARK_FIELD_ID_KEY in (f.metadata or {})}
    out_schema = StructType([*spark_schema.fields, StructField(path_column, StringType(), False)]) if path_column else spark_schema
    if position_column:
        out_schema = StructType([*out_schema.fields, StructField(position_column, LongType(), False)])
        cast_files = cast_files or not spark_positions  # positions from the pyarrow reader
    if constants or deleted:
        cast_files = True  # Spark's Parquet reader has no per-file constants or deleted positions
    if not uris:
        return spark.createDataFrame([], out_schema)
    if field_ids:
        # Spark 3.5 can read columns by Parquet field id (spark.sql.parquet.fieldId.read.enabled), but it
        # pushes filters down to the Parquet reader by *name*: after a rename, a filter on a moved column
        # is checked against another column's statistics and row groups holding matches are skipped (wrong
        # rows, silently; test_row_filters.py). The pyarrow reader maps by id, and Spark filters what it returns.
        cast_files = True
    if not cast_files and all(u.startswith("file:") for u in uris) and (path_column is None or has_input_file_name(spark)):
        # Our files (and any Iceberg/Delta writer's) hold proleptic-Gregorian dates and timestamps; without
        # these options Spark refuses values before 1582 / 1900 in files it did not write itself
        # (INCONSISTENT_BEHAVIOR_CROSS_VERSION.READ_ANCIENT_DATETIME). Per read, not a global setting.
        df = parquet_files(spark, spark_schema, uris)
        from pyspark.sql import functions as F

        if path_column:
            # Spark's own spelling of the file (file:/x, percent-encoded), a per-row constant that costs
            # nothing; `file_uris` maps the few distinct values a caller collects back onto `uris`.
            # (Mapping per row here, with url_decode and a map lookup, cost ~7 us a row: 14 s for 2M rows.)
            df = df.withColumn(path_column, F.input_file_name())
        if position_column:
            df = df.withColumn(position_column, F.col("_metadata.row_index"))  # the row's position in its file (Spark 3.5+)
        return df
    from ..spark.compat import arrow_schema as to_arrow_schema

    reader = ParquetFileReader(storage, to_arrow_schema(out_schema), path_column, field_ids or None, position_column, constants or None, deleted)
    return map_paths(spark, uris, reader, out_schema, tasks=min(len(uris), default_parallelism(spark) * 4))


def map_paths(spark, uris: list[str], fn, schema, tasks: int):
    """`fn`, a mapInArrow function over batches of one `path` column, run on the executors over `uris` in
    `tasks` tasks. `spark.range` spreads the paths' indexes over the tasks and each task maps its indexes
    back to paths: no DataFrame built from driver rows (~25 ms of py4j and schema parsing) and no shuffle
    to spread one (a `repartition` stage)."""
    return spark.range(len(uris), numPartitions=max(1, tasks)).mapInArrow(_ByIndex(fn, list(uris)), schema)


@dataclass
class _ByIndex:
    """mapInArrow function: index rows in; `fn` over the paths at those indexes."""

    fn: object
    uris: list[str]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        paths = (pa.record_batch([pa.array([self.uris[i] for i in b.column(0).to_pylist()], pa.string())], names=["path"]) for b in batches)
        yield from self.fn(paths)


def path_batches(uri: str) -> Iterator[pa.RecordBatch]:
    """One file's path as the input of a `ParquetFileReader` (which maps batches of paths)."""
    return iter([pa.record_batch([pa.array([uri], pa.string())], names=["path"])])


def file_uris(spelled: list[str], uris: list[str]) -> list[str]:
    """The URIs (from `uris`) of files as `read_parquet_files`' path column spells them."""
    by_key = {_file_key(u): u for u in uris}
    return [by_key[_file_key(s)] if s.startswith("file:") else s for s in spelled]


def _file_key(uri: str) -> str:
    from urllib.parse import unquote

    return "/" + unquote(uri[len("file:"):]).lstrip("/")

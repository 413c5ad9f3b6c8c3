"""Small frames (a pyarrow Table, a pandas or Polars DataFrame) written in the Python process, without Spark.

The rows go through the same file kit the Spark job runs on its executors (core/write/parquet_files.py's
`FileWriter`, with the table's layout and Parquet settings from `writer.table_write_settings`), in one task: the
same partition keys (`PartitionKeyer`, pyiceberg's Arrow transforms, for every transform), the same rolling at
the target file size, the same footers the commit takes its statistics from. The frame's columns get the types
Spark would give them (`spark_schema`, then the shared Spark-to-Iceberg mapping), so a table reaches the same
schema whichever way its rows arrive. What needs Spark (a merge, a contract's SQL rules, rows of existing files
rewritten) converts the frame with `to_spark`, and only then starts a session.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError, SpecError
from ..io.storage import StorageConfig
from ..model import WrittenFile
from ..schema.conform import conform_batch
from ..schema.type_mapping import arrow_file_schema
from .parquet_files import FileWriter
from .partition_keys import PARTITION_KEY_COLUMN, PartitionKeyer
from .writer import written_files

BATCH_ROWS = 64 * 1024  # rows per batch handed to the file kit, as Spark's Arrow batches are bounded


def arrow_of(df) -> pa.Table | None:
    """`df` as a pyarrow Table (None for a Spark DataFrame): pyarrow Tables, pandas and Polars DataFrames and LazyFrames."""
    if hasattr(df, "sparkSession") and hasattr(df, "mapInArrow"):
        return None
    if type(df).__module__.split(".")[0] == "polars":  # polars.DataFrame or LazyFrame (not a dependency of the core)
        df = (df.collect() if hasattr(df, "collect") else df).to_arrow()
    if type(df).__module__.split(".")[0] == "pandas" and type(df).__name__ == "DataFrame":
        df = pa.Table.from_pandas(df, preserve_index=False)
    if isinstance(df, pa.Table):
        return pa.table([_plain(c) for c in df.columns], names=df.column_names)
    raise SpecError(f"Cannot write an object of type {type(df).__name__}: pass a Spark DataFrame, a pyarrow Table, a pandas or a Polars DataFrame.")


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Types Spark's Arrow conversion would make of the column: dictionaries decoded, large and view types
    plain, timestamps in microseconds (finer digits dropped, as Spark drops them)."""
    t = column.type
    if pa.types.is_dictionary(t):
        return _plain(column.cast(t.value_type))
    if pa.types.is_large_string(t) or str(t) == "string_view":
        return column.cast(pa.string())
    if pa.types.is_large_binary(t) or str(t) == "binary_view":
        return column.cast(pa.binary())
    if t in _WIDER_SIGNED:  # Spark, Iceberg and Delta have signed integers only: the next wider one holds every value
        return column.cast(_WIDER_SIGNED[t])
    if pa.types.is_timestamp(t) and t.unit != "us":
        return column.cast(pa.timestamp("us", t.tz), safe=False)
    return column


_WIDER_SIGNED = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}


def spark_schema(table: pa.Table, identifier: str = "", existing=None):
    """The Spark schema Spark gives the frame's rows (every column nullable, as a converted frame's are): the input
    of the shared Spark-to-Iceberg type mapping, so the table's schema does not depend on how its rows arrived.

    Timestamps are mapped here, not by PySpark's `from_arrow_schema`, whose answer for a zone-less one changed between
    Spark lines (3.5: the session's TimestampType, 4: TimestampNTZType): a zone-less Arrow timestamp is a wall-clock
    time, Spark's TimestampNTZType and Iceberg's `timestamp`; one with a zone is an instant, TimestampType and
    `timestamptz`. `existing`: the table as it is, whose `timestamptz` columns take a frame's zone-less values as UTC
    (the type earlier releases gave such a column on Spark 3.5), so a table keeps its type whichever line writes it."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructField, StructType

    instants = _instant_columns(existing)
    fields = []
    for f in table.schema:
        if pa.types.is_timestamp(f.type):
            fields.append(StructField(f.name, _timestamp_type(f.type.tz is not None or f.name in instants), True))
            continue
        try:  # nested timestamps too, the preference given (its default differs between the lines)
            nested = from_arrow_schema(pa.schema([f]), prefer_timestamp_ntz=f.name not in instants)
            fields.append(StructField(f.name, nested.fields[0].dataType, True))
        except (TypeError, NotImplementedError):  # e.g. uint64, whose values no signed 64-bit integer holds
            raise SpecError(
                f"Table {identifier}: column {f.name!r} of the frame has Arrow type {f.type}, which no Spark, Iceberg or Delta type holds. "
                "Nothing was written. Cast the column to a type they hold (a signed integer, a decimal, a string...) before writing."
            ) from None
    return StructType(fields)


def _instant_columns(existing) -> set[str]:
    """The table's top-level columns that are or hold a `timestamptz` (none for a table not created yet)."""
    if existing is None:
        return set()
    from pyiceberg.types import ListType, MapType, StructType, TimestamptzType

    def holds_instant(t) -> bool:
        if isinstance(t, StructType):
            return any(holds_instant(f.field_type) for f in t.fields)
        if isinstance(t, ListType):
            return holds_instant(t.element_type)
        if isinstance(t, MapType):
            return holds_instant(t.key_type) or holds_instant(t.value_type)
        return isinstance(t, TimestamptzType)

    return {f.name for f in existing.schema().fields if holds_instant(f.field_type)}


def _timestamp_type(instant: bool):
    from pyspark.sql.types import TimestampNTZType, TimestampType

    return TimestampType() if instant else TimestampNTZType()


def to_spark(table: pa.Table, spark, identifier: str = "", existing=None):
    """The frame as a Spark DataFrame, for the steps that need Spark (a merge, a contract's rules). `existing`: as for
    `spark_schema`. Zone-less values bound for an instant column go to Spark as UTC, whatever the session's time zone."""
    schema = spark_schema(table, identifier, existing)
    columns = [
        c.cast(pa.timestamp("us", "UTC")) if pa.types.is_timestamp(c.type) and c.type.tz is None and f.dataType == _timestamp_type(True) else c
        for c, f in zip(table.columns, schema.fields, strict=True)
    ]
    return spark.createDataFrame(pa.table(columns, names=table.column_names).to_pandas(), schema=schema)


def write_files(
    table: pa.Table, *, root_uri: str, schema, spec, delta_columns: list[str], storage: StorageConfig, target_file_size: int,
    compression: str = "zstd", compression_level: int | None = 3, table_name: str = "", file_names=None, narrow=None,
) -> list[WrittenFile]:
    """`writer.write_files` for a frame in this process: the file kit run as one task over the frame's batches.
    A failure removes every file the task wrote (the kit's own cleanup) before the error reaches the caller."""
    write_id = uuid.uuid4().hex[:16]
    # In the table's types and names first, as Spark's batches reach the kit: the keyer computes on the column's type.
    logical = arrow_file_schema(schema)
    batches = [conform_batch(b, logical) for b in table.to_batches(max_chunksize=BATCH_ROWS)]
    writer = FileWriter(
        root_uri, write_id, arrow_file_schema(schema, file_names, narrow), storage, target_file_size, compression, compression_level,
        input_names=tuple(f.name for f in schema.fields) if file_names else None,
    )
    from ..formats.delta.values import UnrepresentableValue
    from ..io.storage import storage_error

    try:
        if spec.fields:
            batches = _by_partition_key(batches, PartitionKeyer(schema.model_dump_json(), spec.model_dump_json(), tuple(delta_columns)))
        rows = [row for out in writer(iter(batches)) for row in out.to_pylist()]
    except UnrepresentableValue as e:  # its message names the column, the value and the fix
        raise InputError(f"Table {table_name}: {e}") from e
    except OSError as e:
        if (clear := storage_error(storage, root_uri, e)) is not None:
            raise clear from e  # access denied, endpoint, region: the actionable storage advice
        raise
    return written_files(rows)


def _by_partition_key(batches: list[pa.RecordBatch], keyer: PartitionKeyer) -> list[pa.RecordBatch]:
    """The rows with their partition key, sorted by it: the kit's input on the keyer's path (runs of one key)."""
    keyed = [b for b in keyer(iter(batches)) if b.num_rows]
    if not keyed:
        return []
    rows = pa.Table.from_batches(keyed)
    rows = rows.take(pc.sort_indices(rows, sort_keys=[(PARTITION_KEY_COLUMN, "ascending")]))
    return rows.combine_chunks().to_batches(max_chunksize=BATCH_ROWS)

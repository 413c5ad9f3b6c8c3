"""Spark writes every Parquet file exactly once, on the executors.

Each task turns its Arrow batches into Parquet files through pyarrow's filesystem layer (the same
code for file:// and s3://). Files carry Iceberg field ids, hold exactly one Iceberg partition, and
roll over at the target size. The driver receives one small row per file (path, size, row count,
partition, Parquet footer) and never sees table rows.

Partitioned writes compute Iceberg-exact partition values as Spark expressions
(core/partition_columns.py); Spark shuffles and sorts by them so each partition lands in as few files
as possible, and the writer turns each run of equal values into the partition's key once. Transforms
Spark cannot compute exactly (bucket of strings, decimals...) fall back to one extra Python pass with
pyiceberg's vectorized transforms that adds a key column per row.
"""

from __future__ import annotations

import base64
import decimal
import hashlib
import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs  # noqa: F401  (pa.fs)
import pyarrow.parquet as pq
from pyiceberg.partitioning import PartitionSpec, _to_partition_representation
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform, TruncateTransform
from pyiceberg.types import IntegerType, LongType

from . import delta_values
from .errors import InputError, WriteError
from .storage import StorageConfig, join_uri
from .type_mapping import arrow_file_schema, conform_batch

log = logging.getLogger("lakehouse")

# Internal helper columns hold a space, which user column names cannot (spec._check_names): no collision possible.
PARTITION_KEY_COLUMN = "_lakehouse partition key"
PARTITION_VALUE_PREFIX = "_lakehouse partition value "
ROW_GROUP_BYTES = 64 * 1024 * 1024
# A write task keeps a file open per partition key it holds (the shuffle clusters keys into tasks, no sort):
# at most this many at once (beyond, the oldest is closed: one more file) and this many bytes buffered.
MAX_OPEN_FILES = 128
FANOUT_PENDING_BYTES = 256 * 1024 * 1024
DICTIONARY_SAMPLE_ROWS = 10_000
FILE_ROW_FIELDS = (("path", "string"), ("size", "long"), ("record_count", "long"), ("partition_key", "string"), ("footer", "binary"))

# ---------------------------------------------------------------- partition keys


def _json_value(v):
    if isinstance(v, decimal.Decimal):
        return {"decimal": str(v)}
    if isinstance(v, bytes):
        return {"bytes": base64.b64encode(v).decode()}
    return v


def decode_partition_value(v):
    if isinstance(v, dict) and "decimal" in v:
        return decimal.Decimal(v["decimal"])
    if isinstance(v, dict) and "bytes" in v:
        return base64.b64decode(v["bytes"])
    return v


_SAFE_DIR = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _dir_value(human: str) -> str:
    # File paths stay plain ASCII so the same relative path is valid in both logs without URL encoding.
    return human if _SAFE_DIR.fullmatch(human) else "h" + hashlib.sha1(human.encode()).hexdigest()[:16]


def _dir_name(partition_field: str) -> str:
    """The folder name of a partition field. Delta vacuum and Iceberg orphan cleaners skip `_`/`.`-prefixed
    folders as hidden, so such names get a `p` in front (the folder name is cosmetic: both logs carry the
    partition values themselves)."""
    name = _dir_value(partition_field)
    return "p" + name if name.startswith(("_", ".")) else name


@dataclass
class PartitionKeyer:
    """Computes, per row, one JSON key holding the Iceberg partition tuple and the directory.

    `key_for` builds the key of one partition from its values (computed by Spark expressions, see
    partition_columns.py, or by `keys`, pyiceberg's vectorized transforms, where Spark cannot). It also
    refuses values of Delta partition columns that the Delta log cannot hold distinctly
    (delta_values.partition_value), before that partition's file is written; the failed write then
    removes every file it wrote (write_files)."""

    schema_json: str
    spec_json: str
    delta_columns: tuple[str, ...] = ()  # Delta partition columns: their values are checked (delta_values.partition_value)

    def _setup(self):
        schema = Schema.model_validate_json(self.schema_json)
        spec = PartitionSpec.model_validate_json(self.spec_json)
        fields = []
        for pf in spec.fields:
            source = schema.find_field(pf.source_id)
            fields.append((pf, schema.find_column_name(pf.source_id), source.field_type, pf.transform.pyarrow_transform(source.field_type)))
        return fields

    def key_for(self, values: tuple) -> str:
        """The JSON key of one partition, from its transformed values (Iceberg's, in spec order)."""
        if not hasattr(self, "_fields"):
            self._fields = self._setup()
        internal = []
        for (pf, col_name, source_type, _), v in zip(self._fields, values):
            internal.append(_to_partition_representation(source_type, v) if isinstance(pf.transform, IdentityTransform) else v)
            if col_name in self.delta_columns:
                delta_values.partition_value(col_name, source_type, v)  # raises UnrepresentableValue
        return self.key_of_partition(tuple(internal))

    def key_of_partition(self, internal: tuple) -> str:
        """The JSON key of one partition from its values in Iceberg's internal representation (a data
        file's partition record, in spec order): the same key `key_for` gives that partition's rows."""
        if not hasattr(self, "_fields"):
            self._fields = self._setup()
        parts, dirs = [], []
        for (pf, _col_name, source_type, _), v in zip(self._fields, internal):
            parts.append(_json_value(v))
            result_type = pf.transform.result_type(source_type)
            dirs.append(f"{_dir_name(pf.name)}={_dir_value(pf.transform.to_human_string(result_type, v))}")
        return json.dumps({"values": parts, "dir": "/".join(dirs)}, sort_keys=True)

    def keys(self, batch: pa.RecordBatch) -> pa.Array:
        """Per row key through pyiceberg's vectorized transforms (the fallback when Spark cannot compute them)."""
        if not hasattr(self, "_fields"):
            self._fields = self._setup()
        transformed = []
        for pf, col_name, source_type, fn in self._fields:
            col = _column(batch, col_name)
            if pa.types.is_decimal(col.type):
                # Arrow buffers from Spark may be unaligned for decimal128; pyiceberg-core panics on them. Copy.
                col = pa.concat_arrays([col, pa.array([], col.type)])
            if pa.types.is_timestamp(col.type) and col.type.tz is not None and col.type.tz != "UTC":
                # Spark labels instants with the session time zone; pyiceberg-core's year and month follow the
                # label's wall clock. Relabelled as UTC (the same instants), they are Iceberg's.
                col = col.cast(pa.timestamp(col.type.unit, "UTC"))
            out = fn(col)
            if isinstance(pf.transform, TruncateTransform) and isinstance(source_type, (IntegerType, LongType)):
                # Within W of the type's minimum, truncate wraps to a large positive value (as Spark's
                # expression refuses it, partition_columns._refuse_wrapped_truncation).
                if pc.any(pc.greater(out, col)).as_py():
                    from .partition_columns import wrapped_truncation_message

                    raise delta_values.UnrepresentableValue(wrapped_truncation_message(col_name, pf.transform.width, source_type))
            transformed.append(out)
        # Distinct combinations are few; build each key once and map rows onto them.
        combos = pa.table({str(i): t for i, t in enumerate(transformed)})
        uniques = combos.group_by(combos.column_names, use_threads=False).aggregate([]).to_pylist()
        out = pa.nulls(batch.num_rows, pa.string())
        for u in uniques:
            mask = None
            for i, trans_col in enumerate(transformed):
                v = u[str(i)]
                eq = pc.is_null(trans_col) if v is None else pc.fill_null(pc.equal(trans_col, pa.scalar(v, trans_col.type)), False)
                mask = eq if mask is None else pc.and_(mask, eq)
            key = self.key_for(tuple(u[str(i)] for i in range(len(transformed))))
            out = pc.if_else(mask, pa.scalar(key), out)
        if out.null_count:  # a value equal to no group (NaN): never hand Spark a null key
            raise ValueError(f"no partition key for {out.null_count} row(s): a partition source value is not equal to itself (NaN)")
        return out

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys = self.keys(batch)
            yield pa.RecordBatch.from_arrays([*batch.columns, keys], names=[*batch.schema.names, PARTITION_KEY_COLUMN])


def _column(batch: pa.RecordBatch, dotted: str) -> pa.Array:
    parts = dotted.split(".")
    col = batch.column(batch.schema.get_field_index(parts[0]))
    for p in parts[1:]:
        col = pc.struct_field(col, p)
    return col


UNPARTITIONED_KEY = json.dumps({"values": [], "dir": ""}, sort_keys=True)


def with_partition_key(batch: pa.RecordBatch, key: str) -> pa.RecordBatch:
    """`batch`, all of one partition, carrying its key: the FileWriter's input where the key is known
    (rows of existing files, whose partition their data file's record holds)."""
    return batch.append_column(PARTITION_KEY_COLUMN, pa.array([key] * batch.num_rows, pa.string()))


# ---------------------------------------------------------------- file writing


@dataclass
class FileWriter:
    """The mapInArrow function that writes Parquet files and yields one metadata row per file."""

    root_uri: str
    write_id: str
    arrow_schema: pa.Schema
    storage: StorageConfig
    target_file_size: int
    compression: str = "zstd"
    compression_level: int | None = 3
    # Partition values computed by Spark expressions (core/partition_columns.py): the hidden columns
    # holding them, and the keyer that turns one run's values into its key. Empty: the key column path.
    key_columns: tuple[str, ...] = ()
    keyer: "PartitionKeyer | None" = None
    # The rows' name of each file column, when the files name columns otherwise (Delta column mapping's physical names).
    input_names: tuple[str, ...] | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        self._attempt = ctx.taskAttemptId() if ctx else 0
        self._seq = 0
        self._fs, _ = self.storage.filesystem(self.root_uri)
        self._opened: list[str] = []  # full paths this task created: removed again if the task fails
        try:
            yield from self._write(batches)
        except Exception:
            # Spark discards a failed task's output: remove its files (the driver sweeps what a killed task leaves).
            for path in self._opened:
                try:
                    self._fs.delete_file(path)
                except OSError:
                    pass
            raise

    def _write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # One open file per partition key seen by this task ("fanout"): rows computed by Spark's partition
        # expressions arrive clustered by key (the shuffle) but not sorted, so no Spark sort is needed.
        open_files: dict[str, _RollingFile] = {}
        results: list[dict] = []
        for batch in batches:
            if batch.num_rows == 0:
                continue
            key_index = batch.schema.get_field_index(PARTITION_KEY_COLUMN)
            if self.key_columns:
                groups = _group_by_columns(batch, self.key_columns, self._key_cache())
            elif key_index < 0:
                groups = [(UNPARTITIONED_KEY, batch)]
            else:
                groups = _split_by_key(batch, key_index)  # the keyer's path: input sorted by key
            for key, part in groups:
                current = open_files.get(key)
                if current is None:
                    if len(open_files) >= MAX_OPEN_FILES:  # bounded streams and buffers: close the oldest
                        oldest = next(iter(open_files))
                        results.append(open_files.pop(oldest).close())
                    current = open_files[key] = _RollingFile(self, key)
                done = current.write(conform_batch(part, self.arrow_schema, self.input_names))
                if done is not None:
                    results.append(done)
                    del open_files[key]
            _bound_pending(open_files.values())
            if results:
                yield _file_rows(results)
                results = []
        results += [f.close() for f in open_files.values()]
        if results:
            yield _file_rows(results)

    def dictionary_columns(self, first: pa.Table) -> list[str]:
        """Decided once per task from the first file's first rows: the columns' nature does not change per file."""
        if not hasattr(self, "_dictionary"):
            self._dictionary = _dictionary_columns(first)
        return self._dictionary

    def _key_cache(self):
        if not hasattr(self, "_keys"):
            self._keys = {}

        def key(values: tuple) -> str:
            if values not in self._keys:
                self._keys[values] = self.keyer.key_for(values)
            return self._keys[values]

        return key

    def next_path(self, key_dir: str) -> str:
        self._seq += 1
        name = f"{self.write_id}-{self._attempt:05d}-{self._seq:05d}.parquet"
        return "/".join(p for p in ("data", key_dir, name) if p)


def _split_by_key(batch: pa.RecordBatch, key_index: int) -> list[tuple[str, pa.RecordBatch]]:
    """The keyer's path (input sorted by its key column): the batch's runs of one key, the key column dropped."""
    if batch.num_rows == 0:
        return []
    keys = batch.column(key_index)
    data = batch.drop_columns([PARTITION_KEY_COLUMN]) if hasattr(batch, "drop_columns") else pa.RecordBatch.from_arrays(
        [c for i, c in enumerate(batch.columns) if i != key_index], names=[n for i, n in enumerate(batch.schema.names) if i != key_index]
    )
    starts = _run_starts(batch, (PARTITION_KEY_COLUMN,))
    return [(keys[start].as_py(), data.slice(start, end - start)) for start, end in zip(starts, [*starts[1:], batch.num_rows])]


def _group_by_columns(batch: pa.RecordBatch, names: tuple[str, ...], key_of) -> list[tuple[str, pa.RecordBatch]]:
    """The batch's rows per partition key (rows in any order); the value columns dropped.

    A batch of one key (the usual case: a task holding one key) is passed as is; one holding several
    (a shuffle interleaves them) is sorted by the values first, in Arrow: ~0.8 ms per 10k rows, where
    Spark's sort of the task's whole partition cost more."""
    values = pa.Table.from_batches([batch.select(list(names))])
    if values.group_by(list(names)).aggregate([]).num_rows == 1:
        return _split_by_columns(batch, names, key_of, [0])
    batch = batch.take(pc.sort_indices(values, sort_keys=[(n, "ascending") for n in names]))
    return _split_by_columns(batch, names, key_of, _run_starts(batch, names))


def _bound_pending(files) -> None:
    """Keep the rows a task buffers for its open files under FANOUT_PENDING_BYTES: flush the largest buffers
    as (smaller) row groups. With one or a few keys per task this never triggers."""
    files = list(files)
    total = sum(f.pending_bytes for f in files)
    for f in sorted(files, key=lambda f: f.pending_bytes, reverse=True):
        if total <= FANOUT_PENDING_BYTES:
            return
        total -= f.pending_bytes
        f.flush()


def _split_by_columns(batch: pa.RecordBatch, names: tuple[str, ...], key_of, starts: list[int]) -> list[tuple[str, pa.RecordBatch]]:
    """Runs of equal partition values (from `_run_starts`), each with its key; the value columns dropped."""
    n = batch.num_rows
    data = pa.RecordBatch.from_arrays(
        [c for c, f in zip(batch.columns, batch.schema) if f.name not in names], schema=pa.schema([f for f in batch.schema if f.name not in names])
    )
    columns = [batch.column(batch.schema.get_field_index(name)) for name in names]
    runs = []
    for start, end in zip(starts, [*starts[1:], n]):
        runs.append((key_of(tuple(c[start].as_py() for c in columns)), data.slice(start, end - start)))
    return runs


def _run_starts(batch: pa.RecordBatch, names: tuple[str, ...]) -> list[int]:
    """Row indices where the partition values change (nulls equal nulls, NaN equals NaN), starting with 0."""
    n = batch.num_rows
    if n <= 1:
        return [0]
    change = None
    for name in names:
        col = batch.column(batch.schema.get_field_index(name))
        a, b = col.slice(1), col.slice(0, n - 1)
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        if pa.types.is_floating(col.type):
            same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
        differs = pc.invert(same)
        change = differs if change is None else pc.or_(change, differs)
    return [0, *[i + 1 for i in pc.indices_nonzero(change).to_pylist()]]


class _RollingFile:
    def __init__(self, owner: FileWriter, key: str):
        self.owner = owner
        self.key = key
        self.path = owner.next_path(json.loads(key)["dir"])
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.rows = 0
        self.stream = None
        self.writer = None
        self.row_group_bytes = max(1 << 20, min(ROW_GROUP_BYTES, owner.target_file_size // 2))

    def write(self, batch: pa.RecordBatch):
        self.pending.append(batch)
        self.pending_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self.pending_bytes >= self.row_group_bytes:
            self.flush()
            if self.stream.tell() >= self.owner.target_file_size:
                return self.close()
        return None

    def _open(self, first: pa.Table) -> None:
        _, root_path = self.owner.storage.filesystem(self.owner.root_uri)
        full = f"{root_path}/{self.path}"
        self.owner._opened.append(full)
        if isinstance(self.owner._fs, pa.fs.LocalFileSystem):  # object stores have no directories to create
            self.owner._fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
        self.stream = self.owner._fs.open_output_stream(full)
        self.writer = pq.ParquetWriter(
            self.stream,
            self.owner.arrow_schema,
            compression=self.owner.compression,
            compression_level=self.owner.compression_level,
            use_dictionary=self.owner.dictionary_columns(first),
            write_statistics=True,
        )

    def flush(self) -> None:
        if not self.pending:
            return
        table = pa.Table.from_batches(self.pending, schema=self.owner.arrow_schema)
        if self.writer is None:
            self._open(table)
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.pending, self.pending_bytes = [], 0

    def close(self) -> dict:
        self.flush()
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        footer = pa.BufferOutputStream()
        self.writer.writer.metadata.write_metadata_file(footer)
        return {
            "path": self.path,
            "size": size,
            "record_count": self.rows,
            "partition_key": self.key,
            "footer": footer.getvalue().to_pybytes(),
        }


def _dictionary_columns(table: pa.Table) -> list[str]:
    """Dictionary-encode only low-cardinality columns: faster writes, same or smaller files."""
    cols = []
    table = table.slice(0, DICTIONARY_SAMPLE_ROWS)  # a sample decides; counting distinct values of every row costs
    n = max(1, table.num_rows)
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if pa.types.is_nested(t) or pa.types.is_boolean(t):
            continue
        if pc.count_distinct(col).as_py() <= max(16, n // 20):
            cols.append(name)
    return cols


_FILE_ROW_ARROW = pa.schema(
    [("path", pa.string()), ("size", pa.int64()), ("record_count", pa.int64()), ("partition_key", pa.string()), ("footer", pa.binary())]
)


def _file_rows(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=_FILE_ROW_ARROW)


# ---------------------------------------------------------------- driver side


@dataclass(frozen=True)
class WrittenFile:
    """Metadata of one Parquet file written by an executor (no rows)."""

    path: str  # relative to the table root
    size: int
    record_count: int
    partition_values: tuple  # Iceberg internal representation, in partition spec order
    footer: bytes

    def parquet_metadata(self) -> pq.FileMetaData:
        return pq.read_metadata(pa.BufferReader(self.footer))


def write_files(
    df,
    *,
    root_uri: str,
    schema: Schema,
    spec: PartitionSpec,
    delta_columns: list[str],
    storage: StorageConfig,
    target_file_size: int,
    compression: str = "zstd",
    compression_level: int | None = 3,
    table_name: str = "",
    file_names: dict[int, str] | None = None,
) -> list[WrittenFile]:
    """Write `df` as Parquet files under `<root_uri>/data/`, distributed over the executors.

    If any task fails, every file of this write is removed before the error (one line, naming the table
    and the executor's cause, which stays the `__cause__`) reaches the caller."""
    write_id = uuid.uuid4().hex[:16]
    arrow_schema = arrow_file_schema(schema, file_names)
    key_columns: tuple[str, ...] = ()
    keyer = None
    if spec.fields:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        from .partition_columns import partition_columns

        keyer = PartitionKeyer(schema.model_dump_json(), spec.model_dump_json(), tuple(delta_columns))
        exprs = partition_columns(schema, spec)
        if exprs is not None:
            # Spark computes Iceberg's partition values (no Python pass); the writer turns each run into a key.
            key_columns = tuple(f"{PARTITION_VALUE_PREFIX}{i}" for i in range(len(exprs)))
            df = df.select("*", *[e.alias(k) for e, k in zip(exprs, key_columns)])
            df = df.repartition(*key_columns)  # each key in one task; the writer fans out by key (no sort)
        else:
            keyed_schema = StructType([*df.schema.fields, StructField(PARTITION_KEY_COLUMN, StringType(), False)])
            df = df.mapInArrow(keyer, keyed_schema).repartition(F.col(PARTITION_KEY_COLUMN)).sortWithinPartitions(PARTITION_KEY_COLUMN)
    writer = FileWriter(
        root_uri, write_id, arrow_schema, storage, target_file_size, compression, compression_level,
        key_columns=key_columns, keyer=keyer if key_columns else None, input_names=_input_names(schema, file_names),
    )
    rows = run_write_job(df.mapInArrow(writer, _file_row_schema()), write_id, storage=storage, root_uri=root_uri, table_name=table_name)
    return written_files(rows)


def _input_names(schema: Schema, file_names: dict[int, str] | None) -> tuple[str, ...] | None:
    return tuple(f.name for f in schema.fields) if file_names else None


def file_writer(settings: dict, write_id: str, storage: StorageConfig) -> FileWriter:
    """A FileWriter with a table's layout and Parquet settings (`table_write_settings`), for executor tasks whose rows carry their partition key."""
    return FileWriter(
        settings["root_uri"], write_id, arrow_file_schema(settings["schema"], settings["file_names"]), storage, settings["target_file_size"],
        settings["compression"], settings["compression_level"], input_names=_input_names(settings["schema"], settings["file_names"]),
    )


def run_write_job(mapped, write_id: str, *, storage: StorageConfig, root_uri: str, table_name: str) -> list:
    """Collect `mapped`, a DataFrame whose tasks write this write's files (named `<write_id>-...`) and
    return one small row per file (never table rows). If any task fails, every file of the write is
    removed before the error (one line, naming the table and the executor's cause, which stays the
    `__cause__`) reaches the caller."""
    sc = mapped.sparkSession.sparkContext
    group = f"lakehouse-write-{write_id}"
    previous_group = sc.getLocalProperty(_JOB_GROUP)
    sc.setLocalProperty(_JOB_GROUP, group)  # this write's jobs, to wait for their tasks if it fails
    try:
        return mapped.collect()
    except Exception as e:
        _stop_tasks(sc, group)
        remove_written_files(storage, root_uri, write_id)
        raise executor_error(table_name, storage, root_uri, e) from e
    finally:
        sc.setLocalProperty(_JOB_GROUP, previous_group)


def written_files(rows) -> list[WrittenFile]:
    """The writer's file rows (FILE_ROW_FIELDS) as WrittenFiles."""
    files = []
    for r in rows:
        key = json.loads(r["partition_key"])
        files.append(
            WrittenFile(
                path=r["path"],
                size=r["size"],
                record_count=r["record_count"],
                partition_values=tuple(decode_partition_value(v) for v in key["values"]),
                footer=bytes(r["footer"]),
            )
        )
    return files


def _file_row_schema():
    """The writer's output rows as a StructType (a DDL string would be parsed by the JVM on every write, ~7 ms)."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    types = {"string": StringType(), "long": LongType(), "binary": BinaryType()}
    return StructType([StructField(name, types[t]) for name, t in FILE_ROW_FIELDS])


def write_table_files(df, table, storage: StorageConfig, *, schema: Schema | None = None, target_file_size: int | None = None) -> list[WrittenFile]:
    """`write_files` with the table's own layout and Parquet settings (`table_write_settings`), so every
    writer of a table agrees."""
    return write_files(df, storage=storage, **table_write_settings(table, schema or table.schema(), target_file_size))


def table_write_settings(table, schema: Schema, target_file_size: int | None = None) -> dict:
    """A table's layout and Parquet settings as `write_files` arguments: location, schema, partition spec,
    Delta partition columns, target file size, codec and level, its name for error messages, and the columns'
    names in the files (Delta column mapping's physical names; None: the columns' names)."""
    from .delta_column_mapping import file_names
    from .properties import TableProperties
    from .spec import ALL_FORMATS, DEFAULT_TARGET_FILE_SIZE, delta_partition_columns
    from .storage import normalize_uri

    props = table.properties
    return dict(
        root_uri=normalize_uri(table.location()),
        schema=schema,
        spec=table.spec(),
        # Iceberg-only tables have no Delta partition values to refuse.
        delta_columns=delta_partition_columns(table.spec(), schema) if "delta" in props.get(TableProperties.FORMATS, ",".join(ALL_FORMATS)).split(",") else [],
        target_file_size=target_file_size or int(props.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE)),
        compression=props.get("write.parquet.compression-codec", "zstd"),
        compression_level=int(props.get("write.parquet.compression-level", "3")),
        table_name=".".join(table.name()),
        file_names=file_names(table, schema),
    )


_JOB_GROUP = "spark.jobGroup.id"  # what SparkContext.setJobGroup sets


def _stop_tasks(sc, group: str, timeout_s: float = 60.0) -> None:
    """Cancel what is left of a failed write's jobs and wait until none of their tasks runs. When a job
    fails, its other tasks are still running (Spark kills them asynchronously): one of them could open
    a file after the driver swept the write's files, and a killed Python worker cannot remove it."""
    import time

    sc.cancelJobGroup(group)
    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                running += stage.numActiveTasks if stage is not None else 0
        if not running:
            return
        time.sleep(0.05)
    log.warning("tasks of the failed write %s still run after %.0f s; removing its files now", group, timeout_s)


def remove_written_files(storage: StorageConfig, root_uri: str, write_id: str) -> None:
    """Delete every file of one write (its names start with the write id) under `<root>/data/`: what the
    finished tasks of a failed job wrote, and what killed tasks could not clean up themselves."""
    fs, root = storage.filesystem(join_uri(root_uri, "data"))
    try:
        found = fs.get_file_info(pa.fs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as e:  # the storage error itself (e.g. access denied) is what the caller reports
        log.warning("cannot list %s to remove a failed write's files: %s", root, e)
        return
    for info in found:
        if info.type == pa.fs.FileType.File and info.base_name.startswith(f"{write_id}-"):
            try:
                fs.delete_file(info.path)
            except OSError as e:
                log.warning("cannot remove %s of a failed write: %s", info.path, e)


def executor_error(table_name: str, storage: StorageConfig, root_uri: str, error: BaseException) -> Exception:
    """A failed Spark job as one line naming the table and the cause (the executor's last error line)."""
    from .storage import storage_error

    if (clear := storage_error(storage, root_uri, error)) is not None:
        return clear  # access denied, endpoint, region: the actionable storage advice
    cause = _executor_cause(error, limit=2000)
    refused = re.search(r"UnrepresentableValue: (.*)", cause)  # Python's (keyer) or a Spark raise_error (partition_columns)
    if refused:
        return InputError(f"Table {table_name}: {refused.group(1)} Nothing was written or committed.")
    cause = _one_line(cause)
    return WriteError(f"Table {table_name}: writing the data files failed on the executors: {cause}. Nothing was committed and the files this write had written were removed.")


def _executor_cause(error: BaseException, limit: int = 240) -> str:
    """The Python worker's final `Type: message` line, else the first line of Spark's task failure."""
    text = str(error)
    if "Traceback (most recent call last)" in text:
        tail = text.rsplit("Traceback (most recent call last)", 1)[1]
        lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.startswith((" ", "\t")) and ": " in ln]
        if lines:
            return _one_line(lines[-1], limit)
    m = re.search(r"most recent failure: Lost task .*? executor [^)]*\): (.*)", text)  # "(localhost executor driver)"
    if m:
        return _one_line(m.group(1), limit)
    return _one_line(f"{type(error).__name__}: {text.strip().splitlines()[0] if text.strip() else ''}", limit)


def _one_line(s: str, limit: int = 240) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"

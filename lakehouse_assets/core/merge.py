"""Merge (upsert + CDC delete) by key, copy-on-write, so Iceberg and Delta keep the identical file set.

1. `prepare_batch` validates the incoming batch before anything is written: the key and control
   columns exist, no key is null, and duplicate keys are resolved (last row by `order_by` wins) or
   refused. Control columns (operation, deleted-at) mark deletes and are not stored.
2. `plan` finds the files to rewrite in three narrowing steps:
   a. a tiny Spark aggregate gives each key's min/max (and the distinct values when few);
   b. Iceberg scan planning prunes live files by partition and min/max with that filter (candidates);
   c. a distributed semi-join of the candidates' keys with the batch's keys tells which candidates
      really hold a matched key; only those distinct file paths reach the driver.
   A small batch (a filled cache of at most `KEYS_ON_DRIVER_ROWS` rows, e.g. a CDC batch) takes a
   shorter road with the same outcome: its key columns come to the driver, as the build side of a
   broadcast join would; the checks and key ranges of (a) are computed there from them, and (c) is
   done by pyarrow tasks that read only the candidates' key columns and test them against that key set.
3. Matched files are rewritten: their rows minus the batch's keys, plus the batch's inserted/updated
   rows, one file per partition. A small batch's rewrite is the same job as its matching
   (`_rewrite_in_one_job`: its upserts travel with the tasks, grouped by partition with the candidates;
   no shuffle, no second job); any other batch is rewritten in Spark (an anti-join, then `write_files`,
   which shuffles by partition). Files without a matched key are never opened for writing and stay
   live as they are.
The commit pipeline commits removes (matched files) + adds (the rewrite) as ONE Iceberg overwrite snapshot,
which the Delta mirror turns into ONE Delta commit (remove + add).
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, In, LessThanOrEqual
from pyiceberg.manifest import DataFile

from .errors import InputError, SpecError
from .evolution import column_names_moved
from .iceberg_committer import live_data_files
from .properties import SummaryKeys
from .reader import _ParquetFileReader, file_uris, map_paths
from .type_mapping import SPARK_FIELD_ID_KEY, arrow_file_schema, iceberg_to_spark_schema

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from .transaction import FileChanges
    from .write_modes import WriteTarget

DEFAULT_DELETE_VALUES = ("delete", "d", "D", "DELETE")
IN_SET_LIMIT = 200  # up to this many distinct values of a single key, prune with an In-set instead of a range
# A cached and filled batch of at most this size is checked in one task: no shuffle, one Spark job instead of
# two (the check of a small CDC batch is mostly per-job latency: ~0.2 -> ~0.13 s at 2k rows)...
SMALL_BATCH_BYTES = 32 * 1024 * 1024
# ...and if it has at most this many rows, its keys are checked and matched from the driver (module
# docstring): ~0.8 MB of long keys, below Spark's own broadcast-join threshold (10 MB).
KEYS_ON_DRIVER_ROWS = 100_000
KEYS_ON_DRIVER_BYTES = 10 * 1024 * 1024
# A small batch's upserts of at most this much Arrow travel with the tasks of its one-job rewrite
# (`_rewrite_in_one_job`), each task reading at most this many candidates of one partition.
UPSERTS_ON_DRIVER_BYTES = 32 * 1024 * 1024
FILES_PER_TASK_GROUP = 16
# A cached batch of at most this size comes to the driver whole in the check's one collect (its upserts then
# need no second job); a larger one brings its keys only.
ROWS_ON_DRIVER_BYTES = 8 * 1024 * 1024
# Helper columns hold a space, which user column names cannot (spec._check_names): they never collide.
_DELETE = "_lakehouse merge delete"
_PATH = "_lakehouse merge file"
_RANK = "_lakehouse merge rank"
_REWRITTEN = "_lakehouse merge rewritten"  # the one-job rewrite's rows naming a file it rewrote
_POSITION = "_lakehouse merge position"


@dataclass
class MergeOptions:
    keys: tuple[str, ...]
    operation_column: str | None = None
    delete_values: tuple = DEFAULT_DELETE_VALUES
    deleted_at_column: str | None = None
    order_by: tuple[str, ...] = ()

    @classmethod
    def build(cls, identifier: str, merge_keys, operation_column=None, delete_values=None, deleted_at_column=None, order_by=None):
        if not merge_keys:
            raise SpecError(
                f"Table {identifier}: mode='merge' needs merge_keys, the columns that identify a row, "
                "e.g. merge_keys=['customer_id'] (asset metadata 'merge_keys')."
            )
        keys = (merge_keys,) if isinstance(merge_keys, str) else tuple(dict.fromkeys(merge_keys))  # a repeated key counts once
        order = (order_by,) if isinstance(order_by, str) else tuple(order_by or ())
        deletes = (delete_values,) if isinstance(delete_values, str) else tuple(delete_values or DEFAULT_DELETE_VALUES)
        return cls(keys, operation_column, deletes, deleted_at_column, order)

    @property
    def control_columns(self) -> list[str]:
        return [c for c in (self.operation_column, self.deleted_at_column) if c]


@dataclass
class KeyStats:
    """Per key column min/max and the number of distinct keys of the batch (from the validation aggregate)."""

    ranges: dict
    distinct_keys: int
    deduplicated: bool = False  # the batch is the last row per key of the input (a window over it), not a projection
    values: pa.Table | None = None  # the batch's distinct keys, when a small batch brought them to the driver
    rows: pa.Table | None = None  # the whole prepared batch, when it is small enough to come too (_rows_on_driver)


@dataclass
class MergeStats:
    candidate_files: int = 0
    matched_files: int = 0
    live_files: int = 0


def prepare_batch(identifier: str, df, opts: MergeOptions):
    """(batch with one row per key and a boolean delete flag, control columns dropped; KeyStats). Raises before any write."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    missing = [c for c in (*opts.keys, *opts.control_columns, *opts.order_by) if c not in df.columns]
    if missing:
        raise SpecError(
            f"Table {identifier}: merge column(s) {missing} are not in the data ({', '.join(df.columns)}). "
            "Check merge_keys, operation_column, deleted_at_column and order_by."
        )
    if reserved := [c for c in df.columns if c in (_DELETE, _PATH, _RANK)]:
        raise SpecError(f"Table {identifier}: column(s) {reserved} are reserved for the merge's own bookkeeping; rename them.")
    if set(opts.keys) & set(opts.control_columns):
        raise SpecError(f"Table {identifier}: a merge key cannot also be the operation or deleted-at column.")
    delete = F.lit(False)
    if opts.operation_column:
        delete = delete | F.coalesce(F.col(opts.operation_column).cast("string").isin(*[str(v) for v in opts.delete_values]), F.lit(False))
    if opts.deleted_at_column:
        delete = delete | F.col(opts.deleted_at_column).isNotNull()
    cached = _filled_cache(df)
    cached_rows = cached[0] if cached is not None else None
    prepared = df.withColumn(_DELETE, delete).drop(*opts.control_columns)
    rows = _rows_on_driver(prepared, opts.keys, cached)
    values = rows.select(list(opts.keys)) if rows is not None else _keys_on_driver(df, opts.keys, cached_rows)
    if values is not None:
        checks, values = _checks_of(values, opts.keys)
    else:
        any_null = F.lit(False)
        for k in opts.keys:
            any_null = any_null | F.col(k).isNull()
        # One tiny aggregate: null keys, duplicate keys, and the key ranges that prune candidate files later.
        ranges = [x for k in opts.keys for x in (F.min(k).alias(f"min_{k}"), F.max(k).alias(f"max_{k}"))]
        # A filled small cache is read in one task (no shuffle, one job instead of two); any other input keeps
        # the parallel aggregate: a first action on an unfilled cache computes its whole input.
        checked = df.coalesce(1) if cached_rows is not None else df
        checks = checked.groupBy(*opts.keys).agg(F.count(F.lit(1)).alias("n")).agg(
            F.sum(F.when(any_null, F.col("n")).otherwise(0)).alias("null_rows"),
            F.max(F.when(~any_null, F.col("n"))).alias("max_dup"),
            F.count(F.lit(1)).alias("distinct_keys"),
            *ranges,
        ).first().asDict()
    key_stats = KeyStats({k: (checks[f"min_{k}"], checks[f"max_{k}"]) for k in opts.keys}, checks["distinct_keys"] or 0, values=values, rows=rows)
    if checks["null_rows"]:
        raise InputError(
            f"Table {identifier}: {checks['null_rows']} row(s) of the merge batch have a null merge key "
            f"({', '.join(opts.keys)}). Merge keys must identify a row: fill or filter them; nothing was committed."
        )
    if (checks["max_dup"] or 0) > 1:
        if not opts.order_by:
            raise InputError(
                f"Table {identifier}: the merge batch has several rows for the same key ({', '.join(opts.keys)}) and no "
                "order_by to choose between them. Set order_by (asset metadata 'merge_order_by', e.g. an updated_at or "
                "sequence column: the last row wins) or deduplicate the batch; nothing was committed."
            )
        # Last row by order_by wins; a row without an ordering value loses to one with. A tie for last is ambiguous.
        key_stats.deduplicated = True
        key_stats.rows = None  # the input's rows, not the deduplicated batch's (its distinct keys are the same)
        w = W.partitionBy(*opts.keys).orderBy(*[F.col(c).desc_nulls_last() for c in opts.order_by])
        df = df.withColumn(_RANK, F.rank().over(w)).filter(F.col(_RANK) == 1).drop(_RANK)
        if df.groupBy(*opts.keys).count().filter("count > 1").limit(1).count():
            raise InputError(
                f"Table {identifier}: the merge batch has several rows for the same key ({', '.join(opts.keys)}) with the same "
                f"latest {', '.join(opts.order_by)}, so none of them is the last. Add a tie-breaking column to order_by or "
                "deduplicate the batch; nothing was committed."
            )
        return df.withColumn(_DELETE, delete).drop(*opts.control_columns), key_stats
    return prepared, key_stats


def _keys_on_driver(df, keys: Sequence[str], cached_rows: int | None, whole: bool = False) -> pa.Table | None:
    """The key columns of `df` (`whole`: all its columns) as an Arrow table on the driver, when `df` reads a
    filled small cache of `cached_rows` <= KEYS_ON_DRIVER_ROWS rows and the keys are of types Arrow compares
    as Spark does; else None."""
    from pyspark.sql import types as T

    # Types whose Arrow equality and ordering are Spark's: integers, strings, dates, booleans, decimals.
    exact = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType, T.DateType, T.BooleanType, T.DecimalType)
    types = {f.name: f.dataType for f in df.schema.fields}
    if not all(isinstance(types.get(k), exact) for k in keys):
        return None  # floats (NaN, -0.0), timestamps (time zones) and nested keys keep Spark's join
    if cached_rows is None or cached_rows > KEYS_ON_DRIVER_ROWS:
        return None
    collected = df if whole else df.select(*keys)  # (a select of every column costs py4j round trips, ~30 ms)
    try:
        batches = collected._collect_as_arrow()  # PySpark's Arrow collect (toPandas uses it)
    except AttributeError:  # a private API: if it goes, the Spark road remains
        return None
    values = pa.Table.from_batches(batches) if batches else pa.Table.from_batches([], _arrow_schema(collected.schema))
    # Keys of a broadcast's size at most (long strings could make 100k rows large), or Spark's road.
    return values if values.select(list(keys)).nbytes <= KEYS_ON_DRIVER_BYTES else None


def _arrow_schema(spark_schema) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


def _rows_on_driver(prepared, keys: Sequence[str], cached: tuple[int, int] | None) -> pa.Table | None:
    """The whole prepared batch (its columns and the delete flag) as an Arrow table on the driver, when it
    reads a filled cache of at most KEYS_ON_DRIVER_ROWS rows and ROWS_ON_DRIVER_BYTES, with keys of exact
    types: one collect gives the checks their keys and the one-job rewrite its upserts. Else None."""
    if cached is None or cached[1] > ROWS_ON_DRIVER_BYTES:
        return None
    try:
        rows = _keys_on_driver(prepared, keys, cached[0], whole=True)
    except Exception:  # noqa: BLE001 - a column Arrow cannot carry: the keys alone, and any error, come next
        return None
    return rows if rows is not None and rows.nbytes <= UPSERTS_ON_DRIVER_BYTES else None


def _filled_cache_rows(df) -> int | None:
    cached = _filled_cache(df)
    return cached[0] if cached is not None else None


def _filled_cache(df) -> tuple[int, int] | None:
    """(rows, bytes) of the cache `df` reads (through projections only) if it is filled and at most
    SMALL_BATCH_BYTES (a CDC batch the caller cached and counted, or one the merge's own check filled); else None."""
    try:  # Spark internals (3.5's InMemoryRelation / CachedRDDBuilder); any change falls back to the Spark path
        plan = df._jdf.queryExecution().optimizedPlan()
        while plan.getClass().getSimpleName() == "Project":
            plan = plan.child()
        if plan.getClass().getSimpleName() != "InMemoryRelation":
            return None
        cache = plan.cacheBuilder()
        size = int(cache.sizeInBytesStats().value())
        if not cache.isCachedColumnBuffersLoaded() or size > SMALL_BATCH_BYTES:
            return None
        return int(cache.rowCountStats().value()), size
    except Exception:  # noqa: BLE001
        return None


def _checks_of(values: pa.Table, keys: Sequence[str]) -> tuple[dict, pa.Table]:
    """The validation aggregate's figures, from the batch's key columns on the driver; and the distinct keys."""
    import pyarrow.compute as pc

    keys = list(keys)
    null_rows = 0
    if any(values.column(k).null_count for k in keys):
        any_null = pc.is_null(values.column(keys[0]))
        for k in keys[1:]:
            any_null = pc.or_(any_null, pc.is_null(values.column(k)))
        null_rows = pc.sum(any_null.cast(pa.int64())).as_py()
    groups = values.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    checks = {"null_rows": null_rows, "max_dup": pc.max(groups.column("count_all")).as_py(), "distinct_keys": groups.num_rows}
    for k in keys:
        lo_hi = pc.min_max(values.column(k))
        checks[f"min_{k}"], checks[f"max_{k}"] = lo_hi["min"].as_py(), lo_hi["max"].as_py()
    return checks, groups.select(keys)


def data_schema(batch):
    """The batch's schema without the merge's delete flag (no `select`: each is a round trip to the JVM)."""
    from pyspark.sql.types import StructType

    return StructType([f for f in batch.schema.fields if f.name != _DELETE])


def _key_filter(batch, keys: Sequence[str], key_stats: KeyStats) -> BooleanExpression:
    """An Iceberg filter covering every key of the batch: min/max per key, or an In-set when few."""
    if len(keys) == 1 and key_stats.distinct_keys <= IN_SET_LIMIT:
        if key_stats.values is not None:
            values = key_stats.values.column(0).to_pylist()
        else:
            values = [r[0] for r in batch.select(keys[0]).distinct().collect()]  # at most IN_SET_LIMIT values
        if all(_prunable(v) for v in values):
            return In(keys[0], {_literal(v) for v in values})
    expr: BooleanExpression = AlwaysTrue()
    for k in keys:
        lo, hi = key_stats.ranges[k]
        if _prunable(lo) and _prunable(hi):
            expr = And(expr, And(GreaterThanOrEqual(k, _literal(lo)), LessThanOrEqual(k, _literal(hi))))
    return expr


def _prunable(v) -> bool:
    # Timestamps are left out: Spark hands the driver naive local-time datetimes, an unsafe bound.
    return isinstance(v, (int, str, dt.date, decimal.Decimal)) and not isinstance(v, (bool, dt.datetime))


def _literal(v):
    return v.isoformat() if isinstance(v, dt.date) else v  # pyiceberg binds ISO strings to date columns


def plan(spark, target: "WriteTarget", batch, key_stats: KeyStats, opts: MergeOptions, changes: "FileChanges") -> MergeStats:
    """Write the merged files into `changes` (adds, removes = matched files); returns the pruning stats.

    `target.schema` is the table's schema, evolved if the batch adds columns; existing files may hold
    narrower types (`target.cast_files`).
    """
    from pyspark.sql import functions as F

    table = target.table
    spark_schema = iceberg_to_spark_schema(target.schema)
    stats = MergeStats()
    keys = list(opts.keys)
    batch_keys = batch.select(*keys)  # prepare_batch left one row per key: no distinct (a shuffle) needed
    candidates: list[DataFile] = []
    existing_columns = {f.name for f in table.schema().fields}
    # A key column the table does not have yet is null in every existing row: nothing can match.
    # An empty batch matches nothing (its key filter would be AlwaysTrue: every file a candidate).
    if table.current_snapshot() is not None and set(keys) <= existing_columns and key_stats.distinct_keys:
        stats.live_files = _live_file_count(table)
        candidates = live_data_files(table, row_filter=_key_filter(batch, keys, key_stats))
    stats.candidate_files = len(candidates)
    matched: list[DataFile] = []
    # A small batch's keys: from the check (a cached batch), or now from the cache the check filled (one tiny
    # job, which the shorter matching repays). A deduplicated batch is a window over the input, not a projection
    # of a filled cache, so it gets here with keys only if the caller's cache gave them to the check.
    values = key_stats.values if key_stats.values is not None or not candidates else _keys_on_driver(batch, keys, _filled_cache_rows(batch))
    def upserts():
        return _conform(batch.filter(~F.col(_DELETE)), spark_schema)

    if values is not None:
        rewritten = _rewrite_in_one_job(spark, target, candidates, values, upserts, changes, batch_rows=key_stats.rows, batch_schema=batch.schema)
        if rewritten is not None:
            stats.matched_files = len(rewritten)
            changes.removes += rewritten
            return stats
    if candidates and values is not None:
        holding = _files_holding(spark, target, candidates, values)
        matched = [f for f in candidates if f.file_path in holding]
    elif candidates:
        by_uri = {f.file_path: f for f in candidates}
        existing = target.read(spark, candidates, path_column=_PATH)
        hits = existing.select(*keys, _PATH).join(batch_keys, keys, "left_semi")
        spelled = [r[0] for r in hits.select(_PATH).distinct().collect()]  # file paths only
        matched = [by_uri[u] for u in file_uris(spelled, list(by_uri))]
    stats.matched_files = len(matched)
    if matched:
        kept = target.read(spark, matched).join(batch_keys, keys, "left_anti")
        merged = kept.unionByName(upserts())
    else:
        merged = upserts()
    if not table.spec().fields:
        # Unpartitioned: one Spark partition per output file otherwise (the union adds the batch's partitions).
        merged = merged.coalesce(max(1, len(matched)))
    target.write(merged, changes)
    changes.removes += matched
    return stats


def _conform(df, spark_schema):
    """`df` with the table's columns and types; columns it lacks are null (older optional columns).
    A column already of its type is passed as is (each cast is a round trip to the JVM)."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    return df.select(*[
        F.col(f.name) if have.get(f.name) == f.dataType else (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in spark_schema.fields
    ])


def _files_holding(spark, target: "WriteTarget", files: list[DataFile], values: pa.Table) -> set[str]:
    """Paths of the `files` holding at least one key of `values` (distinct keys, on the driver): one Spark
    job whose pyarrow tasks read each file's key columns only (by field id after renames, cast to the
    table's types) and test them against the keys. No row leaves the executors; only paths come back."""
    from pyspark.sql.types import StringType, StructField, StructType

    holder = _KeyHolder(*_key_reader(target, values))
    schema = StructType([StructField("path", StringType(), False)])
    hits = map_paths(spark, [f.file_path for f in files], holder, schema, tasks=min(len(files), spark.sparkContext.defaultParallelism))
    return {r[0] for r in hits.collect()}


def _key_reader(target: "WriteTarget", values: pa.Table) -> tuple[_ParquetFileReader, bytes]:
    """A reader of the table's key columns (by field id after renames, in the table's types) and the
    batch's distinct keys cast to those types, as an Arrow IPC stream for the executors."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    keys = values.column_names
    spark_schema = iceberg_to_spark_schema(target.schema, field_ids=column_names_moved(target.table))
    key_schema = to_arrow_schema(StructType([spark_schema[k] for k in keys]))
    field_ids = {k: spark_schema[k].metadata[SPARK_FIELD_ID_KEY] for k in keys if SPARK_FIELD_ID_KEY in (spark_schema[k].metadata or {})}
    # The table's types: schema evolution only widens a table's key type to the batch's, so this never narrows.
    values = values.cast(pa.schema([pa.field(f.name, f.type) for f in key_schema]))
    return _ParquetFileReader(target.storage, key_schema, field_ids=field_ids or None), _ipc(values)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


class _Keys:
    """The batch's distinct keys on an executor: which files hold one, and a file's rows without them."""

    def __init__(self, reader: _ParquetFileReader, keys_ipc: bytes):
        self.reader = reader
        self.values = pa.ipc.open_stream(keys_ipc).read_all()
        self.names = self.values.column_names
        self.single = self.values.column(0).combine_chunks() if len(self.names) == 1 else None

    def held_in(self, uri: str) -> bool:
        import pyarrow.compute as pc

        # One test per file (each builds a hash table of the keys): the key columns of a file are small.
        rows = pa.Table.from_batches(list(self.reader(_path_batches(uri))), schema=self.reader.arrow_schema)
        if self.single is not None:
            return pc.any(pc.is_in(rows.column(0), value_set=self.single)).as_py() is True
        return rows.join(self.values, keys=self.names, join_type="left semi").num_rows > 0

    def without_keys(self, rows: pa.RecordBatch) -> pa.Table:
        """`rows` minus those holding one of the keys (a null key never equals one: the row stays)."""
        import pyarrow.compute as pc

        table = pa.Table.from_batches([rows])
        if self.single is not None:
            held = pc.fill_null(pc.is_in(table.column(self.names[0]), value_set=self.single), False)
            return table.filter(pc.invert(held))
        # Composite keys: Arrow's join refuses nested non-key columns, so join the keys and a row number only.
        positions = pa.array(range(table.num_rows), pa.int64())
        keyed = table.select(self.names).append_column(_POSITION, positions)
        held = keyed.join(self.values, keys=self.names, join_type="left semi").column(_POSITION)
        return table.filter(pc.invert(pc.is_in(positions, value_set=held)))


def _path_batches(uri: str):
    return iter([pa.record_batch([pa.array([uri], pa.string())], names=["path"])])


@dataclass
class _KeyHolder:
    """mapInArrow function: file paths in, the paths of the files holding one of the keys out (on the executors)."""

    reader: _ParquetFileReader  # reads the key columns, in the table's types
    keys_ipc: bytes  # the distinct keys, an Arrow IPC stream

    def __call__(self, batches):
        keys = _Keys(self.reader, self.keys_ipc)
        for batch in batches:
            hits = [uri for uri in batch.column(0).to_pylist() if keys.held_in(uri)]
            yield pa.RecordBatch.from_arrays([pa.array(hits, pa.string())], names=["path"])


def _rewrite_in_one_job(
    spark, target: "WriteTarget", candidates: list[DataFile], values: pa.Table, upserts, changes: "FileChanges", *, batch_rows: pa.Table | None = None, batch_schema=None
) -> list[DataFile] | None:
    """A small batch's whole merge write in ONE Spark job, no shuffle; the rewritten files (None: not
    this road, nothing done).

    The upserts (at most UPSERTS_ON_DRIVER_BYTES) are on the driver: taken from `batch_rows`, the prepared
    batch the check collected, when they need no cast to the table's types (their partition keys then
    come from pyiceberg's transforms, the writer's own fallback), else collected now with partition
    values computed by Spark as for any write (`upserts()`, their DataFrame). The driver groups them, and the candidate files, by
    partition. Each group goes to one pyarrow task, which tests its files' key columns against the
    batch's keys, reads the files holding one, drops the rows of those keys, and writes the rest with
    the group's upserts through the writer's own `FileWriter`: one file per partition, as the shuffled
    rewrite writes. A kept row's partition is its file's (an Iceberg data file holds one partition of
    its spec), so only tables whose candidates are all of the current spec take this road.
    """
    from pyspark.sql.types import StringType, StructField

    from .delta_values import UnrepresentableValue
    from .partition_columns import partition_columns
    from .writer import (
        PARTITION_VALUE_PREFIX,
        UNPARTITIONED_KEY,
        FileWriter,
        PartitionKeyer,
        _file_row_schema,
        _group_by_columns,
        executor_error,
        run_write_job,
        table_write_settings,
        written_files,
    )

    table = target.table
    spec = table.spec()
    if any(f.spec_id != spec.spec_id for f in candidates):
        return None
    settings = table_write_settings(table, target.schema, target.target_file_size)
    spark_schema = iceberg_to_spark_schema(target.schema, field_ids=column_names_moved(table))
    keyer = PartitionKeyer(target.schema.model_dump_json(), spec.model_dump_json(), tuple(settings["delta_columns"]))
    on_driver = _upserts_of(batch_rows, batch_schema, spark_schema) if batch_rows is not None and batch_schema is not None else None
    value_columns: tuple[str, ...] = ()
    if on_driver is None:
        to_collect = upserts()
        if spec.fields:
            exprs = partition_columns(target.schema, spec)
            if exprs is None:
                return None  # a transform only pyiceberg computes (bucket of a string...): the shuffled rewrite
            value_columns = tuple(f"{PARTITION_VALUE_PREFIX}{i}" for i in range(len(exprs)))
            to_collect = to_collect.select("*", *[e.alias(k) for e, k in zip(exprs, value_columns)])
        try:
            collected = to_collect._collect_as_arrow()  # PySpark's Arrow collect (toPandas uses it)
        except AttributeError:  # a private API: if it goes, the shuffled rewrite remains
            return None
        except Exception as e:  # e.g. a partition value refused by its Spark expression: one line, as the writer's
            raise executor_error(settings["table_name"], target.storage, settings["root_uri"], e) from e
        if sum(b.nbytes for b in collected) > UPSERTS_ON_DRIVER_BYTES:
            return None
    # The batch's upserts by partition key, as Arrow IPC streams (the key values dropped)...
    by_key: dict[str, list[pa.RecordBatch]] = {}
    keys_of: dict[tuple, str] = {}

    def key_of(vals: tuple) -> str:
        if vals not in keys_of:
            keys_of[vals] = keyer.key_for(vals)  # refuses values the Delta log cannot hold, as the writer does
        return keys_of[vals]

    try:
        if on_driver is not None:
            for b in on_driver.to_batches():
                for key, part in _by_partition(b, keyer if spec.fields else None):
                    by_key.setdefault(key, []).append(part)
        else:
            for b in collected:
                groups = _group_by_columns(b, value_columns, key_of) if value_columns else [(UNPARTITIONED_KEY, b)]
                for key, part in groups:
                    by_key.setdefault(key, []).append(part)
    except UnrepresentableValue as e:
        raise InputError(f"Table {target.identifier}: {e} Nothing was written or committed.") from e
    # ...and the candidates by their partition (the same key the writer gives that partition's rows).
    files_by_key: dict[str, list[DataFile]] = {}
    for f in candidates:
        key = keyer.key_of_partition(tuple(f.partition[i] for i in range(len(spec.fields)))) if spec.fields else UNPARTITIONED_KEY
        files_by_key.setdefault(key, []).append(f)
    groups: list[tuple[str, list[str], bytes | None]] = []
    cost: list[tuple[bool, int]] = []
    for key in dict.fromkeys([*files_by_key, *by_key]):
        files = files_by_key.get(key, [])
        chunks = [files[i : i + FILES_PER_TASK_GROUP] for i in range(0, len(files), FILES_PER_TASK_GROUP)] or [[]]
        rows = by_key.get(key)
        for i, chunk in enumerate(chunks):
            upserts_ipc = _ipc(pa.Table.from_batches(rows)) if rows and i == 0 else None
            groups.append((key, [f.file_path for f in chunk], upserts_ipc))
            # A group with upserts most likely rewrites its files (a CDC batch updates the partitions it writes).
            cost.append((upserts_ipc is not None, sum(f.file_size_in_bytes for f in chunk)))
    if not groups:
        return []
    # Dealt round-robin over the tasks, likeliest rewrites and largest files first, so the rewrites spread.
    groups = [g for _, g in sorted(zip(cost, groups), key=lambda cg: cg[0], reverse=True)]
    tasks = min(len(groups), spark.sparkContext.defaultParallelism)
    write_id = uuid.uuid4().hex[:16]
    writer = FileWriter(
        settings["root_uri"], write_id, arrow_file_schema(target.schema), target.storage, settings["target_file_size"],
        settings["compression"], settings["compression_level"],
    )
    field_ids = {f.name: f.metadata[SPARK_FIELD_ID_KEY] for f in spark_schema.fields if SPARK_FIELD_ID_KEY in (f.metadata or {})}
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    row_reader = _ParquetFileReader(target.storage, to_arrow_schema(spark_schema), field_ids=field_ids or None)
    rewrite = _GroupRewriter(*_key_reader(target, values), row_reader, groups, tasks, writer)
    out_schema = StructType([*_file_row_schema().fields, StructField(_REWRITTEN, StringType())])
    mapped = spark.range(tasks, numPartitions=tasks).mapInArrow(rewrite, out_schema)  # one index per task
    rows = run_write_job(mapped, write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    rewritten = {r[_REWRITTEN] for r in rows if r[_REWRITTEN] is not None}
    target.record(written_files([r for r in rows if r[_REWRITTEN] is None]), changes)
    return [f for f in candidates if f.file_path in rewritten]


def _upserts_of(rows: pa.Table, batch_schema, spark_schema) -> pa.Table | None:
    """The prepared batch's inserted/updated rows in the table's columns (those the batch lacks are null),
    from its rows on the driver; None when a column would need a cast (Spark's semantics: collect anew)."""
    import pyarrow.compute as pc

    have = {f.name: f.dataType for f in batch_schema.fields if f.name != _DELETE}
    if not set(have) <= set(spark_schema.fieldNames()):
        return None  # a column spelled in another case (Spark resolves it case-insensitively) or not stored
    if any(f.name in have and have[f.name] != f.dataType for f in spark_schema.fields):
        return None
    kept = rows.filter(pc.invert(rows.column(_DELETE)))
    arrow = _arrow_schema(spark_schema)
    return pa.table({f.name: kept.column(f.name) if f.name in have else pa.nulls(kept.num_rows, f.type) for f in arrow})


def _by_partition(batch: pa.RecordBatch, keyer) -> list[tuple[str, pa.RecordBatch]]:
    """`batch`'s rows per partition key, by pyiceberg's vectorized transforms (`PartitionKeyer.keys`,
    what the writer uses where Spark cannot compute a transform); None keyer: unpartitioned."""
    import pyarrow.compute as pc

    from .writer import PARTITION_KEY_COLUMN, UNPARTITIONED_KEY, _split_by_key

    if not batch.num_rows:
        return []
    if keyer is None:
        return [(UNPARTITIONED_KEY, batch)]
    keyed = batch.append_column(PARTITION_KEY_COLUMN, keyer.keys(batch))
    keyed = keyed.take(pc.sort_indices(keyed.column(PARTITION_KEY_COLUMN)))
    return _split_by_key(keyed, keyed.schema.get_field_index(PARTITION_KEY_COLUMN))


@dataclass
class _GroupRewriter:
    """mapInArrow function of the one-job rewrite: group indexes in; per group, its candidates holding
    one of the keys are rewritten without those keys' rows, with the group's upserts, by the writer's
    `FileWriter`. Out: its file rows, then one row per rewritten file (`_REWRITTEN`)."""

    key_reader: _ParquetFileReader
    keys_ipc: bytes
    row_reader: _ParquetFileReader  # whole rows, in the table's types
    groups: list  # (partition key, candidate URIs, upserts as Arrow IPC or None)
    tasks: int  # task i takes groups i, i + tasks, i + 2 * tasks...
    writer: "object"  # writer.FileWriter

    def __call__(self, batches):
        from .writer import _FILE_ROW_ARROW

        keys = _Keys(self.key_reader, self.keys_ipc)
        rewritten: list[str] = []

        def rows():
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    for key, uris, upserts_ipc in self.groups[task :: self.tasks]:
                        for uri in uris:
                            if not keys.held_in(uri):
                                continue  # stays live as it is
                            rewritten.append(uri)
                            for b in self.row_reader(_path_batches(uri)):
                                yield from _keyed(keys.without_keys(b), key)
                        if upserts_ipc is not None:
                            yield from _keyed(pa.ipc.open_stream(upserts_ipc).read_all(), key)

        for out in self.writer(rows()):
            yield out.append_column(_REWRITTEN, pa.nulls(out.num_rows, pa.string()))
        if rewritten:  # after the writer closed every file: the task's rows come back only if it succeeds
            n = len(rewritten)
            yield pa.RecordBatch.from_arrays(
                [*(pa.nulls(n, f.type) for f in _FILE_ROW_ARROW), pa.array(rewritten, pa.string())], names=[*_FILE_ROW_ARROW.names, _REWRITTEN]
            )


def _keyed(rows: pa.Table, key: str):
    """`rows` as record batches carrying their partition key (the writer's key-column input)."""
    from .writer import PARTITION_KEY_COLUMN

    for b in rows.to_batches():
        if b.num_rows:
            yield b.append_column(PARTITION_KEY_COLUMN, pa.array([key] * b.num_rows, pa.string()))


def _live_file_count(table) -> int:
    """From the snapshot summary (metadata only); scanning every manifest just to count files costs a full plan."""
    summary = table.current_snapshot().summary
    total = summary.additional_properties.get("total-data-files") if summary is not None else None
    return int(total) if total is not None else len(live_data_files(table))


def summary_properties(stats: MergeStats, opts: MergeOptions) -> dict[str, str]:
    """Recorded in the snapshot summary (and the Delta commitInfo): evidence of what pruning left to rewrite."""
    return {
        SummaryKeys.MERGE_KEYS: ",".join(opts.keys),
        SummaryKeys.MERGE_LIVE_FILES: str(stats.live_files),
        SummaryKeys.MERGE_CANDIDATE_FILES: str(stats.candidate_files),
        SummaryKeys.MERGE_REWRITTEN_FILES: str(stats.matched_files),
    }


def concurrent_conflict(spark, table: Table, base_snapshot_id: int | None, batch, opts: MergeOptions, storage, cast_files: bool) -> str | None:
    """Why the snapshots committed after `base_snapshot_id` invalidate a merge planned on it (None: they do not).

    They do when they removed data files (the merge may rewrite them), added delete files, or added
    data files holding a key of the batch (those rows would then exist twice). Only the new files are
    read, keys only, in a distributed semi-join; no row reaches the driver.
    """
    from .delta_committer import snapshot_change
    from .reader import read_parquet_files

    snaps, snap = [], table.current_snapshot()
    while snap is not None and snap.snapshot_id != base_snapshot_id:
        snaps.append(snap)
        snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    if snap is None and base_snapshot_id is not None:
        return f"snapshot {base_snapshot_id}, which the merge read, is no longer an ancestor of the current one"
    ids = [s.snapshot_id for s in reversed(snaps)]
    added: list[DataFile] = []
    for s in reversed(snaps):
        change = snapshot_change(table, s)
        if change.removes or change.delete_files_added:
            return f"snapshot {s.snapshot_id} removed or deleted rows the merge may rewrite"
        added += change.adds
    keys = list(opts.keys)
    if not added or not set(keys) <= {f.name for f in table.schema().fields}:
        return None
    spark_schema = iceberg_to_spark_schema(table.schema())
    new_rows = read_parquet_files(spark, [f.file_path for f in added], spark_schema, storage, cast_files=cast_files)
    if new_rows.select(*keys).join(batch.select(*keys).distinct(), keys, "left_semi").limit(1).count():
        return f"snapshot(s) {ids} added rows with merge keys ({', '.join(keys)}) that this batch also writes"
    return None

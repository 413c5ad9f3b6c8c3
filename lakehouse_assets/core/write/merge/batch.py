"""The merge's input: the batch checked, deduplicated and measured before anything is written.

`prepare_batch` validates the incoming batch: the key and control columns exist, no key is null, and
duplicate keys are resolved (last row by `order_by` wins) or refused. Control columns (operation,
deleted-at) mark deletes (a boolean helper column, `DELETE`) and are not stored. The checks also give
each key's min/max and the number of distinct keys (`KeyStats`), which prune the candidate files.

A small batch (a filled cache of at most `KEYS_ON_DRIVER_ROWS` rows, e.g. a CDC batch) brings its key
columns to the driver, as the build side of a broadcast join would: the checks run there on them, and
the matching tasks (write/merge/tasks.py) test the candidates' keys against that set. A batch small enough
comes whole (`KeyStats.rows`): its upserts then travel with the one-job rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa

from ...errors import InputError, SpecError
from ...model import MergeOptions
from ...spark.compat import collect_arrow, filled_cache_figures
from . import tasks

# A cached and filled batch of at most this size is checked in one task: no shuffle, one Spark job instead of
# two (the check of a small CDC batch is mostly per-job latency: ~0.2 -> ~0.13 s at 2k rows)...
SMALL_BATCH_BYTES = 32 * 1024 * 1024
# ...and if it has at most this many rows, its keys are checked and matched from the driver (module
# docstring): ~0.8 MB of long keys, below Spark's own broadcast-join threshold (10 MB).
KEYS_ON_DRIVER_ROWS = 100_000
KEYS_ON_DRIVER_BYTES = 10 * 1024 * 1024
# A cached batch of at most this size comes to the driver whole in the check's one collect (its upserts then
# need no second job); a larger one brings its keys only.
ROWS_ON_DRIVER_BYTES = 8 * 1024 * 1024
# Helper columns hold a space, which user column names cannot (spec._check_names): they never collide.
DELETE = "_lakehouse merge delete"
PATH = "_lakehouse merge file"
_RANK = "_lakehouse merge rank"


@dataclass
class KeyStats:
    """Per key column min/max and the number of distinct keys of the batch (from the validation aggregate)."""

    ranges: dict
    distinct_keys: int
    deduplicated: bool = False  # the batch is the last row per key of the input (a window over it), not a projection
    values: pa.Table | None = None  # the batch's distinct keys, when a small batch brought them to the driver
    rows: pa.Table | None = None  # the whole prepared batch, when it is small enough to come too (_rows_on_driver)


def prepare_batch(identifier: str, df, opts: MergeOptions):
    """(batch with one row per key and a boolean delete flag, control columns dropped; KeyStats). Raises before any write."""
    from pyspark.sql import functions as F

    _check_merge_columns(identifier, df, opts)
    delete = F.lit(False)  # a delete value in the operation column, or a deleted-at time
    if opts.operation_column:
        delete = delete | F.coalesce(F.col(opts.operation_column).cast("string").isin(*[str(v) for v in opts.delete_values]), F.lit(False))
    if opts.deleted_at_column:
        delete = delete | F.col(opts.deleted_at_column).isNotNull()
    cached = _filled_cache(df)
    cached_rows = cached[0] if cached is not None else None
    prepared = df.withColumn(DELETE, delete).drop(*opts.control_columns)
    rows = _rows_on_driver(prepared, opts.keys, cached)
    values = rows.select(list(opts.keys)) if rows is not None else keys_on_driver(df, opts.keys, cached_rows)
    if values is not None:
        checks, values = _checks_of(values, opts.keys)
    else:
        checks = _key_checks_in_spark(df, opts.keys, cached_rows)
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
        key_stats.deduplicated = True
        key_stats.rows = None  # the input's rows, not the deduplicated batch's (its distinct keys are the same)
        df = _last_row_per_key(identifier, df, opts)
        return df.withColumn(DELETE, delete).drop(*opts.control_columns), key_stats
    return prepared, key_stats


def _check_merge_columns(identifier: str, df, opts: MergeOptions) -> None:
    """Refuse a batch that lacks a merge column, uses a reserved name, or keys on a control column."""
    missing = [c for c in (*opts.keys, *opts.control_columns, *opts.order_by) if c not in df.columns]
    if missing:
        raise SpecError(
            f"Table {identifier}: merge column(s) {missing} are not in the data ({', '.join(df.columns)}). "
            "Check merge_keys, operation_column, deleted_at_column and order_by."
        )
    if reserved := [c for c in df.columns if c in (DELETE, PATH, _RANK)]:
        raise SpecError(f"Table {identifier}: column(s) {reserved} are reserved for the merge's own bookkeeping; rename them.")
    if set(opts.keys) & set(opts.control_columns):
        raise SpecError(f"Table {identifier}: a merge key cannot also be the operation or deleted-at column.")


def _key_checks_in_spark(df, keys: Sequence[str], cached_rows: int | None) -> dict[str, Any]:
    """Null keys, duplicate keys and the key ranges that prune candidate files later, in one tiny Spark aggregate."""
    from pyspark.sql import functions as F

    any_null = F.lit(False)
    for k in keys:
        any_null = any_null | F.col(k).isNull()
    ranges = [x for k in keys for x in (F.min(k).alias(f"min_{k}"), F.max(k).alias(f"max_{k}"))]
    # A filled small cache is read in one task (no shuffle, one job instead of two); any other input keeps
    # the parallel aggregate: a first action on an unfilled cache computes its whole input.
    checked = df.coalesce(1) if cached_rows is not None else df
    return checked.groupBy(*keys).agg(F.count(F.lit(1)).alias("n")).agg(
        F.sum(F.when(any_null, F.col("n")).otherwise(0)).alias("null_rows"),
        F.max(F.when(~any_null, F.col("n"))).alias("max_dup"),
        F.count(F.lit(1)).alias("distinct_keys"),
        *ranges,
    ).first().asDict()


def _last_row_per_key(identifier: str, df, opts: MergeOptions):
    """One row per key: the last by order_by (a row without an ordering value loses to one with); refuses a tie for last."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    w = W.partitionBy(*opts.keys).orderBy(*[F.col(c).desc_nulls_last() for c in opts.order_by])
    df = df.withColumn(_RANK, F.rank().over(w)).filter(F.col(_RANK) == 1).drop(_RANK)
    if df.groupBy(*opts.keys).count().filter("count > 1").limit(1).count():
        raise InputError(
            f"Table {identifier}: the merge batch has several rows for the same key ({', '.join(opts.keys)}) with the same "
            f"latest {', '.join(opts.order_by)}, so none of them is the last. Add a tie-breaking column to order_by or "
            "deduplicate the batch; nothing was committed."
        )
    return df


def keys_on_driver(df, keys: Sequence[str], cached_rows: int | None, whole: bool = False) -> pa.Table | None:
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
    # A filled small cache is read in one task: one wave of the job, however many partitions the batch came in.
    collected = collected.coalesce(1)
    try:
        batches = collect_arrow(collected)  # PySpark's Arrow collect (toPandas uses it)
    except AttributeError:  # a private API: if it goes, the Spark road remains
        return None
    values = pa.Table.from_batches(batches) if batches else pa.Table.from_batches([], arrow_schema(collected.schema))
    # Keys of a broadcast's size at most (long strings could make 100k rows large), or Spark's road.
    return values if values.select(list(keys)).nbytes <= KEYS_ON_DRIVER_BYTES else None


def arrow_schema(spark_schema) -> pa.Schema:
    from ...spark.compat import arrow_schema as to_arrow_schema

    return to_arrow_schema(spark_schema)


def _rows_on_driver(prepared, keys: Sequence[str], cached: tuple[int, int] | None) -> pa.Table | None:
    """The whole prepared batch (its columns and the delete flag) as an Arrow table on the driver, when it
    reads a filled cache of at most KEYS_ON_DRIVER_ROWS rows and ROWS_ON_DRIVER_BYTES, with keys of exact
    types: one collect gives the checks their keys and the one-job rewrite its upserts. Else None."""
    if cached is None or cached[1] > ROWS_ON_DRIVER_BYTES:
        return None
    try:
        rows = keys_on_driver(prepared, keys, cached[0], whole=True)
    except Exception:  # noqa: BLE001 - a column Arrow cannot carry: the keys alone, and any error, come next
        return None
    return rows if rows is not None and rows.nbytes <= tasks.UPSERTS_ON_DRIVER_BYTES else None


def filled_cache_rows(df) -> int | None:
    cached = _filled_cache(df)
    return cached[0] if cached is not None else None


def _filled_cache(df) -> tuple[int, int] | None:
    """(rows, bytes) of the cache `df` reads (through projections only) if it is filled and at most
    SMALL_BATCH_BYTES (a CDC batch the caller cached and counted, or one the merge's own check filled); else None."""
    cached = filled_cache_figures(df)
    return cached if cached is not None and cached[1] <= SMALL_BATCH_BYTES else None


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

    return StructType([f for f in batch.schema.fields if f.name != DELETE])

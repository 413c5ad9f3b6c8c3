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
   (`merge_tasks.rewrite_in_one_job`: its upserts travel with the tasks, grouped by partition with the candidates;
   no shuffle, no second job); any other batch is rewritten in Spark (an anti-join, then `write_files`,
   which shuffles by partition). Files without a matched key are never opened for writing and stay
   live as they are.
A merge given a window (a Dagster partition's slice) writes only upserts inside it and matches only rows inside
it; files straddling its edges are matched row by row in Spark.
The commit pipeline commits removes (matched files) + adds (the rewrite) as ONE Iceberg overwrite snapshot,
which the Delta mirror turns into ONE Delta commit (remove + add).
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, In, LessThanOrEqual
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from ..errors import InputError, SpecError
from ..formats.iceberg_committer import live_data_files
from ..model import FileChanges, MergeOptions
from ..properties import SummaryKeys
from ..read.reader import file_uris
from ..schema.type_mapping import iceberg_to_spark_schema
from ..schema.window import Slice, files_inside
from ..spark.compat import collect_arrow, filled_cache_figures
from . import merge_tasks
from .target import WriteTarget

IN_SET_LIMIT = 200  # up to this many distinct values of a single key, prune with an In-set instead of a range
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
_DELETE = "_lakehouse merge delete"
_PATH = "_lakehouse merge file"
_RANK = "_lakehouse merge rank"


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
    from pyspark.sql import functions as F

    _check_merge_columns(identifier, df, opts)
    delete = F.lit(False)  # a delete value in the operation column, or a deleted-at time
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
        return df.withColumn(_DELETE, delete).drop(*opts.control_columns), key_stats
    return prepared, key_stats


def _check_merge_columns(identifier: str, df, opts: MergeOptions) -> None:
    """Refuse a batch that lacks a merge column, uses a reserved name, or keys on a control column."""
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
        batches = collect_arrow(collected)  # PySpark's Arrow collect (toPandas uses it)
    except AttributeError:  # a private API: if it goes, the Spark road remains
        return None
    values = pa.Table.from_batches(batches) if batches else pa.Table.from_batches([], _arrow_schema(collected.schema))
    # Keys of a broadcast's size at most (long strings could make 100k rows large), or Spark's road.
    return values if values.select(list(keys)).nbytes <= KEYS_ON_DRIVER_BYTES else None


def _arrow_schema(spark_schema) -> pa.Schema:
    from ..spark.compat import arrow_schema as to_arrow_schema

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
    return rows if rows is not None and rows.nbytes <= merge_tasks.UPSERTS_ON_DRIVER_BYTES else None


def _filled_cache_rows(df) -> int | None:
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


def plan(
    spark, target: "WriteTarget", batch, key_stats: KeyStats, opts: MergeOptions, changes: "FileChanges", window: Slice | None = None
) -> MergeStats:
    """Write the merged files into `changes` (adds, removes = matched files); returns the pruning stats.

    `target.schema` is the table's schema, evolved if the batch adds columns; existing files may hold
    narrower types (`target.cast_files`). With a `window` (a partitioned asset merging its partition), the
    batch's upserts must lie inside it and only the table's rows inside it are matched: rows outside it
    are never changed, whatever their keys.
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
    if window is not None:
        _check_inside(target.identifier, batch, window)
    if table.current_snapshot() is not None and set(keys) <= existing_columns and key_stats.distinct_keys:
        stats.live_files = _live_file_count(table)
        row_filter = _key_filter(batch, keys, key_stats)
        candidates = live_data_files(table, row_filter=row_filter if window is None else And(row_filter, window.expression(table)))
    stats.candidate_files = len(candidates)
    # Files that hold rows on both sides of the window are matched row by row in Spark, the window applied.
    straddling = window is not None and bool(files_inside(table, window, candidates)[1])
    inside = (lambda df: F.coalesce(window.spark_filter(df.schema), F.lit(False))) if straddling else None
    matched: list[DataFile] = []
    # A small batch's keys: from the check (a cached batch), or now from the cache the check filled (one tiny
    # job, which the shorter matching repays). A deduplicated batch is a window over the input, not a projection
    # of a filled cache, so it gets here with keys only if the caller's cache gave them to the check.
    values = key_stats.values if key_stats.values is not None or not candidates else _keys_on_driver(batch, keys, _filled_cache_rows(batch))
    def upserts():
        return _conform(batch.filter(~F.col(_DELETE)), spark_schema)

    if values is not None and not straddling:
        on_driver = _upserts_of(key_stats.rows, batch.schema, spark_schema) if key_stats.rows is not None else None
        rewritten = merge_tasks.rewrite_in_one_job(spark, target, candidates, values, upserts, changes, upserts_on_driver=on_driver)
        if rewritten is not None:
            stats.matched_files = len(rewritten)
            changes.removes += rewritten
            return stats
    if candidates and values is not None and not straddling:
        holding = merge_tasks.files_holding(spark, target, candidates, values)
        matched = [f for f in candidates if f.file_path in holding]
    elif candidates:
        by_uri = {f.file_path: f for f in candidates}
        existing = target.read(spark, candidates, path_column=_PATH)
        existing = existing.filter(inside(existing)) if inside else existing
        hits = existing.select(*keys, _PATH).join(batch_keys, keys, "left_semi")
        spelled = [r[0] for r in hits.select(_PATH).distinct().collect()]  # file paths only
        matched = [by_uri[u] for u in file_uris(spelled, list(by_uri))]
    stats.matched_files = len(matched)
    if matched:
        rows = target.read(spark, matched)
        if inside:
            kept = rows.filter(~inside(rows)).unionByName(rows.filter(inside(rows)).join(batch_keys, keys, "left_anti"))
        else:
            kept = rows.join(batch_keys, keys, "left_anti")
        merged = kept.unionByName(upserts())
    else:
        merged = upserts()
    if not table.spec().fields:
        # Unpartitioned: one Spark partition per output file otherwise (the union adds the batch's partitions).
        merged = merged.coalesce(max(1, len(matched)))
    target.write(merged, changes)
    changes.removes += matched
    return stats


def _check_inside(identifier: str, batch, window: Slice) -> None:
    """A partition's merge writes inside its slice: an upsert outside it would land in another partition's rows.
    Delete rows only name keys, so they are not checked."""
    from pyspark.sql import functions as F

    upserts = batch.filter(~F.col(_DELETE))
    outside = upserts.filter(window.outside_filter(upserts.schema)).select(*window.columns).limit(5).collect()
    if outside:
        examples = "; ".join(", ".join(f"{c}={r[c]}" for c in window.columns) for r in outside)
        raise InputError(
            f"Table {identifier}: the merge into partition slice {window.describe()} has rows outside it (or null in "
            f"{', '.join(window.columns)}), e.g. {examples}. Filter the DataFrame to the partition's slice; nothing was committed."
        )


def _conform(df, spark_schema):
    """`df` with the table's columns and types; columns it lacks are null (older optional columns).
    A column already of its type is passed as is (each cast is a round trip to the JVM)."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    return df.select(*[
        F.col(f.name) if have.get(f.name) == f.dataType else (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in spark_schema.fields
    ])


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
    from ..formats.snapshot_changes import snapshot_change
    from ..read.reader import read_parquet_files

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

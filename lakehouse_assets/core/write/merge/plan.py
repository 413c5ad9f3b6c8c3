"""The merge's one plan: which files may hold the batch's keys, before either strategy changes anything.

Candidates are found in narrowing steps, on metadata only:
a. the batch's checks gave each key's min/max and, when few, its distinct values (write/merge/batch.py);
b. Iceberg scan planning prunes live files by partition and min/max with that filter (the candidates).
The strategies then match the candidates against the batch's keys (write/merge/matching.py) and write:
copy-on-write (write/merge/rewrite.py) rewrites the files holding a key, merge-on-read (write/merge/on_read.py)
records the positions of those keys' rows. Both write the batch's upserts.

A merge given a window (a Dagster partition's slice) writes only upserts inside it and matches only rows
inside it; files straddling its edges are matched row by row in Spark (`MergePlan.straddling`).
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass, field
from typing import Any, Sequence

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, In, LessThanOrEqual
from pyiceberg.manifest import DataFile

from ...errors import InputError
from ...formats.iceberg.committer import live_data_files
from ...model import MergeOptions
from ...schema.type_mapping import iceberg_to_spark_schema
from ...schema.window import Slice, files_inside
from ..target import WriteTarget
from . import batch as merge_batch
from .batch import DELETE, KeyStats

IN_SET_LIMIT = 200  # up to this many distinct values of a single key, prune with an In-set instead of a range


@dataclass
class MergeStats:
    candidate_files: int = 0
    matched_files: int = 0
    live_files: int = 0
    strategy: str = "copy-on-write"  # or "merge-on-read" (TableProperties.MERGE_MODE)
    rows_deleted: int = 0  # merge-on-read: rows its new position deletes remove
    delete_files: int = 0  # merge-on-read: data files given a new position-delete file


@dataclass
class MergePlan:
    """One merge before it writes: the prepared batch, its keys and the candidate files that may hold them."""

    target: WriteTarget
    batch: Any  # the prepared batch (merge_batch.prepare_batch): one row per key, the DELETE flag
    keys: list[str]
    key_stats: KeyStats
    spark_schema: Any  # the table's schema for Spark, evolved by this write
    window: Slice | None = None
    candidates: list[DataFile] = field(default_factory=list)
    straddling: bool = False  # some candidate holds rows on both sides of the window: Spark matches row by row
    values: pa.Table | None = None  # the batch's distinct keys on the driver (None: Spark's road)
    stats: MergeStats = field(default_factory=MergeStats)

    def inside(self, df):
        """The window's filter on `df`'s rows, when candidates straddle it (None: every candidate row is inside)."""
        from pyspark.sql import functions as F

        return F.coalesce(self.window.spark_filter(df.schema), F.lit(False)) if self.straddling else None

    def batch_keys(self):
        return self.batch.select(*self.keys)  # prepare_batch left one row per key: no distinct (a shuffle) needed

    def upserts(self):
        """The batch's inserted and updated rows, in the table's columns and types."""
        from pyspark.sql import functions as F

        return conform(self.batch.filter(~F.col(DELETE)), self.spark_schema)

    def upserts_on_driver(self) -> pa.Table | None:
        """The batch's inserted/updated rows in the table's columns (those the batch lacks are null), from its rows
        on the driver (`KeyStats.rows`); None when not there or a column would need a cast (Spark's semantics: collect anew)."""
        import pyarrow.compute as pc

        rows = self.key_stats.rows
        if rows is None:
            return None
        have = {f.name: f.dataType for f in self.batch.schema.fields if f.name != DELETE}
        if not set(have) <= set(self.spark_schema.fieldNames()):
            return None  # a column spelled in another case (Spark resolves it case-insensitively) or not stored
        if any(f.name in have and have[f.name] != f.dataType for f in self.spark_schema.fields):
            return None
        kept = rows.filter(pc.invert(rows.column(DELETE)))
        return pa.table({f.name: kept.column(f.name) if f.name in have else pa.nulls(kept.num_rows, f.type) for f in merge_batch.arrow_schema(self.spark_schema)})


def plan_of(target: WriteTarget, batch, key_stats: KeyStats, opts: MergeOptions, window: Slice | None = None) -> MergePlan:
    """The candidates of a merge of `batch` into `target` (pruned by the key filter and the window).

    `target.schema` is the table's schema, evolved if the batch adds columns; existing files may hold
    narrower types (`target.cast_files`). With a `window`, the batch's upserts must lie inside it and
    only the table's rows inside it are matched: rows outside it are never changed, whatever their keys.
    """
    table = target.table
    keys = list(opts.keys)
    plan = MergePlan(target, batch, keys, key_stats, iceberg_to_spark_schema(target.schema), window)
    existing_columns = {f.name for f in table.schema().fields}
    if window is not None:
        _check_inside(target.identifier, batch, window)
    # A key column the table does not have yet is null in every existing row: nothing can match.
    # An empty batch matches nothing (its key filter would be AlwaysTrue: every file a candidate).
    if table.current_snapshot() is not None and set(keys) <= existing_columns and key_stats.distinct_keys:
        plan.stats.live_files = _live_file_count(table)
        row_filter = _key_filter(batch, keys, key_stats)
        plan.candidates = live_data_files(table, row_filter=row_filter if window is None else And(row_filter, window.expression(table)))
    plan.stats.candidate_files = len(plan.candidates)
    plan.straddling = window is not None and bool(files_inside(table, window, plan.candidates)[1])
    # A small batch's keys: from the check (a cached batch), or now from the cache the check filled (one tiny
    # job, which the shorter matching repays). A deduplicated batch is a window over the input, not a projection
    # of a filled cache, so it gets here with keys only if the caller's cache gave them to the check.
    if key_stats.values is not None or not plan.candidates:
        plan.values = key_stats.values
    else:
        plan.values = merge_batch.keys_on_driver(batch, keys, merge_batch.filled_cache_rows(batch))
    return plan


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


def _check_inside(identifier: str, batch, window: Slice) -> None:
    """A partition's merge writes inside its slice: an upsert outside it would land in another partition's rows.
    Delete rows only name keys, so they are not checked."""
    from pyspark.sql import functions as F

    upserts = batch.filter(~F.col(DELETE))
    outside = upserts.filter(window.outside_filter(upserts.schema)).select(*window.columns).limit(5).collect()
    if outside:
        examples = "; ".join(", ".join(f"{c}={r[c]}" for c in window.columns) for r in outside)
        raise InputError(
            f"Table {identifier}: the merge into partition slice {window.describe()} has rows outside it (or null in "
            f"{', '.join(window.columns)}), e.g. {examples}. Filter the DataFrame to the partition's slice; nothing was committed."
        )


def conform(df, spark_schema):
    """`df` with the table's columns and types; columns it lacks are null (older optional columns).
    A column already of its type is passed as is (each cast is a round trip to the JVM)."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    return df.select(*[
        F.col(f.name) if have.get(f.name) == f.dataType else (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in spark_schema.fields
    ])


def _live_file_count(table) -> int:
    """From the snapshot summary (metadata only); scanning every manifest just to count files costs a full plan."""
    summary = table.current_snapshot().summary
    total = summary.additional_properties.get("total-data-files") if summary is not None else None
    return int(total) if total is not None else len(live_data_files(table))

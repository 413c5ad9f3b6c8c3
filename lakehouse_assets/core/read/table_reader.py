"""Reading a table as a Spark DataFrame: now, or as of an Iceberg snapshot, a Delta version or a time.

Iceberg scan planning prunes files by partition and min/max before Spark opens any; a Delta version
is read from the Delta log's own file list. The files are then read by `reader.read_parquet_files`;
files with Iceberg position deletes (a merge-on-read table's, or another engine's) are read with their
deleted positions left out, and so are the files of a Delta version whose deletion vectors mark rows
deleted. Equality deletes are refused: this reader does not apply them.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from ..errors import SpecError, TableNotFound
from ..formats.deletes import refuse_delete_files
from ..formats.delta import partition_constants
from ..formats.delta.committer import DeltaMirror
from ..formats.delta.logged_vectors import live_vectors
from ..io.storage import StorageConfig, delta_path, join_uri, normalize_uri
from ..memo import ByImmutableFiles
from ..schema.type_mapping import delta_to_spark_schema, iceberg_to_spark_schema
from ..schema.window import Slice, Window
from ..table.evolution import column_names_moved, types_were_widened
from . import scan_planning
from .deleted_positions import DeletedPositions, DeltaDeletionVector, IcebergPositionDeletes
from .reader import read_parquet_files
from .spark_filters import bind_row_filter, residuals_mean_its_rows, same_columns_for, spark_row_filter
from .time_travel import check_retention, resolve


def read_table(
    spark,
    identifier: str,
    table: Table,
    storage: StorageConfig,
    mirror: DeltaMirror,
    *,
    snapshot_id: int | None = None,
    delta_version: int | None = None,
    as_of: dt.datetime | None = None,
    row_filter: str | BooleanExpression | None = None,
    window: Window | Slice | None = None,
):
    """`table` (loaded as `identifier`) as a Spark DataFrame; give at most one of snapshot_id, delta_version, as_of."""
    if sum(x is not None for x in (snapshot_id, delta_version, as_of)) > 1:
        raise SpecError(f"Table {identifier}: give at most one of snapshot_id, delta_version, as_of.")
    row_expr: BooleanExpression | None = None  # None: no row filter
    if row_filter is not None:
        row_expr = _parse(row_filter) if isinstance(row_filter, str) else row_filter
    window_expr: BooleanExpression = AlwaysTrue()
    if window is not None:
        window = Slice.of(window)
        window.validate(identifier, table)
        window_expr = window.expression(table)
    check_retention(table, identifier, snapshot_id, delta_version, as_of)
    if delta_version is not None:
        files = _delta_version_files(identifier, table, mirror, delta_version, row_expr)
    else:
        files = _snapshot_files(identifier, table, snapshot_id, as_of, row_expr, window_expr)
    if files.uris is None:
        return spark.createDataFrame([], files.spark_schema)
    df = read_parquet_files(
        spark, files.uris, files.spark_schema, storage, cast_files=types_were_widened(table), constants=files.constants, deleted=files.deleted
    )
    if files.bound is not None:
        # Planning pruned files only: the rows of a planned file still need the filter.
        df = df.filter(spark_row_filter(spark, identifier, files.schema, files.bound))  # the same rows for text and expressions
    if window is not None:
        df = df.filter(window.spark_filter(df.schema))
    return df


@dataclass
class _Files:
    """What one read opens: the files (None: the table has no snapshot yet), the Spark schema they are read with,
    the partition values some files lack, the row filter bound to the schema the rows were written with, and the
    deleted positions of files with position deletes."""

    uris: list[str] | None
    spark_schema: Any
    constants: Any = None
    schema: Schema | None = None
    bound: BooleanExpression | None = None
    deleted: dict[str, DeletedPositions] | None = None


def _delta_version_files(identifier: str, table: Table, mirror: DeltaMirror, delta_version: int, row_expr: BooleanExpression | None) -> _Files:
    """The files of a Delta version, from the Delta log's own file list."""
    delta = mirror.load(delta_version)
    if delta is None:
        raise TableNotFound(
            f"Table {identifier} has no Delta log at {table.location()}, so it has no Delta versions to read (an Iceberg-only "
            "table has none): read by snapshot_id or as_of instead."
        )
    root = normalize_uri(table.location())
    uris = [join_uri(root, delta_path(p)) for p in pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist()]
    # Files a deletion vector marks rows of (a merge-on-read table's, or another Delta engine's) are read without them.
    vectors = live_vectors(mirror.storage, mirror.root_uri, delta)
    deleted = {join_uri(root, p): DeltaDeletionVector(mirror.root_uri, tuple(d.to_json().items())) for p, d in vectors.items()}
    files = _Files(uris, delta_to_spark_schema(delta), partition_constants.of_delta(table, delta, root), deleted=deleted)
    if row_expr is not None:
        # The row filter means what it meant at that version: the schema of the snapshot it mirrors
        # (resolving it reads the Delta history, so only when there is a filter).
        mirrored = resolve(table, mirror, delta_version=delta_version).iceberg_snapshot_id
        files.schema = _schema_of(table, table.snapshot_by_id(mirrored) if mirrored is not None else None)
        files.bound = bind_row_filter(identifier, files.schema, row_expr)
    return files


def _snapshot_files(
    identifier: str, table: Table, snapshot_id: int | None, as_of: dt.datetime | None, row_expr: BooleanExpression | None, window_expr: BooleanExpression
) -> _Files:
    """The files of an Iceberg snapshot (the current one unless travelling), pruned by Iceberg scan planning."""
    snap = _snapshot_to_read(identifier, table, snapshot_id, as_of)
    if snap is not None:
        refuse_delete_files(table, "Lakehouse.read", snap, applies_position_deletes=True)
    # Time travel reads with the schema the snapshot was written with; the current table with the current
    # schema (a rename or drop changes the schema without a new snapshot).
    travelling = snapshot_id is not None or as_of is not None
    schema = _schema_of(table, snap if travelling else None)
    spark_schema = iceberg_to_spark_schema(schema, field_ids=column_names_moved(table))
    if snap is None:
        return _Files(None, spark_schema)
    bound = bind_row_filter(identifier, schema, row_expr) if row_expr is not None else None
    plan_expr = row_expr if row_expr is not None else AlwaysTrue()
    if bound is not None and schema.schema_id != table.schema().schema_id and not same_columns_for(schema, table.schema(), bound):
        # pyiceberg plans with the current schema's names; where they mean other columns (or types) than in
        # the snapshot's schema, the filter cannot prune: Spark still applies it to the rows below.
        plan_expr = AlwaysTrue()
    plan = _planned_files(table, snap.snapshot_id, And(plan_expr, window_expr))
    if bound is not None and plan_expr is row_expr and plan.partitions_decide and residuals_mean_its_rows(bound):
        # Every planned file's partition satisfies the filter for all its rows (Iceberg's residual is "true"):
        # no row filter is left for Spark to evaluate, as Java Iceberg's Spark reader drops it then too.
        bound = None
    constants = partition_constants.of_files(table, plan.files, schema)
    deleted = {uri: IcebergPositionDeletes(uri, deletes) for uri, deletes in plan.deleted}
    return _Files(list(plan.uris), spark_schema, constants, schema, bound, deleted)


def _snapshot_to_read(identifier: str, table: Table, snapshot_id: int | None, as_of: dt.datetime | None):
    """The snapshot asked for by id or by time, else the current one (None for a table without snapshots)."""
    if snapshot_id is not None:
        snap = table.snapshot_by_id(snapshot_id)
        if snap is None:
            raise LookupError(f"Table {identifier} has no snapshot {snapshot_id} (it may have been expired).")
        return snap
    if as_of is not None:
        snap = table.snapshot_as_of_timestamp(int(as_of.timestamp() * 1000))
        if snap is None:
            raise LookupError(f"Table {identifier} has no snapshot at or before {as_of.isoformat()}.")
        return snap
    return table.current_snapshot()


@dataclass(frozen=True)
class _Plan:
    """The files a scan plans, whether their partitions alone decide the filter (every file's residual is
    AlwaysTrue: a strict projection of the filter holds for the file's partition, so every row matches), and
    the position-delete files that apply to each file that has any (Iceberg's rules, applied by pyiceberg); on a
    table with files that lack their partition columns, the planned data files too (their values fill the columns)."""

    uris: tuple[str, ...]
    partitions_decide: bool
    deleted: tuple[tuple[str, tuple[str, ...]], ...] = ()
    files: tuple = ()


# Plans of a (metadata file, snapshot, filter): the metadata file names the schema, specs and manifest list
# planning reads, and none of them ever changes, so repeated reads of one table state plan once per process
# (pyiceberg re-reads the manifest list and each manifest on every plan: ~10 ms for 14 files). At most
# 200,000 file URIs kept in all (~30 MB), a data file weighing ten.
_PLANS = ByImmutableFiles(max_weight=200_000, weight=lambda plan: len(plan.uris) + 10 * len(plan.files))


def _planned_files(table: Table, snapshot_id: int, expr: BooleanExpression) -> _Plan:
    def plan() -> _Plan:
        tasks, residuals = scan_planning.plan_files(table, snapshot_id, expr)
        deleted = tuple((t.file.file_path, tuple(sorted(d.file_path for d in t.delete_files))) for t in tasks if t.delete_files)
        files = tuple(t.file for t in tasks) if partition_constants.marked(table) else ()
        return _Plan(tuple(t.file.file_path for t in tasks), residuals and all(t.residual == AlwaysTrue() for t in tasks), deleted, files)

    scan = table.scan(snapshot_id=snapshot_id, row_filter=expr)
    if not table.metadata_location or getattr(scan, "_should_use_server_side_planning", lambda: True)():
        return plan()  # a REST server's plan may depend on who asks; only a local plan follows the metadata file
    # An unbound expression's repr spells it whole; the schema id and update time guard against a catalog
    # that would ever reuse a metadata location (the spec writes a new file per change).
    key = (table.metadata_location, table.metadata.last_updated_ms, table.metadata.current_schema_id, snapshot_id, repr(expr))
    return _PLANS.get(key, plan)


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> BooleanExpression:
    """pyiceberg's parser (pyparsing, ~4 ms a filter); expressions are immutable, so one parse per text."""
    from pyiceberg.expressions.parser import parse

    return parse(text)


def _schema_of(table: Table, snap) -> Schema:
    """The schema `snap` was written with (the current one without a snapshot, or for a snapshot without an id)."""
    if snap is None or snap.schema_id is None:
        return table.schema()
    return table.schemas().get(snap.schema_id, table.schema())

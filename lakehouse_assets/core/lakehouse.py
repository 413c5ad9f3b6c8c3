"""`Lakehouse`: the public entry point of the core. Writes, reads, history and the formats-agree check.

A write runs in this order, so a failure at any step leaves both formats as they were:

1. validate the spec and schema (nothing written yet);
2. Spark writes the Parquet files (executors; the driver gets file metadata only);
3. Iceberg commits them as one snapshot (the source of truth). If this fails, the files are deleted;
4. Delta mirrors that snapshot. If this fails it is retried once, then a warning is logged and the
   write still succeeds: Delta lags, which `verify` reports and `repair` (or the next write) fixes.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from typing import Any, Literal, Mapping, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import Table

from . import maintenance as maintenance_
from .errors import RetentionError, SchemaError, SpecError
from .formats import delta_adoption, foreign_delta, history
from .formats.delta_column_mapping import enabled as mapping_enabled
from .formats.delta_column_mapping import mapping_keys
from .formats.delta_committer import DeltaMirror, unfollowed_renames
from .io.storage import StorageConfig, check_access, delete_files, normalize_uri
from .maintenance import rollback as rollback_
from .maintenance.repair import repair_table
from .maintenance.rewrite_files import adoption_rewrite
from .maintenance.verify import verify_table
from .model import FileChanges, MergeOptions, WriteRequest, WriteResult
from .properties import DEFAULT_DELTA_CONFIGURATION, Operation, SummaryKeys
from .read import time_travel
from .read.arrow_reader import read_arrow
from .read.table_reader import read_table
from .schema.spec import (
    ALL_FORMATS,
    DEFAULT_TARGET_FILE_SIZE,
    TableSpec,
    spec_terms,
)
from .schema.statistics import policy_keys
from .schema.type_mapping import spark_schema_to_iceberg
from .schema.window import Slice, Window
from .spark.session import active_session
from .table import tables
from .table.catalog import open_catalog
from .table.context import TableContext
from .table.evolution import evolved_schema, types_were_widened
from .write import alter as alter_
from .write import merge as merge_
from .write import transaction, write_modes
from .write.small_writes import small_writes_warning

__all__ = ["Lakehouse", "Slice", "Window", "WriteResult"]

log = logging.getLogger("lakehouse")


class Lakehouse:
    """A warehouse of dual-format tables.

    `Lakehouse(warehouse="./warehouse")` uses the catalog named by `LAKEHOUSE_CATALOG` (default
    `lakehouse`) from pyiceberg's configuration, else an embedded SQLite catalog in the warehouse.
    """

    def __init__(
        self,
        warehouse: str | None = None,
        *,
        catalog_name: str | None = None,
        catalog_properties: dict[str, str] | None = None,
        storage: StorageConfig | None = None,
        delta_configuration: dict[str, str] | None = None,
        foreign_delta_commits: str | None = None,
    ):
        warehouse = warehouse or os.environ.get("LAKEHOUSE_WAREHOUSE") or "./warehouse"
        # The stored form of the URI (e.g. Azure's container@account) and the storage settings it implies.
        warehouse, storage = (storage or StorageConfig.from_env()).for_warehouse(warehouse)
        # What the commit pipeline, maintenance and repair receive instead of the facade.
        self.context = TableContext(
            catalog=open_catalog(warehouse, storage, catalog_name, catalog_properties),
            warehouse=warehouse,
            storage=storage,
            delta_configuration={**DEFAULT_DELTA_CONFIGURATION, **(delta_configuration or {})},
        )
        # Tables without the property `lakehouse.delta.foreign-commits` follow this ("refuse" or "adopt").
        self.foreign_delta_default = foreign_delta.policy_of({}, foreign_delta_commits or foreign_delta.REFUSE)

    # ------------------------------------------------------------ tables

    def table_location(self, identifier: str) -> str:
        return tables.table_location(self.warehouse, identifier)

    @property
    def catalog(self) -> Catalog:
        return self.context.catalog

    @property
    def warehouse(self) -> str:
        return self.context.warehouse

    @property
    def storage(self) -> StorageConfig:
        return self.context.storage

    @property
    def delta_configuration(self) -> Mapping[str, str]:
        return self.context.delta_configuration

    def load(self, identifier: str) -> Table:
        return self.context.load(identifier)

    def mirror(self, table: Table) -> DeltaMirror:
        return self.context.mirror(table)

    def delta_enabled(self, table: Table) -> bool:
        return self.context.delta_enabled(table)

    def table_names(self) -> list[str]:
        return self.context.table_names()

    # ------------------------------------------------------------ writes

    def write(
        self,
        df,
        identifier: str,
        mode: Literal["append", "overwrite", "merge"] = "append",
        *,
        partition_by: Sequence[str] | None = None,
        formats: Sequence[str] | None = None,
        properties: dict[str, str] | None = None,
        target_file_size: int | None = None,
        schema_evolution: bool = True,
        window: Window | Slice | None = None,
        write_id: str | None = None,
        writer: dict[str, str] | None = None,
        spark=None,
        merge_keys: Sequence[str] | None = None,
        operation_column: str | None = None,
        delete_values: Sequence[str] | None = None,
        deleted_at_column: str | None = None,
        order_by: Sequence[str] | str | None = None,
    ) -> WriteResult:
        """Write a Spark DataFrame (or a pyarrow Table / pandas DataFrame) to both formats.

        mode="append" adds rows; mode="overwrite" replaces the whole table, or only the rows inside
        `window` when one is given: a `Window` (a time range of one column) or a `Slice` (a window
        and/or sets of values of other columns, e.g. a Dagster static or multi-partition).
        `write_id` makes the write idempotent: a second write with the same id commits nothing and
        returns the first write's snapshot.

        mode="merge" upserts by `merge_keys` (copy-on-write, see core/write/merge.py): a row whose
        `operation_column` is in `delete_values`, or whose `deleted_at_column` is set, deletes its key;
        duplicate keys keep the last row by `order_by`.
        """
        started = time.monotonic()
        spec = TableSpec(
            identifier,
            partition_by=tuple(partition_by or ()),
            formats=tuple(formats or ALL_FORMATS),
            # A resource-wide Delta statistics setting is the new table's too: both formats follow the table's properties.
            properties={**policy_keys(self.delta_configuration), **mapping_keys(self.delta_configuration), **(properties or {})},
            target_file_size=target_file_size or DEFAULT_TARGET_FILE_SIZE,
            schema_evolution=schema_evolution,
        )
        merge_opts = (
            MergeOptions.build(identifier, merge_keys, operation_column, delete_values, deleted_at_column, order_by) if mode == "merge" else None
        )
        window = Slice.of(window) if window is not None else None
        request = WriteRequest(spec, mode, window, write_id, writer, target_file_size, merge_opts)
        check_access(self.storage, self.warehouse)  # wrong endpoint/region/credential/bucket: fail before any work
        df = _as_spark(df, spark)
        if merge_opts is None:
            return self._write(df, request, started)
        # Validation, pruning, matching and rewrite must all see the same rows, even from a nondeterministic DataFrame.
        # A batch the caller already cached stays cached: unpersisting it would drop the caller's cache.
        caller_cached = _is_cached(df)
        source = df if caller_cached else df.persist()
        try:
            batch, key_stats = merge_.prepare_batch(identifier, source, merge_opts)  # raises on null/duplicate keys before any write
            if not key_stats.deduplicated:
                # A projection of the persisted source: recomputing it is free, caching it again is not.
                return self._write(batch, request, started, key_stats)
            batch.persist()  # the deduplicated batch feeds the In-set, the matching join and the rewrite
            try:
                return self._write(batch, request, started, key_stats)
            finally:
                batch.unpersist()
        finally:
            if not caller_cached:
                source.unpersist()

    def _write(self, df, request: WriteRequest, started: float, key_stats: merge_.KeyStats | None = None) -> WriteResult:
        """The write after input handling: table and schema, the mode's plan, then the commit pipeline."""
        identifier, window = request.spec.identifier, request.window
        incoming = spark_schema_to_iceberg(identifier, merge_.data_schema(df) if request.merge else df.schema)
        for column in window.columns if window is not None else ():
            if column not in df.columns:
                raise SpecError(f"Table {identifier}: partition column {column!r} is not in the data ({', '.join(df.columns)}).")
        table, schema_plan, created = tables.create_or_load(self.catalog, self.warehouse, request.spec, incoming)
        try:
            delta = None if created else self._foreign_delta_gate(identifier, table, df.sparkSession)
            if delta is False:  # foreign versions were adopted: a new Iceberg snapshot, maybe new columns to plan against
                table, schema_plan, _ = tables.create_or_load(self.catalog, self.warehouse, request.spec, incoming)
                delta = None
            if delta is not None and (renames := unfollowed_renames(table, delta)):
                raise SchemaError(
                    f"Table {identifier}: another engine changed the columns in Iceberg: {'; '.join(renames)}. Nothing was written "
                    "(its files would hold names Delta's log does not know)."
                )
            if window is not None:
                window.validate(identifier, table)
            return self._write_into(table, schema_plan, df, request, started, key_stats, delta)
        except BaseException:
            if created:
                tables.drop_if_never_written(self.catalog, self.storage, table)
            raise

    def _foreign_delta_gate(self, identifier: str, table: Table, spark=None):
        """Before planning a write: Delta versions another engine wrote are refused or adopted (the table's policy).

        Returns the Delta log as read, for the commit to bring up to date instead of loading it again (None when
        there is none to hand on; False when an adoption changed the Iceberg table, which must then be reloaded)."""
        if not self.delta_enabled(table):
            return None
        policy = foreign_delta.policy_of(table.properties, self.foreign_delta_default)
        mirror = self.mirror(table)
        try:
            delta = mirror.load()
        except Exception as e:  # noqa: BLE001 - an unreadable Delta log never fails the Iceberg write (repair fixes it)
            log.warning("Table %s: the Delta log cannot be read to look for foreign versions: %s", identifier, e)
            return None
        if foreign_delta.refuse_if_foreign(identifier, delta, policy):
            report = delta_adoption.adopt(identifier, table, mirror, adoption_rewrite(self.context, identifier, spark))
            log.info("Table %s: adopted foreign Delta versions before the write: %s", identifier, report)
            return False
        return delta

    def _write_into(self, table: Table, schema_plan, df, request: WriteRequest, started: float, key_stats, delta=None) -> WriteResult:
        identifier = request.spec.identifier
        delta_on = tables.delta_enabled(table)
        if delta_on and schema_plan.widen and mapping_enabled(table.properties):
            raise SchemaError(
                f"Table {identifier}: the data widens column(s) {[n for n, _ in schema_plan.widen]} to "
                f"{[str(t) for _, t in schema_plan.widen]}, which the Delta side of a column-mapped table cannot follow "
                "(delta-rs cannot replace a column-mapped schema). Nothing was written. Cast the column(s) to the table's "
                "type, or write the wider values into a new column."
            )

        if request.write_id is not None and (earlier := history.find_snapshot_by_write_id(table, request.write_id)) is not None:
            log.info("Table %s: write %s already committed as snapshot %s; not committing again", identifier, request.write_id, earlier.snapshot_id)
            result = WriteResult.for_table(identifier, table, request.mode, earlier.snapshot_id)
            result.duplicate_of_earlier_write = True
            if delta_on:
                transaction.mirror_to_delta(self.mirror(table), table, result)
            return result

        target = write_modes.WriteTarget(
            identifier,
            table,
            evolved_schema(table, schema_plan),  # new field ids; committed together with the snapshot
            self.storage,
            cast_files=types_were_widened(table) or bool(schema_plan.widen),
            target_file_size=request.target_file_size,
        )
        summary = request.summary()
        changes = FileChanges()
        try:
            summary |= write_modes.plan(target, request, df, changes, widen_types=delta_on and bool(schema_plan.widen), key_stats=key_stats)
        except BaseException:
            delete_files(self.storage, changes.created)  # nothing was committed
            raise
        write_seconds = time.monotonic() - started
        revalidate = None
        if request.merge is not None:
            # A concurrent append that cannot hold a key of the batch leaves the merge's plan valid.
            def revalidate(fresh, base_id):
                return merge_.concurrent_conflict(df.sparkSession, fresh, base_id, df, request.merge, self.storage, target.cast_files)

        result = transaction.commit(self.context, identifier, table, changes, summary, mode=request.mode, schema_plan=schema_plan, revalidate=revalidate, delta=delta)
        result.write_seconds = write_seconds
        if result.files_added or result.files_removed:
            if (advice := small_writes_warning(identifier, table)) is not None:
                result.warnings.append(advice)
                log.warning(advice)
        return result

    # ------------------------------------------------------------ schema operations

    def alter(self, identifier: str, rename: Mapping[str, str] | None = None, drop: Sequence[str] | None = None) -> dict[str, Any]:
        """Rename (`{"old": "new"}`) and drop top-level columns: one Iceberg schema update, no data file rewritten.

        Delta-mirrored tables need Delta column mapping (`upgrade`, or `delta.columnMapping.mode=name` at
        creation): the same change is then one metadata-only Delta version. Older snapshots and Delta versions
        keep reading with their old names.
        """
        table = self.load(identifier)
        result = alter_.alter_table(table, identifier, rename, drop)
        if self.delta_enabled(table):
            # The same change in Delta right away: one metadata-only version (column mapping), not at the next write.
            try:
                mirror = self.mirror(table)
                transaction.sync_delta(mirror, self.load(identifier))
                result["delta_version"] = mirror.load().version()  # the schema's version (sync returns the snapshot's)
            except Exception as e:  # noqa: BLE001 - Iceberg is changed; Delta lags until the next write or repair, as for writes
                result["delta_lagging"], result["delta_error"] = True, f"{type(e).__name__}: {e}"
                log.warning("Table %s: columns changed in Iceberg; Delta lags: %s", identifier, e)
        return result

    def upgrade(self, identifier: str) -> dict[str, Any]:
        """Turn Delta column mapping on for a Delta-mirrored table, so renames and drops work in both formats.

        Metadata only: one Delta version and one Iceberg property update; no data file is read or rewritten.
        Idempotent. See core/write/alter.py, `upgrade_table`."""
        table = self.load(identifier)
        return alter_.upgrade_table(table, identifier, self.mirror(table) if self.delta_enabled(table) else None)

    # ------------------------------------------------------------ reads

    def read(
        self,
        spark,
        identifier: str,
        *,
        snapshot_id: int | None = None,
        delta_version: int | None = None,
        as_of: dt.datetime | None = None,
        row_filter: str | BooleanExpression | None = None,
        window: Window | Slice | None = None,
    ):
        """A Spark DataFrame of the table now, or as of an Iceberg snapshot, a Delta version or a time.

        Iceberg scan planning prunes files by partition and min/max before Spark opens any; a Delta
        version is read from the Delta log's own file list. `row_filter` (SQL text or a pyiceberg
        expression) also filters the rows of the files it keeps.
        """
        table = self.load(identifier)
        return read_table(
            spark, identifier, table, self.storage, self.mirror(table),
            snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of, row_filter=row_filter, window=window,
        )

    def read_arrow(
        self,
        identifier: str,
        *,
        columns: Sequence[str] | None = None,
        row_filter: str | BooleanExpression | None = None,
        snapshot_id: int | None = None,
        as_of: dt.datetime | None = None,
        window: Window | Slice | None = None,
    ):
        """A pyarrow Table of the table (or of `columns`), now or as of a snapshot or a time, read by pyiceberg and
        pyarrow without Spark: for small tables and pandas/Polars assets (see core/read/arrow_reader.py)."""
        return read_arrow(identifier, self.load(identifier), columns=columns, row_filter=row_filter, snapshot_id=snapshot_id, as_of=as_of, window=window)

    def snapshot_of_run(self, identifier: str, run_id: str) -> int:
        """The snapshot the Dagster run `run_id` left the table at (its last write to it)."""
        snap = history.find_snapshot_by_writer(self.load(identifier), "dagster_run_id", run_id)
        if snap is None:
            raise RetentionError(f"Table {identifier} has no retained snapshot written by run {run_id} (it never wrote the table, or that snapshot was expired).")
        return snap.snapshot_id

    # ------------------------------------------------------------ rollback

    def rollback(
        self,
        identifier: str,
        *,
        snapshot_id: int | None = None,
        delta_version: int | None = None,
        as_of: dt.datetime | None = None,
        run_id: str | None = None,
    ) -> WriteResult:
        """Give the table back exactly the rows of an earlier point, in both formats, as one new commit in each.

        The point: an Iceberg snapshot, a Delta version, a time, or a Dagster run (the table as that run left it);
        exactly one. History is kept; refused with nothing changed when the point's files are gone or its schema
        cannot be read back (see core/maintenance/rollback.py).
        """
        if sum(x is not None for x in (snapshot_id, delta_version, as_of, run_id)) != 1:
            raise SpecError(f"Table {identifier}: give exactly one of snapshot_id, delta_version, as_of, run_id to roll back to.")
        table = self.load(identifier)
        time_travel.check_retention(table, identifier, snapshot_id, delta_version, as_of)
        if run_id is not None:
            target = self.snapshot_of_run(identifier, run_id)
        else:
            mirror = self.mirror(table) if self.delta_enabled(table) else None
            target = time_travel.resolve(table, mirror, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of).iceberg_snapshot_id
        if target is None:
            raise RetentionError(f"Table {identifier}: no retained snapshot at that point to roll back to. See `lakehouse history {identifier}`.")
        adds, removes = rollback_.plan(identifier, table, target, self.storage)
        summary = {SummaryKeys.OPERATION: Operation.ROLLBACK, SummaryKeys.ROLLBACK_TARGET: str(target)}
        changes = FileChanges(adds=adds, removes=removes, rows_written=sum(f.record_count for f in adds))
        result = transaction.commit(self.context, identifier, table, changes, summary, mode=Operation.ROLLBACK)
        log.info("Table %s: rolled back to snapshot %s (%d file(s) back, %d removed)", identifier, target, len(adds), len(removes))
        return result

    # ------------------------------------------------------------ maintenance

    def maintain(self, identifier: str, operation: str = "full_maintenance", *, dry_run: bool = False, spark=None, **settings) -> dict[str, Any]:
        """Run a maintenance operation (see core/maintenance/) on one table; returns what it did."""
        return maintenance_.run(self.context, identifier, operation, dry_run=dry_run, spark=spark, **settings)

    # ------------------------------------------------------------ time travel

    def point_in_time(self, identifier: str, *, snapshot_id: int | None = None, delta_version: int | None = None, as_of: dt.datetime | None = None):
        """The same point in time as (Iceberg snapshot id, Delta version), from any one of the three."""
        table = self.load(identifier)
        return time_travel.resolve(table, self.mirror(table) if self.delta_enabled(table) else None, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of)

    # ------------------------------------------------------------ inspection

    def tables(self) -> list[dict[str, Any]]:
        out = []
        for name in self.table_names():
            table = self.load(name)
            delta = self.mirror(table).load() if self.delta_enabled(table) else None
            out.append(
                {
                    "name": name,
                    "location": normalize_uri(table.location()),
                    "iceberg_metadata_location": table.metadata_location,
                    "iceberg_snapshot_id": transaction._current_id(table),
                    "delta_version": delta.version() if delta is not None else None,
                    "partition_by": spec_terms(table.spec(), table.schema()),
                    "formats": tables.formats(table),
                    "delta_column_mapping": mapping_enabled(table.properties),  # renames and drops work in both formats
                }
            )
        return out

    def history(self, identifier: str) -> list[dict[str, Any]]:
        """Every retained commit, newest first: Iceberg snapshot <-> Delta version, operation, counts, writer, time."""
        table = self.load(identifier)
        delta = self.mirror(table).load() if self.delta_enabled(table) else None
        delta_versions = history.delta_versions_by_snapshot(delta) if delta is not None else {}
        out = []
        for snap in history.ancestors(table):
            s = history.summary(snap)
            out.append(
                {
                    "iceberg_snapshot_id": snap.snapshot_id,
                    "iceberg_sequence_number": snap.sequence_number,
                    "delta_version": delta_versions.get(snap.snapshot_id),
                    "timestamp": history.iso_ms(snap.timestamp_ms),
                    "operation": s.get(SummaryKeys.OPERATION, snap.summary.operation.value if snap.summary else None),
                    "files_added": int(s.get("added-data-files", 0)),
                    "files_removed": int(s.get("deleted-data-files", 0)),
                    "rows_added": int(s.get("added-records", 0)),
                    "rows_removed": int(s.get("deleted-records", 0)),
                    "total_rows": int(s.get("total-records", 0)),
                    "writer": json.loads(s.get(SummaryKeys.WRITER, "{}")),
                    "write_id": s.get(SummaryKeys.WRITE_ID),
                }
            )
        return out

    def verify(self, identifier: str, *, deep: bool = False) -> dict[str, Any]:
        """Do the formats agree? Per live file: presence, rows, partition values and stats; the schema.
        `deep=True` also compares the content as DuckDB reads each format (see core/maintenance/verify.py)."""
        table = self.load(identifier)
        return verify_table(table, self.mirror(table) if self.delta_enabled(table) else None, deep=deep)

    def delta_lag(self, identifier: str) -> int | None:
        """Iceberg snapshots the Delta log has not mirrored yet, from metadata only (no manifests, no file lists).

        0 when up to date (or Delta is off); None when the Delta log is missing or unreadable, or the
        snapshots it lags behind were expired: `repair` is needed either way.
        """
        return self.delta_lag_of(self.load(identifier))

    def delta_lag_of(self, table: Table, delta=None) -> int | None:
        """`delta_lag` of a loaded table; `delta`: its Delta table when the caller already loaded it."""
        return self.context.delta_lag_of(table, delta)

    def repair(
        self, identifier: str, *, apply_deletes: bool = False, adopt_delta: bool = False, revert_delta: bool = False, rewrite_files: bool = False, spark=None
    ) -> dict[str, Any]:
        """Bring Delta up to Iceberg (idempotent): mirrors every snapshot Delta has not seen.

        Raises MirrorRefused, with the reason and the fix, when a snapshot has no exact Delta equivalent
        (another engine's delete files, a rename, a partition spec change); Delta is then left as it was.
        `apply_deletes=True` first rewrites the data files that other engines' delete files remove rows
        from, with the deletes applied, as one Iceberg snapshot without delete files
        (core/maintenance/apply_deletes.py). `rewrite_files=True` first rewrites other engines' data files of a
        column-mapped table that hold columns under their current instead of their physical names
        (core/maintenance/rewrite_files.py).

        Delta versions another engine wrote are never mirrored over: the report says which and why
        (`repaired: False`). `adopt_delta=True` brings them into Iceberg as one snapshot; `revert_delta=True`
        undoes them with a new Delta version (core/formats/foreign_delta.py, core/formats/delta_adoption.py). Raises
        ForeignDeltaCommits, nothing changed, when they cannot be adopted.
        """
        return repair_table(
            self.context, identifier, apply_deletes=apply_deletes, adopt_delta=adopt_delta, revert_delta=revert_delta, rewrite_files=rewrite_files, spark=spark
        )


# ---------------------------------------------------------------- helpers


def _as_spark(df, spark):
    """Spark DataFrames pass through; pyarrow Tables, pandas and Polars DataFrames (small assets) are converted."""
    if hasattr(df, "sparkSession") and hasattr(df, "mapInArrow"):
        return df
    spark = active_session(spark)
    if type(df).__module__.split(".")[0] == "polars":  # polars.DataFrame or LazyFrame (not a dependency of the core)
        df = (df.collect() if hasattr(df, "collect") else df).to_arrow()
    try:
        import pyarrow as pa

        if isinstance(df, pa.Table):
            df = df.to_pandas()
    except ImportError:  # pragma: no cover
        pass
    import pandas as pd

    if isinstance(df, pd.DataFrame):
        return spark.createDataFrame(df)
    raise SpecError(f"Cannot write an object of type {type(df).__name__}: pass a Spark DataFrame, a pyarrow Table, a pandas or a Polars DataFrame.")


def _is_cached(df) -> bool:
    """Whether Spark's cache holds this DataFrame's plan (cached through this object or another with the same plan)."""
    level = df.storageLevel  # looked up in the session's cache manager by plan
    return level.useMemory or level.useDisk or level.useOffHeap

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
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Sequence

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, LessThan
from pyiceberg.expressions.visitors import ROWS_MUST_MATCH, _StrictMetricsEvaluator
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from . import iceberg_committer as ic
from . import merge as merge_
from .catalog import ensure_namespace, missing_table_hint, open_catalog
from .delta_committer import ICEBERG_SNAPSHOT_ID, DeltaMirror, SnapshotChange
from .errors import CommitError, InputError, LakehouseError, RetentionError, SpecError, TableNotFound
from .evolution import SchemaPlan, apply_schema_change, evolved_schema, plan_schema_change, types_were_widened
from .reader import read_parquet_files
from .small_writes import small_writes_warning
from .spec import (
    ALL_FORMATS,
    DEFAULT_TARGET_FILE_SIZE,
    TableSpec,
    build_partition_spec,
    iceberg_to_spark_schema,
    spark_schema_to_iceberg,
    spec_terms,
)
from .storage import StorageConfig, check_access, delete_files, join_uri, normalize_uri
from .writer import write_table_files

log = logging.getLogger("lakehouse")

METADATA_FOLDER = "_iceberg"  # `_`-prefixed: Delta's vacuum and Iceberg's orphan cleanup both skip it
FORMATS_PROPERTY = "lakehouse.formats"
SCHEMA_EVOLUTION_PROPERTY = "lakehouse.schema-evolution"  # "false": this table refuses schema changes whatever the writer asks
DEFAULT_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.parquet.compression-level": "3",
    # Old metadata JSON files are deleted as commits accumulate (each one holds the full snapshot list).
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
}


@dataclass(frozen=True)
class Window:
    """A half-open range [start, end) of one column: what a Dagster time partition replaces."""

    column: str
    start: dt.datetime | dt.date
    end: dt.datetime | dt.date


@dataclass
class WriteResult:
    table: str
    location: str
    iceberg_metadata_location: str
    iceberg_snapshot_id: int | None
    delta_version: int | None
    mode: str
    files_added: int = 0
    files_removed: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    rows_removed: int = 0
    write_seconds: float = 0.0
    iceberg_commit_seconds: float = 0.0
    delta_commit_seconds: float = 0.0
    delta_lagging: bool = False
    delta_error: str | None = None
    duplicate_of_earlier_write: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


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
    ):
        self.warehouse = normalize_uri(warehouse or os.environ.get("LAKEHOUSE_WAREHOUSE") or "./warehouse")
        self.storage = storage or StorageConfig.from_env()
        self.catalog = open_catalog(self.warehouse, self.storage, catalog_name, catalog_properties)
        self.delta_configuration = {"delta.checkpointInterval": "10", **(delta_configuration or {})}

    # ------------------------------------------------------------ tables

    def table_location(self, identifier: str) -> str:
        ns, name = TableSpec(identifier).namespace, TableSpec(identifier).name
        return join_uri(self.warehouse, *ns.split("."), name)

    def load(self, identifier: str) -> Table:
        try:
            return self.catalog.load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise TableNotFound(
                f"Table {identifier} does not exist in catalog {self.catalog.name!r} (warehouse {self.warehouse})."
                f"{missing_table_hint(self.catalog, identifier)} Existing tables: {', '.join(self.table_names()) or 'none'}."
            ) from None

    def mirror(self, table: Table) -> DeltaMirror:
        return DeltaMirror(normalize_uri(table.location()), self.storage, self.delta_configuration)

    def delta_enabled(self, table: Table) -> bool:
        return "delta" in table.properties.get(FORMATS_PROPERTY, ",".join(ALL_FORMATS)).split(",")

    def table_names(self) -> list[str]:
        names = []
        for ns in self.catalog.list_namespaces():
            names += [".".join(t) for t in self.catalog.list_tables(ns)]
        return sorted(names)

    def _create_or_load(self, spec: TableSpec, incoming_schema) -> tuple[Table, SchemaPlan, bool]:
        """The table (created if new), the schema change the data needs (committed with the data), and
        whether this call created the table (a write that then fails drops it again)."""
        try:
            table = self.catalog.load_table(spec.identifier)
        except NoSuchTableError:
            table = None
        except NoSuchNamespaceError:
            table = None
        if table is None:
            partition_spec = build_partition_spec(spec.identifier, incoming_schema, spec.partition_by)
            if "delta" in spec.formats:
                _check_delta_partitioning(spec.identifier, incoming_schema, partition_spec)
            ensure_namespace(self.catalog, spec.namespace)
            location = self.table_location(spec.identifier)
            properties = {
                **DEFAULT_TABLE_PROPERTIES,
                "write.metadata.path": join_uri(location, METADATA_FOLDER),
                "write.target-file-size-bytes": str(spec.target_file_size),
                FORMATS_PROPERTY: ",".join(spec.formats),
                **spec.properties,
            }
            try:
                table = self.catalog.create_table(
                    spec.identifier, schema=incoming_schema, location=location, partition_spec=partition_spec, properties=properties
                )
                return table, SchemaPlan([], [], []), True
            except TableAlreadyExistsError:
                table = self.catalog.load_table(spec.identifier)
        existing_terms = spec_terms(table.spec(), table.schema())
        if spec.partition_by and [t.replace(" ", "") for t in spec.partition_by] != [t.replace(" ", "") for t in existing_terms]:
            raise SpecError(
                f"Table {spec.identifier} is partitioned by {existing_terms}, not {list(spec.partition_by)}. "
                "Partition evolution is not supported: keep the existing partition_by or write a new table."
            )
        plan = plan_schema_change(
            spec.identifier, table.schema(), incoming_schema, spec.schema_evolution and table.properties.get(SCHEMA_EVOLUTION_PROPERTY, "true") != "false"
        )
        if not plan.empty:
            log.info("Table %s: evolving schema: %s", spec.identifier, plan.describe())
        return table, plan, False

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
        window: Window | None = None,
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
        `window` when one is given. `write_id` makes the write idempotent: a second write with the
        same id commits nothing and returns the first write's snapshot.

        mode="merge" upserts by `merge_keys` (copy-on-write, see core/merge.py): a row whose
        `operation_column` is in `delete_values`, or whose `deleted_at_column` is set, deletes its key;
        duplicate keys keep the last row by `order_by`.
        """
        started = time.monotonic()
        if mode not in ("append", "overwrite", "merge"):
            raise SpecError(f"Table {identifier}: unknown write mode {mode!r}; use 'append', 'overwrite' or 'merge'.")
        if window is not None and mode != "overwrite":
            raise SpecError(f"Table {identifier}: a partition window can only be overwritten (mode='overwrite').")
        check_access(self.storage, self.warehouse)  # wrong endpoint/region/credential/bucket: fail before any work
        spec = TableSpec(
            identifier,
            partition_by=tuple(partition_by or ()),
            formats=tuple(formats or ALL_FORMATS),
            properties=dict(properties or {}),
            target_file_size=target_file_size or DEFAULT_TARGET_FILE_SIZE,
            schema_evolution=schema_evolution,
        )
        df = _as_spark(df, spark)
        if mode != "merge":
            return self._write(df, spec, mode, window, write_id, writer, target_file_size, started)
        merge_opts = merge_.MergeOptions.build(identifier, merge_keys, operation_column, delete_values, deleted_at_column, order_by)
        # Validation, pruning, matching and rewrite must all see the same rows, even from a nondeterministic DataFrame.
        source = df.persist()
        try:
            batch, key_stats = merge_.prepare_batch(identifier, source, merge_opts)  # raises on null/duplicate keys before any write
            batch.persist()  # the deduplicated batch feeds the In-set, the matching join and the rewrite
            try:
                return self._write(batch, spec, mode, window, write_id, writer, target_file_size, started, merge=(merge_opts, key_stats))
            finally:
                batch.unpersist()
        finally:
            source.unpersist()

    def _write(self, df, spec: TableSpec, mode: str, window, write_id, writer, target_file_size, started: float, merge=None) -> WriteResult:
        """The write after input handling: schema/table, files, Iceberg commit, Delta mirror."""
        identifier = spec.identifier
        merge_opts, key_stats = merge if merge is not None else (None, None)
        incoming = spark_schema_to_iceberg(identifier, df.select(*merge_.data_columns(df)).schema if merge_opts else df.schema)
        if window is not None and window.column not in df.columns:
            raise SpecError(f"Table {identifier}: partition window column {window.column!r} is not in the data ({', '.join(df.columns)}).")
        table, schema_plan, created = self._create_or_load(spec, incoming)
        try:
            return self._write_into(table, schema_plan, df, spec, mode, window, write_id, writer, target_file_size, started, merge)
        except BaseException:
            if created:
                self._drop_if_never_written(table)
            raise

    def _drop_if_never_written(self, table: Table) -> None:
        """A first write that failed leaves no table behind (unless another writer committed to it meanwhile)."""
        try:
            table = self.catalog.load_table(table.name())
            if table.current_snapshot() is None:
                self.catalog.drop_table(table.name())
                delete_files(self.storage, [table.metadata_location])  # its only file: the first metadata JSON
        except Exception as e:  # noqa: BLE001 - never hide the write's own error
            log.warning("Table %s: could not drop the table its failed first write created: %s", ".".join(table.name()), e)

    def _write_into(self, table: Table, schema_plan, df, spec: TableSpec, mode: str, window, write_id, writer, target_file_size, started: float, merge) -> WriteResult:
        identifier = spec.identifier
        merge_opts, key_stats = merge if merge is not None else (None, None)
        delta_on = self.delta_enabled(table)
        schema = evolved_schema(table, schema_plan)  # new field ids; committed together with the snapshot
        cast_files = types_were_widened(table) or bool(schema_plan.widen)

        if write_id is not None and (earlier := ic.find_snapshot_by_write_id(table, write_id)) is not None:
            log.info("Table %s: write %s already committed as snapshot %s; not committing again", identifier, write_id, earlier.snapshot_id)
            result = self._result(table, spec, mode, earlier.snapshot_id)
            result.duplicate_of_earlier_write = True
            if delta_on:
                self._mirror_to_delta(table, {}, result)
            return result

        root = normalize_uri(table.location())
        write = lambda data: write_table_files(data, table, self.storage, schema=schema, target_file_size=target_file_size)  # noqa: E731
        merge_removes, merge_stats = [], None
        if merge_opts is not None:
            written, merge_removes, merge_stats = merge_.rewrite(df.sparkSession, table, df, key_stats, merge_opts, self.storage, write, schema, cast_files)
        else:
            written = write(df)
        written_uris = [join_uri(root, f.path) for f in written]
        write_done = time.monotonic()
        try:
            adds = ic.data_files_from_written(table, root, written, schema)
            removes: list[DataFile] = list(merge_removes)
            if window is not None:
                expr = _window_expression(table, window)
                _check_inside_window(identifier, table, adds, window, expr)
                removes, rewritten = self._remove_window(df.sparkSession, table, expr, window, schema, cast_files)
                adds += rewritten
                written_uris += [f.file_path for f in rewritten]
            elif mode == "overwrite":
                removes = ic.live_data_files(table)
            if delta_on and schema_plan.widen:
                rewritten, rest = self._rewrite_in_wider_types(df.sparkSession, table, schema, removes)
                adds += rewritten
                removes += rest
                written_uris += [f.file_path for f in rewritten]
            summary = {
                ic.OPERATION: "overwrite-window" if window is not None else mode,
                ic.WRITER: json.dumps(writer or {}, sort_keys=True),
            }
            if write_id is not None:
                summary[ic.WRITE_ID] = write_id
            if merge_stats is not None:
                summary.update(merge_.summary_properties(merge_stats, merge_opts))
            if delta_on and (expected := self.mirror(table).next_version(table)) is not None:
                # A schema change reaches Delta as metadata-only versions just before the data version.
                expected += (1 if schema_plan.add else 0) + len(schema_plan.make_optional)
                summary[ic.DELTA_EXPECTED_VERSION] = str(expected)
            stage = None if schema_plan.empty else (lambda tx: apply_schema_change(tx, schema_plan))
            snapshot = ic.commit_files(table, adds, removes, summary, stage)
        except BaseException as e:
            # Nothing became visible: remove every file this write created.
            delete_files(self.storage, written_uris)
            if isinstance(e, LakehouseError):
                raise
            if isinstance(e, Exception):
                # Lost a race with other writers after pyiceberg's own retries: say how to get through.
                hint = (
                    " Other writers committed first: retry the write, or raise the table property commit.retry.num-retries."
                    if type(e).__name__ == "CommitFailedException"
                    else ""
                )
                raise CommitError(f"Table {identifier}: the Iceberg commit failed ({type(e).__name__}: {e}); nothing was committed and the written files were removed.{hint}") from e
            raise
        iceberg_done = time.monotonic()

        result = self._result(table, spec, mode, snapshot.snapshot_id if snapshot else _current_id(table))
        result.files_added = len(adds)
        result.files_removed = len(removes)
        result.rows_written = sum(f.record_count for f in written)
        result.bytes_written = sum(f.file_size_in_bytes for f in adds)
        result.rows_removed = sum(f.record_count for f in removes)
        result.write_seconds = write_done - started
        result.iceberg_commit_seconds = iceberg_done - write_done
        if snapshot is not None and (advice := small_writes_warning(identifier, table)) is not None:
            result.warnings.append(advice)
            log.warning(advice)
        if delta_on:
            known = {snapshot.snapshot_id: SnapshotChange(snapshot, adds, removes, summary)} if snapshot else {}
            self._mirror_to_delta(table, known, result)
            result.delta_commit_seconds = time.monotonic() - iceberg_done
        return result

    def _result(self, table: Table, spec: TableSpec, mode: str, snapshot_id: int | None) -> WriteResult:
        return WriteResult(
            table=spec.identifier,
            location=normalize_uri(table.location()),
            iceberg_metadata_location=table.metadata_location,
            iceberg_snapshot_id=snapshot_id,
            delta_version=None,
            mode=mode,
        )

    def _mirror_to_delta(self, table: Table, known: dict, result: WriteResult) -> None:
        """Iceberg-primary: retry Delta once, then warn and record the lag without failing the write."""
        mirror = self.mirror(table)
        for attempt in (1, 2):
            try:
                result.delta_version = mirror.sync(table, known)
                return
            except Exception as e:  # noqa: BLE001 - any storage error; the write itself has landed
                error = f"{type(e).__name__}: {e}"
                log.warning("Table %s: Delta commit attempt %d of 2 failed: %s", result.table, attempt, error)
        result.delta_lagging = True
        result.delta_error = error
        message = (
            f"Table {result.table}: Iceberg snapshot {result.iceberg_snapshot_id} committed but the Delta commit failed twice "
            f"({error}). Delta lags Iceberg until the next write or `lakehouse repair {result.table}`."
        )
        result.warnings.append(message)
        log.warning(message)

    def _rewrite_in_wider_types(self, spark, table: Table, schema, removes: list[DataFile]) -> tuple[list[DataFile], list[DataFile]]:
        """Widening a Delta-mirrored table: rewrite the live files this write does not already replace.

        Iceberg widens in metadata, but Delta without its typeWidening feature (which delta-rs cannot
        write) requires every file to hold the declared types. Rewriting once, in Spark, keeps a single
        file set for both formats; the Delta mirror then replaces its schema and file list in one commit.
        """
        replaced = {f.file_path for f in removes}
        rest = [f for f in ic.live_data_files(table) if f.file_path not in replaced]
        if not rest:
            return [], []
        wider = read_parquet_files(spark, [f.file_path for f in rest], iceberg_to_spark_schema(schema), self.storage, cast_files=True)
        written = write_table_files(wider, table, self.storage, schema=schema)
        return ic.data_files_from_written(table, normalize_uri(table.location()), written, schema), rest

    def _remove_window(
        self, spark, table: Table, expr: BooleanExpression, window: Window, schema, cast_files: bool
    ) -> tuple[list[DataFile], list[DataFile]]:
        """Files to drop for a window overwrite, plus rewrites of files that straddle the window's edges."""
        strict = _StrictMetricsEvaluator(table.schema(), expr).eval
        candidates = ic.live_data_files(table, row_filter=expr)
        whole = [f for f in candidates if strict(f) == ROWS_MUST_MATCH]
        partial = [f for f in candidates if strict(f) != ROWS_MUST_MATCH]
        rewritten: list[DataFile] = []
        if partial:
            from pyspark.sql import functions as F

            kept = read_parquet_files(spark, [f.file_path for f in partial], iceberg_to_spark_schema(schema), self.storage, cast_files=cast_files)
            c = F.col(window.column)
            kept = kept.filter(c.isNull() | ~((c >= F.lit(window.start)) & (c < F.lit(window.end))))
            written = write_table_files(kept, table, self.storage, schema=schema)
            rewritten = ic.data_files_from_written(table, normalize_uri(table.location()), written, schema)
        return whole + partial, rewritten

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
        window: Window | None = None,
    ):
        """A Spark DataFrame of the table now, or as of an Iceberg snapshot, a Delta version or a time.

        Iceberg scan planning prunes files by partition and min/max before Spark opens any; a Delta
        version is read from the Delta log's own file list.
        """
        table = self.load(identifier)
        if sum(x is not None for x in (snapshot_id, delta_version, as_of)) > 1:
            raise SpecError(f"Table {identifier}: give at most one of snapshot_id, delta_version, as_of.")
        expr: BooleanExpression = AlwaysTrue()
        if row_filter is not None:
            from pyiceberg.expressions.parser import parse

            expr = parse(row_filter) if isinstance(row_filter, str) else row_filter
        if window is not None:
            expr = And(expr, _window_expression(table, window))
        _check_retention(table, identifier, snapshot_id, delta_version, as_of)
        if delta_version is not None:
            delta = self.mirror(table).load(delta_version)
            if delta is None:
                raise TableNotFound(f"Table {identifier} has no Delta log at {table.location()}.")
            root = normalize_uri(table.location())
            uris = [join_uri(root, p) for p in pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist()]
            spark_schema = _delta_spark_schema(delta)
        else:
            snap = None
            if snapshot_id is not None:
                snap = table.snapshot_by_id(snapshot_id)
                if snap is None:
                    raise LookupError(f"Table {identifier} has no snapshot {snapshot_id} (it may have been expired).")
            elif as_of is not None:
                snap = table.snapshot_as_of_timestamp(int(as_of.timestamp() * 1000))
                if snap is None:
                    raise LookupError(f"Table {identifier} has no snapshot at or before {as_of.isoformat()}.")
            else:
                snap = table.current_snapshot()
            # Time travel reads with the schema the snapshot was written with.
            schema = table.schemas().get(snap.schema_id, table.schema()) if snap is not None and snap.schema_id is not None else table.schema()
            spark_schema = iceberg_to_spark_schema(schema)
            if snap is None:
                return spark.createDataFrame([], spark_schema)
            uris = [t.file.file_path for t in table.scan(snapshot_id=snap.snapshot_id, row_filter=expr).plan_files()]
        df = read_parquet_files(spark, uris, spark_schema, self.storage, cast_files=types_were_widened(table))
        if row_filter is not None and isinstance(row_filter, str):
            df = df.filter(row_filter)
        if window is not None:
            from pyspark.sql import functions as F

            c = F.col(window.column)
            df = df.filter((c >= F.lit(window.start)) & (c < F.lit(window.end)))
        return df

    # ------------------------------------------------------------ maintenance

    def maintain(self, identifier: str, operation: str = "full_maintenance", *, dry_run: bool = False, spark=None, **settings) -> dict[str, Any]:
        """Run a maintenance operation (see core/maintenance.py) on one table; returns what it did."""
        from . import maintenance

        return maintenance.run(self, identifier, operation, dry_run=dry_run, spark=spark, **settings)

    # ------------------------------------------------------------ time travel

    def point_in_time(self, identifier: str, *, snapshot_id: int | None = None, delta_version: int | None = None, as_of: dt.datetime | None = None):
        """The same point in time as (Iceberg snapshot id, Delta version), from any one of the three."""
        from .time_travel import resolve

        table = self.load(identifier)
        return resolve(table, self.mirror(table) if self.delta_enabled(table) else None, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of)

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
                    "iceberg_snapshot_id": _current_id(table),
                    "delta_version": delta.version() if delta is not None else None,
                    "partition_by": spec_terms(table.spec(), table.schema()),
                    "formats": table.properties.get(FORMATS_PROPERTY, ",".join(ALL_FORMATS)).split(","),
                }
            )
        return out

    def history(self, identifier: str) -> list[dict[str, Any]]:
        """Every retained commit, newest first: Iceberg snapshot <-> Delta version, operation, counts, writer, time."""
        table = self.load(identifier)
        delta_versions: dict[int, int] = {}
        if self.delta_enabled(table) and (delta := self.mirror(table).load()) is not None:
            for commit in delta.history():
                sid = commit.get(ICEBERG_SNAPSHOT_ID)
                if sid is not None:
                    delta_versions[int(sid)] = commit["version"]
        out = []
        snap = table.current_snapshot()
        while snap is not None:
            s = snap.summary.additional_properties if snap.summary else {}
            out.append(
                {
                    "iceberg_snapshot_id": snap.snapshot_id,
                    "iceberg_sequence_number": snap.sequence_number,
                    "delta_version": delta_versions.get(snap.snapshot_id),
                    "timestamp": dt.datetime.fromtimestamp(snap.timestamp_ms / 1000, dt.timezone.utc).isoformat(),
                    "operation": s.get(ic.OPERATION, snap.summary.operation.value if snap.summary else None),
                    "files_added": int(s.get("added-data-files", 0)),
                    "files_removed": int(s.get("deleted-data-files", 0)),
                    "rows_added": int(s.get("added-records", 0)),
                    "rows_removed": int(s.get("deleted-records", 0)),
                    "total_rows": int(s.get("total-records", 0)),
                    "writer": json.loads(s.get(ic.WRITER, "{}")),
                    "write_id": s.get(ic.WRITE_ID),
                }
            )
            snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        return out

    def verify(self, identifier: str, *, deep: bool = False) -> dict[str, Any]:
        """Do the formats agree? Per live file: presence, rows, partition values and stats; the schema.
        `deep=True` also compares the content as DuckDB reads each format (see core/verify.py)."""
        from .verify import verify_table

        table = self.load(identifier)
        return verify_table(table, self.mirror(table) if self.delta_enabled(table) else None, deep=deep)

    def delta_lag(self, identifier: str) -> int | None:
        """Iceberg snapshots the Delta log has not mirrored yet, from metadata only (no manifests, no file lists).

        0 when up to date (or Delta is off); None when the Delta log is missing or unreadable, or the
        snapshots it lags behind were expired: `repair` is needed either way.
        """
        table = self.load(identifier)
        if not self.delta_enabled(table):
            return 0
        mirror = self.mirror(table)
        try:
            delta = mirror.load()
        except Exception:  # noqa: BLE001 - an unreadable log is what repair is for
            return None
        snapshot = table.current_snapshot()
        if delta is None or snapshot is None:
            return None if delta is None else 0
        pending = mirror.pending_snapshots(table, snapshot, mirror.mirrored_sequence_number(delta))
        return None if pending is None else len(pending)

    def repair(self, identifier: str) -> dict[str, Any]:
        """Bring Delta up to Iceberg (idempotent): mirrors every snapshot Delta has not seen."""
        table = self.load(identifier)
        if not self.delta_enabled(table):
            return {"table": identifier, "delta_version": None, "repaired": False, "reason": "Delta is not enabled for this table"}
        mirror = self.mirror(table)
        before = mirror.load()
        before_version = before.version() if before is not None else None
        version = mirror.sync(table)
        return {"table": identifier, "delta_version_before": before_version, "delta_version": version, "repaired": version != before_version}


# ---------------------------------------------------------------- helpers


def _current_id(table: Table) -> int | None:
    snap = table.current_snapshot()
    return snap.snapshot_id if snap else None


def _check_retention(table: Table, identifier: str, snapshot_id, delta_version, as_of) -> None:
    """Time travel beyond the maintenance retention window is refused in both formats alike."""
    from .maintenance import RETENTION_DELTA_MIN_VERSION, RETENTION_MIN_TIMESTAMP

    min_ts = table.properties.get(RETENTION_MIN_TIMESTAMP)
    min_version = table.properties.get(RETENTION_DELTA_MIN_VERSION)
    fix = "Read a newer version, or raise snapshot_retention_days / min_snapshots_to_keep before the next maintenance run."
    if snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None and min_ts is not None:
        raise RetentionError(
            f"Table {identifier}: snapshot {snapshot_id} is not retained (snapshots before "
            f"{_iso(int(min_ts))} were expired by maintenance). {fix}"
        )
    if delta_version is not None and min_version is not None and delta_version < int(min_version):
        raise RetentionError(
            f"Table {identifier}: Delta version {delta_version} is outside the retention window "
            f"(the oldest retained version is {min_version}). {fix}"
        )
    if as_of is not None and min_ts is not None:
        as_of_ms = int(as_of.timestamp() * 1000)  # same convention as the snapshot lookup below
        if as_of_ms < int(min_ts):
            raise RetentionError(
                f"Table {identifier}: {as_of.isoformat()} is before the retention window (the oldest retained "
                f"snapshot is from {_iso(int(min_ts))}). {fix}"
            )


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def _as_spark(df, spark):
    """Spark DataFrames pass through; pyarrow Tables and pandas DataFrames (small assets) are converted."""
    if hasattr(df, "sparkSession") and hasattr(df, "mapInArrow"):
        return df
    from pyspark.sql import SparkSession

    spark = spark or SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    try:
        import pyarrow as pa

        if isinstance(df, pa.Table):
            df = df.to_pandas()
    except ImportError:  # pragma: no cover
        pass
    import pandas as pd

    if isinstance(df, pd.DataFrame):
        return spark.createDataFrame(df)
    raise SpecError(f"Cannot write an object of type {type(df).__name__}: pass a Spark DataFrame, a pyarrow Table or a pandas DataFrame.")


def _delta_spark_schema(delta):
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = pa.schema(delta.schema().to_arrow())
    # delta-rs reports the plain Arrow view; Spark wants microsecond timestamps and small types.
    fields = []
    for f in arrow:
        t = f.type
        if pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz=t.tz)
        fields.append(pa.field(f.name, t, f.nullable))
    return from_arrow_schema(pa.schema(fields), prefer_timestamp_ntz=True)  # Delta timestamp_ntz is Spark's TimestampNTZ


def _check_delta_partitioning(identifier: str, schema, partition_spec) -> None:
    from pyiceberg.types import BinaryType

    for pf in partition_spec.fields:
        source = schema.find_field(pf.source_id)
        if pf.transform.__class__.__name__ == "IdentityTransform" and isinstance(source.field_type, BinaryType):
            raise SpecError(
                f"Table {identifier}: identity partition on binary column {source.name!r} has no Delta representation. "
                f"Use bucket(n, {source.name}) or truncate(w, {source.name})."
            )


def _literal(table: Table, column: str, value):
    t = table.schema().find_field(column).field_type
    if isinstance(t, DateType):
        return (value.date() if isinstance(value, dt.datetime) else value).isoformat()
    if isinstance(t, TimestamptzType):
        v = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).isoformat()
    if isinstance(t, TimestampType):
        v = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return v.replace(tzinfo=None).isoformat()
    raise SpecError(f"Table {table.name()}: partition window column {column!r} is {t}; windows need a date or timestamp column.")


def _window_expression(table: Table, window: Window) -> BooleanExpression:
    return And(
        GreaterThanOrEqual(window.column, _literal(table, window.column, window.start)),
        LessThan(window.column, _literal(table, window.column, window.end)),
    )


def _check_inside_window(identifier: str, table: Table, adds: list[DataFile], window: Window, expr: BooleanExpression) -> None:
    """Every new row must lie inside the window (checked on footer min/max, no extra Spark job)."""
    strict = _StrictMetricsEvaluator(table.schema(), expr).eval
    outside = [f for f in adds if strict(f) != ROWS_MUST_MATCH]
    if outside:
        raise InputError(
            f"Table {identifier}: the data for window [{window.start}, {window.end}) of column {window.column!r} has rows "
            f"outside it (or null in {window.column!r}) in {len(outside)} file(s). Filter the DataFrame to the partition's "
            "window; nothing was committed."
        )

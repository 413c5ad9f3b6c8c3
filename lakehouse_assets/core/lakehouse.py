"""`Lakehouse`: the public entry point of the core. Writes, reads, schema changes, history, time travel,
rollback, maintenance and the formats-agree check, each on one table.

The facade holds what every operation needs (a `TableContext`: catalog, warehouse, storage, Delta settings)
and hands it to the module that does the work: one write runs in core/write/table_write.py (its docstring
gives the order that keeps both formats safe when any step fails), a repair in core/maintenance/repair.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
from typing import Any, Literal, Mapping, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import Table

from . import maintenance as maintenance_
from .errors import RetentionError, SpecError, TableNotFound
from .formats import foreign_delta, history
from .formats.delta_column_mapping import enabled as mapping_enabled
from .formats.delta_column_mapping import mapping_keys
from .formats.delta_committer import DeltaMirror
from .io.storage import StorageConfig, normalize_uri
from .maintenance import rollback as rollback_
from .maintenance.repair import repair_table
from .maintenance.verify import verify_table
from .model import FileChanges, MergeOptions, PublishResult, TableOptions, WriteRequest, WriteResult
from .properties import DEFAULT_DELTA_CONFIGURATION, Operation, SummaryKeys
from .read import changes as changes_
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
from .schema.window import Slice, Window
from .spark.session import active_session
from .table import branches as branches_
from .table import tables
from .table.catalog import open_catalog
from .table.context import TableContext
from .write import alter as alter_
from .write import publish as publish_
from .write import table_write, transaction
from .write.stream import StreamWriter

__all__ = ["Lakehouse", "MergeOptions", "Slice", "TableOptions", "Window", "WriteResult"]

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
        merge: MergeOptions | None = None,
        window: Window | Slice | None = None,
        write_id: str | None = None,
        table: TableOptions | None = None,
        writer: dict[str, str] | None = None,
        snapshot_properties: Mapping[str, str] | None = None,
        branch: str | None = None,
        spark=None,
    ) -> WriteResult:
        """Write a Spark DataFrame (or a pyarrow Table, a pandas or a Polars DataFrame) to both formats.

        mode="append" adds rows; mode="overwrite" replaces the whole table, or only the rows inside
        `window` when one is given: a `Window` (a time range of one column) or a `Slice` (a window
        and/or sets of values of other columns, e.g. a Dagster static or multi-partition).
        mode="merge" upserts by `merge=MergeOptions(keys=[...])` (copy-on-write, see core/write/merge.py).

        `partition_by`: the partition terms of a new table (e.g. ["day(ts)", "bucket(4, id)"]); an existing
        table's must match. `table`: the other settings of a new table (`TableOptions`: formats, properties,
        target file size, schema evolution). `write_id` makes the write idempotent: a second write with the
        same id commits nothing and returns the first write's snapshot. `writer`: who wrote it, and
        `snapshot_properties`: any other facts about the write, recorded in the Iceberg snapshot summary and the
        Delta commit (keys starting with `lakehouse.` reach the Delta commit).

        `branch`: commit to that Iceberg branch instead of main (created at main's current snapshot if new):
        main and the Delta log do not change, and only readers that ask for the branch see the rows until
        `publish`. The write plans against the branch (a merge matches the branch's rows).
        """
        request = self._request(identifier, mode, partition_by, merge, window, write_id, table or TableOptions(), writer, snapshot_properties)
        request = dataclasses.replace(request, branch=branches_.target_branch(identifier, branch))
        return table_write.write(self.context, df, request, foreign_default=self.foreign_delta_default, spark=spark)

    def stream_writer(self, identifier: str, mode: Literal["append", "overwrite", "merge"] = "append", **options) -> "StreamWriter":
        """A `foreachBatch` sink writing each micro-batch exactly once to both formats (core/write/stream.py)."""
        return StreamWriter(self, identifier, mode, **options)

    def _request(self, identifier, mode, partition_by, merge, window, write_id, table: TableOptions, writer, snapshot_properties=None) -> WriteRequest:
        if mode == "merge" and merge is None:
            raise SpecError(f"Table {identifier}: mode='merge' needs merge=MergeOptions(keys=[...]), the columns that identify a row.")
        if merge is not None and mode != "merge":
            raise SpecError(f"Table {identifier}: merge options were given but mode is {mode!r}; use mode='merge'.")
        spec = TableSpec(
            identifier,
            partition_by=tuple(partition_by or ()),
            formats=tuple(table.formats or ALL_FORMATS),
            # A resource-wide Delta statistics or column-mapping setting is the new table's too: both formats follow the table's properties.
            properties={**policy_keys(self.delta_configuration), **mapping_keys(self.delta_configuration), **(table.properties or {})},
            target_file_size=table.target_file_size or DEFAULT_TARGET_FILE_SIZE,
            schema_evolution=table.schema_evolution,
        )
        window = Slice.of(window) if window is not None else None
        merge = merge.check(identifier) if merge else None
        return WriteRequest(spec, mode, window, write_id, writer, table.target_file_size, merge, dict(snapshot_properties or {}))


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
        branch: str | None = None,
    ):
        """A Spark DataFrame of the table now, or as of an Iceberg snapshot, a Delta version or a time.

        Iceberg scan planning prunes files by partition and min/max before Spark opens any; a Delta
        version is read from the Delta log's own file list. `row_filter` (SQL text or a pyiceberg
        expression) also filters the rows of the files it keeps. `branch`: the head of that Iceberg branch
        (e.g. the rows a write-audit-publish run staged) instead of main.
        """
        table = self._on_branch(identifier, self.load(identifier), branch, snapshot_id, delta_version, as_of)
        return read_table(
            spark, identifier, table, self.storage, self.mirror(table),
            snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of, row_filter=row_filter, window=window,
        )

    def changes(self, identifier: str, start_snapshot_id: int | None = None, end_snapshot_id: int | None = None, *, spark=None):
        """A Spark DataFrame of the rows changed after `start_snapshot_id` (exclusive; None: since the table was
        created) up to `end_snapshot_id` (inclusive; None: now): the table's columns plus `_change_type`
        (`insert`, `delete`, `update_preimage`, `update_postimage`), `_commit_snapshot_id`, `_commit_version`
        (the Delta version) and `_commit_timestamp`. Exact: rows a commit wrote again unchanged never appear, and
        only the files each commit touched are read (see core/read/changes.py)."""
        table = self.load(identifier)
        snapshots = changes_.snapshots_in_range(identifier, table, start_snapshot_id, end_snapshot_id)
        delta = self.mirror(table).load() if self.delta_enabled(table) else None
        versions = history.delta_versions_of(delta, [s.snapshot_id for s in snapshots]) if delta is not None else {}
        return changes_.read_changes(active_session(spark), identifier, table, self.storage, snapshots, versions)

    def rows_as_changes(self, identifier: str, snapshot_id: int | None = None, *, spark=None):
        """The table at `snapshot_id` (default: now) in the shape of `changes`: every row an insert of that commit.
        What a consumer reads first, before reading changes from that snapshot on."""
        table = self.load(identifier)
        snap = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
        if snap is None:
            raise RetentionError(f"Table {identifier} has no snapshot {snapshot_id} (never written, or expired). See `lakehouse history {identifier}`.")
        delta = self.mirror(table).load() if self.delta_enabled(table) else None
        version = history.delta_version_of(delta, snap.snapshot_id) if delta is not None else None
        return changes_.as_inserts(self.read(active_session(spark), identifier, snapshot_id=snap.snapshot_id), snap, version)

    def consumed_snapshot(self, identifier: str, upstream: str) -> int | None:
        """The snapshot of table `upstream` up to which table `identifier`'s data includes its changes, as recorded
        by a write with `snapshot_properties={"lakehouse.consumed.<upstream>": id}` (None: never, or no table yet).
        Recorded in the same commit as the data, so a write that failed never advances it."""
        try:
            table = self.load(identifier)
        except TableNotFound:
            return None
        return history.consumed_snapshot(table, upstream)

    def read_arrow(
        self,
        identifier: str,
        *,
        columns: Sequence[str] | None = None,
        row_filter: str | BooleanExpression | None = None,
        snapshot_id: int | None = None,
        as_of: dt.datetime | None = None,
        window: Window | Slice | None = None,
        branch: str | None = None,
    ):
        """A pyarrow Table of the table (or of `columns`), now or as of a snapshot or a time, read by pyiceberg and
        pyarrow without Spark: for small tables and pandas/Polars assets (see core/read/arrow_reader.py).
        `branch`: the head of that Iceberg branch instead of main."""
        table = self._on_branch(identifier, self.load(identifier), branch, snapshot_id, None, as_of)
        return read_arrow(identifier, table, columns=columns, row_filter=row_filter, snapshot_id=snapshot_id, as_of=as_of, window=window)

    @staticmethod
    def _on_branch(identifier: str, table: Table, branch: str | None, snapshot_id, delta_version, as_of) -> Table:
        """The table as a read of `branch` sees it (its head as the current snapshot); main when None."""
        branch = branches_.target_branch(identifier, branch)
        if branch is None:
            return table
        if any(x is not None for x in (snapshot_id, delta_version, as_of)):
            raise SpecError(f"Table {identifier}: give a branch or a point in time (snapshot_id, delta_version, as_of), not both.")
        branches_.require_head(identifier, table, branch)
        return branches_.on_branch(table, branch)

    def snapshot_of_run(self, identifier: str, run_id: str) -> int:
        """The snapshot the Dagster run `run_id` left the table at (its last write to it)."""
        snap = history.find_snapshot_by_writer(self.load(identifier), "dagster_run_id", run_id)
        if snap is None:
            raise RetentionError(f"Table {identifier} has no retained snapshot written by run {run_id} (it never wrote the table, or that snapshot was expired).")
        return snap.snapshot_id

    # ------------------------------------------------------------ branches

    def publish(self, identifier: str, branch: str, *, spark=None) -> PublishResult:
        """Make the rows written to `branch` main's, in both formats: main fast-forwards to the branch's head when
        it has not moved since the branch forked; otherwise the branch's change is committed again on top of
        main when that is safe (appends; a merge or overwrite whose files main did not change and which main
        gained no rows since), else nothing changes and a `CommitConflict` says why. The Delta log then
        follows main. The branch is kept; `discard` removes it (see core/write/publish.py)."""
        branch = branches_.target_branch(identifier, branch)
        if branch is None:
            raise SpecError(f"Table {identifier}: name the branch to publish; main is what a publish goes to.")
        return publish_.publish(self.context, identifier, branch, foreign_default=self.foreign_delta_default, spark=spark)

    def discard(self, identifier: str, branch: str) -> dict[str, Any]:
        """Remove `branch` and with it every unpublished change on it; main and Delta are not touched. Snapshot
        expiry and orphan cleanup then reclaim the files only the branch referenced."""
        branch = branches_.target_branch(identifier, branch)
        if branch is None:
            raise SpecError(f"Table {identifier}: main cannot be discarded; name a branch (see lakehouse tables).")
        return publish_.discard(self.context, identifier, branch)

    def branches(self, identifier: str) -> dict[str, int]:
        """The table's Iceberg branches other than main: name -> head snapshot id (Delta has no branches)."""
        return branches_.branches(self.load(identifier))

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
                    "branches": branches_.branches(table),  # Iceberg only: Delta mirrors main
                }
            )
        return out

    def history(self, identifier: str, *, branch: str | None = None) -> list[dict[str, Any]]:
        """Every retained commit, newest first: Iceberg snapshot <-> Delta version, operation, counts, writer, time.
        `branch`: the commits of that Iceberg branch (its own have no Delta version until published)."""
        table = self.load(identifier)
        delta = self.mirror(table).load() if self.delta_enabled(table) else None
        delta_versions = history.delta_versions_by_snapshot(delta) if delta is not None else {}
        head = branches_.require_head(identifier, table, branch) if branches_.target_branch(identifier, branch) else None
        out = []
        for snap in history.ancestors(table, head):
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
                    "branch": s.get(SummaryKeys.BRANCH),  # written to this branch (None: to main)
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

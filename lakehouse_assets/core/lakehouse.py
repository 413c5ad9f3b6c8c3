"""`Lakehouse`: the public entry point of the core. Writes, reads, schema changes, history, time travel,
rollback, maintenance and the formats-agree check, each on one table.

The facade holds what every operation needs (a `TableContext`: catalog, warehouse, storage, Delta settings)
and hands it to the module that does the work; each method is a table-of-contents entry:
* writes: core/write/table_write.py (its docstring gives the order that keeps both formats safe when any
  step fails); column renames and drops, Delta column mapping: core/write/alter.py;
* reads: core/read/table_reader.py (Spark), core/read/arrow_reader.py (pyarrow), core/read/changes.py
  (changed rows); branches: core/table/branches.py, publish and discard: core/write/publish.py;
* tables, history, points in time and runs: core/read/inspection.py; rollback: core/maintenance/rollback.py;
* maintenance: core/maintenance/ (its registry), verify: core/maintenance/verify/formats_agree.py, repair:
  core/maintenance/repair.py.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any, Literal, Mapping, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import Table

from . import maintenance as maintenance_
from .formats.delta import foreign_versions as foreign_delta
from .formats.delta.committer import DeltaMirror
from .formats.delta.glue import GlueDeltaRegistration
from .io.storage import StorageConfig
from .maintenance import rollback as rollback_
from .maintenance.import_table import import_table as import_table_
from .maintenance.repair import repair_table
from .maintenance.verify.changes import VerifiedPair
from .maintenance.verify.settled import verify_settled
from .model import MergeOptions, PublishResult, TableOptions, WriteResult
from .properties import DEFAULT_DELTA_CONFIGURATION
from .read import changes as changes_
from .read import inspection
from .read.arrow_reader import read_arrow
from .read.table_reader import read_table
from .schema.window import Slice, Window
from .table import branches as branches_
from .table import tables
from .table.catalog import open_catalog
from .table.context import TableContext
from .write import alter as alter_
from .write import publish as publish_
from .write import row_level_modes, table_write
from .write.change_data import write_change_data
from .write.stream import StreamWriter

__all__ = ["Lakehouse", "MergeOptions", "Slice", "TableOptions", "Window", "WriteResult"]


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
        delta_glue: GlueDeltaRegistration | dict | None = None,
    ):
        # What a pickled copy is made again from (a Spark Connect stream's sink runs in the server's Python process).
        warehouse = warehouse or os.environ.get("LAKEHOUSE_WAREHOUSE") or "./warehouse"
        self._arguments = dict(
            warehouse=warehouse, catalog_name=catalog_name, catalog_properties=catalog_properties, storage=storage,
            delta_configuration=delta_configuration, foreign_delta_commits=foreign_delta_commits, delta_glue=delta_glue,
        )
        # The stored form of the URI (e.g. Azure's container@account) and the storage settings it implies.
        warehouse, storage = (storage or StorageConfig.from_env()).for_warehouse(warehouse)
        # What the commit pipeline, maintenance and repair receive instead of the facade.
        self.context = TableContext(
            catalog=open_catalog(warehouse, storage, catalog_name, catalog_properties),
            warehouse=warehouse,
            storage=storage,
            delta_configuration={**DEFAULT_DELTA_CONFIGURATION, **(delta_configuration or {})},
            delta_glue=GlueDeltaRegistration.of(delta_glue),  # every table's Delta side registered in Glue (formats/delta/glue.py)
            change_data=write_change_data,
        )
        # Tables without the property `lakehouse.delta.foreign-commits` follow this ("refuse" or "adopt").
        self.foreign_delta_default = foreign_delta.policy_of({}, foreign_delta_commits or foreign_delta.REFUSE)

    def __reduce__(self):
        """Pickled as the arguments it was made with: the copy opens its own catalog (a connection does not travel)."""
        return (_made_from, (self._arguments,))

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

        A pyarrow Table, pandas or Polars DataFrame is written in this process, without Spark, by the same Parquet
        writer and commits; Spark starts only for a merge, a data contract, or existing rows to rewrite.

        mode="append" adds rows; mode="overwrite" replaces the whole table, or only the rows inside
        `window` when one is given: a `Window` (a time range of one column) or a `Slice` (a window
        and/or sets of values of other columns, e.g. a Dagster static or multi-partition).
        mode="merge" upserts by `merge=MergeOptions(keys=[...])` (copy-on-write, or merge-on-read on a table whose
        write.merge.mode says so); with a `window`, only into the rows inside it (a partitioned asset merging its partition).

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
        request = table_write.request_of(
            self.context, identifier, mode, partition_by=partition_by, merge=merge, window=window, write_id=write_id,
            table=table, writer=writer, snapshot_properties=snapshot_properties, branch=branch,
        )
        return table_write.write(self.context, df, request, foreign_default=self.foreign_delta_default, spark=spark)

    def delete(
        self, identifier: str, where: str, *, write_id: str | None = None, writer: dict[str, str] | None = None,
        snapshot_properties: Mapping[str, str] | None = None, branch: str | None = None, spark=None,
    ) -> WriteResult:
        """Delete the rows `where` (a Spark SQL condition over the table's columns) matches, in both formats.

        Copy-on-write rewrites each file holding a match without it; merge-on-read (the table's `write.delete.mode`)
        records the rows' positions instead (a Delta deletion vector). A file whose statistics say every row matches is
        dropped without being read. Nothing matched: nothing is committed. `write_id`, `writer`, `snapshot_properties` and
        `branch` as for `write`. docs/deletes-and-erasure.md says what this does to history.
        """
        from .write import by_condition

        op = by_condition.RowOperation(identifier, where, None, write_id, writer, snapshot_properties, branch)
        return by_condition.run(self.context, op, foreign_default=self.foreign_delta_default, spark=spark)

    def update(
        self, identifier: str, set: Mapping[str, str], where: str, *, write_id: str | None = None, writer: dict[str, str] | None = None,
        snapshot_properties: Mapping[str, str] | None = None, branch: str | None = None, spark=None,
    ) -> WriteResult:
        """Set columns of the rows `where` matches: `set={"status": "'closed'", "amount": "amount * 2"}`, each value a
        Spark SQL expression over the row as it was, of the column's type (or one that widens to it without loss).

        Copy-on-write or merge-on-read by the table's `write.update.mode`. The new rows are checked against the table's
        contract before anything is written; the change feed pairs each row's pre- and post-image.
        """
        from .write import by_condition

        op = by_condition.RowOperation(identifier, where, dict(set or {}) if isinstance(set, Mapping) else set, write_id, writer, snapshot_properties, branch)
        return by_condition.run(self.context, op, foreign_default=self.foreign_delta_default, spark=spark)

    def erase(self, identifier: str, where: str, *, dependents: bool = False, spark=None) -> dict[str, Any]:
        """Erase the rows `where` matches from every file under the table's root, in both formats, with the history
        that held them (time travel then starts at the erasure); returns a report with the proof that nothing is left.
        The condition is never stored (core/maintenance/erase.py says what is). Refused while a branch or tag pins snapshots, or while the contract's
        quarantine table exists unless `dependents=True` erases it too (core/maintenance/erase.py)."""
        from .maintenance.erase import erase

        return erase(self.context, identifier, where, foreign_default=self.foreign_delta_default, dependents=dependents, spark=spark)

    def prove_erased(self, identifier: str, where: str, *, spark=None) -> dict[str, Any]:
        """Decode every file under the table's root (Parquet pages and footers, Avro manifests, JSON logs, Delta
        checkpoints) and report any row or value `where` still matches: `erased` is True when none is left."""
        from .maintenance.erase import proof

        return proof(self.context, identifier, where, spark=spark)

    def drop(self, identifier: str, *, purge: bool = False, dependents: bool = False) -> dict[str, Any]:
        """Drop the table from its catalog (and its Delta side's Glue entry). Its files stay unless `purge=True`, which
        removes every file under its root; the report says how to register kept files again. Refused while branches or
        the contract's quarantine table depend on it, unless `dependents=True` takes them along."""
        from .table.drop_rename import drop_table

        return drop_table(self.context, identifier, purge=purge, dependents=dependents)

    def rename(self, identifier: str, new_identifier: str, *, dependents: bool = False) -> dict[str, Any]:
        """Rename the table in its catalog (and its Delta side's Glue entry); its files stay where they are. Refused while
        the contract's quarantine table depends on it, unless `dependents=True` renames it too."""
        from .table.drop_rename import rename_table

        return rename_table(self.context, identifier, new_identifier, dependents=dependents)

    def stream_writer(self, identifier: str, mode: Literal["append", "overwrite", "merge"] = "append", **options) -> "StreamWriter":
        """A `foreachBatch` sink writing each micro-batch exactly once to both formats (core/write/stream.py)."""
        return StreamWriter(self, identifier, mode, **options)


    # ------------------------------------------------------------ schema operations

    def alter(
        self, identifier: str, rename: Mapping[str, str] | None = None, drop: Sequence[str] | None = None, *, write_mode: str | None = None
    ) -> dict[str, Any]:
        """Rename (`{"old": "new"}`) and drop top-level columns: one Iceberg schema update, no data file rewritten.

        Delta-mirrored tables need Delta column mapping (`upgrade`, or `delta.columnMapping.mode=name` at
        creation): the same change is then one metadata-only Delta version. Older snapshots and Delta versions
        keep reading with their old names.

        `write_mode`: "copy-on-write" or "merge-on-read", how later merges, CDC deletes and window overwrites
        remove rows (Iceberg's write.merge.mode, write.delete.mode and write.update.mode, all three; see
        docs/write-modes.md). Metadata only.
        """
        if write_mode is None or rename or drop:
            result = alter_.alter_columns(self.context, identifier, rename, drop)
        else:
            result = {}
        if write_mode is not None:
            result |= row_level_modes.set_row_level_mode(self.context, identifier, write_mode)
        return result

    def upgrade(self, identifier: str, *, column_mapping: bool = True) -> dict[str, Any]:
        """Turn the Delta change data feed on for a Delta-mirrored table (one created before the feed was the default),
        and its checkpoints' statistics as a struct where the table does not say (new tables' default: a process's
        first check then reads the live files' row counts alone), and, unless `column_mapping=False`, Delta column
        mapping, so renames and drops work in both formats (delta-rs's pyarrow reader and Polars refuse column-mapped
        tables).

        Metadata only: a Delta version each and one Iceberg property update; no data file is read or rewritten.
        Idempotent."""
        return alter_.upgrade_columns(self.context, identifier, column_mapping=column_mapping)

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
        table = branches_.read_view(identifier, self.load(identifier), branch, snapshot_id, delta_version, as_of)
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
        branch: str | None = None,
    ):
        """A pyarrow Table of the table (or of `columns`), now or as of a snapshot or a time, read by pyiceberg and
        pyarrow without Spark: for small tables and pandas/Polars assets.
        `branch`: the head of that Iceberg branch instead of main."""
        table = branches_.read_view(identifier, self.load(identifier), branch, snapshot_id, None, as_of)
        return read_arrow(identifier, table, columns=columns, row_filter=row_filter, snapshot_id=snapshot_id, as_of=as_of, window=window)

    def changes(self, identifier: str, start_snapshot_id: int | None = None, end_snapshot_id: int | None = None, *, spark=None):
        """A Spark DataFrame of the rows changed after `start_snapshot_id` (exclusive; None: since the table was
        created) up to `end_snapshot_id` (inclusive; None: now): the table's columns plus `_change_type`
        (`insert`, `delete`, `update_preimage`, `update_postimage`), `_commit_snapshot_id`, `_commit_version`
        (the Delta version) and `_commit_timestamp`. Exact: rows a commit wrote again unchanged never appear, and
        only the files each commit touched are read."""
        return changes_.table_changes(self.context, identifier, start_snapshot_id, end_snapshot_id, spark)

    def rows_as_changes(self, identifier: str, snapshot_id: int | None = None, *, spark=None):
        """The table at `snapshot_id` (default: now) in the shape of `changes`: every row an insert of that commit.
        What a consumer reads first, before reading changes from that snapshot on."""
        return changes_.rows_as_changes(self.context, identifier, snapshot_id, spark)

    def consumed_snapshot(self, identifier: str, upstream: str) -> int | None:
        """The snapshot of table `upstream` up to which table `identifier`'s data includes its changes, as recorded
        by a write with `snapshot_properties={"lakehouse.consumed.<upstream>": id}` (None: never, or no table yet).
        Recorded in the same commit as the data, so a write that failed never advances it."""
        return inspection.consumed_snapshot(self.context, identifier, upstream)

    # ------------------------------------------------------------ branches

    def publish(self, identifier: str, branch: str, *, spark=None) -> PublishResult:
        """Make the rows written to `branch` main's, in both formats: main fast-forwards to the branch's head when
        it has not moved since the branch forked; otherwise the branch's change is committed again on top of
        main when that is safe (appends; a merge or overwrite whose files main did not change and which main
        gained no rows since), else nothing changes and a `CommitConflict` says why. The Delta log then
        follows main. The branch is kept; `discard` removes it."""
        return publish_.publish(self.context, identifier, branch, foreign_default=self.foreign_delta_default, spark=spark)

    def discard(self, identifier: str, branch: str) -> dict[str, Any]:
        """Remove `branch` and with it every unpublished change on it; main and Delta are not touched. Snapshot
        expiry and orphan cleanup then reclaim the files only the branch referenced."""
        return publish_.discard(self.context, identifier, branch)

    def branches(self, identifier: str) -> dict[str, int]:
        """The table's Iceberg branches other than main: name -> head snapshot id (Delta has no branches)."""
        return branches_.branches(self.load(identifier))

    # ------------------------------------------------------------ history, time travel and rollback

    def tables(self) -> list[dict[str, Any]]:
        """Every table: location, current Iceberg snapshot and Delta version, partitioning, formats, branches."""
        return inspection.table_summaries(self.context)

    def history(self, identifier: str, *, branch: str | None = None) -> list[dict[str, Any]]:
        """Every retained commit, newest first: Iceberg snapshot <-> Delta version, operation, counts, writer, time.
        `branch`: the commits of that Iceberg branch (its own have no Delta version until published)."""
        return inspection.commit_history(self.context, identifier, branch)

    def point_in_time(self, identifier: str, *, snapshot_id: int | None = None, delta_version: int | None = None, as_of: dt.datetime | None = None):
        """The same point in time as (Iceberg snapshot id, Delta version), from any one of the three."""
        return inspection.point_in_time(self.context, identifier, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of)

    def snapshot_of_run(self, identifier: str, run_id: str) -> int:
        """The snapshot the Dagster run `run_id` left the table at (its last write to it)."""
        return inspection.snapshot_of_run(self.context, identifier, run_id)

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
        cannot be read back.
        """
        return rollback_.rollback_table(self.context, identifier, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of, run_id=run_id)

    # ------------------------------------------------------------ maintenance, verification and repair

    def maintain(self, identifier: str, operation: str = "full_maintenance", *, dry_run: bool = False, spark=None, **settings) -> dict[str, Any]:
        """Run a maintenance operation (`lakehouse maintain --help` lists them) on one table; returns what it did."""
        return maintenance_.run(self.context, identifier, operation, dry_run=dry_run, spark=spark, **settings)

    def verify(self, identifier: str, *, deep: bool = False, since: VerifiedPair | None = None) -> dict[str, Any]:
        """Do the formats agree? Per live file: presence, rows, partition values and stats; the schema.
        `deep=True` also compares the content as DuckDB reads each format. `since`: a pair of versions an earlier
        verify found agreeing (its report's `iceberg_snapshot_id` and `delta_version`): when both logs confirm it,
        only the files changed since are compared, and the report's `compared` says so."""
        return verify_settled(self.context, identifier, deep=deep, since=since)

    def delta_lag(self, identifier: str) -> int | None:
        """Iceberg snapshots the Delta log has not mirrored yet, from metadata only (no manifests, no file lists).

        0 when up to date (or Delta is off); None when the Delta log is missing or unreadable, or the
        snapshots it lags behind were expired: `repair` is needed either way.
        """
        return self.delta_lag_of(self.load(identifier))

    def delta_lag_of(self, table: Table, delta=None) -> int | None:
        """`delta_lag` of a loaded table; `delta`: its Delta table when the caller already loaded it."""
        return self.context.delta_lag_of(table, delta)

    def import_table(self, identifier: str, source: str | None = None, *, apply_deletes: bool = False, spark=None) -> dict[str, Any]:
        """Bring an existing Iceberg table (in this catalog, or a metadata file), Delta table or Parquet dataset under
        management over its own data files; raises ImportRefused, source unchanged (core/maintenance/import_table.py)."""
        return import_table_(self.context, identifier, source, apply_deletes=apply_deletes, spark=spark)

    def repair(
        self, identifier: str, *, apply_deletes: bool = False, adopt_delta: bool = False, revert_delta: bool = False, rewrite_files: bool = False, spark=None
    ) -> dict[str, Any]:
        """Bring Delta up to Iceberg (idempotent): mirrors every snapshot Delta has not seen.

        Raises MirrorRefused, with the reason and the fix, when a snapshot has no exact Delta equivalent
        (another engine's delete files, a rename, a partition spec change); Delta is then left as it was.
        `apply_deletes=True` first rewrites the data files that other engines' delete files remove rows
        from, with the deletes applied, as one Iceberg snapshot without delete files. `rewrite_files=True`
        first rewrites other engines' data files of a column-mapped table that hold columns under their
        current instead of their physical names.

        Delta versions another engine wrote are never mirrored over: the report says which and why
        (`repaired: False`). `adopt_delta=True` brings them into Iceberg as one snapshot; `revert_delta=True`
        undoes them with a new Delta version. Raises ForeignDeltaCommits, nothing changed, when they cannot
        be adopted.
        """
        return repair_table(
            self.context, identifier, apply_deletes=apply_deletes, adopt_delta=adopt_delta, revert_delta=revert_delta, rewrite_files=rewrite_files, spark=spark
        )


def _made_from(arguments: dict[str, Any]) -> Lakehouse:
    return Lakehouse(**arguments)

"""The rows a table's commits changed between two snapshots: inserts, deletes and updates, exactly.

Each Iceberg snapshot in the range says which data files it removed and added (its own manifest entries).
The rows it changed are the multiset difference of the two: rows of the removed files that are not in
the added files were deleted, rows of the added files that are not in the removed files were inserted.
So rows a copy-on-write merge, a window overwrite or a whole overwrite wrote again unchanged never
appear, a compaction changes nothing, and only the files a commit touched are read: the cost grows with
the change, not with the table.

Within a merge, a key both deleted and inserted is an update: its old row is an `update_preimage`,
its new row an `update_postimage`. The keys are the merge's own, recorded in its snapshot summary
(`lakehouse.merge.keys`); an update by condition pairs its rows on the columns it leaves alone
(`lakehouse.update.keys`). The change types and commit columns are the names of Delta's change data feed.

Other engines' row-level delete files count: a commit that adds one deletes the rows it removes, and the
commit that applies them (`repair --apply-deletes`) changes nothing a reader sees. Such a commit's files are
read with the delete files live before and after it applied. Snapshots outside the retained history are
refused: their files may be gone.
"""

from __future__ import annotations

import datetime as dt

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation as IcebergOperation
from pyiceberg.table.snapshots import Snapshot

from ..errors import RetentionError, SpecError
from ..formats import history
from ..formats.deletes import TableFiles, applies, has_delete_files, table_files
from ..formats.snapshot_changes import SnapshotChange, snapshot_change
from ..io.storage import StorageConfig
from ..properties import Operation, SummaryKeys
from ..schema.type_mapping import iceberg_to_spark_schema
from ..spark.session import active_session
from ..table.context import TableContext
from ..table.evolution import column_names_moved, types_were_widened
from .change_types import (  # noqa: F401 - the feed's columns and labels, named here too
    CHANGE_COLUMNS,
    CHANGE_TYPE,
    COMMIT_SNAPSHOT_ID,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)
from .delete_rows import PATH, POSITION, dropped_rows
from .reader import read_parquet_files
from .table_reader import read_table

_SIGN, _NET = "_lakehouse_sign", "_lakehouse_net"


def snapshots_in_range(identifier: str, table: Table, start_snapshot_id: int | None, end_snapshot_id: int | None) -> list[Snapshot]:
    """The snapshots after `start_snapshot_id` (exclusive; None: the table's first) up to `end_snapshot_id`
    (inclusive; None: the current one), oldest first. Refused when either end is not in the retained history
    of the current branch, or the history between them was expired."""
    by_id = history.snapshots_by_id(table)
    end = table.current_snapshot() if end_snapshot_id is None else by_id.get(end_snapshot_id)
    if end is None and end_snapshot_id is not None:
        raise RetentionError(f"Table {identifier} has no snapshot {end_snapshot_id} (never written, or expired). See `lakehouse history {identifier}`.")
    if start_snapshot_id is not None and start_snapshot_id not in by_id:
        raise RetentionError(
            f"Table {identifier}: changes since snapshot {start_snapshot_id} cannot be read: that snapshot is not in the table's "
            f"retained history (expired, or never written). Read the whole table instead, or start from a retained snapshot "
            f"(`lakehouse history {identifier}`)."
        )
    out: list[Snapshot] = []
    snap = end
    while snap is not None and snap.snapshot_id != start_snapshot_id:
        out.append(snap)
        # Expiry may leave the oldest retained snapshot without its parent id: only sequence number 1 is the first commit.
        first = snap.parent_snapshot_id is None and (snap.sequence_number or 1) <= 1
        if first:
            break
        parent = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        if parent is None:
            raise RetentionError(
                f"Table {identifier}: the history before snapshot {snap.snapshot_id} was expired, so the changes "
                f"{'since the first commit' if start_snapshot_id is None else f'since snapshot {start_snapshot_id}'} cannot be read "
                "exactly. Start from a retained snapshot (`lakehouse history`), or read the whole table."
            )
        snap = parent
    if start_snapshot_id is not None and (snap is None or snap.snapshot_id != start_snapshot_id):
        raise SpecError(f"Table {identifier}: snapshot {start_snapshot_id} is not an ancestor of snapshot {end.snapshot_id if end else None}; give the older one first.")
    return list(reversed(out))


def table_changes(ctx: TableContext, identifier: str, start_snapshot_id: int | None, end_snapshot_id: int | None, spark=None):
    """The rows changed after `start_snapshot_id` up to `end_snapshot_id`, with the Delta version of each commit."""
    table = ctx.load(identifier)
    snapshots = snapshots_in_range(identifier, table, start_snapshot_id, end_snapshot_id)
    delta = ctx.mirror(table).load() if ctx.delta_enabled(table) else None
    versions = history.delta_versions_of(delta, [s.snapshot_id for s in snapshots]) if delta is not None else {}
    return read_changes(active_session(spark), identifier, table, ctx.storage, snapshots, versions)


def rows_as_changes(ctx: TableContext, identifier: str, snapshot_id: int | None = None, spark=None):
    """The table at `snapshot_id` (default: now) in the shape of `table_changes`: every row an insert of that commit."""
    table = ctx.load(identifier)
    snap = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    if snap is None:
        raise RetentionError(f"Table {identifier} has no snapshot {snapshot_id} (never written, or expired). See `lakehouse history {identifier}`.")
    delta = ctx.mirror(table).load() if ctx.delta_enabled(table) else None
    version = history.delta_version_of(delta, snap.snapshot_id) if delta is not None else None
    rows = read_table(active_session(spark), identifier, table, ctx.storage, ctx.mirror(table), snapshot_id=snap.snapshot_id)
    return as_inserts(rows, snap, version)


def as_inserts(rows, snap: Snapshot, version: int | None):
    """A snapshot's rows as the changes that created them: every row an insert of that commit (a consumer's first
    read of a table whose early history may already be expired)."""
    from pyspark.sql import functions as F

    return _with_commit(rows.withColumn(CHANGE_TYPE, F.lit(INSERT)), snap, version)


def _with_commit(rows, snap: Snapshot, version: int | None):
    from pyspark.sql import functions as F

    return (
        rows.withColumn(COMMIT_SNAPSHOT_ID, F.lit(snap.snapshot_id).cast("long"))
        .withColumn(COMMIT_VERSION, F.lit(version).cast("long"))
        .withColumn(COMMIT_TIMESTAMP, F.lit(dt.datetime.fromtimestamp(snap.timestamp_ms / 1000, dt.timezone.utc)).cast("timestamp"))
    )


def read_changes(spark, identifier: str, table: Table, storage: StorageConfig, snapshots: list[Snapshot], delta_versions: dict[int, int]):
    """A Spark DataFrame of the rows `snapshots` changed, in the table's current schema (older files read by
    field id; a column they lack reads NULL), plus the change type and the commit columns."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    schema = table.schema()
    spark_schema = iceberg_to_spark_schema(schema, field_ids=column_names_moved(table))
    extra = [StructField(CHANGE_TYPE, StringType(), False), StructField(COMMIT_SNAPSHOT_ID, LongType(), False),
             StructField(COMMIT_VERSION, LongType(), True), StructField(COMMIT_TIMESTAMP, TimestampType(), False)]
    parts = []
    by_id = history.snapshots_by_id(table)
    for snap in snapshots:
        parent = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        rows = _snapshot_changes(spark, identifier, table, storage, snap, parent, spark_schema)
        if rows is None:
            continue
        parts.append(_with_commit(rows, snap, delta_versions.get(snap.snapshot_id)))
    if not parts:
        return spark.createDataFrame([], StructType([*(f for f in spark_schema.fields), *extra]))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _snapshot_changes(spark, identifier: str, table: Table, storage: StorageConfig, snap: Snapshot, parent: Snapshot | None, spark_schema):
    """The rows one snapshot changed, with their change type (None: it changed none)."""
    if _keeps_rows(snap):
        return None  # read no manifests
    return snapshot_changed_rows(spark, identifier, table, storage, snapshot_change(table, snap), parent, spark_schema)


def snapshot_changed_rows(spark, identifier: str, table: Table, storage: StorageConfig, change: SnapshotChange, parent: Snapshot | None, spark_schema):
    """The rows one snapshot's file changes (`change`) changed, with their change type (None: it changed none).
    What the Delta mirror writes as the version's change data files (core/write/change_data.py)."""
    from pyspark.sql import functions as F

    snap, summary = change.snapshot, history.summary(change.snapshot)
    if _keeps_rows(snap):
        return None
    if has_delete_files(table, snap) or (parent is not None and has_delete_files(table, parent)):
        # Rows are visible through other engines' delete files: compare what readers saw before and after.
        removed, added = _visible_rows_around(spark, identifier, table, storage, snap, parent, change, spark_schema)
    elif not change.adds and not change.removes:
        return None
    else:
        widened = types_were_widened(table)
        added = _rows(spark, change.adds, spark_schema, storage, widened)
        if not change.removes:
            return added.withColumn(CHANGE_TYPE, F.lit(INSERT))
        removed = _rows(spark, change.removes, spark_schema, storage, widened)
        if not change.adds:
            return removed.withColumn(CHANGE_TYPE, F.lit(DELETE))
    paired_on = summary.get(SummaryKeys.MERGE_KEYS) or summary.get(SummaryKeys.UPDATE_KEYS, "")
    keys = [k for k in paired_on.split(",") if k and k in spark_schema.fieldNames()]
    return _net_changes(removed, added, keys)


def rows_changed_between(spark, removed: list[str], added: list[str], spark_schema, storage: StorageConfig, cast_files: bool):
    """The rows of the files `removed` that are not in the files `added` (deletes) and the other way round (inserts):
    the change between two file sets, e.g. a Delta commit that brings a lagging log to the current snapshot at once."""
    from pyspark.sql import functions as F

    def rows(uris):
        return read_parquet_files(spark, uris, spark_schema, storage, cast_files=cast_files) if uris else spark.createDataFrame([], spark_schema)

    if not removed:
        return rows(added).withColumn(CHANGE_TYPE, F.lit(INSERT))
    return _net_changes(rows(removed), rows(added), [])


def _keeps_rows(snap: Snapshot) -> bool:
    """A compaction (or another engine's replace): files rewritten with the same rows."""
    return history.summary(snap).get(SummaryKeys.OPERATION) == Operation.COMPACTION or bool(snap.summary and snap.summary.operation == IcebergOperation.REPLACE)


def _visible_rows_around(spark, identifier: str, table: Table, storage: StorageConfig, snap: Snapshot, parent: Snapshot | None, change, spark_schema):
    """(rows readers saw before `snap`, rows they see after it) of the data files `snap` touched: the files it
    removed or added, and the unchanged files a delete file it added or removed applies to. Each side is read with
    the delete files live on that side applied (the Iceberg spec's rules, `delete_rows`)."""
    before = table_files(table, parent) if parent is not None else TableFiles([], [])
    after = table_files(table, snap)
    before_deletes = {e.data_file.file_path: e for e in before.deletes}
    after_deletes = {e.data_file.file_path: e for e in after.deletes}
    changed_deletes = [e for p, e in after_deletes.items() if p not in before_deletes] + [e for p, e in before_deletes.items() if p not in after_deletes]
    removed = {f.file_path for f in change.removes}
    added = {f.file_path for f in change.adds}
    kept = [e for e in after.data if e.data_file.file_path not in added and any(applies(d, e) for d in changed_deletes)]
    before_data = [e for e in before.data if e.data_file.file_path in removed] + kept
    after_data = [e for e in after.data if e.data_file.file_path in added] + kept
    return (
        _visible(spark, identifier, table, storage, TableFiles(before_data, before.deletes), spark_schema),
        _visible(spark, identifier, table, storage, TableFiles(after_data, after.deletes), spark_schema),
    )


def _visible(spark, identifier: str, table: Table, storage: StorageConfig, files: TableFiles, spark_schema):
    """The rows of `files.data` that `files.deletes` leave, in `spark_schema`."""
    if not files.data:
        return spark.createDataFrame([], spark_schema)
    uris = [e.data_file.file_path for e in files.data]
    rows = read_parquet_files(spark, uris, spark_schema, storage, path_column=PATH, position_column=POSITION, cast_files=True)
    drops = dropped_rows(spark, identifier, table, files, spark_schema, storage, persist=False)  # one lazy read: nothing left cached
    if drops is not None:
        rows = rows.join(drops, [PATH, POSITION], "left_anti")
    return rows.drop(PATH, POSITION)


def _rows(spark, files, spark_schema, storage: StorageConfig, cast_files: bool):
    # `cast_files`: older files may hold narrower types than the current schema (a widened column): the casting reader.
    return read_parquet_files(spark, [f.file_path for f in files], spark_schema, storage, cast_files=cast_files)


def _net_changes(removed, added, keys: list[str]):
    """Rows of `removed` not in `added` (deletes) and of `added` not in `removed` (inserts), compared as multisets
    of whole rows in one aggregation: each row counted -1 per removed copy and +1 per added copy. With `keys`, a
    key that has both a delete and an insert is an update (pre- and post-image). Map columns cannot be grouped
    by Spark: rows are then grouped by their JSON text, with timestamps to the microsecond."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = [f"`{c}`" for c in removed.columns]
    both = removed.withColumn(_SIGN, F.lit(-1)).unionByName(added.withColumn(_SIGN, F.lit(1)))
    if keys:
        # Partitioned by the keys once: the row counts (grouped by whole rows, keys included) and the window over the
        # keys then need no shuffle of their own.
        both = both.repartition(*[F.col(f"`{k}`") for k in keys])
    if any("map<" in f.dataType.simpleString() for f in removed.schema.fields):
        options = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
        text = F.to_json(F.struct(*[F.col(c) for c in cols]), options)
        net = both.groupBy(text.alias("_lakehouse_row")).agg(F.first(F.struct(*[F.col(c) for c in cols])).alias("_lakehouse_r"), F.sum(_SIGN).alias(_NET))
        net = net.select("_lakehouse_r.*", _NET)
    else:
        net = both.groupBy(*[F.col(c) for c in cols]).agg(F.sum(_SIGN).alias(_NET))
    net = net.filter(F.col(_NET) != 0)
    if keys:
        by_key = Window.partitionBy(*[F.col(f"`{k}`") for k in keys])
        update = (F.min(_NET).over(by_key) < 0) & (F.max(_NET).over(by_key) > 0)
        kind = F.when(F.col(_NET) < 0, F.when(update, UPDATE_PREIMAGE).otherwise(DELETE)).otherwise(F.when(update, UPDATE_POSTIMAGE).otherwise(INSERT))
    else:
        kind = F.when(F.col(_NET) < 0, DELETE).otherwise(INSERT)
    # A row removed or added n times is n changes.
    copies = F.explode(F.array_repeat(F.lit(0), F.abs(F.col(_NET)).cast("int")))
    return net.withColumn(CHANGE_TYPE, kind).select(*[F.col(c) for c in cols], CHANGE_TYPE, copies.alias("_lakehouse_copy")).drop("_lakehouse_copy")

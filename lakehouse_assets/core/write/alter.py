"""Explicit schema operations: rename and drop columns, as metadata-only changes.

A DataFrame cannot say "rename" (a renamed column looks like a new one), so these are operations of
their own. Iceberg tracks columns by field id: a rename or drop is one schema update (a new metadata
file, no snapshot), no data file is read or rewritten, and every Iceberg reader (pyiceberg, DuckDB
`iceberg_scan`, Java Iceberg, `core/read/reader.py`) resolves each column of the old files by field id.
Older snapshots keep their own schema, so time travel reads them with the old names.

Delta-mirrored tables need Delta column mapping (`delta.columnMapping.mode=name`): Delta then finds a
column in the files by its physical name, which never changes, so the rename or drop is one metadata-only
Delta version too (the mirror writes it right after the Iceberg update, `formats/delta/column_mapping.py`). A
table without it is turned over by `upgrade_table` (`lakehouse upgrade TABLE`): metadata only, the
columns' current names become their physical names. Without it a rename is refused with that advice.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from deltalake.transaction import CommitProperties
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from ..errors import CommitConflict, MirrorRefused, SchemaError, SpecError
from ..formats import file_columns
from ..formats.delta import column_mapping as delta_column_mapping
from ..formats.delta import log_commit as delta_log_commit
from ..formats.delta.committer import DeltaMirror
from ..properties import STATS_AS_STRUCT, Operation, SummaryKeys
from ..schema.type_mapping import check_column_names
from ..table.context import TableContext
from ..table.tables import delta_enabled
from .transaction import sync_delta

log = logging.getLogger("lakehouse")

DELTA_BLOCKED = (
    "Delta without column mapping identifies columns by their name in the Parquet files, so a rename or drop would make "
    "Delta readers disagree with Iceberg."
)


def alter_columns(ctx: TableContext, identifier: str, rename: Mapping[str, str] | None = None, drop: Sequence[str] | None = None) -> dict[str, Any]:
    """`alter_table`, then the same change in Delta right away (one metadata-only version, column mapping) rather
    than at the next write. A Delta failure leaves Iceberg changed and Delta lagging, as a write's would."""
    table = ctx.load(identifier)
    result = alter_table(table, identifier, rename, drop)
    if ctx.delta_enabled(table):
        try:
            mirror = ctx.mirror(table)
            sync_delta(mirror, ctx.load(identifier))
            result["delta_version"] = mirror.load().version()  # the schema's version (sync returns the snapshot's)
        except Exception as e:  # noqa: BLE001 - Iceberg is changed; Delta lags until the next write or repair, as for writes
            result["delta_lagging"], result["delta_error"] = True, f"{type(e).__name__}: {e}"
            log.warning("Table %s: columns changed in Iceberg; Delta lags: %s", identifier, e)
    return result


def upgrade_columns(ctx: TableContext, identifier: str, column_mapping: bool = True) -> dict[str, Any]:
    """`upgrade_table` of a table by name (the Delta side only when the table mirrors to Delta)."""
    table = ctx.load(identifier)
    return upgrade_table(table, identifier, ctx.mirror(table) if ctx.delta_enabled(table) else None, column_mapping=column_mapping)


def alter_table(table: Table, identifier: str, rename: Mapping[str, str] | None = None, drop: Sequence[str] | None = None) -> dict[str, Any]:
    """Rename and drop top-level columns of `table` in one Iceberg schema update. Returns what changed."""
    rename, drop = dict(rename or {}), list(drop or [])
    _validate(table, identifier, rename, drop)
    before = table.schema()
    try:
        with table.update_schema() as update:
            for old, new in rename.items():
                update.rename_column(old, new)
            for name in drop:
                update.delete_column(name)
    except CommitFailedException as e:
        raise CommitConflict(
            f"Table {identifier}: another writer changed the table while the schema update was committed ({e}); "
            "nothing was changed. Run the alter again."
        ) from e
    after = table.schema()
    snapshot = table.current_snapshot()
    return {
        "table": identifier,
        "renamed": rename,
        "dropped": drop,
        "schema_id_before": before.schema_id,
        "schema_id": after.schema_id,
        "columns": {f.name: str(f.field_type) for f in after.fields},
        "field_ids": {f.name: f.field_id for f in after.fields},
        "iceberg_snapshot_id": snapshot.snapshot_id if snapshot else None,  # unchanged: a schema update is no snapshot
        "iceberg_metadata_location": table.metadata_location,
        "data_files_rewritten": 0,
    }


def _validate(table: Table, identifier: str, rename: dict[str, str], drop: list[str]) -> None:
    schema = table.schema()
    names = [f.name for f in schema.fields]
    if not rename and not drop:
        raise SpecError(f"Table {identifier}: nothing to alter. Give rename={{'old': 'new'}} and/or drop=['column'].")
    if delta_enabled(table) and not file_columns.enabled(table.properties):
        raise SchemaError(
            f"Table {identifier}: cannot rename or drop columns of a table mirrored to Delta without Delta column mapping. "
            f"{DELTA_BLOCKED} Run `lakehouse upgrade {identifier}` (or Lakehouse.upgrade) once: it turns column mapping on "
            "as a metadata-only change (no data file is rewritten), then rename and drop freely."
        )
    for name in [*rename, *drop]:
        if name not in names:
            raise SchemaError(
                f"Table {identifier}: there is no top-level column {name!r} (columns: {', '.join(names)}). "
                "Only top-level columns can be renamed or dropped; names are case-sensitive."
            )
    if both := sorted(set(rename) & set(drop)):
        raise SpecError(f"Table {identifier}: column(s) {both} are both renamed and dropped; do one or the other.")
    if len(set(drop)) != len(drop):
        raise SpecError(f"Table {identifier}: drop lists a column twice: {drop}.")
    if len(drop) == len(names):
        raise SchemaError(f"Table {identifier}: dropping {drop} would leave no column. Keep at least one.")
    for old, new in rename.items():
        if not isinstance(new, str) or not new:
            raise SpecError(f"Table {identifier}: the new name for column {old!r} must be a non-empty string, got {new!r}.")
    final = [rename.get(n, n) for n in names if n not in drop]
    for old, new in rename.items():
        clash = [n for n in final if n.lower() == new.lower()]
        if len(clash) > 1:
            other = next(n for n in names if n != old and rename.get(n, n) in clash and n not in drop)
            raise SchemaError(
                f"Table {identifier}: cannot rename {old!r} to {new!r}: column {other!r} already has that name "
                "(names are compared case-insensitively, as Delta does). Drop or rename it in the same alter, or pick another name."
            )
    check_column_names(identifier, final)  # unique (case-insensitively) and storable in both formats
    partition_sources = {
        pf.source_id: f"{pf.name} ({pf.transform})" for spec in table.specs().values() for pf in spec.fields
    }
    for name in drop:
        field_id = schema.find_field(name).field_id
        if field_id in partition_sources:
            raise SchemaError(
                f"Table {identifier}: column {name!r} is the source of partition field {partition_sources[field_id]}; "
                "Iceberg cannot drop a column that a partition spec still uses. Keep it (or rename it)."
            )


# ---------------------------------------------------------------- upgrade to Delta column mapping


def upgrade_table(table: Table, identifier: str, mirror: DeltaMirror | None, attempts: int = 3, column_mapping: bool = True) -> dict[str, Any]:
    """Turn the Delta change data feed and column mapping on for a Delta-mirrored table, metadata only: the feed's
    table property and checkpoint statistics kept as a struct, as new tables have them (their own version, when
    either is missing), then for column mapping one Delta version (protocol and
    metaData: each column's Iceberg field id, and its name in the existing files as its physical name) and one
    Iceberg property update. Idempotent. A rename another engine made on the Iceberg side, which Delta could
    not follow, lands in the same Delta version. `column_mapping=False` turns the feed on alone: delta-rs's
    pyarrow reader, Polars and delta-rs's change feed reader refuse column-mapped tables."""
    if mirror is None:
        return {"table": identifier, "upgraded": False, "reason": "the table is Iceberg-only: renames and drops need no upgrade"}
    feed, struct = _enable_delta_defaults(mirror)
    turned_on = {"change_data_feed_enabled": feed, "checkpoint_stats_as_struct_enabled": struct}
    if not column_mapping:
        return {"table": identifier, "upgraded": False, "reason": "column mapping not asked for", **turned_on}
    if file_columns.enabled(table.properties):
        return {"table": identifier, "upgraded": False, "reason": "column mapping is already on", "delta_version": sync_delta(mirror, table), **turned_on}
    for attempt in range(attempts):
        try:
            sync_delta(mirror, table)
        except MirrorRefused:
            pass  # a rename Delta could not follow: the upgrade below expresses it, if nothing was written since
        delta = mirror.load()
        base = _schema_of_the_files(table, identifier, mirror, delta)
        props = {file_columns.MODE: "name", file_columns.SCHEMA_ID_PROPERTY: str(base.schema_id)}
        names = {f.field_id: f.name for f in base.fields}
        schema = table.schema()
        names.update({f.field_id: f.name for f in schema.fields if f.field_id not in names})  # new, never written yet
        try:
            version = delta_column_mapping.commit_schema(
                mirror.root_uri, mirror.storage, delta, schema, names, operation="UPGRADE COLUMN MAPPING",
                commit_info={SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE},
            )
            with table.transaction() as tx:  # fails if another writer committed since `table` was read: try again
                tx.set_properties(props)
        except (CommitFailedException, DeltaCommitFailedError):
            if attempt == attempts - 1:
                raise
            table = table.refresh()
            continue
        return {"table": identifier, "upgraded": True, "delta_version": version, "physical_names": {schema.find_column_name(i): n for i, n in names.items()},
                "data_files_rewritten": 0, **turned_on}
    raise AssertionError("unreachable")


def _enable_delta_defaults(mirror: DeltaMirror) -> tuple[bool, bool]:
    """Turn the Delta change data feed on, so that every rewrite from the next one on carries its change data files,
    and, where the table does not say, checkpoint statistics kept as a struct too (what new tables get: a process's
    first check then reads the row counts alone), in one metadata-only version through delta-rs. Whether this call
    turned each on."""
    delta = mirror.load()
    if delta is None:
        return False, False
    feed = not delta_log_commit.feed_enabled(delta)
    struct = STATS_AS_STRUCT not in (delta.metadata().configuration or {})
    wanted = {**({delta_log_commit.CHANGE_DATA_FEED: "true"} if feed else {}), **({STATS_AS_STRUCT: "true"} if struct else {})}
    if wanted:
        delta.alter.set_table_properties(
            wanted, commit_properties=CommitProperties(custom_metadata={SummaryKeys.OPERATION: Operation.DELTA_CONFIGURATION}),
        )
    return feed, struct


def _schema_of_the_files(table: Table, identifier: str, mirror: DeltaMirror, delta) -> Any:
    """The Iceberg schema whose column names the table's data files hold: the current one, or, after a rename on the
    Iceberg side that Delta did not follow, the one Delta still has (only if no snapshot was written since)."""
    delta_names = [f.name for f in delta.schema().fields]
    current = table.schema()
    if [f.name for f in current.fields if f.name in delta_names] == delta_names:
        return current
    pending = mirror.pending_snapshots(table, table.current_snapshot(), mirror.mirrored_sequence_number(delta))
    for schema in sorted(table.schemas().values(), key=lambda s: s.schema_id, reverse=True):
        if [f.name for f in schema.fields] == delta_names and not pending:
            return schema
    raise SchemaError(
        f"Table {identifier}: Delta's columns {delta_names} match no Iceberg schema whose files are all mirrored "
        f"(Delta lags {len(pending or [])} snapshot(s) written after the columns changed, so some files hold other names). "
        "Turning column mapping on now would make Delta read NULL for the renamed column in the files written since the rename. "
        "Delta stays as it is (`lakehouse verify` reports the lag); see the docs, 'Schema evolution and renames', for the ways out."
    )

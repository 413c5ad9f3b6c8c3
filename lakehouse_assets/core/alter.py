"""Explicit schema operations: rename and drop columns, as metadata-only changes.

A DataFrame cannot say "rename" (a renamed column looks like a new one), so these are operations of
their own. Iceberg tracks columns by field id: a rename or drop is one schema update (a new metadata
file, no snapshot), no data file is read or rewritten, and every Iceberg reader (pyiceberg, DuckDB
`iceberg_scan`, Java Iceberg, `core/reader.py`) resolves each column of the old files by field id.
Older snapshots keep their own schema, so time travel reads them with the old names.

Delta-mirrored tables are refused. Delta resolves columns by Parquet name unless the table uses
column mapping, and delta-rs 1.6.6, the only Delta writer here, cannot carry a column-mapped table
(it cannot enable the mode on an existing table, refuses ADD COLUMN and `delta.*` field metadata on
one, and its Arrow reader returns nulls for every column of one). README, "Renames and drops", has
the evidence; `test_alter.py::test_delta_rs_cannot_carry_column_mapping` pins it down.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from .errors import CommitConflict, SchemaError, SpecError
from .tables import delta_enabled
from .type_mapping import check_column_names

DELTA_BLOCKED = (
    "Delta without column mapping identifies columns by their Parquet name, so a rename or drop would make Delta "
    "readers disagree with Iceberg, and delta-rs 1.6.6 cannot enable column mapping on an existing table, add columns "
    "to a column-mapped one or rename a column (see the README, 'Renames and drops')."
)


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
    if delta_enabled(table):
        raise SchemaError(
            f"Table {identifier}: cannot rename or drop columns of a table mirrored to Delta. {DELTA_BLOCKED} "
            "Create the table with formats=['iceberg'] to rename and drop in Iceberg, or keep the column and write a new one."
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

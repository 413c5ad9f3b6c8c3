"""Which name each column has inside a table's Parquet files: its current name, or its Delta physical name.

A table with Delta column mapping (`delta.columnMapping.mode=name`, see formats/delta/column_mapping.py) keeps a
column's name in the files fixed when the column is renamed, and gives a column added later a generated name; Iceberg
readers find columns by field id and never notice. Everything that writes or reads the files by name (the writer, the
Iceberg commit's footer statistics, the Delta mirror, schema evolution) asks this module, and it answers from the
Iceberg metadata alone, so every writer of the table agrees.
"""

from __future__ import annotations

from typing import Mapping

from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

MODE = "delta.columnMapping.mode"  # also the Iceberg table property that turns column mapping on for a table
# The Iceberg schema that was current when column mapping was turned on: its columns keep their names as
# physical names (the files already hold them); every column added later gets a generated one.
SCHEMA_ID_PROPERTY = "lakehouse.delta.column-mapping.schema-id"


def enabled(properties: Mapping[str, str]) -> bool:
    """Whether a table (its Iceberg properties) uses Delta column mapping."""
    return properties.get(MODE) == "name"


def file_names(table, schema: Schema) -> dict[int, str] | None:
    """Top-level field id -> the column's name inside the Parquet files written for `schema` (its physical name).

    None when the table does not use column mapping (files hold the columns' current names). With it, a
    column that existed when mapping was turned on keeps that name for good, and a column added later is
    named `col-<table>-<field id>`: Iceberg never reuses a field id, so a physical name is never reused, and a
    column dropped and added again under its old name reads NULL for the old rows in every reader.
    Derived from Iceberg metadata alone, so every writer of the table (appends, merges, compaction) agrees."""
    if not enabled(table.properties):
        return None
    base_id = table.properties.get(SCHEMA_ID_PROPERTY)
    base = table.schemas().get(int(base_id)) if base_id is not None and base_id.lstrip("-").isdigit() else None
    if base is None:
        from ..errors import SchemaError

        t = ".".join(table.name())
        raise SchemaError(
            f"Table {t}: table property {MODE}=name asks for Delta column mapping, but property {SCHEMA_ID_PROPERTY} "
            f"({base_id!r}) names no Iceberg schema of the table, so the columns' physical names are unknown. Turn column "
            f"mapping on with `lakehouse upgrade {t}` (which sets both), not by setting the property alone."
        )
    kept = {f.field_id: f.name for f in base.fields}
    tag = str(table.metadata.table_uuid).replace("-", "")[:8]
    return {f.field_id: kept.get(f.field_id) or f"col-{tag}-{f.field_id}" for f in schema.fields}


def renamed_in_files(table, schema: Schema) -> dict[int, str]:
    """The top-level columns whose physical name differs from their name (field id -> physical name): empty unless
    the table uses column mapping and a column was renamed, or added since mapping was turned on."""
    names = file_names(table, schema) or {}
    return {f.field_id: names[f.field_id] for f in schema.fields if names.get(f.field_id, f.name) != f.name}


def misnamed_files(table, uris: list[str], renamed: Mapping[int, str]) -> list[str]:
    """The data files among `uris` that hold a column of `renamed` (field id -> physical name) under another name:
    another engine's Iceberg writer names columns by their current names, where Delta readers, under column
    mapping, look for the physical name and would read NULL. Reads each file's footer (only when `renamed`)."""
    import pyarrow.parquet as pq

    if not renamed:
        return []
    out = []
    for uri in uris:
        with table.io.new_input(uri).open() as f:
            file_schema = pq.read_schema(f)
        for field in file_schema:
            raw = (field.metadata or {}).get(b"PARQUET:field_id")
            if raw is not None and int(raw) in renamed and field.name != renamed[int(raw)]:
                out.append(uri)
                break
    return out


def with_file_names(schema: Schema, names: Mapping[int, str] | None) -> Schema:
    """`schema` with each top-level column under its name in the files (`file_names`), e.g. to map a Parquet footer's column paths to field ids."""
    if not names:
        return schema
    fields = [NestedField(f.field_id, names.get(f.field_id, f.name), f.field_type, required=f.required, doc=f.doc) for f in schema.fields]
    return Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=schema.identifier_field_ids)

"""Schema evolution rules shared by both formats.

Iceberg is changed first (new columns get new field ids); the Delta schema is derived from it at the
next Delta commit. Only changes every reader of both formats handles without rewriting files are
accepted: new optional columns, safe widening, relaxing NOT NULL. Anything else fails before a
single file is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, ListType, LongType, MapType, NestedField, StructType

from ..errors import SchemaError
from ..formats.file_columns import file_names

_WIDENINGS = {(IntegerType, LongType), (FloatType, DoubleType)}


def _widens(old: IcebergType, new: IcebergType) -> bool:
    if (type(old), type(new)) in _WIDENINGS:
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision > old.precision
    return False


def _shape(t: IcebergType) -> str:
    """A nested type by names and types only: field ids and nullability of the incoming DataFrame are arbitrary."""
    if isinstance(t, StructType):
        return "struct<" + ",".join(f"{f.name}:{_shape(f.field_type)}" for f in t.fields) + ">"
    if isinstance(t, ListType):
        return f"list<{_shape(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{_shape(t.key_type)},{_shape(t.value_type)}>"
    return str(t)


def _narrows(old: IcebergType, new: IcebergType) -> bool:
    """The incoming type is narrower than the table's and casts losslessly into it (e.g. int into a long column)."""
    return _widens(new, old)


@dataclass
class SchemaPlan:
    """What must change in the table schema before data with `incoming` can be written."""

    add: list[NestedField]
    widen: list[tuple[str, IcebergType]]
    make_optional: list[str]

    @property
    def empty(self) -> bool:
        return not (self.add or self.widen or self.make_optional)

    def describe(self) -> str:
        parts = [f"add {f.name} {f.field_type}" for f in self.add]
        parts += [f"widen {n} to {t}" for n, t in self.widen]
        parts += [f"make {n} optional" for n in self.make_optional]
        return ", ".join(parts)


def plan_schema_change(identifier: str, current: Schema, incoming: Schema, evolution: bool) -> SchemaPlan:
    """Compare the DataFrame's schema with the table's (by column name, order does not matter)."""
    add, widen, make_optional = [], [], []
    current_by_name = {f.name: f for f in current.fields}
    incoming_names = {f.name for f in incoming.fields}
    lowered = {n.lower(): n for n in current_by_name}
    for f in incoming.fields:
        old = current_by_name.get(f.name)
        if old is None:
            if f.name.lower() in lowered:
                raise SchemaError(
                    f"Table {identifier}: column {f.name!r} differs only in case from existing column "
                    f"{lowered[f.name.lower()]!r}; Delta treats them as the same column. Use the existing name."
                )
            add.append(f)
            continue
        if old.field_type != f.field_type:
            if not old.field_type.is_primitive or not f.field_type.is_primitive:
                if _shape(old.field_type) != _shape(f.field_type):
                    raise SchemaError(
                        f"Table {identifier}: column {f.name!r} is {old.field_type} in the table but {f.field_type} in the data. "
                        "Nested columns must keep their structure; write a new column instead."
                    )
            elif _widens(old.field_type, f.field_type):
                # Iceberg widens in metadata only. A Delta-mirrored table also rewrites its live files in
                # the wider types (see Lakehouse._write): delta-rs cannot write Delta's typeWidening feature.
                widen.append((f.name, f.field_type))
            elif not _narrows(old.field_type, f.field_type):
                raise SchemaError(
                    f"Table {identifier}: column {f.name!r} is {old.field_type} in the table but {f.field_type} in the data. "
                    "Only safe widening is allowed (int to long, float to double, decimal precision up). "
                    f"Cast the column to {old.field_type} or write a new column."
                )
        if old.required and not f.required:
            make_optional.append(f.name)
    for name, old in current_by_name.items():
        if name not in incoming_names and old.required:
            raise SchemaError(
                f"Table {identifier}: required column {name!r} is missing from the data. Add the column, "
                "or make it optional first; dropping required columns would break readers of older versions."
            )
    plan = SchemaPlan(add, widen, make_optional)
    if add and not evolution:
        raise SchemaError(
            f"Table {identifier}: schema evolution is off and the data has new columns "
            f"{[f.name for f in add]}. Turn schema_evolution on or drop the columns."
        )
    if (widen or make_optional) and not evolution:
        raise SchemaError(
            f"Table {identifier}: schema evolution is off and the data needs: {plan.describe()}. Turn schema_evolution on, "
            "or cast the data to the table's types and fill its required columns."
        )
    return plan


def _stage(update, plan: SchemaPlan) -> None:
    for f in plan.add:
        # New columns are optional: older files have no values for them.
        update.add_column(f.name, f.field_type, doc=f.doc, required=False)
    for name, t in plan.widen:
        update.update_column(name, field_type=t)
    for name in plan.make_optional:
        update.make_column_optional(name)


def evolved_schema(table: Table, plan: SchemaPlan) -> Schema:
    """The schema the table will have once `plan` is committed (new field ids assigned), committing nothing.

    Files are written with it; the change itself is committed in the same Iceberg transaction as the
    snapshot that adds them, so a failed write leaves the schema unchanged too.
    """
    if plan.empty:
        return table.schema()
    update = table.transaction().update_schema()  # a transaction that is never committed
    _stage(update, plan)
    return update._apply()


def apply_schema_change(target, plan: SchemaPlan) -> None:
    """Stage the change on a pyiceberg Table (commits at once) or Transaction (commits with it)."""
    if plan.empty:
        return
    with target.update_schema() as update:
        _stage(update, plan)


def types_were_widened(table: Table) -> bool:
    """Has any column's type changed over the table's schemas? Then old files hold narrower Parquet types.

    Spark 3.5's Parquet reader cannot read INT32 as bigint (or FLOAT as double), so such tables are read
    through the pyarrow file reader, which casts each file to the table's types.
    """
    seen: dict[int, IcebergType] = {}
    for schema in table.schemas().values():
        for f in schema.fields:
            if seen.setdefault(f.field_id, f.field_type) != f.field_type:
                return True
    return False


def column_names_moved(table: Table) -> bool:
    """Has a field id had more than one name, or a name more than one field id, over the table's schemas?

    Then files hold Parquet column names that differ from the schema's (a rename), or a name whose values
    belong to a dropped column: such tables must be read by field id, never by name.
    """
    physical = file_names(table, table.schema())  # Delta column mapping: columns added since hold generated names
    if physical and any(physical[f.field_id] != f.name for f in table.schema().fields):
        return True
    names_by_id: dict[int, str] = {}
    ids_by_name: dict[str, int] = {}
    for schema in table.schemas().values():
        for f in schema.fields:
            if names_by_id.setdefault(f.field_id, f.name) != f.name or ids_by_name.setdefault(f.name, f.field_id) != f.field_id:
                return True
    return False

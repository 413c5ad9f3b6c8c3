"""Types and schemas across the four type systems a table passes through: Spark, Iceberg, Arrow/Parquet, Delta.

    Spark -> Iceberg    spark_schema_to_iceberg (what a DataFrame can be stored as; refuses what cannot)
    Iceberg -> Spark    iceberg_to_spark_schema (how readers see a table)
    Iceberg -> Arrow    arrow_file_schema (the Parquet files, with Iceberg field ids; batches: conform.py)
    Iceberg -> Delta    delta_schema (the Delta log's schema; delta_type_refusals: the types Delta has no equal for)
    Delta -> Spark      delta_to_spark_schema (reading a Delta version)
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

import pyarrow as pa
from deltalake import Schema as DeltaSchema
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    GeographyType,
    GeometryType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UnknownType,
    UUIDType,
)

from ..errors import SchemaError

# ---------------------------------------------------------------- Spark -> Iceberg types


def spark_schema_to_iceberg(table: str, spark_schema) -> Schema:
    """Iceberg schema for a Spark StructType. Field ids are placeholders; the catalog assigns fresh ones."""
    counter = iter(range(1, 1_000_000))
    fields = [
        NestedField(next(counter), f.name, _spark_type(table, f.name, f.dataType, counter), required=not f.nullable)
        for f in spark_schema.fields
    ]
    _check_names(table, [f.name for f in fields])
    return Schema(*fields)


def check_column_names(table: str, names: Iterable[str]) -> None:
    """Column names are unique (case-insensitively, as Delta compares them) and storable in both formats."""
    _check_names(table, names)


def _check_names(table: str, names: Iterable[str], parent: str = "") -> None:
    seen = set()
    for n in names:
        path = f"{parent}.{n}" if parent else n
        if n.lower() in seen:
            raise SchemaError(f"Table {table}: column {path!r} appears twice (names are case-insensitive in Delta).")
        seen.add(n.lower())
        if re.search(r"[ ,;{}()\n\t=]", n):
            raise SchemaError(
                f"Table {table}: column name {path!r} contains a character Delta does not allow without column mapping "
                "(space , ; { } ( ) = tab newline). Rename the column."
            )
        if "." in n:
            # Iceberg, Spark and every SQL reader take a dot for a nested field: `a.b` would name two things.
            raise SchemaError(
                f"Table {table}: column name {path!r} contains a dot, which Iceberg and Spark read as a nested field "
                f"(struct access). Rename the column, e.g. {path.replace('.', '_')!r}."
            )


def _spark_type(table: str, path: str, dt, counter) -> IcebergType:
    from pyspark.sql import types as T

    if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType)):
        return IntegerType()
    if isinstance(dt, T.LongType):
        return LongType()
    if isinstance(dt, T.FloatType):
        return FloatType()
    if isinstance(dt, T.DoubleType):
        return DoubleType()
    if isinstance(dt, T.DecimalType):
        return DecimalType(dt.precision, dt.scale)
    if isinstance(dt, (T.StringType, T.VarcharType, T.CharType)):
        return StringType()
    if isinstance(dt, T.BinaryType):
        return BinaryType()
    if isinstance(dt, T.BooleanType):
        return BooleanType()
    if isinstance(dt, T.DateType):
        return DateType()
    if isinstance(dt, T.TimestampNTZType):
        return TimestampType()
    if isinstance(dt, T.TimestampType):
        return TimestamptzType()
    if isinstance(dt, T.StructType):
        _check_names(table, [f.name for f in dt.fields], path)
        return StructType(
            *[
                NestedField(next(counter), f.name, _spark_type(table, f"{path}.{f.name}", f.dataType, counter), required=not f.nullable)
                for f in dt.fields
            ]
        )
    if isinstance(dt, T.ArrayType):
        eid = next(counter)
        return ListType(eid, _spark_type(table, f"{path}.element", dt.elementType, counter), element_required=not dt.containsNull)
    if isinstance(dt, T.MapType):
        kid, vid = next(counter), next(counter)
        key = _spark_type(table, f"{path}.key", dt.keyType, counter)
        if not isinstance(key, PrimitiveType):
            raise SchemaError(
                f"Table {table}: column {path!r} is a map with non-primitive keys, which Delta cannot represent. Use a primitive "
                "key (e.g. a string built with to_json) or an array of key/value structs."
            )
        return MapType(kid, key, vid, _spark_type(table, f"{path}.value", dt.valueType, counter), value_required=not dt.valueContainsNull)
    raise SchemaError(
        f"Table {table}: column {path!r} has Spark type {dt.simpleString()}, which neither Iceberg nor Delta can store. "
        + (
            "It is all nulls with no type: cast it, e.g. F.lit(None).cast('string')."
            if isinstance(dt, T.NullType)
            else "Cast it to a supported type (integers, floating, decimal, string, binary, boolean, date, timestamp, struct, array, map)."
        )
    )


# A StructField carrying this metadata is read by Parquet field id, not by name (reader.py: through the
# pyarrow reader, since Spark's own field-id reading pushes filters down by name).
SPARK_FIELD_ID_KEY = "parquet.field.id"


def iceberg_to_spark_schema(schema: Schema, field_ids: bool = False):
    """Spark StructType for reading an Iceberg schema (used by readers).

    `field_ids`: tag each top-level field with its Iceberg field id, so that files are read by id. Needed
    once a column was renamed, or a dropped name reused (files keep the names they were written with).
    """
    from pyspark.sql import types as T

    def conv(t: IcebergType):
        if isinstance(t, IntegerType):
            return T.IntegerType()
        if isinstance(t, LongType):
            return T.LongType()
        if isinstance(t, FloatType):
            return T.FloatType()
        if isinstance(t, DoubleType):
            return T.DoubleType()
        if isinstance(t, DecimalType):
            return T.DecimalType(t.precision, t.scale)
        if isinstance(t, StringType):
            return T.StringType()
        if isinstance(t, BinaryType):
            return T.BinaryType()
        if isinstance(t, BooleanType):
            return T.BooleanType()
        if isinstance(t, DateType):
            return T.DateType()
        if isinstance(t, TimestamptzType):
            return T.TimestampType()
        if isinstance(t, TimestampType):
            return T.TimestampNTZType()
        if isinstance(t, StructType):
            return T.StructType([T.StructField(f.name, conv(f.field_type), not f.required) for f in t.fields])
        if isinstance(t, ListType):
            return T.ArrayType(conv(t.element_type), not t.element_required)
        if isinstance(t, MapType):
            return T.MapType(conv(t.key_type), conv(t.value_type), not t.value_required)
        raise SchemaError(
            f"Iceberg type {t} has no Spark equivalent here, so Spark cannot read the table (another engine wrote it). "
            "Read it with Lakehouse.read_arrow, or change the column's type with the engine that wrote it."
        )

    return T.StructType(
        [
            T.StructField(f.name, conv(f.field_type), not f.required, {SPARK_FIELD_ID_KEY: f.field_id} if field_ids else None)
            for f in schema.fields
        ]
    )



# ---------------------------------------------------------------- Arrow schema helpers


def plain_arrow_type(t: pa.DataType) -> pa.DataType:
    """pyiceberg's Arrow schema uses large_* types; Spark and Parquet want the plain ones."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(plain_arrow_field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(plain_arrow_field(t.key_field), plain_arrow_field(t.item_field))
    if pa.types.is_struct(t):
        return pa.struct([plain_arrow_field(t.field(i)) for i in range(t.num_fields)])
    return t


def plain_arrow_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, plain_arrow_type(f.type), f.nullable, f.metadata)


def arrow_file_schema(schema: Schema, file_names: Mapping[int, str] | None = None, narrow: Mapping[int, str] | None = None) -> pa.Schema:
    """Arrow schema of the Parquet files: Iceberg's, with field ids in the field metadata. `file_names`: top-level
    field id -> the column's name in the files, when it is not the column's name (Delta column mapping). `narrow`:
    the Delta byte/short columns of an imported table (`narrow_integers`), written as Parquet INT(8)/INT(16)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    fields = [_narrowed(plain_arrow_field(f), narrow) for f in schema_to_pyarrow(schema, include_field_ids=True)]
    if file_names:
        fields = [f.with_name(file_names.get(s.field_id, f.name)) for f, s in zip(fields, schema.fields, strict=True)]
    return pa.schema(fields)


# ---------------------------------------------------------------- Delta


# Iceberg types with no equal in Delta, and what to store instead. delta-rs would declare uuid and fixed as `binary`
# (its readers then fail on uuid's Arrow metadata, DuckDB returns raw bytes), nanosecond timestamps as
# `timestamp_nanos`, which no Delta reader knows, and refuses `time` without naming the column.
_NO_DELTA_TYPE = (
    (UUIDType, "a string holding its 36-character text form"),
    (FixedType, "binary"),
    (TimeType, "a string, or a long holding microseconds since midnight"),
    (TimestampNanoType, "timestamp (microseconds)"),
    (TimestamptzNanoType, "timestamptz (microseconds)"),
    (UnknownType, "a column of a concrete type"),
    (GeometryType, "binary holding WKB"),
    (GeographyType, "binary holding WKB"),
)


def delta_type_refusals(schema: Schema) -> list[str]:
    """One reason per column (nested ones by path) whose Iceberg type Delta has no equal for; empty: all have one."""
    reasons: list[str] = []

    def visit(path: str, t: IcebergType) -> None:
        for kind, instead in _NO_DELTA_TYPE:
            if isinstance(t, kind):
                reasons.append(f"column {path!r} is {t} (store it as {instead})")
        if isinstance(t, StructType):
            for f in t.fields:
                visit(f"{path}.{f.name}", f.field_type)
        elif isinstance(t, ListType):
            visit(f"{path}.element", t.element_type)
        elif isinstance(t, MapType):
            visit(f"{path}.key", t.key_type)
            visit(f"{path}.value", t.value_type)

    for f in schema.fields:
        visit(f.name, f.field_type)
    return reasons


def delta_schema(schema: Schema, narrow: Mapping[int, str] | None = None) -> DeltaSchema:
    """The Delta log's schema of an Iceberg schema; `narrow` (`narrow_integers`): the integer fields Delta declares byte
    or short. SchemaError naming each column whose type Delta does not have."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    if reasons := delta_type_refusals(schema):
        raise SchemaError("types Delta does not have: " + "; ".join(reasons) + ". Rewrite the column(s) with the engine that wrote them, or keep the table Iceberg-only")

    if narrow:
        arrow = pa.schema([_without_ids(_narrowed(plain_arrow_field(f), narrow)) for f in schema_to_pyarrow(schema, include_field_ids=True)])
    else:
        arrow = pa.schema([plain_arrow_field(f).with_metadata(None) for f in schema_to_pyarrow(schema, include_field_ids=False)])
    return DeltaSchema.from_arrow(arrow)


# Iceberg has no 8- or 16-bit integers: a Delta byte or short column is an Iceberg int (Iceberg's reading of Parquet
# INT(8)/INT(16)). An imported table records them by field id in this property, so that the Delta log keeps declaring
# them and the files written later hold them as the source's files do (a value out of range fails the cast).
NARROW_INTEGERS = "lakehouse.delta.narrow-integers"
_NARROW_ARROW = {"byte": pa.int8(), "short": pa.int16()}


def narrow_integers(properties: Mapping[str, str]) -> dict[int, str]:
    """Field id -> "byte" | "short": the Iceberg int fields whose Delta type is narrower (`NARROW_INTEGERS`)."""
    import json

    raw = properties.get(NARROW_INTEGERS)
    return {int(k): v for k, v in json.loads(raw).items()} if raw else {}


def narrow_integer_fields(arrow_schema: pa.Schema, schema: Schema) -> dict[int, str]:
    """The int8/int16 fields (at any depth) of a Delta table's Arrow schema, by the field id of `schema`, its Iceberg form."""
    out: dict[int, str] = {}

    def walk(t: pa.DataType, path: str) -> None:
        if t == pa.int8() or t == pa.int16():
            out[schema.find_field(path).field_id] = "byte" if t == pa.int8() else "short"
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i).type, f"{path}.{t.field(i).name}")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_type, f"{path}.element")
        elif pa.types.is_map(t):
            walk(t.key_type, f"{path}.key")
            walk(t.item_type, f"{path}.value")

    for f in arrow_schema:
        walk(f.type, f.name)
    return out


def _narrowed(f: pa.Field, narrow: Mapping[int, str] | None) -> pa.Field:
    """`f` with each int32 field whose id `narrow` lists as the Delta type's Arrow width."""
    if not narrow:
        return f
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_narrowed(t.field(i), narrow) for i in range(t.num_fields)])
    elif pa.types.is_list(t):
        t = pa.list_(_narrowed(t.value_field, narrow))
    elif pa.types.is_map(t):
        t = pa.map_(_narrowed(t.key_field, narrow), _narrowed(t.item_field, narrow))
    elif t == pa.int32() and f.metadata and (kind := narrow.get(int(f.metadata.get(b"PARQUET:field_id", b"0")))):
        t = _NARROW_ARROW[kind]
    return pa.field(f.name, t, f.nullable, f.metadata)


def _without_ids(f: pa.Field) -> pa.Field:
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_without_ids(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_list(t):
        t = pa.list_(_without_ids(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(_without_ids(t.key_field), _without_ids(t.item_field))
    return pa.field(f.name, t, f.nullable)



def delta_to_spark_schema(delta):
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
    spark_schema = from_arrow_schema(pa.schema(fields), prefer_timestamp_ntz=True)  # Delta timestamp_ntz is Spark TimestampNTZ
    # Column mapping: the files name a column by its physical name, and ours carry its id (= the Iceberg field id)
    # too: read by id, as after an Iceberg rename.
    import json

    from pyspark.sql.types import StructField, StructType

    ids = {f["name"]: (f.get("metadata") or {}).get("delta.columnMapping.id") for f in json.loads(delta.schema().to_json())["fields"]}
    if not any(ids.values()):
        return spark_schema
    return StructType([StructField(f.name, f.dataType, f.nullable, {SPARK_FIELD_ID_KEY: int(ids[f.name])} if ids.get(f.name) else None) for f in spark_schema.fields])



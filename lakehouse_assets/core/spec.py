"""What a table is: its identifier, schema (from the DataFrame), partition spec, formats and properties.

Spark types map to Iceberg types here; Iceberg is the schema of record and Delta's schema is derived
from it, so both formats always expose the same columns and types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Literal, Sequence

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from .errors import SchemaError, SpecError

Format = Literal["iceberg", "delta"]
WriteMode = Literal["append", "overwrite", "merge"]
ALL_FORMATS: tuple[Format, ...] = ("iceberg", "delta")
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


def parse_identifier(identifier: str) -> tuple[str, str]:
    """`namespace.table` -> (namespace, table). Nested namespaces keep their dots."""
    parts = identifier.rsplit(".", 1)
    if len(parts) != 2 or not all(parts) or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in identifier.split(".")):
        raise SpecError(
            f"Table identifier {identifier!r} must look like 'namespace.table' "
            "(letters, digits and underscores, starting with a letter or underscore)."
        )
    return parts[0], parts[1]


# ---------------------------------------------------------------- partition transforms

_TRANSFORM_RE = re.compile(r"^\s*(?P<fn>[a-z]+)\s*\(\s*(?P<args>[^)]*)\)\s*$")


@dataclass(frozen=True)
class PartitionTerm:
    """One parsed partition term such as `bucket(16, user_id)`."""

    source: str
    transform: Transform
    text: str

    @property
    def name(self) -> str:
        """Iceberg's conventional partition field name (what Java and pyiceberg would generate)."""
        t = self.transform
        if isinstance(t, IdentityTransform):
            return self.source
        if isinstance(t, BucketTransform):
            return f"{self.source}_bucket"
        if isinstance(t, TruncateTransform):
            return f"{self.source}_trunc"
        return f"{self.source}_{str(t)}"  # year, month, day, hour


def parse_partition_term(text: str) -> PartitionTerm:
    text = text.strip()
    m = _TRANSFORM_RE.match(text)
    if not m:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
            raise SpecError(
                f"Partition term {text!r} is not valid. Use a column name or one of year(col), month(col), "
                "day(col), hour(col), bucket(n, col), truncate(w, col)."
            )
        return PartitionTerm(text, IdentityTransform(), text)
    fn, args = m.group("fn"), [a.strip() for a in m.group("args").split(",")]
    simple = {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
    if fn in simple and len(args) == 1:
        return PartitionTerm(args[0], simple[fn](), text)
    if fn in ("bucket", "truncate") and len(args) == 2:
        try:
            n = int(args[0])
        except ValueError:
            raise SpecError(f"Partition term {text!r}: the first argument of {fn}() must be a positive integer.") from None
        if n <= 0:
            raise SpecError(f"Partition term {text!r}: the first argument of {fn}() must be a positive integer.")
        return PartitionTerm(args[1], BucketTransform(n) if fn == "bucket" else TruncateTransform(n), text)
    raise SpecError(
        f"Partition term {text!r} is not valid. Use a column name or one of year(col), month(col), "
        "day(col), hour(col), bucket(n, col), truncate(w, col)."
    )


def build_partition_spec(table: str, schema: Schema, terms: Sequence[str]) -> PartitionSpec:
    """Partition spec bound to `schema`; errors name the table, the column and the allowed types."""
    fields = []
    seen: set[str] = set()
    for i, text in enumerate(terms):
        term = parse_partition_term(text)
        try:
            source = schema.find_field(term.source)
        except ValueError:
            raise SpecError(
                f"Table {table}: partition column {term.source!r} (from {text!r}) is not in the data. "
                f"Columns are: {', '.join(f.name for f in schema.fields)}."
            ) from None
        if not isinstance(source.field_type, PrimitiveType) or not term.transform.can_transform(source.field_type):
            raise SpecError(
                f"Table {table}: partition transform {text!r} cannot apply to column {term.source!r} of type "
                f"{source.field_type}. {_transform_help(term.transform)}"
            )
        if isinstance(term.transform, IdentityTransform) and isinstance(source.field_type, (FloatType, DoubleType)):
            raise SpecError(
                f"Table {table}: identity partition on column {term.source!r} of type {source.field_type} is not supported: "
                "NaN, infinities and -0.0 have no partition value that Iceberg and Delta readers agree on, and equal-looking "
                f"floats split into many partitions. Partition by a decimal or integer column derived from {term.source!r} "
                "(cast it before writing), or leave it unpartitioned."
            )
        if term.name in seen:
            raise SpecError(f"Table {table}: partition field {term.name!r} appears twice in partition_by.")
        seen.add(term.name)
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i, transform=term.transform, name=term.name))
    return PartitionSpec(*fields)


def _transform_help(t: Transform) -> str:
    if isinstance(t, (YearTransform, MonthTransform, DayTransform)):
        return f"{t}() needs a date or timestamp column."
    if isinstance(t, HourTransform):
        return "hour() needs a timestamp column."
    if isinstance(t, BucketTransform):
        return "bucket() needs an int, long, decimal, date, timestamp, string or binary column."
    if isinstance(t, TruncateTransform):
        return "truncate() needs an int, long, decimal, string or binary column."
    return "Identity partitions need a primitive (non-nested) column."


def spec_terms(spec: PartitionSpec, schema: Schema) -> list[str]:
    """The partition spec written back as partition_by strings (for comparison and display)."""
    out = []
    for f in spec.fields:
        col = schema.find_column_name(f.source_id)
        t = f.transform
        if isinstance(t, IdentityTransform):
            out.append(col)
        elif isinstance(t, BucketTransform):
            out.append(f"bucket({t.num_buckets}, {col})")
        elif isinstance(t, TruncateTransform):
            out.append(f"truncate({t.width}, {col})")
        else:
            out.append(f"{t}({col})")
    return out


def delta_partition_columns(spec: PartitionSpec, schema: Schema) -> list[str]:
    """Identity partitions of top-level columns become Delta partition columns.

    Other transforms (day, bucket...) have no Delta equivalent; Delta readers skip those files
    with the per-file min/max stats instead.
    """
    top_level = {f.field_id: f.name for f in schema.fields}
    return [top_level[f.source_id] for f in spec.fields if isinstance(f.transform, IdentityTransform) and f.source_id in top_level]


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


def arrow_schema_to_iceberg(table: str, arrow_schema) -> Schema:
    """Iceberg schema for a pyarrow schema (small assets handed over as pyarrow/pandas)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        spark_schema = from_arrow_schema(arrow_schema)
    except TypeError as e:
        raise SchemaError(f"Table {table}: {e}. Cast the column to a supported type before writing.") from None
    return spark_schema_to_iceberg(table, spark_schema)


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
            raise SchemaError(f"Table {table}: column {path!r} is a map with non-primitive keys, which Delta cannot represent.")
        return MapType(kid, key, vid, _spark_type(table, f"{path}.value", dt.valueType, counter), value_required=not dt.valueContainsNull)
    raise SchemaError(
        f"Table {table}: column {path!r} has Spark type {dt.simpleString()}, which neither Iceberg nor Delta can store. "
        + (
            "It is all nulls with no type: cast it, e.g. F.lit(None).cast('string')."
            if isinstance(dt, T.NullType)
            else "Cast it to a supported type (integers, floating, decimal, string, binary, boolean, date, timestamp, struct, array, map)."
        )
    )


def iceberg_to_spark_schema(schema: Schema):
    """Spark StructType for reading an Iceberg schema (used by readers)."""
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
        raise SchemaError(f"Iceberg type {t} has no Spark equivalent here.")

    return T.StructType([T.StructField(f.name, conv(f.field_type), not f.required) for f in schema.fields])


# ---------------------------------------------------------------- the table spec


@dataclass(frozen=True)
class TableSpec:
    """Everything the writer needs to know about a table besides its rows."""

    identifier: str
    partition_by: tuple[str, ...] = ()
    formats: tuple[Format, ...] = ALL_FORMATS
    properties: dict[str, str] = field(default_factory=dict)
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    schema_evolution: bool = True

    def __post_init__(self) -> None:
        parse_identifier(self.identifier)
        if "iceberg" not in self.formats:
            # Iceberg is the source of truth: the Delta log is always derived from its snapshots.
            raise SpecError(
                f"Table {self.identifier}: formats {list(self.formats)} must include 'iceberg', the source of truth. "
                "Use formats=['iceberg'] for Iceberg only or ['iceberg', 'delta'] for both."
            )
        unknown = set(self.formats) - set(ALL_FORMATS)
        if unknown:
            raise SpecError(f"Table {self.identifier}: unknown formats {sorted(unknown)}; choose from {list(ALL_FORMATS)}.")
        if self.target_file_size <= 0:
            raise SpecError(f"Table {self.identifier}: target_file_size must be positive, got {self.target_file_size}.")
        for term in self.partition_by:
            try:
                parse_partition_term(term)
            except SpecError as e:
                raise SpecError(f"Table {self.identifier}: {e}") from None

    @property
    def namespace(self) -> str:
        return parse_identifier(self.identifier)[0]

    @property
    def name(self) -> str:
        return parse_identifier(self.identifier)[1]

    @property
    def delta_enabled(self) -> bool:
        return "delta" in self.formats

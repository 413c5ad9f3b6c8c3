"""What a table is: its identifier, schema (from the DataFrame), partition spec, formats and properties.

Spark types map to Iceberg types here; Iceberg is the schema of record and Delta's schema is derived
from it, so both formats always expose the same columns and types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

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
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    PrimitiveType,
    UUIDType,
)

from ..errors import SpecError
from ..properties import TableProperties
from .statistics import StatisticsPolicy, table_policy

Format = Literal["iceberg", "delta"]
ALL_FORMATS: tuple[Format, ...] = ("iceberg", "delta")
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024

COMPRESSION_CODEC, COMPRESSION_LEVEL = TableProperties.COMPRESSION_CODEC, TableProperties.COMPRESSION_LEVEL
TARGET_FILE_SIZE = TableProperties.TARGET_FILE_SIZE
# Iceberg's Parquet codec names (any case) as pyarrow's. pyarrow writes LZ4 as LZ4_RAW (Parquet's current LZ4;
# Java Iceberg's `lz4` writes the older Hadoop-framed one): every reader here reads both.
_PYARROW_CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "lz4": "lz4", "lz4_raw": "lz4", "uncompressed": "none"}
# Iceberg names these too, but they would give files this project's own Spark could not read or pyarrow cannot write.
_REFUSED_CODECS = {
    "brotli": "Spark's Parquet reader needs a Brotli codec Spark does not ship, so merges, compaction and reads would fail",
    "lzo": "pyarrow cannot write LZO",
}
# The codecs whose level Java Iceberg applies (it ignores the level of the others), and their level when the table
# sets none: Java's (parquet-mr's zstd 3, zlib's 6).
_LEVELS = {"zstd": 3, "gzip": 6}
_CODEC_NAMES = "zstd, snappy, gzip, lz4 (written as LZ4_RAW), lz4_raw or uncompressed"


def parquet_compression(properties: Mapping[str, str], table: str) -> tuple[str, int | None]:
    """The pyarrow codec and level of a table's Parquet files, from its Iceberg properties: what Java Iceberg
    writes for the same properties. A property another engine set is read the same way."""
    import pyarrow as pa

    raw = properties.get(COMPRESSION_CODEC, "zstd")
    name = str(raw).strip().lower()
    if name not in _PYARROW_CODECS:
        why = f" ({_REFUSED_CODECS[name]})" if name in _REFUSED_CODECS else ""
        raise SpecError(
            f"Table {table}: table property {COMPRESSION_CODEC}={raw!r} is not a codec this writer can use{why}; set it to "
            f"{_CODEC_NAMES} (TableOptions(properties=...) for a new table, ALTER TABLE ... SET TBLPROPERTIES for an existing one)."
        )
    codec = _PYARROW_CODECS[name]
    if name not in _LEVELS:
        return codec, None
    level = properties.get(COMPRESSION_LEVEL)
    if level is None or str(level).strip() == "":
        return codec, _LEVELS[name]
    low, high = pa.Codec.minimum_compression_level(codec), pa.Codec.maximum_compression_level(codec)
    try:
        value = int(str(level).strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise SpecError(
            f"Table {table}: table property {COMPRESSION_LEVEL}={level!r} is not a level of {name}: use an integer from "
            f"{low} to {high} ({_LEVELS[name]} when unset), or remove the property."
        )
    return codec, value


def target_file_bytes(properties: Mapping[str, str], table: str) -> int:
    """The bytes at which a writer of the table rolls to a new data file: `write.target-file-size-bytes`, which
    another engine may have set; a positive whole number (zero or less would write a file per row group)."""
    raw = properties.get(TARGET_FILE_SIZE)
    if raw is None:
        return DEFAULT_TARGET_FILE_SIZE
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SpecError(
            f"Table {table}: table property {TARGET_FILE_SIZE}={raw!r} is not a file size: set it to a positive number of "
            f"bytes (e.g. {DEFAULT_TARGET_FILE_SIZE} for 128 MiB), or remove it."
        )
    return value


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
    avro_named: dict[str, str] = {}  # partition value types that are named Avro types -> the field that has it
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
        value_type = term.transform.result_type(source.field_type)
        if isinstance(value_type, (DecimalType, FixedType, UUIDType)):
            if (other := avro_named.get(str(value_type))) is not None:
                raise SpecError(
                    f"Table {table}: partition fields {other!r} and {term.name!r} would both hold {value_type} values: pyiceberg 0.12 "
                    "writes that type into the manifests' Avro schema twice under one name, which Avro forbids (DuckDB aborts "
                    f"reading such a manifest). Keep one of them, or partition by bucket(n, {term.source}) for the other."
                )
            avro_named[str(value_type)] = term.name
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


def statistics_policy(table, schema: Schema | None = None) -> StatisticsPolicy:
    """The columns whose statistics both formats keep for `table` (`schema`: its current one by default)."""
    schema = schema if schema is not None else table.schema()
    return table_policy(".".join(table.name()), schema, table.properties, delta_partition_columns(table.spec(), schema))


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
                "Use ['iceberg'] for Iceberg only or ['iceberg', 'delta'] for both (TableOptions(formats=...), asset metadata 'formats')."
            )
        unknown = set(self.formats) - set(ALL_FORMATS)
        if unknown:
            raise SpecError(f"Table {self.identifier}: unknown formats {sorted(unknown)}; choose from {list(ALL_FORMATS)}.")
        if self.target_file_size <= 0:
            raise SpecError(f"Table {self.identifier}: target_file_size must be positive, got {self.target_file_size}.")
        parquet_compression(self.properties, self.identifier)  # the caller's codec: refused before a new table exists
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


"""Iceberg partition transforms as Spark column expressions, so partitioned writes need no extra Python pass.

Each expression yields exactly the value Iceberg's transform defines (pyiceberg's is the reference; the
equality is tested value by value, including negatives, pre-1970 times, multi-byte strings and decimals):

- identity: the column itself;
- year / month / day / hour: whole units since 1970-01-01 00:00 UTC, floored (pre-1970 is negative).
  Timestamps with zone go through their UTC micros (`unix_micros`), never through the session time zone;
  timestamps without zone and dates through their wall-clock date (`CAST AS DATE`, `unix_date`);
- truncate(W): integers and decimals `v - pmod(v, W)` (decimals in units of their scale; integers wrap
  at the type's minimum exactly like Java's and pyiceberg-core's arithmetic), strings the
  first W code points, binary the first W bytes;
- bucket(N): Iceberg's murmur3_x86_32 (seed 0) of the value as a long, `(hash & Integer.MAX_VALUE) % N`.
  Spark's `Murmur3Hash` expression with seed 0 over a long is that same hash (it mixes the low then the
  high 32 bits, i.e. the 8 little-endian bytes). Only int, long, date and timestamptz sources qualify:
  Spark hashes strings and binary with a non-standard tail, so those (and decimals, uuids, timestamps
  without zone) return None and the writer falls back to pyiceberg's vectorized transforms.
"""

from __future__ import annotations

import decimal

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from ..spark.compat import murmur3_column

MICROS_PER_DAY = 86_400_000_000
MICROS_PER_HOUR = 3_600_000_000
_EPOCH_YEAR = 1970


def _floor_div(col, divisor: int):
    """Exact integer floor division: `div` truncates toward zero, so subtract the (non-negative) pmod first."""
    from pyspark.sql import functions as F

    return F.call_function("div", col - F.pmod(col, F.lit(divisor)), F.lit(divisor))


def _murmur3(col):
    """Spark's Murmur3Hash with Iceberg's seed 0 (the public `hash()` fixes seed 42), or None (a Connect session)."""
    return murmur3_column(col, 0)


def _as_long(col, source_type):
    """The long Iceberg hashes for bucket(), or None when Spark cannot produce it exactly."""
    from pyspark.sql import functions as F

    if isinstance(source_type, (IntegerType, LongType)):
        return col.cast("long")
    if isinstance(source_type, DateType):
        return F.unix_date(col).cast("long")
    if isinstance(source_type, TimestamptzType):
        return F.unix_micros(col)
    return None


def _day(col, source_type):
    from pyspark.sql import functions as F

    if isinstance(source_type, TimestamptzType):
        return _floor_div(F.unix_micros(col), MICROS_PER_DAY)
    # Dates, and timestamps without zone (wall-clock values: the date cast ignores the session zone).
    return F.unix_date(col.cast("date")).cast("long")


def _date(col, source_type):
    """The UTC calendar date of a value (year/month are calendar arithmetic on it)."""
    from pyspark.sql import functions as F

    if isinstance(source_type, TimestamptzType):
        return F.date_from_unix_date(_day(col, source_type).cast("int"))
    return col.cast("date")


def transform_column(col, transform, source_type):
    """A Spark Column computing `transform` of `col` as Iceberg defines it, or None (not expressible exactly)."""
    from pyspark.sql import functions as F

    if isinstance(transform, IdentityTransform):
        return col
    if isinstance(transform, (YearTransform, MonthTransform, DayTransform, HourTransform)):
        if not isinstance(source_type, (DateType, TimestampType, TimestamptzType)):
            return None
        if isinstance(transform, DayTransform):
            return _day(col, source_type).cast("int")
        if isinstance(transform, HourTransform):
            if isinstance(source_type, TimestamptzType):
                return _floor_div(F.unix_micros(col), MICROS_PER_HOUR).cast("int")
            if isinstance(source_type, TimestampType):
                return (_day(col, source_type) * 24 + F.hour(col)).cast("int")
            return None
        date = _date(col, source_type)
        years = F.year(date) - _EPOCH_YEAR
        if isinstance(transform, YearTransform):
            return years.cast("int")
        return (years * 12 + F.month(date) - 1).cast("int")
    if isinstance(transform, TruncateTransform):
        w = transform.width
        if isinstance(source_type, (IntegerType, LongType)):
            return _wrapping_truncate(col, w, source_type)
        if isinstance(source_type, DecimalType):
            if source_type.precision >= 38:
                # `col - pmod` of a decimal(38, s) is typed decimal(39, s), which Spark cuts to decimal(38, s-1),
                # rounding the value (truncate(3, -2.56E-8) became -2.60E-8): pyiceberg's transform does it exactly.
                return None
            # In units of the scale: truncate(10, 12.345 as decimal(9,3)) steps by 0.010.
            step = F.lit(decimal.Decimal(w).scaleb(-source_type.scale))
            # One more digit: truncating the most negative values steps past the precision (Iceberg allows it).
            return (col - F.pmod(col, step)).cast(f"decimal({min(38, source_type.precision + 1)},{source_type.scale})")
        if isinstance(source_type, (StringType, BinaryType)):
            return F.substring(col, 1, w)
        return None
    if isinstance(transform, BucketTransform):
        value = _as_long(col, source_type)
        hashed = _murmur3(value) if value is not None else None
        if hashed is None:
            return None
        bucket = F.pmod(hashed.bitwiseAND(F.lit(0x7FFFFFFF)), F.lit(transform.num_buckets))
        return F.when(col.isNull(), F.lit(None)).otherwise(bucket).cast("int")
    return None


def col_type(source_type) -> str:
    return "int" if isinstance(source_type, IntegerType) else "long"


def dense_keys(spec: PartitionSpec) -> bool:
    """Whether every partition value of `spec` is an integer whose neighbours are one apart: time units since 1970
    and bucket numbers (identity and truncate values can be anything)."""
    return bool(spec.fields) and all(
        isinstance(f.transform, (YearTransform, MonthTransform, DayTransform, HourTransform, BucketTransform)) for f in spec.fields
    )


def partition_columns(schema: Schema, spec: PartitionSpec) -> list | None:
    """One Spark Column per partition field of `spec` (Iceberg's values), or None if any field needs pyiceberg."""
    from pyspark.sql import functions as F

    out = []
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        name = schema.find_column_name(pf.source_id)
        col = F.col(".".join(f"`{p}`" for p in name.split(".")))
        expr = transform_column(col, pf.transform, source.field_type)
        if expr is None:
            return None
        if isinstance(pf.transform, TruncateTransform) and isinstance(source.field_type, (IntegerType, LongType)):
            expr = _refuse_wrapped_truncation(col, expr, name, pf.transform.width, source.field_type)
        out.append(expr)
    return out


def _wrapping_truncate(col, width: int, source_type):
    """`col - pmod(col, width)` wrapped into the type's range as Java Iceberg's does (two's complement), computed in
    a wider type: the same values whether Spark's ANSI mode (Spark 4's default) would raise on the overflow or not."""
    from pyspark.sql import functions as F

    bits = 64 if isinstance(source_type, LongType) else 32
    wide = "decimal(38,0)" if bits == 64 else "long"
    x = col.cast(wide)
    truncated = x - F.pmod(x, F.lit(width).cast(wide))
    half, full = F.lit(decimal.Decimal(2 ** (bits - 1))).cast(wide), F.lit(decimal.Decimal(2**bits)).cast(wide)
    return (F.pmod(truncated + half, full) - half).cast(col_type(source_type))


def _refuse_wrapped_truncation(col, truncated, name: str, width: int, source_type):
    """truncate(W) of a value within W of the type's minimum leaves the type's range: Iceberg's reference
    implementation wraps it to a large positive partition value, so every pruning Iceberg reader (Java, pyiceberg,
    DuckDB) drops the row from filtered reads. Such a row fails the write, naming the column (writer.executor_error)."""
    from pyspark.sql import functions as F

    message = "UnrepresentableValue: " + wrapped_truncation_message(name, width, source_type)
    return F.when(truncated > col, F.raise_error(F.lit(message))).otherwise(truncated)  # subtracting pmod never increases a value


def wrapped_truncation_message(name: str, width: int, source_type) -> str:
    """Why a row whose truncate(W) wrapped is refused (Spark's expression above; the writer's pyiceberg path)."""
    kind = col_type(source_type)
    return (
        f"column {name!r} holds a value within {width} of the {kind} minimum whose "
        f"truncate({width}) leaves the {kind} range (Iceberg engines wrap it to a positive partition value and filtered reads "
        "then skip the row). Partition by bucket or identity of this column, or filter such values out."
    )

"""How values are spelled in the Delta log: partition values and per-file stats.

One encoder for every place that writes or checks them (the writer's up-front value check, the Delta
mirror, `verify`), correct over the whole range of every type (Delta protocol, appendix "Partition
Value Serialization" and "Per-file Statistics"):

* years are always four digits (`0001-01-01`), never `strftime`'s unpadded `1-01-01`, and dates before
  1900 or 1582 are formatted by hand from the proleptic Gregorian calendar Iceberg, Delta and Parquet use;
* timestamp partition values: `timestamptz` as ISO 8601 adjusted to UTC with a `Z` (the protocol's
  recommended, time-zone-free spelling), `timestamp` (without zone) as `YYYY-MM-DD HH:MM:SS.ffffff`;
* timestamp stats have millisecond precision: a lower bound is rounded down, an upper bound up, so
  both stay bounds; a bound that would leave 0001-01-01..9999-12-31 is dropped (no stat: readers
  cannot skip the file, which is always correct) instead of overflowing;
* decimals are written in plain notation (`0.0000000001`, never `1E-10`);
* NaN and infinities never become stats (JSON cannot hold them; readers would mis-skip).

Values Delta cannot hold distinctly are refused with `UnrepresentableValue` (the caller adds the
table name): the empty string as a partition value (Delta reads `""` as NULL).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math

from pyiceberg.conversions import from_bytes
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DATE = dt.date(1970, 1, 1)
_MIN_MICROS = (dt.datetime.min - EPOCH) // dt.timedelta(microseconds=1)  # 0001-01-01 00:00:00
_MAX_MICROS = (dt.datetime.max - EPOCH) // dt.timedelta(microseconds=1)  # 9999-12-31 23:59:59.999999


class UnrepresentableValue(ValueError):
    """A value the Delta log cannot hold distinctly; the message names the column and the fix."""


# ---------------------------------------------------------------- Iceberg internal <-> Python


def from_internal(t: IcebergType, v):
    """An Iceberg partition/bound value in its internal representation (days, micros) as a Python value."""
    if v is None:
        return None
    if isinstance(t, DateType) and isinstance(v, int):
        return EPOCH_DATE + dt.timedelta(days=v)
    if isinstance(t, (TimestampType, TimestamptzType)) and isinstance(v, int):
        ts = EPOCH + dt.timedelta(microseconds=v)
        return ts.replace(tzinfo=dt.timezone.utc) if isinstance(t, TimestamptzType) else ts
    return v


def _micros(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return (value - EPOCH) // dt.timedelta(microseconds=1)


# ---------------------------------------------------------------- formatting (no strftime)


def format_date(d: dt.date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def format_timestamp(ts: dt.datetime, *, utc: bool, sep: str = " ", digits: int = 6) -> str:
    """`YYYY-MM-DD{sep}HH:MM:SS.ffffff` (or `.fff` with digits=3), plus `Z` for UTC-adjusted values."""
    if ts.tzinfo is not None:
        ts = ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
    fraction = f"{ts.microsecond:06d}"[:digits]
    return f"{format_date(ts.date())}{sep}{ts.hour:02d}:{ts.minute:02d}:{ts.second:02d}.{fraction}" + ("Z" if utc else "")


# ---------------------------------------------------------------- partition values


def partition_value(column: str, t: IcebergType, value) -> str | None:
    """`add.partitionValues[column]` for a Python value (or an Iceberg internal one) of Iceberg type `t`."""
    value = from_internal(t, value)
    if value is None:
        return None
    if isinstance(t, BooleanType):
        return "true" if value else "false"
    if isinstance(t, DateType):
        return format_date(value)
    if isinstance(t, TimestamptzType):
        return format_timestamp(value, utc=True, sep="T")
    if isinstance(t, TimestampType):
        return format_timestamp(value, utc=False)
    if isinstance(t, DecimalType):
        return format(decimal.Decimal(value), "f")
    if isinstance(t, StringType):
        if value == "":
            raise UnrepresentableValue(
                f"column {column!r} is a Delta partition column (identity partition) and holds the empty string ''. "
                "Delta stores partition values as strings and reads '' as NULL, so Delta readers would see NULL where "
                "Iceberg readers see ''. Write NULL instead (e.g. F.nullif(col, F.lit(''))) or another placeholder, "
                "partition by truncate(w, col) or bucket(n, col) instead, or keep this table in Iceberg only (TableOptions(formats=['iceberg']), asset metadata 'formats')."
            )
        return value
    if isinstance(t, (FloatType, DoubleType)):  # refused up front as identity partitions (spec); kept exact here
        return repr(float(value))
    return str(value)


def parse_partition_value(t: IcebergType, text: str | None):
    """A Delta partition value string back as a Python value (verify compares these with Iceberg's)."""
    if text is None or text == "":
        return None
    if isinstance(t, BooleanType):
        return text == "true"
    if isinstance(t, (IntegerType, LongType)):
        return int(text)
    if isinstance(t, DecimalType):
        return decimal.Decimal(text)
    if isinstance(t, DateType):
        return dt.date.fromisoformat(text)
    if isinstance(t, (TimestampType, TimestamptzType)):
        utc = text.endswith("Z")
        ts = dt.datetime.fromisoformat(text[:-1] if utc else text)
        return ts.replace(tzinfo=dt.timezone.utc) if isinstance(t, TimestamptzType) else ts
    if isinstance(t, (FloatType, DoubleType)):
        return float(text)
    return text


# ---------------------------------------------------------------- stats


def stat_value(t: IcebergType, raw: bytes, upper: bool):
    """An Iceberg lower/upper bound (serialized) as a Delta stats JSON value, or None for no stat.

    Where Delta is coarser (timestamps: milliseconds) the bound is widened outwards so it stays a bound.
    """
    v = from_bytes(t, raw)
    if isinstance(t, (IntegerType, LongType, StringType, BooleanType)):
        return v
    if isinstance(t, (FloatType, DoubleType)):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(t, DateType):
        return format_date(from_internal(t, v))
    if isinstance(t, (TimestampType, TimestamptzType)):
        ms = -(-v // 1000) if upper else v // 1000  # ceil for the upper bound, floor for the lower
        micros = ms * 1000
        if not _MIN_MICROS <= micros <= _MAX_MICROS:
            return None  # rounding would leave the representable range: no stat rather than a wrong one
        return format_timestamp(from_internal(t, micros), utc=isinstance(t, TimestamptzType), sep="T", digits=3)
    return None  # decimals, binary: no stats rather than imprecise ones


def stats_bound_holds(t: IcebergType, delta_value, iceberg_raw: bytes, upper: bool) -> bool:
    """Is a Delta min (max) stat, as delta-rs returns it typed, <= (>=) the Iceberg bound? (used by verify)

    A timestamp max may be the bound truncated down to milliseconds: the Delta protocol says writers truncate
    timestamp statistics so (delta-rs and Spark do), and its readers widen a max by the millisecond it lost."""
    if delta_value is None:
        return True  # no stat never causes a wrong skip
    v = from_internal(t, from_bytes(t, iceberg_raw))
    if isinstance(t, (TimestampType, TimestamptzType)):
        d = _micros(delta_value if isinstance(delta_value, dt.datetime) else dt.datetime.fromisoformat(str(delta_value)))
        v = _micros(v) // 1000 * 1000 if upper else _micros(v)
    elif isinstance(t, DateType):
        d = delta_value if isinstance(delta_value, dt.date) else dt.date.fromisoformat(str(delta_value))
    else:
        d = delta_value
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return True
    return d >= v if upper else d <= v


def timestamp_stat_matches(t: IcebergType, delta_value, iceberg_raw: bytes, upper: bool) -> bool:
    """Is a Delta timestamp min (max) stat the Iceberg bound as some Delta writer spells it? (used by verify)

    Delta keeps milliseconds: the mirror rounds a max up and a min down, delta-rs and Spark truncate both down, as the
    protocol says (its readers widen a max by the lost millisecond), and a writer with microseconds keeps the bound as
    it is. Anything outside that millisecond is another value."""
    if delta_value is None:
        return True
    d = _micros(delta_value if isinstance(delta_value, dt.datetime) else dt.datetime.fromisoformat(str(delta_value)))
    v = _micros(from_internal(t, from_bytes(t, iceberg_raw)))
    floor = v // 1000 * 1000
    return floor <= d <= (-(-v // 1000) * 1000 if upper else v)


def string_bounds_compatible(delta_value: str, iceberg_value: str, upper: bool, exact: bool) -> bool:
    """Can a Delta string min (max) stat and Iceberg's lower (upper) bound both bound one file? (used by verify)

    Either may be truncated and still be a bound: Iceberg keeps a prefix of N characters (`truncate(N)`; an upper
    bound with its last character incremented), Delta writers a prefix too (Spark: 32 characters, its max followed
    by a tie-breaker character). Only a pair no file's values satisfy is a contradiction. `exact`: Iceberg's bound
    is shorter than its truncation length, so it is the file's own min (max)."""
    if not upper:  # Delta's min <= the file's min m, which is Iceberg's lower bound or starts with it
        return delta_value <= iceberg_value or (not exact and delta_value.startswith(iceberg_value))
    if exact or not iceberg_value:  # Delta's max >= the file's max M, which is Iceberg's upper bound
        return delta_value >= iceberg_value
    # Truncated: the writer incremented the last character it could (pyiceberg keeps the U+10FFFF after it, Java
    # Iceberg drops them and steps over the surrogates, so U+E000 follows U+D7FF): M starts with the prefix up to
    # that character, and that character decremented.
    stem = iceberg_value.rstrip("\U0010ffff")
    if not stem:
        return True
    last = ord(stem[-1])
    return delta_value >= stem[:-1] + chr(0xD7FF if last == 0xE000 else last - 1)

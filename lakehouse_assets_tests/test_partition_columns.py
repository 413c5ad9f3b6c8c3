"""Spark expressions for Iceberg partition transforms equal pyiceberg's, value by value.

The reference is pyiceberg's vectorized transform (pyiceberg-core, Iceberg's Rust implementation: what the
writer used before Spark computed partitions), and pyiceberg's scalar transform where they agree; at the
type minimum, truncate wraps in Java, Rust and Spark alike while pyiceberg's Python ints do not.
"""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyiceberg.partitioning import _to_partition_representation
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import BinaryType, DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse_assets.core.schema.partition_columns import transform_column

UTC = dt.timezone.utc
TIMES = [
    dt.datetime(1970, 1, 1, tzinfo=UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # one micro before the epoch: day -1, hour -1
    dt.datetime(1969, 12, 31, 23, 0, tzinfo=UTC),
    dt.datetime(1900, 2, 28, 12, 30, 1, 5, tzinfo=UTC),
    dt.datetime(1582, 10, 4, 1, tzinfo=UTC),  # Julian/Gregorian switch: Iceberg and Spark 3 are proleptic Gregorian
    dt.datetime(1, 1, 1, tzinfo=UTC),
    dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(2024, 3, 1, tzinfo=UTC),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    None,
]
DATES = [t.date() if t else None for t in TIMES] + [dt.date(1969, 1, 1), dt.date(1968, 12, 31)]
LONGS = [0, 1, -1, 7, -7, 34, -34, 100_000, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 1234567890123, None]
INTS = [0, 1, -1, 7, -7, 34, 2**31 - 1, -(2**31), None]
STRINGS = ["", "a", "abcdefghij", "iceberg", "åäö-ü", "日本語テキスト", "🧊🧊🧊🧊🧊", "a🧊b", None]
DECIMALS = [decimal.Decimal(x) for x in ("0.00", "12.34", "-12.34", "0.05", "-0.05", "99999.99", "-99999.99", "10.00", "-10.00")] + [None]
BINARIES = [b"", b"\x00\x01\x02\x03\x04\x05", b"\xff\xfe", None]

ARROW = {
    TimestamptzType: pa.timestamp("us", "UTC"), TimestampType: pa.timestamp("us"), DateType: pa.date32(), LongType: pa.int64(),
    IntegerType: pa.int32(), StringType: pa.string(), BinaryType: pa.binary(),
}

CASES = [
    # (spark type, iceberg type, values, transforms)
    (T.TimestampType(), TimestamptzType(), TIMES, [YearTransform(), MonthTransform(), DayTransform(), HourTransform(), BucketTransform(16), BucketTransform(7), IdentityTransform()]),
    (T.TimestampNTZType(), TimestampType(), [t.replace(tzinfo=None) if t else None for t in TIMES], [YearTransform(), MonthTransform(), DayTransform(), HourTransform()]),
    (T.DateType(), DateType(), DATES, [YearTransform(), MonthTransform(), DayTransform(), BucketTransform(16), IdentityTransform()]),
    (T.LongType(), LongType(), LONGS, [BucketTransform(16), BucketTransform(1000), TruncateTransform(10), TruncateTransform(3), IdentityTransform()]),
    (T.IntegerType(), IntegerType(), INTS, [BucketTransform(16), TruncateTransform(10), TruncateTransform(7)]),
    (T.StringType(), StringType(), STRINGS, [TruncateTransform(1), TruncateTransform(3), TruncateTransform(4), IdentityTransform()]),
    (T.DecimalType(7, 2), DecimalType(7, 2), DECIMALS, [TruncateTransform(10), TruncateTransform(3), TruncateTransform(100)]),
    (T.BinaryType(), BinaryType(), BINARIES, [TruncateTransform(3)]),
]


@pytest.mark.parametrize("spark_type, iceberg_type, values, transforms", CASES, ids=[str(c[1]) for c in CASES])
def test_spark_transforms_equal_pyiceberg(spark, spark_type, iceberg_type, values, transforms):
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], T.StructType([T.StructField("i", T.IntegerType()), T.StructField("v", spark_type)]))
    exprs = [transform_column(F.col("v"), t, iceberg_type) for t in transforms]
    assert all(e is not None for e in exprs)
    # Identity results are compared in Iceberg's internal form (micros / days): Python cannot hold year 1 in local time.
    internal_form = {T.TimestampType(): F.unix_micros, T.DateType(): F.unix_date}.get(spark_type)
    exprs = [internal_form(e) if internal_form and isinstance(t, IdentityTransform) else e for e, t in zip(exprs, transforms)]
    rows = df.select("i", *[e.alias(f"t{k}") for k, e in enumerate(exprs)]).orderBy("i").collect()
    assert len(rows) == len(values)
    arrow_values = pa.array(values, ARROW[type(iceberg_type)] if not isinstance(iceberg_type, DecimalType) else pa.decimal128(7, 2))
    vectorized = {}
    for k, t in enumerate(transforms):
        if not isinstance(t, IdentityTransform):
            out = t.pyarrow_transform(iceberg_type)(arrow_values)
            vectorized[k] = (out.cast(pa.int32()) if pa.types.is_date32(out.type) else out).to_pylist()
    for i, (r, v) in enumerate(zip(rows, values)):
        internal = _to_partition_representation(iceberg_type, v) if v is not None else None
        for k, t in enumerate(transforms):
            expected = vectorized[k][i] if k in vectorized else t.transform(iceberg_type)(internal)
            got = r[f"t{k}"]
            if isinstance(t, IdentityTransform) and not internal_form:
                got = _to_partition_representation(iceberg_type, got) if got is not None else None
            if isinstance(got, bytearray):
                got = bytes(got)
            assert got == expected, f"{t} of {v!r} ({iceberg_type}): Spark {got!r}, pyiceberg {expected!r}"


def test_unsupported_transforms_fall_back_to_pyiceberg(spark):
    # Spark's murmur3 of strings, binary and decimals is not Iceberg's; timestamps without zone lack exact micros.
    for transform, source in [(BucketTransform(16), StringType()), (BucketTransform(16), BinaryType()), (BucketTransform(16), DecimalType(9, 2)), (BucketTransform(4), TimestampType())]:
        assert transform_column(F.col("v"), transform, source) is None


def test_the_pyiceberg_fallback_partitions_instants_in_utc_whatever_the_session_time_zone(lh, spark):
    """bucket of a string sends the whole spec through pyiceberg's vectorized transforms, which receive Spark's
    timestamps labelled with the session time zone: month and year must still be the UTC instant's
    (2024-03-01 03:00 UTC is February in Los Angeles; 2024-01-01 07:00 UTC is 2023 there)."""
    import pyarrow.parquet as pq
    from pyiceberg.types import TimestamptzType

    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        df = spark.sql(
            "SELECT 'a' AS s, TIMESTAMP'2024-03-01 03:00:00+00:00' AS ts UNION ALL SELECT 'b', TIMESTAMP'2024-01-01 07:00:00+00:00' "
            "UNION ALL SELECT 'c', TIMESTAMP'2024-02-15 12:00:00+00:00'"
        )
        lh.write(df, "pc.fallback_tz", partition_by=["bucket(2, s)", "month(ts)", "year(ts)"])
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    month, year = MonthTransform().transform(TimestamptzType()), YearTransform().transform(TimestamptzType())
    seen = 0
    for task in lh.load("pc.fallback_tz").scan().plan_files():
        stored = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["ts"]).column("ts")
        for m in stored.cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_pylist():
            assert (task.file.partition[1], task.file.partition[2]) == (month(m), year(m)), task.file.file_path
            seen += 1
    assert seen == 3

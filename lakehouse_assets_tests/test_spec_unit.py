"""Unit tests: partition terms, Iceberg-exact transforms, Spark -> Iceberg type mapping."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, HourTransform, IdentityTransform, MonthTransform, TruncateTransform, YearTransform
from pyiceberg.types import (
    DateType,
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)
from pyspark.sql import types as T

from lakehouse_assets.core.errors import SchemaError, SpecError
from lakehouse_assets.core.schema.spec import (
    TableSpec,
    build_partition_spec,
    delta_partition_columns,
    parse_identifier,
    parse_partition_term,
    spec_terms,
)
from lakehouse_assets.core.schema.type_mapping import spark_schema_to_iceberg
from lakehouse_assets.core.write.partition_keys import PartitionKeyer


@pytest.mark.parametrize(
    "text, transform, source, name",
    [
        ("region", IdentityTransform(), "region", "region"),
        ("year(created_at)", YearTransform(), "created_at", "created_at_year"),
        ("month(created_at)", MonthTransform(), "created_at", "created_at_month"),
        ("day(created_at)", DayTransform(), "created_at", "created_at_day"),
        ("hour(event_time)", HourTransform(), "event_time", "event_time_hour"),
        ("bucket(16, user_id)", BucketTransform(16), "user_id", "user_id_bucket"),
        ("truncate(4,zip_code)", TruncateTransform(4), "zip_code", "zip_code_trunc"),
    ],
)
def test_parse_partition_terms(text, transform, source, name):
    term = parse_partition_term(text)
    assert term.transform == transform
    assert term.source == source
    assert term.name == name


@pytest.mark.parametrize("bad", ["bucket(x, id)", "bucket(0, id)", "frobnicate(id)", "day(a, b)", "a b", "truncate(4)"])
def test_bad_partition_terms_are_rejected(bad):
    with pytest.raises(SpecError, match="Partition term"):
        parse_partition_term(bad)


SCHEMA = Schema(
    NestedField(1, "user_id", LongType()),
    NestedField(2, "event_time", TimestamptzType()),
    NestedField(3, "region", StringType()),
    NestedField(4, "d", DateType()),
    NestedField(5, "amount", DecimalType(10, 2)),
)


def test_partition_spec_errors_name_table_and_column():
    with pytest.raises(SpecError, match=r"Table ns\.t: partition column 'nope'.*Columns are: user_id, event_time"):
        build_partition_spec("ns.t", SCHEMA, ["day(nope)"])
    with pytest.raises(SpecError, match=r"Table ns\.t: partition transform 'day\(user_id\)' cannot apply to column 'user_id' of type long. day\(\) needs a date or timestamp"):
        build_partition_spec("ns.t", SCHEMA, ["day(user_id)"])
    with pytest.raises(SpecError, match="hour\\(\\) needs a timestamp"):
        build_partition_spec("ns.t", SCHEMA, ["hour(d)"])


def test_two_partition_fields_of_one_decimal_type_are_refused():
    from pyiceberg.types import DecimalType, NestedField

    from lakehouse_assets.core.errors import SpecError
    from lakehouse_assets.core.schema.spec import build_partition_spec

    schema = Schema(NestedField(1, "dec", DecimalType(38, 10), required=False), NestedField(2, "other", DecimalType(38, 10), required=False))
    for terms in (["dec", "truncate(3, dec)"], ["dec", "other"]):
        with pytest.raises(SpecError, match=r"n\.t: partition fields .* both hold decimal\(38, 10\) values"):
            build_partition_spec("n.t", schema, terms)
    assert len(build_partition_spec("n.t", schema, ["dec", "bucket(3, dec)"]).fields) == 2  # bucket values are ints


def test_spec_round_trip_and_delta_columns():
    spec = build_partition_spec("ns.t", SCHEMA, ["day(event_time)", "bucket(16, user_id)", "region", "truncate(2, amount)"])
    assert spec_terms(spec, SCHEMA) == ["day(event_time)", "bucket(16, user_id)", "region", "truncate(2, amount)"]
    # Only identity partitions are Delta partition columns.
    assert delta_partition_columns(spec, SCHEMA) == ["region"]


def test_table_spec_validation():
    with pytest.raises(SpecError, match="namespace.table"):
        parse_identifier("events")
    with pytest.raises(SpecError, match="must include 'iceberg'"):
        TableSpec("ns.t", formats=("delta",))
    assert TableSpec("ns.t").formats == ("iceberg", "delta")


def _keys(spec_terms_list, batch):
    spec = build_partition_spec("ns.t", SCHEMA, spec_terms_list)
    keyer = PartitionKeyer(SCHEMA.model_dump_json(), spec.model_dump_json())
    return [json.loads(k) for k in keyer.keys(batch).to_pylist()]


def _batch(n=50):
    base = dt.datetime(2024, 2, 28, 22, 30, tzinfo=dt.timezone.utc)
    return pa.RecordBatch.from_pydict(
        {
            "user_id": pa.array([i * 7919 - 100 for i in range(n)], pa.int64()),
            "event_time": pa.array([base + dt.timedelta(minutes=37 * i) for i in range(n)], pa.timestamp("us", tz="UTC")),
            "region": pa.array([["eu-west", "us east/1", None][i % 3] for i in range(n)]),
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(n)], pa.date32()),
            "amount": pa.array([decimal.Decimal(f"{i * 3}.25") for i in range(n)], pa.decimal128(10, 2)),
        }
    )


def test_vectorized_partition_values_match_pyiceberg_row_by_row():
    """Iceberg-exact values: compare the vectorized keyer with pyiceberg's scalar reference transforms."""
    from types import SimpleNamespace

    from lakehouse_assets.core.formats.delta.actions import delta_partition_values

    batch = _batch()
    terms = ["bucket(16, user_id)", "day(event_time)", "hour(event_time)", "month(d)", "year(d)", "region"]
    keys = _keys(terms, batch)
    spec = build_partition_spec("ns.t", SCHEMA, terms)
    bucket = BucketTransform(16).transform(LongType())
    day, hour = DayTransform().transform(TimestamptzType()), HourTransform().transform(TimestamptzType())
    month, year = MonthTransform().transform(DateType()), YearTransform().transform(DateType())
    for i, key in enumerate(keys):
        uid = batch.column("user_id")[i].as_py()
        micros = batch.column("event_time").cast(pa.int64())[i].as_py()
        days = batch.column("d").cast(pa.int32())[i].as_py()
        region = batch.column("region")[i].as_py()
        assert key["values"] == [bucket(uid), day(micros), hour(micros), month(days), year(days), region]
        # The Delta mirror's partition values for a file of this partition: identity columns only.
        assert delta_partition_values(spec, SCHEMA, SimpleNamespace(partition=key["values"])) == {"region": region}
        assert "/" in key["dir"] and " " not in key["dir"]  # plain ASCII directories valid in both logs


def test_truncate_and_identity_on_dates_and_decimals():
    batch = _batch(5)
    keys = _keys(["truncate(10, amount)", "d"], batch)
    trunc = TruncateTransform(10).transform(DecimalType(10, 2))
    for i, key in enumerate(keys):
        amount = batch.column("amount")[i].as_py()
        assert key["values"][0] == {"decimal": str(trunc(amount))}
        assert key["values"][1] == batch.column("d").cast(pa.int32())[i].as_py()  # dates as days, Iceberg's representation


def test_spark_to_iceberg_types():
    schema = T.StructType(
        [
            T.StructField("b", T.ByteType()),
            T.StructField("s", T.ShortType()),
            T.StructField("i", T.IntegerType(), nullable=False),
            T.StructField("l", T.LongType()),
            T.StructField("f", T.FloatType()),
            T.StructField("db", T.DoubleType()),
            T.StructField("dec", T.DecimalType(12, 3)),
            T.StructField("str", T.StringType()),
            T.StructField("bin", T.BinaryType()),
            T.StructField("bool", T.BooleanType()),
            T.StructField("date", T.DateType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ts_ntz", T.TimestampNTZType()),
            T.StructField("st", T.StructType([T.StructField("x", T.IntegerType())])),
            T.StructField("arr", T.ArrayType(T.StringType())),
            T.StructField("m", T.MapType(T.StringType(), T.LongType())),
        ]
    )
    ice = spark_schema_to_iceberg("ns.t", schema)
    types = {f.name: f.field_type for f in ice.fields}
    assert types["b"] == IntegerType() and types["s"] == IntegerType() and types["i"] == IntegerType()
    assert types["dec"] == DecimalType(12, 3)
    assert types["ts"] == TimestamptzType() and types["ts_ntz"] == TimestampType()
    assert isinstance(types["st"], StructType) and isinstance(types["arr"], ListType) and isinstance(types["m"], MapType)
    assert ice.find_field("i").required and not ice.find_field("l").required
    assert len({f.field_id for f in ice.fields}) == len(ice.fields)


@pytest.mark.parametrize(
    "spark_type, hint",
    [(T.NullType(), "all nulls"), (T.DayTimeIntervalType(), "Cast it"), (T.MapType(T.ArrayType(T.IntegerType()), T.StringType()), "non-primitive keys")],
)
def test_unrepresentable_types_name_table_and_column(spark_type, hint):
    schema = T.StructType([T.StructField("ok", T.LongType()), T.StructField("bad_col", spark_type)])
    with pytest.raises(SchemaError, match=rf"Table ns\.t: column 'bad_col'.*{hint}"):
        spark_schema_to_iceberg("ns.t", schema)


def test_column_names_delta_cannot_store_are_rejected():
    with pytest.raises(SchemaError, match="column name 'a b'"):
        spark_schema_to_iceberg("ns.t", T.StructType([T.StructField("a b", T.LongType())]))
    with pytest.raises(SchemaError, match="case-insensitive"):
        spark_schema_to_iceberg("ns.t", T.StructType([T.StructField("A", T.LongType()), T.StructField("a", T.LongType())]))

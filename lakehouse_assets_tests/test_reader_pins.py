"""Pinned behaviour of third-party readers that our tests work around (remove the workaround when a pin fails)."""

from __future__ import annotations

import decimal
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions


def test_delta_rs_dataset_drops_files_without_min_max(tmp_path):
    """delta-rs 1.6.6 `to_pyarrow_dataset()` turns a file's missing min/max of a column into the guarantee
    `col >= null`, so a filter on that column drops the file. The protocol allows any column to lack
    min/max (Delta Spark omits them for all-null columns); delta-rs's SQL engine (QueryBuilder) is right."""
    t = pa.table({"a": [1, 2], "dec": pa.array([decimal.Decimal("1E-10"), decimal.Decimal("2")], pa.decimal128(38, 10))})
    root = str(tmp_path / "t")
    os.makedirs(root + "/data")
    pq.write_table(t, root + "/data/f.parquet")
    stats = {"numRecords": 2, "minValues": {"a": 1}, "maxValues": {"a": 2}, "nullCount": {"a": 0, "dec": 0}}
    add = AddAction("data/f.parquet", os.path.getsize(root + "/data/f.parquet"), {}, 0, True, json.dumps(stats))
    create_table_with_add_actions(root, Schema.from_arrow(t.schema), [add], mode="error")
    table = DeltaTable(root)
    value = pa.scalar(decimal.Decimal("1E-10"), type=pa.decimal128(38, 10))
    assert table.to_pyarrow_dataset().to_table(filter=pc.field("dec") == value).num_rows == 0  # the bug
    sql = QueryBuilder().register("t", table).execute("SELECT * FROM t WHERE dec = CAST('0.0000000001' AS DECIMAL(38,10))")
    assert pa.table(sql.read_all()).num_rows == 1


def test_delta_rs_dataset_misreads_negative_decimal_partition_values(tmp_path):
    """delta-rs 1.6.6 `to_pyarrow_dataset()` re-spells a negative decimal partition value with a fraction, e.g.
    '0.0000-13174' for -0.0000013174 and '-289570.-7572522509' for -289570.7572522509 (-5.0 is read right), and
    fails to cast it, so the table cannot be read that way (its own writer fails the same way on such a value).
    The log holds the protocol's spelling; its SQL engine and DuckDB read it right."""
    root = str(tmp_path / "t")
    os.makedirs(root + "/data")
    pq.write_table(pa.table({"a": [1]}), root + "/data/f.parquet")
    schema = pa.schema([("a", pa.int64()), ("dec", pa.decimal128(38, 10))])
    add = AddAction("data/f.parquet", os.path.getsize(root + "/data/f.parquet"), {"dec": "-0.0000013174"}, 0, True, json.dumps({"numRecords": 1}))
    create_table_with_add_actions(root, Schema.from_arrow(schema), [add], mode="error", partition_by=["dec"])
    table = DeltaTable(root)
    try:
        table.to_pyarrow_table()
        raise AssertionError("delta-rs reads negative decimal partition values now: drop the QueryBuilder detour in test_property_formats.py")
    except pa.ArrowInvalid as e:
        assert "0.0000-13174" in str(e)  # the bug
    sql = pa.table(QueryBuilder().register("t", table).execute("SELECT dec FROM t").read_all())
    assert sql.column("dec").to_pylist() == [decimal.Decimal("-0.0000013174")]
    # Not only in (-1, 0): any negative value with a fraction.
    root = str(tmp_path / "u")
    os.makedirs(root + "/data")
    pq.write_table(pa.table({"a": [1]}), root + "/data/f.parquet")
    add = AddAction("data/f.parquet", os.path.getsize(root + "/data/f.parquet"), {"dec": "-289570.7572522509"}, 0, True, json.dumps({"numRecords": 1}))
    create_table_with_add_actions(root, Schema.from_arrow(schema), [add], mode="error", partition_by=["dec"])
    try:
        DeltaTable(root).to_pyarrow_table()
        raise AssertionError("delta-rs reads negative decimal partition values now: drop the QueryBuilder detour in test_property_formats.py")
    except pa.ArrowInvalid as e:
        assert "-289570.-7572522509" in str(e)


def test_delta_rs_decodes_surrogate_pairs_in_stats_wrongly(tmp_path):
    """delta-rs 1.6.6 decodes a JSON surrogate pair in the stats (`\\ud8c8\\udd69`, U+42169, valid JSON as Python's
    json.dumps writes it by default) as U+32169, 0x10000 too low. The Delta committer writes stats as raw UTF-8
    (ensure_ascii=False), which delta-rs reads right."""
    t = pa.table({"s": ["\U00042169"]})
    root = str(tmp_path / "t")
    os.makedirs(root + "/data")
    pq.write_table(t, root + "/data/f.parquet")
    escaped = json.dumps({"numRecords": 1, "minValues": {"s": "\U00042169"}, "maxValues": {"s": "\U00042169"}, "nullCount": {"s": 0}})
    assert "\\ud8c8\\udd69" in escaped
    add = AddAction("data/f.parquet", os.path.getsize(root + "/data/f.parquet"), {}, 0, True, escaped)
    create_table_with_add_actions(root, Schema.from_arrow(t.schema), [add], mode="error")
    (stats,) = pa.table(DeltaTable(root).get_add_actions(flatten=True)).to_pylist()
    assert stats["max.s"] == "\U00032169"  # the bug: a max below the value it bounds


def test_duckdb_iceberg_misprunes_time_transforms_before_1970(tmp_path):
    """DuckDB 1.5.5's iceberg_scan drops the file of a month(ts) partition before 1970 for `ts = <its value>`
    (found by the property test: 0273-02-23 is month -20363, which Iceberg, pyiceberg and Java Iceberg agree on;
    pyiceberg and DuckDB's delta_scan return the row). The property test reads DuckDB-Iceberg filters on such
    columns without pushdown; remove that detour when this pin fails."""
    import datetime as dt

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema as IcebergSchema
    from pyiceberg.transforms import MonthTransform
    from pyiceberg.types import LongType, NestedField, TimestamptzType

    from lakehouse_assets.core.read import duckdb_readers

    catalog = SqlCatalog("pin", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("n")
    schema = IcebergSchema(NestedField(1, "rid", LongType(), required=False), NestedField(2, "ts", TimestamptzType(), required=False))
    table = catalog.create_table("n.t", schema, partition_spec=PartitionSpec(PartitionField(2, 1000, MonthTransform(), "ts_month")))
    value = dt.datetime(273, 2, 23, 14, 18, 9, 123371, tzinfo=dt.timezone.utc)
    table.append(pa.table({"rid": pa.array([1, 2], pa.int64()),
                           "ts": pa.array([value, dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", "UTC"))}))
    table = catalog.load_table("n.t")
    assert [f.file.partition[0] for f in table.scan().plan_files()].count(-20363) == 1
    con = duckdb_readers.connect()
    src = duckdb_readers.iceberg_scan_sql(table.metadata_location)
    literal = "TIMESTAMPTZ '0273-02-23 14:18:09.123371+00'"
    assert con.execute(f"SELECT rid FROM {src} WHERE ts = {literal}").fetchall() == []  # the bug
    assert con.execute(f"SELECT rid FROM (SELECT * FROM {src} OFFSET 0) WHERE ts = {literal}").fetchall() == [(1,)]


def test_duckdb_iceberg_misprunes_decimal_truncate_beyond_int64(tmp_path):
    """DuckDB 1.5.5's iceberg_scan drops the file of a truncate(3, decimal(38,10)) partition for `dec = <its value>`
    when the value's unscaled integer does not fit in 64 bits (found by the nightly property test: the decimal
    maximum); identity and unpartitioned tables, and small values, are read right, as are pyiceberg's filter and
    DuckDB without pushdown. The table here is written by pyiceberg. The property test reads DuckDB-Iceberg filters
    on such columns without pushdown; remove that detour when this pin fails."""
    import decimal as dec_

    from pyiceberg import expressions as ice
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema as IcebergSchema
    from pyiceberg.transforms import TruncateTransform
    from pyiceberg.types import DecimalType, LongType, NestedField

    from lakehouse_assets.core.read import duckdb_readers

    catalog = SqlCatalog("pin", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("n")
    schema = IcebergSchema(NestedField(1, "rid", LongType(), required=False), NestedField(2, "dec", DecimalType(38, 10), required=False))
    table = catalog.create_table("n.t", schema, partition_spec=PartitionSpec(PartitionField(2, 1000, TruncateTransform(3), "dec_trunc")))
    big, small = dec_.Decimal("99999999999999999999.0000000000"), dec_.Decimal("12345.5000000000")
    table.append(pa.table({"rid": pa.array([1, 2], pa.int64()), "dec": pa.array([big, small], pa.decimal128(38, 10))}))
    table = catalog.load_table("n.t")
    assert table.scan(row_filter=ice.EqualTo("dec", big)).to_arrow().column("rid").to_pylist() == [1]
    con = duckdb_readers.connect()
    src = duckdb_readers.iceberg_scan_sql(table.metadata_location)
    assert con.execute(f"SELECT rid FROM {src} WHERE dec = CAST('{big}' AS DECIMAL(38,10))").fetchall() == []  # the bug
    assert con.execute(f"SELECT rid FROM (SELECT * FROM {src} OFFSET 0) WHERE dec = CAST('{big}' AS DECIMAL(38,10))").fetchall() == [(1,)]
    assert con.execute(f"SELECT rid FROM {src} WHERE dec = CAST('{small}' AS DECIMAL(38,10))").fetchall() == [(2,)]


def test_pyiceberg_truncate_filter_does_not_wrap_like_its_writer():
    """pyiceberg 0.12: truncate(1000) of the long minimum is 9223372036854775616 in its Arrow transform (the one
    that computes written partition values, as Java Iceberg's TruncateLong does: long arithmetic wraps), but
    -9223372036854776000 in its Python transform, the one filter projection uses; a filter on that value prunes
    the partition holding it (Java's filter projection prunes it too). The project's writer therefore refuses
    such values (test_edge_values.py::test_truncate_that_leaves_the_long_range_is_refused)."""
    from pyiceberg.transforms import TruncateTransform
    from pyiceberg.types import LongType

    truncate = TruncateTransform(1000)
    minimum = -(2**63)
    written = truncate.pyarrow_transform(LongType())(pa.array([minimum], pa.int64()))[0].as_py()
    projected = truncate.transform(LongType())(minimum)
    assert written == minimum - 192 + 2**64 == 9223372036854775616
    assert projected == minimum - 192  # not representable as a long: no partition has it


def test_pyiceberg_names_two_decimal_partition_types_alike_in_avro():
    """pyiceberg 0.12 converts each decimal(p,s) of a struct to the Avro fixed type `decimal_p_s`, defining it again
    for a second field; Avro forbids two definitions of one name, and DuckDB 1.5.5 aborts reading such a manifest
    ("Cannot save fixed schema"; found by the property test with partitions `dec` and `truncate(3, dec)`). The
    project refuses such partition specs (core/schema/spec.py); when this pin fails, pyiceberg references the type the
    second time and the refusal can go."""
    import json as json_

    from pyiceberg.schema import Schema as IcebergSchema
    from pyiceberg.types import DecimalType, NestedField
    from pyiceberg.utils.schema_conversion import AvroSchemaConversion

    partition = IcebergSchema(NestedField(1000, "a", DecimalType(38, 10), required=False), NestedField(1001, "b", DecimalType(38, 10), required=False))
    avro = json_.dumps(AvroSchemaConversion().iceberg_to_avro(partition, schema_name="r102"))
    assert avro.count('"type": "fixed"') == 2 and avro.count('"name": "decimal_38_10"') == 2  # defined twice: the bug


def test_pyiceberg_year_projection_overflows_below_year_one():
    """pyiceberg 0.12: projecting `ts < 0001-01-01T00:00` through a year (or month) partition decrements the
    boundary to year 0 and raises OverflowError, so its scan planning fails on such a filter (the day transform
    projects it); its residual evaluation (strict projection) does the same for other comparisons. The property
    test reads pyiceberg without the filter pushed down for values in year 1."""
    import datetime as dt

    from pyiceberg.expressions import LessThan
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform, YearTransform
    from pyiceberg.types import NestedField, TimestampType

    bound = LessThan("ts", dt.datetime(1, 1, 1).isoformat()).bind(Schema(NestedField(1, "ts", TimestampType())))
    with pytest.raises(OverflowError, match="date value out of range"):
        YearTransform().project("p", bound)
    assert DayTransform().project("p", bound) is not None

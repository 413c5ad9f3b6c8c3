"""Import and column types: what one format holds and the other lacks. Spark's INT96 timestamps (its and Databricks'
long-time default) import as timestamptz / Delta `timestamp` and every reader of both formats reads them; files of one
Parquet folder that differ only in 32- or 64-bit offsets (string vs large_string) are one column; Iceberg types with no
Delta equal (uuid, fixed, time, nanosecond timestamps) and `time` in Parquet files are refused by column, nothing changed."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakehouse_assets import ImportRefused, MergeOptions

from . import java_iceberg
from .conftest import assert_all_readers_agree, rows_of
from .test_import import tree_digest

UTC = dt.timezone.utc
COLUMNS = "id long, name string, country string, ts timestamp"
ORDER = ["country", "id", "name", "ts"]


def ts_rows() -> list[tuple]:
    """(id, name, country, ts): microsecond instants on both sides of 1970, and a null."""
    base = dt.datetime(2024, 3, 1, 12, 30, 45, 123456)
    rows = [(i, f"n{i}", "US" if i % 2 else "DE", base + dt.timedelta(days=i, microseconds=i)) for i in range(8)]
    return [*rows, (8, "old", "DE", dt.datetime(1969, 12, 31, 23, 59, 59, 999999)), (9, "none", "US", None)]


def expected_of(rows) -> list[tuple]:
    return sorted(rows_of([dict(zip(["id", "name", "country", "ts"], r)) for r in rows], ORDER), key=repr)


@contextlib.contextmanager
def int96_output(spark):
    """Spark writes timestamps as INT96 (spark.sql.parquet.outputTimestampType=INT96, its legacy default) in the block."""
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "INT96")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def spark_int96_files(spark, root, rows) -> list[str]:
    """Spark writes `rows` partitioned by country with INT96 timestamps; the data files' paths relative to `root`."""
    with int96_output(spark):
        spark.createDataFrame(rows, COLUMNS).repartition(2).write.partitionBy("country").parquet(str(root))
    files = sorted(os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns if n.endswith(".parquet"))
    for f in files:  # the fixture is what it claims: Spark's INT96, not INT64 micros
        assert pq.read_metadata(os.path.join(root, f)).schema.column(2).physical_type == "INT96", f
    return files


def delta_log_over(root, files: list[str]) -> None:
    """A Delta table over Spark's files as delta-spark would commit them (delta-rs cannot write INT96): delta-rs's
    create_table_with_add_actions, partition values from the folders, stats with counts and millisecond bounds."""
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    schema = Schema.from_arrow(pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("country", pa.string())]))
    adds = []
    for f in files:
        data = pq.read_table(os.path.join(root, f), coerce_int96_timestamp_unit="us")
        ids, names = data.column("id").to_pylist(), data.column("name").to_pylist()
        ts = [t for t in data.column("ts").to_pylist() if t is not None]
        low, high = min(ts).replace(microsecond=min(ts).microsecond // 1000 * 1000), max(ts) + dt.timedelta(milliseconds=1)
        stats = {
            "numRecords": data.num_rows,
            "minValues": {"id": min(ids), "name": min(names), "ts": low.isoformat(timespec="milliseconds") + "Z"},
            "maxValues": {"id": max(ids), "name": max(names), "ts": high.isoformat(timespec="milliseconds") + "Z"},
            "nullCount": {"id": 0, "name": 0, "ts": data.column("ts").null_count},
        }
        country = f.split("/")[0].split("=", 1)[1]
        adds.append(AddAction(f, os.path.getsize(os.path.join(root, f)), {"country": country}, 1_700_000_000_000, True, json.dumps(stats)))
    create_table_with_add_actions(str(root), schema, adds, partition_by=["country"])


def assert_int96_table(lh, spark, duck, name: str, rows) -> None:
    """Types as the source meant them (an instant: Iceberg timestamptz, Delta timestamp), every reader reads the source's values,
    no Iceberg bound for the INT96 column, verify --deep agrees."""
    from pyiceberg.types import TimestamptzType

    table = lh.load(name)
    assert table.schema().find_field("ts").field_type == TimestamptzType()
    delta = DeltaTable(table.location())
    assert json.loads(delta.schema().to_json())["fields"][[f.name for f in delta.schema().fields].index("ts")]["type"] == "timestamp"
    ts_id = table.schema().find_field("ts").field_id
    for f in table.inspect.files().to_pylist():
        assert ts_id not in dict(f["lower_bounds"]) and ts_id not in dict(f["upper_bounds"]), f["file_path"]  # INT96 has no order: no bound
    assert assert_all_readers_agree(lh, spark, duck, name, expected_of(rows), columns=ORDER)
    deep = lh.verify(name, deep=True)
    assert deep["agree"], deep["differences"]


def still_agrees_after_writes(lh, spark, duck, name: str, rows) -> None:
    """An append, a merge (rewriting an INT96 file) and a compaction through the project: every reader agrees each time."""
    rows = list(rows)
    new = (100, "new", "FR", dt.datetime(2025, 1, 2, 3, 4, 5, 678901))
    lh.write(spark.createDataFrame([new], COLUMNS), name, mode="append")
    rows.append(new)
    changed = [(0, "changed", "DE", dt.datetime(2001, 2, 3, 4, 5, 6, 7)), (101, "merged", "US", None)]
    lh.write(spark.createDataFrame(changed, COLUMNS), name, mode="merge", merge=MergeOptions(keys=["id"]))
    rows = [r for r in rows if r[0] != 0] + changed
    assert assert_all_readers_agree(lh, spark, duck, name, expected_of(rows), columns=ORDER)
    compacted = lh.maintain(name, "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert assert_all_readers_agree(lh, spark, duck, name, expected_of(rows), columns=ORDER)
    deep = lh.verify(name, deep=True)
    assert deep["agree"], deep["differences"]


# ---------------------------------------------------------------- INT96 timestamps


def test_a_spark_int96_parquet_folder_is_imported_as_timestamptz_and_every_reader_reads_it(lh, spark, duck, tmp_path):
    root = tmp_path / "int96_folder"
    rows = ts_rows()
    spark_int96_files(spark, root, rows)
    before = tree_digest(root)

    report = lh.import_table("types.int96_folder", str(root))

    assert report["source_format"] == "parquet" and report["rows"] == len(rows)
    assert {p: d for p, d in tree_digest(root).items() if p in before} == before  # no file rewritten
    assert_int96_table(lh, spark, duck, "types.int96_folder", rows)
    still_agrees_after_writes(lh, spark, duck, "types.int96_folder", rows)


def test_a_delta_table_over_spark_int96_files_is_imported_and_its_log_kept(lh, spark, duck, tmp_path):
    root = tmp_path / "int96_delta"
    rows = ts_rows()
    delta_log_over(root, spark_int96_files(spark, root, rows))
    schema_before = DeltaTable(str(root)).schema().to_json()
    assert rows_of(pa.table(DeltaTable(str(root)).to_pyarrow_table()).to_pylist(), ORDER) == expected_of(rows)  # delta-rs reads the source

    report = lh.import_table("types.int96_delta", str(root))

    assert report["source_format"] == "delta" and report["rows"] == len(rows)
    assert DeltaTable(str(root)).schema().to_json() == schema_before
    assert_int96_table(lh, spark, duck, "types.int96_delta", rows)
    still_agrees_after_writes(lh, spark, duck, "types.int96_delta", rows)


@pytest.mark.java_iceberg
def test_java_iceberg_reads_imported_int96_files(lh, spark, tmp_path):
    rows = ts_rows()
    spark_int96_files(spark, tmp_path / "folder", rows)
    delta_log_over(tmp_path / "delta", spark_int96_files(spark, tmp_path / "delta", rows))
    for name, folder in (("types.java_int96_folder", "folder"), ("types.java_int96_delta", "delta")):
        lh.import_table(name, str(tmp_path / folder))
        java = java_iceberg.read_metadata(spark, lh.load(name).metadata_location)
        assert dict(java.dtypes)["ts"] == "timestamp", name
        assert rows_of(java.collect(), ORDER) == expected_of(rows), name
    at = dt.datetime(2024, 3, 1, 12, 0, 0, 123456)
    with int96_output(spark):
        spark.createDataFrame([(1, (at,), [at])], "id long, event struct<at: timestamp>, seen array<timestamp>").write.parquet(str(tmp_path / "nested"))
    lh.import_table("types.java_int96_nested", str(tmp_path / "nested"))
    java = java_iceberg.read_metadata(spark, lh.load("types.java_int96_nested").metadata_location)
    assert rows_of(java.collect(), ["id", "event", "seen"]) == [(1, (("at", at.isoformat()),), (at.isoformat(),))]


# ---------------------------------------------------------------- one logical type, two Arrow encodings


def test_files_differing_only_in_string_and_large_string_encoding_are_one_column(lh, spark, duck, tmp_path):
    root = tmp_path / "offsets"
    root.mkdir()
    narrow = pa.schema([("id", pa.int64()), ("name", pa.string()), ("country", pa.string()), ("payload", pa.binary())])
    wide = pa.schema([("id", pa.int64()), ("name", pa.large_string()), ("country", pa.large_string()), ("payload", pa.large_binary())])
    first = [(i, f"n{i}", "DE", f"p{i}".encode()) for i in range(4)]
    second = [(i, f"n{i}", "US", f"p{i}".encode()) for i in range(4, 7)]
    for path, schema, part in (("a.parquet", narrow, first), ("b.parquet", wide, second)):
        pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in part], schema=schema), root / path)
    assert pq.read_schema(root / "b.parquet").field("name").type == pa.large_string()  # the files really differ

    lh.import_table("types.offsets", str(root))

    table = lh.load("types.offsets")
    assert [str(f.field_type) for f in table.schema().fields] == ["long", "string", "string", "binary"]
    delta = DeltaTable(table.location())
    assert [str(f.type) for f in delta.schema().fields] == ['PrimitiveType("long")', 'PrimitiveType("string")', 'PrimitiveType("string")', 'PrimitiveType("binary")']
    columns = ["country", "id", "name", "payload"]
    expected = sorted(((c, i, n, p) for i, n, c, p in first + second), key=repr)
    assert assert_all_readers_agree(lh, spark, duck, "types.offsets", expected, columns=columns)
    deep = lh.verify("types.offsets", deep=True)
    assert deep["agree"], deep["differences"]
    later = "id long, name string, country string, payload binary"
    lh.write(spark.createDataFrame([(100, "new", "FR", b"x")], later), "types.offsets", mode="append")
    lh.write(spark.createDataFrame([(0, "changed", "DE", b"y")], later), "types.offsets", mode="merge", merge=MergeOptions(keys=["id"]))
    expected = sorted([r for r in expected if r[1] != 0] + [("FR", 100, "new", b"x"), ("DE", 0, "changed", b"y")], key=repr)
    assert assert_all_readers_agree(lh, spark, duck, "types.offsets", expected, columns=columns)
    assert lh.maintain("types.offsets", "compaction", spark=spark, compaction_min_input_files=2)["committed"]
    assert assert_all_readers_agree(lh, spark, duck, "types.offsets", expected, columns=columns)
    deep = lh.verify("types.offsets", deep=True)
    assert deep["agree"], deep["differences"]


# ---------------------------------------------------------------- types Delta does not have: refused by column


def test_an_iceberg_table_with_uuid_fixed_and_time_columns_is_refused_naming_each_and_left_as_it_was(lh, tmp_path):
    from pyiceberg.schema import Schema
    from pyiceberg.types import FixedType, LongType, NestedField, TimeType, UUIDType

    lh.catalog.create_namespace("ext")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "key", UUIDType()), NestedField(3, "code", FixedType(4)), NestedField(4, "at", TimeType()))
    table = lh.catalog.create_table("ext.odd", schema=schema, location=str(tmp_path / "odd"))
    table.append(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "key": pa.array([uuid.uuid4().bytes, uuid.uuid4().bytes], pa.uuid()),
                "code": pa.array([b"abcd", b"wxyz"], pa.binary(4)),
                "at": pa.array([dt.time(1, 2, 3), dt.time(23, 59, 59, 999999)], pa.time64("us")),
            }
        )
    )
    metadata_before, before = table.refresh().metadata_location, tree_digest(tmp_path / "odd")

    with pytest.raises(ImportRefused) as refused:
        lh.import_table("ext.odd")

    message = str(refused.value)
    assert message.startswith("Table ext.odd cannot be imported: ") and message.endswith("Nothing was changed.")
    assert "types Delta does not have: column 'key' is uuid (store it as a string holding its 36-character text form)" in message
    assert "column 'code' is fixed[4] (store it as binary)" in message
    assert "column 'at' is time (store it as a string, or a long holding microseconds since midnight)" in message
    assert tree_digest(tmp_path / "odd") == before and lh.load("ext.odd").metadata_location == metadata_before
    assert not os.path.exists(tmp_path / "odd" / "_delta_log")


def test_nanosecond_timestamps_have_no_delta_type_and_are_refused_by_column():
    """pyiceberg 0.12 writes no format-version 3 table (the only one with timestamp_ns), and no engine here writes one
    with a nanosecond column: the mapping every Delta schema goes through refuses them by column path, nested ones too."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, LongType, NestedField, StructType, TimestampNanoType, TimestamptzNanoType

    from lakehouse_assets.core.errors import SchemaError
    from lakehouse_assets.core.schema.type_mapping import delta_schema

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "at", TimestamptzNanoType()),
        NestedField(3, "events", ListType(4, StructType(NestedField(5, "seen", TimestampNanoType())))),
    )
    with pytest.raises(SchemaError) as refused:
        delta_schema(schema)
    assert "types Delta does not have: column 'at' is timestamptz_ns (store it as timestamptz (microseconds))" in str(refused.value)
    assert "column 'events.element.seen' is timestamp_ns" in str(refused.value)


def test_a_time_column_in_a_parquet_folder_is_refused_naming_the_column_and_nothing_changes(lh, tmp_path):
    root = tmp_path / "clock"
    root.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "opens": pa.array([dt.time(8), dt.time(9, 30)], pa.time64("us"))}), root / "a.parquet")
    before = tree_digest(root)

    with pytest.raises(ImportRefused, match=r"^Table types\.clock cannot be imported from .*clock: column types Iceberg and Delta do not share: column 'opens' is time \(store it as .*Nothing was imported"):
        lh.import_table("types.clock", str(root))

    assert tree_digest(root) == before
    assert "types.clock" not in lh.table_names()


def test_nanosecond_parquet_timestamps_are_refused_naming_the_column_and_nothing_changes(lh, tmp_path):
    """pyarrow (and pandas through it) writes timestamp[ns] as Parquet TIMESTAMP(NANOS): no Iceberg type before format version 3."""
    root = tmp_path / "nanos"
    root.mkdir()
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "seen": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns"))}), root / "a.parquet")
    before = tree_digest(root)

    with pytest.raises(ImportRefused, match=r"types\.nanos cannot be imported from .*: column 'seen' is timestamp\[ns\] \(no Iceberg type in format version 2"):
        lh.import_table("types.nanos", str(root))

    assert tree_digest(root) == before
    assert "types.nanos" not in lh.table_names()


def test_a_uuid_column_another_engine_adds_after_the_import_is_reported_by_verify_and_refused_by_the_mirror(lh):
    """pyiceberg adds a uuid column to an imported table: verify names it as a difference (it does not raise), and the
    Delta mirror refuses it by column instead of declaring binary."""
    from pyiceberg.types import UUIDType

    from lakehouse_assets.core.errors import SchemaError

    lh.catalog.create_namespace("ext")
    table = lh.catalog.create_table("ext.later", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    lh.import_table("ext.later")
    with table.refresh().update_schema() as update:
        update.add_column("key", UUIDType())
    table.refresh().append(pa.table({"id": pa.array([2], pa.int64()), "key": pa.array([uuid.uuid4().bytes], pa.uuid())}))

    report = lh.verify("ext.later")

    assert not report["agree"]
    assert "schema: Iceberg has types Delta does not have: column 'key' is uuid (store it as a string" in " ".join(report["differences"])
    with pytest.raises(SchemaError, match=r"column 'key' is uuid"):
        lh.repair("ext.later")
    assert "uuid" not in DeltaTable(lh.load("ext.later").location()).schema().to_json()


def test_int96_timestamps_inside_structs_lists_and_maps_import_too(lh, spark, duck, tmp_path):
    root = tmp_path / "nested96"
    at = dt.datetime(2024, 3, 1, 12, 0, 0, 123456)
    with int96_output(spark):
        spark.createDataFrame(
            [(1, (at,), [at, None], {"k": at}), (2, (None,), [], {})], "id long, event struct<at: timestamp>, seen array<timestamp>, marks map<string, timestamp>"
        ).coalesce(1).write.parquet(str(root))
    leaves = pq.read_metadata(next(root.glob("*.parquet"))).schema
    assert [leaves.column(i).physical_type for i in range(len(leaves))].count("INT96") == 3
    before = tree_digest(root)

    lh.import_table("types.nested96", str(root))

    assert {p: d for p, d in tree_digest(root).items() if p in before} == before
    types = {f.name: str(f.field_type) for f in lh.load("types.nested96").schema().fields}
    assert types["event"].endswith("at: optional timestamptz>") and "timestamptz" in types["seen"] and "timestamptz" in types["marks"], types
    iso = at.isoformat()
    expected = [((("at", iso),), 1, (("k", iso),), (iso, None)), ((("at", None),), 2, (), ())]  # columns in name order
    assert assert_all_readers_agree(lh, spark, duck, "types.nested96", expected, columns=["event", "id", "marks", "seen"])
    deep = lh.verify("types.nested96", deep=True)
    assert deep["agree"], deep["differences"]


def test_a_polars_delta_table_with_view_typed_files_is_refused_then_imported_after_delta_rs_rewrites_them(lh, spark, duck, tmp_path):
    """Polars' write_delta declares its strings as Arrow `string_view` in the files, which pyiceberg cannot read beside
    other files: refused naming the column, the source unchanged; the refusal's fix (delta-rs's Z-order rewrite, one
    version that changes no row) makes it importable, and every reader of both formats then agrees."""
    import polars as pl
    from pyiceberg.types import StringType

    from .test_import import still_agrees_after_writes

    rows = [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(12)]
    root = tmp_path / "polars"
    pl.DataFrame(rows, schema=["id", "name", "country"], orient="row").write_delta(str(root), delta_write_options={"partition_by": ["country"]})
    assert any(pq.read_schema(str(f)).field("name").type == pa.string_view() for f in root.rglob("*.parquet"))
    before = tree_digest(root)
    with pytest.raises(ImportRefused, match=r"view types.*\['name'\].*z_order"):
        lh.import_table("pol.people", str(root))
    assert tree_digest(root) == before
    DeltaTable(str(root)).optimize.z_order(["id"])
    lh.import_table("pol.people", str(root))
    assert lh.load("pol.people").schema().find_field("name").field_type == StringType()
    still_agrees_after_writes(lh, spark, duck, "pol.people", rows)

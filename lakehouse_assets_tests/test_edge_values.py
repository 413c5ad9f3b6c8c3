"""Edge values and odd names: each works in both formats or is refused up front.

Every refusal names the table and the column, and leaves nothing behind: no data file, no catalog
entry for a table the failed write would have created, no new snapshot or version of an existing one.
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import subprocess

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from lakehouse_assets import InputError, MergeOptions, SchemaError, SpecError, TableOptions
from lakehouse_assets.core.errors import WriteError
from lakehouse_assets.core.read import duckdb_readers

from .conftest import assert_all_readers_agree


def local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def files_under(lh, identifier) -> list[str]:
    root = local(lh.table_location(identifier))
    return sorted(p for p in glob.glob(os.path.join(root, "data", "**", "*"), recursive=True) if os.path.isfile(p))


def delta_log_actions(location: str) -> list[dict]:
    """Every action of every JSON commit, as written (to check the exact spelling of values)."""
    out = []
    for path in sorted(glob.glob(os.path.join(local(location), "_delta_log", "*.json"))):
        with open(path) as f:
            out += [json.loads(line) for line in f if line.strip()]
    return out


def adds(location: str) -> list[dict]:
    return [a["add"] for a in delta_log_actions(location) if "add" in a]


def assert_refused_and_nothing_left(lh, identifier, error):
    message = str(error)
    assert identifier in message, message
    assert identifier not in lh.table_names(), "a failed first write left the table in the catalog"
    assert files_under(lh, identifier) == []


# ---------------------------------------------------------------- bugs 1-3: the Delta encoder


def test_top_of_range_timestamps_mirror_to_delta(lh, spark, duck):
    df = spark.sql(
        "SELECT TIMESTAMP_NTZ'9999-12-31 23:59:59.999999' AS ntz, TIMESTAMP'9999-12-31 23:59:59.999999' AS tz, "
        "DATE'9999-12-31' AS d, 1 AS k UNION ALL "
        # (0001-01-01T00:00Z itself: PySpark's collect() cannot turn it into a Python datetime, whoever wrote it)
        "SELECT TIMESTAMP_NTZ'0001-01-01 00:00:00' , TIMESTAMP'0001-01-02 00:00:00', DATE'0001-01-01', 2"
    )
    r = lh.write(df.coalesce(1), "edge.top")
    assert not r.delta_lagging, r.delta_error
    rows = assert_all_readers_agree(lh, spark, duck, "edge.top")
    assert len(rows) == 2
    (add,) = adds(r.location)
    stats = json.loads(add["stats"])
    # The upper bound cannot be rounded up to milliseconds without overflowing: no stat rather than a wrong one.
    assert "ntz" not in stats["maxValues"] and "tz" not in stats["maxValues"]
    assert stats["maxValues"]["d"] == "9999-12-31" and stats["minValues"]["d"] == "0001-01-01"
    # delta-rs prunes correctly at the very top of the range.
    top = DeltaTable(local(r.location)).to_pyarrow_dataset().to_table(filter=pa.compute.field("k") == 1)
    assert top.num_rows == 1


def test_string_stats_beyond_the_basic_plane_read_back_exactly(lh, spark, duck):
    """Found by the property test: stats written as JSON \\u escapes put a character above U+FFFF as a
    surrogate pair, which delta-rs 1.6.6 decodes 0x10000 too low (pinned in test_reader_pins.py): the max of
    the column fell below its own value, and delta-rs's filtered reads skipped the file."""
    value = "x\U00042169"
    df = spark.createDataFrame([(1, value), (2, "a")], "k INT, s STRING").coalesce(1)
    r = lh.write(df, "edge.astral")
    assert not r.delta_lagging, r.delta_error
    assert_all_readers_agree(lh, spark, duck, "edge.astral")
    (add,) = pa.table(DeltaTable(local(r.location)).get_add_actions(flatten=True)).to_pylist()
    assert (add["min.s"], add["max.s"]) == ("a", value)
    hit = DeltaTable(local(r.location)).to_pyarrow_dataset().to_table(filter=pa.compute.field("s") == value)
    assert hit.column("k").to_pylist() == [1]
    report = lh.verify("edge.astral")
    assert report["agree"], report["differences"]


def test_truncate_of_a_decimal_38_is_exact(lh, spark, duck):
    """Found by the property test: Spark computed truncate(3, dec) of a decimal(38,10) with a digit less
    (precision-loss rule), writing -0.0000000260 where Iceberg's transform gives -0.0000000258; pruning
    readers then lost the row."""
    import decimal

    from pyiceberg import expressions as ice

    df = spark.sql("SELECT 1 AS k, CAST('-0.0000000256' AS DECIMAL(38,10)) AS dec UNION ALL SELECT 2, CAST('5' AS DECIMAL(38,10))")
    r = lh.write(df.coalesce(1), "edge.trunc38", partition_by=["truncate(3, dec)"])
    assert not r.delta_lagging, r.delta_error
    table = lh.load("edge.trunc38")
    assert sorted(f.file.partition[0] for f in table.scan().plan_files()) == [decimal.Decimal("-2.58E-8"), decimal.Decimal("4.9999999998")]
    hit = table.scan(row_filter=ice.EqualTo("dec", decimal.Decimal("-0.0000000256"))).to_arrow()
    assert hit.column("k").to_pylist() == [1]
    assert_all_readers_agree(lh, spark, duck, "edge.trunc38")


def test_truncate_that_leaves_the_long_range_is_refused(lh, spark, duck):
    """Found by the nightly property test: truncate(1000) of the long minimum leaves the long range; Java Iceberg
    wraps it to 9223372036854775616, and every pruning Iceberg reader (Java, pyiceberg, DuckDB) then drops the row
    from `i64 < -1`. Refused with the column named; a failed first write leaves no table and no file."""
    df = spark.sql("SELECT 1 AS k, CAST(-9223372036854775808 AS BIGINT) AS i64 UNION ALL SELECT 2, CAST(-5 AS BIGINT)")
    with pytest.raises(InputError) as info:
        lh.write(df, "edge.wrap", partition_by=["truncate(1000, i64)"])
    assert "edge.wrap" in str(info.value) and "'i64'" in str(info.value) and "truncate(1000) leaves the long range" in str(info.value)
    assert len(str(info.value).splitlines()) == 1
    assert_refused_and_nothing_left(lh, "edge.wrap", info.value)
    # Just above the hazard the same transform is fine in every reader.
    ok = spark.sql("SELECT 1 AS k, CAST(-9223372036854775000 AS BIGINT) AS i64 UNION ALL SELECT 2, CAST(-5 AS BIGINT)")
    lh.write(ok, "edge.nowrap", partition_by=["truncate(1000, i64)"])
    assert_all_readers_agree(lh, spark, duck, "edge.nowrap", [(-9223372036854775000, 1), (-5, 2)])  # columns by name: i64, k


def test_empty_string_identity_partition_is_refused_before_anything_is_written(lh, spark):
    df = spark.sql("SELECT '' AS region, 1 AS k UNION ALL SELECT 'eu', 2")
    with pytest.raises(InputError) as info:
        lh.write(df, "edge.empty_new", partition_by=["region"])
    assert "'region'" in str(info.value) and "NULL" in str(info.value)
    assert len(str(info.value).splitlines()) == 1
    assert_refused_and_nothing_left(lh, "edge.empty_new", info.value)

    before = lh.write(spark.sql("SELECT 'eu' AS region, 1 AS k"), "edge.empty_old", partition_by=["region"])
    with pytest.raises(InputError, match=r"edge\.empty_old.*'region'"):
        lh.write(df, "edge.empty_old")
    assert lh.load("edge.empty_old").current_snapshot().snapshot_id == before.iceberg_snapshot_id
    assert len(files_under(lh, "edge.empty_old")) == 1


def test_empty_string_partition_value_is_fine_for_iceberg_only_and_null_for_delta(lh, spark, duck):
    lh.write(spark.sql("SELECT '' AS region, 1 AS k UNION ALL SELECT NULL, 2"), "edge.empty_iceberg", partition_by=["region"], table=TableOptions(formats=["iceberg"]))
    table = lh.load("edge.empty_iceberg")
    rows = duck.execute(f"SELECT region, k FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)} ORDER BY k").fetchall()
    assert rows == [("", 1), (None, 2)]
    r = lh.write(spark.sql("SELECT CAST(NULL AS STRING) AS region, 1 AS k"), "edge.null_part", partition_by=["region"])
    assert [a["partitionValues"] for a in adds(r.location)] == [{"region": None}]
    assert_all_readers_agree(lh, spark, duck, "edge.null_part")


def test_years_before_1000_are_zero_padded_and_prune_alike(lh, spark, duck):
    df = spark.sql(
        "SELECT TIMESTAMP'0001-01-02 00:00:00' AS ts, TIMESTAMP_NTZ'0999-12-31 23:59:59.5' AS ntz, DATE'0001-01-01' AS d, 1 AS k "
        "UNION ALL SELECT TIMESTAMP'2024-01-01 00:00:00', TIMESTAMP_NTZ'2024-01-01 00:00:00', DATE'2024-01-01', 2"
    )
    r = lh.write(df, "edge.ancient", partition_by=["ts", "ntz", "d"])
    assert not r.delta_lagging, r.delta_error
    values = sorted((a["partitionValues"] for a in adds(r.location)), key=lambda v: v["d"])
    assert values[0] == {"ts": "0001-01-02T00:00:00.000000Z", "ntz": "0999-12-31 23:59:59.500000", "d": "0001-01-01"}
    assert values[1] == {"ts": "2024-01-01T00:00:00.000000Z", "ntz": "2024-01-01 00:00:00.000000", "d": "2024-01-01"}
    assert_all_readers_agree(lh, spark, duck, "edge.ancient")
    for where in ("d < DATE '1000-01-01'", "ts < TIMESTAMPTZ '1000-01-01 00:00:00+00'", "ntz < TIMESTAMP '1000-01-01'"):
        assert duck.execute(f"SELECT k FROM {duckdb_readers.delta_scan_sql(r.location)} WHERE {where}").fetchall() == [(1,)], where
    dataset = DeltaTable(local(r.location)).to_pyarrow_dataset()
    assert dataset.to_table(filter=pa.compute.field("d") < pa.scalar(dt.date(1000, 1, 1))).column("k").to_pylist() == [1]


def test_stats_of_ancient_timestamps_are_padded(lh, spark, duck):
    r = lh.write(spark.sql("SELECT TIMESTAMP'0010-05-06 07:08:09.123456' AS ts, 1 AS k"), "edge.ancient_stats")
    (add,) = adds(r.location)
    stats = json.loads(add["stats"])
    assert stats["minValues"]["ts"] == "0010-05-06T07:08:09.123Z" and stats["maxValues"]["ts"] == "0010-05-06T07:08:09.124Z"
    assert_all_readers_agree(lh, spark, duck, "edge.ancient_stats")


# ---------------------------------------------------------------- point 5: values and names


def test_timestamps_before_1900_and_1582_in_day_and_hour_partitions(lh, spark, duck):
    df = spark.sql(
        "SELECT TIMESTAMP'1500-03-01 10:00:00' AS ts, DATE'1500-03-01' AS d, 1 AS k UNION ALL "
        "SELECT TIMESTAMP'1899-12-31 23:00:00', DATE'1899-12-31', 2 UNION ALL "
        "SELECT TIMESTAMP'1970-01-01 00:00:00', DATE'1970-01-01', 3"
    )
    r = lh.write(df, "edge.old_hours", partition_by=["hour(ts)", "d"])
    assert not r.delta_lagging, r.delta_error
    assert_all_readers_agree(lh, spark, duck, "edge.old_hours")
    r = lh.write(df, "edge.old_days", partition_by=["day(ts)"])
    assert not r.delta_lagging, r.delta_error
    assert_all_readers_agree(lh, spark, duck, "edge.old_days")
    # Lakehouse.read of our proleptic-Gregorian files, filtered too, and a merge keyed by an ancient timestamp.
    assert [x.k for x in lh.read(spark, "edge.old_days", row_filter="ts < '1582-10-15T00:00:00+00:00'").collect()] == [1]
    cdc = spark.sql("SELECT TIMESTAMP'1500-03-01 10:00:00' AS ts, DATE'1500-03-01' AS d, 10 AS k")
    lh.write(cdc, "edge.old_days", mode="merge", merge=MergeOptions(keys=["ts"]))
    assert sorted(x.k for x in lh.read(spark, "edge.old_days").collect()) == [2, 3, 10]
    assert_all_readers_agree(lh, spark, duck, "edge.old_days")


def test_dotted_column_names_are_refused_up_front(lh, spark):
    with pytest.raises(SchemaError) as info:
        lh.write(spark.sql("SELECT 1 AS `a.b`, 2 AS k"), "edge.dotted")
    assert "'a.b'" in str(info.value)
    assert_refused_and_nothing_left(lh, "edge.dotted", info.value)
    with pytest.raises(SchemaError, match=r"edge\.dotted_nested.*'s\.x\.y'"):
        lh.write(spark.sql("SELECT named_struct('x.y', 1) AS s"), "edge.dotted_nested")


def test_user_columns_named_like_internal_helpers(lh, spark, duck):
    df = spark.sql("SELECT id AS _lakehouse_partition_key, id % 2 AS g, id AS _lakehouse_merge_delete, id AS _lakehouse_merge_file FROM range(4)")
    lh.write(df, "edge.internal_names", partition_by=["g", "_lakehouse_partition_key"])
    cdc = spark.sql("SELECT 1L AS _lakehouse_partition_key, 1L AS g, 100L AS _lakehouse_merge_delete, 100L AS _lakehouse_merge_file, 'U' AS op")
    lh.write(cdc, "edge.internal_names", mode="merge", merge=MergeOptions(keys=["_lakehouse_partition_key"], operation_column="op"))
    rows = assert_all_readers_agree(lh, spark, duck, "edge.internal_names")
    assert (100, 100, 1, 1) in rows  # columns sorted by name: _lakehouse_merge_delete, _merge_file, _partition_key, g
    assert len(rows) == 4


def test_no_data_file_lands_in_a_hidden_folder(lh, spark, duck):
    df = spark.sql("SELECT id % 2 AS _p, id AS _q, TIMESTAMP'2024-01-01 00:00:00' AS _ts, id FROM range(4)")
    lh.write(df, "edge.hidden", partition_by=["_p", "bucket(2, _q)", "day(_ts)"])
    found = files_under(lh, "edge.hidden")
    assert found
    root = os.path.join(local(lh.table_location("edge.hidden")), "data")
    for path in found:
        parts = os.path.relpath(path, root).split(os.sep)
        assert not any(p.startswith(("_", ".")) for p in parts), path
    assert_all_readers_agree(lh, spark, duck, "edge.hidden")
    with pytest.raises(SchemaError, match=r"edge\.dot_first.*'\.q'"):  # `.`-prefixed names contain a dot: refused
        lh.write(spark.sql("SELECT 1 AS `.q`"), "edge.dot_first")
    with pytest.raises(SpecError, match=r"edge\.dot_first: Partition term '\.q'"):
        lh.write(spark.sql("SELECT 1 AS `.q`"), "edge.dot_first", partition_by=[".q"])


@pytest.mark.parametrize("value", ["double('NaN')", "double('Infinity')", "-0.0D", "float('NaN')"])
def test_floating_point_identity_partitions_are_refused(lh, spark, value):
    with pytest.raises(SpecError) as info:
        lh.write(spark.sql(f"SELECT {value} AS f, 1 AS k"), "edge.float_part", partition_by=["f"])
    assert "'f'" in str(info.value)
    assert_refused_and_nothing_left(lh, "edge.float_part", info.value)


def test_floating_point_edge_values_outside_partitions(lh, spark, duck):
    df = spark.sql(
        "SELECT double('NaN') AS x, float('-Infinity') AS y, 1 AS k UNION ALL SELECT -0.0D, float('NaN'), 2 "
        "UNION ALL SELECT double('Infinity'), CAST(0.0 AS FLOAT), 3"
    )
    r = lh.write(df, "edge.floats", partition_by=["bucket(2, k)"])
    assert not r.delta_lagging
    for add in adds(r.location):
        stats = json.loads(add["stats"])
        assert all(c not in stats["minValues"] for c in ("x", "y")) or all(abs(v) != float("inf") for v in stats["minValues"].values() if isinstance(v, float))
    assert lh.verify("edge.floats")["agree"]
    table = lh.load("edge.floats")
    got = duck.execute(f"SELECT k, x, y FROM {duckdb_readers.delta_scan_sql(r.location)} ORDER BY k").fetchall()
    got_ice = duck.execute(f"SELECT k, x, y FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)} ORDER BY k").fetchall()
    assert repr(got) == repr(got_ice)
    assert str(got[1][1]) == "-0.0"


# ---------------------------------------------------------------- point 6: failed Spark writes


def _fail_on(value):
    def check(batches):
        for b in batches:
            if value in b.column(0).to_pylist():
                raise ValueError(f"boom at id {value}")
            yield b

    return check


@pytest.mark.smoke  # a planted executor failure, on a classic and on a Spark Connect session (`make connect`)
def test_a_task_error_is_one_line_naming_the_table_and_leaves_no_files(lh, spark):
    before = lh.write(spark.range(10).select("id", (F.col("id") % 4).alias("g")), "edge.task_error", partition_by=["g"])
    files_before = files_under(lh, "edge.task_error")
    # Eight input partitions written by eight tasks (a tiny target file size makes even these rows worth splitting):
    # the one holding id 77 fails while the others write their files, which the failed write must stop and remove.
    bad = spark.range(0, 80, 1, 8).mapInArrow(_fail_on(77), "id long").select("id", (F.col("id") % 4).alias("g"))
    with pytest.raises(WriteError) as info:
        lh.write(bad, "edge.task_error", table=TableOptions(target_file_size=64))
    message = str(info.value)
    assert len(message.splitlines()) == 1 and len(message) < 400, message
    assert message.startswith("Table edge.task_error:") and "ValueError: boom at id 77" in message
    assert info.value.__cause__ is not None  # the executor's full traceback stays available
    assert files_under(lh, "edge.task_error") == files_before
    assert lh.load("edge.task_error").current_snapshot().snapshot_id == before.iceberg_snapshot_id
    with pytest.raises(WriteError, match=r"^Table edge\.task_error: writing the data files failed on the executors: \S*Exception: .*jvm boom"):
        lh.write(spark.range(0, 80, 1, 8).selectExpr("IF(id = 77, raise_error('jvm boom'), id) AS id", "id % 4 AS g"), "edge.task_error")  # a JVM-side task error
    with pytest.raises(WriteError):
        lh.write(spark.range(0, 80, 1, 8).mapInArrow(_fail_on(3), "id long"), "edge.task_error_new")
    assert "edge.task_error_new" not in lh.table_names() and files_under(lh, "edge.task_error_new") == []


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 2 MiB file system (tmpfs): writes beyond it fail with ENOSPC on the executors."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], check=True)
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)  # lazy: the catalog may still hold its SQLite file


def test_disk_full_is_one_clear_line_and_frees_the_space(spark, tiny_disk, monkeypatch):
    from lakehouse_assets import Lakehouse

    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    lh = Lakehouse(os.path.join(tiny_disk, "wh"))
    lh.write(spark.range(3).select("id", (F.col("id") % 3).alias("g")), "edge.full", partition_by=["g"])
    files_before = files_under(lh, "edge.full")
    # ~16 MB of incompressible strings over 8 partitions and 8 tasks: several tasks write before the disk fills.
    big = spark.range(0, 4000, 1, 8).select("id", (F.col("id") % 8).alias("g"), F.expr("concat_ws('', transform(sequence(1, 64), i -> sha2(concat(id, i), 256)))").alias("s"))
    with pytest.raises(WriteError) as info:
        lh.write(big, "edge.full")
    message = str(info.value)
    assert len(message.splitlines()) == 1 and message.startswith("Table edge.full:") and "No space left on device" in message, message
    assert files_under(lh, "edge.full") == files_before
    usage = os.statvfs(tiny_disk)
    assert usage.f_bfree * usage.f_frsize > 1024 * 1024  # the failed write's files are gone: the space is free again
    assert lh.write(spark.range(3).select("id", (F.col("id") % 3).alias("g")), "edge.full").rows_written == 3

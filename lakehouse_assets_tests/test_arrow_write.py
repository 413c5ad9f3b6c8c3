"""Small frames written without Spark: a pyarrow Table, a pandas or a Polars DataFrame goes through the same file kit,
partition keys, statistics and commits as a Spark write, in the Python process (core/write/arrow_frames.py).

That no Spark job ran is read from the session's own job count (`spark_jobs`); a Dagster run whose assets return
frames is checked from outside: no `java` process appears under `dagster asset materialize`."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import Lakehouse, MergeOptions, SpecError, TableOptions, Window

from .conftest import assert_all_readers_agree, rows_of, spark_jobs

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

PARTITIONINGS = {
    "identity": ["region"],
    "day": ["day(ts)"],
    "bucket": ["bucket(4, id)"],
    "truncate": ["truncate(3, name)"],
}


def _rows(ids, day: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "ts": [dt.datetime(2024, 3, day, i % 24, tzinfo=dt.timezone.utc) for i in ids],
            "name": [f"name-{i % 7}" for i in ids],
            "region": ["eu" if i % 2 else "us" for i in ids],
            "amount": [i * 1.5 for i in ids],
        }
    )


def _expected(*tables: pa.Table) -> list[tuple]:
    return rows_of([r for t in tables for r in t.to_pylist()])


def _no_spark_job(spark, write):
    before = spark_jobs(spark)
    result = write()
    assert spark_jobs(spark) == before, "the frame's write ran a Spark job"
    return result


@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
def test_frames_append_and_overwrite_without_spark(lh, spark, duck, partitioning):
    name = f"frames.{partitioning}"
    first, second, day5 = _rows(range(0, 40), 1), _rows(range(40, 60), 2), _rows(range(60, 70), 5)
    _no_spark_job(spark, lambda: lh.write(first, name, partition_by=PARTITIONINGS[partitioning]))
    assert_all_readers_agree(lh, spark, duck, name, _expected(first))
    _no_spark_job(spark, lambda: lh.write(second.to_pandas(), name))
    _no_spark_job(spark, lambda: lh.write(pl.from_arrow(day5), name))
    assert_all_readers_agree(lh, spark, duck, name, _expected(first, second, day5))

    # A new day's window. Day partitions hold one day's rows: no file is read or replaced, no Spark.
    day6 = _rows(range(80, 85), 6)
    write6 = lambda: lh.write(day6, name, mode="overwrite", window=Window("ts", dt.datetime(2024, 3, 6), dt.datetime(2024, 3, 7)))  # noqa: E731
    result = _no_spark_job(spark, write6) if partitioning == "day" else write6()
    assert result.rows_written == 5
    # 5 March replaced: the Delta change data of its old rows is the mirror's Spark job, and files that straddle the
    # window (other partitionings) are rewritten without its rows by Spark.
    again = _rows(range(100, 105), 5)
    result = lh.write(again, name, mode="overwrite", window=Window("ts", dt.datetime(2024, 3, 5), dt.datetime(2024, 3, 6)))
    assert result.rows_written == 5 and result.files_removed > 0
    assert_all_readers_agree(lh, spark, duck, name, _expected(first, second, day6, again))

    # A whole overwrite; its Delta change data (the replaced rows) is the mirror's Spark job.
    last = _rows(range(200, 210), 9)
    assert lh.write(last, name, mode="overwrite").files_removed > 0
    assert_all_readers_agree(lh, spark, duck, name, _expected(last))


@pytest.mark.parametrize("partitioning", sorted(PARTITIONINGS))
def test_a_frame_and_a_spark_dataframe_make_the_same_table(lh, spark, partitioning):
    """Same schema, same partitions, same per-file statistics: one writer, two ways in."""
    rows = _rows(range(0, 50), 1)
    lh.write(rows, "same.arrow", partition_by=PARTITIONINGS[partitioning])
    lh.write(spark.createDataFrame(rows.to_pandas()), "same.spark", partition_by=PARTITIONINGS[partitioning])
    arrow_table, spark_table = lh.load("same.arrow"), lh.load("same.spark")
    assert arrow_table.schema().as_struct() == spark_table.schema().as_struct()

    def files(table):
        out = []
        for task in table.scan().plan_files():
            f = task.file
            out.append((str(f.partition), f.record_count, sorted(f.lower_bounds.items()), sorted(f.upper_bounds.items()), sorted(f.null_value_counts.items())))
        return sorted(out)

    assert files(arrow_table) == files(spark_table)
    def delta_partitions(table):
        actions = pa.table(DeltaTable(table.location().removeprefix("file://")).get_add_actions(flatten=True)).to_pydict()
        return sorted(zip(*[actions[k] for k in sorted(actions) if k.startswith("partition.")], actions["num_records"]))

    assert delta_partitions(arrow_table) == delta_partitions(spark_table)


def test_a_frame_rolls_files_at_the_target_size(lh, spark, duck):
    n = 400_000
    big = pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array([(i * 7919) % 1_000_003 / 7.0 for i in range(n)])})
    result = _no_spark_job(spark, lambda: lh.write(big, "frames.big", table=TableOptions(target_file_size=1 << 20)))
    assert result.files_added > 1
    sizes = [task.file.file_size_in_bytes for task in lh.load("frames.big").scan().plan_files()]
    assert max(sizes) < 3 << 20, sizes
    assert lh.read_arrow("frames.big").num_rows == n and lh.verify("frames.big")["agree"]


@pytest.mark.smoke  # PySpark's own Arrow mapping differs between Spark lines: CI runs this on both
def test_frame_types_become_the_types_spark_gives_them(lh, spark, duck):
    frame = pa.table(
        {
            "id": pa.array([1, 2], pa.uint32()),  # widened: no unsigned type in Iceberg or Delta
            "label": pa.array(["a", "b"]).dictionary_encode(),
            "text": pa.array(["x", None], pa.large_string()),
            "at": pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns")),  # nanoseconds cut to micro, as Spark does
            "seen": pa.array([1_700_000_000_000_000, None], pa.timestamp("us", "Europe/Paris")),  # an instant, in any zone
        }
    )
    _no_spark_job(spark, lambda: lh.write(frame, "frames.types"))
    schema = lh.load("frames.types").schema()
    # A zone-less timestamp is a wall-clock time (Iceberg `timestamp`, Spark TimestampNTZ), one with a zone an instant,
    # on every Spark line: the mapping is the project's, not PySpark's.
    assert [(f.name, str(f.field_type)) for f in schema.fields] == [
        ("id", "long"), ("label", "string"), ("text", "string"), ("at", "timestamp"), ("seen", "timestamptz")
    ]
    seen = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    expected = [
        {"at": dt.datetime(2023, 11, 14, 22, 13, 20, 123456), "id": 1, "label": "a", "seen": seen, "text": "x"},
        {"at": None, "id": 2, "label": "b", "seen": None, "text": None},
    ]
    assert_all_readers_agree(lh, spark, duck, "frames.types", rows_of(expected))
    # The same types as Spark's own DataFrame of such values, on this line: both paths make one table.
    row = spark.sql("SELECT TIMESTAMP_NTZ '2024-01-01 00:00:00' AS at, TIMESTAMP '2024-01-01 00:00:00' AS seen")
    lh.write(row, "frames.types_spark")
    assert [str(f.field_type) for f in lh.load("frames.types_spark").schema().fields] == ["timestamp", "timestamptz"]
    with pytest.raises(SpecError, match=r"Table frames.types: column 'id' of the frame has Arrow type uint64"):
        lh.write(pa.table({"id": pa.array([1], pa.uint64())}), "frames.types")


@pytest.mark.smoke
def test_a_timestamptz_column_takes_a_frames_zone_less_values_as_utc_without_a_type_change(lh, spark, duck):
    """A table whose column became `timestamptz` from a zone-less frame (as Spark 3.5's mapping made it) keeps that type
    when the same frame is written again, appended, merged or checked by a contract: the values are read as UTC."""
    def naive(ids, hour):
        return pa.table({"id": pa.array(ids, pa.int64()), "at": pa.array([dt.datetime(2024, 5, 1, hour)] * len(ids), pa.timestamp("us"))})

    identifier = "frames.instants"
    lh.write(pa.table({"id": pa.array([0], pa.int64()), "at": pa.array([dt.datetime(2024, 5, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", "UTC"))}), identifier)
    _no_spark_job(spark, lambda: lh.write(naive([1], 2), identifier))
    lh.write(naive([1, 2], 3), identifier, mode="merge", merge=MergeOptions(keys=["id"]))  # converted for Spark's matching
    lh.write(naive([3], 4), identifier, table=TableOptions(contract={"rules": {"known": "id IS NOT NULL"}}))  # and for the rules
    assert [str(f.field_type) for f in lh.load(identifier).schema().fields] == ["long", "timestamptz"]
    utc = dt.timezone.utc
    expected = [{"id": i, "at": dt.datetime(2024, 5, 1, h, tzinfo=utc)} for i, h in ((0, 1), (1, 3), (2, 3), (3, 4))]
    assert_all_readers_agree(lh, spark, duck, identifier, rows_of(expected))


def test_a_frame_under_a_contract_or_merged_is_checked_and_merged_by_spark(lh, spark, duck):
    """The contract's rules are Spark SQL and a merge matches rows in Spark: the frame is converted for them."""
    contract = {"rules": {"positive": "amount > 0"}, "on_violation": "drop"}
    rows = pa.table({"id": [1, 2, 3], "amount": [5.0, -1.0, 2.0]})
    result = lh.write(rows, "frames.checked", table=TableOptions(contract=contract))
    assert result.rows_written == 2 and result.contract["checks"]["positive"] == 1
    lh.write(pd.DataFrame({"id": [3, 4], "amount": [9.0, 1.0]}), "frames.checked", mode="merge", merge=MergeOptions(keys=["id"]))
    assert_all_readers_agree(lh, spark, duck, "frames.checked", rows_of([{"id": 1, "amount": 5.0}, {"id": 3, "amount": 9.0}, {"id": 4, "amount": 1.0}]))


DEFS = """
import datetime as dt
import sys

import polars as pl
import pyarrow as pa
from dagster import DailyPartitionsDefinition, Definitions, asset

from lakehouse_assets.dagster.checks import build_formats_agree_checks
from lakehouse_assets.dagster.io_manager import LakehouseIOManager
from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource


@asset(key_prefix=["small"], metadata={"partition_by": ["bucket(4, id)"]})
def rates():
    return pa.table({"id": list(range(10_000)), "rate": [i / 3 for i in range(10_000)]})


@asset(key_prefix=["small"], partitions_def=DailyPartitionsDefinition("2024-03-01"), metadata={"partition_expr": "day", "partition_by": ["day"]})
def daily(context):
    day = dt.date.fromisoformat(context.partition_key)
    return pl.DataFrame({"day": [day] * 3, "n": [1, 2, 3]})


lakehouse = LakehouseResource(warehouse=WAREHOUSE)
pyspark = spark_resource()
defs = Definitions(
    assets=[rates, daily],
    asset_checks=build_formats_agree_checks([rates.key, daily.key]),
    resources={"lakehouse": lakehouse, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark)},
)
"""


def _java_descendants(root: int) -> set[str]:
    """The `java` processes among `root`'s descendants, from /proc (each process's parent in its stat line)."""
    parents, names = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)], names[int(entry)] = int(rest[1]), name
    found = set()
    for pid, name in names.items():
        p = pid
        while p in parents and p != root and p > 1:
            p = parents[p]
        if p == root and name == "java":
            found.add(f"{pid} {name}")
    return found


def test_a_dagster_run_of_frame_assets_starts_no_jvm(tmp_path, warehouse):
    defs = tmp_path / "frame_defs.py"
    defs.write_text(DEFS.replace("WAREHOUSE", repr(str(warehouse))))
    env = {k: v for k, v in os.environ.items() if k != "LAKEHOUSE_CATALOG"} | {"DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dagster = str(Path(sys.executable).parent / "dagster")
    seen: set[str] = set()
    for select, partition in (("small/rates", None), ("small/daily", "2024-03-02")):
        args = [dagster, "asset", "materialize", "-f", str(defs), "--select", select, *(["--partition", partition] if partition else [])]
        proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while proc.poll() is None:
            seen |= _java_descendants(proc.pid)
            time.sleep(0.05)
        out = proc.stdout.read()
        assert proc.returncode == 0, out[-3000:]
        assert "RUN_SUCCESS" in out and "ASSET_CHECK_EVALUATION" in out, out[-3000:]
    assert not seen, f"a JVM started: {seen}"
    lh = Lakehouse(str(warehouse))
    assert lh.read_arrow("small.rates").num_rows == 10_000 and lh.verify("small.rates")["agree"]
    assert sorted(lh.read_arrow("small.daily").column("n").to_pylist()) == [1, 2, 3] and lh.verify("small.daily")["agree"]

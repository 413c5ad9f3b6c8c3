"""Each write mode, read back by DuckDB (iceberg_scan, delta_scan), delta-rs, pyiceberg and our Spark reader."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from lakehouse_assets import TableOptions, Window

from .conftest import assert_all_readers_agree, rows_of


def events(spark, start: int, n: int, day0=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)):
    """n events spread over ~3 days; deterministic."""
    return spark.range(start, start + n, numPartitions=3).select(
        F.col("id").alias("event_id"),
        (F.col("id") % 37).alias("user_id"),
        (F.lit(day0) + F.make_interval(mins=(F.col("id") * 7 % (3 * 24 * 60)).cast("int"))).alias("event_time"),
        F.element_at(F.array(F.lit("view"), F.lit("click"), F.lit("buy")), (F.col("id") % 3 + 1).cast("int")).alias("kind"),
        (F.col("id") % 100 / 4).cast("decimal(10,2)").alias("amount"),
    )


@pytest.mark.smoke
def test_append_partitioned_by_day_and_bucket(lh, spark, duck):
    r1 = lh.write(events(spark, 0, 500), "t.events", partition_by=["day(event_time)", "bucket(16, user_id)"])
    r2 = lh.write(events(spark, 500, 300), "t.events")
    assert (r1.rows_written, r2.rows_written) == (500, 300)
    assert r2.delta_version == r1.delta_version + 1 and r2.iceberg_snapshot_id != r1.iceberg_snapshot_id
    assert r1.location.endswith("/t/events") and "/_iceberg/" in r1.iceberg_metadata_location
    expected = rows_of(events(spark, 0, 800).collect(), ["amount", "event_id", "event_time", "kind", "user_id"])
    assert_all_readers_agree(lh, spark, duck, "t.events", expected)
    # Each file holds exactly one Iceberg partition.
    table = lh.load("t.events")
    for task in table.scan().plan_files():
        assert task.file.partition[1] in range(16)
    # Earlier versions stay readable in both formats.
    first = rows_of(events(spark, 0, 500).collect(), ["amount", "event_id", "event_time", "kind", "user_id"])
    assert_all_readers_agree(lh, spark, duck, "t.events", first, snapshot_id=r1.iceberg_snapshot_id, delta_version=r1.delta_version)


def test_overwrite_whole_table(lh, spark, duck):
    lh.write(events(spark, 0, 200), "t.ow", partition_by=["kind"])
    r = lh.write(events(spark, 1000, 50), "t.ow", mode="overwrite")
    assert r.files_removed > 0 and r.rows_removed == 200
    expected = rows_of(events(spark, 1000, 50).collect(), ["amount", "event_id", "event_time", "kind", "user_id"])
    assert_all_readers_agree(lh, spark, duck, "t.ow", expected)
    # Identity partitions are Delta partition columns.
    from deltalake import DeltaTable

    assert DeltaTable(r.location[len("file://"):]).metadata().partition_columns == ["kind"]


@pytest.mark.smoke
def test_overwrite_one_window_leaves_other_days_alone(lh, spark, duck):
    lh.write(events(spark, 0, 600), "t.win", partition_by=["day(event_time)"])
    day2 = Window("event_time", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 3, tzinfo=dt.timezone.utc))
    replacement = events(spark, 10_000, 400).filter("event_time >= '2024-01-02' AND event_time < '2024-01-03'")
    r = lh.write(replacement, "t.win", mode="overwrite", window=day2)
    before = rows_of(events(spark, 0, 600).collect(), ["amount", "event_id", "event_time", "kind", "user_id"])
    kept = [row for row in before if not row[2].startswith("2024-01-02")]
    new = rows_of(replacement.collect(), ["amount", "event_id", "event_time", "kind", "user_id"])
    assert r.rows_written == len(new) and r.rows_removed == len(before) - len(kept)
    assert_all_readers_agree(lh, spark, duck, "t.win", kept + new)
    # Re-running the same window is idempotent.
    lh.write(replacement, "t.win", mode="overwrite", window=day2)
    assert_all_readers_agree(lh, spark, duck, "t.win", kept + new)


def test_window_overwrite_rewrites_files_that_straddle_the_window(lh, spark, duck):
    """Unpartitioned table: files hold several days, so the window's rows are cut out of them in Spark."""
    lh.write(events(spark, 0, 300), "t.straddle")
    window = Window("event_time", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 3, tzinfo=dt.timezone.utc))
    r = lh.write(events(spark, 0, 0), "t.straddle", mode="overwrite", window=window)
    assert r.files_removed > 0 and r.files_added > 0  # rewritten remainder files
    before = rows_of(events(spark, 0, 300).collect(), ["amount", "event_id", "event_time", "kind", "user_id"])
    assert_all_readers_agree(lh, spark, duck, "t.straddle", [row for row in before if not row[2].startswith("2024-01-02")])


def test_rows_outside_the_window_are_refused(lh, spark):
    lh.write(events(spark, 0, 100), "t.outside", partition_by=["day(event_time)"])
    before = lh.load("t.outside").current_snapshot().snapshot_id
    window = Window("event_time", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 3, tzinfo=dt.timezone.utc))
    from lakehouse_assets import InputError

    with pytest.raises(InputError, match=r"Table t\.outside: the data for window .* has rows outside it"):
        lh.write(events(spark, 0, 100), "t.outside", mode="overwrite", window=window)
    assert lh.load("t.outside").current_snapshot().snapshot_id == before
    assert lh.verify("t.outside")["agree"]


@pytest.mark.smoke
def test_all_types_and_nested_columns(lh, spark, duck):
    df = spark.sql(
        """
        SELECT id,
               CAST(id AS INT) AS i, CAST(id AS SMALLINT) AS s, CAST(id * 1.5 AS FLOAT) AS f, id / 3.0D AS d,
               CAST(id / 7 AS DECIMAL(12, 4)) AS dec, CONCAT('name-', id) AS str, CAST(CONCAT('b', id) AS BINARY) AS bin,
               id % 2 = 0 AS flag, DATE_ADD(DATE'2024-03-01', CAST(id AS INT)) AS day,
               TIMESTAMP'2024-03-01 12:00:00' + make_interval(0, 0, 0, 0, 0, CAST(id AS INT), 0) AS ts,
               CAST(TIMESTAMP_NTZ'2024-03-01 08:00:00' AS TIMESTAMP_NTZ) AS ts_ntz,
               named_struct('x', id, 'y', CONCAT('y', id)) AS st,
               array(id, id + 1) AS arr,
               map('k', id) AS m
        FROM range(20)
        """
    )
    lh.write(df, "t.types", partition_by=["month(ts)", "truncate(4, str)"])
    results = assert_all_readers_agree(lh, spark, duck, "t.types")
    assert len(results) == 20


def test_pyarrow_and_pandas_inputs(lh, spark, duck):
    import pandas as pd
    import pyarrow as pa

    lh.write(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}), "t.small", spark=spark)
    lh.write(pd.DataFrame({"k": [4], "v": ["d"]}), "t.small", spark=spark)
    assert_all_readers_agree(lh, spark, duck, "t.small", [(1, "a"), (2, "b"), (3, "c"), (4, "d")])


def test_target_file_size_rolls_files(lh, spark):
    df = spark.range(0, 200_000, numPartitions=1).select("id", F.sha2(F.col("id").cast("string"), 256).alias("h"))
    r = lh.write(df, "t.rolled", table=TableOptions(target_file_size=2 * 1024 * 1024))
    assert r.files_added >= 3
    assert all(f.file_size_in_bytes < 6 * 1024 * 1024 for f in lh.load("t.rolled").scan().plan_files() for f in [f.file])
    assert lh.read(spark, "t.rolled").count() == 200_000


@pytest.mark.smoke
def test_read_prunes_files_by_partition_and_min_max(lh, spark):
    lh.write(events(spark, 0, 900), "t.prune", partition_by=["day(event_time)"])
    table = lh.load("t.prune")
    all_files = list(table.scan().plan_files())
    one_day = list(table.scan(row_filter="event_time >= '2024-01-02T00:00:00+00:00' AND event_time < '2024-01-03T00:00:00+00:00'").plan_files())
    assert 0 < len(one_day) < len(all_files)
    df = lh.read(spark, "t.prune", row_filter="event_time >= '2024-01-02T00:00:00+00:00' AND event_time < '2024-01-03T00:00:00+00:00'")
    assert df.count() == events(spark, 0, 900).filter("event_time >= '2024-01-02' AND event_time < '2024-01-03'").count()


def test_history_records_both_versions_and_writer(lh, spark):
    lh.write(events(spark, 0, 10), "t.hist", writer={"dagster_run_id": "run-1"})
    lh.write(events(spark, 10, 5), "t.hist", mode="overwrite", writer={"dagster_run_id": "run-2"})
    h = lh.history("t.hist")
    assert [x["operation"] for x in h] == ["overwrite", "append"]
    assert [x["delta_version"] for x in h] == [2, 1]
    assert h[0]["writer"] == {"dagster_run_id": "run-2"} and h[0]["rows_added"] == 5 and h[0]["rows_removed"] == 10
    # The Delta log records the mapping too.
    from deltalake import DeltaTable

    commits = DeltaTable(lh.load("t.hist").location()[len("file://"):]).history()
    mapping = {c["version"]: int(c["lakehouse.iceberg.snapshot-id"]) for c in commits if "lakehouse.iceberg.snapshot-id" in c}
    assert mapping == {x["delta_version"]: x["iceberg_snapshot_id"] for x in h}
    assert all(x["iceberg_snapshot_id"] for x in h)


def test_delta_file_stats_bound_each_file_for_skipping(lh, spark):
    """Non-identity transforms have no Delta partition column: Delta readers skip by these stats instead."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    r = lh.write(events(spark, 0, 400), "t.stats", partition_by=["day(event_time)"])
    actions = pa.table(DeltaTable(r.location[len("file://"):]).get_add_actions(flatten=True)).to_pylist()
    assert actions
    for a in actions:
        rows = pq.read_table(r.location[len("file://"):] + "/" + a["path"]).to_pylist()
        times = [x["event_time"] for x in rows]
        assert a["num_records"] == len(rows)
        assert a["min.event_time"] <= min(times) and a["max.event_time"] >= max(times)
        assert a["min.event_id"] == min(x["event_id"] for x in rows) and a["max.event_id"] == max(x["event_id"] for x in rows)
        assert a["null_count.event_time"] == 0
        # one Iceberg partition (one day) per file, so the Delta bounds fall in one day too
        assert a["min.event_time"].date() == a["max.event_time"].date() or a["max.event_time"].time() == dt.time(0)

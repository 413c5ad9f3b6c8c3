"""Driver-side work that must not grow with a table's size or history (timings live in bench/, not here)."""

from __future__ import annotations

from pyspark.sql import functions as F

from lakehouse_assets.core import history
from lakehouse_assets.core.reader import LISTING_THRESHOLD_KEY


def _rows(spark, lo, hi):
    return spark.range(lo, hi, numPartitions=1).select(F.col("id"), (F.col("id") % 40).cast("int").alias("part"))


def test_reading_many_files_runs_no_listing_job(lh, spark):
    # 40 files: above Spark's parallel-listing threshold (32), which would run a Spark job per read to stat them.
    lh.write(_rows(spark, 0, 400), "o.many", partition_by=["part"])
    table = lh.load("o.many")
    assert len(list(table.scan().plan_files())) == 40
    before = spark.conf.get(LISTING_THRESHOLD_KEY)
    sc = spark.sparkContext
    sc.setJobGroup("read-many-files", "Lakehouse.read of 40 files")
    try:
        df = lh.read(spark, "o.many")
        assert list(sc.statusTracker().getJobIdsForGroup("read-many-files")) == []  # building the DataFrame ran no job
        assert sorted(r.id for r in df.select("id").collect()) == list(range(400))
        pruned = lh.read(spark, "o.many", row_filter="part = 7")
        assert sorted(r.id for r in pruned.select("id").collect()) == list(range(7, 400, 40))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert spark.conf.get(LISTING_THRESHOLD_KEY) == before  # the session's setting is restored


def test_history_walks_follow_parents_in_order(lh, spark):
    for i in range(6):
        lh.write(_rows(spark, i * 10, i * 10 + 10), "o.hist", write_id=f"w{i}")
    table = lh.load("o.hist")
    chain = list(history.ancestors(table))
    assert [s.snapshot_id for s in chain] == [s.snapshot_id for s in reversed(table.metadata.snapshots)]
    assert history.find_snapshot_by_write_id(table, "w2").snapshot_id == chain[3].snapshot_id
    after = history.snapshots_after(table, table.current_snapshot(), chain[2].sequence_number)
    assert [s.snapshot_id for s in after] == [chain[1].snapshot_id, chain[0].snapshot_id]

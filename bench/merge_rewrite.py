"""Merge cost vs rewriting the table: a CDC batch touching a few partitions of a partitioned table.

Prints, measured in this run: live / candidate / rewritten files of the merge, and the time of the
merge relative to a full overwrite of the same table with the same final rows.

    .venv/bin/python bench/merge_rewrite.py [rows]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from lakehouse_assets import MergeOptions

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main() -> None:
    from pyspark.sql import functions as F

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.spark.session import spark_session

    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    spark = spark_session({"spark.sql.shuffle.partitions": "8"})

    def table(lo, hi, version):
        return spark.range(lo, hi, numPartitions=4).select(
            F.col("id"),
            (F.col("id") % 32).cast("int").alias("region"),  # 32 identity partitions
            F.sha2(F.col("id").cast("string"), 256).alias("payload"),
            F.lit(version).alias("version"),
        )

    with tempfile.TemporaryDirectory() as tmp:
        lh = Lakehouse(os.path.join(tmp, "wh"))
        lh.write(table(0, rows, 0), "b.merge", partition_by=["region"])
        lh.write(table(0, rows, 0), "b.full", partition_by=["region"])
        # CDC batch: 0.1% of keys, all in regions 0-1, updated or deleted, plus new keys there.
        batch = (
            table(0, rows, 1)
            .filter("region IN (0, 1) AND id % 500 < 16")
            .withColumn("op", F.when(F.col("id") % 7 == 0, "D").otherwise("U"))
            .unionByName(table(rows, rows + 2_000, 1).filter("region IN (0, 1)").withColumn("op", F.lit("I")))
        )
        n_batch = batch.cache().count()  # the batch's own cost is not the merge's
        t0 = time.perf_counter()
        r = lh.write(batch, "b.merge", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
        merge_s = time.perf_counter() - t0
        summary = lh.load("b.merge").current_snapshot().summary
        final = lh.read(spark, "b.merge")
        final.cache().count()
        t0 = time.perf_counter()
        lh.write(final, "b.full", mode="overwrite")
        full_s = time.perf_counter() - t0
        assert lh.read(spark, "b.full").count() == final.count()
        print(f"rows {rows}, batch {n_batch} rows")
        print(
            f"merge: live files {summary['lakehouse.merge.live-files']}, candidates {summary['lakehouse.merge.candidate-files']}, "
            f"rewritten {summary['lakehouse.merge.rewritten-files']}, rows rewritten {r.rows_written} of {final.count()}"
        )
        print(f"merge {merge_s:.2f} s, full overwrite {full_s:.2f} s, ratio merge/overwrite {merge_s / full_s:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()

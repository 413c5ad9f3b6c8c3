"""Runs in its own process against a Spark standalone master (the test session already owns a local
SparkSession): append, merge, read, verify and compaction with executors in the worker's JVM.

    python -m lakehouse_assets_tests.cluster_job spark://127.0.0.1:PORT <warehouse> <result.json>

Writes a JSON of what it observed; the test asserts on it.
"""

from __future__ import annotations

import json
import os
import sys

from lakehouse_assets import MergeOptions


def main(master: str, warehouse: str, out: str) -> None:
    from pyspark.sql import functions as F

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.read import duckdb_readers
    from lakehouse_assets.core.spark.session import spark_session

    spark = spark_session(
        {
            "spark.master": master,
            "spark.app.name": "lakehouse-cluster-test",
            "spark.driver.host": "127.0.0.1",
            "spark.executor.memory": "1g",
            "spark.cores.max": "2",
            "spark.sql.shuffle.partitions": "4",
            "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",  # short JVMs on tiny data, as conftest.py's drivers
        }
    )
    sc = spark.sparkContext
    result: dict = {"master": sc.master}
    try:
        # Executors other than the driver: the work runs in the worker's JVM, with its own Python workers.
        result["tasks_in_executor_jvm"] = spark.range(0, 8, numPartitions=4).rdd.mapPartitions(lambda _: [_under_executor_jvm()]).collect()

        lh = Lakehouse(warehouse)
        rows = 60_000

        def events(lo, hi, version):
            return spark.range(lo, hi, numPartitions=4).select(
                F.col("id"),
                (F.col("id") % 16).cast("int").alias("region"),
                (F.lit("2024-01-01").cast("timestamp") + F.make_interval(secs=(F.col("id") * 37 % (7 * 86400)).cast("int"))).alias("event_time"),
                F.sha2(F.col("id").cast("string"), 256).alias("payload"),
                F.lit(version).alias("version"),
            )

        first = lh.write(events(0, rows, 0), "c.events", partition_by=["day(event_time)", "bucket(8, id)"])
        second = lh.write(events(rows, rows + 10_000, 0), "c.events")
        batch = (
            events(0, rows, 1).filter("id % 100 = 0").withColumn("op", F.when(F.col("id") % 300 == 0, "D").otherwise("U"))
            .unionByName(events(rows + 10_000, rows + 11_000, 1).withColumn("op", F.lit("I")))
        )
        merged = lh.write(batch, "c.events", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
        deleted = len(range(0, rows, 300))
        result["expected_rows"] = rows + 10_000 + 1_000 - deleted
        result["expected_version_1"] = len(range(0, rows, 100)) - deleted + 1_000
        read = lh.read(spark, "c.events")
        result["spark_rows"] = read.count()
        result["spark_version_1"] = read.filter("version = 1").count()
        result["spark_pruned_rows"] = lh.read(spark, "c.events", row_filter="id < 1000").count()
        duck = duckdb_readers.connect()
        table = lh.load("c.events")
        result["duckdb_iceberg_rows"] = duck.execute(f"SELECT count(*) FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)}").fetchone()[0]
        result["duckdb_delta_rows"] = duck.execute(f"SELECT count(*) FROM {duckdb_readers.delta_scan_sql(table.location())}").fetchone()[0]
        result["verify"] = lh.verify("c.events")["agree"]
        result["writes"] = [r.to_dict() for r in (first, second, merged)]
        compacted = lh.maintain("c.events", "compaction", spark=spark)
        result["compaction_committed"] = bool(compacted.get("committed"))
        result["rows_after_compaction"] = lh.read(spark, "c.events").count()
        result["verify_after_compaction"] = lh.verify("c.events")["agree"]
        # Read after the work: an executor registers asynchronously, so right after startup only the driver is listed.
        result["executor_hosts"] = [f"{e.host()}:{e.port()}" for e in sc._jsc.sc().statusTracker().getExecutorInfos()]
    finally:
        spark.stop()
        with open(out, "w") as f:
            json.dump(result, f, default=str)


def _under_executor_jvm() -> bool:
    """In a task: is this Python worker a descendant of a standalone executor JVM (not the driver)?"""
    pid = os.getppid()
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return True
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""Benchmark: does maintenance bring an old, busy table back to a young table's speed?

A table takes N small commits (default 500). We measure, on the same table, in the same run:

  * commit latency: the Iceberg + Delta commit time of a small append (median of a few probes; the
    Spark write of the files is excluded: it does not depend on the table's age);
  * read planning: load the table and list the files a full read opens, in each format
    (pyiceberg `scan().plan_files()`, delta-rs `DeltaTable(...)` + `get_add_actions()`), median of repeats;

when the table is young (a few commits), after N commits, and after `full_maintenance` with a
retention of 0 days and 1 snapshot kept (the 7-day default would keep everything this young). Prints
the ratios to the young table.

    .venv/bin/python bench/maintenance.py [--commits 500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

PROBES = 5
REPEATS = 7


def spark_session():
    from lakehouse_assets.core.spark.session import spark_session as project_spark_session

    return project_spark_session({"spark.sql.shuffle.partitions": "2", "spark.app.name": "bench-maintenance"})


def small_batch(spark, start: int, n: int = 20):
    from pyspark.sql import functions as F

    # One Spark partition: one small file per commit, like a micro-batch.
    return spark.range(start, start + n, numPartitions=1).select("id", (F.col("id") % 7).alias("k"), F.rand(seed=start).alias("v"))


def commit_latency(lh, spark, identifier: str, start: int) -> float:
    times = []
    for i in range(PROBES):
        r = lh.write(small_batch(spark, start + i * 100), identifier)
        times.append(r.iceberg_commit_seconds + r.delta_commit_seconds)
    return statistics.median(times)


def planning_time(lh, identifier: str) -> tuple[float, float, int, int]:
    from deltalake import DeltaTable

    ice, delta = [], []
    n_ice = n_delta = 0
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        table = lh.load(identifier)
        n_ice = len(list(table.scan().plan_files()))
        t1 = time.perf_counter()
        dt = DeltaTable(table.location())
        n_delta = dt.get_add_actions(flatten=True).num_rows
        t2 = time.perf_counter()
        ice.append(t1 - t0)
        delta.append(t2 - t1)
    return statistics.median(ice), statistics.median(delta), n_ice, n_delta


def measure(label, lh, spark, identifier, start) -> dict:
    latency = commit_latency(lh, spark, identifier, start)
    ice, delta, n_ice, n_delta = planning_time(lh, identifier)
    from lakehouse_assets.core.maintenance import table_health

    h = table_health(lh.context, identifier)
    row = dict(label=label, commit=latency, plan_iceberg=ice, plan_delta=delta, files=n_ice, delta_files=n_delta, snapshots=h["snapshot_count"], log=h["delta_log_files"])
    print(
        f"{label:<22} commit {latency * 1000:7.1f} ms   plan iceberg {ice * 1000:7.1f} ms ({n_ice} files)   "
        f"plan delta {delta * 1000:7.1f} ms ({n_delta} files)   snapshots {h['snapshot_count']}   delta log files {h['delta_log_files']}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=500)
    args = parser.parse_args()

    from lakehouse_assets import Lakehouse

    spark = spark_session()
    with tempfile.TemporaryDirectory() as tmp:
        lh = Lakehouse(os.path.join(tmp, "warehouse"))
        ident = "bench.busy"
        for i in range(3):
            lh.write(small_batch(spark, i * 1000), ident)
        planning_time(lh, ident)  # warm up: first loads pay for imports and caches
        young = measure("young (3 commits)", lh, spark, ident, 10_000_000)
        started = time.monotonic()
        for i in range(args.commits):
            lh.write(small_batch(spark, 100_000 + i * 1000), ident)
            if (i + 1) % 100 == 0:
                print(f"  {i + 1} commits, {time.monotonic() - started:.0f} s", flush=True)
        old = measure(f"after {args.commits} commits", lh, spark, ident, 20_000_000)
        rows_before = lh.read(spark, ident).count()
        t0 = time.monotonic()
        report = lh.maintain(ident, "full_maintenance", spark=spark, snapshot_retention_days=0, min_snapshots_to_keep=1, orphan_grace_hours=0)
        maintenance_seconds = time.monotonic() - t0
        steps = {s["operation"]: s for s in report["steps"]}
        print(
            f"full_maintenance: {maintenance_seconds:.1f} s; compaction rewrote {steps['compaction']['files_rewritten']} files into "
            f"{steps['compaction']['files_added']}; {steps['snapshot_expiry']['snapshots_expired']} snapshots expired; "
            f"{steps['snapshot_expiry']['files_removed']} data files and {steps['metadata_cleanup']['files_removed']} metadata/log files removed",
            flush=True,
        )
        assert lh.read(spark, ident).count() == rows_before and lh.verify(ident)["agree"]
        after = measure("after maintenance", lh, spark, ident, 30_000_000)
        print("\nratios to the young table (1.0 = as fast as young):")
        for key, name in (("commit", "commit latency"), ("plan_iceberg", "Iceberg read planning"), ("plan_delta", "Delta read planning")):
            print(f"  {name:<24} old {old[key] / young[key]:6.2f}x   after maintenance {after[key] / young[key]:6.2f}x")


if __name__ == "__main__":
    main()

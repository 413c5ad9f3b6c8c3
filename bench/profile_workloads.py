"""Where the time goes: each of our workloads once, with the driver under pyinstrument and Spark's stage times.

For every workload it prints the wall time, the Spark jobs/stages it ran (from Spark's REST API: stage
duration, executor run time, tasks, input and shuffle bytes) and the driver's own time per call path
(pyinstrument, Python driver only; executors' Python workers can be sampled with py-spy:
`py-spy top --pid <worker pid>`).

    .venv/bin/python bench/profile_workloads.py --rows 500000 [--only write_day,merge_cdc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import time
import urllib.request

from lakehouse_assets import MergeOptions

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stages_since(spark, ui: str, after_stage: int) -> list[dict]:
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages?status=complete") as r:
        stages = json.load(r)
    return sorted((s for s in stages if s["stageId"] > after_stage), key=lambda s: s["stageId"])


def jobs_since(spark, ui: str, after_job: int) -> list[dict]:
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/jobs") as r:
        jobs = json.load(r)
    return sorted((j for j in jobs if j["jobId"] > after_job), key=lambda j: j["jobId"])


def main() -> None:
    from pyinstrument import Profiler
    from pyspark.sql import functions as F

    from bench.vs_java_iceberg import Bench

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--only", default="write_day,write_unpartitioned,merge_cdc,compaction,read_pruned")
    p.add_argument("--tmp", default=None)
    p.add_argument("--repeat", type=int, default=2, help="run each workload this many times, profile the last (the first pays JIT and cache warm-up)")
    args = p.parse_args()
    port = free_port()
    os.environ["LAKEHOUSE_SPARK_CONF"] = json.dumps({"spark.ui.enabled": "true", "spark.ui.port": str(port)})
    ns = argparse.Namespace(rows=args.rows, reps=1, only="", commits=0, compaction_appends=20, driver_memory="4g", shuffle_partitions=8, tmp=args.tmp, keep=False, plain_session=False)
    b = Bench(ns)
    spark, lh, df = b.spark, b.lh, b.df
    ui = f"http://127.0.0.1:{port}"
    lh.write(df.limit(10_000), "p.warm", partition_by=["day(event_time)"])  # warm-up

    batches = {}

    def cdc_batch():
        """The bench's batch, cached and counted before the merge is timed (as `vs_java_iceberg.py` does)."""
        if "cdc" not in batches:
            changed = df.filter(((F.col("id") % 2048) < 2) & F.col("region").isin(0, 1))
            batches["cdc"] = changed.withColumn("op", F.when(F.col("id") % 7 == 0, "D").otherwise("U")).withColumn("amount", F.col("amount") + 1).cache()
            batches["cdc"].count()
        return batches["cdc"]

    tables = {}

    def java_merge_table():
        tables["java"] = b.name("jmerge")
        return tables["java"]

    setups = {
        "write_day": (None, lambda: lh.write(df, "p.day", partition_by=["day(event_time)"])),
        "write_day_bucket": (None, lambda: lh.write(df, "p.daybucket", partition_by=["day(event_time)", "bucket(16, user_id)"])),
        "write_unpartitioned": (None, lambda: lh.write(df, "p.flat")),
        "merge_cdc": (
            lambda: (lh.write(df, "p.merge", mode="overwrite", partition_by=["region"]), cdc_batch()),
            lambda: lh.write(batches["cdc"], "p.merge", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op")),
        ),
        # The reference for comparison: Java Iceberg's copy-on-write MERGE INTO on the same batch (its stages only).
        "java_merge_cdc": (
            lambda: (b.java_create(java_merge_table(), df, [F.col("region")], COW), cdc_batch().createOrReplaceTempView("cdc_batch")),
            lambda: spark.sql(java_merge_sql(df.columns, tables["java"])).collect(),
        ),
        "compaction": (
            lambda: [lh.write(df.filter(F.col("id") % 20 == i), "p.compact", mode="append" if i else "overwrite", partition_by=["day(event_time)"]) for i in range(20)],
            lambda: lh.maintain("p.compact", "compaction", spark=spark),
        ),
        "read_pruned": (
            lambda: lh.write(df, "p.read", mode="overwrite", partition_by=["day(event_time)"]),
            lambda: lh.read(spark, "p.read", row_filter="event_time >= '2024-01-05T00:00:00+00:00' AND event_time < '2024-01-06T00:00:00+00:00'").groupBy("event_type").count().collect(),
        ),
    }
    try:
        for name in args.only.split(","):
            setup, run = setups[name]
            for _ in range(args.repeat - 1):  # warm-up runs, not profiled
                if setup:
                    setup()
                run()
            if setup:
                setup()
            last = max([s["stageId"] for s in stages_since(spark, ui, -1)] or [-1])
            last_job = max([j["jobId"] for j in jobs_since(spark, ui, -1)] or [-1])
            epoch0 = time.time()
            profiler = Profiler(interval=0.005)
            t0 = time.perf_counter()
            profiler.start()
            run()
            profiler.stop()
            wall = time.perf_counter() - t0
            time.sleep(1)  # let the listener publish the last stage
            stages = stages_since(spark, ui, last)
            print(f"\n################ {name}: {wall:.2f} s wall, {len(stages)} Spark stages")
            spark_s = 0.0
            for s in stages:
                dur = (_ms(s.get("completionTime")) - _ms(s.get("submissionTime"))) / 1000
                spark_s += dur
                print(
                    f"  stage {s['stageId']:>4} {dur:6.2f} s  run {s['executorRunTime'] / 1000:6.2f} s  tasks {s['numTasks']:>3}  "
                    f"in {s['inputBytes'] / 1e6:7.1f} MB  shuffle w {s['shuffleWriteBytes'] / 1e6:7.1f} MB r {s['shuffleReadBytes'] / 1e6:7.1f} MB  {s['name'][:60]}"
                )
            print(f"  sum of stage durations {spark_s:.2f} s; the rest ({wall - spark_s:.2f} s) is driver-side")
            # Job timeline from the start of the run: the gaps between jobs are the driver's own work.
            for j in jobs_since(spark, ui, last_job):
                if not j.get("submissionTime") or not j.get("completionTime"):
                    continue  # still running (or never submitted): no span to show
                start, end = _ms(j.get("submissionTime")) / 1000 - epoch0, _ms(j.get("completionTime")) / 1000 - epoch0
                print(f"  job {j['jobId']:>4} {start:6.2f} -> {end:6.2f} s  ({end - start:.2f} s, {len(j.get('stageIds', []))} stages)  {j['name'][:60]}")
            print(profiler.output_text(unicode=False, color=False, show_all=bool(os.environ.get("PROFILE_ALL")), timeline=False)[:int(os.environ.get("PROFILE_CHARS", "6000"))])
    finally:
        spark.stop()
        shutil.rmtree(b.root, ignore_errors=True)  # the tables written here


COW = {"write.merge.mode": "copy-on-write", "write.update.mode": "copy-on-write", "write.delete.mode": "copy-on-write"}


def java_merge_sql(cols, table):
    return (
        f"MERGE INTO java.b.{table} t USING cdc_batch s ON t.id = s.id "
        "WHEN MATCHED AND s.op = 'D' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in cols)} "
        f"WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT ({', '.join(cols)}) VALUES ({', '.join('s.' + c for c in cols)})"
    )


def _ms(stamp: str | None) -> float:
    import datetime as dt

    if not stamp:
        return 0.0
    return dt.datetime.strptime(stamp.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000


if __name__ == "__main__":
    main()

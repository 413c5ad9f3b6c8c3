"""This project's own timings on each Spark line, so that a regression between Spark 3.5 and Spark 4 shows.

Java Iceberg exists here for Spark 3.5 only, so the comparison with it (vs_java_iceberg.py) stays on 3.5;
this script times our side alone, with the same data, on whichever pyspark its interpreter has:

    .venv/bin/python bench/spark_lines.py --out /tmp/lines-3.5.json
    .venv-spark4/bin/python bench/spark_lines.py --out /tmp/lines-4.json
    .venv-spark4/bin/python bench/spark_lines.py --connect --out /tmp/lines-4-connect.json
    python bench/spark_lines.py --compare /tmp/lines-3.5.json /tmp/lines-4.json /tmp/lines-4-connect.json

`--connect` runs the same workloads through Spark Connect: a local Connect server in a process of its own
(lakehouse_assets_tests/connect_server.py, the one the suite uses; same driver memory and settings), the
benchmark talking to it as a remote client, so Connect's cost shows against classic on the same Spark line.
`make bench` runs all four. Each figure is the median of `--reps` runs after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from lakehouse_assets import MergeOptions

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SESSION = {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "8", "spark.app.name": "bench-spark-lines"}


def measure(args) -> dict:
    root = tempfile.mkdtemp(prefix="bench-spark-lines-")
    if not args.connect:
        return _measure(args, root, None)
    from lakehouse_assets_tests.connect_server import ConnectServer

    server = ConnectServer(os.path.join(root, "connect"), conf=SESSION).start()
    try:
        return _measure(args, root, server.url)
    finally:
        server.stop()


def _measure(args, root: str, remote: str | None) -> dict:
    import pyspark
    from pyspark.sql import functions as F

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.spark.compat import default_parallelism
    from lakehouse_assets.core.spark.session import spark_session

    spark = spark_session({**SESSION, "spark.remote": remote} if remote else SESSION)
    lh = Lakehouse(os.path.join(root, "warehouse"))
    days = 14
    df = spark.range(0, args.rows, numPartitions=default_parallelism(spark)).select(
        F.col("id"),
        ((F.col("id") * 7919) % 100_000).alias("user_id"),
        (F.lit("2024-01-01").cast("timestamp") + F.make_interval(secs=((F.col("id") * 104_729) % (days * 86_400)).cast("int"))).alias("event_time"),
        (F.col("id") % 32).cast("int").alias("region"),
        F.substring(F.md5(F.col("id").cast("string")), 1, 24).alias("session_id"),
    ).cache()
    df.count()
    lh.write(df.limit(10_000), "b.warmup", partition_by=["day(event_time)"])
    seq = iter(range(1_000_000))
    changed = df.filter((F.col("id") % 2048) < 2).withColumn("session_id", F.lit("changed")).cache()
    changed.count()

    def merge_target():
        name = f"b.merge_{next(seq)}"
        lh.write(df, name, partition_by=["region"])
        return name

    merge_tables = [merge_target() for _ in range(args.reps + 1)]
    lh.write(df, "b.read", partition_by=["day(event_time)"])  # what the reads read
    workloads = {
        "write_day": lambda: lh.write(df, f"b.day_{next(seq)}", partition_by=["day(event_time)"]),
        "write_unpartitioned": lambda: lh.write(df, f"b.plain_{next(seq)}"),
        "merge_cdc": lambda: lh.write(changed, merge_tables.pop(), mode="merge", merge=MergeOptions(keys=["id"])),
        "read_full": lambda: lh.read(spark, "b.read").groupBy("region").count().collect(),
        "read_pruned": lambda: lh.read(spark, "b.read", row_filter="event_time >= '2024-01-03T00:00:00+00:00' and event_time < '2024-01-04T00:00:00+00:00'").count(),
    }
    line = f"{pyspark.__version__}{' Connect' if remote else ''}"
    out = {"spark": line, "rows": args.rows, "reps": args.reps, "medians": {}}
    for name, fn in workloads.items():
        # A read takes ~5 runs to reach its steady cost and is quick, so reads warm up 5 times and count at least 9.
        read = name.startswith("read_")
        for _ in range(5 if read else 1):  # warm-up
            fn()
        times = []
        for _ in range(max(args.reps, 9) if read else args.reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out["medians"][name] = statistics.median(times)
        print(f"  spark {line} {name}: " + ", ".join(f"{t:.2f}" for t in times), flush=True)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return out


def compare(paths: list[str]) -> str:
    """A table of the runs' medians; each classic run against the first, each Connect run against classic on its line."""
    runs = [json.load(open(p)) for p in paths]
    base = runs[0]
    classic = {r["spark"]: r for r in runs if not r["spark"].endswith(" Connect")}
    pairs = [(r, classic.get(r["spark"].removesuffix(" Connect"), base)) for r in runs[1:]]
    pairs = [(r, other if r["spark"].endswith(" Connect") else base) for r, other in pairs]
    head = "| work | " + " | ".join(f"ours on Spark {r['spark']} s" for r in runs) + " | " + " | ".join(f"{r['spark']} / {o['spark']}" for r, o in pairs) + " |"
    lines = [head, "|" + "---|" * (1 + len(runs) + len(pairs))]
    for work in base["medians"]:
        cells = [f"{r['medians'][work]:.2f}" for r in runs] + [f"{r['medians'][work] / o['medians'][work]:.2f}" for r, o in pairs]
        lines.append(f"| {work} | " + " | ".join(cells) + " |")
    return f"{base['rows']:,} rows, medians of {base['reps']} (reads: of {max(base['reps'], 9)}, after 5 warm-ups)\n\n" + "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", help="write this run's medians (JSON) here")
    p.add_argument("--connect", action="store_true", help="through a local Spark Connect server (PySpark 4)")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="print the runs' medians side by side (the first is the baseline)")
    args = p.parse_args()
    if args.compare:
        print(compare(args.compare))
        return
    result = measure(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

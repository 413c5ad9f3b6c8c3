"""Write throughput: our dual-format write vs Spark's own `df.write.parquet`, same data, same run.

The same cached DataFrame is written alternately by both writers, several repetitions, and the
median ratio (ours / Spark) is printed. Both use zstd (Spark's default is snappy; Iceberg's is zstd),
so the comparison is about the write path and the metadata for two formats, not the codec.

    .venv/bin/python bench/write_throughput.py [--rows 5000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.spark.session import spark_session

    spark = spark_session({"spark.sql.parquet.compression.codec": "zstd", "spark.driver.memory": "4g"})

    parallelism = spark.sparkContext.defaultParallelism
    df = (
        spark.range(0, args.rows, numPartitions=parallelism)
        .select(
            F.col("id").alias("event_id"),
            (F.col("id") % 100_000).alias("user_id"),
            (F.lit("2024-01-01").cast("timestamp") + F.make_interval(secs=(F.col("id") % 2_592_000).cast("int"))).alias("event_time"),
            F.element_at(F.array(*[F.lit(k) for k in ("view", "click", "cart", "buy")]), (F.col("id") % 4 + 1).cast("int")).alias("kind"),
            F.concat(F.lit("/product/"), (F.hash("id") % 5000).cast("string")).alias("page"),
            (F.abs(F.hash("id", F.lit(1))) % 100000 / 100).cast("decimal(10,2)").alias("amount"),
            (F.rand(7) * 1000).alias("score"),
            (F.col("id") % 7 == 0).alias("flag"),
        )
        .cache()
    )
    df.count()  # materialize the cache: both writers read the same in-memory data

    root = tempfile.mkdtemp(prefix="bench-write-")
    lh = Lakehouse(os.path.join(root, "warehouse"))
    ours, spark_times, ours_bytes, spark_bytes = [], [], 0, 0
    try:
        # Warm-up (not measured): JIT, Python workers and the catalog get going for both writers.
        lh.write(df.limit(100_000), "bench.warmup")
        df.limit(100_000).write.mode("overwrite").parquet(os.path.join(root, "spark_warmup"))
        for rep in range(args.reps):
            for name in (("ours", "spark") if rep % 2 == 0 else ("spark", "ours")):
                start = time.perf_counter()
                if name == "ours":
                    r = lh.write(df, f"bench.events_{rep}")
                    ours.append(time.perf_counter() - start)
                    ours_bytes = r.bytes_written
                else:
                    path = os.path.join(root, f"spark_{rep}")
                    df.write.mode("overwrite").parquet(path)
                    spark_times.append(time.perf_counter() - start)
                    spark_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs if f.endswith(".parquet"))
            print(f"rep {rep + 1}: ours {ours[-1]:.2f} s, spark {spark_times[-1]:.2f} s", flush=True)
        ratios = [o / s for o, s in zip(ours, spark_times)]
        print()
        print(f"rows: {args.rows:,}  columns: {len(df.columns)}  cores: {parallelism}  repetitions: {args.reps}")
        print(f"median seconds: dual-format {statistics.median(ours):.2f}  spark parquet {statistics.median(spark_times):.2f}")
        print(f"bytes on disk:  dual-format {ours_bytes:,}  spark parquet {spark_bytes:,}  (ratio {ours_bytes / spark_bytes:.2f})")
        print(f"median ratio dual-format / spark write.parquet: {statistics.median(ratios):.2f}  (per rep: {', '.join(f'{r:.2f}' for r in ratios)})")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()

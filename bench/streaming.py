"""The `stream` workload of bench/vs_java_iceberg.py: micro-batches through our stream sink against Java Iceberg's
streaming sink (`writeStream.format("iceberg")`), in the same Spark session, over the same landing files.

One Parquet file per micro-batch (`maxFilesPerTrigger=1`, `availableNow`), each query with a new checkpoint. Both
tables exist before the first query (creating them is not timed); the sides then take turns, `reps` queries each,
every query appending all the landing files again. We report rows per second over each whole query (median, min
and max) and the median batch latency (Spark's `addBatch` duration), ours writing both formats, Java Iceberg only
Iceberg."""

from __future__ import annotations

import os
import statistics
import time

BATCHES = int(os.environ.get("BENCH_STREAM_BATCHES", "100"))
ROWS_PER_BATCH = int(os.environ.get("BENCH_STREAM_ROWS", "10000"))


def stream_workload(bench, side_cls, row_cls, reps: int = 5) -> None:
    spark = bench.spark
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(BATCHES + 10))
    landing = os.path.join(bench.root, "landing")
    bench.events(0, BATCHES * ROWS_PER_BATCH).repartition(BATCHES).write.mode("overwrite").parquet(landing)
    schema = spark.read.parquet(landing).schema
    spark.createDataFrame([], schema).writeTo("java.b.stream_java").using("iceberg").create()
    bench.lh.write(spark.createDataFrame([], schema), "b.stream_ours")

    def source():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(landing)

    queries = {
        "ours": lambda ck: run(source().writeStream.foreachBatch(bench.lh.stream_writer("b.stream_ours")), ck),
        "java": lambda ck: run(source().writeStream.format("iceberg").outputMode("append"), ck, table="java.b.stream_java"),
    }
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in queries}
    for rep in range(reps):
        for side in (("ours", "java") if rep % 2 == 0 else ("java", "ours")):
            runs[side].append(queries[side](os.path.join(bench.root, f"ck-{side}-{rep}")))
            print(f"  stream rep {rep + 1} {side}: {runs[side][-1][0]:.2f} s, median batch {runs[side][-1][1] * 1000:.0f} ms", flush=True)
    rows = BATCHES * ROWS_PER_BATCH
    assert bench.lh.read(spark, "b.stream_ours").count() == rows * reps and spark.table("java.b.stream_java").count() == rows * reps
    o = side_cls("ours", [w for w, _ in runs["ours"]])
    t = side_cls("java-iceberg streaming sink", [w for w, _ in runs["java"]])

    def rates(side: str) -> str:
        r = sorted(rows / w for w, _ in runs[side])
        return f"{statistics.median(r):,.0f} rows/s ({r[0]:,.0f}-{r[-1]:,.0f}), median batch {statistics.median(b for _, b in runs[side]) * 1000:.0f} ms"

    note = f"{BATCHES} batches x {ROWS_PER_BATCH:,} rows, {reps} queries a side, taking turns: ours {rates('ours')}; Java Iceberg {rates('java')}"
    bench.report(row_cls("stream", o, [t], note))


def run(writer, checkpoint: str, table: str | None = None) -> tuple[float, float]:
    """(wall seconds of the availableNow query, median addBatch seconds)."""
    writer = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    t0 = time.perf_counter()
    query = writer.toTable(table) if table else writer.start()
    query.awaitTermination()
    wall = time.perf_counter() - t0
    durations = [p["durationMs"].get("addBatch", 0) / 1000 for p in query.recentProgress if p.get("numInputRows")]
    return wall, statistics.median(durations)

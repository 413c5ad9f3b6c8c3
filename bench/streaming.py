"""The `stream` workload of bench/vs_java_iceberg.py: micro-batches through our stream sink against Java Iceberg's
streaming sink (`writeStream.format("iceberg")`), in the same Spark session, over the same landing files.

One Parquet file per micro-batch (`maxFilesPerTrigger=1`, `availableNow`), each side with its own checkpoint. We
report rows per second over the whole query and the median batch latency (Spark's `addBatch` duration), ours
writing both formats, Java Iceberg only Iceberg."""

from __future__ import annotations

import os
import statistics
import time

BATCHES = int(os.environ.get("BENCH_STREAM_BATCHES", "100"))
ROWS_PER_BATCH = int(os.environ.get("BENCH_STREAM_ROWS", "10000"))


def stream_workload(bench, side_cls, row_cls) -> None:
    spark = bench.spark
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(BATCHES + 10))
    landing = os.path.join(bench.root, "landing")
    bench.events(0, BATCHES * ROWS_PER_BATCH).repartition(BATCHES).write.mode("overwrite").parquet(landing)
    schema = spark.read.parquet(landing).schema
    spark.createDataFrame([], schema).writeTo("java.b.stream_java").using("iceberg").create()

    def source():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(landing)

    sink = bench.lh.stream_writer("b.stream_ours")
    ours = run(source().writeStream.foreachBatch(sink), os.path.join(bench.root, "ck-ours"))
    theirs = run(source().writeStream.format("iceberg").outputMode("append"), os.path.join(bench.root, "ck-java"), table="java.b.stream_java")
    rows = BATCHES * ROWS_PER_BATCH
    assert bench.lh.read(spark, "b.stream_ours").count() == rows and spark.table("java.b.stream_java").count() == rows
    o, t = side_cls("ours", [ours[0]]), side_cls("java-iceberg streaming sink", [theirs[0]])
    note = (
        f"{BATCHES} batches x {ROWS_PER_BATCH:,} rows: ours {rows / ours[0]:,.0f} rows/s, median batch {ours[1] * 1000:.0f} ms; "
        f"Java Iceberg {rows / theirs[0]:,.0f} rows/s, median batch {theirs[1] * 1000:.0f} ms"
    )
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

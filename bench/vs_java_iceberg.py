"""This project (writing Iceberg AND Delta) vs Spark + the Java Iceberg runtime (Iceberg only), one Spark session.

Both sides run in ONE Spark session over the same cached DataFrame, alternating which goes first,
after a warm-up (merges also run one uncounted rep of their own first, reads READ_WARMUP (10) and count at least
READ_REPS (15): the JVM compiles each side's MERGE and scan paths over the first runs, and a sub-second read needs
several runs to reach its steady cost); each figure is the median of `--reps` runs and each ratio
is ours / theirs from this run. Java Iceberg comes from PyPI (lakehouse_assets_tests/java_iceberg.py), with copy-on-write
MERGE/UPDATE/DELETE and zstd like ours. Spark's own Parquet writer (zstd) is a second baseline for writes.

Workloads (`--only a,b` to pick):
  (inputs)        every workload's DataFrame arrives in 3 partitions per core (Spark's tuning advice: 2-3 tasks
                  per core), not one per core; write_partitioning varies it from 2 to 200
  write_day, write_day_bucket, write_unpartitioned   new table per rep; also Spark write.parquet / partitionBy
  merge_cdc       CDC batch (~0.1% of keys updated/deleted + new keys) in 2 of 32 identity partitions,
                  vs Java MERGE INTO, vs our own full overwrite of the same table, and vs the same merge with
                  the Delta change data feed off (what writing the merge's cdc files costs)
  merge_all       a batch whose keys hit every file (vs Java MERGE INTO)
  compaction      40 small appends into a day-partitioned table, then ours vs rewrite_data_files (binpack)
  read_pruned, read_full   one day of 14 / full scan + group by: Lakehouse.read(row_filter=day) vs
                  spark.table(java table).filter(day), each rep reading the same snapshot (as asset checks,
                  several downstream assets or a notebook do)
  read_after_commit  read_pruned of a snapshot read for the first time: each rep first appends a small batch
                  (untimed) to both tables
  commit_latency  a small append on a young table vs after `--commits` small commits without maintenance
  write_wide      `--wide-rows` rows of 1,000 columns, statistics for every column in both formats (Iceberg's
                  `write.metadata.metrics.max-inferred-column-defaults=1000` on both sides; Delta indexes the same)
  changes_cdc     Lakehouse.changes of a merge_cdc-like merge (~0.1% of keys) vs a full scan of the same table
                  (both read every value): reading the change costs what the merge's files cost, not the table;
                  and vs Java Iceberg's create_changelog_view of the same table and range (same rows), and
                  delta-rs's load_cdf of the Delta version (same rows, from its cdc files)
  write_partitioning  2,000,000-row-style writes of inputs in 2, 8, 64 and 200 partitions (as pipelines hand them
                  over), unpartitioned and day-partitioned, adaptive execution on and off, on the project's session
                  and (a subprocess) on a plain `SparkSession.builder` session: ours vs Java `writeTo().create()`,
                  with the files each side wrote; medians of at least 5 runs per cell
  stream          100 micro-batches of 10,000 rows (one landing file each, availableNow) through our stream sink
                  vs Java Iceberg's `writeStream.format("iceberg")`, five queries a side taking turns, both tables
                  created first: rows/s and median batch latency (bench/streaming.py)
  scale           2,000,000 and 20,000,000 rows (`--scale-rows`) straight from spark.range (not cached) into a
                  day-partitioned table, ours and Java, each size in a fresh process: the second of two runs per
                  side (the first warms the JVM), files, and the Python driver's peak RSS (flat: metadata only)
  dagster_step    one Dagster step as a whole process: `dagster asset materialize` of a 10,000-row asset in a
                  fresh process (interpreter, imports, code location, Spark session, catalog, commits), ours vs the
                  same asset written with Spark + Java Iceberg `writeTo().append()` (bench/dagster_step.py); and
                  `dagster_step arrow`: the asset returned as a pyarrow Table (no JVM, with the formats_agree
                  check) vs dagster-iceberg + dagster-deltalake writing it to the two formats, and vs our Spark step
  scale_write     one size of `scale` (`--rows`), run alone: `--only scale_write`
  small_writes    300 appends of 1,000 rows (each within one day) into one day-partitioned table, the sides taking
                  turns in one session: ours vs Java `writeTo().append()`, median of the last 100 (bench/small_writes.py)
  write_contract  the write_day write without a data contract, with five rules, and with 1% of rows quarantined
                  (bench/contracts.py)

    .venv/bin/python bench/vs_java_iceberg.py --rows 2000000 [--reps 3] [--only write_day,merge_cdc]
    .venv/bin/python bench/vs_java_iceberg.py --rows 50000000 --only scale_write --driver-memory 1g   # scale run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field

from lakehouse_assets import MergeOptions, TableOptions

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORKLOADS = (
    "write_day", "write_day_bucket", "write_unpartitioned", "merge_cdc", "merge_all", "compaction", "read_pruned", "read_full", "read_after_commit", "commit_latency",
    "write_wide", "changes_cdc", "write_partitioning", "stream", "scale", "dagster_step", "write_contract", "small_writes",
)
INPUT_PARTITIONS = (2, 8, 64, 200)
PARTITIONING_REPS = 5  # at least, per write_partitioning cell: a 1-2 s write on a shared machine varies by +-0.1 s
PARTITIONS_PER_CORE = 3  # how the other workloads' inputs arrive
WIDE_COLUMNS = 1000
WIDE_PROPERTIES = {"write.metadata.metrics.max-inferred-column-defaults": str(WIDE_COLUMNS)}
SCALE = "scale_write"  # not in WORKLOADS: run alone, since it measures the driver process's peak memory
DAYS = 14
REGIONS = 32


READ_WARMUP = 10  # uncounted runs of each side before a read workload's counted ones
READ_REPS = 15  # counted runs of each side, at least
MERGE_FEED_REPS = 7  # counted runs of merge_cdc, whose Delta feed on/off ratio compares two sub-second times


@dataclass
class Side:
    name: str
    times: list[float] = field(default_factory=list)
    files: int | None = None
    bytes: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class Row:
    workload: str
    ours: Side
    others: list[Side]
    note: str = ""


def dir_stats(path: str) -> tuple[int, int]:
    files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")]
    return len(files), sum(os.path.getsize(f) for f in files)


class Bench:
    def __init__(self, args):
        from pyspark.sql import functions as F

        from lakehouse_assets import Lakehouse
        from lakehouse_assets.core.spark.session import spark_session
        from lakehouse_assets_tests import java_iceberg

        self.java_iceberg = java_iceberg
        self.args = args
        self.F = F
        self.root = tempfile.mkdtemp(prefix="bench-vs-java-", dir=args.tmp)
        self.java_wh = os.path.join(self.root, "java")
        conf = {
            **java_iceberg.spark_conf(self.java_wh),
            "spark.app.name": "bench-vs-java-iceberg",
            "spark.driver.memory": args.driver_memory,
            "spark.sql.parquet.compression.codec": "zstd",
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        }
        if args.plain_session:  # what a user's own SparkSession.builder gives: Spark's defaults, Java Iceberg's catalog
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.appName("bench-plain-session")
            # No console progress bars: they only fill the bench's log (Spark draws them on a plain session's stderr).
            plain = {**java_iceberg.spark_conf(self.java_wh), "spark.driver.memory": args.driver_memory, "spark.ui.showConsoleProgress": "false"}
            for key, value in plain.items():
                builder = builder.config(key, value)
            self.spark = builder.getOrCreate()
            self.spark.sparkContext.setLogLevel("ERROR")
        else:
            self.spark = spark_session(conf)
        self.lh = Lakehouse(os.path.join(self.root, "ours"))
        # The same tables without Delta's change data feed: what the feed's cdc files cost a merge.
        self.lh_no_feed = Lakehouse(os.path.join(self.root, "ours-no-feed"), delta_configuration={"delta.enableChangeDataFeed": "false"})
        self.spark.sql("CREATE NAMESPACE IF NOT EXISTS java.b")
        self.seq = 0
        self.rows: list[Row] = []
        if args.only == SCALE:
            self.df = self.events(0, args.rows)  # generated while written: nothing held in memory
            print(f"{args.rows:,} rows generated on the fly; {self.spark.sparkContext.defaultParallelism} cores; tmp {self.root}", flush=True)
            return
        self.df = self.events(0, args.rows).cache()
        n = self.df.count()
        print(f"{n:,} rows cached; {self.spark.sparkContext.defaultParallelism} cores; tmp {self.root}", flush=True)

    # ------------------------------------------------------------ data

    def events(self, lo: int, hi: int, partitions: int | None = None):
        F = self.F
        return self.spark.range(lo, hi, numPartitions=partitions or PARTITIONS_PER_CORE * self.spark.sparkContext.defaultParallelism).select(
            F.col("id"),
            ((F.col("id") * 7919) % 100_000).alias("user_id"),
            (F.lit("2024-01-01").cast("timestamp") + F.make_interval(secs=((F.col("id") * 104_729) % (DAYS * 86_400)).cast("int"))).alias("event_time"),
            F.element_at(F.array(*[F.lit(k) for k in ("view", "click", "cart", "buy", "refund")]), (F.col("id") % 5 + 1).cast("int")).alias("event_type"),
            (F.abs(F.hash("id")) % 100_000 / 100.0).alias("amount"),
            (F.col("id") % REGIONS).cast("int").alias("region"),
            F.substring(F.md5(F.col("id").cast("string")), 1, 24).alias("session_id"),
        )

    def name(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}_{self.seq}"

    # ------------------------------------------------------------ helpers

    def java_create(self, table: str, df, partitioned_by=(), properties=None):
        w = df.writeTo(f"java.b.{table}").using("iceberg").tableProperty("write.parquet.compression-codec", "zstd")
        for k, v in (properties or {}).items():
            w = w.tableProperty(k, v)
        if partitioned_by:
            w = w.partitionedBy(*partitioned_by)
        w.create()

    def java_files(self, table: str) -> tuple[int, int]:
        r = self.spark.sql(f"SELECT count(*) AS n, coalesce(sum(file_size_in_bytes), 0) AS b FROM java.b.{table}.files").first()
        return r["n"], r["b"]

    def ours_files(self, table: str) -> tuple[int, int]:
        files = [t.file for t in self.lh.load(f"b.{table}").scan().plan_files()]
        return len(files), sum(f.file_size_in_bytes for f in files)

    def drop(self, ours: str, java: str) -> None:
        """Both sides' tables of a measured cell, gone once their files are counted: a full run writes tens of GB."""
        if self.args.keep:
            return
        ident = f"b.{ours}"
        location = urllib.parse.urlparse(self.lh.table_location(ident)).path  # file:// under the bench's root
        self.lh.catalog.drop_table(ident)
        shutil.rmtree(location)
        self.spark.sql(f"DROP TABLE java.b.{java} PURGE")

    def alternate(self, rep: int, fns: dict):
        order = list(fns)
        if rep % 2:
            order.reverse()
        out = {}
        for k in order:
            t0 = time.perf_counter()
            out[k] = fns[k]()
            out[k] = (time.perf_counter() - t0, out[k])
        return out

    def report(self, row: Row):
        self.rows.append(row)
        parts = [f"ours {row.ours.median:.2f}s"] + [f"{o.name} {o.median:.2f}s (ratio {row.ours.median / o.median:.2f})" for o in row.others]
        print(f"== {row.workload}: " + ", ".join(parts) + (f"  [{row.note}]" if row.note else ""), flush=True)

    # ------------------------------------------------------------ workloads

    def write(self, workload: str, ours_terms, java_terms, spark_cols):
        F, df = self.F, self.df
        ours, java, plain = Side("ours"), Side("java"), Side("spark parquet")
        spark_df = df
        if spark_cols:
            spark_df = df.withColumn("day", F.to_date("event_time"))
            if "bucket" in spark_cols:
                spark_df = spark_df.withColumn("bucket", F.pmod(F.hash("user_id"), F.lit(16)))
        for rep in range(self.args.reps):
            o_name, j_name, path = self.name(workload), self.name(workload), os.path.join(self.root, "spark", self.name(workload))

            def spark_write(path=path):
                w = spark_df.write.mode("overwrite")
                if spark_cols:
                    w = w.partitionBy(*spark_cols)
                w.parquet(path)

            res = self.alternate(rep, {
                "ours": lambda o_name=o_name: self.lh.write(df, f"b.{o_name}", partition_by=ours_terms),
                "java": lambda j_name=j_name: self.java_create(j_name, df, java_terms),
                "spark": spark_write,
            })
            ours.times.append(res["ours"][0])
            java.times.append(res["java"][0])
            plain.times.append(res["spark"][0])
            ours.files, ours.bytes = res["ours"][1].files_added, res["ours"][1].bytes_written
            java.files, java.bytes = self.java_files(j_name)
            plain.files, plain.bytes = dir_stats(path)
            print(f"  {workload} rep {rep + 1}: ours {ours.times[-1]:.2f}s java {java.times[-1]:.2f}s spark {plain.times[-1]:.2f}s", flush=True)
            shutil.rmtree(path, ignore_errors=True)
            if workload != "write_day" or rep < self.args.reps - 1:  # the reads run on write_day's last tables
                self.drop(o_name, j_name)
        self.last_day_tables = (o_name, j_name) if workload == "write_day" else getattr(self, "last_day_tables", None)
        self.report(Row(workload, ours, [java, plain]))

    def write_wide(self):
        """A 1,000-column table (longs, doubles and strings) with statistics for every column: new table per rep."""
        F = self.F
        cols = [F.col("id")]
        for i in range(1, WIDE_COLUMNS):
            kind = i % 3
            v = (F.col("id") * (i + 7)) % 10_007
            cols.append((v if kind == 0 else (v / 7.0) if kind == 1 else F.concat(F.lit(f"v{i}_"), v.cast("string"))).alias(f"c{i}"))
        df = self.spark.range(0, self.args.wide_rows, numPartitions=PARTITIONS_PER_CORE * self.spark.sparkContext.defaultParallelism).select(*cols).cache()
        df.count()
        ours, java, plain = Side("ours"), Side("java"), Side("spark parquet")
        for rep in range(self.args.reps):
            o_name, j_name, path = self.name("wide"), self.name("wide"), os.path.join(self.root, "spark", self.name("wide"))
            res = self.alternate(rep, {
                "ours": lambda o_name=o_name: self.lh.write(df, f"b.{o_name}", table=TableOptions(properties=WIDE_PROPERTIES)),
                "java": lambda j_name=j_name: self.java_create(j_name, df, (), WIDE_PROPERTIES),
                "spark": lambda path=path: df.write.mode("overwrite").parquet(path),
            })
            for side, key in ((ours, "ours"), (java, "java"), (plain, "spark")):
                side.times.append(res[key][0])
            ours.files, ours.bytes = res["ours"][1].files_added, res["ours"][1].bytes_written
            java.files, java.bytes = self.java_files(j_name)
            plain.files, plain.bytes = dir_stats(path)
            r = res["ours"][1]
            print(f"  write_wide rep {rep + 1}: ours {ours.times[-1]:.2f}s (iceberg commit {r.iceberg_commit_seconds:.2f}s, delta {r.delta_commit_seconds:.2f}s) "
                  f"java {java.times[-1]:.2f}s spark {plain.times[-1]:.2f}s", flush=True)
            shutil.rmtree(path, ignore_errors=True)
        df.unpersist()
        self.report(Row("write_wide", ours, [java, plain], note=f"{self.args.wide_rows:,} rows x {WIDE_COLUMNS} columns"))

    def merge(self, workload: str):
        """CDC merge: ours vs Java MERGE INTO (copy-on-write) vs our own full overwrite of the same table."""
        F, df, n = self.F, self.df, self.args.rows
        if workload == "merge_cdc":
            # ~0.1% of keys, all in regions 0 and 1 (2 of 32 partitions): 1 in 7 deleted, the rest updated; plus new keys.
            changed = df.filter(((F.col("id") % 2048) < 2) & F.col("region").isin(0, 1))
            new = self.events(n, n + max(1000, n // 2000)).filter(F.col("region").isin(0, 1))
        else:
            changed = df.filter((F.col("id") % 997) == 7)  # keys in every file (997 is prime: every region, every day)
            new = self.events(n, n + 1000).limit(0)
        batch = (
            changed.withColumn("op", F.when(F.col("id") % 7 == 0, "D").otherwise("U")).withColumn("amount", F.col("amount") + 1)
            .unionByName(new.withColumn("op", F.lit("I")))
            .cache()
        )
        n_batch = batch.count()
        batch.createOrReplaceTempView("cdc_batch")
        cols = [c for c in df.columns]
        merge_sql = (
            "MERGE INTO java.b.{t} t USING cdc_batch s ON t.id = s.id "
            "WHEN MATCHED AND s.op = 'D' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in cols)} "
            f"WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT ({', '.join(cols)}) VALUES ({', '.join('s.' + c for c in cols)})"
        )
        cow = {"write.merge.mode": "copy-on-write", "write.update.mode": "copy-on-write", "write.delete.mode": "copy-on-write"}
        ours, java, full, no_feed = Side("ours"), Side("java MERGE INTO"), Side("our full overwrite"), Side("ours, Delta change feed off")
        detail = ""
        feed = workload == "merge_cdc"  # also against the same merge on a table without the Delta change data feed
        # The first rep is a warm-up for both sides (the JVM compiles each side's MERGE path on first use), as for reads.
        # The feed's cost is a small difference of two sub-second times: more repetitions for its median.
        reps = max(self.args.reps, MERGE_FEED_REPS) if feed else self.args.reps
        for rep in range(-1, reps):
            o_name, j_name, f_name = self.name(workload), self.name(workload), self.name(workload)
            self.lh.write(df, f"b.{o_name}", partition_by=["region"])
            self.lh.write(df, f"b.{f_name}", partition_by=["region"])
            self.java_create(j_name, df, [F.col("region")], cow)
            sides = {
                "ours": lambda o_name=o_name: self.lh.write(batch, f"b.{o_name}", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op")),
                "java": lambda j_name=j_name: self.spark.sql(merge_sql.format(t=j_name)).collect(),
                "full": lambda f_name=f_name: self.lh.write(df, f"b.{f_name}", mode="overwrite"),
            }
            if feed:
                self.lh_no_feed.write(df, f"b.{o_name}", partition_by=["region"])
                sides["no_feed"] = lambda o_name=o_name: self.lh_no_feed.write(
                    batch, f"b.{o_name}", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
            res = self.alternate(rep, sides)
            if rep < 0:
                print(f"  {workload} warm-up: ours {res['ours'][0]:.2f}s java {res['java'][0]:.2f}s full overwrite {res['full'][0]:.2f}s", flush=True)
                continue
            ours.times.append(res["ours"][0])
            java.times.append(res["java"][0])
            full.times.append(res["full"][0])
            if feed:
                no_feed.times.append(res["no_feed"][0])
            r = res["ours"][1]
            ours.files, ours.bytes = r.files_added, r.bytes_written
            s = self.spark.sql(f"SELECT summary FROM java.b.{j_name}.snapshots ORDER BY committed_at DESC LIMIT 1").first()["summary"]
            java.files, java.bytes = int(s.get("added-data-files", 0)), int(s.get("added-files-size", 0))
            full.files, full.bytes = res["full"][1].files_added, res["full"][1].bytes_written
            if rep == 0:
                o_count = self.lh.read(self.spark, f"b.{o_name}").count()
                j_count = self.spark.table(f"java.b.{j_name}").count()
                assert o_count == j_count, f"merge results differ: ours {o_count} rows, java {j_count}"
                summ = self.lh.load(f"b.{o_name}").current_snapshot().summary
                detail = (
                    f"batch {n_batch} rows; ours rewrote {summ['lakehouse.merge.rewritten-files']} of {summ['lakehouse.merge.live-files']} files "
                    f"(candidates {summ['lakehouse.merge.candidate-files']}), java removed {s.get('deleted-data-files')} added {s.get('added-data-files')}"
                )
            print(f"  {workload} rep {rep + 1}: ours {ours.times[-1]:.2f}s java {java.times[-1]:.2f}s full overwrite {full.times[-1]:.2f}s"
                  + (f" ours with the Delta feed off {no_feed.times[-1]:.2f}s" if feed else ""), flush=True)
        batch.unpersist()
        self.report(Row(workload, ours, [java, full, *([no_feed] if feed else [])], detail))

    def changes_cdc(self):
        """The changes of a ~0.1% merge (2 of 32 partitions rewritten) vs a full scan of the table, both counted."""
        F, df, n = self.F, self.df, self.args.rows
        name = f"b.{self.name('changes')}"
        self.lh.write(df, name, partition_by=["region"])
        before = self.lh.load(name).current_snapshot().snapshot_id
        changed = df.filter(((F.col("id") % 2048) < 2) & F.col("region").isin(0, 1)).withColumn("amount", F.col("amount") + 1)
        merged_version = self.lh.write(changed, name, mode="merge", merge=MergeOptions(keys=["id"])).delta_version
        ours, full, java, cdf = Side("ours"), Side("full scan"), Side("java create_changelog_view"), Side("delta-rs load_cdf")
        import pyarrow as pa
        from deltalake import DeltaTable

        delta_root = self.lh.load(name).location()

        def load_cdf():  # the Delta side's feed of the same merge, every value read into Arrow
            return pa.table(DeltaTable(delta_root).load_cdf(starting_version=merged_version).read_all()).num_rows
        # Java Iceberg reads the same table through its JdbcCatalog over our SQLite catalog (the Spark catalog
        # must carry the lakehouse's catalog name). Its changelog drops carry-over rows and, with the merge key
        # as identifier column, pairs updates: the rows ours gives.
        for key, value in self.java_iceberg.jdbc_catalog_conf(self.lh.catalog.name, self.lh.warehouse).items():
            self.spark.conf.set(key, value)
        changelog = (
            f"CALL {self.lh.catalog.name}.system.create_changelog_view(table => '{name}', options => map('start-snapshot-id', '{before}'), "
            "changelog_view => 'bench_changelog', identifier_columns => array('id'), compute_updates => true)"
        )

        def every_value(frame):  # reads every column of every row, as a consumer of the rows would
            return frame.agg(F.count(F.lit(1)), F.sum(F.hash(*[F.col(c) for c in frame.columns]))).first()[0]

        for rep in range(-READ_WARMUP, max(self.args.reps, READ_REPS)):  # sub-second reads: warmed up and counted as the reads are
            res = self.alternate(rep, {
                "ours": lambda: every_value(self.lh.changes(name, before, spark=self.spark)),
                "full": lambda: every_value(self.lh.read(self.spark, name)),
                "java": lambda: self.spark.sql(changelog).collect() and every_value(self.spark.table("bench_changelog")),
                "cdf": load_cdf,
            })
            assert res["ours"][1] == res["java"][1] == res["cdf"][1], (res["ours"][1], res["java"][1], res["cdf"][1])
            if rep < 0:
                continue
            ours.times.append(res["ours"][0])
            full.times.append(res["full"][0])
            java.times.append(res["java"][0])
            cdf.times.append(res["cdf"][0])
            print(f"  changes_cdc rep {rep + 1}: changes {ours.times[-1]:.2f}s ({res['ours'][1]} rows) full scan {full.times[-1]:.2f}s "
                  f"({res['full'][1]} rows) java changelog {java.times[-1]:.2f}s ({res['java'][1]} rows) load_cdf {cdf.times[-1]:.2f}s", flush=True)
        self.report(Row("changes_cdc", ours, [full, java, cdf], f"{n:,}-row table, merge of {changed.count()} keys"))

    def compaction(self):
        F, df = self.F, self.df
        appends = self.args.compaction_appends
        slices = [df.filter(F.col("id") % appends == i) for i in range(appends)]
        ours, java = Side("ours"), Side("java rewrite_data_files")
        detail = ""
        for rep in range(self.args.reps):
            o_name, j_name = self.name("compact"), self.name("compact")
            self.java_create(j_name, slices[0], [F.days("event_time")])
            for i, s in enumerate(slices):
                with _quiet("lakehouse"):  # these small appends are the point: no small-writes advice per append
                    self.lh.write(s, f"b.{o_name}", partition_by=["day(event_time)"])
                if i:
                    s.writeTo(f"java.b.{j_name}").append()
            before = (self.ours_files(o_name), self.java_files(j_name))
            call = (
                f"CALL java.system.rewrite_data_files(table => 'b.{j_name}', strategy => 'binpack', "
                "options => map('min-input-files', '2', 'target-file-size-bytes', '134217728'))"
            )
            res = self.alternate(rep, {
                "ours": lambda o_name=o_name: self.lh.maintain(f"b.{o_name}", "compaction", spark=self.spark),
                "java": lambda call=call: self.spark.sql(call).collect(),
            })
            ours.times.append(res["ours"][0])
            java.times.append(res["java"][0])
            ours.files, ours.bytes = self.ours_files(o_name)
            java.files, java.bytes = self.java_files(j_name)
            o_rows = self.lh.read(self.spark, f"b.{o_name}").count()
            j_rows = self.spark.table(f"java.b.{j_name}").count()
            assert o_rows == j_rows == self.args.rows, (o_rows, j_rows)
            detail = f"input files ours {before[0][0]} java {before[1][0]} -> ours {ours.files} java {java.files}"
            print(f"  compaction rep {rep + 1}: ours {ours.times[-1]:.2f}s java {java.times[-1]:.2f}s ({detail})", flush=True)
        self.report(Row("compaction", ours, [java], detail))

    def reads(self, workload: str):
        F = self.F
        after_commit = workload == "read_after_commit"
        if after_commit:
            # Tables of their own: each rep appends to them.
            o, j = self.name("read"), self.name("read")
            self.lh.write(self.df, f"b.{o}", partition_by=["day(event_time)"])
            self.java_create(j, self.df, [F.days("event_time")])
            batches = iter(self.events(self.args.rows + i * 14_000, self.args.rows + (i + 1) * 14_000, 1) for i in range(10_000))
        else:
            if getattr(self, "last_day_tables", None) is None:
                o, j = self.name("read"), self.name("read")
                self.lh.write(self.df, f"b.{o}", partition_by=["day(event_time)"])
                self.java_create(j, self.df, [F.days("event_time")])
                self.last_day_tables = (o, j)
            o, j = self.last_day_tables
        day = "event_time >= '2024-01-05T00:00:00+00:00' AND event_time < '2024-01-06T00:00:00+00:00'"  # ISO: pyiceberg and Spark both parse it
        row_filter = None if workload == "read_full" else day

        def query(d):
            return d.groupBy("event_type").agg(F.count("*").alias("n"), F.sum("amount").alias("amount")).orderBy("event_type").collect()

        ours, java = Side("ours Lakehouse.read"), Side("java")
        driver: list[float] = []  # Lakehouse.read alone: catalog load, Iceberg planning, Spark's relation over the files

        def ours_read():
            t0 = time.perf_counter()
            df = self.lh.read(self.spark, f"b.{o}", row_filter=row_filter)
            driver.append(time.perf_counter() - t0)
            return query(df)

        # Sub-second queries: a median of 3 is within one hiccup of either side, so at least READ_REPS here,
        # after READ_WARMUP uncounted ones (both sides, alternating). After the write and merge workloads,
        # our first full scans ran ~1.5x their steady time for several runs while Java's (whose reader its
        # MERGE and rewrite_data_files had already run) did not: ten warm-ups measure both steady.
        for rep in range(1 - READ_WARMUP, max(self.args.reps, READ_REPS) + 1):
            if after_commit:  # untimed: a small append to each side, so each read is of a snapshot nobody has read yet
                batch = next(batches)
                with _quiet("lakehouse"):
                    self.lh.write(batch, f"b.{o}")
                batch.writeTo(f"java.b.{j}").append()
            res = self.alternate(rep, {
                "ours": ours_read,  # the filter goes to Lakehouse.read, as a user gives it
                "java": lambda: query(self.spark.table(f"java.b.{j}").filter(row_filter) if row_filter else self.spark.table(f"java.b.{j}")),
            })
            assert [tuple(r) for r in res["ours"][1]] == [tuple(r) for r in res["java"][1]] or _close(res["ours"][1], res["java"][1])
            if rep > 0:
                ours.times.append(res["ours"][0])
                java.times.append(res["java"][0])
                print(f"  {workload} rep {rep}: ours {ours.times[-1]:.2f}s java {java.times[-1]:.2f}s", flush=True)
        counted = sorted(driver[-len(ours.times):])
        what = "a snapshot read for the first time: " if after_commit else "the same snapshot as the run before: "
        self.report(Row(workload, ours, [java], note=f"{what}of each of ours, {counted[len(counted) // 2] * 1000:.0f} ms (median) on the driver "
                        "before Spark runs (catalog load, Iceberg planning, Spark's relation over the planned files)"))

    def commit_latency(self):
        small = self.events(0, 100, 1).cache()
        small.count()
        young, old = self.name("young"), self.name("old")
        for t in (young, old):
            self.lh.write(small, f"b.{t}", partition_by=["day(event_time)"])
        for _ in range(3):
            self.lh.write(small, f"b.{young}")
        t0 = time.perf_counter()
        for i in range(self.args.commits - 4):
            self.lh.write(small, f"b.{old}")
            if (i + 1) % 100 == 0:
                print(f"  {i + 5} commits ({(time.perf_counter() - t0) / (i + 1):.2f} s each so far)", flush=True)
        ours, y = Side(f"old table ({self.args.commits} commits)"), Side("young table (4 commits)")
        for rep in range(self.args.reps):
            res = self.alternate(rep, {"old": lambda: self.lh.write(small, f"b.{old}"), "young": lambda: self.lh.write(small, f"b.{young}")})
            ours.times.append(res["old"][0])
            y.times.append(res["young"][0])
            print(f"  commit rep {rep + 1}: old {ours.times[-1]:.2f}s young {y.times[-1]:.2f}s", flush=True)
        table = self.lh.load(f"b.{old}")
        manifests = len(table.current_snapshot().manifests(table.io))
        self.report(Row("commit_latency", ours, [y], f"old table: {manifests} manifests in its current manifest list"))

    def write_partitioning(self):
        """Ours vs Java over inputs partitioned as pipelines hand them over; then the same on a plain session."""
        F = self.F
        session = "plain session" if self.args.plain_session else "project session"
        # One untimed write per side and layout first: the first configuration measured would otherwise pay the
        # session's first Python workers and JIT (its first repetition ran twice as long as the next on both sides).
        for ours_terms, java_terms in (([], []), (["day(event_time)"], [F.days("event_time")])):
            o_name, j_name = self.name("wp_warm"), self.name("wp_warm")
            self.lh.write(self.df, f"b.{o_name}", partition_by=ours_terms)
            self.java_create(j_name, self.df, java_terms)
            self.drop(o_name, j_name)
        for parts in [int(p) for p in self.args.partitionings.split(",")]:
            df = self.df.repartition(parts).cache()  # round-robin: `parts` even partitions, computed once
            df.count()
            for layout, ours_terms, java_terms in (("unpartitioned", [], []), ("day", ["day(event_time)"], [F.days("event_time")])):
                for aqe in ("true", "false"):
                    self.spark.conf.set("spark.sql.adaptive.enabled", aqe)
                    ours, java = Side("ours"), Side("java")
                    for rep in range(max(self.args.reps, PARTITIONING_REPS)):
                        o_name, j_name = self.name("wp"), self.name("wp")
                        res = self.alternate(rep, {
                            "ours": lambda o_name=o_name, df=df, terms=ours_terms: self.lh.write(df, f"b.{o_name}", partition_by=terms),
                            "java": lambda j_name=j_name, df=df, terms=java_terms: self.java_create(j_name, df, terms),
                        })
                        ours.times.append(res["ours"][0])
                        java.times.append(res["java"][0])
                        ours.files, ours.bytes = res["ours"][1].files_added, res["ours"][1].bytes_written
                        java.files, java.bytes = self.java_files(j_name)
                        self.drop(o_name, j_name)
                    label = f"write_partitioning {layout}, {parts} input partitions, AQE {'on' if aqe == 'true' else 'off'}, {session}"
                    self.report(Row(label, ours, [java]))
            df.unpersist()
        self.spark.conf.unset("spark.sql.adaptive.enabled")
        if not self.args.plain_session:
            self.rows += self.plain_session_rows()

    def plain_session_rows(self) -> list[Row]:
        """write_partitioning run again in a subprocess on a plain SparkSession.builder session (one Spark per process)."""
        out = os.path.join(self.root, "plain.json")
        a = self.args
        cmd = [sys.executable, os.path.abspath(__file__), "--plain-session", "--only", "write_partitioning", "--rows", str(a.rows), "--reps", str(a.reps),
               "--partitionings", a.partitionings, "--driver-memory", a.driver_memory, "--json", out, "--tmp", self.root]  # removed with ours
        subprocess.run(cmd, check=True)
        with open(out) as f:
            results = json.load(f)["results"]

        def side(d):
            return Side(d["name"], d["times_s"], d["files"], d["bytes"])

        return [Row(r["workload"], side(r["ours"]), [side(o) for o in r["others"]], r["note"]) for r in results]

    def scale_write(self):
        """Uncached rows into a day-partitioned table, ours and Java alternating, twice: the first round warms the
        JVM's code for this size and is not counted. What the Python driver holds must not grow with the data
        (metadata only). Prints one JSON line (SCALE_RESULT) for the `scale` workload."""
        F = self.F
        ours, java = Side("ours"), Side("java")
        for rep in range(2):
            res = self.alternate(rep, {
                "ours": lambda rep=rep: self.lh.write(self.df, f"b.scale_{rep}", partition_by=["day(event_time)"]),
                "java": lambda rep=rep: self.java_create(f"scale_{rep}", self.df, [F.days("event_time")]),
            })
            r = res["ours"][1]
            assert r.rows_written == self.args.rows, (r.rows_written, self.args.rows)
        ours.times.append(res["ours"][0])
        java.times.append(res["java"][0])
        ours.files, ours.bytes = r.files_added, r.bytes_written
        java.files, java.bytes = self.java_files("scale_1")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the Python driver's peak (Java's writes add nothing to it)
        print(f"== scale_write: {self.args.rows:,} rows: ours {ours.times[0]:.1f} s ({r.files_added} files, {r.bytes_written / 1e6:,.0f} MB), "
              f"java {java.times[0]:.1f} s ({java.files} files); driver peak RSS {rss:.0f} MB (spark.driver.memory {self.args.driver_memory})", flush=True)
        print("SCALE_RESULT " + json.dumps({"rows": self.args.rows, "ours": [ours.times[0], ours.files, ours.bytes],
                                            "java": [java.times[0], java.files, java.bytes], "rss_mb": rss}), flush=True)

    def scale(self):
        """scale_write at each of --scale-rows, each in a fresh process (its peak RSS is that size's alone)."""
        for rows in [int(n) for n in self.args.scale_rows.split(",")]:
            cmd = [sys.executable, os.path.abspath(__file__), "--only", SCALE, "--rows", str(rows), "--driver-memory", self.args.driver_memory]
            out = subprocess.run(cmd + ["--tmp", self.root], check=True, capture_output=True, text=True).stdout  # removed with ours
            res = json.loads(next(line for line in out.splitlines() if line.startswith("SCALE_RESULT ")).split(" ", 1)[1])
            ours = Side("ours", [res["ours"][0]], res["ours"][1], res["ours"][2])
            java = Side("java", [res["java"][0]], res["java"][1], res["java"][2])
            self.report(Row(f"scale {rows:,} rows, day", ours, [java], note=f"Python driver peak RSS {res['rss_mb']:.0f} MB (uncached input; the second of two runs per side)"))

    def dagster_step(self):
        """One Dagster step as a whole process, ours vs Spark + Java Iceberg (bench/dagster_step.py)."""
        from dagster_step import measure

        runs = measure(max(self.args.reps, 5), tempfile.mkdtemp(prefix="step-", dir=self.root))
        ours, java = Side("ours", runs["ours"]["wall"]), Side("java-iceberg step", runs["java"]["wall"])
        cpu = {k: statistics.median(v["cpu"]) for k, v in runs.items()}
        self.report(Row("dagster_step", ours, [java], note=f"10,000-row asset, `dagster asset materialize` in a fresh process; "
                                                          f"CPU of its processes (median) ours {cpu['ours']:.2f} s, Java {cpu['java']:.2f} s"))
        arrow, peers = Side("ours", runs["arrow"]["wall"]), Side("dagster-iceberg + dagster-deltalake", runs["peers"]["wall"])
        self.report(Row("dagster_step arrow", arrow, [peers, Side("our Spark step", runs["ours"]["wall"])],
                        note=f"the asset as a pyarrow Table, no JVM, with the formats_agree check (targets: <= 1.0x the peers, <= 0.4x our "
                             f"Spark step); CPU (median) ours {cpu['arrow']:.2f} s, peers {cpu['peers']:.2f} s; loading the code location "
                             f"alone (a fresh interpreter running the definitions file, median) ours {statistics.median(runs['arrow']['load']):.2f} s, "
                             f"peers {statistics.median(runs['peers']['load']):.2f} s"))

    # ------------------------------------------------------------ driver

    def run(self):
        a = self.args
        F = self.F
        if a.only == SCALE:
            self.scale_write()
            return
        only = a.only.split(",") if a.only else list(WORKLOADS)
        warm = self.df.limit(50_000)
        self.lh.write(warm, "b.warmup", partition_by=["day(event_time)"])
        self.java_create("warmup", warm, [F.days("event_time")])
        warm.write.mode("overwrite").parquet(os.path.join(self.root, "spark", "warmup"))
        for w in only:
            if w == "write_day":
                self.write(w, ["day(event_time)"], [F.days("event_time")], ["day"])
            elif w == "write_day_bucket":
                self.write(w, ["day(event_time)", "bucket(16, user_id)"], [F.days("event_time"), F.bucket(16, "user_id")], ["day", "bucket"])
            elif w == "write_unpartitioned":
                self.write(w, [], [], [])
            elif w in ("merge_cdc", "merge_all"):
                self.merge(w)
            elif w == "compaction":
                self.compaction()
            elif w in ("read_pruned", "read_full", "read_after_commit"):
                self.reads(w)
            elif w == "commit_latency":
                self.commit_latency()
            elif w == "write_wide":
                self.write_wide()
            elif w == "changes_cdc":
                self.changes_cdc()
            elif w == "write_partitioning":
                self.write_partitioning()
            elif w == "scale":
                self.scale()
            elif w == "dagster_step":
                self.dagster_step()
            elif w == "stream":
                from streaming import stream_workload  # bench/streaming.py

                stream_workload(self, Side, Row)
            elif w == "write_contract":
                from contracts import contract_workload  # bench/contracts.py

                contract_workload(self, Side, Row)
            elif w == "small_writes":
                from small_writes import small_writes_workload  # bench/small_writes.py

                small_writes_workload(self, Side, Row)
            else:
                raise SystemExit(f"unknown workload {w}; choose from {', '.join(WORKLOADS)}")
        self.summary()

    def summary(self):
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        print()
        print(f"rows {self.args.rows:,}, reps {self.args.reps}, medians; machine: {load}")
        print(f"driver peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (Python driver process)")
        print("| work | ours s | vs | their s | ratio | ours files / MB | their files / MB |")
        print("|---|---|---|---|---|---|---|")
        for row in self.rows:
            for o in row.others:
                of = f"{row.ours.files} / {row.ours.bytes / 1e6:.1f}" if row.ours.bytes is not None else ""
                tf = f"{o.files} / {o.bytes / 1e6:.1f}" if o.bytes is not None else ""
                print(f"| {row.workload} | {row.ours.median:.2f} | {o.name} | {o.median:.2f} | {row.ours.median / o.median:.2f} | {of} | {tf} |")
        for row in self.rows:
            if row.note:
                print(f"{row.workload}: {row.note}")
            print(f"{row.workload} per rep: ours {', '.join(f'{t:.2f}' for t in row.ours.times)}; "
                  + "; ".join(f"{o.name} {', '.join(f'{t:.2f}' for t in o.times)}" for o in row.others))
        if self.args.json:
            self.write_json(self.args.json)

    def write_json(self, path: str) -> None:
        """The results as JSON, for bench/docs_page.py (the documentation's performance page)."""

        def side(s):
            return {"name": s.name, "median_s": s.median, "times_s": list(s.times), "files": s.files, "bytes": s.bytes}

        out = {
            "rows": self.args.rows,
            "reps": self.args.reps,
            "read_reps": max(self.args.reps, READ_REPS),
            "read_warmup": READ_WARMUP,
            "only": self.args.only,
            "results": [{"workload": r.workload, "note": r.note, "ours": side(r.ours), "others": [side(o) for o in r.others]} for r in self.rows],
        }
        with open(path, "w") as f:
            json.dump(out, f, indent=2)


def _close(a, b) -> bool:
    return len(a) == len(b) and all(x[0] == y[0] and x[1] == y[1] and abs(x[2] - y[2]) < 1e-6 * max(1.0, abs(y[2])) for x, y in zip(a, b))


@contextlib.contextmanager
def _quiet(logger: str):
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    p.add_argument("--commits", type=int, default=500, help="history length for commit_latency")
    p.add_argument("--wide-rows", type=int, default=20_000, help="rows of the 1,000-column table for write_wide")
    p.add_argument("--compaction-appends", type=int, default=40)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--shuffle-partitions", type=int, default=8)
    p.add_argument("--tmp", default=None, help="where tables go (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep every table (otherwise a cell's tables go once measured, the rest at the end)")
    p.add_argument("--plain-session", action="store_true", help="run on a plain SparkSession.builder session (write_partitioning runs itself so)")
    p.add_argument("--scale-rows", default="2000000,20000000", help="row counts of the scale workload (each a process of its own)")
    p.add_argument("--partitionings", default=",".join(map(str, INPUT_PARTITIONS)), help="input partitions for write_partitioning")
    p.add_argument("--json", default=None, help="also write the results to this JSON file (see bench/docs_page.py)")
    args = p.parse_args()
    # A stopped run (make's SIGTERM, a timeout) still removes its tables (1-3 GB a run) through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    bench = Bench(args)
    try:
        bench.run()
    finally:
        try:
            bench.spark.stop()
        finally:  # also when the stop fails (a stopped run's JVM may be gone)
            if not args.keep:
                shutil.rmtree(bench.root, ignore_errors=True)


if __name__ == "__main__":
    main()

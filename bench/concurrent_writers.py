"""The `concurrent_writers` workload: N writers committing to one table at once, as a Dagster backfill's runs do.

Per catalog (the embedded SQLite catalog and PostgreSQL), per N (8, 16 and 32; `--writers`) and per mode, a fresh
table whose N days already hold rows; then N processes (lakehouse_assets_tests/concurrent_writers.py, `spawn`: a fresh
interpreter each, as a run's process is), each writing 5,000 rows of its own day as a pyarrow frame, held at a barrier
right before their first commit so that the commits race:

- overwrite: each replaces its own day (`mode="overwrite", window=<its day>`);
- append: each appends its day.

Each cell runs bursts of N writers, each on a fresh table, until it holds at least MIN_LATENCIES (24) writes: 3 bursts
at 8 writers, 2 at 16, 1 at 32, so that no cell's p95 is the maximum of a handful of writes. Reported, over the cell's
writes: how many landed on the first call (no caller retry), the attempts their commits took, and the commit
latency (from the barrier to the write's return: the Iceberg commit and the Delta version) as p50 and p95, against a
lone commit's median: the same write, alone, on a table of the same N days (`--reps` processes one after another, each
overwriting its day), so that the lone commit reads and writes the same manifests as each of the N does. The targets:
100% landed at every N on both catalogs, and p95 at N writers at most N x that lone median.

Java Iceberg does the same through its JdbcCatalog on the same catalog: one Spark session (Java Iceberg's runtime, the
catalog's JDBC driver) in which N threads each overwrite their own day (`writeTo(...).overwritePartitions()`, dynamic
partition overwrite) or append (`writeTo(...).append()`) at once, each commit retried as Java Iceberg retries
(`commit.retry.*`, its defaults). Its writers share one process and start together at a barrier, so its latency
leaves out a process's start, as ours does.

    .venv/bin/python bench/concurrent_writers.py [--writers 8,16,32] [--catalogs sqlite,postgres] [--json out.json] [--markdown page.md]
    .venv/bin/python bench/concurrent_writers.py --render out.json --markdown page.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROWS = 5_000
TABLE = "bf.events"
MODES = ("overwrite", "append")
# A cell's p95 is taken over at least this many writes (bursts of N on fresh tables): the p95 of one burst of 8 is its
# maximum, the figure that moves most from run to run.
MIN_LATENCIES = 24


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def _populate(lakehouse_kwargs: dict, writers: int) -> None:
    import pyarrow as pa

    from lakehouse_assets import Lakehouse
    from lakehouse_assets_tests import concurrent_writers as cw

    Lakehouse(**lakehouse_kwargs).write(pa.concat_tables([cw.rows(i, ROWS) for i in range(writers)]), TABLE, partition_by=["day"])


def ours(lakehouse_kwargs: dict, writers: int, mode: str) -> dict:
    """One burst: `writers` processes writing their own day of a fresh table at once."""
    from lakehouse_assets import Lakehouse
    from lakehouse_assets_tests import concurrent_writers as cw

    _populate(lakehouse_kwargs, writers)
    results = cw.run(lakehouse_kwargs, TABLE, list(range(writers)), ROWS, mode=mode)
    landed = [r for r in results if r["ok"]]
    return {
        "landed": len(landed), "writers": writers, "agree": Lakehouse(**lakehouse_kwargs).verify(TABLE)["agree"],
        "attempts": [r["attempts"] for r in landed], "latencies": [r["commit_seconds"] for r in landed],
        "errors": sorted({r["error"][:200] for r in results if not r["ok"]}),
    }


def pooled(bursts: list[dict]) -> dict:
    """A cell's figures over its bursts: the landed writes summed, the percentiles over every landed write's latency."""
    latencies = [s for b in bursts for s in b["latencies"]]
    attempts = [a for b in bursts for a in b.get("attempts", [])]
    out = {
        "bursts": len(bursts), "landed": sum(b["landed"] for b in bursts), "writers": sum(b["writers"] for b in bursts),
        "p50": _percentile(latencies, 0.5) if latencies else None, "p95": _percentile(latencies, 0.95) if latencies else None,
        "errors": sorted({e for b in bursts for e in b["errors"]}),
        "latencies": [sorted(round(s, 4) for s in b["latencies"]) for b in bursts],  # each burst's, for the JSON
    }
    if "agree" in bursts[0]:  # ours: both formats agree after every burst, and the attempts each write took
        out.update(agree=all(b["agree"] for b in bursts), attempts_max=max(attempts, default=0),
                   attempts_mean=statistics.mean(attempts) if attempts else 0)
    return out


def bursts(writers: int) -> int:
    """How many bursts of `writers` give a cell at least MIN_LATENCIES latencies."""
    return max(1, -(-MIN_LATENCIES // writers))


def lone(lakehouse_kwargs: dict, reps: int, days: int) -> float:
    """A lone commit's median: one process at a time overwriting its day of a table of `days` days (the same path and
    the same manifests as each of `days` writers at once, no race)."""
    from lakehouse_assets_tests import concurrent_writers as cw

    _populate(lakehouse_kwargs, max(days, reps))
    return statistics.median(cw.run(lakehouse_kwargs, TABLE, [i], ROWS)[0]["commit_seconds"] for i in range(reps))


def java(spark, catalog: str, writers: int, mode: str, namespace: str) -> dict:
    """N threads of one Spark session writing through Java Iceberg's JdbcCatalog `catalog` at once."""
    from pyspark.sql import functions as F

    table = f"{catalog}.{namespace}.events"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, day DATE, value STRING) USING iceberg PARTITIONED BY (day)")
    first = spark.range(writers * ROWS).select(
        F.col("id"), F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") / ROWS).cast("int")).alias("day"), F.lit("v").alias("value"))
    first.writeTo(table).append()
    frames = [spark.range(i * ROWS, (i + 1) * ROWS).select(F.col("id"), F.date_add(F.lit("2024-01-01").cast("date"), F.lit(i)).alias("day"), F.lit("w").alias("value")).cache()
              for i in range(writers)]
    for f in frames:
        f.count()
    barrier, out = threading.Barrier(writers), [None] * writers

    def write(i: int) -> None:
        barrier.wait()
        t0 = time.monotonic()
        try:
            w = frames[i].writeTo(table)
            w.overwritePartitions() if mode == "overwrite" else w.append()
            out[i] = ("ok", time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - a refused commit is a figure here
            out[i] = (_java_error(e), time.monotonic() - t0)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in frames:
        f.unpersist()
    latencies = [s for status, s in out if status == "ok"]
    return {"landed": len(latencies), "writers": writers, "latencies": latencies, "errors": sorted({status for status, _ in out if status != "ok"})}


def _java_error(e: Exception) -> str:
    """The Java exception behind a Py4J error (its class and message's first line), else the Python one."""
    import re

    found = re.findall(r"((?:org|java)\.[\w.$]+(?:Exception|Error)): ([^\n]{0,140})", str(e))
    return f"{found[-1][0].rsplit('.', 1)[-1]}: {found[-1][1]}" if found else f"{type(e).__name__}: {str(e)[:140]}"


def measure(writer_counts: list[int], catalogs: list[str], reps: int, with_java: bool) -> dict:
    from lakehouse_assets_tests import java_iceberg
    from lakehouse_assets_tests.servers import start_postgres

    results: dict = {"rows": ROWS, "cells": []}
    postgres = start_postgres(Path(tempfile.mkdtemp(prefix="bench-pg-"))) if "postgres" in catalogs else None
    spark = None
    try:
        if with_java and java_iceberg.available():
            from lakehouse_assets.core.spark.session import spark_session

            conf = java_iceberg.spark_conf(tempfile.mkdtemp(prefix="bench-java-hadoop-"))
            if postgres is not None:
                conf["spark.jars"] += "," + java_iceberg.POSTGRES_JDBC_JAR
            spark = spark_session({**conf, "spark.app.name": "bench-concurrent-writers", "spark.sql.shuffle.partitions": "2",
                                   "spark.scheduler.mode": "FAIR"})
        for catalog in catalogs:
            for n in writer_counts:
                for mode in MODES:
                    cell, java_bursts, ours_bursts = {"catalog": catalog, "writers": n, "mode": mode}, [], []
                    for b in range(bursts(n)):  # a fresh table per burst on each side
                        kwargs, java_catalog = catalog_settings(catalog, postgres, f"{catalog}_{n}_{mode}_{b}")
                        ours_bursts.append(ours(kwargs, n, mode))
                        if spark is not None:
                            for key, value in java_catalog(kwargs).items():
                                spark.conf.set(key, value)
                            java_bursts.append(java(spark, kwargs["catalog_name"], n, mode, f"j{n}{mode}{b}"))
                    cell["ours"] = pooled(ours_bursts)
                    if java_bursts:
                        cell["java"] = pooled(java_bursts)
                    print(json.dumps(cell), flush=True)
                    results["cells"].append(cell)
                kwargs, _ = catalog_settings(catalog, postgres, f"{catalog}_{n}_lone")
                results.setdefault("lone", {}).setdefault(catalog, {})[str(n)] = lone(kwargs, reps, n)
    finally:
        if spark is not None:
            spark.stop()
        if postgres is not None:
            postgres.stop()
    return results


def catalog_settings(catalog: str, postgres, name: str, base: str | None = None):
    """The Lakehouse settings of one fresh warehouse (under `base`), and the Spark settings of Java's JdbcCatalog over its catalog."""
    from lakehouse_assets_tests import java_iceberg

    warehouse = tempfile.mkdtemp(prefix=f"bench-{name}-", dir=base)
    if catalog == "sqlite":
        return {"warehouse": warehouse, "catalog_name": name}, lambda kw: java_iceberg.jdbc_catalog_conf(name, warehouse)
    db = postgres.urls["sqlalchemy"]
    return ({"warehouse": warehouse, "catalog_name": name, "catalog_properties": {"type": "sql", "uri": db}},
            lambda kw: java_iceberg.jdbc_catalog_conf(name, warehouse, uri=java_iceberg.postgres_jdbc_uri(db)))


# Whole runs of the workload (Java's writers included), read off their pages: the ratio moves from run to run.
THREE_RUNS = (
    "Three runs of the whole workload (2026-12-05, each cell's p95 over at least 24 writes; the table above is the "
    "third), our overwrites' p95 over N x the lone median, min / median / max: on SQLite 0.93 / 0.94 / 0.98 at 8 "
    "writers, 0.80 / 0.82 / 0.92 at 16, 0.68 / 0.81 / 1.03 at 32; on PostgreSQL 0.79 / 0.84 / 0.96, 0.84 / 0.85 / 0.87, "
    "0.69 / 0.73 / 0.76; appends 0.64 to 0.88. Each cell meets the target at its median of the three runs; of the 36 "
    "cells run, one missed it (SQLite, 32 writers, 1.03 in the third run). Every write of ours landed on its first attempt in "
    "each run; Java's overwrites landed 18 to 20 of 24, 28 to 29 of 32 and 18 to 21 of 32 on SQLite, 18 to 22, 25 to "
    "29 and 17 to 22 on PostgreSQL, with a p95 of 1.45 to 4.89 s."
)
CONTENDED_START = (
    "Where the overwrites' excess over N x the lone median went, at 8 writers on SQLite (each writer's stages timed in "
    "wall clock, thread and process CPU time, 2026-12-05): the first writers to take the lock committed their snapshot "
    "in 41-76 ms of wall clock against 13-14 ms of CPU, while most of the others spent 25-35 ms of CPU writing the "
    "manifest of their added files, where a lone writer spent 2-3 ms (30 ms in one of 8). That time was the kernel's "
    "(system time, one page "
    "fault): pyiceberg opens every file it writes with a 1 MiB buffer, and a process's first buffer of that size took "
    "20-30 ms of system time in about half the writers of a burst. The files a commit writes (manifests, manifest "
    "lists, metadata JSON) are kilobytes, and now get a 64 KiB buffer (core/io/fileio.py): the manifest takes 5 ms of "
    "CPU in a burst. Three runs alternating with the code before (2026-12-05, SQLite, without Java's writers), our "
    "overwrites' p95 over N x the lone median, min / median / max: 1.30 / 1.31 / 1.38 before and 0.87 / 1.00 / 1.06 "
    "after at 8 writers, 1.13 / 1.23 / 1.25 and 0.85 / 0.89 / 0.93 at 16."
)


def render(results: dict) -> str:
    lines = [
        "\n## Concurrent writers (`concurrent_writers`)\n",
        f"N processes each write {results['rows']:,} rows of their own day of one day-partitioned table, their commits "
        "started at once (a barrier); Java Iceberg: N threads of one Spark session through its JdbcCatalog on the same "
        "kind of catalog. `landed`: writes that landed on the first call, without a caller's retry. Latency: from the "
        "barrier to the write's return (ours: the Iceberg commit and the Delta version), p50 / p95 in seconds, over "
        f"every write of the cell: each side runs bursts of N writers on fresh tables until a cell holds at least "
        f"{MIN_LATENCIES} writes (3 bursts at 8, 2 at 16, 1 at 32). "
        "Target: all land, and our p95 at most N x a lone commit's median.\n",
        "| catalog | mode | N | ours landed | attempts (mean / max) | ours p50 / p95 | N x lone | Java landed | Java p50 / p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in results["cells"]:
        o, j = c["ours"], c.get("java") or {}
        bound = c["writers"] * _lone(results, c["catalog"], c["writers"])
        lines.append(
            f"| {c['catalog']} | {c['mode']} | {c['writers']} | {o['landed']}/{o['writers']} | {o['attempts_mean']:.1f} / {o['attempts_max']} | "
            f"{_s(o['p50'])} / {_s(o['p95'])} | {bound:.2f} | {j.get('landed', '-')}/{j.get('writers', '-')} | {_s(j.get('p50'))} / {_s(j.get('p95'))} |"
        )
    lines.append("\nA lone commit's median, on a table of N days: " + "; ".join(
        f"{catalog} " + ", ".join(f"{_lone(results, catalog, n):.3f} s at {n}" for n in sorted({c['writers'] for c in results['cells']}))
        for catalog in results["lone"]) + ".")
    for mode in MODES:
        ratios = [c["ours"]["p95"] / (c["writers"] * _lone(results, c["catalog"], c["writers"])) for c in results["cells"] if c["mode"] == mode and c["ours"]["p95"]]
        if ratios:
            lines.append(f"Our p95 over N x a lone commit's median, {mode}: {min(ratios):.2f}x to {max(ratios):.2f}x.")
    lines.extend([
        "\nWith the commit lock each writer commits once, in turn. The lock has two stages (core/table/commit_lock.py): a "
        "writer commits its Iceberg snapshot holding the first and writes its Delta version holding the second, so the "
        "next writer commits its snapshot while this one writes its Delta version, and the last of N waits for about N "
        "times the longer stage, not N times both. Before it queues, a writer has written what does not depend on the "
        "writers ahead: its data files, the change data of a frame's overwrite, the manifest of its added files. "
        "Holding the first stage it reads the table once (one query of the catalog's row) and what landed since it "
        "planned (re-validating by the snapshots' summaries, which name the partitions each changed, so the check costs "
        "the same for the last writer as for the second), writes again the manifest that listed its day, with the files "
        "it replaces as DELETED entries, and writes the manifest list, the metadata and the catalog's row; the table it "
        "read stands in for the catalog's own read before that swap. The writers waiting for the lock block (in flock, "
        "in PostgreSQL's lock queue) and are woken as it is released. Polling for it instead took the CPU from the "
        "writer committing, on 2 cores: at 32 writers overwriting their day, three runs alternating (2026-12-03), the "
        "p95 on PostgreSQL was 2.68 / 3.50 / 3.59 s blocking against 3.21 / 4.16 / 4.27 s polling (min / median / max), "
        "on SQLite 2.54 / 3.16 / 3.33 s against 2.59 / 3.17 / 3.39 s, within the noise.\n",
        "What each part of the commit path takes off the queue, at 32 writers overwriting their day (p95, two runs each, "
        "without Java's writers, alternating with the path of the row before; 2026-12-04):\n",
        "| commit path | SQLite p95 | PostgreSQL p95 | lone commit (SQLite) |",
        "|---|---|---|---|",
        "| one stage holding both commits | 1.54, 1.57 s | 1.80, 1.76 s | |",
        "| two stages; a frame's change data written before the lock | 0.81, 0.83 s | 1.06, 1.02 s | 0.028, 0.029 s |",
        "| the added files' manifest written before the lock; the removed files recorded in the manifest written again (one manifest fewer); pyiceberg's threads started as the write begins | 0.62, 0.63 s | 0.81, 0.86 s | 0.020, 0.021 s |",
        "| the catalog's row read once under the lock | 0.57, 0.56 s (against 0.64, 0.61 s) | 0.65, 0.73 s (against 0.83, 0.84 s) | 0.018, 0.018 s (against 0.020, 0.019 s) |",
        "",
        "Profiled at 32 writers on SQLite (medians, before the row was read once), the Iceberg stage took 0.018 s: the "
        "re-validation 0.006 s (the catalog's row, the table read again, the snapshots that landed) and the commit 0.012 "
        "s; the Delta stage 0.003 s. A lone commit reads nothing again, so each queued Iceberg stage costs about what a "
        "whole lone commit costs, and the p95 sits near N x a lone commit's median. " + THREE_RUNS + "\n",
        CONTENDED_START,
    ])
    for side, name in (("ours", "Ours"), ("java", "Java's")):
        kinds = sorted({e.split(":")[0] for c in results["cells"] for e in (c.get(side) or {}).get("errors", [])})  # already "Class: message"
        if kinds:
            lines.append(f"\n{name} writes that did not land failed with: {', '.join(kinds)} (after the commit's own retries).")
    return "\n".join(lines) + "\n"


def _lone(results: dict, catalog: str, writers: int) -> float:
    lone_ = results["lone"][catalog]
    return lone_[str(writers)] if isinstance(lone_, dict) else lone_  # (one figure for every N: results of an earlier version)


def _s(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--writers", default="8,16,32")
    p.add_argument("--catalogs", default="sqlite,postgres")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--no-java", action="store_true")
    p.add_argument("--json")
    p.add_argument("--markdown", help="append the section to this page")
    p.add_argument("--render", default=None, help="measure nothing: the section from this --json file")
    args = p.parse_args()
    if args.render:
        results = json.loads(Path(args.render).read_text())
    else:
        results = measure([int(n) for n in args.writers.split(",")], args.catalogs.split(","), args.reps, not args.no_java)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    section = render(results)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(section)
    print(section)


if __name__ == "__main__":
    main()

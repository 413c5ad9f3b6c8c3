"""DELETE and UPDATE by condition, ours against Java Iceberg's Spark SQL, on the same rows.

Four tables hold the same `--rows` (default 2,000,000) rows in 8 bucket files (`bucket(8, id)`, the merge-on-read
bench's events): ours copy-on-write, ours merge-on-read (`write.delete.mode` / `write.update.mode`), Java Iceberg's
copy-on-write and merge-on-read (format v2). Then, in one Spark session, `--reps` (5) rounds, sides alternating:

  delete    0.1% of the rows by a condition that no file's statistics can exclude (`id % 1000 = r`, a new r each
            round): `Lakehouse.delete` against `DELETE FROM`
  update    0.1% of the rows the same way, one column set: `Lakehouse.update` against `UPDATE ... SET`
  erase     one subject (`id = k`, one row) on the copy-on-write tables: `Lakehouse.erase` (the row out of every file,
            the history that held it ended, the proof that decodes every file) against Java's recipe for the same:
            `DELETE FROM`, `expire_snapshots` keeping the last one, `remove_orphan_files` older than now

Ours commits both formats (an Iceberg snapshot and a Delta version with its change data); Java commits Iceberg only.
After the rounds the tables are compared (row count, key sum, a hash of every value). Every figure is min / median /
max seconds; the ratio is ours over Java's median of the same strategy.

    .venv/bin/python bench/deletes.py [--rows 2000000] [--reps 5] [--json out.json] [--markdown page.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.merge_on_read import BUCKETS, COLUMNS, events, now, spread  # noqa: E402 - after the path

NAMESPACE = "delete_bench"
OPERATIONS = ("delete", "update", "erase")
STRATEGIES = ("copy-on-write", "merge-on-read")
MODES = ("write.delete.mode", "write.update.mode", "write.merge.mode")


def create(spark, lh, catalog: str, rows: int) -> dict[tuple[str, str], str]:
    """The four tables: (side, strategy) -> name."""
    from pyspark.sql import functions as F

    from lakehouse_assets import TableOptions

    base = events(spark, 0, rows).cache()
    base.count()
    names = {}
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{NAMESPACE}")
    for strategy in STRATEGIES:
        short = strategy.split("-")[0]
        names[("ours", strategy)] = f"{NAMESPACE}.ours_{short}"
        lh.write(base, names[("ours", strategy)], partition_by=[f"bucket({BUCKETS}, id)"], table=TableOptions(properties={m: strategy for m in MODES}))
        names[("java", strategy)] = f"{catalog}.{NAMESPACE}.java_{short}"
        writer = base.writeTo(names[("java", strategy)]).using("iceberg").partitionedBy(F.bucket(BUCKETS, "id"))
        for key, value in {**{m: strategy for m in MODES}, "format-version": "2", "write.parquet.compression-codec": "zstd"}.items():
            writer = writer.tableProperty(key, value)
        writer.create()
    base.unpersist()
    return names


def operations(spark, lh, names, op: str, residue: int) -> dict[tuple[str, str], callable]:
    where = f"id % 1000 = {residue}"
    out = {}
    if op == "erase":
        return erase_operations(spark, lh, names, f"id = {residue}")
    for strategy in STRATEGIES:
        ours, java = names[("ours", strategy)], names[("java", strategy)]
        if op == "delete":
            out[("ours", strategy)] = lambda ours=ours: lh.delete(ours, where, spark=spark)
            out[("java", strategy)] = lambda java=java: spark.sql(f"DELETE FROM {java} WHERE {where}").collect()
        else:
            out[("ours", strategy)] = lambda ours=ours: lh.update(ours, {"amount": "amount + 1"}, where, spark=spark)
            out[("java", strategy)] = lambda java=java: spark.sql(f"UPDATE {java} SET amount = amount + 1 WHERE {where}").collect()
    return out


def erase_operations(spark, lh, names, where: str) -> dict[tuple[str, str], callable]:
    ours, java = names[("ours", "copy-on-write")], names[("java", "copy-on-write")]
    catalog, table = java.split(".", 1)

    def java_erase():
        spark.sql(f"DELETE FROM {java} WHERE {where}").collect()
        now = spark.sql("SELECT current_timestamp() AS t").first()["t"]
        spark.sql(f"CALL {catalog}.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '{now}', retain_last => 1)").collect()
        # The procedure refuses an interval under 24 hours; Iceberg's action API (what it calls) takes any.
        jvm = spark._jvm
        iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, java)
        jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).deleteOrphanFiles(iceberg_table).olderThan(int(time.time() * 1000)).execute()

    def ours_erase():
        assert lh.erase(ours, where, spark=spark)["proof"]["erased"]

    return {("ours", "copy-on-write"): ours_erase, ("java", "copy-on-write"): java_erase}


def fingerprint(spark, lh, names, key) -> tuple:
    from pyspark.sql import functions as F

    side, _ = key
    frame = spark.table(names[key]) if side == "java" else lh.read(spark, names[key])
    row = frame.agg(F.count(F.lit(1)), F.sum("id"), F.sum(F.hash(*[F.col(c) for c in COLUMNS]))).first()
    return tuple(row)


def measure(spark, lh, catalog: str, rows: int, reps: int) -> dict:
    names = create(spark, lh, catalog, rows)
    load_before = os.getloadavg()
    times: dict[str, dict[str, list[float]]] = {op: {f"{s} {t}": [] for s, t in names} for op in OPERATIONS}
    times["erase"] = {"ours copy-on-write": [], "java copy-on-write": []}
    for i in range(reps):
        for op in OPERATIONS:
            # delete and update: residues 1 + 37i and 500 + 37i; erase: the one row id 250 + 1000i (residue 250, untouched)
            fns = operations(spark, lh, names, op, 250 + 1000 * i if op == "erase" else (i * 37 + (1 if op == "delete" else 500)) % 1000)
            order = list(fns) if i % 2 == 0 else list(fns)[::-1]
            line = []
            for key in order:
                t0 = time.perf_counter()
                fns[key]()
                seconds = time.perf_counter() - t0
                times[op][f"{key[0]} {key[1]}"].append(seconds)
                line.append(f"{key[0]} {key[1]} {seconds:.2f}s")
            print(f"  round {i + 1} {op}: " + ", ".join(line), flush=True)
    prints = {key: fingerprint(spark, lh, names, key) for key in names}
    for strategy in STRATEGIES:  # the erase ran on the copy-on-write pair only
        assert prints[("ours", strategy)] == prints[("java", strategy)], f"the {strategy} tables disagree after the rounds: {prints}"
    return {"rows": rows, "reps": reps, "seconds": {op: {k: spread(v) for k, v in sides.items()} for op, sides in times.items()},
            "load_average": [load_before, os.getloadavg()], "measured_at": now()}


def markdown(result: dict) -> str:
    lines = [
        "",
        "## Deletes and updates by condition (`deletes`)",
        "",
        f"`bench/deletes.py` (run by `make bench`; see its docstring): {result['rows']:,} rows in 8 bucket files, {result['reps']} rounds of a",
        "delete and an update of 0.1% of the rows each, by a condition no file's statistics exclude (every file holds",
        "matches), and the erasure of one row (one subject) from the copy-on-write tables, sides alternating. Ours commits",
        "both formats with the Delta change data; Java commits Iceberg. Ours erases with `Lakehouse.erase` (the history",
        "before it ended, the proof decoding every file included); Java with `DELETE FROM`, `expire_snapshots` keeping the",
        "last snapshot and orphan file removal older than now. Seconds, min / median / max; ratio: ours over Java's median",
        "for the same strategy.",
        "",
        "| operation | strategy | ours | Java Iceberg | ratio |",
        "|---|---|---|---|---|",
    ]
    ratios = {}
    for op, sides in result["seconds"].items():
        for strategy in STRATEGIES:
            if f"ours {strategy}" not in sides:
                continue  # erase: copy-on-write only
            ours, java = sides[f"ours {strategy}"], sides[f"java {strategy}"]
            ratio = ours["median"] / java["median"]
            ratios[(op, strategy)] = ratio
            cell = lambda s: f"{s['min']:.2f} / {s['median']:.2f} / {s['max']:.2f}"  # noqa: E731
            lines.append(f"| {op} | {strategy} | {cell(ours)} | {cell(java)} | {ratio:.2f}x |")
    before, after = result["load_average"]
    lines += ["", f"Measured {result['measured_at']}; load average {before[0]:.1f} before, {after[0]:.1f} after.", "", *NOTES, ""]
    return "\n".join(lines)


NOTES = [
    "Run to run: four runs of this bench in one hour (2026-12-07 02:12-02:20 UTC, the code before and after the",
    "copy-on-write delete's one scan below taking turns) gave these ratios: copy-on-write delete 0.43x and 0.45x",
    "before, 0.39x and 0.37x after; merge-on-read delete 0.79x to 0.93x; copy-on-write update 0.42x to 0.49x;",
    "merge-on-read update 0.73x to 0.82x; erase 0.41x to 0.48x.",
    "",
    "Where the time goes (each phase timed on the driver, 2,000,000 rows, rounds after the first, 2026-12-03):",
    "",
    "- Copy-on-write delete: one scan by Spark's own vectorised reader of the condition's columns finds the matched",
    "  rows' positions (its row index) and brings them to the driver, 0.30-0.48 s (2026-12-07; the candidate files",
    "  hold at most 5,000,000 rows, so their positions fit on the driver without counting the matches first: cached",
    "  and counted first, the same step took 0.44-0.64 s in the same hour); pyarrow tasks rewrite each of the eight",
    "  files without them, as compaction does (no row of the file passes through Spark), and write the change data",
    "  from the rows they leave out, 0.61-0.83 s; both commits 0.02 s. In bench runs alternating the two (two each,",
    "  2026-12-07), the delete's median took 1.19 s and 1.15 s against 1.32 s and 1.13 s.",
    "- Copy-on-write update (no contract, no required column set: nothing to check before writing): one Spark job.",
    "  Its first stage scans the condition's and the new values' columns and shuffles the matched rows' new values",
    "  to their file's task, 0.3-0.5 s (two tasks); the second stage's tasks put them into the rows they read and",
    "  write each file and its change data (pre- and post-images of the rows that changed), 1.1-1.5 s on two cores,",
    "  most of it writing the eight files (zstd level 3, as Java writes them: 0.16 s of CPU a file alone, 0.25-0.29",
    "  s in the stage). Of a 2.34 s round profiled on the driver, the job is 1.94 s; checking the condition and the",
    "  SET expressions with Spark's analyser 0.1 s, the commits 0.06 s. A table with a contract, or an update of a",
    "  required column, first counts and checks the new rows (one more scan, cached for the rewrite). The first",
    "  round of a process takes 2-3 s more on both sides (ours: the Python workers start and import the writer).",
    "- Merge-on-read: no data file is rewritten. A delete: one scan by Spark's own vectorised reader of the",
    "  condition's columns finds the matched rows' positions (its row index), 0.27-0.41 s of a 0.58-0.73 s round",
    "  profiled alone (2026-12-04); the positions deleted before are taken out on the driver; pyarrow tasks read each",
    "  file holding a match and write the rows at its positions as change data, 0.20-0.26 s; the delete files and both",
    "  commits 0.03-0.07 s. An update with nothing to check first is one job, as the copy-on-write update: its scan",
    "  computes the new values and shuffles them to their file's task, which reads the rows at their positions, writes",
    "  them with the new values into one new file and writes their pre- and post-images, 0.57-0.75 s of a 0.71-0.87 s",
    "  round. Caching the scan's matched rows, every column, to give both the change data and the new rows took",
    "  0.52-0.58 s for the cached scan and its collect alone. Java's merge-on-read DELETE does the one scan and writes",
    "  delete files only.",
    "- Java Iceberg writes no change data; ours writes the Delta change feed of every delete and update (the deleted",
    "  rows, each update's pre- and post-image) and commits both formats.",
    "- What bounds a merge-on-read delete here (the 2,000,000 rows in 8 files, the machine otherwise idle, 2026-12-06):",
    "  Spark's scan of the `id` column for `id % 1000 = r`, its positions collected, took 0.24-0.35 s alone (median",
    "  0.27 s); an empty job of 8 Python tasks 0.14-0.19 s; the same positions read and found with pyarrow and numpy",
    "  in one thread 0.04-0.06 s. The 0.3x target (0.18 s against Java's 0.60 s) lies below Spark's own scan of the",
    "  condition: reaching it means deciding the rows without Spark, which only a condition read exactly outside Spark",
    "  could allow (here Spark SQL decides the rows, as everywhere). Writing the change data in the scan's job instead of",
    "  a second one (the matched positions going on to pyarrow tasks after the scan) measured no gain, medians of 0.68-0.92",
    "  s against 0.75-1.00 s a delete in alternating fresh processes, and was left out. Measured again on 2026-12-07 with",
    "  the scan's own tasks reading the matched rows and writing the change data (no second job; two fresh processes a",
    "  side, alternating, six rounds each): the delete of 0.1% took 0.56-0.88 s against 0.59-0.82 s, and a one-row",
    "  delete (`id = N`, one bucket file) 0.26-0.41 s against 0.25-0.42 s.",
    "- What bounds a merge-on-read update here (2026-12-07, rounds timed on the driver and in the tasks): 0.16 s on",
    "  the driver before the job (the condition and the SET expression checked by Spark's analyser, the planning, the",
    "  DataFrame over the files); the job 0.69-0.86 s: Spark's scan of `id` and `amount`, the shuffle of the matched",
    "  rows' new values to their file's task, and in each task 0.03 s a file (pyarrow reads it, takes its 250 rows,",
    "  writes them with their new values and their change data); the commits 0.05 s. Without the shuffle (the scan's",
    "  own tasks taking the rows) the job took 0.66-0.82 s: the scan reached its Python tasks 0.35 s after the job",
    "  began, and Spark packs the files into its scan tasks by size, in some rounds seven of the eight into one task,",
    "  whose Python side then reads seven files alone. Java's merge-on-read UPDATE took 0.94-1.10 s (its medians in",
    "  four runs of this bench, 2026-12-07): the 0.5x target (about 0.5 s) is below the driver's 0.16 s, that scan's",
    "  0.35 s and the commits' 0.05 s together, before any file is read for the new rows.",
    "- Erase (its report's `seconds`, 2,000,000 rows): the row out of its file 1.6-1.9 s (the condition prunes to the one",
    "  bucket file that may hold it, rewritten without it); ending the history 0.2 s (the manifests written again, the",
    "  expiry, the Delta checkpoint and log truncation, the files deleted); the proof 0.7-1 s, most of it one Spark scan",
    "  of every row for the condition. Java's recipe rewrites the same file; its orphan removal lists every file under",
    "  the table and compares them with every retained snapshot's in a Spark job. It leaves the deleting snapshot's",
    "  manifests, which keep the removed file's column bounds: the erased values, when they are a file's min or max.",
]


def main() -> None:
    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.spark.session import spark_session
    from lakehouse_assets_tests import java_iceberg

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None, help="append the performance page's section to this file")
    p.add_argument("--render", default=None, help="measure nothing: the section from this --json file")
    args = p.parse_args()
    if args.render:
        result = json.loads(open(args.render).read())
    else:
        root = tempfile.mkdtemp(prefix="bench-deletes-")
        spark = spark_session({
            **java_iceberg.spark_conf(os.path.join(root, "java")), "spark.app.name": "bench-deletes", "spark.driver.memory": args.driver_memory,
            "spark.sql.parquet.compression.codec": "zstd", "spark.sql.shuffle.partitions": str(BUCKETS),
        })
        try:
            result = measure(spark, Lakehouse(os.path.join(root, "ours")), java_iceberg.CATALOG, args.rows, args.reps)
        finally:
            spark.stop()
            shutil.rmtree(root, ignore_errors=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
    section = markdown(result)
    print(section)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(section)


if __name__ == "__main__":
    main()

"""The `table_size` workload: what a write costs as the table grows, when the change does not.

Per size (1,000, 10,000 and 100,000 files; `--files`), in a process of its own: that many tiny Parquet files (10 rows
each) in 100 Hive-style day folders, where the first day always holds the same 10 files and the others share the
rest; imported in place (`Lakehouse.import_table`, both formats over the files as they are). A second copy of the
folder is imported into a second warehouse, whose table Java Iceberg writes through its JdbcCatalog over that
warehouse's SQLite catalog (the same Iceberg table kind, the same files). Then, in a fresh process with Spark (as a
Dagster run meets a table another process made: the import's leftovers in memory are not the operations' to carry),
the sides taking turns:

- append: 10 new rows into the first day (ours, both formats; Java `writeTo().append()`);
- merge: 10 rows of the first day updated by key and day (ours `keys=["id", "day"]`; Java `MERGE INTO ... ON t.id = b.id
  AND t.day = b.day`: the same condition);
- delete: the row the round's append added with the smallest id deleted by a condition on the day and the id (ours
  `Lakehouse.delete`; Java `DELETE FROM`), copy-on-write: that file rewritten without it;
- check: the blocking `formats_agree` check after those writes, which compares what changed since the pair of
  versions its previous run found agreeing (`Lakehouse.verify(..., since=...)`; Java has no second format);
- health: the table's health as the sensors and each write's materialization read it (files, small files, deletes,
  snapshots, the Delta log and its lag); a process reads each manifest's figures once, so after its first reading
  (reported apart) it reads only the manifests written since;
- verify: the full comparison of every live file (`lakehouse verify`, on demand and in maintenance), before the
  rounds, in a process of its own as the command runs it: its time and its peak over that process. The pair of
  versions it finds agreeing is the one the first check compares from (as the check's previous run would leave it);
  the operations' process never holds what a full comparison reads;
- read: the first day's rows counted (ours `Lakehouse.read` with a row filter; Java `spark.table(...).where(...)`);
- delta-rs read: the same count by delta-rs over the Delta side of our table (`DeltaTable(...)` opened in a process of
  its own each time, as a reader's process opens it, and counted by its `QueryBuilder`): a Delta reader's own cost,
  not ours, and its memory not held by the operations' process.

Each figure is the median of `--reps`. Every size's process lives through the whole run and the sizes take turns a
round at a time (ascending, then descending), one running at a time: a machine that slows during the hour the largest
size takes slows every size alike, instead of reading as the table's growth. The Python driver's peak RSS is measured
per operation (Linux: the peak is reset before each run, /proc/self/clear_refs, and read after it, VmHWM): the highest
of ours' operations, and the whole process's for reference; and each operation's peak over what the process held when
it began, with the most it held; the full verify's apart, in its own process. The target: each of ours within 1.5x
between the smallest and the largest table, and the peak memory of the writes, the check and the read flat.

The section names its run (dates and options) and then prints bench/table_size_notes.py: runs measured apart from
`make bench` and where the growth goes, kept there so each new run writes them again.

    .venv/bin/python bench/table_size.py [--files 1000,10000,100000,1000000] [--reps 5] [--java-max-files 100000]
        [--java-merge-max-files 100000] [--json out.json] [--markdown page.md]
    .venv/bin/python bench/table_size.py --render out.json --markdown page.md   # the section from an earlier run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.table_size_notes import MEASURED_APART, WHERE_THE_GROWTH_GOES  # noqa: E402 - after the path

DAYS, ROWS_PER_FILE, HOT_FILES = 100, 10, 10
HOT_DAY = "2024-01-01"
OPERATIONS = ("append", "merge", "delete", "check", "health", "read", "delta-rs read")
# Ours: the figures held to 1.5x and whose memory the driver rows report. "delta-rs read" is another engine's cost of
# reading our Delta side (delta-rs opening the table at its latest version, as any Delta reader does, and counting
# the first day's rows): what a user of that format pays as the table grows.
OURS = ("append", "merge", "delete", "check", "health", "read")


def make_files(root: str, files: int) -> None:
    """`files` Parquet files of ROWS_PER_FILE rows under `root/day=.../`: HOT_FILES in the first day, the rest spread over the others."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    days = [(dt.date(2024, 1, 1) + dt.timedelta(days=d)).isoformat() for d in range(DAYS)]
    for i in range(files):
        day = days[0] if i < HOT_FILES else days[1 + (i - HOT_FILES) % (DAYS - 1)]
        folder = os.path.join(root, f"day={day}")
        os.makedirs(folder, exist_ok=True)
        ids = pa.array(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE), pa.int64())
        pq.write_table(pa.table({"id": ids, "v": ids}), os.path.join(folder, f"part-{i:06d}.parquet"))


def one_size(spark, files: int, reps: int, root: str, java: bool = True, java_merge: bool = True) -> dict:
    """The tables made and imported under `root`, then the operations on them, in this process (the suite's tiny run)."""
    made = prepare(files, root, java)
    return {**made, **operate(spark, files, reps, root, made["java_catalog"], java_merge=java_merge)}


def prepare(files: int, root: str, java: bool = True) -> dict:
    """`files` files made under `root` and imported in place; a copy imported for Java Iceberg's side too when `java`.
    Its own process in `make bench`: what the import leaves resident (pyiceberg's entries of every file, the
    allocator's freed pages) is not the operations' to carry."""
    import uuid

    from lakehouse_assets import Lakehouse

    t0 = time.perf_counter()
    make_files(os.path.join(root, "ours-files"), files)
    if java:
        shutil.copytree(os.path.join(root, "ours-files"), os.path.join(root, "java-files"))
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    Lakehouse(os.path.join(root, "ours")).import_table("ts.t", os.path.join(root, "ours-files"))
    imported = time.perf_counter() - t0
    # Java's JdbcCatalog names its catalog like the lakehouse's; a catalog is built once per session: one name per warehouse.
    java_catalog = f"table_size_{uuid.uuid4().hex[:8]}" if java else None
    if java:
        Lakehouse(os.path.join(root, "java"), catalog_name=java_catalog).import_table("ts.t", os.path.join(root, "java-files"))
    return {"make_seconds": made, "import_seconds": imported, "java_catalog": java_catalog,
            "import_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def operate(spark, files: int, reps: int, root: str, java_catalog: str | None, turn=lambda rep: None, java_merge: bool = True) -> dict:
    """The operations on the tables `prepare` made under `root`, on `spark` (with Java Iceberg's jars); Java's side too
    when it made Java's copy (`java_catalog`), its MERGE INTO only when `java_merge` (it reads every file of the table:
    733 s at 1,000,000 files here). `turn(rep)` returns when round `rep` may start (`make bench`: when the other
    sizes' processes have run theirs)."""
    from pyspark.sql import functions as F

    from lakehouse_assets import Lakehouse, MergeOptions, VerifiedPair
    from lakehouse_assets.core.maintenance import table_health
    from lakehouse_assets_tests import java_iceberg

    java = java_catalog is not None
    ours = Lakehouse(os.path.join(root, "ours"))
    if java:
        for key, value in java_iceberg.jdbc_catalog_conf(java_catalog, os.path.join(root, "java")).items():
            spark.conf.set(key, value)
    java_table = f"{java_catalog}.ts.t"
    hot_ids = list(range(0, ROWS_PER_FILE * HOT_FILES, ROWS_PER_FILE))  # one row of each of the first day's files

    def first_new_id(rep: int) -> int:
        return 10 * files * ROWS_PER_FILE + rep * 10

    def new_rows(rep: int):
        start = first_new_id(rep)
        return spark.range(start, start + 10, numPartitions=1).select("id", F.col("id").alias("v"), F.lit(HOT_DAY).alias("day"))

    def updates(rep: int):
        return spark.createDataFrame([(i, -rep - 1, HOT_DAY) for i in hot_ids], "id long, v long, day string")

    def java_merge_into(df):
        df.createOrReplaceTempView("table_size_batch")
        spark.sql(f"MERGE INTO {java_table} t USING table_size_batch b ON t.id = b.id AND t.day = b.day "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

    day_filter = f"day = '{HOT_DAY}'"

    def deleted(rep: int) -> str:
        return f"{day_filter} AND id = {first_new_id(rep)}"

    delta_root = ours.load("ts.t").location()  # (found once: delta-rs's read alone is timed)
    fresh_verify = verify_in_fresh_process(os.path.join(root, "ours"))
    verified = [VerifiedPair(fresh_verify["iceberg_snapshot_id"], fresh_verify["delta_version"])]

    def check(rep: int) -> None:
        report = _agree(ours.verify("ts.t", since=verified[-1]))
        if not report["compared"].startswith("what changed since"):
            raise AssertionError(f"the check compared {report['compared']}, not what changed since the last one")
        verified.append(VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"]))

    sides = {
        "append": {"ours": lambda rep: ours.write(new_rows(rep), "ts.t"),
                   "java": lambda rep: new_rows(rep).writeTo(java_table).append()},
        "merge": {"ours": lambda rep: ours.write(updates(rep), "ts.t", mode="merge", merge=MergeOptions(keys=["id", "day"])),
                  "java": lambda rep: java_merge_into(updates(rep))},
        "delete": {"ours": lambda rep: ours.delete("ts.t", where=deleted(rep)),
                   "java": lambda rep: spark.sql(f"DELETE FROM {java_table} WHERE {deleted(rep)}")},
        "check": {"ours": check},
        "health": {"ours": lambda rep: table_health(ours.context, "ts.t")},
        "read": {"ours": lambda rep: ours.read(spark, "ts.t", row_filter=day_filter).count(),
                 "java": lambda rep: spark.table(java_table).where(day_filter).count()},
        "delta-rs read": {"ours": lambda rep: _delta_rs_count_apart(delta_root)},
    }
    if not java:
        sides = {op: {side: fn for side, fn in fns.items() if side == "ours"} for op, fns in sides.items()}
    elif not java_merge:
        del sides["merge"]["java"]
    times = {op: {side: [] for side in fns} for op, fns in sides.items()}
    peak_mb = {op: 0.0 for op in sides}  # ours: the driver's highest resident memory during each operation
    added_mb = {op: 0.0 for op in sides}  # ours: that peak over what the process held when the operation began
    held_mb = 0.0  # ours: the most the process held when one began
    first_round: dict[str, float] = {}  # ours, the untimed first round: the first of each operation after the import
    for rep in range(reps + 1):  # the first round warms both sides up, untimed
        turn(rep)
        for op, fns in sides.items():
            for side in (list(fns) if rep % 2 == 0 else list(fns)[::-1]):
                if side == "ours":
                    _reset_peak_rss()
                    before = _rss_mb("VmRSS:")
                t0 = time.perf_counter()
                done = fns[side](rep)
                seconds = float(done) if isinstance(done, Timed) else time.perf_counter() - t0
                if rep:
                    times[op][side].append(seconds)
                elif side == "ours":
                    first_round[op] = seconds
                if side == "ours" and rep:
                    peak_mb[op] = max(peak_mb[op], _rss_mb("VmHWM:"))
                    added_mb[op], held_mb = max(added_mb[op], _rss_mb("VmHWM:") - before), max(held_mb, before)
        if rep:
            print(f"  table_size {files:,} files rep {rep}: " + ", ".join(f"{op} {side} {t[-1]:.2f}s" for op, s in times.items() for side, t in s.items()), flush=True)
    expected = files * ROWS_PER_FILE + 9 * (reps + 1)  # each round appends 10 rows and deletes one
    counted = {"ours": ours.read(spark, "ts.t").count(), "delta-rs": _delta_rs_count(delta_root, day=None),
               **({"java": spark.table(java_table).count()} if java else {})}
    if set(counted.values()) != {expected}:
        raise AssertionError(f"table_size {files}: expected {expected} rows on each side, found {counted}")
    return {
        "files": files, "live_files": len(ours.load("ts.t").inspect.files()),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_mb": peak_mb, "added_mb": added_mb,
        "held_mb": held_mb, "times": times, "first_round": first_round, "fresh_verify": fresh_verify,
    }


class Timed(float):
    """The seconds an operation took where it ran (another process), excluding that process's start."""


DELTA_RS_COUNT = """
import sys, time
sys.path.insert(0, {bench!r})
import deltalake  # noqa: F401 - imported before the clock starts
import table_size
t0 = time.perf_counter()
n = table_size._delta_rs_count({location!r})
print(n, time.perf_counter() - t0)
"""


def _delta_rs_count_apart(location: str) -> Timed:
    """`_delta_rs_count` in a process of its own, as a Delta reader's process opens the table: what it holds (its state
    of every live file: about 570 MB at 1,000,000 files) is not this process's to carry. Its time: the open and the
    count, not the interpreter's start nor deltalake's import."""
    script = DELTA_RS_COUNT.format(bench=os.path.dirname(os.path.abspath(__file__)), location=location)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    _, seconds = done.stdout.split()
    return Timed(seconds)


def _delta_rs_count(location: str, day: str | None = HOT_DAY) -> int:
    """`day`'s rows (None: every row) as delta-rs reads them from the Delta side: the table opened at its latest
    version, the count by delta-rs's own query engine (DataFusion), which prunes the files by their partition values.
    (`to_pyarrow_dataset()` filtered afterwards builds a fragment per live file first: at 1,000,000 files, 157 s.)"""
    from deltalake import DeltaTable, QueryBuilder

    where = "" if day is None else f" WHERE day = '{day}'"
    result = QueryBuilder().register("t", DeltaTable(location)).execute(f"SELECT count(*) AS n FROM t{where}").read_all()
    return result.column("n")[0].as_py()


def _reset_peak_rss() -> None:
    """Linux: start the process's peak resident memory (VmHWM) again from its current size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _rss_mb(key: str) -> float:
    """Linux: this process's resident memory (`VmRSS:`) or its peak (`VmHWM:`), MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024


FRESH_VERIFY = """
import json, sys, time
sys.path.insert(0, {repo!r})
from lakehouse_assets import Lakehouse
def rss(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024
lh = Lakehouse({warehouse!r})
lh.load("ts.t")
before = rss("VmRSS:")
t0 = time.perf_counter()
report = lh.verify("ts.t")
print(json.dumps({{"seconds": time.perf_counter() - t0, "before_mb": before, "peak_mb": rss("VmHWM:"), "agree": report["agree"],
                  "iceberg_snapshot_id": report["iceberg_snapshot_id"], "delta_version": report["delta_version"]}}))
"""


def verify_in_fresh_process(warehouse: str) -> dict:
    """The full verify as `lakehouse verify` runs it: a process that has read nothing of the table but its metadata."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", FRESH_VERIFY.format(repo=repo, warehouse=warehouse)], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["agree"]:
        raise AssertionError(f"verify in a fresh process disagrees at {warehouse}")
    return result


def _operate_in_process(files: int, reps: int, root: str, java_catalog: str | None, java_merge: bool = True) -> dict:
    """`operate` in this process, each round on the coordinator's word (`measure`): this process says it waits, on its
    standard output, and the coordinator's line on its standard input starts the round."""
    from lakehouse_assets.core.spark.session import spark_session
    from lakehouse_assets_tests import java_iceberg

    def turn(rep: int) -> None:
        print(f"{WAITING} {rep}", flush=True)
        if not sys.stdin.readline():
            raise SystemExit(f"table_size {files}: the coordinator went away before round {rep}")

    spark = spark_session({**java_iceberg.spark_conf(os.path.join(root, "java-hadoop")), "spark.app.name": "bench-table-size", "spark.sql.shuffle.partitions": "8"})
    try:
        return operate(spark, files, reps, root, java_catalog, turn, java_merge)
    finally:
        spark.stop()


def _agree(report: dict) -> dict:
    if not report["agree"]:
        raise AssertionError(f"verify disagrees: {report['differences'][:3]}")
    return report


def measure(sizes: list[int], reps: int, tmp: str | None = None, java_max_files: int = 100_000, java_merge_max_files: int = 100_000) -> list[dict]:
    """Each size made and imported in a process, then measured in a fresh one (its peak RSS is that size's operations'
    alone). The sizes take turns round by round (ascending, then descending, ...), one process running at a time, so
    a machine that slows during the run slows every size alike instead of reading as growth."""
    roots = {files: tempfile.mkdtemp(prefix=f"bench-table-size-{files}-", dir=tmp) for files in sizes}
    try:
        made = {files: _subprocess(["--prepare", str(files), "--root", roots[files]] + ([] if files <= java_max_files else ["--no-java"]), files)
                for files in sizes}
        procs: dict[int, _Operations] = {}
        with tempfile.TemporaryDirectory() as logs:
            try:
                for files in sizes:  # one at a time: each starts its Spark and runs its fresh verify alone
                    java = ["--java-catalog", made[files]["java_catalog"]] if made[files]["java_catalog"] else []
                    java += ["--no-java-merge"] if java and files > java_merge_max_files else []
                    procs[files] = _Operations(["--one", str(files), "--root", roots[files], "--reps", str(reps), *java], files, logs)
                    procs[files].until_waiting()
                for rep in range(reps + 1):
                    for files in (sizes if rep % 2 == 0 else sizes[::-1]):
                        procs[files].run_round(last=rep == reps)
                return [{**made[files], **procs[files].result} for files in sizes]
            finally:
                for proc in procs.values():  # a size that failed leaves the others waiting for their turn
                    proc.close()
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


WAITING = "TABLE_SIZE_WAITING"


class _Operations:
    """One size's `--one` process, driven a round at a time: its lines echoed, its result read when it ends."""

    def __init__(self, args: list[str], files: int, logs: str):
        self.files, self.result = files, None
        self.stderr = open(os.path.join(logs, f"{files}.err"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)

    def until_waiting(self) -> None:
        """Echo the process's lines until it waits for its next round; keep its result if it ends."""
        for line in self.proc.stdout:
            if line.startswith(WAITING):
                return
            if line.startswith("TABLE_SIZE "):
                self.result = json.loads(line.split(" ", 1)[1])
            else:
                print(line, end="", flush=True)
        if self.proc.wait() != 0 or self.result is None:
            self.stderr.seek(0)
            raise RuntimeError(f"table_size {self.files} (--one) failed:\n{self.stderr.read()[-4000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()

    def run_round(self, last: bool) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        if last:
            self.proc.stdin.close()
        self.until_waiting()


def _subprocess(args: list[str], files: int) -> dict:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True)
    print(done.stdout[-4000:], flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"table_size {files} ({args[0]}) failed:\n{done.stderr[-4000:]}")
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("TABLE_SIZE ")).split(" ", 1)[1])


def render(results: list[dict]) -> str:
    """The section of the performance page: per operation and size, ours and Java (median s), and ours' growth."""
    small, large = results[0], results[-1]
    sizes = ", ".join(f"{r['files']:,}" for r in results)
    lines = [
        "## Cost as the table grows (`table_size`)",
        "",
        f"Tables of {sizes} tiny files in {DAYS} day folders, imported in place; "
        f"the first day always holds the same {HOT_FILES} files, and every operation touches only that day. Median seconds "
        f"of {len(small['times']['append']['ours'])} runs, the sizes taking turns a round at a time (each in a process of its own, one "
        "running at a time); ours writes both formats, Java Iceberg (through its JdbcCatalog, "
        "on a copy of the same table) one; delta-rs reads the Delta side of ours (a Delta reader's own cost, not ours). "
        "Target: each of ours within 1.5x from the smallest to the largest table.",
        "",
        "| operation | " + " | ".join(f"ours, {r['files']:,} files" for r in results) + f" | ours {large['files']:,} / {small['files']:,} | "
        + " | ".join(f"Java, {r['files']:,} files" for r in results) + " |",
        "|---|" + "---|" * (2 * len(results) + 1),
    ]
    for op in OPERATIONS:
        ours = [statistics.median(r["times"][op]["ours"]) for r in results]
        java = [statistics.median(r["times"][op]["java"]) if "java" in r["times"][op] else None for r in results]
        lines.append(f"| {op} | " + " | ".join(f"{v:.2f}" for v in ours) + f" | {_ratio(ours[-1], ours[0])} | "
                     + " | ".join("" if v is None else f"{v:.2f}" for v in java) + " |")
    rows = [("driver peak RSS (MB), " + ", ".join(OURS), [max(r["peak_mb"][op] for op in OURS) for r in results])]
    if all("added_mb" in r for r in results):
        rows += [("driver memory held when an operation begins (MB)", [r["held_mb"] for r in results]),
                 ("driver peak over it (MB), " + ", ".join(OURS), [max(r["added_mb"][op] for op in OURS) for r in results])]
    if all("fresh_verify" in r for r in results):
        rows += [("verify in a fresh process (s)", [r["fresh_verify"]["seconds"] for r in results]),
                 ("its peak over the process before it (MB)", [r["fresh_verify"]["peak_mb"] - r["fresh_verify"]["before_mb"] for r in results])]
    for label, values in rows:
        digits = 2 if label.endswith("(s)") else 0
        lines.append(f"| {label} | " + " | ".join(f"{v:.{digits}f}" for v in values) + f" | {_ratio(values[-1], values[0])} | " + " | " * (len(results) - 1) + " |")
    lines += ["", "Setup per size (not timed above): " + "; ".join(
        f"{r['files']:,} files made in {r['make_seconds']:.0f} s and imported in {r['import_seconds']:.0f} s" for r in results)
        + ". The peak RSS of the process that imported them: " + ", ".join(f"{r['import_rss_mb']:.0f} MB" for r in results)
        + "; of the process that ran the operations above (a fresh one): " + ", ".join(f"{r['rss_mb']:.0f} MB" for r in results) + ".",
        *_first_round(results)]
    if "measured" in small:
        lines += ["", f"Measured {small['measured']}, the sizes taking turns a round at a time."]
    for paragraph in MEASURED_APART:
        lines += ["", paragraph]
    lines += ["", WHERE_THE_GROWTH_GOES]
    return "\n".join(lines) + "\n"


def _ratio(large: float, small: float) -> str:
    """Largest table over smallest; a figure that is 0 MB at the smallest table (the peak over what the process held) has
    no ratio to show."""
    return f"{large / small:.2f}x" if small > 0 else "n/a"


def _first_round(results: list[dict]) -> list[str]:
    """The untimed first round, ours: the first merge into the day after the import, which reads and rewrites the
    manifests that hold that day; the process's first check, which reads the Delta checkpoint's row counts (what
    every Dagster run that checks pays, a run being a process of its own); and its first health reading, which
    reads every manifest once."""
    out = []
    for op, what in (("merge", "The first merge into the day after the import"), ("check", "The process's first check"),
                     ("health", "The process's first health reading")):
        firsts = [(r["files"], r["first_round"][op]) for r in results if op in r.get("first_round", {})]
        if firsts:
            out += ["", f"{what} (the untimed first round, ours, one run): " + "; ".join(f"{t:.2f} s at {n:,} files" for n, t in firsts) + "."]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", default="1000,10000,100000")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--prepare", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    p.add_argument("--java-catalog", help=argparse.SUPPRESS)
    p.add_argument("--tmp", default=None)
    p.add_argument("--java-max-files", type=int, default=100_000,
                   help="larger tables are measured without Java's side (its MERGE INTO takes minutes a run at 100,000 files)")
    p.add_argument("--java-merge-max-files", type=int, default=100_000,
                   help="larger tables measure Java's append, delete and read but not its MERGE INTO (it reads every file: 733 s at 1,000,000)")
    p.add_argument("--no-java", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-java-merge", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json")
    p.add_argument("--markdown", help="append the section to this page")
    p.add_argument("--render", default=None, help="measure nothing: the section from this --json file")
    a = p.parse_args()
    if a.render:
        section = render(json.loads(open(a.render).read()))
        print(section)
        if a.markdown:
            with open(a.markdown, "a") as f:
                f.write("\n" + section)
        return
    if a.prepare:
        print("TABLE_SIZE " + json.dumps(prepare(a.prepare, a.root, not a.no_java)), flush=True)
        return
    if a.one:
        print("TABLE_SIZE " + json.dumps(_operate_in_process(a.one, a.reps, a.root, a.java_catalog, not a.no_java_merge)), flush=True)
        return
    began = dt.datetime.now(dt.timezone.utc)
    results = measure([int(n) for n in a.files.split(",")], a.reps, a.tmp, a.java_max_files, a.java_merge_max_files)
    ended = dt.datetime.now(dt.timezone.utc)
    options = f"--files {a.files} --reps {a.reps} --java-max-files {a.java_max_files} --java-merge-max-files {a.java_merge_max_files}"
    for r in results:  # the section names its run
        r["measured"] = f"{began:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC (`{options}`)"
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    section = render(results)
    print(section)
    if a.markdown:
        with open(a.markdown, "a") as f:
            f.write("\n" + section)


if __name__ == "__main__":
    main()

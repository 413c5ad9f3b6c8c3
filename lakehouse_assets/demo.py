"""`make demo`: materialize the customers (and their change log, an incremental input), a few days of
events + aggregates and one day of the (date x country) revenue asset, run the checks, then read every
table back through DuckDB's iceberg_scan and delta_scan. Between the two customer runs another engine
(pyiceberg) appends a customer: the foreign-commits sensor reports it to Dagster, and the change log
picks it up with the next merge's changes. Order files landing in a folder are streamed in twice
(`availableNow`): the second run ingests exactly the files that landed after the first.

The screen gets one line per step; everything else (Dagster's event log, Spark's JVM output,
warnings) goes to a log file whose path is printed first and last.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
import time
from pathlib import Path

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
COUNTRY_DAY = "2024-01-01"


@contextlib.contextmanager
def output_to_log(log_path: Path):
    """Send fds 1 and 2 (Python, Dagster's console logger, the Spark JVM) to the log; yield the screen."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    screen = os.fdopen(os.dup(1), "w", buffering=1)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield screen
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            screen.close()


def _step_seconds(result) -> dict[str, float]:
    out = {}
    for e in result.all_events:
        if e.event_type_value == "STEP_SUCCESS":
            out[e.step_key] = e.event_specific_data.duration_ms / 1000
    return out


def _materializations(result) -> list[tuple[str, str, int, float]]:
    """(asset, partition(s), rows written, step seconds) per step: a single-run backfill of many
    partitions is one step, one write and one line."""
    seconds = _step_seconds(result)
    by_step: dict[tuple[str, str], list] = {}
    for e in result.get_asset_materialization_events():
        by_step.setdefault((e.step_key, e.materialization.asset_key.to_user_string()), []).append(e.materialization)
    out = []
    for (step_key, asset), mats in by_step.items():
        parts = sorted(str(m.partition) for m in mats if m.partition)
        label = parts[0] if len(parts) == 1 else f"{len(parts)} partitions {parts[0]}..{parts[-1]}" if parts else ""
        rows = mats[0].metadata.get("dagster/row_count")  # the step's one write
        out.append((asset, label, int(rows.value) if rows is not None else 0, seconds.get(step_key, 0.0)))
    return out


def foreign_append(lh, instance, say) -> None:
    """Another engine (pyiceberg) appends one customer; the sensor tells Dagster, as its daemon would."""
    import pyarrow as pa
    from dagster import build_sensor_context

    from .dagster.foreign_commits import foreign_commits_sensor
    from .definitions import lakehouse

    def tick(cursor=None):
        with build_sensor_context(instance=instance, cursor=cursor, resources={"lakehouse": lakehouse}) as context:
            return foreign_commits_sensor(context)

    before = tick()
    table = lh.load("demo.customers")
    at = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    values = {"customer_id": 9_000_000, "name": "customer-9000000", "email": "walk-in@example.com", "country": "US",
              "segment": "consumer", "signup_time": at, "updated_at": at}
    schema = table.schema().as_arrow()
    table.append(pa.table({f.name: [values.get(f.name)] for f in schema}, schema=schema))
    result = tick(before.cursor)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    say(f"[foreign] pyiceberg appended a customer: the sensor reported {len(result.asset_events)} materialization(s) of demo/customers")


def _formats_agree(result) -> list:
    """The formats_agree check evaluations of a run (an audit's own checks are reported by `audit_publish_and_rollback`)."""
    evaluations = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return [c for c in evaluations if c.asset_check_key.name == "formats_agree"]


def audit_publish_and_rollback(lh, instance, defs, say) -> tuple[bool, list]:
    """Write-audit-publish: two good payment batches are published, a bad one is stopped by its blocking check
    (nothing reaches main or Delta; the staged rows are discarded); then the table is rolled back to the first
    batch's run in both formats. Returns (all as expected, the runs' formats_agree evaluations)."""
    from .dagster.audit import audit_branch
    from .dagster.demo_assets import PAYMENTS_BATCH_TAG

    job, ok, evaluations, runs = defs.resolve_job_def("demo_payments_job"), True, [], {}

    def state():
        newest = lh.history("demo.payments")[0]
        return newest["iceberg_snapshot_id"], newest["delta_version"]

    # What an earlier demo left in the table (the demo runs again on the same warehouse): the batches append to it.
    earlier = lh.read_arrow("demo.payments", columns=["payment_id"]).num_rows if "demo.payments" in lh.table_names() else 0
    for batch in ("1", "2", "bad"):
        result = job.execute_in_process(instance=instance, tags={PAYMENTS_BATCH_TAG: batch}, raise_on_error=False)
        runs[batch] = result.run_id
        evaluations += _formats_agree(result)
        audit = next(e.asset_check_evaluation_data for e in result.all_events
                     if e.event_type_value == "ASSET_CHECK_EVALUATION" and e.asset_check_evaluation_data.asset_check_key.name == "payments_amounts_positive")
        negative = audit.metadata["negative_amounts"].value
        if batch != "bad":
            ok &= result.success and audit.passed
            snapshot, version = state()
            say(f"[audit]   demo/payments batch {batch}: check passed, published: Iceberg snapshot {snapshot} / Delta version {version}")
            continue
        before = state()
        staged = audit_branch(result.run_id)
        ok &= not result.success and not audit.passed and staged in lh.branches("demo.payments")
        say(f"[audit]   demo/payments bad batch: blocking check payments_amounts_positive failed ({negative} negative amounts); "
            f"nothing published (main and Delta unchanged), staged rows left on branch {staged[:14]}...; discarded")
        lh.discard("demo.payments", staged)
        ok &= state() == before
    rolled = lh.rollback("demo.payments", run_id=runs["1"])
    ok &= lh.read_arrow("demo.payments", columns=["payment_id"]).num_rows == earlier + 1_000
    say(f"[rollback] demo/payments back to batch 1's run in both formats: Iceberg snapshot {rolled.iceberg_snapshot_id} / Delta version {rolled.delta_version}")
    return ok, evaluations


def land_orders(folder: str, first: int, files: int, per_file: int = 500) -> None:
    """Order exports landing as JSON files (each appears whole: written aside, then renamed in)."""
    import json

    os.makedirs(folder, exist_ok=True)
    for f in range(first, first + files):
        tmp = os.path.join(folder, f".orders-{f:04d}.tmp")
        with open(tmp, "w") as out:
            for i in range(f * per_file, (f + 1) * per_file):
                out.write(json.dumps({"order_id": i, "customer_id": i % 97, "amount": f"{(i % 1000) / 10:.2f}", "ordered_at": f"2024-01-01T00:{i % 60:02d}:00Z"}) + "\n")
        os.replace(tmp, os.path.join(folder, f"orders-{f:04d}.json"))


def stream_landed_orders(lh, instance, say) -> bool:
    """Two runs of the streaming asset: files land before each; each run ingests exactly the new files, once."""
    from dagster import materialize

    from .dagster.demo_assets import landed_orders
    from .dagster.streaming import local_folder
    from .definitions import lakehouse, pyspark

    folder, ok = os.path.join(local_folder(lh.warehouse), "_landing", "orders"), True
    landed = len([n for n in os.listdir(folder) if n.endswith(".json")]) if os.path.isdir(folder) else 0  # an earlier demo's
    total = landed * 500
    for run, files in enumerate([3, 2], 1):
        land_orders(folder, landed, files)
        landed += files
        result = materialize([landed_orders], instance=instance, resources={"lakehouse": lakehouse, "pyspark": pyspark}, raise_on_error=False)
        md = result.asset_materializations_for_node(landed_orders.op.name)[0].metadata if result.success else {}
        rows = md["dagster/row_count"].value if md else 0
        total += files * 500
        ok &= result.success and rows == files * 500 and lh.read_arrow("demo.landed_orders", columns=["order_id"]).num_rows == total
        say(f"[stream]  demo/landed_orders run {run}: {files} new file(s) -> {md['batches_committed'].value if md else 0} micro-batch(es), {rows:,} rows "
            f"(source offsets {md['source_offsets'].value['end_offsets'] if md else '-'}), both formats, exactly once")
    return ok


def run_demo(screen, log_path: Path) -> bool:
    from dagster import DagsterInstance

    def say(line: str) -> None:
        print(line, file=screen, flush=True)

    started = time.monotonic()
    from .core.read import duckdb_readers
    from .dagster.demo_assets import COUNTRIES
    from .dagster.resources import spark_session
    from .definitions import defs, lakehouse

    spark = spark_session()  # the JVM starts once, up front; every run's PySparkResource reuses this session
    spark.range(1).count()
    lh = lakehouse.get()
    say(f"[setup]   warehouse {lh.warehouse}, Spark {spark.version} ready ({time.monotonic() - started:.1f} s)")

    instance = DagsterInstance.get()
    country_range = {"dagster/asset_partition_range_start": f"{COUNTRIES[0]}|{COUNTRY_DAY}", "dagster/asset_partition_range_end": f"{COUNTRIES[-1]}|{COUNTRY_DAY}"}
    # Customers twice: the initial load, then a CDC batch merged with inserts, updates and deletes.
    runs = [("demo_customers_job", None, None), ("demo_customers_job", None, None)]
    runs += [("demo_daily_job", day, None) for day in DAYS]
    runs += [("demo_country_job", None, country_range)]  # every country of one day: one run, one commit
    ok, checks_total, checks_failed = True, 0, []
    step = 0
    for i, (job_name, partition, tags) in enumerate(runs):
        if i == 1:
            foreign_append(lh, instance, say)
        result = defs.resolve_job_def(job_name).execute_in_process(instance=instance, partition_key=partition, tags=tags, raise_on_error=False)
        for asset, part, rows, seconds in _materializations(result):
            step += 1
            say(f"[{step:>2}]      {asset:<26} {part:<42} {rows:>7,} rows {seconds:>6.1f} s")
        evaluations = _formats_agree(result)
        checks_total += len(evaluations)
        checks_failed += [c.asset_check_key.to_user_string() for c in evaluations if not c.passed]
        if not result.success:
            ok = False
            failure = next((e for e in result.all_events if e.event_type_value in ("STEP_FAILURE", "RUN_FAILURE")), None)
            error = failure.event_specific_data.error.message.strip().splitlines()[-1] if failure is not None and failure.event_specific_data and getattr(failure.event_specific_data, "error", None) else "see the log"
            say(f"[FAILED]  {job_name} {partition or ''}: {error}")
    audited, evaluations = audit_publish_and_rollback(lh, instance, defs, say)
    ok &= audited
    ok &= stream_landed_orders(lh, instance, say)
    checks_total += len(evaluations)
    checks_failed += [c.asset_check_key.to_user_string() for c in evaluations if not c.passed]
    ok &= not checks_failed
    say(f"[checks]  {checks_total - len(checks_failed)} of {checks_total} formats_agree checks passed" + (f"; FAILED: {', '.join(checks_failed)}" if checks_failed else ""))

    con = duckdb_readers.connect(lh.storage)
    say("")
    say(f"{'table':<28} {'iceberg snapshot':>20} {'delta version':>14} {'rows (iceberg_scan)':>20} {'rows (delta_scan)':>18}")
    for t in lh.tables():
        iceberg_rows, delta_rows = duckdb_readers.count_rows(con, t)
        ok &= iceberg_rows == delta_rows
        say(f"{t['name']:<28} {t['iceberg_snapshot_id']:>20} {t['delta_version']:>14} {iceberg_rows:>20,} {delta_rows:>18,}")
    say("")
    say(f"demo {'OK: both formats agree' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s; full Dagster logs: {log_path}")
    return ok


def main() -> int:
    home = Path(os.environ.get("DAGSTER_HOME") or ".dagster_home")
    log_path = (home / "logs" / f"demo-{dt.datetime.now():%Y%m%d-%H%M%S}.log").resolve()
    print(f"[log]     full Dagster and Spark logs: {log_path}", flush=True)
    with output_to_log(log_path) as screen:
        try:
            ok = run_demo(screen, log_path)
        except Exception as e:  # noqa: BLE001 - one readable line on screen, the traceback in the log
            import traceback

            traceback.print_exc()
            print(f"[FAILED]  {type(e).__name__}: {e}; traceback in {log_path}", file=screen, flush=True)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

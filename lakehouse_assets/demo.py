"""`make demo`: materialize the customers and a few days of events + aggregates, run the checks,
then read every table back through DuckDB's iceberg_scan and delta_scan."""

from __future__ import annotations

import sys

from dagster import DagsterInstance

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def main() -> int:
    from .core import duckdb_readers
    from .definitions import defs, lakehouse

    instance = DagsterInstance.get()
    ok = True
    # Customers twice: the initial load, then a CDC batch merged with inserts, updates and deletes.
    runs = [("demo_customers_job", None), ("demo_customers_job", None)] + [("demo_daily_job", day) for day in DAYS]
    for job_name, partition in runs:
        result = defs.resolve_job_def(job_name).execute_in_process(instance=instance, partition_key=partition)
        checks = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        failed = [c.asset_check_key.to_user_string() for c in checks if not c.passed]
        ok &= result.success and not failed
        print(f"{job_name}{' ' + partition if partition else ''}: {'success' if result.success else 'FAILED'}, "
              f"{len(checks)} checks, {len(failed)} failed {failed if failed else ''}")

    lh = lakehouse.get()
    con = duckdb_readers.connect(lh.storage)
    print()
    print(f"{'table':<28} {'iceberg snapshot':>20} {'delta version':>14} {'rows (iceberg_scan)':>20} {'rows (delta_scan)':>18}")
    for t in lh.tables():
        iceberg_rows, delta_rows = duckdb_readers.count_rows(con, t)
        ok &= iceberg_rows == delta_rows
        print(f"{t['name']:<28} {t['iceberg_snapshot_id']:>20} {t['delta_version']:>14} {iceberg_rows:>20} {delta_rows:>18}")
    print()
    print("demo OK: both formats agree" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

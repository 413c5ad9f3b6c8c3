"""The formats-agree check: same live data files, same row count, same columns and types, Delta up to date."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from .delta_committer import DeltaMirror
from .iceberg_committer import live_data_files
from .storage import normalize_uri, relative_to
from .type_mapping import delta_schema


def _schema_columns(arrow_schema: pa.Schema) -> dict[str, str]:
    return {f.name: str(f.type) for f in arrow_schema}


def verify_table(table: Table, mirror: DeltaMirror | None) -> dict[str, Any]:
    root = normalize_uri(table.location())
    snap = table.current_snapshot()
    iceberg_files = {relative_to(root, f.file_path): f.record_count for f in live_data_files(table)}
    report: dict[str, Any] = {
        "table": ".".join(table.name()),
        "iceberg_snapshot_id": snap.snapshot_id if snap else None,
        "iceberg_sequence_number": snap.sequence_number if snap else None,
        "iceberg_files": len(iceberg_files),
        "iceberg_rows": sum(iceberg_files.values()),
        "delta_enabled": mirror is not None,
    }
    if mirror is None:
        report.update(agree=True, differences=[])
        return report
    differences: list[str] = []
    try:
        delta = mirror.load()
        problem = None if delta is not None else "the Delta log does not exist at the table root"
    except Exception as e:  # noqa: BLE001 - an unreadable log is a finding, not a crash
        delta, problem = None, f"the Delta log cannot be read: {type(e).__name__}: {e}"
    if delta is None:
        report.update(delta_version=None, delta_files=0, delta_rows=0, delta_lag_snapshots=None, agree=False)
        report["differences"] = [problem]
        return report
    actions = pa.table(delta.get_add_actions(flatten=True)).to_pydict()
    delta_files = dict(zip(actions.get("path", []), actions.get("num_records", [])))
    mirrored = mirror.mirrored_sequence_number(delta)
    pending = mirror.pending_snapshots(table, snap, mirrored) if snap else []
    report.update(
        delta_version=delta.version(),
        delta_files=len(delta_files),
        delta_rows=sum(v or 0 for v in delta_files.values()),
        delta_mirrored_sequence_number=mirrored,
        delta_lag_snapshots=len(pending) if pending is not None else None,
    )
    only_iceberg = sorted(set(iceberg_files) - set(delta_files))
    only_delta = sorted(set(delta_files) - set(iceberg_files))
    if only_iceberg:
        differences.append(f"{len(only_iceberg)} file(s) live only in Iceberg, e.g. {only_iceberg[:3]}")
    if only_delta:
        differences.append(f"{len(only_delta)} file(s) live only in Delta, e.g. {only_delta[:3]}")
    if report["iceberg_rows"] != report["delta_rows"]:
        differences.append(f"row counts differ: Iceberg {report['iceberg_rows']}, Delta {report['delta_rows']}")
    mismatched_counts = [p for p in set(iceberg_files) & set(delta_files) if iceberg_files[p] != delta_files[p]]
    if mismatched_counts:
        differences.append(f"{len(mismatched_counts)} file(s) have different row counts in the two logs")
    expected = _schema_columns(pa.schema(delta_schema(table.schema()).to_arrow()))
    actual = _schema_columns(pa.schema(delta.schema().to_arrow()))
    if expected != actual:
        for name in sorted(set(expected) | set(actual)):
            if expected.get(name) != actual.get(name):
                differences.append(f"column {name!r}: Iceberg {expected.get(name) or 'missing'}, Delta {actual.get(name) or 'missing'}")
    if pending:
        differences.append(f"Delta lags Iceberg by {len(pending)} snapshot(s); run `lakehouse repair {report['table']}`")
    report["columns"] = expected
    report["differences"] = differences
    report["agree"] = not differences
    return report

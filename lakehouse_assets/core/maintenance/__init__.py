"""Table maintenance that never breaks either format (Dagster-free).

One module per concern:

    settings.py     MaintenanceSettings: defaults, `lakehouse.maintenance.*` table properties, overrides
    references.py   what retained Iceberg snapshots and Delta versions reference; protected paths
    retention.py    snapshot_expiry, orphan_cleanup
    compaction.py   compaction (through the commit pipeline, core/write/transaction.py)
    reports.py      the typed dicts every operation returns
    logs.py         delta_checkpoint, metadata_cleanup, Delta log figures
    health.py       table_health (metadata-only figures the sensors read)

and here the registry of operations that the CLI, the Dagster job config and the sensors read.
Every operation works on one table and returns a plain dict of what it did.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

from ..errors import SpecError
from ..table.context import TableContext
from .compaction import compaction, plan_compaction
from .health import table_health
from .logs import delta_checkpoint, delta_log_stats, metadata_cleanup
from .references import RETENTION_DELTA_MIN_VERSION, RETENTION_MIN_TIMESTAMP, referenced_files
from .repair import repair_table
from .reports import FullMaintenanceReport, OperationReport, RepairReport, TableHealth
from .retention import orphan_cleanup, snapshot_expiry
from .settings import PROPERTY_PREFIX, MaintenanceSettings
from .verify import verify_table

__all__ = [
    "FULL_ORDER",
    "OPERATIONS",
    "PROPERTY_PREFIX",
    "RETENTION_DELTA_MIN_VERSION",
    "RETENTION_MIN_TIMESTAMP",
    "MaintenanceSettings",
    "Operation",
    "REGISTRY",
    "delta_log_stats",
    "plan_compaction",
    "referenced_files",
    "run",
    "table_health",
    "OperationReport",
    "TableHealth",
]


def repair(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> RepairReport:
    """`Lakehouse.repair` as an operation, so one job/CLI runs every table operation."""
    if dry_run:
        return {"operation": "repair", "table": identifier, "dry_run": True, "delta_lag_snapshots": ctx.delta_lag_of(ctx.load(identifier)), "repaired": False}
    return {"operation": "repair", "dry_run": False, **repair_table(ctx, identifier)}


def verify_deep(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> OperationReport:
    """The formats-agree check including content (core/maintenance/verify.py). Read-only, so dry_run changes nothing."""
    table = ctx.load(identifier)
    report = verify_table(table, ctx.mirror(table) if ctx.delta_enabled(table) else None, deep=True)
    return {"operation": "verify_deep", "table": identifier, "agree": report["agree"], "differences": report["differences"], "content": report.get("content")}


@dataclass(frozen=True)
class Operation:
    name: str
    run: Callable[..., OperationReport] | None  # (ctx, identifier, settings, dry_run, spark=None) -> report; None: FULL_ORDER
    uses_spark: bool
    description: str


REGISTRY: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("snapshot_expiry", snapshot_expiry, False,
                  "Expire Iceberg snapshots outside the retention window; delete files nothing retained references."),
        Operation("orphan_cleanup", orphan_cleanup, False,
                  "Delete unreferenced files under the table root older than the grace period."),
        Operation("compaction", compaction, True, "Bin-pack small files per partition (one snapshot, one Delta version)."),
        Operation("metadata_cleanup", metadata_cleanup, False,
                  "Remove unreferenced Iceberg metadata and Delta log files a checkpoint covers."),
        Operation("delta_checkpoint", delta_checkpoint, False,
                  "Write a Delta checkpoint at the current version."),
        Operation("full_maintenance", None, True, "All of the above in a safe order, after a repair."),
        Operation("repair", repair, False, "Bring a lagging Delta log up to Iceberg (idempotent)."),
        Operation("verify_deep", verify_deep, False,
                  "Check that the formats agree, including the content as DuckDB reads each (read-only)."),
    )
}
OPERATIONS = tuple(REGISTRY)
# Safe order: Delta catches up first (expiry needs the snapshot<->version mapping); compaction before
# expiry (the small files it replaces stay readable through retained snapshots); the checkpoint before
# the log cleanup that relies on it.
FULL_ORDER = ("repair", "compaction", "snapshot_expiry", "orphan_cleanup", "delta_checkpoint", "metadata_cleanup")


def run(ctx: TableContext, identifier: str, operation: str, *, dry_run: bool = False, spark=None, **overrides) -> OperationReport:
    """Run one operation (or full_maintenance) on one table; returns what it did plus the table's health after."""
    if operation not in REGISTRY:
        raise SpecError(f"Table {identifier}: unknown maintenance operation {operation!r}; use one of {', '.join(OPERATIONS)}.")
    started = time.monotonic()
    settings = MaintenanceSettings.for_table(ctx.load(identifier), **overrides)
    if operation == "full_maintenance":
        steps = [REGISTRY[op].run(ctx, identifier, settings, dry_run, spark=spark) for op in FULL_ORDER]
        result: FullMaintenanceReport = {"operation": "full_maintenance", "table": identifier, "dry_run": dry_run, "steps": steps}
        for key in ("files_rewritten", "files_removed", "bytes_reclaimed", "snapshots_expired"):
            result[key] = sum(int(s.get(key) or 0) for s in steps)
    else:
        result: OperationReport = REGISTRY[operation].run(ctx, identifier, settings, dry_run, spark=spark)
    result["settings"] = asdict(settings)
    result["health"] = table_health(ctx, identifier, settings)
    result["seconds"] = round(time.monotonic() - started, 3)
    return result

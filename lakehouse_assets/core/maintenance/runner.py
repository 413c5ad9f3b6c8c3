"""Running one table operation of the registry (operations.py), or full maintenance in its safe order."""

from __future__ import annotations

import time
from dataclasses import asdict

from ..errors import SpecError
from ..table.context import TableContext
from .health import table_health
from .operations import FULL_ORDER, OPERATIONS, REGISTRY
from .repair import repair_table
from .reports import FullMaintenanceReport, OperationReport, RepairReport
from .settings import MaintenanceSettings
from .verify.settled import verify_settled


def repair(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> RepairReport:
    """`Lakehouse.repair` as an operation, so one job/CLI runs every table operation."""
    if dry_run:
        return {"operation": "repair", "table": identifier, "dry_run": True, "delta_lag_snapshots": ctx.delta_lag_of(ctx.load(identifier)), "repaired": False}
    return {"operation": "repair", "dry_run": False, **repair_table(ctx, identifier)}


def verify_deep(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> OperationReport:
    """The formats-agree check including content (core/maintenance/verify/formats_agree.py). Read-only, so dry_run changes nothing."""
    report = verify_settled(ctx, identifier, deep=True)
    return {"operation": "verify_deep", "table": identifier, "agree": report["agree"], "differences": report["differences"], "content": report.get("content")}


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

"""Table maintenance that never breaks either format (Dagster-free).

One module per concern:

    operations.py   the registry of operations the CLI, the Dagster job config and the sensors read (light)
    runner.py       run: one operation, or full maintenance in its safe order
    settings.py     MaintenanceSettings: defaults, `lakehouse.maintenance.*` table properties, overrides
    references.py   what retained Iceberg snapshots and Delta versions reference; protected paths
    retention.py    snapshot_expiry, orphan_cleanup
    compaction.py   compaction (through the commit pipeline, core/write/transaction.py)
    reports.py      the typed dicts every operation returns
    logs.py         delta_checkpoint, metadata_cleanup, Delta log figures
    health.py       table_health (metadata-only figures the sensors read)
    verify/         the formats-agree check (`verify/settled.py`: verify_settled), read-only

Every operation works on one table and returns a plain dict of what it did. The names below are imported on
first use: a Dagster code location reads the registry without loading catalogs, Delta or pyiceberg's FileIO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .compaction import plan_compaction
    from .health import table_health
    from .logs import delta_log_stats
    from .operations import FULL_ORDER, OPERATIONS, REGISTRY, Operation
    from .references import RETENTION_DELTA_MIN_VERSION, RETENTION_MIN_TIMESTAMP, referenced_files
    from .reports import OperationReport, TableHealth
    from .runner import run
    from .settings import PROPERTY_PREFIX, MaintenanceSettings

_LAZY = {
    "FULL_ORDER": ".operations",
    "OPERATIONS": ".operations",
    "REGISTRY": ".operations",
    "Operation": ".operations",
    "run": ".runner",
    "PROPERTY_PREFIX": ".settings",
    "MaintenanceSettings": ".settings",
    "RETENTION_DELTA_MIN_VERSION": ".references",
    "RETENTION_MIN_TIMESTAMP": ".references",
    "referenced_files": ".references",
    "delta_log_stats": ".logs",
    "plan_compaction": ".compaction",
    "table_health": ".health",
    "OperationReport": ".reports",
    "TableHealth": ".reports",
}

__all__ = [
    "FULL_ORDER",
    "MaintenanceSettings",
    "OPERATIONS",
    "Operation",
    "OperationReport",
    "PROPERTY_PREFIX",
    "REGISTRY",
    "RETENTION_DELTA_MIN_VERSION",
    "RETENTION_MIN_TIMESTAMP",
    "TableHealth",
    "delta_log_stats",
    "plan_compaction",
    "referenced_files",
    "run",
    "table_health",
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())

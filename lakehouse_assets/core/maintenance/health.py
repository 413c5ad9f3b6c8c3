"""Metadata-only figures about a table: live and small files, snapshots, Delta log length and lag (what sensors read)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.table import Table

from .. import iceberg_committer as ic
from .compaction import plan_compaction
from .logs import delta_log_stats
from .reports import TableHealth
from .settings import MaintenanceSettings

if TYPE_CHECKING:
    from ..lakehouse import Lakehouse


def table_health(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings | None = None, table: Table | None = None) -> TableHealth:
    """Metadata-only figures: live files, small files, snapshots, Delta log length and lag.

    `table`: the table as the caller just loaded it (the metadata JSON holds every snapshot, so each
    load costs more as history grows: load it once). The manifests are read once: their entries are
    every live file, so this grows with the table's file count (see the README, "Where the time goes").
    """
    table = table if table is not None else lh.load(identifier)
    settings = settings or MaintenanceSettings.for_table(table)
    files = ic.live_data_files(table)
    small = [f for f in files if f.file_size_in_bytes < settings.small_file_bytes]
    compactable = sum(len(g) for g in plan_compaction(table, settings, files))
    out: TableHealth = {
        "table": identifier,
        "data_files": len(files),
        "data_bytes": sum(f.file_size_in_bytes for f in files),
        "small_files": len(small),
        "small_file_ratio": round(len(small) / len(files), 4) if files else 0.0,
        # Small files compaction would actually merge (partitions with enough of them): what the sensor watches.
        "compactable_files": compactable,
        "compactable_ratio": round(compactable / len(files), 4) if files else 0.0,
        "snapshot_count": len(table.metadata.snapshots),
        "iceberg_snapshot_id": table.current_snapshot().snapshot_id if table.current_snapshot() else None,
    }
    out.update(delta_log_stats(lh, table))
    if lh.delta_enabled(table):
        out["delta_lag_snapshots"] = lh.delta_lag_of(table)  # metadata only, unlike a full verify
    return out

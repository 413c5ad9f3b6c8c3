"""Table health as Dagster metadata: small files, snapshot count, Delta log length.

Attached to every materialization, so the asset page shows the table's health next to its
Iceberg snapshot and Delta version, and plots it over time. The keys are the ones the
maintenance observations use, so both kinds of events land on the same plots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster import MetadataValue

from ..core import maintenance

if TYPE_CHECKING:
    from ..core.lakehouse import Lakehouse


def health_metadata(health: dict[str, Any]) -> dict[str, Any]:
    md: dict[str, Any] = {
        "data_file_count": MetadataValue.int(int(health.get("data_files", 0))),
        "small_file_count": MetadataValue.int(int(health.get("small_files", 0))),
        "compactable_file_count": MetadataValue.int(int(health.get("compactable_files", 0))),
        "snapshot_count": MetadataValue.int(int(health.get("snapshot_count", 0))),
        "delta_log_length": MetadataValue.int(int(health.get("delta_log_files") or 0)),
    }
    if health.get("delta_commits_since_checkpoint") is not None:
        md["delta_commits_since_checkpoint"] = MetadataValue.int(int(health["delta_commits_since_checkpoint"]))
    return md


def table_health_metadata(lh: Lakehouse, identifier: str, table=None) -> dict[str, Any]:
    """Metadata only (manifests and the Delta log listing), no data files are read. `table`: already loaded."""
    return health_metadata(maintenance.table_health(lh.context, identifier, table=table))

"""What each maintenance operation returns: plain dicts (JSON for the CLI, metadata for Dagster) typed here,
one place that names every key the CLI, the Dagster observations and the sensors read."""

from __future__ import annotations

from typing import Any, TypedDict


class DeltaLogStats(TypedDict, total=False):
    delta_version: int | None
    delta_log_files: int  # commit JSON files present
    delta_checkpoint_version: int | None
    delta_commits_since_checkpoint: int | None  # commits a reader replays after the last checkpoint
    delta_checkpoint_interval: int | None  # the table's delta.checkpointInterval
    delta_checkpoint_due: bool  # that many commits since the last checkpoint: maintenance writes the next one


class TableHealth(DeltaLogStats, total=False):
    table: str
    data_files: int
    data_bytes: int
    small_files: int
    small_file_ratio: float
    compactable_files: int  # small files compaction would actually merge: what the compaction sensor watches
    compactable_ratio: float
    # Merge-on-read read cost: live data files with position deletes, the delete files and rows readers skip, per live
    # file, and the files compaction would fold back in (its thresholds); all 0 on a table without deletes.
    files_with_deletes: int
    delete_files: int
    deleted_rows: int
    delete_files_per_file: float
    deleted_rows_per_file: float
    foldable_files: int
    snapshot_count: int
    iceberg_snapshot_id: int | None
    delta_lag_snapshots: int | None  # None: the Delta log is missing or lags past expired snapshots


class OperationReport(TypedDict, total=False):
    """Keys every operation report has; `run` adds settings, health and seconds."""

    operation: str
    table: str
    dry_run: bool
    files_removed: int
    bytes_reclaimed: int
    settings: dict[str, Any]
    health: TableHealth
    seconds: float


class ExpiryReport(OperationReport, total=False):
    retention_cutoff: str
    snapshots_before: int
    snapshots_expired: int
    snapshots_after: int
    expired_snapshot_ids: list[int]
    oldest_retained_snapshot_id: int | None
    delta_min_retained_version: int | None
    would_remove: list[str]  # dry run: data files that would be deleted


class OrphanReport(OperationReport, total=False):
    files_listed: int
    orphans_found: int
    skipped_within_grace: int
    orphan_paths: list[str]
    would_reclaim_bytes: int


class CompactionReport(OperationReport, total=False):
    attempts: int
    conflicts: int
    last_conflict: str
    partitions_compacted: int
    files_rewritten: int
    bytes_rewritten: int
    rows_rewritten: int
    files_with_deletes_folded: int  # data files with position deletes rewritten clean (merge-on-read)
    deleted_rows_folded: int
    files_added: int
    bytes_added: int
    committed: bool
    aborted: bool
    iceberg_snapshot_id: int | None
    parent_snapshot_id: int | None
    delta_version: int | None
    delta_lagging: bool


class CheckpointReport(OperationReport, DeltaLogStats, total=False):
    checkpoint_written: bool
    # plus each DeltaLogStats key with a `_before` suffix


class MetadataCleanupReport(OperationReport, total=False):
    iceberg_metadata_files_removed: int
    iceberg_metadata_bytes_reclaimed: int
    iceberg_stale_metadata_files: list[str]
    delta_log_retention: str
    delta_log_files_removed: int
    delta_log_files: int
    delta_commits_since_checkpoint: int | None


class RepairReport(OperationReport, total=False):
    delta_version_before: int | None
    delta_version: int | None
    delta_lag_snapshots: int | None
    repaired: bool
    reason: str


class FullMaintenanceReport(OperationReport, total=False):
    steps: list[OperationReport]  # one report per operation, in FULL_ORDER
    files_rewritten: int
    snapshots_expired: int

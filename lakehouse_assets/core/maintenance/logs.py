"""Delta checkpoints and metadata cleanup (Iceberg metadata JSON, manifest lists, manifests; old Delta log files).

    delta_checkpoint  write a Delta checkpoint at the current version (bounded log replay)
    metadata_cleanup  unreferenced Iceberg metadata JSON, manifest lists and manifests; Delta log files
                      older than the log retention that a checkpoint covers
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

from deltalake.transaction import CommitProperties
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from ..formats import history
from ..io.storage import join_uri, normalize_uri
from ..properties import Operation, SummaryKeys, TableProperties
from ..table.context import TableContext
from .references import list_files, mtime_ms, now_ms
from .reports import CheckpointReport, DeltaLogStats, MetadataCleanupReport
from .settings import CONCURRENT_COMMIT_ATTEMPTS, MaintenanceSettings

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
DEFAULT_CHECKPOINT_INTERVAL = 100  # delta-rs's, when a table sets none


def delta_log_stats(ctx: TableContext, table: Table) -> DeltaLogStats:
    """Delta log length: commit files present, commits a reader replays after the last checkpoint, and whether the
    table's `delta.checkpointInterval` says a checkpoint is due (no write writes one: a checkpoint walks every live
    file). The log is listed, not loaded: the version is its newest commit file; the interval is read from the log this
    process follows (core/formats/delta/kept_logs.py), so a sensor asking again reads only the commits since."""
    if not ctx.delta_enabled(table):
        return {"delta_version": None, "delta_log_files": 0, "delta_commits_since_checkpoint": None}
    root = normalize_uri(table.location())
    log_uri = join_uri(root, "_delta_log")
    names = [i.base_name for i in list_files(ctx, log_uri)]
    commits = sorted(int(n.split(".")[0]) for n in names if n.endswith(".json") and n.split(".")[0].isdigit())
    checkpoints = [int(n.split(".")[0]) for n in names if ".checkpoint." in n and n.endswith(".parquet")]
    last_cp = max(checkpoints) if checkpoints else None
    version = max(commits + checkpoints) if commits or checkpoints else None
    since = None if version is None else version - (last_cp if last_cp is not None else -1)
    interval = _checkpoint_interval(ctx, table) if version is not None else None
    return {
        "delta_version": version,
        "delta_log_files": len(commits),
        "delta_checkpoint_version": last_cp,
        "delta_commits_since_checkpoint": since,
        "delta_checkpoint_interval": interval,
        "delta_checkpoint_due": bool(since and interval and since >= interval),
    }


def _checkpoint_interval(ctx: TableContext, table: Table) -> int | None:
    """The table's `delta.checkpointInterval` (delta-rs's default 100 when unset); None when the log is unreadable."""
    mirror = ctx.mirror(table)
    try:
        delta = mirror.load_current(table)
    except Exception:  # noqa: BLE001 - an unreadable log is repair's to report; the figures say nothing of it
        return None
    if delta is None:
        return None
    try:
        return int((delta.metadata().configuration or {}).get(CHECKPOINT_INTERVAL, DEFAULT_CHECKPOINT_INTERVAL))
    finally:
        mirror.keep(table, delta)


def delta_checkpoint(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> CheckpointReport:
    table = ctx.load(identifier)
    before = delta_log_stats(ctx, table)
    result: CheckpointReport = {"operation": "delta_checkpoint", "table": identifier, "dry_run": dry_run, **{f"{k}_before": v for k, v in before.items()}}
    delta = ctx.mirror(table).load() if ctx.delta_enabled(table) else None
    if delta is None or dry_run or not before["delta_commits_since_checkpoint"]:
        result.update(checkpoint_written=False, **delta_log_stats(ctx, table))
        return result
    delta.create_checkpoint()
    result.update(checkpoint_written=True, **delta_log_stats(ctx, table))
    return result


TOMBSTONE_RETENTION = "delta.deletedFileRetentionDuration"


@contextlib.contextmanager
def tombstones_expired(ctx: TableContext, table: Table) -> Iterator[None]:
    """Inside: the Delta table's `delta.deletedFileRetentionDuration` is zero, so a checkpoint written there keeps no
    `remove` action (a checkpoint keeps those of the last week by default, with their files' partition values: after an
    erasure, an erased partition's value). Set back on the way out. Two metadata-only versions, tagged as ours."""
    delta = ctx.mirror(table).load()
    before = (delta.metadata().configuration or {}).get(TOMBSTONE_RETENTION, "interval 7 days")
    tag = CommitProperties(custom_metadata={SummaryKeys.OPERATION: Operation.DELTA_CONFIGURATION})
    delta.alter.set_table_properties({TOMBSTONE_RETENTION: "interval 0 seconds"}, raise_if_not_exists=False, commit_properties=tag)
    try:
        yield
    finally:
        delta = ctx.mirror(table).load()
        delta.alter.set_table_properties({TOMBSTONE_RETENTION: before}, raise_if_not_exists=False, commit_properties=tag)


def delta_log_truncate(ctx: TableContext, table: Table) -> int:
    """A checkpoint at the current Delta version, then every commit, checkpoint and checksum file of a version older than
    the one that mirrors the current Iceberg snapshot removed: the log starts there (an erasure; `cleanup_metadata` does
    the same for versions past the log retention). Returns that version, recorded as the oldest for time travel."""
    delta = ctx.mirror(table).load()
    delta.create_checkpoint()
    current = table.current_snapshot()
    oldest = (history.delta_version_of(delta, current.snapshot_id) if current is not None else None) or delta.version()
    log_uri = join_uri(normalize_uri(table.location()), "_delta_log")
    for info in list_files(ctx, log_uri):
        head = info.base_name.split(".", 1)[0]
        if head.isdigit() and int(head) < oldest and info.base_name.endswith((".json", ".parquet", ".crc")):
            ctx.storage.filesystem(log_uri)[0].delete_file(info.path)
    _record_delta_min_version(table, oldest)
    return oldest


def metadata_cleanup(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> MetadataCleanupReport:
    table = ctx.load(identifier)
    result: MetadataCleanupReport = {"operation": "metadata_cleanup", "table": identifier, "dry_run": dry_run}
    result.update(_iceberg_metadata_cleanup(ctx, table, settings, dry_run))
    result.update(_delta_log_cleanup(ctx, table, settings, dry_run))
    result["files_removed"] = result["iceberg_metadata_files_removed"] + result["delta_log_files_removed"]
    return result


def _iceberg_metadata_cleanup(ctx: TableContext, table: Table, settings: MaintenanceSettings, dry_run: bool) -> dict[str, Any]:
    """Metadata JSON no longer in the metadata log, manifest lists of expired snapshots, manifests none reference.

    Files younger than the grace period may belong to a commit in flight and are kept.
    """
    md = table.metadata
    keep = {table.metadata_location} | {e.metadata_file for e in md.metadata_log}
    for snap in md.snapshots:
        keep.add(snap.manifest_list)
        keep |= {m.manifest_path for m in snap.manifests(table.io)}
    keep |= {s.statistics_path for s in getattr(md, "statistics", []) or []}
    keep = {normalize_uri(k) if "://" in k or k.startswith("/") else k for k in keep}
    keep_paths = {ctx.storage.filesystem(k)[1] for k in keep}
    meta_dir = table.properties.get("write.metadata.path") or join_uri(normalize_uri(table.location()), "metadata")
    grace_cutoff = now_ms() - int(settings.orphan_grace_hours * 3600 * 1000)
    stale = []
    for info in list_files(ctx, normalize_uri(meta_dir)):
        name = info.base_name
        if not (name.endswith(".metadata.json") or name.endswith(".avro")) or info.path in keep_paths:
            continue
        mtime = mtime_ms(info)
        if mtime is None or mtime > grace_cutoff:
            continue
        stale.append(info)
    removed = reclaimed = 0
    if not dry_run:
        fs, _ = ctx.storage.filesystem(normalize_uri(meta_dir))
        for info in stale:
            fs.delete_file(info.path)
            removed += 1
            reclaimed += info.size or 0
    return {
        "iceberg_metadata_files_removed": removed,
        "iceberg_metadata_bytes_reclaimed": reclaimed,
        "iceberg_stale_metadata_files": sorted(i.base_name for i in stale),
    }


def _record_delta_min_version(table: Table, oldest: int, attempts: int = CONCURRENT_COMMIT_ATTEMPTS) -> None:
    """Move the recorded oldest time-travel Delta version up to `oldest` (never down). A commit of another writer
    since `table` was read (a stream's next batch) fails this property commit: read the table again and retry."""
    for attempt in range(attempts):
        recorded = table.properties.get(TableProperties.RETENTION_DELTA_MIN_VERSION)
        if recorded is not None and int(recorded) >= oldest:
            return
        try:
            with table.transaction() as tx:
                tx.set_properties({TableProperties.RETENTION_DELTA_MIN_VERSION: str(oldest)})
            return
        except CommitFailedException:
            if attempt == attempts - 1:
                raise
            table = table.refresh()


def _delta_log_cleanup(ctx: TableContext, table: Table, settings: MaintenanceSettings, dry_run: bool) -> dict[str, Any]:
    """delta-rs `cleanup_metadata`: log files older than `delta.logRetentionDuration` that a checkpoint covers."""
    delta = ctx.mirror(table).load() if ctx.delta_enabled(table) else None
    if delta is None:
        return {"delta_log_files_removed": 0}
    before = delta_log_stats(ctx, table)
    # A stable value (set once per settings change): the retention window itself.
    wanted = f"interval {max(0, int(math.ceil(settings.log_retention_days * 86400)))} seconds"
    if not dry_run:
        if delta.metadata().configuration.get("delta.logRetentionDuration") != wanted:
            # A metadata-only Delta commit (no data files); delta-rs reads the retention from the table.
            # Tagged as ours (commitInfo `lakehouse.operation`): an untagged version reads as another engine's write.
            delta.alter.set_table_properties(
                {"delta.logRetentionDuration": wanted},
                raise_if_not_exists=False,
                commit_properties=CommitProperties(custom_metadata={SummaryKeys.OPERATION: Operation.DELTA_CONFIGURATION}),
            )
            delta.update_incremental()
        delta.cleanup_metadata()
    after = delta_log_stats(ctx, table)
    if not dry_run:
        # Versions whose log is gone cannot be time-travelled to: move the recorded boundary up.
        oldest = history.oldest_delta_version(ctx.mirror(table).load())
        if oldest is not None and oldest > 0:
            _record_delta_min_version(table, oldest)
    return {
        "delta_log_retention": wanted,
        "delta_log_files_removed": max(0, before["delta_log_files"] - after["delta_log_files"]) if not dry_run else 0,
        "delta_log_files": after["delta_log_files"],
        "delta_commits_since_checkpoint": after["delta_commits_since_checkpoint"],
    }

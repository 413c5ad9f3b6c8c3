"""Snapshot expiry and orphan cleanup: delete what no retained snapshot or version references.

    snapshot_expiry   expire Iceberg snapshots outside the retention window, record the window for both
                      formats, and delete the data files that no retained snapshot or version references
    orphan_cleanup    delete files under the table root that no retained snapshot/version references and
                      that are older than a grace period (in-flight writes are younger)
"""

from __future__ import annotations

import datetime as dt
import logging

from deltalake.exceptions import DeltaError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.update.snapshot import ExpireSnapshots

from ..formats import history
from ..formats.delta.logged_vectors import vector_file_uris
from ..io.storage import normalize_uri, relative_to
from ..table import branches
from ..table.context import TableContext
from .references import (
    RETENTION_DELTA_MIN_VERSION,
    RETENTION_MIN_TIMESTAMP,
    Retained,
    change_data_files,
    delete_relative,
    is_catalog_metadata,
    is_change_data,
    is_protected_path,
    list_files,
    metadata_dirs,
    metadata_files,
    mtime_ms,
    now_ms,
    referenced_files,
    retained_now,
    root_path,
    snapshot_files,
)
from .reports import ExpiryReport, OrphanReport
from .settings import CONCURRENT_COMMIT_ATTEMPTS, MaintenanceSettings

log = logging.getLogger("lakehouse.maintenance")


def _unpublished(table) -> set[int]:
    """Each branch's own snapshots and the snapshot it forked from: what publishing it compares (core/write/publish.py)."""
    keep: set[int] = set()
    for name in branches.branches(table):
        head = branches.head(table, name)
        fork = branches.fork_point(table, head)
        keep |= {s.snapshot_id for s in branches.staged(table, head, fork)}
        if fork is not None:
            keep.add(fork.snapshot_id)
    return keep


def snapshot_expiry(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> ExpiryReport:
    """Expire what the retention window leaves out. Its one metadata commit fails when another writer committed since
    the table was read (a stream's next batch); nothing was deleted yet, so the whole expiry is planned again."""
    for attempt in range(CONCURRENT_COMMIT_ATTEMPTS):
        try:
            return _snapshot_expiry(ctx, identifier, settings, dry_run)
        except CommitFailedException as e:
            if attempt == CONCURRENT_COMMIT_ATTEMPTS - 1:
                raise
            log.info("Table %s: snapshot expiry raced another commit (%s); planning it again", identifier, e)
    raise AssertionError("unreachable")


def _snapshot_expiry(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool) -> ExpiryReport:
    table = ctx.load(identifier)
    root = normalize_uri(table.location())
    now = now_ms()
    cutoff = now - int(settings.snapshot_retention_days * 86400 * 1000)
    # Keep: the newest `min_snapshots_to_keep` of the current branch, everything inside the window,
    # every branch/tag head (pyiceberg also refuses to expire those), and what an open branch needs to be published.
    chain = list(history.ancestors(table))
    keep = {s.snapshot_id for s in chain[: settings.min_snapshots_to_keep]}
    keep |= {s.snapshot_id for s in table.metadata.snapshots if s.timestamp_ms >= cutoff}
    keep |= {ref.snapshot_id for ref in table.metadata.refs.values()}
    keep |= _unpublished(table)
    expire = sorted(s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in keep)
    kept = [s for s in table.metadata.snapshots if s.snapshot_id in keep]
    oldest_kept = min(kept, key=lambda s: s.timestamp_ms) if kept else None

    # The Delta boundary: the version that mirrors the oldest retained snapshot (never move backwards).
    delta_min = None
    if ctx.delta_enabled(table) and (delta := ctx.mirror(table).load()) is not None:
        mapping = history.delta_versions_by_snapshot(delta)
        kept_versions = [mapping[s.snapshot_id] for s in kept if s.snapshot_id in mapping]
        delta_min = min(kept_versions) if kept_versions else delta.version()
        if (recorded := table.properties.get(RETENTION_DELTA_MIN_VERSION)) is not None:
            delta_min = max(delta_min, int(recorded))
    result: ExpiryReport = {
        "operation": "snapshot_expiry",
        "table": identifier,
        "dry_run": dry_run,
        "retention_cutoff": dt.datetime.fromtimestamp(cutoff / 1000, dt.timezone.utc).isoformat(),
        "snapshots_before": len(table.metadata.snapshots),
        "snapshots_expired": len(expire),
        "expired_snapshot_ids": expire,
        "oldest_retained_snapshot_id": oldest_kept.snapshot_id if oldest_kept else None,
        "delta_min_retained_version": delta_min,
    }
    candidates = _candidates(ctx, table, root, expire, delta_min)  # read before the snapshots' metadata goes away
    if dry_run:
        retained = Retained(keep, delta_min, ctx.mirror(table).load().version() if delta_min is not None else None)
        deletable = sorted(candidates - referenced_files(ctx, table, retained))
        result.update(files_removed=0, would_remove=deletable, bytes_reclaimed=0, snapshots_after=len(keep))
        return result

    if expire or oldest_kept is not None:
        properties = {}
        if oldest_kept is not None:
            properties[RETENTION_MIN_TIMESTAMP] = str(oldest_kept.timestamp_ms)
        if delta_min is not None:
            properties[RETENTION_DELTA_MIN_VERSION] = str(delta_min)
        # One metadata commit: the snapshots go and the boundary both formats enforce is recorded.
        with table.transaction() as tx:
            if properties and any(table.properties.get(k) != v for k, v in properties.items()):
                tx.set_properties(properties)
            if expire:
                ExpireSnapshots(tx).by_ids(expire).commit()
    table = ctx.load(identifier)
    deletable = sorted(candidates - referenced_files(ctx, table))
    removed, reclaimed = delete_relative(ctx, root, deletable)
    result.update(files_removed=removed, bytes_reclaimed=reclaimed, snapshots_after=len(table.metadata.snapshots))
    return result


def _candidates(ctx: TableContext, table, root: str, expire: list[int], delta_min: int | None) -> set[str]:
    """Files the expiring snapshots reference, and the deletion-vector files of the Delta versions leaving the window."""
    out = {relative_to(root, u) for u in snapshot_files(table, expire, include_deleted=True)}
    if delta_min is not None and (before := retained_now(ctx, table).delta_min_version) is not None:
        out |= _leaving_vectors(ctx, table, root, range(before, delta_min))
    return out


def _leaving_vectors(ctx: TableContext, table, root: str, versions: range) -> set[str]:
    """The deletion-vector files these Delta versions reference (none when the log cannot say: orphan cleanup,
    which lists `_deletes/`, removes them later)."""
    mirror = ctx.mirror(table)
    try:
        first = mirror.load(versions[0]) if versions else None
        return {relative_to(root, u) for u in vector_file_uris(mirror.storage, mirror.root_uri, first, versions[-1])} if first else set()
    except (OSError, DeltaError):  # a commit file missing (FileNotFoundError), a version no longer loadable
        return set()


def orphan_cleanup(ctx: TableContext, identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> OrphanReport:
    table = ctx.load(identifier)
    root = normalize_uri(table.location())
    prefix = root_path(ctx, root)
    grace_cutoff = now_ms() - int(settings.orphan_grace_hours * 3600 * 1000)
    # List first, then read what is referenced: a file committed in between is then seen as referenced.
    listed = list_files(ctx, root)
    current = ctx.load(identifier)
    referenced = referenced_files(ctx, current)
    meta_dirs = metadata_dirs(root, table)
    referenced |= metadata_files(root, current)
    change_data = change_data_files(ctx, current)
    orphans, young = [], 0
    for info in listed:
        rel = info.path[len(prefix):] if info.path.startswith(prefix) else None
        if rel is None or is_protected_path(rel) or rel in referenced or is_catalog_metadata(rel, meta_dirs):
            continue
        if is_change_data(rel) and (change_data is None or rel in change_data):
            continue
        mtime = mtime_ms(info)
        if mtime is None or mtime > grace_cutoff:
            young += 1  # maybe an in-flight write: not an orphan yet
            continue
        orphans.append((rel, info.size or 0))
    result: OrphanReport = {
        "operation": "orphan_cleanup",
        "table": identifier,
        "dry_run": dry_run,
        "files_listed": len(listed),
        "orphans_found": len(orphans),
        "skipped_within_grace": young,
        "orphan_paths": sorted(p for p, _ in orphans),
    }
    if dry_run:
        result.update(files_removed=0, bytes_reclaimed=0, would_reclaim_bytes=sum(s for _, s in orphans))
        return result
    removed, reclaimed = delete_relative(ctx, root, [p for p, _ in orphans])
    result.update(files_removed=removed, bytes_reclaimed=reclaimed)
    return result

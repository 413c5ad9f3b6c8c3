"""Table maintenance that never breaks either format (Dagster-free).

Six operations, each on one table and each returning a plain dict:

    snapshot_expiry   expire Iceberg snapshots outside the retention window, record the window for both
                      formats, and delete the data files that no retained snapshot or version references
    orphan_cleanup    delete files under the table root that no retained snapshot/version references and
                      that are older than a grace period (in-flight writes are younger)
    compaction        bin-pack small files per partition in Spark; one Iceberg snapshot and one Delta
                      version (remove + add with dataChange=false); content unchanged
    metadata_cleanup  unreferenced Iceberg metadata JSON, manifest lists and manifests; Delta log files
                      older than the log retention that a checkpoint covers
    delta_checkpoint  write a Delta checkpoint at the current version (bounded log replay)
    full_maintenance  all of them in a safe order (repair, compaction, expiry, orphans, checkpoint, metadata)

Coordinated retention: a data file is physically deleted only when no retained Iceberg snapshot and no
retained Delta version references it. The retained Delta versions are those from the version that
mirrors the oldest retained Iceberg snapshot to the latest; that boundary is stored as Iceberg table
properties (`lakehouse.retention.*`) so `Lakehouse.read` can refuse older targets with a RetentionError.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.table import Table

from . import iceberg_committer as ic
from .delta_committer import ICEBERG_SNAPSHOT_ID
from .errors import CommitError, SpecError
from .reader import read_parquet_files
from .spec import iceberg_to_spark_schema
from .storage import delete_files, join_uri, normalize_uri, relative_to
from .writer import write_table_files

if TYPE_CHECKING:
    from .lakehouse import Lakehouse

log = logging.getLogger("lakehouse.maintenance")

OPERATIONS = ("snapshot_expiry", "orphan_cleanup", "compaction", "metadata_cleanup", "delta_checkpoint", "full_maintenance")
EXTRA_OPERATIONS = ("repair", "verify_deep")  # Lakehouse.repair / verify(deep=True), so one job/CLI runs every table operation
# Safe order: Delta catches up first (expiry needs the snapshot<->version mapping); compaction before
# expiry (the small files it replaces stay readable through retained snapshots); the checkpoint before
# the log cleanup that relies on it.
FULL_ORDER = ("repair", "compaction", "snapshot_expiry", "orphan_cleanup", "delta_checkpoint", "metadata_cleanup")

PROPERTY_PREFIX = "lakehouse.maintenance."
RETENTION_MIN_TIMESTAMP = "lakehouse.retention.min-timestamp-ms"  # oldest retained snapshot's commit time
RETENTION_DELTA_MIN_VERSION = "lakehouse.retention.delta-min-version"  # oldest retained Delta version
COMPACTION = "compaction"
MB = 1024 * 1024


@dataclass
class MaintenanceSettings:
    """Per-table settings. Defaults are the product's; table properties `lakehouse.maintenance.<name
    with dashes>` override them, and explicit arguments (job config, CLI) override both."""

    snapshot_retention_days: float = 7.0
    min_snapshots_to_keep: int = 5
    compaction_target_mb: float = 128.0
    small_file_fraction: float = 0.75  # a file below this fraction of the target is "small"
    compaction_min_input_files: int = 2  # a partition is rewritten only with at least this many small files
    compaction_max_attempts: int = 3  # re-plans after a conflicting concurrent commit
    orphan_grace_hours: float = 24.0  # files younger than this may belong to an in-flight write
    delta_log_retention_days: float | None = None  # default: the snapshot retention

    @classmethod
    def for_table(cls, table: Table, **overrides) -> "MaintenanceSettings":
        values: dict[str, Any] = {}
        for f in fields(cls):
            prop = PROPERTY_PREFIX + f.name.replace("_", "-")
            if prop in table.properties:
                values[f.name] = table.properties[prop]
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise SpecError(
                f"Table {'.'.join(table.name())}: unknown maintenance setting(s) {sorted(unknown)}; "
                f"known settings: {', '.join(f.name for f in fields(cls))}."
            )
        values.update({k: v for k, v in overrides.items() if v is not None})
        out = cls()
        for f in fields(cls):
            if f.name in values:
                raw = values[f.name]
                kind = int if f.name in ("min_snapshots_to_keep", "compaction_min_input_files", "compaction_max_attempts") else float
                try:
                    setattr(out, f.name, kind(raw))
                except (TypeError, ValueError):
                    raise SpecError(
                        f"Table {'.'.join(table.name())}: maintenance setting {f.name} = {raw!r} is not a number; "
                        f"set table property {PROPERTY_PREFIX + f.name.replace('_', '-')} or the override to a number."
                    ) from None
        if out.min_snapshots_to_keep < 1:
            raise SpecError(f"Table {'.'.join(table.name())}: min_snapshots_to_keep must be at least 1 (the current snapshot).")
        if out.snapshot_retention_days < 0 or out.orphan_grace_hours < 0:
            raise SpecError(f"Table {'.'.join(table.name())}: retention and grace periods cannot be negative.")
        return out

    @property
    def target_bytes(self) -> int:
        return int(self.compaction_target_mb * MB)

    @property
    def small_file_bytes(self) -> int:
        return int(self.target_bytes * self.small_file_fraction)

    @property
    def log_retention_days(self) -> float:
        return self.snapshot_retention_days if self.delta_log_retention_days is None else self.delta_log_retention_days


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ident(table: Table) -> str:
    return ".".join(table.name())


# ---------------------------------------------------------------- what each format references


def _snapshot_files(table: Table, snapshot_ids, include_deleted: bool) -> set[str]:
    """Data file URIs in the manifests of these snapshots (each manifest read once).

    Without deleted entries this is exactly the union of the snapshots' live files (what a reader of
    any of them opens). With them, it also names files the snapshots removed: deletion candidates.
    """
    io, seen, out = table.io, set(), set()
    for sid in snapshot_ids:
        snap = table.metadata.snapshot_by_id(sid)
        if snap is None:
            continue
        for manifest in snap.manifests(io):
            if manifest.manifest_path in seen or manifest.content != ManifestContent.DATA:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=not include_deleted):
                out.add(entry.data_file.file_path)
    return out


def _delta_version_of_snapshots(delta) -> dict[int, int]:
    """Iceberg snapshot id -> Delta version, from the commitInfo the mirror writes (retained log only)."""
    out: dict[int, int] = {}
    for commit in delta.history():
        sid = commit.get(ICEBERG_SNAPSHOT_ID)
        if sid is not None:
            out.setdefault(int(sid), commit["version"])
    return out


def _delta_files(delta, versions) -> set[str]:
    """Relative paths referenced by any of these Delta versions (delta-rs loads each version)."""
    out: set[str] = set()
    for v in versions:
        delta.load_as_version(v)
        out |= set(pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist())
    return out


def _oldest_delta_version(lh: "Lakehouse", table: Table) -> int | None:
    delta = lh.mirror(table).load()
    if delta is None:
        return None
    history = delta.history()
    return min(c["version"] for c in history) if history else delta.version()


@dataclass
class _Retained:
    iceberg_ids: set[int]
    delta_min_version: int | None
    delta_current_version: int | None


def _retained(lh: "Lakehouse", table: Table) -> _Retained:
    """What is retained now: every snapshot in the metadata, and Delta versions from the recorded boundary."""
    ids = {s.snapshot_id for s in table.metadata.snapshots}
    delta = lh.mirror(table).load() if lh.delta_enabled(table) else None
    if delta is None:
        return _Retained(ids, None, None)
    recorded = table.properties.get(RETENTION_DELTA_MIN_VERSION)
    oldest = _oldest_delta_version(lh, table)
    low = max(int(recorded), oldest) if recorded is not None else oldest
    return _Retained(ids, min(low, delta.version()), delta.version())


def referenced_files(lh: "Lakehouse", table: Table, retained: _Retained | None = None) -> set[str]:
    """Relative paths of every data file a retained Iceberg snapshot or retained Delta version references."""
    root = normalize_uri(table.location())
    retained = retained or _retained(lh, table)
    out = {relative_to(root, u) for u in _snapshot_files(table, retained.iceberg_ids, include_deleted=False)}
    if retained.delta_min_version is not None:
        delta = lh.mirror(table).load(retained.delta_min_version)
        out |= _delta_files(delta, range(retained.delta_min_version, retained.delta_current_version + 1))
    return out


def _is_protected_path(relative: str) -> bool:
    # `_`/`.`-prefixed folders and files hold the Delta log, Iceberg metadata (`_iceberg/`) and
    # tool state: never orphans (the same rule as Delta's vacuum and Iceberg's orphan removal).
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def _metadata_dirs(root: str, table: Table) -> set[str]:
    """Folders (relative to the root) holding the table's metadata JSON. A REST catalog server may write
    it wherever it likes (SeaweedFS: `<table>/metadata/`, ignoring `write.metadata.path`)."""
    out = set()
    for uri in [table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)]:
        try:
            rel = relative_to(root, normalize_uri(uri.rsplit("/", 1)[0]))
        except ValueError:
            continue  # outside the table root: never listed anyway
        out.add(rel.strip("/") + "/")
    return out


def _is_catalog_metadata(relative: str, metadata_dirs: set[str]) -> bool:
    # Iceberg metadata (JSON, manifest lists, manifests) is never an orphan, wherever the catalog put it.
    return relative.endswith(".metadata.json") or any(relative.startswith(d) for d in metadata_dirs if d != "/")


def _list_files(lh: "Lakehouse", uri: str) -> list[pafs.FileInfo]:
    fs, path = lh.storage.filesystem(uri)
    try:
        return [i for i in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)) if i.type == pafs.FileType.File]
    except FileNotFoundError:
        return []


def _root_path(lh: "Lakehouse", root: str) -> str:
    return lh.storage.filesystem(root)[1].rstrip("/") + "/"


def _mtime_ms(info: pafs.FileInfo) -> int | None:
    return None if info.mtime is None else int(info.mtime.timestamp() * 1000)


# ---------------------------------------------------------------- health (also what the sensors read)


def table_health(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings | None = None) -> dict[str, Any]:
    """Metadata-only figures: live files, small files, snapshots, Delta log length and lag."""
    table = lh.load(identifier)
    settings = settings or MaintenanceSettings.for_table(table)
    files = ic.live_data_files(table)
    small = [f for f in files if f.file_size_in_bytes < settings.small_file_bytes]
    compactable = sum(len(g) for g in plan_compaction(table, settings, files))
    out: dict[str, Any] = {
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
        report = lh.verify(identifier)
        out["delta_lag_snapshots"] = report.get("delta_lag_snapshots")
    return out


def delta_log_stats(lh: "Lakehouse", table: Table) -> dict[str, Any]:
    """Delta log length: commit files present, commits a reader replays after the last checkpoint."""
    if not lh.delta_enabled(table):
        return {"delta_version": None, "delta_log_files": 0, "delta_commits_since_checkpoint": None}
    root = normalize_uri(table.location())
    log_uri = join_uri(root, "_delta_log")
    names = [i.base_name for i in _list_files(lh, log_uri)]
    commits = sorted(int(n.split(".")[0]) for n in names if n.endswith(".json") and n.split(".")[0].isdigit())
    checkpoints = [int(n.split(".")[0]) for n in names if ".checkpoint." in n and n.endswith(".parquet")]
    delta = lh.mirror(table).load()
    version = delta.version() if delta is not None else None
    last_cp = max(checkpoints) if checkpoints else None
    return {
        "delta_version": version,
        "delta_log_files": len(commits),
        "delta_checkpoint_version": last_cp,
        "delta_commits_since_checkpoint": None if version is None else version - (last_cp if last_cp is not None else -1),
    }


# ---------------------------------------------------------------- snapshot expiry


def snapshot_expiry(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False) -> dict[str, Any]:
    table = lh.load(identifier)
    root = normalize_uri(table.location())
    now = _now_ms()
    cutoff = now - int(settings.snapshot_retention_days * 86400 * 1000)
    # Keep: the newest `min_snapshots_to_keep` of the current branch, everything inside the window,
    # and every branch/tag head (pyiceberg also refuses to expire those).
    chain, snap = [], table.current_snapshot()
    while snap is not None:
        chain.append(snap)
        snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    keep = {s.snapshot_id for s in chain[: settings.min_snapshots_to_keep]}
    keep |= {s.snapshot_id for s in table.metadata.snapshots if s.timestamp_ms >= cutoff}
    keep |= {ref.snapshot_id for ref in table.metadata.refs.values()}
    expire = sorted(s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id not in keep)
    kept = [s for s in table.metadata.snapshots if s.snapshot_id in keep]
    oldest_kept = min(kept, key=lambda s: s.timestamp_ms) if kept else None

    # The Delta boundary: the version that mirrors the oldest retained snapshot (never move backwards).
    delta_min = None
    if lh.delta_enabled(table) and (delta := lh.mirror(table).load()) is not None:
        mapping = _delta_version_of_snapshots(delta)
        kept_versions = [mapping[s.snapshot_id] for s in kept if s.snapshot_id in mapping]
        delta_min = min(kept_versions) if kept_versions else delta.version()
        if (recorded := table.properties.get(RETENTION_DELTA_MIN_VERSION)) is not None:
            delta_min = max(delta_min, int(recorded))
    result: dict[str, Any] = {
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
    # Candidates: files the expiring snapshots reference (read before their metadata goes away).
    candidates = {relative_to(root, u) for u in _snapshot_files(table, expire, include_deleted=True)}
    if dry_run:
        retained = _Retained(keep, delta_min, lh.mirror(table).load().version() if delta_min is not None else None)
        deletable = sorted(candidates - referenced_files(lh, table, retained))
        result.update(files_removed=0, would_remove=deletable, bytes_reclaimed=0, snapshots_after=len(keep))
        return result

    if expire or oldest_kept is not None:
        properties = {}
        if oldest_kept is not None:
            properties[RETENTION_MIN_TIMESTAMP] = str(oldest_kept.timestamp_ms)
        if delta_min is not None:
            properties[RETENTION_DELTA_MIN_VERSION] = str(delta_min)
        from pyiceberg.table.update.snapshot import ExpireSnapshots

        # One metadata commit: the snapshots go and the boundary both formats enforce is recorded.
        with table.transaction() as tx:
            if properties and any(table.properties.get(k) != v for k, v in properties.items()):
                tx.set_properties(properties)
            if expire:
                ExpireSnapshots(tx).by_ids(expire).commit()
    table = lh.load(identifier)
    deletable = sorted(candidates - referenced_files(lh, table))
    removed, reclaimed = _delete(lh, root, deletable)
    result.update(files_removed=removed, bytes_reclaimed=reclaimed, snapshots_after=len(table.metadata.snapshots))
    return result


def _delete(lh: "Lakehouse", root: str, relative_paths: list[str]) -> tuple[int, int]:
    removed = reclaimed = 0
    for rel in relative_paths:
        if _is_protected_path(rel):  # defence in depth: never the log or metadata
            continue
        fs, path = lh.storage.filesystem(join_uri(root, rel))
        info = fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            continue
        fs.delete_file(path)
        removed += 1
        reclaimed += info.size or 0
    return removed, reclaimed


# ---------------------------------------------------------------- orphan cleanup


def orphan_cleanup(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False) -> dict[str, Any]:
    table = lh.load(identifier)
    root = normalize_uri(table.location())
    prefix = _root_path(lh, root)
    grace_cutoff = _now_ms() - int(settings.orphan_grace_hours * 3600 * 1000)
    # List first, then read what is referenced: a file committed in between is then seen as referenced.
    listed = _list_files(lh, root)
    referenced = referenced_files(lh, lh.load(identifier))
    metadata_dirs = _metadata_dirs(root, table)
    orphans, young = [], 0
    for info in listed:
        rel = info.path[len(prefix):] if info.path.startswith(prefix) else None
        if rel is None or _is_protected_path(rel) or rel in referenced or _is_catalog_metadata(rel, metadata_dirs):
            continue
        mtime = _mtime_ms(info)
        if mtime is None or mtime > grace_cutoff:
            young += 1  # maybe an in-flight write: not an orphan yet
            continue
        orphans.append((rel, info.size or 0))
    result = {
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
    removed, reclaimed = _delete(lh, root, [p for p, _ in orphans])
    result.update(files_removed=removed, bytes_reclaimed=reclaimed)
    return result


# ---------------------------------------------------------------- compaction


def plan_compaction(table: Table, settings: MaintenanceSettings, live: list[DataFile] | None = None) -> list[list[DataFile]]:
    """Groups of small live files, one group per partition, each worth rewriting."""
    groups: dict[tuple, list[DataFile]] = {}
    default_spec = table.metadata.default_spec_id
    for f in ic.live_data_files(table) if live is None else live:
        if f.spec_id != default_spec or f.file_size_in_bytes >= settings.small_file_bytes:
            continue
        groups.setdefault((f.spec_id, tuple(f.partition)), []).append(f)
    return [g for g in groups.values() if len(g) >= settings.compaction_min_input_files]


def _commit_compaction(table: Table, adds: list[DataFile], removes: list[DataFile], summary: dict[str, str]):
    """The Iceberg commit of a compaction (a seam the race test wraps with a real concurrent write)."""
    # pyiceberg 0.12 has no REPLACE snapshot: an overwrite that removes exactly the rewritten files and
    # adds their replacement, tagged lakehouse.operation=compaction (the Delta mirror then writes
    # dataChange=false). Its concurrency validation rejects the commit when another writer committed
    # in between, so an append is never lost.
    return ic.commit_files(table, adds, removes, summary)


def compaction(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False, spark=None) -> dict[str, Any]:
    from .lakehouse import WriteResult

    result: dict[str, Any] = {"operation": "compaction", "table": identifier, "dry_run": dry_run, "attempts": 0, "conflicts": 0}
    for attempt in range(1, settings.compaction_max_attempts + 1):
        table = lh.load(identifier)
        groups = plan_compaction(table, settings)
        removes = [f for g in groups for f in g]
        before = table.current_snapshot()
        result.update(
            partitions_compacted=len(groups),
            files_rewritten=len(removes),
            bytes_rewritten=sum(f.file_size_in_bytes for f in removes),
            rows_rewritten=sum(f.record_count for f in removes),
        )
        if dry_run or not groups:
            result.update(files_added=0, files_removed=0, iceberg_snapshot_id=None, delta_version=None, committed=False)
            if not groups:
                result["files_rewritten"] = 0
            return result
        result["attempts"] = attempt
        spark = spark or _spark()
        schema = table.schema()
        root = normalize_uri(table.location())
        df = read_parquet_files(spark, [f.file_path for f in removes], iceberg_to_spark_schema(schema), lh.storage)
        if not table.spec().fields:
            # Unpartitioned: one output per target size; partitioned tables are shuffled by key in write_files.
            df = df.coalesce(max(1, math.ceil(result["bytes_rewritten"] / settings.target_bytes)))
        written = write_table_files(df, table, lh.storage, schema=schema, target_file_size=settings.target_bytes)
        written_uris = [join_uri(root, f.path) for f in written]
        try:
            adds = ic.data_files_from_written(table, root, written)
            if sum(f.record_count for f in adds) != result["rows_rewritten"]:
                raise CommitError(f"Table {identifier}: compaction wrote {sum(f.record_count for f in adds)} rows for {result['rows_rewritten']} input rows; nothing committed.")
            summary = {ic.OPERATION: COMPACTION, "lakehouse.compaction.files-rewritten": str(len(removes))}
            if lh.delta_enabled(table) and (expected := lh.mirror(table).next_version(table)) is not None:
                summary[ic.DELTA_EXPECTED_VERSION] = str(expected)
            snapshot = _commit_compaction(table, adds, removes, summary)
        except (CommitFailedException, ValidationException) as e:
            # Another writer committed first: our files are not referenced anywhere; remove them and re-plan.
            delete_files(lh.storage, written_uris)
            result["conflicts"] += 1
            result["last_conflict"] = f"{type(e).__name__}: {e}"
            log.warning("Table %s: compaction attempt %d conflicted with a concurrent commit (%s); files removed", identifier, attempt, e)
            continue
        except BaseException:
            delete_files(lh.storage, written_uris)
            raise
        wr = WriteResult(identifier, root, table.metadata_location, snapshot.snapshot_id, None, COMPACTION)
        if lh.delta_enabled(table):
            from .delta_committer import SnapshotChange

            lh._mirror_to_delta(table, {snapshot.snapshot_id: SnapshotChange(snapshot, adds, removes, summary)}, wr)
        result.update(
            committed=True,
            files_added=len(adds),
            files_removed=0,  # rewritten files stay on storage while retained snapshots/versions reference them
            bytes_added=sum(f.file_size_in_bytes for f in adds),
            iceberg_snapshot_id=snapshot.snapshot_id,
            parent_snapshot_id=before.snapshot_id if before else None,
            delta_version=wr.delta_version,
            delta_lagging=wr.delta_lagging,
        )
        return result
    result.update(committed=False, aborted=True, files_added=0, files_removed=0, iceberg_snapshot_id=None, delta_version=None)
    log.warning("Table %s: compaction gave up after %d conflicting attempts; the table is unchanged", identifier, result["attempts"])
    return result


def _spark():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


# ---------------------------------------------------------------- Delta checkpoint and metadata cleanup


def delta_checkpoint(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False) -> dict[str, Any]:
    table = lh.load(identifier)
    before = delta_log_stats(lh, table)
    result = {"operation": "delta_checkpoint", "table": identifier, "dry_run": dry_run, **{f"{k}_before": v for k, v in before.items()}}
    delta = lh.mirror(table).load() if lh.delta_enabled(table) else None
    if delta is None or dry_run or before["delta_checkpoint_version"] == before["delta_version"]:
        result.update(checkpoint_written=False, **delta_log_stats(lh, table))
        return result
    delta.create_checkpoint()
    result.update(checkpoint_written=True, **delta_log_stats(lh, table))
    return result


def metadata_cleanup(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False) -> dict[str, Any]:
    table = lh.load(identifier)
    result: dict[str, Any] = {"operation": "metadata_cleanup", "table": identifier, "dry_run": dry_run}
    result.update(_iceberg_metadata_cleanup(lh, table, settings, dry_run))
    result.update(_delta_log_cleanup(lh, table, settings, dry_run))
    result["files_removed"] = result["iceberg_metadata_files_removed"] + result["delta_log_files_removed"]
    return result


def _iceberg_metadata_cleanup(lh: "Lakehouse", table: Table, settings: MaintenanceSettings, dry_run: bool) -> dict[str, Any]:
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
    keep_paths = {lh.storage.filesystem(k)[1] for k in keep}
    meta_dir = table.properties.get("write.metadata.path") or join_uri(normalize_uri(table.location()), "metadata")
    grace_cutoff = _now_ms() - int(settings.orphan_grace_hours * 3600 * 1000)
    stale = []
    for info in _list_files(lh, normalize_uri(meta_dir)):
        name = info.base_name
        if not (name.endswith(".metadata.json") or name.endswith(".avro")) or info.path in keep_paths:
            continue
        mtime = _mtime_ms(info)
        if mtime is None or mtime > grace_cutoff:
            continue
        stale.append(info)
    removed = reclaimed = 0
    if not dry_run:
        fs, _ = lh.storage.filesystem(normalize_uri(meta_dir))
        for info in stale:
            fs.delete_file(info.path)
            removed += 1
            reclaimed += info.size or 0
    return {
        "iceberg_metadata_files_removed": removed,
        "iceberg_metadata_bytes_reclaimed": reclaimed,
        "iceberg_stale_metadata_files": sorted(i.base_name for i in stale),
    }


def _delta_log_cleanup(lh: "Lakehouse", table: Table, settings: MaintenanceSettings, dry_run: bool) -> dict[str, Any]:
    """delta-rs `cleanup_metadata`: log files older than `delta.logRetentionDuration` that a checkpoint covers."""
    delta = lh.mirror(table).load() if lh.delta_enabled(table) else None
    if delta is None:
        return {"delta_log_files_removed": 0}
    before = delta_log_stats(lh, table)
    # A stable value (set once per settings change): the retention window itself.
    wanted = f"interval {max(0, int(math.ceil(settings.log_retention_days * 86400)))} seconds"
    if not dry_run:
        if delta.metadata().configuration.get("delta.logRetentionDuration") != wanted:
            # A metadata-only Delta commit (no data files); delta-rs reads the retention from the table.
            delta.alter.set_table_properties({"delta.logRetentionDuration": wanted}, raise_if_not_exists=False)
            delta.update_incremental()
        delta.cleanup_metadata()
    after = delta_log_stats(lh, table)
    if not dry_run:
        # Versions whose log is gone cannot be time-travelled to: move the recorded boundary up.
        history = lh.mirror(table).load().history()
        oldest = min(c["version"] for c in history) if history else None
        recorded = table.properties.get(RETENTION_DELTA_MIN_VERSION)
        if oldest is not None and (recorded is None or int(recorded) < oldest) and oldest > 0:
            with table.transaction() as tx:
                tx.set_properties({RETENTION_DELTA_MIN_VERSION: str(oldest)})
    return {
        "delta_log_retention": wanted,
        "delta_log_files_removed": max(0, before["delta_log_files"] - after["delta_log_files"]) if not dry_run else 0,
        "delta_log_files": after["delta_log_files"],
        "delta_commits_since_checkpoint": after["delta_commits_since_checkpoint"],
    }


# ---------------------------------------------------------------- entry points


def repair(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False) -> dict[str, Any]:
    if dry_run:
        report = lh.verify(identifier)
        return {"operation": "repair", "table": identifier, "dry_run": True, "delta_lag_snapshots": report.get("delta_lag_snapshots"), "repaired": False}
    return {"operation": "repair", "dry_run": False, **lh.repair(identifier)}


def verify_deep(lh: "Lakehouse", identifier: str, settings: MaintenanceSettings, dry_run: bool = False) -> dict[str, Any]:
    """The formats-agree check including content (core/verify.py); read-only, so dry_run changes nothing."""
    report = lh.verify(identifier, deep=True)
    return {"operation": "verify_deep", "table": identifier, "agree": report["agree"], "differences": report["differences"], "content": report.get("content")}


_OPS: dict[str, Callable[..., dict[str, Any]]] = {
    "snapshot_expiry": snapshot_expiry,
    "orphan_cleanup": orphan_cleanup,
    "compaction": compaction,
    "metadata_cleanup": metadata_cleanup,
    "delta_checkpoint": delta_checkpoint,
    "repair": repair,
    "verify_deep": verify_deep,
}


def run(lh: "Lakehouse", identifier: str, operation: str, *, dry_run: bool = False, spark=None, **overrides) -> dict[str, Any]:
    """Run one operation (or full_maintenance) on one table; returns what it did plus the table's health after."""
    if operation not in OPERATIONS + EXTRA_OPERATIONS:
        raise SpecError(
            f"Table {identifier}: unknown maintenance operation {operation!r}; use one of {', '.join(OPERATIONS + EXTRA_OPERATIONS)}."
        )
    started = time.monotonic()
    settings = MaintenanceSettings.for_table(lh.load(identifier), **overrides)
    if operation == "full_maintenance":
        steps = [_run_one(lh, identifier, op, settings, dry_run, spark) for op in FULL_ORDER]
        result: dict[str, Any] = {"operation": "full_maintenance", "table": identifier, "dry_run": dry_run, "steps": steps}
        for key in ("files_rewritten", "files_removed", "bytes_reclaimed", "snapshots_expired"):
            result[key] = sum(int(s.get(key) or 0) for s in steps)
    else:
        result = _run_one(lh, identifier, operation, settings, dry_run, spark)
    result["settings"] = asdict(settings)
    result["health"] = table_health(lh, identifier, settings)
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _run_one(lh, identifier, op, settings, dry_run, spark) -> dict[str, Any]:
    if op == "compaction":
        return compaction(lh, identifier, settings, dry_run, spark=spark)
    return _OPS[op](lh, identifier, settings, dry_run)

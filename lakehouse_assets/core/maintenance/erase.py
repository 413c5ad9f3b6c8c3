"""Erasure: the rows a condition matches leave every file under the table's root, in both formats, with the history
that held them. What a right-to-erasure request needs, where a delete only hides rows from new reads.

1. Refused while a branch or tag pins snapshots (publish or drop it first), or while the contract's quarantine table
   may hold the rows too, unless `dependents=True` erases them from it as well.
2. The rows leave the table (core/write/by_condition.py in erase mode): every live file whose bytes hold a match,
   rows a position delete or deletion vector already hides included, is rewritten without them, copy-on-write
   whatever the table's mode. The version's change data is one empty file: no event carries an erased row.
3. One more snapshot writes the manifests again without the DELETED entries that keep the old files' column bounds
   (core/formats/iceberg/live_manifests.py); its Delta version changes no row.
4. History ends there. Every older snapshot expires with the files only it referenced (retention.py at zero
   retention); the Delta log gets a checkpoint at its last version and loses every commit and checkpoint before it
   (what delta-rs's `cleanup_metadata` removes at zero log retention, which an erasure cannot wait for); the change
   data no retained version names, the older metadata JSON (their snapshot summaries) and the manifests and manifest
   lists no retained snapshot reads go. Metadata and change data younger than the erasure's start are left: they
   may be another writer's commit in flight.
5. The proof (verify/erasure.py) decodes every file under the root. An audit record of what was done (counts, the
   condition's hash, never a value) is written under `_lakehouse/erasures/`.

The condition's text is never written into either log, a snapshot summary, the report or a log line: only its hash.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time

from ..errors import InputError
from ..formats import history as formats_history
from ..formats.iceberg.live_manifests import commit_live_manifests
from ..io.storage import join_uri, normalize_uri
from ..properties import Operation, SummaryKeys
from ..spark.session import active_session
from ..table import commit_lock
from ..table.context import TableContext
from ..table.drop_rename import QUARANTINE_SUFFIX
from ..write import by_condition, transaction
from ..write.condition import condition_of
from ..write.target import WriteTarget
from . import logs, retention
from .references import change_data_files, delete_relative, is_change_data, list_files, mtime_ms, now_ms, root_path
from .settings import MaintenanceSettings
from .verify.erasure import prove_erased

log = logging.getLogger("lakehouse.maintenance")

AUDIT_DIR = "_lakehouse/erasures"


def erase(ctx: TableContext, identifier: str, where: str, *, foreign_default: str, dependents: bool = False, spark=None) -> dict:
    """Erase the rows `where` matches (see the module docstring); returns the report, the proof in it."""
    started = now_ms()
    spark = active_session(spark)
    table = ctx.load(identifier)
    quarantine = _refuse_dependents(ctx, identifier, table, dependents)
    condition = _checked(ctx, identifier, table, where, spark)
    if quarantine is not None:
        _checked(ctx, quarantine, ctx.load(quarantine), where, spark)  # before either table changes
    snapshots_before = len(table.metadata.snapshots)
    delta_before = _oldest_delta_version(ctx, table)
    clock = time.monotonic()
    written = by_condition.run(ctx, by_condition.RowOperation(identifier, where, erase=True), foreign_default=foreign_default, spark=spark)
    seconds = {"rows": time.monotonic() - clock}
    history = _end_history(ctx, identifier, started)
    seconds["history"] = time.monotonic() - clock - seconds["rows"]
    table = ctx.load(identifier)
    report = {
        "table": identifier,
        "condition_sha256": condition.digest,
        "rows_erased": written.rows_removed or 0,
        "files_rewritten": written.files_removed,
        "snapshots_removed": snapshots_before + (1 if written.iceberg_snapshot_id else 0) + (1 if history["live_manifests"] else 0) - len(table.metadata.snapshots),
        "delta_versions_removed": history["oldest_delta_version"] - delta_before if delta_before is not None else None,
        "files_deleted": history["files_deleted"],
        "oldest_snapshot_id": table.current_snapshot().snapshot_id if table.current_snapshot() else None,
        "oldest_delta_version": history["oldest_delta_version"],
        "erased_at": dt.datetime.now(dt.timezone.utc).isoformat(),
    }
    if quarantine is not None:
        report["quarantine"] = erase(ctx, quarantine, where, foreign_default=foreign_default, spark=spark)
    clock = time.monotonic()
    report["proof"] = proof(ctx, identifier, where, spark=spark)
    report["seconds"] = {k: round(v, 3) for k, v in {**seconds, "proof": time.monotonic() - clock}.items()}
    _audit(ctx, table, report)
    return report


def _checked(ctx: TableContext, identifier: str, table, where: str, spark):
    spark_schema = WriteTarget(identifier, table, table.schema(), ctx.storage).spark_schema()
    return condition_of(identifier, where, table.schema(), spark_schema, spark, what="erasure condition", secret=True)


def proof(ctx: TableContext, identifier: str, where: str, *, spark=None) -> dict:
    """`lakehouse verify --erased`: decode every file under the table's root and look for what `where` matches."""
    spark = active_session(spark)
    table = ctx.load(identifier)
    spark_schema = WriteTarget(identifier, table, table.schema(), ctx.storage).spark_schema()
    condition = _checked(ctx, identifier, table, where, spark)
    current = {f.field_id: f.name for f in table.schema().fields}
    names = {f.name: current[f.field_id] for schema in table.schemas().values() for f in schema.fields if f.field_id in current}
    names |= {f.name: f.name for f in table.schema().fields} | {f"#{i}": name for i, name in current.items()}
    if ctx.delta_enabled(table) and (delta := ctx.mirror(table).load()) is not None:
        for f in delta.schema().fields:
            if physical := (f.metadata or {}).get("delta.columnMapping.physicalName"):
                names[physical] = f.name
    root = normalize_uri(table.location())
    prefix = root_path(ctx, root)
    files = [i.path[len(prefix):] for i in list_files(ctx, root) if i.path.startswith(prefix)]
    return prove_erased(spark, table, identifier, condition, spark_schema, ctx.storage, names, files)


def _refuse_dependents(ctx: TableContext, identifier: str, table, dependents: bool) -> str | None:
    """The quarantine table to erase too (`dependents`); refuses while a branch or tag, or an untold quarantine table, holds rows."""
    from ..table.drop_rename import _exists

    pinned = sorted(name for name in table.metadata.refs if name != "main")
    quarantine = identifier + QUARANTINE_SUFFIX
    has_quarantine = not identifier.endswith(QUARANTINE_SUFFIX) and _exists(ctx, quarantine)
    reasons = [f"branch or tag {name!r} pins snapshots the erasure cannot rewrite: publish or drop it first" for name in pinned]
    if has_quarantine and not dependents:
        reasons.append(f"the contract's quarantine table {quarantine} may hold the rows too: erase with dependents=True (CLI --dependents) to erase them from it as well")
    if reasons:
        raise InputError(f"Table {identifier}: erasure refused, nothing was changed: {'; '.join(reasons)}.")
    return quarantine if has_quarantine else None


def _oldest_delta_version(ctx: TableContext, table) -> int | None:
    if not ctx.delta_enabled(table) or (delta := ctx.mirror(table).load()) is None:
        return None
    return formats_history.oldest_delta_version(delta)


def _end_history(ctx: TableContext, identifier: str, started: int) -> dict:
    """Steps 3 and 4 of the module docstring; returns what they removed."""
    with commit_lock.holding(ctx.catalog, identifier):
        table = ctx.load(identifier)
        snapshot = commit_live_manifests(table, {SummaryKeys.OPERATION: Operation.LIVE_MANIFESTS})
        table = ctx.load(identifier)
        if ctx.delta_enabled(table):
            transaction.sync_delta(ctx.mirror(table), table)
    root = normalize_uri(table.location())
    metadata = _metadata_of_older_snapshots(table)
    grace = max(0.0, (now_ms() - started) / 3_600_000)
    settings = MaintenanceSettings.for_table(table, snapshot_retention_days=0, min_snapshots_to_keep=1, orphan_grace_hours=grace, delta_log_retention_days=0)
    expiry = retention.snapshot_expiry(ctx, identifier, settings)
    table = ctx.load(identifier)
    oldest_delta = logs.delta_log_truncate(ctx, table) if ctx.delta_enabled(table) else None
    table = ctx.load(identifier)  # the truncation recorded the oldest Delta version: a metadata commit
    deleted = expiry["files_removed"] + _delete_unread_metadata(ctx, table, metadata) + _delete_unread_change_data(ctx, table, root, started)
    return {"live_manifests": snapshot is not None, "files_deleted": deleted, "oldest_delta_version": oldest_delta}


def _metadata_of_older_snapshots(table) -> set[str]:
    """The metadata files of every snapshot but the current one, and the older metadata JSON: what may go."""
    current = table.current_snapshot()
    out = {e.metadata_file for e in table.metadata.metadata_log}
    for snap in table.metadata.snapshots:
        if current is None or snap.snapshot_id != current.snapshot_id:
            out.add(snap.manifest_list)
            out |= {m.manifest_path for m in snap.manifests(table.io)}
    return out


def _delete_unread_metadata(ctx: TableContext, table, candidates: set[str]) -> int:
    """Delete the candidates no retained snapshot reads (the current metadata JSON is never among them)."""
    candidates = candidates | {e.metadata_file for e in table.metadata.metadata_log}  # older snapshots' summaries
    keep = {table.metadata_location}
    for snap in table.metadata.snapshots:
        keep.add(snap.manifest_list)
        keep |= {m.manifest_path for m in snap.manifests(table.io)}
    removed = 0
    for uri in sorted(candidates - keep):
        fs, path = ctx.storage.filesystem(normalize_uri(uri))
        try:
            fs.delete_file(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def _delete_unread_change_data(ctx: TableContext, table, root: str, started: int) -> int:
    """Change data files no retained Delta version names, written before the erasure started."""
    retained = change_data_files(ctx, table)
    if retained is None:
        raise InputError(f"Table {'.'.join(table.name())}: a retained Delta version's commit file cannot be read, so the change data to keep is unknown; run `lakehouse repair`, then erase again.")
    prefix = root_path(ctx, root)
    stale = []
    for info in list_files(ctx, join_uri(root, "_change_data")):
        rel = info.path[len(prefix):]
        if is_change_data(rel) and rel not in retained and (mtime_ms(info) or 0) < started:
            stale.append(rel)
    return delete_relative(ctx, root, stale)[0]


def _audit(ctx: TableContext, table, report: dict) -> None:
    """One JSON file per erasure under `_lakehouse/erasures/`: counts and the condition's hash, never a value."""
    record = {k: v for k, v in report.items() if k not in ("proof", "quarantine")}
    record["erased"] = report["proof"]["erased"]
    name = f"{report['erased_at'].replace(':', '').replace('+', 'Z')[:22]}-{report['condition_sha256']}.json"
    fs, path = ctx.storage.filesystem(join_uri(normalize_uri(table.location()), f"{AUDIT_DIR}/{name}"))
    if type(fs).__name__ == "LocalFileSystem":
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(json.dumps(record, sort_keys=True).encode())
    report["audit_record"] = f"{AUDIT_DIR}/{name}"
    log.info("Table %s: erasure %s: %d row(s) erased, %d file(s) deleted", report["table"], report["condition_sha256"], report["rows_erased"], report["files_deleted"])

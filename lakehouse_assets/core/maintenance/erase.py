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
   retention); the Delta log starts again at the version mirroring that snapshot, from a checkpoint written without
   tombstones (logs.tombstones_expired), every commit and checkpoint before it deleted (what delta-rs's
   `cleanup_metadata` removes at zero log retention, which an erasure cannot wait for); the change
   data the removed versions named, the older metadata JSON (their snapshot summaries) and the manifests and manifest
   lists of the expired snapshots go: files known to belong to removed history, never a file another writer may
   have written for a commit still in flight (change data no version names goes only past the table's orphan grace).
5. The proof (verify/erasure.py) decodes every file under the root. An audit record of what was done (counts, the
   erasure's id, never a value) is written under `_lakehouse/erasures/`.

The condition's text is never written into either log, a snapshot summary, the report or a log line: only the
erasure's id, an HMAC of the text keyed by LAKEHOUSE_ERASURE_KEY when it is set, else a random id.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import time

from ..errors import InputError
from ..formats import history as formats_history
from ..formats.delta.log_commit import cdc_actions
from ..formats.iceberg.live_manifests import commit_live_manifests
from ..io.storage import delta_path, join_uri, normalize_uri
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
ERASURE_KEY_ENV = "LAKEHOUSE_ERASURE_KEY"  # the HMAC key of erasure ids (core/write/condition.py erasure_id)


def erase(ctx: TableContext, identifier: str, where: str, *, foreign_default: str, dependents: bool = False, spark=None) -> dict:
    """Erase the rows `where` matches (see the module docstring); returns the report, the proof in it."""
    spark = active_session(spark)
    table = ctx.load(identifier)
    quarantine = _refuse_dependents(ctx, identifier, table, dependents)
    condition = _checked(ctx, identifier, table, where, spark)
    if quarantine is not None:
        _checked(ctx, quarantine, ctx.load(quarantine), where, spark)  # before either table changes
    snapshots_before = len(table.metadata.snapshots)
    delta_before = _oldest_delta_version(ctx, table)
    clock = time.monotonic()
    erasure_id = condition.erasure_id(os.environ.get(ERASURE_KEY_ENV))
    written = by_condition.run(ctx, by_condition.RowOperation(identifier, where, erase=True, erasure_id=erasure_id), foreign_default=foreign_default, spark=spark)
    seconds = {"rows": time.monotonic() - clock}
    history = _end_history(ctx, identifier)
    seconds["history"] = time.monotonic() - clock - seconds["rows"]
    table = ctx.load(identifier)
    report = {
        "table": identifier,
        "erasure_id": erasure_id,
        "erasure_id_keyed": bool(os.environ.get(ERASURE_KEY_ENV)),
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
    return prove_erased(spark, table, identifier, condition, spark_schema, ctx.storage, names, files, _read_options(table))


def _read_options(table) -> dict:
    """How the proof reads the table's files: casting narrower types after a widening, and with the identity partition
    values of files that lack the column (imported folders), for every file a retained snapshot names."""
    from ..formats.delta import partition_constants
    from ..table.evolution import types_were_widened

    known = {}
    for snap in table.metadata.snapshots:
        for manifest in snap.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.data_file.content == 0:  # data files
                    known.setdefault(entry.data_file.file_path, entry.data_file)
    constants = partition_constants.of_files(table, list(known.values()), table.schema()) if known else {}
    return {"cast_files": types_were_widened(table), "constants": constants or None}


def _refuse_dependents(ctx: TableContext, identifier: str, table, dependents: bool) -> str | None:
    """The quarantine table to erase too (`dependents`); refuses while a branch or tag, or an untold quarantine table, holds rows."""
    from ..table.drop_rename import _exists

    quarantine = identifier + QUARANTINE_SUFFIX
    has_quarantine = not identifier.endswith(QUARANTINE_SUFFIX) and _exists(ctx, quarantine)
    pinned = [(identifier, name) for name in sorted(table.metadata.refs) if name != "main"]
    if has_quarantine:  # checked before either table changes
        pinned += [(quarantine, name) for name in sorted(ctx.load(quarantine).metadata.refs) if name != "main"]
    reasons = [f"branch or tag {name!r} of {t} pins snapshots the erasure cannot rewrite: publish or drop it first" for t, name in pinned]
    if has_quarantine and not dependents:
        reasons.append(f"the contract's quarantine table {quarantine} may hold the rows too: erase with dependents=True (CLI --dependents) to erase them from it as well")
    if reasons:
        raise InputError(f"Table {identifier}: erasure refused, nothing was changed: {'; '.join(reasons)}.")
    return quarantine if has_quarantine else None


def _oldest_delta_version(ctx: TableContext, table) -> int | None:
    if not ctx.delta_enabled(table) or (delta := ctx.mirror(table).load()) is None:
        return None
    return formats_history.oldest_delta_version(delta)


def _end_history(ctx: TableContext, identifier: str) -> dict:
    """Steps 3 and 4 of the module docstring; returns what they removed."""
    with commit_lock.holding(ctx.catalog, identifier):
        table = ctx.load(identifier)
        delta_on = ctx.delta_enabled(table) and ctx.mirror(table).load() is not None
        with logs.tombstones_expired(ctx, table) if delta_on else contextlib.nullcontext():
            snapshot = commit_live_manifests(table, {SummaryKeys.OPERATION: Operation.LIVE_MANIFESTS})
            table = ctx.load(identifier)
            if delta_on:
                transaction.sync_delta(ctx.mirror(table), table)
                ctx.mirror(table).load().create_checkpoint()  # the log's new start, without the erasure's removes
    root = normalize_uri(table.location())
    metadata = _metadata_of_older_snapshots(table)
    settings = MaintenanceSettings.for_table(table, snapshot_retention_days=0, min_snapshots_to_keep=1, delta_log_retention_days=0)
    expiry = retention.snapshot_expiry(ctx, identifier, settings)
    table = ctx.load(identifier)
    named = _change_data_named(ctx, table)  # by the versions the truncation removes: read while their commits exist
    oldest_delta = logs.delta_log_truncate(ctx, table) if ctx.delta_enabled(table) else None
    table = ctx.load(identifier)  # the truncation recorded the oldest Delta version: a metadata commit
    deleted = expiry["files_removed"] + _delete_unread_metadata(ctx, table, metadata) + _delete_unread_change_data(ctx, table, root, named, settings)
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


def _change_data_named(ctx: TableContext, table) -> set[str]:
    """Relative paths of the change data files every Delta version still in the log names."""
    if not ctx.delta_enabled(table) or (delta := ctx.mirror(table).load()) is None:
        return set()
    mirror = ctx.mirror(table)
    out: set[str] = set()
    for version in range(formats_history.oldest_delta_version(delta), delta.version() + 1):
        out |= {delta_path(a["path"]) for a in cdc_actions(mirror.storage, mirror.root_uri, version) or []}
    return out


def _delete_unread_change_data(ctx: TableContext, table, root: str, named: set[str], settings: MaintenanceSettings) -> int:
    """Change data files no retained Delta version names: those the removed versions named, and those no version named
    that are older than the table's orphan grace (younger ones may be a write's in flight, before its commit)."""
    retained = change_data_files(ctx, table)
    if retained is None:
        raise InputError(f"Table {'.'.join(table.name())}: a retained Delta version's commit file cannot be read, so the change data to keep is unknown; run `lakehouse repair`, then erase again.")
    prefix = root_path(ctx, root)
    cutoff = now_ms() - int(settings.orphan_grace_hours * 3_600_000)
    stale = []
    for info in list_files(ctx, join_uri(root, "_change_data")):
        rel = info.path[len(prefix):]
        if not is_change_data(rel) or rel in retained:
            continue
        if rel in named or (mtime_ms(info) or now_ms()) < cutoff:
            stale.append(rel)
    return delete_relative(ctx, root, stale)[0]


def _audit(ctx: TableContext, table, report: dict) -> None:
    """One JSON file per erasure under `_lakehouse/erasures/`: counts and the condition's hash, never a value."""
    record = {k: v for k, v in report.items() if k not in ("proof", "quarantine")}
    record["erased"] = report["proof"]["erased"]
    name = f"{report['erased_at'].replace(':', '').replace('+', 'Z')[:22]}-{report['erasure_id']}.json"
    fs, path = ctx.storage.filesystem(join_uri(normalize_uri(table.location()), f"{AUDIT_DIR}/{name}"))
    if type(fs).__name__ == "LocalFileSystem":
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(json.dumps(record, sort_keys=True).encode())
    report["audit_record"] = f"{AUDIT_DIR}/{name}"
    log.info("Table %s: erasure %s: %d row(s) erased, %d file(s) deleted", report["table"], report["erasure_id"], report["rows_erased"], report["files_deleted"])

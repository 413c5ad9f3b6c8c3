"""What each format references, and the retention boundary both formats share.

Coordinated retention: a data file is physically deleted only when no retained Iceberg snapshot and no
retained Delta version references it. So is a merge-on-read table's delete file in `_deletes/`: an Iceberg
position-delete file while a retained snapshot lists it, a Delta deletion-vector file while a retained
version's live file carries its vector (removing either would bring deleted rows back to that version's
readers). The retained Delta versions are those from the version that mirrors the oldest retained Iceberg
snapshot to the latest; that boundary is stored as Iceberg table properties (`lakehouse.retention.*`) so
`Lakehouse.read` can refuse older targets with a RetentionError.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.table import Table

from ..formats import history
from ..formats.delta.log_commit import CHANGE_DATA_DIR, cdc_actions
from ..formats.delta.logged_vectors import vector_file_uris
from ..formats.position_deletes import DELETES_FOLDER
from ..io.storage import delta_path, join_uri, normalize_uri, relative_to
from ..properties import TableProperties
from ..table.context import TableContext

RETENTION_MIN_TIMESTAMP = TableProperties.RETENTION_MIN_TIMESTAMP
RETENTION_DELTA_MIN_VERSION = TableProperties.RETENTION_DELTA_MIN_VERSION


def now_ms() -> int:
    return int(time.time() * 1000)


def snapshot_files(table: Table, snapshot_ids, include_deleted: bool) -> set[str]:
    """Data and delete file URIs in the manifests of these snapshots (each manifest read once).

    Without deleted entries this is exactly the union of the snapshots' live files (what a reader of
    any of them opens). With them, it also names files the snapshots removed: deletion candidates.
    Delete files (other engines' row-level deletes) count as referenced like data files: removing
    one would bring its deleted rows back.
    """
    io, seen, out = table.io, set(), set()
    for sid in snapshot_ids:
        snap = table.metadata.snapshot_by_id(sid)
        if snap is None:
            continue
        for manifest in snap.manifests(io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=not include_deleted):
                out.add(entry.data_file.file_path)
    return out


def delta_files(delta, versions) -> set[str]:
    """Relative paths referenced by any of these Delta versions (delta-rs loads each version)."""
    out: set[str] = set()
    for v in versions:
        delta.load_as_version(v)
        out |= {delta_path(p) for p in pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist()}
    return out


@dataclass
class Retained:
    iceberg_ids: set[int]
    delta_min_version: int | None
    delta_current_version: int | None


def retained_now(ctx: TableContext, table: Table) -> Retained:
    """What is retained now: every snapshot in the metadata, and Delta versions from the recorded boundary."""
    ids = {s.snapshot_id for s in table.metadata.snapshots}
    delta = ctx.mirror(table).load() if ctx.delta_enabled(table) else None
    if delta is None:
        return Retained(ids, None, None)
    recorded = table.properties.get(RETENTION_DELTA_MIN_VERSION)
    oldest = history.oldest_delta_version(delta)
    low = max(int(recorded), oldest) if recorded is not None else oldest
    return Retained(ids, min(low, delta.version()), delta.version())


def referenced_files(ctx: TableContext, table: Table, retained: Retained | None = None) -> set[str]:
    """Relative paths of every data file a retained Iceberg snapshot or retained Delta version references."""
    root = normalize_uri(table.location())
    retained = retained or retained_now(ctx, table)
    out = {relative_to(root, u) for u in snapshot_files(table, retained.iceberg_ids, include_deleted=False)}
    if retained.delta_min_version is not None:
        delta = ctx.mirror(table).load(retained.delta_min_version)
        out |= vector_files(ctx, table, delta, retained.delta_current_version)
        out |= delta_files(delta, range(retained.delta_min_version, retained.delta_current_version + 1))
    return out


def vector_files(ctx: TableContext, table: Table, first, last_version: int) -> set[str]:
    """Relative paths of the deletion-vector files the live files of the Delta versions from `first` (a log loaded at
    the first) to `last_version` reference. A log that cannot be replayed says nothing about them: then every file in
    `_deletes/` counts as referenced."""
    mirror = ctx.mirror(table)
    root = normalize_uri(table.location())
    try:
        return {relative_to(root, u) for u in vector_file_uris(mirror.storage, mirror.root_uri, first, last_version)}
    except OSError:  # a commit file missing: FileNotFoundError
        prefix = root_path(ctx, root)
        return {i.path[len(prefix):] for i in list_files(ctx, join_uri(root, DELETES_FOLDER)) if i.path.startswith(prefix)}


def is_protected_path(relative: str) -> bool:
    # `_`/`.`-prefixed folders and files hold the Delta log, Iceberg metadata (`_iceberg/`) and
    # tool state: never orphans (the same rule as Delta's vacuum and Iceberg's orphan removal).
    # Change data files are the exception, as in Delta's vacuum: `change_data_files` says which are retained;
    # and so are delete files, which `referenced_files` names for both formats.
    return not is_change_data(relative) and not is_delete_file(relative) and any(part.startswith(("_", ".")) for part in relative.split("/"))


def is_delete_file(relative: str) -> bool:
    """A merge-on-read table's Iceberg position-delete file or Delta deletion-vector file."""
    return relative.startswith(DELETES_FOLDER + "/") and "/" not in relative[len(DELETES_FOLDER) + 1 :] and not relative.rsplit("/", 1)[1].startswith(".")


def is_change_data(relative: str) -> bool:
    return relative.startswith(CHANGE_DATA_DIR + "/") and not any(part.startswith(".") for part in relative.split("/"))


def change_data_files(ctx: TableContext, table: Table, retained: Retained | None = None) -> set[str] | None:
    """Relative paths of the change data files the retained Delta versions' `cdc` actions name; None (keep them
    all) when a retained version's commit file cannot be read. A version past the retention boundary cannot be
    read, so neither can its change feed: its files may go, as Delta's vacuum removes them."""
    retained = retained or retained_now(ctx, table)
    if retained.delta_min_version is None:
        return set()
    mirror = ctx.mirror(table)
    out: set[str] = set()
    for version in range(retained.delta_min_version, retained.delta_current_version + 1):
        actions = cdc_actions(mirror.storage, mirror.root_uri, version)
        if actions is None:
            return None
        out |= {delta_path(a["path"]) for a in actions}
    return out


def metadata_dirs(root: str, table: Table) -> set[str]:
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


def metadata_files(root: str, table: Table) -> set[str]:
    """Relative paths of the Iceberg metadata every retained snapshot needs, computed rather than
    guessed by folder: the metadata JSONs of the log, each snapshot's manifest list and manifests, and
    a Hadoop catalog's `version-hint.text` next to them (an imported table keeps its pre-import
    metadata where its writer put it, which the metadata log may no longer name)."""
    uris = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    for snap in table.metadata.snapshots:
        uris.add(snap.manifest_list)
        uris |= {m.manifest_path for m in snap.manifests(table.io)}
    uris |= {u.rsplit("/", 1)[0] + "/version-hint.text" for u in list(uris)}
    out = set()
    for uri in uris:
        try:
            out.add(relative_to(root, normalize_uri(uri)))
        except ValueError:
            continue  # outside the table root: never listed anyway
    return out


def is_catalog_metadata(relative: str, dirs: set[str]) -> bool:
    # Iceberg metadata (JSON, manifest lists, manifests) is never an orphan, wherever the catalog put it.
    return relative.endswith(".metadata.json") or any(relative.startswith(d) for d in dirs if d != "/")


def list_files(ctx: TableContext, uri: str) -> list[pafs.FileInfo]:
    fs, path = ctx.storage.filesystem(uri)
    try:
        return [i for i in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)) if i.type == pafs.FileType.File]
    except FileNotFoundError:
        return []


def root_path(ctx: TableContext, root: str) -> str:
    return ctx.storage.filesystem(root)[1].rstrip("/") + "/"


def mtime_ms(info: pafs.FileInfo) -> int | None:
    return None if info.mtime is None else int(info.mtime.timestamp() * 1000)


def delete_relative(ctx: TableContext, root: str, relative_paths: list[str]) -> tuple[int, int]:
    removed = reclaimed = 0
    for rel in relative_paths:
        if is_protected_path(rel):  # defence in depth: never the log or metadata
            continue
        fs, path = ctx.storage.filesystem(join_uri(root, rel))
        info = fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            continue
        fs.delete_file(path)
        removed += 1
        reclaimed += info.size or 0
    return removed, reclaimed

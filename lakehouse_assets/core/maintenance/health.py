"""Metadata-only figures about a table: live and small files, position deletes and what they cost readers, snapshots,
Delta log length and lag (what sensors read)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table import Table

from ..collector import collector_paused
from ..formats import manifest_lists
from ..memo import ByImmutableFiles
from ..table.context import TableContext
from .delete_figures import files_with_deletes, read_cost
from .logs import delta_log_stats
from .reports import TableHealth
from .settings import MaintenanceSettings


@dataclass(frozen=True)
class _ManifestFigures:
    """What one data manifest's live entries contribute to the health figures."""

    files: int
    bytes: int
    small: Counter  # (spec id, partition) -> live files under the small-file size

    @classmethod
    def read(cls, table: Table, manifest: ManifestFile, small_file_bytes: int) -> "_ManifestFigures":
        files, size, small = 0, 0, Counter()
        with collector_paused():
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                f = entry.data_file
                files += 1
                size += f.file_size_in_bytes
                if f.file_size_in_bytes < small_file_bytes:
                    small[(f.spec_id, tuple(f.partition))] += 1
        return cls(files, size, small)


# A manifest never changes once written (a commit writes new ones), so its figures are read once per
# process: a write's health then opens only the manifests that write added, not every manifest of the
# table (which grew with the table's file count). Bounded, least recently used first out.
_FIGURES = ByImmutableFiles(max_weight=4096)


def _manifest_figures(table: Table, manifest: ManifestFile, small_file_bytes: int) -> _ManifestFigures:
    return _FIGURES.get((manifest.manifest_path, small_file_bytes), lambda: _ManifestFigures.read(table, manifest, small_file_bytes))


def table_health(ctx: TableContext, identifier: str, settings: MaintenanceSettings | None = None, table: Table | None = None) -> TableHealth:
    """Metadata-only figures: live files, small files, snapshots, Delta log length and lag.

    `table`: the table as the caller just loaded it (the metadata JSON holds every snapshot, so each
    load costs more as history grows: load it once). Each manifest is opened once per process
    (`_manifest_figures`), so a write's health costs the manifests it added, not the table's file count.
    """
    table = table if table is not None else ctx.load(identifier)
    settings = settings or MaintenanceSettings.for_table(table)
    snapshot = table.current_snapshot()
    manifests = [m for m in manifest_lists.manifests(table.io, snapshot) if m.content == ManifestContent.DATA] if snapshot is not None else []
    figures = [_manifest_figures(table, m, settings.small_file_bytes) for m in manifests]
    files = sum(f.files for f in figures)
    small_by_partition: Counter = Counter()
    for f in figures:  # (in place: adding Counters makes a new one per manifest, 500 at a million files)
        small_by_partition.update(f.small)
    small = sum(small_by_partition.values())
    # Small files compaction would actually merge (the rule plan_compaction applies).
    default_spec = table.metadata.default_spec_id
    compactable = sum(n for (spec_id, _), n in small_by_partition.items() if settings.worth_compacting(spec_id, default_spec, n))
    out: TableHealth = {
        "table": identifier,
        "data_files": files,
        "data_bytes": sum(f.bytes for f in figures),
        "small_files": small,
        "small_file_ratio": round(small / files, 4) if files else 0.0,
        # What the sensor watches.
        "compactable_files": compactable,
        "compactable_ratio": round(compactable / files, 4) if files else 0.0,
        **_delete_figures(ctx, table, settings, files),
        "snapshot_count": len(table.metadata.snapshots),
        "iceberg_snapshot_id": table.current_snapshot().snapshot_id if table.current_snapshot() else None,
    }
    out.update(delta_log_stats(ctx, table))
    if ctx.delta_enabled(table):
        out["delta_lag_snapshots"] = ctx.delta_lag_of(table)  # metadata only, unlike a full verify
    return out


def _delete_figures(ctx: TableContext, table: Table, settings: MaintenanceSettings, live_files: int) -> dict:
    """What merge-on-read costs readers until compaction folds the deletes in, and what it would fold now."""
    deletes = files_with_deletes(table, ctx.storage)
    return {**read_cost(deletes, live_files), "foldable_files": sum(settings.folds(d) for d in deletes.values())}

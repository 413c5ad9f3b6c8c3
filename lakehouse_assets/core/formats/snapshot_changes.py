"""The file changes of one Iceberg snapshot, read from the manifests it wrote.

Both sides of the mirror need them: the Delta mirror turns one snapshot's adds and removes into one Delta
commit, and merges and repairs look at what a snapshot changed. They live apart from either so that
readers of a snapshot's change need not import the Delta committer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ..properties import Operation, SummaryKeys
from . import history


@dataclass
class SnapshotChange:
    """The file changes of one Iceberg snapshot."""

    snapshot: Snapshot
    adds: list[DataFile]
    removes: list[DataFile]
    summary: dict[str, str] = field(default_factory=dict)
    delete_files_added: list[DataFile] = field(default_factory=list)  # row-level deletes (other engines)
    delete_files_removed: list[DataFile] = field(default_factory=list)
    # The Delta `cdc` actions of files the write itself wrote with the rows it changed (a merge); None: from the files.
    change_data: list[dict] | None = None

    @property
    def data_change(self) -> bool:
        # Compaction rewrites files, an erasure's last snapshot manifests, without changing rows: Delta readers of the change feed skip them.
        return self.summary.get(SummaryKeys.OPERATION) not in (Operation.COMPACTION, Operation.LIVE_MANIFESTS)


def snapshot_change(table: Table, snapshot: Snapshot, manifests: Callable[[ManifestFile], bool] | None = None) -> SnapshotChange:
    """Files added and removed by `snapshot`, read from the manifests that snapshot wrote. `manifests`: which of them to
    read (e.g. those whose partition summaries may hold a slice's rows): the files of the others are left out."""
    adds, removes, delete_adds, delete_removes = [], [], [], []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id or (manifests is not None and not manifests(manifest)):
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id:
                continue
            is_data = manifest.content == ManifestContent.DATA and entry.data_file.content == DataFileContent.DATA
            if entry.status == ManifestEntryStatus.ADDED:
                (adds if is_data else delete_adds).append(entry.data_file)
            elif entry.status == ManifestEntryStatus.DELETED:
                (removes if is_data else delete_removes).append(entry.data_file)
    summary = history.summary(snapshot)
    return SnapshotChange(snapshot, adds, removes, summary, delete_adds, delete_removes)

"""A `replace` snapshot whose manifests name live files only: the snapshot an erasure ends the table's history with.

A snapshot that removes files keeps them in its manifests as DELETED entries, with their column bounds, for the
incremental readers and expiry that look back from it. After an erasure those bounds are the erased values: this
snapshot writes every manifest that holds a DELETED entry again with its live entries only (as EXISTING, their
sequence numbers kept), and reuses the others as they are. No data or delete file is added or removed.
"""

from __future__ import annotations

from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _SnapshotProducer

from ..deletes import DeleteManifestWriter
from .committer import MetadataCachingTransaction

_TOTALS = ("total-data-files", "total-delete-files", "total-records", "total-files-size", "total-position-deletes", "total-equality-deletes")


class LiveManifests(_SnapshotProducer["LiveManifests"]):
    """The producer of that snapshot (pyiceberg has no manifest rewrite)."""

    def __init__(self, transaction, io, snapshot_properties: dict[str, str], branch: str | None = "main"):
        super().__init__(Operation.REPLACE, transaction, io, snapshot_properties=snapshot_properties, branch=branch)

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        out = []
        for manifest in parent.manifests(self._io) if parent else []:
            if not manifest.deleted_files_count:
                out.append(manifest)
                continue
            live = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            if live:
                out.append(self._write(manifest, live))
        return out

    def _write(self, manifest: ManifestFile, live: list[ManifestEntry]) -> ManifestFile:
        spec = self.spec(manifest.partition_spec_id)
        if manifest.content == ManifestContent.DELETES:
            writer = DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)
        else:
            writer = self.new_manifest_writer(spec)
        with writer:
            for e in live:
                writer.add_entry(ManifestEntry.from_args(
                    status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id, sequence_number=e.sequence_number,
                    file_sequence_number=e.file_sequence_number, data_file=e.data_file,
                ))
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 - pyiceberg's signature
        # Nothing added or removed: the parent's totals (pyiceberg computes summaries of appends and overwrites only).
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        totals = {k: v for k, v in (parent.summary.additional_properties if parent and parent.summary else {}).items() if k in _TOTALS}
        return Summary(operation=Operation.REPLACE, **totals, **snapshot_properties)


def commit_live_manifests(table: Table, summary: dict[str, str], branch: str | None = None) -> Snapshot | None:
    """Commit the snapshot on `branch` (default main); None when no manifest holds a DELETED entry (nothing to do)."""
    head = table.snapshot_by_name(branch) if branch is not None else table.current_snapshot()
    if head is None or not any(m.deleted_files_count for m in head.manifests(table.io)):
        return None
    with MetadataCachingTransaction(table) as tx:
        with LiveManifests(tx, table.io, summary, branch=branch or "main"):
            pass
    return table.snapshot_by_name(branch) if branch is not None else table.current_snapshot()

"""pyiceberg's overwrite, each manifest that may hold a removed file decoded once per commit attempt, and written again
once, as Java Iceberg writes it.

pyiceberg's overwrite reads those manifests twice: `_deleted_entries` for the DELETED entries, then
`_existing_manifests` to write them again without the removed files; and it writes the DELETED entries into a manifest
of their own. A delete of one row from a partition of 10,000 files decoded that partition's manifest twice (0.3 s each
on this machine), and every overwrite wrote one manifest more than it needed. Here one pass does both: the removed
files' entries, checked as pyiceberg checks them (every removed file must be live in the parent), and each manifest
that held one written again with its other entries as EXISTING and the removed ones as DELETED (Java Iceberg's
manifest filter does the same), after that check so a refused commit leaves no manifest behind. The snapshot lists the
same live files and the same DELETED entries as pyiceberg's, with their sequence numbers.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFileContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import KeyDefaultDict
from pyiceberg.utils.concurrent import ExecutorFactory

from .. import manifest_lists


class OneReadOverwrite(_OverwriteFiles):
    _existing: list[ManifestFile] | None = None

    def _deleted_entries(self) -> list[ManifestEntry]:
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        if parent is None:
            self._existing = None
            return super()._deleted_entries()
        manifests = manifest_lists.manifests(self._io, parent)
        evaluators = KeyDefaultDict(self._build_manifest_evaluator)
        relevant = [m for m in manifests if evaluators[m.partition_spec_id](m)]
        # One manifest (an overwrite of one partition, usually) on this thread: no hand-over to the pool and back.
        entries = map(self._live_entries, relevant) if len(relevant) <= 1 else ExecutorFactory.get_or_create().map(self._live_entries, relevant)
        read = dict(zip((m.manifest_path for m in relevant), entries))
        deleted = [
            self._deleted(e) for m in relevant for e in read[m.manifest_path]
            if e.data_file.content == DataFileContent.DATA and e.data_file in self._deleted_data_files
        ]
        self._validate_required_deletes(deleted)
        self._existing = [out for m in manifests for out in self._kept(m, read.get(m.manifest_path))]
        return []  # the DELETED entries are in the manifests written again (_kept), not in a manifest of their own

    def _existing_manifests(self) -> list[ManifestFile]:
        return self._existing if self._existing is not None else super()._existing_manifests()

    def _live_entries(self, manifest: ManifestFile) -> list[ManifestEntry]:
        return manifest.fetch_manifest_entry(self._io, discard_deleted=True)

    def _kept(self, manifest: ManifestFile, entries: list[ManifestEntry] | None) -> list[ManifestFile]:
        """`manifest` as it is, or written again with the removed files as DELETED entries of this snapshot (a manifest
        of DELETED entries only when it held nothing else: a later commit drops it, _ClusteredAdds._live)."""
        if entries is None or not any(e.data_file in self._deleted_data_files for e in entries):
            return [manifest]
        with self.new_manifest_writer(self.spec(manifest.partition_spec_id)) as writer:
            for e in entries:
                writer.add_entry(self._deleted(e) if e.data_file in self._deleted_data_files else ManifestEntry.from_args(
                    status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id, sequence_number=e.sequence_number,
                    file_sequence_number=e.file_sequence_number, data_file=e.data_file))
        return [writer.to_manifest_file()]

    def _deleted(self, entry: ManifestEntry) -> ManifestEntry:
        return ManifestEntry.from_args(status=ManifestEntryStatus.DELETED, snapshot_id=self._snapshot_id, sequence_number=entry.sequence_number,
                                       file_sequence_number=entry.file_sequence_number, data_file=entry.data_file)

"""Iceberg delete files written by other engines: find them, refuse to ignore them, apply them.

Iceberg is the primary, so Spark, Trino, Flink or pyiceberg may commit row-level deletes
(merge-on-read): position-delete files (data file path + row position) and equality-delete files
(rows whose equality columns match). Delta cannot express them (delta-rs writes no deletion vectors),
and every project operation that reads or rewrites data files would silently bring deleted rows
back if it ignored them. So:

* `refuse_delete_files` stops read, merge, window overwrite, compaction and widening with an error
  naming the table and the fix;
* `maintenance/apply_deletes.py` is the fix: it rewrites the data files that lose rows, in Spark, with the deletes
  applied by the Iceberg spec's rules (position deletes by file path + row position for data files
  with a data sequence number <= the delete's; equality deletes by a null-safe anti-join on the
  equality columns for data files with a strictly lower sequence number; both scoped to the delete
  file's partition unless its spec is unpartitioned), and commits ONE Iceberg overwrite snapshot that
  removes those data files and every applied delete file. That snapshot holds data files only, so
  the Delta mirror can follow it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update.snapshot import _OverwriteFiles

from ..collector import collector_paused
from ..errors import DeleteFilesError
from ..memo import ByImmutableFiles
from . import manifest_lists

log = logging.getLogger("lakehouse.deletes")



class DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer for delete-file entries (pyiceberg 0.12 writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


@dataclass
class TableFiles:
    """Live entries of one snapshot, read from its manifests (no scan planning: works with equality deletes)."""

    data: list[ManifestEntry]
    deletes: list[ManifestEntry]

    @property
    def position_deletes(self) -> list[ManifestEntry]:
        return [e for e in self.deletes if e.data_file.content == DataFileContent.POSITION_DELETES]

    @property
    def equality_deletes(self) -> list[ManifestEntry]:
        return [e for e in self.deletes if e.data_file.content == DataFileContent.EQUALITY_DELETES]


def table_files(table: Table, snapshot: Snapshot | None = None) -> TableFiles:
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    data, deletes = [], []
    if snapshot is not None:
        with collector_paused():
            for manifest in manifest_lists.manifests(table.io, snapshot):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    (data if manifest.content == ManifestContent.DATA else deletes).append(entry)
    return TableFiles(data, deletes)


# Whether a manifest list names live delete files, by its location (every read and most writes ask).
_HAS_DELETES = ByImmutableFiles(max_weight=1024)


def has_delete_files(table: Table, snapshot: Snapshot | None = None) -> bool:
    """From the manifest list only (manifest-level file counts), without opening a manifest."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if snapshot is None:
        return False

    def read() -> bool:
        return any(
            m.content == ManifestContent.DELETES and ((m.added_files_count or 0) + (m.existing_files_count or 0)) > 0
            for m in manifest_lists.manifests(table.io, snapshot)
        )

    return _HAS_DELETES.get(snapshot.manifest_list, read) if snapshot.manifest_list else read()


# The live delete-file entries of a manifest list (merge-on-read writes ask on every merge).
_DELETE_ENTRIES = ByImmutableFiles(max_weight=64)


def live_delete_entries(table: Table, snapshot: Snapshot | None = None) -> list[ManifestEntry]:
    """The live delete-file entries of a snapshot, from its delete manifests only: the data manifests, which grow with
    the table, are not opened (a merge-on-read write needs its table's delete files, not its data files)."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if snapshot is None:
        return []

    def read() -> list[ManifestEntry]:
        return [
            e for m in manifest_lists.manifests(table.io, snapshot) if m.content == ManifestContent.DELETES
            for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
        ]

    return _DELETE_ENTRIES.get(snapshot.manifest_list, read) if snapshot.manifest_list else read()


def describe_delete_files(files: TableFiles) -> str:
    pos, eq = len(files.position_deletes), len(files.equality_deletes)
    parts = [f"{pos} position-delete file(s)"] if pos else []
    parts += [f"{eq} equality-delete file(s)"] if eq else []
    return " and ".join(parts) or "no delete files"


def refuse_delete_files(table: Table, operation: str, snapshot: Snapshot | None = None, *, applies_position_deletes: bool = False) -> None:
    """Raise DeleteFilesError if the snapshot has live delete files `operation` would ignore: any delete file, or
    with `applies_position_deletes` (readers that leave deleted positions out) equality-delete files only."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if not has_delete_files(table, snapshot):
        return
    if applies_position_deletes and not has_equality_delete_files(table, snapshot):
        return
    ident = ".".join(table.name())
    ignored = "equality-delete files" if applies_position_deletes else "delete files"
    raise DeleteFilesError(
        f"Table {ident}: snapshot {snapshot.snapshot_id} has {describe_delete_files(table_files(table, snapshot))} "
        f"(row-level deletes: a merge-on-read write's, this table's own or another engine's). {operation} does not apply {ignored}, "
        f"so it would bring the deleted rows back; refused, nothing was written. Run `lakehouse repair {ident} "
        "--apply-deletes` to rewrite the affected data files with the deletes applied (one Iceberg snapshot that "
        "Delta then mirrors), then retry. To keep other engines from writing delete files, set the table "
        "properties write.delete.mode, write.update.mode and write.merge.mode to copy-on-write."
    )


_HAS_EQUALITY_DELETES = ByImmutableFiles(max_weight=1024)


def has_equality_delete_files(table: Table, snapshot: Snapshot) -> bool:
    """Whether the snapshot has live equality-delete files (reads its delete manifests only)."""

    def read() -> bool:
        return any(
            e.data_file.content == DataFileContent.EQUALITY_DELETES
            for m in manifest_lists.manifests(table.io, snapshot)
            if m.content == ManifestContent.DELETES
            for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
        )

    return _HAS_EQUALITY_DELETES.get(snapshot.manifest_list, read) if snapshot.manifest_list else read()


# ---------------------------------------------------------------- the commit that removes delete files


class RowDelta(_OverwriteFiles):
    """An overwrite that also adds and removes delete files (pyiceberg's overwrite handles data files only).

    Data files go through pyiceberg's own overwrite (manifests, validation, retries). Added delete files
    (a merge-on-read write's position deletes, position_deletes.py) get a delete manifest of their own.
    Delete manifests are rewritten without the removed delete files, and one delete manifest records them
    as DELETED, so history-based tools (expiry, incremental readers) see them go. A file-scoped delete file
    whose data file this snapshot removes is removed with it: it would apply to nothing.
    """

    def __init__(self, *args, removed_delete_files: list[DataFile] = (), added_delete_files: list[DataFile] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self._removed_deletes = {f.file_path for f in removed_delete_files}
        self._removed_delete_files = list(removed_delete_files)
        self._added_delete_files = list(added_delete_files)

    def _existing_manifests(self) -> list[ManifestFile]:
        from .position_deletes import referenced_data_file

        out: list[ManifestFile] = []
        gone: dict[int, list[ManifestEntry]] = {}
        removed_data = {f.file_path for f in self._deleted_data_files}
        kept_for: set[str | None] = set()  # data files whose live delete file stays
        for manifest in super()._existing_manifests():
            if manifest.content != ManifestContent.DELETES:
                out.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            dropped = [e for e in entries if e.data_file.file_path in self._removed_deletes or referenced_data_file(e.data_file) in removed_data]
            gone_paths = {e.data_file.file_path for e in dropped}
            kept_for |= {referenced_data_file(e.data_file) for e in entries if e.data_file.file_path not in gone_paths}
            if not dropped:
                out.append(manifest)
                continue
            for e in dropped:
                if e.data_file.file_path not in self._removed_deletes:
                    self._removed_deletes.add(e.data_file.file_path)
                    self._removed_delete_files.append(e.data_file)
            gone.setdefault(manifest.partition_spec_id, []).extend(dropped)
            dropped_paths = {e.data_file.file_path for e in dropped}
            if keep := [e for e in entries if e.data_file.file_path not in dropped_paths]:
                out.append(self._write(manifest.partition_spec_id, keep, ManifestEntryStatus.EXISTING))
        for spec_id, entries in gone.items():
            out.append(self._write(spec_id, entries, ManifestEntryStatus.DELETED))
        added: dict[int, list[ManifestEntry]] = {}
        for f in self._added_delete_files:
            added.setdefault(f.spec_id, []).append(
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id, sequence_number=None, file_sequence_number=None, data_file=f)
            )
        out += [self._write_entries(spec_id, entries) for spec_id, entries in added.items()]
        from pyiceberg.exceptions import ValidationException

        missing = self._removed_deletes - {e.data_file.file_path for es in gone.values() for e in es}
        if missing:
            raise ValidationException(f"Delete files to remove are no longer live: {sorted(missing)}")
        # One position-delete file per data file (position_deletes.py): a concurrent write gave one of these its own.
        if twice := sorted(p for p in kept_for & {referenced_data_file(f) for f in self._added_delete_files} if p is not None):
            raise ValidationException(f"Data files already have a live position-delete file that this commit does not replace: {twice}")
        return out

    def _write(self, spec_id: int, entries: list[ManifestEntry], status: ManifestEntryStatus) -> ManifestFile:
        return self._write_entries(spec_id, [
            ManifestEntry.from_args(
                status=status,
                snapshot_id=self._snapshot_id if status == ManifestEntryStatus.DELETED else e.snapshot_id,
                sequence_number=e.sequence_number,
                file_sequence_number=e.file_sequence_number,
                data_file=e.data_file,
            )
            for e in entries
        ])

    def _write_entries(self, spec_id: int, entries: list[ManifestEntry]) -> ManifestFile:
        writer = DeleteManifestWriter(self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)
        with writer:
            for e in entries:
                writer.add_entry(e)
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 - pyiceberg's signature
        summary = super()._summary(snapshot_properties)
        if not self._removed_delete_files and not self._added_delete_files:
            return summary
        # pyiceberg's collector counts data files only here: add the delete files to the totals.
        collector = SnapshotSummaryCollector()
        schema, specs = self._transaction.table_metadata.schema(), self._transaction.table_metadata.specs()
        for f in self._removed_delete_files:
            collector.remove_file(f, schema, specs[f.spec_id])
        for f in self._added_delete_files:
            collector.add_file(f, schema, specs[f.spec_id])
        extra = {k: v for k, v in collector.metrics.to_dict().items()}
        merged = dict(summary.additional_properties)
        for k, v in extra.items():
            merged[k] = str(int(merged.get(k, 0)) + int(v))
        previous = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
        # Recompute totals from the parent's with the combined changes.
        changes = {k: v for k, v in merged.items() if not k.startswith("total-")}
        return update_snapshot_summaries(Summary(operation=summary.operation, **changes), previous.summary if previous else None)


# ---------------------------------------------------------------- which delete applies to which data file


def applies(delete: ManifestEntry, data: ManifestEntry) -> bool:
    """Iceberg spec: which delete file applies to which data file (sequence numbers and partition)."""
    d, f = delete.data_file, data.data_file
    if delete.data_file.content == DataFileContent.POSITION_DELETES:
        if delete.sequence_number < data.sequence_number:
            return False
    elif delete.sequence_number <= data.sequence_number:
        return False
    if len(d.partition) == 0:  # unpartitioned delete spec: a global delete
        return True
    return d.spec_id == f.spec_id and tuple(d.partition) == tuple(f.partition)

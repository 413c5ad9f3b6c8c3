"""Commits whose added files go into manifests clustered by partition, MANIFEST_ENTRIES entries at most in each.

pyiceberg writes every file a commit adds into one manifest. When a commit adds files across many partitions (the
import of an existing table, a first load of history), that manifest's partition summary spans all of them, so a later
overwrite or merge of any one partition reads the whole manifest and rewrites it without the files it replaces: at a
million files, minutes on the first change. Sorted by partition and cut at partition boundaries, each manifest spans
few partitions, and planning, overwrites and merges of one partition read and rewrite only the manifests that hold it.
A commit adding MANIFEST_ENTRIES files or fewer is written as pyiceberg writes it. Appends, overwrites and row deltas
(an overwrite that also adds or removes delete files) all cluster their added files; their other manifests (existing,
rewritten without removed files, merged) are the producer's own.

The manifests of the added files do not depend on the snapshot the commit lands on, only on its snapshot id: a commit
writes them before it queues for the table's commit lock (`prepare_adds`), as Java Iceberg writes them before its
commit and keeps them across retries, and every attempt's producer uses them (`use_prepared`). The writers queued
behind wait for the rest of the commit only.
"""

from __future__ import annotations

import copy
import functools
import uuid
from dataclasses import dataclass
from itertools import groupby

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile, ManifestWriter, write_manifest, write_manifest_list
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import AddSnapshotUpdate
from pyiceberg.table.update.snapshot import (
    _FastAppendFiles,
    _ManifestMergeManager,
    _MergeAppendFiles,
    _new_manifest_file_name,
    _OverwriteFiles,
    _SnapshotProducer,
)

from .. import manifest_lists
from .one_read_overwrite import OneReadOverwrite

# About 320 KB of manifest with a few columns' bounds (160 bytes an entry, measured on an import of 100,000 files). A
# change removing one file rewrites the manifest that lists it, with pyiceberg's Avro writer (about 0.1 ms an entry
# here): at 10,000 entries a one-row delete in a partition of 10,000 files took 0.86-1.07 s, at 2,000 0.34-0.58 s,
# as on a table of 1,000 files. Planning reads the partition's entries either way, from more manifests.
MANIFEST_ENTRIES = 2_000


def _partition_key(data_file: DataFile) -> tuple:
    """A sort key of the file's partition values: NULLs last, every other value by its own order."""
    return tuple((1, 0) if v is None else (0, v) for v in data_file.partition)


def clustered(files: list[DataFile], limit: int) -> list[list[DataFile]]:
    """`files` in groups of `limit` at most, sorted by partition, each cut where a partition ends when the next whole
    partition would not fit; a partition of more than `limit` files fills groups of its own."""
    groups: list[list[DataFile]] = []
    current: list[DataFile] = []
    for _, partition in groupby(sorted(files, key=_partition_key), key=_partition_key):
        partition = list(partition)
        if current and len(current) + len(partition) > limit:
            groups.append(current)
            current = []
        while len(partition) > limit:
            groups.append(partition[:limit])
            partition = partition[limit:]
        current.extend(partition)
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True)
class PreparedAdds:
    """The manifests of a commit's added data files, written for the snapshot id the commit will take. Like clustered
    manifests, they stay out of a merge append's merge of small manifests in their own commit (the next one merges them)."""

    snapshot_id: int
    manifests: tuple[ManifestFile, ...]


def prepare_adds(table: Table, adds: list[DataFile]) -> PreparedAdds | None:
    """The manifests of `adds`, clustered, for a new snapshot id; None when nothing is added or the files are of more
    than one partition spec (the producer writes those). A manifest written before a failure is removed."""
    metadata = table.metadata
    if not adds or len({f.spec_id for f in adds}) > 1 or adds[0].spec_id not in metadata.specs():
        return None
    snapshot_id, commit_uuid = metadata.new_snapshot_id(), uuid.uuid4()
    compression = metadata.properties.get(TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
    written: list[ManifestFile] = []
    try:
        for num, group in enumerate(clustered(adds, MANIFEST_ENTRIES)):
            path = table.location_provider().new_metadata_location(_new_manifest_file_name(num=num, commit_uuid=commit_uuid))
            with write_manifest(format_version=metadata.format_version, spec=metadata.specs()[group[0].spec_id], schema=metadata.schema(),
                                output_file=table.io.new_output(path), snapshot_id=snapshot_id, avro_compression=compression) as writer:
                _add(writer, group, snapshot_id)
            written.append(writer.to_manifest_file())
    except BaseException:
        for manifest in written:
            try:
                table.io.delete(manifest.manifest_path)
            except Exception:  # noqa: BLE001 - best effort, as pyiceberg's own clean-up of a failed commit's manifests
                pass
        raise
    return PreparedAdds(snapshot_id, tuple(written))


def _add(writer: ManifestWriter, files: list[DataFile], snapshot_id: int) -> None:
    for data_file in files:
        writer.add(ManifestEntry.from_args(
            status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, sequence_number=None, file_sequence_number=None, data_file=data_file,
        ))


class _ClusteredAdds:
    """Writes the added files in clustered manifests, or takes those `prepare_adds` wrote; the producer's other
    manifests are pyiceberg's own, less those an earlier snapshot left holding deleted entries only."""

    _prepared: tuple[ManifestFile, ...] | None = None

    def use_prepared(self, prepared: PreparedAdds) -> None:
        """Commit as `prepared.snapshot_id`, with `prepared.manifests` for the added files (exactly those appended)."""
        self._snapshot_id = prepared.snapshot_id
        self._prepared = prepared.manifests

    def _manifests(self) -> list[ManifestFile]:
        self._listed = self._clustered_manifests()
        return self._listed

    def _commit(self):
        updates, requirements = super()._commit()
        self._remember_list(updates)
        return updates, requirements

    def _remember_list(self, updates) -> None:
        """The manifest list just written kept as a reader reads it back: numbered by pyiceberg's own list writer (a new
        manifest takes the snapshot's sequence number). Format 2 only: a format 1 list reads back numbers it never wrote."""
        snapshot = next((u.snapshot for u in updates if isinstance(u, AddSnapshotUpdate)), None)
        if snapshot is None or self._transaction.table_metadata.format_version != 2:
            return
        numbering = write_manifest_list(2, None, snapshot.snapshot_id, snapshot.parent_snapshot_id, snapshot.sequence_number, self._compression)
        manifest_lists.remember(snapshot.manifest_list, [numbering.prepare_manifest(m) for m in self._listed])

    def _clustered_manifests(self) -> list[ManifestFile]:
        added = self._added_data_files
        if self._prepared is None and len(added) <= MANIFEST_ENTRIES:
            return self._live(super()._manifests())
        self._added_data_files = []  # pyiceberg's manifests without the added files: the existing (and merged) ones
        try:
            others = super()._manifests()
        finally:
            self._added_data_files = added
        if self._prepared is not None:
            # Copies: the manifest list writer numbers a manifest (its sequence numbers) on a shallow copy that shares the
            # Record's values, so the manifest an attempt listed would keep that attempt's numbers in the next one.
            return [copy.deepcopy(m) for m in self._prepared] + self._live(others)
        return [self._added_manifest(group) for group in clustered(added, MANIFEST_ENTRIES)] + self._live(others)

    def _live(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        """`manifests` without those of earlier snapshots that list no live file: their DELETED entries belong to the
        snapshot that wrote them, and its own manifest list keeps them. pyiceberg's overwrite carries them forward (its
        fast append drops them, by the same rule), so each overwrite, delete or merge left one more for every later
        commit and plan to read: the manifest list grew with the table's history, not with its files."""
        return [m for m in manifests if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == self._snapshot_id]

    def _added_manifest(self, files: list[DataFile]) -> ManifestFile:
        with self.new_manifest_writer(spec=self._transaction.table_metadata.spec()) as writer:
            _add(writer, files, self._snapshot_id)
        return writer.to_manifest_file()


class _ParentListKept:
    """An append's existing manifests from the parent's list as this process keeps it (manifest_lists.py), by
    pyiceberg's rule for a fast append: every manifest that lists a live file, or was written by this snapshot."""

    def _existing_manifests(self) -> list[ManifestFile]:
        if self._parent_snapshot_id is None:
            return []
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        if parent is None:
            raise ValueError(f"Snapshot could not be found: {self._parent_snapshot_id}")
        return [m for m in manifest_lists.manifests(self._io, parent) if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == self._snapshot_id]


class ClusteredFastAppend(_ClusteredAdds, _ParentListKept, _FastAppendFiles):
    """pyiceberg's fast append (one more manifest, existing ones kept as they are), its added files clustered."""


class ClusteredMergeAppend(_ClusteredAdds, _ParentListKept, _MergeAppendFiles):
    """pyiceberg's merge append, its added files clustered, and its small manifests merged without undoing clustering.

    Manifests of MANIFEST_ENTRIES / 2 files or more (what clustering writes) stay as they are: merging counts only
    the smaller ones against `commit.manifest.min-count-to-merge`. Otherwise the first append after an import of a
    million files (hundreds of clustered manifests) would merge them all, rewriting every entry (minutes), and undo the
    clustering. The smaller ones, once there are that many, are merged in the order of their partitions, neighbours
    with neighbours, up to MANIFEST_ENTRIES entries a manifest: pyiceberg packs them by size alone (the table's
    `commit.manifest.target-size-bytes`, 8 MB: about 50,000 entries), so at a million files in 100 day folders the
    first day's 10 files were merged with the other days' remainders into one manifest of 10,000 entries spanning every
    day, and each later read, merge, delete and check of that day read or rewrote all of them (docs/performance.md)."""

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        is_small = [m.content == ManifestContent.DATA and _entries(m) < MANIFEST_ENTRIES // 2 for m in manifests]
        small = [m for m, yes in zip(manifests, is_small) if yes]
        others = [m for m, yes in zip(manifests, is_small) if not yes]
        if not self._merge_enabled or len(small) < self._min_count_to_merge:
            return small + others
        merger = _ManifestMergeManager(self._target_size_bytes, self._min_count_to_merge, True, self)
        metadata, out = self._transaction.table_metadata, []
        for spec_id, group in groupby(sorted(small, key=functools.partial(_lowest_partition, metadata)), key=lambda m: m.partition_spec_id):
            out += [b[0] if len(b) == 1 else merger._create_manifest(spec_id, b) for b in _packed(list(group), MANIFEST_ENTRIES)]
        return out + others


def _lowest_partition(metadata, manifest: ManifestFile) -> tuple:
    """A sort key of the manifest's spec and its lowest partition values (NULLs and unknown bounds last)."""
    try:
        fields = metadata.specs()[manifest.partition_spec_id].partition_type(metadata.schema()).fields
        bounds = tuple((1, 0) if s.lower_bound is None else (0, from_bytes(f.field_type, s.lower_bound)) for f, s in zip(fields, manifest.partitions or []))
    except Exception:  # noqa: BLE001 - a spec over a column the schema dropped: its manifests keep their order
        bounds = ()
    return manifest.partition_spec_id, bounds


def _packed(manifests: list[ManifestFile], limit: int) -> list[list[ManifestFile]]:
    """Consecutive runs of `manifests` holding `limit` entries at most (a larger manifest alone)."""
    bins: list[list[ManifestFile]] = []
    held = 0  # entries in the last bin
    for manifest in manifests:
        if bins and held + _entries(manifest) <= limit:
            bins[-1].append(manifest)
            held += _entries(manifest)
        else:
            bins.append([manifest])
            held = _entries(manifest)
    return bins


def _entries(manifest: ManifestFile) -> int:
    return sum(n or 0 for n in (manifest.added_files_count, manifest.existing_files_count, manifest.deleted_files_count))


def clustered_append(tx, summary: dict[str, str], merge: bool, branch: str | None = None):
    """The append producer of `tx` (pyiceberg's `update_snapshot(...).fast_append()` or `.merge_append()`), clustered."""
    producer = ClusteredMergeAppend if merge else ClusteredFastAppend
    target = {"branch": branch} if branch is not None else {}
    return producer(operation=Operation.APPEND, transaction=tx, io=tx._table.io, snapshot_properties=summary, **target)


@functools.cache
def clustered_producer(producer: type[_SnapshotProducer]) -> type[_SnapshotProducer]:
    """`producer` (a pyiceberg snapshot producer class, or one of this project's, such as deletes.RowDelta) with its
    added files clustered."""
    return type(f"Clustered{producer.__name__.lstrip('_')}", (_ClusteredAdds, producer), {"__doc__": f"{producer.__name__}, its added files clustered."})


def clustered_overwrite(tx, summary: dict[str, str], branch: str | None = None, kind: type[_OverwriteFiles] = OneReadOverwrite, **kwargs):
    """The overwrite producer of `tx` (pyiceberg's `update_snapshot(...).overwrite()` reading each manifest it may
    rewrite once, or `kind` with `kwargs`), clustered: an overwrite of a table, or a branch, without a snapshot yet is an append, as pyiceberg makes it."""
    target = {"branch": branch} if branch is not None else {}
    operation = Operation.OVERWRITE if tx.table_metadata.snapshot_by_name(branch or "main") is not None else Operation.APPEND
    return clustered_producer(kind)(operation=operation, transaction=tx, io=tx._table.io, snapshot_properties=summary, **target, **kwargs)

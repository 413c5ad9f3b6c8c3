"""Which live data files carry position deletes, and how many rows those delete: what merge-on-read costs readers.

A reader of a data file with deletes also opens its delete files and leaves their positions out, so every delete
file and every deleted row adds to each read until compaction folds them back into clean files. These figures
decide which files compaction folds (`MaintenanceSettings.folds`), and table health reports them (the compaction
sensor watches them). Metadata only: which delete file applies to which data file is Iceberg scan planning's
answer (sequence numbers, partitions, the `file_path` bounds of file-scoped deletes); a file-scoped delete file's
record count is the number of rows it deletes. Only a delete file that names several data files (another
engine's) is opened, for its positions of each data file (a few bytes per deleted row, never table rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ..formats.deletes import TableFiles, applies, has_delete_files, has_equality_delete_files
from ..formats.position_deletes import read_positions, referenced_data_file
from ..io.storage import StorageConfig, relative_to
from ..memo import ByImmutableFiles


@dataclass(frozen=True)
class FileDeletes:
    """One live data file with position deletes."""

    data_file: DataFile
    delete_files: tuple[DataFile, ...]
    deleted_rows: int

    @property
    def deleted_fraction(self) -> float:
        return self.deleted_rows / self.data_file.record_count if self.data_file.record_count else 1.0


# Per manifest list (immutable): a health check and a compaction of one table state plan once.
_BY_STATE = ByImmutableFiles(max_weight=100_000, weight=lambda files: max(1, len(files)))


def files_with_deletes(table: Table, storage: StorageConfig, snapshot: Snapshot | None = None) -> dict[str, FileDeletes]:
    """Data file path -> its position deletes, for the live data files that have any (empty: none, or the
    snapshot has equality deletes, which scan planning cannot match to files and no figure here counts)."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if snapshot is None or not has_delete_files(table, snapshot) or has_equality_delete_files(table, snapshot):
        return {}

    def plan() -> dict[str, FileDeletes]:
        out = {}
        for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            if not task.delete_files:
                continue
            deletes = tuple(sorted(task.delete_files, key=lambda d: d.file_path))
            rows = sum(d.record_count if referenced_data_file(d) == task.file.file_path else len(read_positions(storage, [d], task.file.file_path)) for d in deletes)
            out[task.file.file_path] = FileDeletes(task.file, deletes, min(rows, task.file.record_count))
        return out

    return _BY_STATE.get(snapshot.manifest_list, plan) if snapshot.manifest_list else plan()


def read_cost(files: dict[str, FileDeletes], live_files: int) -> dict[str, float | int]:
    """The health figures of merge-on-read: delete files, deleted rows, and both per live data file."""
    delete_files = len({d.file_path for f in files.values() for d in f.delete_files})
    deleted = sum(f.deleted_rows for f in files.values())
    return {
        "files_with_deletes": len(files),
        "delete_files": delete_files,
        "deleted_rows": deleted,
        "delete_files_per_file": round(sum(len(f.delete_files) for f in files.values()) / live_files, 4) if live_files else 0.0,
        "deleted_rows_per_file": round(deleted / live_files, 2) if live_files else 0.0,
    }


def positions_by_file(storage: StorageConfig, files: TableFiles, root_uri: str) -> dict[str, np.ndarray]:
    """Relative data file path -> the positions its live position-delete files delete (files without any left out).
    A file-scoped delete file names its data file in its bounds; another engine's may name several: read its paths."""
    import pyarrow.parquet as pq

    scoped: dict[str, list] = {}
    unscoped = []
    for d in (e for e in files.deletes if e.data_file.content == DataFileContent.POSITION_DELETES):
        if (named := referenced_data_file(d.data_file)) is not None:
            scoped.setdefault(named, []).append(d)
        else:
            fs, path = storage.filesystem(d.data_file.file_path)
            unscoped.append((d, set(pq.read_table(path, filesystem=fs, columns=["file_path"]).column("file_path").unique().to_pylist())))
    out = {}
    for entry in files.data:
        uri = entry.data_file.file_path
        candidates = scoped.get(uri, []) + [d for d, names in unscoped if uri in names]
        mine = [d.data_file for d in candidates if applies(d, entry)]
        if mine and len(positions := read_positions(storage, mine, uri)):
            out[relative_to(root_uri, uri)] = positions.to_numpy()
    return out

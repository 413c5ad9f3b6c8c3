"""Where a data file's deleted row positions come from, read where the file is read (on the executors).

A merge-on-read table marks rows deleted instead of rewriting their file: Iceberg with position-delete
files (`position_deletes.py`), Delta with a deletion vector per file. A reader opening such a file leaves
those positions out (`reader.ParquetFileReader`); the driver only ships the file names and descriptors,
never rows. The one exception, bounded: copy-on-write deletes and updates ship the positions of the rows they
matched with the tasks that rewrite their files (core/write/position_rewrite.py; `KnownPositions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from ..io.storage import StorageConfig


class DeletedPositions(Protocol):
    def positions(self, storage: StorageConfig) -> np.ndarray:
        """The deleted 0-based row positions of the file: sorted, distinct, int64."""


@dataclass(frozen=True)
class IcebergPositionDeletes:
    """The Iceberg position-delete files that apply to `data_file` (each may name other data files too)."""

    data_file: str
    delete_files: tuple[str, ...]

    def positions(self, storage: StorageConfig) -> np.ndarray:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        chunks = []
        for uri in self.delete_files:
            fs, path = storage.filesystem(uri)
            rows = pq.read_table(path, filesystem=fs, columns=["file_path", "pos"])
            rows = rows.filter(pc.equal(rows.column("file_path"), self.data_file))
            chunks.append(rows.column("pos").to_numpy().astype(np.int64))
        return np.unique(np.concatenate(chunks)) if chunks else np.empty(0, np.int64)


@dataclass(frozen=True)
class DeltaDeletionVector:
    """A Delta deletion vector (its descriptor as the log holds it), read and checked by `read_vector`."""

    root_uri: str
    descriptor: tuple[tuple[str, object], ...]  # the descriptor JSON's items (hashable, picklable)

    def positions(self, storage: StorageConfig) -> np.ndarray:
        from ..formats.delta.deletion_vectors import read_vector

        return read_vector(storage, self.root_uri, dict(self.descriptor)).to_numpy().astype(np.int64)


@dataclass(frozen=True)
class KnownPositions:
    """Positions the driver holds already (a copy-on-write delete's matched rows and those deleted before), shipped
    with the task that rewrites the file."""

    sorted_positions: np.ndarray  # sorted, distinct, int64

    def positions(self, storage: StorageConfig) -> np.ndarray:
        return self.sorted_positions


def kept_rows(deleted: np.ndarray, start: int, rows: int) -> pa.Array:
    """The mask of the `rows` rows at positions start.. that `deleted` (sorted) does not name."""
    keep = np.ones(rows, dtype=bool)
    lo, hi = np.searchsorted(deleted, [start, start + rows])
    keep[deleted[lo:hi] - start] = False
    return pa.array(keep)

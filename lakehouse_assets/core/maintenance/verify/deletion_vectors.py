"""The formats-agree check of a merge-on-read table: do both formats delete the same rows of every data file?

Iceberg deletes rows with position-delete files, Delta with a deletion vector per file: the rows each format's
readers skip must be the same, file by file. For every live data file, the positions the Iceberg delete files
that apply to it name (the spec's rules, `deletes.applies`) are compared with the positions its Delta vector
holds (`delta_deletion_vectors.read_vector`, which checks the vector's size, magic number, CRC-32 and
cardinality). A vector that cannot be read as its descriptor says, positions only one format deletes, and a
position past the file's row count are each reported, naming the data file (and the vector's file).

Only positions and file paths are read: a few bytes per deleted row, never a table row.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pyiceberg.manifest import DataFileContent, ManifestEntry
from pyiceberg.table import Table

from ...errors import DeletionVectorError
from ...formats.deletes import TableFiles
from ...formats.delta import deletion_vectors as dv
from ...formats.delta.logged_vectors import live_vectors
from ...formats.delta.vector_mirror import enabled, has_vectors
from ...formats.position_deletes import referenced_data_file
from ...io.storage import StorageConfig, relative_to
from ..delete_figures import positions_by_file

MAX_LISTED = 3


def compares(table: Table, delta) -> bool:
    """Whether the formats express deletes alike here: the table opted in to merge-on-read or its Delta log
    carries vectors (otherwise live position deletes are a difference of their own, `verify`)."""
    return enabled(table.properties) or has_vectors(delta)


def deleted_from(deletes: list[ManifestEntry], delta, storage: StorageConfig, root_uri: str) -> Callable[[ManifestEntry, str], bool]:
    """Which data entries (entry, relative path) the comparison below needs: those a file-scoped position-delete file
    names or a Delta vector deletes from; every one when a delete file may apply to several (another engine's)."""
    positions = [e.data_file for e in deletes if e.data_file.content == DataFileContent.POSITION_DELETES]
    named = {referenced_data_file(d) for d in positions}
    if None in named:
        return lambda entry, path: True
    vectors = set(live_vectors(storage, root_uri, delta))
    return lambda entry, path: entry.data_file.file_path in named or path in vectors


def deleted_position_differences(table: Table, files: TableFiles, delta, storage: StorageConfig, root_uri: str, report: dict) -> list[str]:
    """The differences between the rows each format deletes from each live data file; `report` gets the totals.
    `files.data`: at least the data files either format deletes rows from (`deleted_from`)."""
    data = {relative_to(root_uri, e.data_file.file_path): e for e in files.data}
    iceberg = positions_by_file(storage, files, root_uri)
    found: dict[str, list[str]] = {}
    try:
        vectors = live_vectors(storage, root_uri, delta)
    except OSError as e:
        return [f"the Delta log's deletion vectors cannot be read: {type(e).__name__}: {e}"]
    delta_deleted = 0
    for path in sorted(set(iceberg) | set(vectors)):
        rows = data[path].data_file.record_count if path in data else None
        ours = iceberg.get(path, np.empty(0, np.int64))
        theirs = np.empty(0, np.int64)
        if path in vectors:
            try:
                theirs = dv.read_vector(storage, root_uri, vectors[path]).to_numpy()
            except DeletionVectorError as e:
                found.setdefault("unreadable deletion vector", []).append(f"{path}: {e}")
                continue
        delta_deleted += len(theirs)
        for side, positions in (("Iceberg", ours), ("Delta", theirs)):
            if rows is not None and len(positions) and positions[-1] >= rows:
                found.setdefault("position past the file's rows", []).append(
                    f"{path}: {side} deletes position {int(positions[-1])}, past the file's {rows} rows")
        if not np.array_equal(ours, theirs):
            only_iceberg, only_delta = np.setdiff1d(ours, theirs), np.setdiff1d(theirs, ours)
            found.setdefault("deleted rows", []).append(
                f"{path}: Iceberg deletes {len(ours)} row(s), Delta's deletion vector {len(theirs)}; positions only Iceberg "
                f"deletes {only_iceberg[:MAX_LISTED].tolist()}, only Delta {only_delta[:MAX_LISTED].tolist()}")
    report.update(iceberg_deleted_rows=int(sum(len(p) for p in iceberg.values())), delta_deleted_rows=delta_deleted, delta_deletion_vectors=len(vectors))
    return [f"{len(v)} {kind} difference(s), e.g. {v[:MAX_LISTED]}" for kind, v in found.items()]

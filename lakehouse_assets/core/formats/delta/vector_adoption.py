"""Other engines' Delta deletion vectors, kept as Iceberg position-delete files (import, adoption).

A Delta table that sets `delta.enableDeletionVectors=true` deletes rows by marking them: its writers (Delta Lake on
Spark, Databricks) leave the data file and record a deletion vector. Such a table is merge-on-read already, so the
lakehouse imports and adopts it as one: its vectors become Iceberg position-delete files (one per data file, holding
every position the vector deletes, as core/formats/position_deletes.py writes them), no data file is rewritten, and the
Delta log keeps the vectors it has (they delete exactly those positions).

The positions are read by delta-rs's kernel (`DeltaTable.deletion_vectors`: a keep-mask per file with a vector).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from ...io.storage import StorageConfig, relative_to
from ...properties import TableProperties
from ..position_deletes import referenced_data_file, write_delete_file
from . import deletion_vectors

MERGE_ON_READ_PROPERTIES = {p: TableProperties.MERGE_ON_READ for p in TableProperties.ROW_LEVEL_MODES}


def opted_in(delta: DeltaTable) -> bool:
    """Whether the Delta table has its writers delete rows with deletion vectors (the Delta side's merge-on-read)."""
    return str((delta.metadata().configuration or {}).get(deletion_vectors.ENABLE_PROPERTY, "false")).lower() == "true"


def deleted_positions(delta: DeltaTable, root_uri: str, paths: set[str] | None = None) -> dict[str, pa.Array]:
    """Relative path -> the positions its deletion vector deletes (sorted int64), for every live file with a vector
    (or those among `paths`)."""
    if deletion_vectors.FEATURE not in (delta.protocol().reader_features or []):
        return {}
    vectors = pa.table(delta.deletion_vectors())
    out = {}
    for i, uri in enumerate(vectors.column("filepath").to_pylist()):
        path = relative_to(root_uri, uri)
        if paths is not None and path not in paths:
            continue
        keep = vectors.column("selection_vector")[i].values
        out[path] = pc.indices_nonzero(pc.invert(keep)).cast(pa.int64())
    return out


def delete_files(storage: StorageConfig, root_uri: str, data_files: dict[str, DataFile], deleted: dict[str, pa.Array]) -> list[DataFile]:
    """One Iceberg position-delete file per data file (relative path -> its DataFile) that `deleted` names."""
    return [write_delete_file(storage, root_uri, data_files[p], positions) for p, positions in sorted(deleted.items()) if len(positions)]


def changed_vectors(storage: StorageConfig, root_uri: str, before_version: int, after_version: int, versions: list[int]) -> dict[str, pa.Array]:
    """Relative path -> positions, for every file the Delta `versions` (between the two) added or re-added whose vector at
    `after_version` is not the one it had at `before_version`. Reads those versions' commits and those files' vectors only."""
    paths = deletion_vectors.added_paths(storage, root_uri, versions)
    if not paths:
        return {}
    after, before = deletion_vectors.live_adds(storage, root_uri, after_version, paths), deletion_vectors.live_adds(storage, root_uri, before_version, paths)
    out = {}
    for path, add in after.items():
        new, old = deletion_vectors.descriptor_of(add), deletion_vectors.descriptor_of(before.get(path, {}))
        if new is not None and (old is None or old.to_json() != new.to_json()):
            out[path] = deletion_vectors.read_vector(storage, root_uri, new)
    return out


def position_deletes(storage: StorageConfig, root_uri: str, table: Table, data_files: dict[str, DataFile], vectors: dict[str, pa.Array]) -> tuple[list[DataFile], list[DataFile]]:
    """(the position-delete files written for `vectors`, the live file-scoped ones of the same data files they replace)."""
    from ..deletes import table_files

    if not vectors:
        return [], []
    live = [e.data_file for e in table_files(table).position_deletes] if table.current_snapshot() is not None else []
    replaced = [f for f in live if (named := referenced_data_file(f)) is not None and relative_to(root_uri, named) in vectors]
    return delete_files(storage, root_uri, data_files, vectors), replaced


def producer(tx, table: Table, summary: dict[str, str], removes: bool, added_deletes: list[DataFile], removed_deletes: list[DataFile]):
    """The snapshot producer of an adoption: pyiceberg's append or overwrite, or `deletes.RowDelta` when it changes delete files."""
    if not added_deletes and not removed_deletes:
        update = tx.update_snapshot(snapshot_properties=summary)
        return update.overwrite() if removes else update.fast_append()
    from pyiceberg.table.snapshots import Operation

    from ..deletes import RowDelta

    return RowDelta(operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=summary,
                    removed_delete_files=removed_deletes, added_delete_files=added_deletes)

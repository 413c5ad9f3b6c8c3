"""The Delta side of a snapshot's position deletes: a deletion vector on every data file they apply to.

Iceberg is the source of truth. When a snapshot of a merge-on-read table adds position-delete files, the Delta
version that mirrors it re-adds each data file they apply to with a deletion vector holding every position deleted
from it: a `remove` of the file as the log holds it (its old vector, if any: Delta readers key a file by path AND
vector) and an `add` of the same path and statistics with the new vector, beside the snapshot's ordinary adds and
removes. A table whose Delta log carries vectors sends every later commit that removes files through here too, so
each remove names the vector of the file it removes.

The positions of a data file: the snapshot's delete file for it, which holds every position deleted from that file
(the lakehouse's own writes, core/formats/position_deletes.py). Other engines' delete files add to what was deleted
before (Iceberg v2 semantics), so theirs are united with the file's current Delta vector. The vector file's name is
derived from the Iceberg delete file, so a retried mirror writes the same bytes under the same name.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

from ...errors import MirrorRefused
from ...io.storage import StorageConfig, delta_path, relative_to
from ...properties import SummaryKeys, TableProperties, merge_on_read
from ..position_deletes import positions_as_written, referenced_data_file, union
from ..snapshot_changes import SnapshotChange
from . import deletion_vectors


def enabled(properties: dict[str, str]) -> bool:
    """Whether a table opted in to merge-on-read (any row-level mode): only such a table gets deletion vectors."""
    return any(merge_on_read(properties, p) for p in TableProperties.ROW_LEVEL_MODES)


def has_vectors(delta: DeltaTable) -> bool:
    return deletion_vectors.FEATURE in (delta.protocol().reader_features or [])


@dataclass
class VectorCommit:
    """The file actions of a commit that carries deletion vectors (rendered JSON), and the protocol it raises to."""

    actions: list[dict]
    protocol: dict | None
    vectors: int  # data files that got a new vector


def plan(
    root_uri: str, storage: StorageConfig, table: Table, delta: DeltaTable, change: SnapshotChange, actions: list[AddAction | RemoveAction], now: int,
) -> VectorCommit | None:
    """The snapshot's Delta file actions with their vectors; None when the commit needs none (a plain delta-rs commit)."""
    position_files = [f for f in change.delete_files_added if f.content == DataFileContent.POSITION_DELETES]
    logged_vectors = has_vectors(delta)
    if not position_files and not logged_vectors:  # (a log without vectors has no vector to clear either)
        return None
    adds = {delta_path(a.path): a for a in actions if isinstance(a, AddAction)}
    removes = [a for a in actions if isinstance(a, RemoveAction)]
    targets = {relative_to(root_uri, uri): files for uri, files in named_data_files(storage, position_files).items()}
    accumulate = SummaryKeys.OPERATION not in change.summary  # another engine's delete files add to the earlier ones
    if not accumulate:  # a delete file removed and not replaced (a rollback): its data file is whole again
        cleared = [referenced_data_file(f) for f in change.delete_files_removed if f.content == DataFileContent.POSITION_DELETES]
        targets.update({p: [] for uri in cleared if uri is not None and (p := relative_to(root_uri, uri)) not in targets})
    targets = {p: files for p, files in targets.items() if p not in {delta_path(r.path) for r in removes} or p in adds}
    targets = {p: files for p, files in targets.items() if p not in adds or files}
    wanted = {p for p in targets if p not in adds} | {delta_path(r.path) for r in removes}
    logged = deletion_vectors.live_adds(storage, root_uri, delta.version(), wanted) if wanted else {}
    targets = {p: files for p, files in targets.items() if files or deletion_vectors.descriptor_of(logged.get(p, {}))}  # cleared: had a vector
    if not targets and not any(deletion_vectors.descriptor_of(logged.get(delta_path(r.path), {})) for r in removes):
        return None  # nothing removed carries a vector, nothing gets one
    if missing := sorted(p for p in targets if p not in adds and p not in logged):
        t = ".".join(table.name())
        raise MirrorRefused(f"Table {t}: snapshot {change.snapshot.snapshot_id} deletes rows of {len(missing)} data file(s) the Delta log does not hold "
                            f"(e.g. {missing[0]}); the formats disagreed before this snapshot. Run `lakehouse verify {t}`, then `lakehouse repair {t}`")
    vectors = {p: _vector(storage, root_uri, p, files, logged.get(p), accumulate) for p, files in targets.items()}
    # A file both removed and added: only a full diff does that, to re-add it without a stale vector.
    out = [deletion_vectors.remove_json(r, deletion_vectors.descriptor_of(logged.get(delta_path(r.path), {}))) for r in removes]
    out += [deletion_vectors.add_json(a, vectors.get(p)) for p, a in adds.items()]
    for p in targets.keys() - adds.keys():
        if vectors[p] != deletion_vectors.descriptor_of(logged[p]):  # the same vector again (a full diff): nothing to change
            out += [deletion_vectors.remove_from_log(logged[p], now), deletion_vectors.add_from_log(logged[p], vectors[p], now)]
    new = [v for v in vectors.values() if v is not None]
    return VectorCommit(out, deletion_vectors.protocol_with_vectors(delta.protocol()) if new else None, len(new))


def named_data_files(storage: StorageConfig, delete_files: list[DataFile]) -> dict[str, list[DataFile]]:
    """Data file URI -> the position-delete files among `delete_files` that name it (equality-delete files name none)."""
    out: dict[str, list[DataFile]] = {}
    for f in delete_files:
        if f.content != DataFileContent.POSITION_DELETES:
            continue
        named = referenced_data_file(f)
        if named is None:  # another engine's delete file may name several data files
            fs, path = storage.filesystem(f.file_path)
            uris = pq.read_table(path, filesystem=fs, columns=["file_path"]).column("file_path").unique().to_pylist()
        else:
            uris = [named]
        for uri in uris:
            out.setdefault(uri, []).append(f)
    return out


def _vector(storage: StorageConfig, root_uri: str, path: str, files: list[DataFile], logged: dict | None, accumulate: bool) -> deletion_vectors.Descriptor | None:
    """Write the vector of the data file at `path` (relative) from its delete files; its descriptor (None: no position)."""
    uri = _data_file_uri(root_uri, path, files, storage)
    positions = positions_as_written(storage, files, uri)
    if accumulate and logged is not None and (old := deletion_vectors.descriptor_of(logged)) is not None:
        positions = union(positions, deletion_vectors.read_vector(storage, root_uri, old))
    if len(positions) == 0:
        return None
    key = files[0].file_path if len(files) == 1 and referenced_data_file(files[0]) is not None else "\n".join([uri, *sorted(f.file_path for f in files)])
    descriptor, _ = deletion_vectors.write_vector(storage, root_uri, positions, key)
    return descriptor


def _data_file_uri(root_uri: str, path: str, files: list[DataFile], storage: StorageConfig) -> str:
    """The data file URI as the delete files spell it (read_positions matches on it)."""
    for f in files:
        named = referenced_data_file(f)
        if named is not None and relative_to(root_uri, named) == path:
            return named
    for uri in named_data_files(storage, files):
        if relative_to(root_uri, uri) == path:
            return uri
    return path


def full_diff(root_uri: str, table: Table, delta: DeltaTable, target, iceberg_files: dict[str, DataFile]) -> tuple[list[DataFile], set[str]]:
    """For a commit that brings Delta to `target` at once: (every live position-delete file at `target`, the data files
    live in both formats whose Delta vector Iceberg has no delete for: re-added without it)."""
    from ..deletes import table_files

    deletes = [e.data_file for e in table_files(table, target).position_deletes]
    if not has_vectors(delta):
        return deletes, set()
    named = {referenced_data_file(f) for f in deletes}
    deleted = {relative_to(root_uri, u) for u in named if u is not None} if None not in named else set(iceberg_files)
    with_vectors = {relative_to(root_uri, u) for u in pa.table(delta.deletion_vectors()).column("filepath").to_pylist()}
    return deletes, {p for p in with_vectors if p in iceberg_files and p not in deleted}

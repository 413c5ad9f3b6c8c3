"""Iceberg position-delete files of merge-on-read tables: one per data file, holding every row deleted from it.

A merge-on-read write (core/write/merge/on_read.py) deletes rows by position instead of rewriting their data file.
Each data file that loses rows gets ONE position-delete file (Iceberg v2, `file_path` + `pos`, file-scoped:
its `file_path` bounds name that data file, which readers use to apply it to that file only) holding every
position deleted from that file so far: a later delete writes the union and the commit removes the old
delete file. So there is never more than one delete file per data file (the rule Iceberg v3 gives deletion
vectors), and it carries exactly the positions of the Delta deletion vector that mirrors it.

The delete files live in the table's `_deletes/` folder, beside the Delta deletion-vector files: a `_`
prefix keeps Delta's VACUUM and Java Iceberg's orphan cleanup from taking them for strays.

pyiceberg 0.12 reads such files (its scans apply them) but writes none, so this module writes them with
pyarrow and builds their `DataFile` entries; `deletes.RowDelta` commits them.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.types import LongType, StringType

from ..io.storage import StorageConfig, join_uri
from ..memo import ByImmutableFiles

DELETES_FOLDER = "_deletes"
PATH_FIELD_ID, POS_FIELD_ID = 2147483546, 2147483545  # the Iceberg spec's reserved field ids
FILE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(PATH_FIELD_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_FIELD_ID).encode()}),
])


# The positions a delete file deletes from one data file (sorted, distinct, int64), under (delete file, data file):
# a delete file is written once under a new name, so a merge that replaces it, and the Delta mirror that turns it
# into a deletion vector, take the positions this process wrote instead of reading them back (positions_as_written).
_POSITIONS = ByImmutableFiles(max_weight=4_000_000, weight=len)  # positions in all: 32 MB


def referenced_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position-delete file applies to, from its `file_path` bounds (None: it may apply to several)."""
    lower, upper = delete_file.lower_bounds or {}, delete_file.upper_bounds or {}
    if PATH_FIELD_ID in lower and lower.get(PATH_FIELD_ID) == upper.get(PATH_FIELD_ID):
        return lower[PATH_FIELD_ID].decode("utf-8")
    return None


def write_delete_file(storage: StorageConfig, table_root: str, data_file: DataFile, positions: pa.Array) -> DataFile:
    """Write the position-delete file of `data_file` holding `positions` (sorted, distinct, int64), its DataFile entry.

    The entry carries the data file's partition and spec, so partition-scoped readers apply it to that
    partition, and equal `file_path` bounds, so file-scoped readers apply it to that file only."""
    positions = positions.cast(pa.int64())
    uri = join_uri(table_root, DELETES_FOLDER, f"{uuid.uuid4().hex}-deletes.parquet")
    rows = pa.table([pa.array([data_file.file_path] * len(positions), pa.string()), positions], schema=FILE_SCHEMA)
    fs, path = storage.filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        pq.write_table(rows, out, compression="zstd")
    size = fs.get_file_info(path).size
    _POSITIONS.get((uri, data_file.file_path), lambda: positions)
    path_bound = to_bytes(StringType(), data_file.file_path)
    entry = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=data_file.partition,
        record_count=len(positions),
        file_size_in_bytes=size,
        value_counts={PATH_FIELD_ID: len(positions), POS_FIELD_ID: len(positions)},
        null_value_counts={PATH_FIELD_ID: 0, POS_FIELD_ID: 0},
        lower_bounds={PATH_FIELD_ID: path_bound, POS_FIELD_ID: to_bytes(LongType(), positions[0].as_py())} if len(positions) else {},
        upper_bounds={PATH_FIELD_ID: path_bound, POS_FIELD_ID: to_bytes(LongType(), positions[-1].as_py())} if len(positions) else {},
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )
    entry.spec_id = data_file.spec_id  # not a from_args field in pyiceberg 0.12
    return entry


def read_positions(storage: StorageConfig, delete_files: list[DataFile], data_file_path: str) -> pa.Array:
    """Every position the given position-delete files delete from `data_file_path`: sorted, distinct, int64.

    Reads only the delete files (small: two columns, one value per deleted row), on the caller's process: what the
    checks compare, so a file changed under its name is seen."""
    return _union([_read(storage, f, data_file_path) for f in delete_files])


def positions_as_written(storage: StorageConfig, delete_files: list[DataFile], data_file_path: str) -> pa.Array:
    """`read_positions` for the write path: the positions this process wrote into (or read from) a delete file are
    taken from memory, not read back (a merge replacing the file, the Delta mirror turning it into a vector)."""
    return _union([_POSITIONS.get((f.file_path, data_file_path), lambda f=f: _read(storage, f, data_file_path)) for f in delete_files])


def _union(chunks: list[pa.Array]) -> pa.Array:
    import pyarrow.compute as pc

    if not chunks:
        return pa.array([], pa.int64())
    return chunks[0] if len(chunks) == 1 else pc.unique(pa.concat_arrays(chunks)).sort()


def _read(storage: StorageConfig, delete_file: DataFile, data_file_path: str) -> pa.Array:
    import pyarrow.compute as pc

    fs, path = storage.filesystem(delete_file.file_path)
    rows = pq.read_table(path, filesystem=fs, columns=["file_path", "pos"])
    if referenced_data_file(delete_file) != data_file_path:  # a delete file of another engine may name several data files
        rows = rows.filter(pc.equal(rows.column("file_path"), data_file_path))
    return pc.unique(rows.column("pos").combine_chunks().cast(pa.int64())).sort()


def union(existing: pa.Array, new: pa.Array) -> pa.Array:
    """The positions of both arrays, sorted and distinct."""
    import pyarrow.compute as pc

    return pc.unique(pa.concat_arrays([existing.cast(pa.int64()), new.cast(pa.int64())])).sort()

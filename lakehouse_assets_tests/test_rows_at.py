"""`ParquetFileReader.rows_at`: the rows at given positions of a file, kept batch by batch as the file is read.

A merge-on-read merge with the Delta change feed on reads the rows it deletes this way (their pre-images): the
positions come from the key columns, and the whole rows of a file are never held at once.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse_assets.core.io.storage import StorageConfig
from lakehouse_assets.core.read.deleted_positions import IcebergPositionDeletes
from lakehouse_assets.core.read.reader import ParquetFileReader


def test_rows_at_positions_across_batches_equal_a_whole_read_taken_there(tmp_path):
    rows = 200_000  # the reader's batches hold 65,536 rows: positions fall in four of them and on their edges
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64()), "name": [f"n{i}" for i in range(rows)]}), path, row_group_size=50_000)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    reader = ParquetFileReader(StorageConfig(), schema)
    positions = pa.array([0, 1, 65_535, 65_536, 131_071, 131_072, 150_000, rows - 1], pa.int64())

    got = reader.rows_at(path.as_uri(), positions)

    assert got.schema == schema
    assert got.to_pylist() == pq.read_table(path).take(positions).to_pylist()
    assert reader.rows_at(path.as_uri(), pa.array([], pa.int64())).num_rows == 0


def test_rows_at_takes_the_columns_it_is_given_and_reads_only_the_others(tmp_path):
    rows = 100_000
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"name": [f"n{i}" for i in range(rows)], "id": pa.array(range(rows), pa.int32())}), path)
    schema = pa.schema([pa.field("name", pa.string()), pa.field("id", pa.int64())])  # the table's type, wider than the file's
    reader = ParquetFileReader(StorageConfig(), schema)
    positions = pa.array([3, 65_536, rows - 1], pa.int64())
    # Given values that differ from the file's: they are what comes back, so the column was not read again.
    known = pa.table({"id": pa.array([-i for i in range(rows)], pa.int32())})

    got = reader.rows_at(path.as_uri(), positions, known=known)

    assert got.schema == schema
    assert got.to_pylist() == [{"name": "n3", "id": -3}, {"name": "n65536", "id": -65_536}, {"name": f"n{rows - 1}", "id": -(rows - 1)}]
    assert reader.rows_at(path.as_uri(), pa.array([], pa.int64()), known=known).num_rows == 0
    only_keys = ParquetFileReader(StorageConfig(), pa.schema([pa.field("id", pa.int64())]))
    assert only_keys.rows_at(path.as_uri(), positions, known=known).column("id").to_pylist() == [-3, -65_536, -(rows - 1)]


def test_rows_at_refuses_a_reader_that_leaves_deleted_rows_out(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3]}), path)
    reader = ParquetFileReader(StorageConfig(), pa.schema([pa.field("id", pa.int64())]), deleted={path.as_uri(): IcebergPositionDeletes(path.as_uri(), ())})
    with pytest.raises(ValueError, match="no deleted rows out"):
        reader.rows_at(path.as_uri(), pa.array([0], pa.int64()))

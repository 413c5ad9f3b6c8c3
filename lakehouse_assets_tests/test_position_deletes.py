"""Position-delete files of merge-on-read tables, committed by `iceberg_committer.commit_files` and read by pyiceberg."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from lakehouse_assets.core.formats.deletes import table_files
from lakehouse_assets.core.formats.iceberg import committer as ic
from lakehouse_assets.core.formats.position_deletes import read_positions, referenced_data_file, union, write_delete_file
from lakehouse_assets.core.io.storage import StorageConfig


@pytest.fixture
def table(tmp_path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("ns")
    t = catalog.create_table("ns.t", pa.schema([pa.field("id", pa.int64())]), location=f"file://{tmp_path}/t")
    t.append(pa.table({"id": pa.array(range(10), pa.int64())}))
    t.append(pa.table({"id": pa.array(range(10, 15), pa.int64())}))
    return t


def ids(t) -> list[int]:
    return sorted(t.scan().to_arrow().column("id").to_pylist())


def test_a_delete_file_removes_its_positions_from_its_data_file_only(table):
    storage = StorageConfig.from_env()
    first, second = sorted((e.data_file for e in table_files(table).data), key=lambda f: f.record_count, reverse=True)
    delete = write_delete_file(storage, table.location(), first, pa.array([0, 2], pa.int64()))
    assert referenced_data_file(delete) == first.file_path
    ic.commit_files(table, [], [], {}, added_delete_files=[delete])
    assert ids(table) == [1, *range(3, 15)]
    summary = table.current_snapshot().summary
    assert summary["added-delete-files"] == "1" and summary["total-position-deletes"] == "2"

    # A later delete from the same file writes the union and removes the earlier delete file.
    earlier = table_files(table).position_deletes[0].data_file
    positions = union(read_positions(storage, [earlier], first.file_path), pa.array([5, 2], pa.int64()))
    assert positions.to_pylist() == [0, 2, 5]
    replacement = write_delete_file(storage, table.location(), first, positions)
    ic.commit_files(table, [], [], {}, removed_delete_files=[earlier], added_delete_files=[replacement])
    assert ids(table) == [1, 3, 4, *range(6, 15)]
    assert [e.data_file.file_path for e in table_files(table).deletes] == [replacement.file_path]
    assert table.current_snapshot().summary["total-position-deletes"] == "3"

    # Removing the data file (a rewrite) removes its delete file with it.
    ic.commit_files(table, [], [first], {})
    assert ids(table) == list(range(10, 15)) and table_files(table).deletes == []
    assert table.current_snapshot().summary["total-delete-files"] == "0"
    assert second.file_path in {e.data_file.file_path for e in table_files(table).data}


def test_a_second_delete_file_for_a_data_file_is_refused_unless_it_replaces_the_first(table):
    """A commit raced by another that gave the same data file a delete file fails validation (the merge then re-plans)."""
    from pyiceberg.exceptions import ValidationException

    storage = StorageConfig.from_env()
    first = max((e.data_file for e in table_files(table).data), key=lambda f: f.record_count)
    ic.commit_files(table, [], [], {}, added_delete_files=[write_delete_file(storage, table.location(), first, pa.array([0], pa.int64()))])
    with pytest.raises(ValidationException, match="already have a live position-delete file"):
        ic.commit_files(table, [], [], {}, added_delete_files=[write_delete_file(storage, table.location(), first, pa.array([1], pa.int64()))])
    assert ids(table) == list(range(1, 15))

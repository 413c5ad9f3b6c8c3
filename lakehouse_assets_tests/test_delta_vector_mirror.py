"""The Delta mirror of position deletes: each snapshot that deletes rows by position becomes ONE Delta version that
re-adds the data files it touches with deletion vectors, read back by DuckDB's delta extension (delta-kernel-rs) and
delta-rs's kernel, with an exact change data feed.

The snapshots are built at the commit seam (position_deletes.write_delete_file + transaction.commit), as a
merge-on-read write commits them."""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import DeltaTable

from lakehouse_assets import TableOptions
from lakehouse_assets.core.formats import delta_deletion_vectors as dv
from lakehouse_assets.core.formats.deletes import table_files
from lakehouse_assets.core.formats.position_deletes import write_delete_file
from lakehouse_assets.core.model import FileChanges
from lakehouse_assets.core.properties import DELTA_APP_ID, Operation, SummaryKeys, TableProperties
from lakehouse_assets.core.write import transaction

MOR = {TableProperties.MERGE_MODE: TableProperties.MERGE_ON_READ, TableProperties.DELETE_MODE: TableProperties.MERGE_ON_READ}


def people(spark, n=20):
    return spark.createDataFrame([(i, f"n{i}", "US" if i % 2 else "DE") for i in range(n)], "id long, name string, country string").coalesce(1)


def file_of(lh, t, country):
    (f,) = [e.data_file for e in table_files(lh.load(t)).data if f"country={country}" in e.data_file.file_path]
    return f


def delete_positions(lh, t, data_file, positions, replaces=None):
    """Commit a position-delete file deleting `positions` of `data_file` (replacing `replaces`), as a merge-on-read write does."""
    table = lh.load(t)
    delete = write_delete_file(lh.storage, table.location(), data_file, pa.array(positions, pa.int64()))
    changes = FileChanges(added_delete_files=[delete], removed_delete_files=[replaces] if replaces else [], created=[delete.file_path])
    result = transaction.commit(lh.context, t, table, changes, {SummaryKeys.OPERATION: Operation.MERGE}, mode=Operation.MERGE)
    return result, delete


def delta_ids(duck, root) -> list[int]:
    return sorted(r[0] for r in duck.execute(f"SELECT id FROM delta_scan('{root}')").fetchall())


def iceberg_ids(lh, t) -> list[int]:
    return sorted(lh.load(t).scan().to_arrow().column("id").to_pylist())


def log_actions(root, version) -> list[dict]:
    return [json.loads(line) for line in open(f"{root}/_delta_log/{version:020d}.json").read().splitlines() if line]


def test_position_deletes_become_deletion_vectors_in_one_delta_version(lh, spark, duck):
    t = "mor.people"
    first = lh.write(people(spark), t, partition_by=["country"], table=TableOptions(properties=MOR))
    root = lh.load(t).location().removeprefix("file://")
    de = file_of(lh, t, "DE")  # ids 0, 2, ..., 18 at positions 0..9
    assert DeltaTable(root).protocol().reader_features is None  # opted in, no vector yet: the protocol is as it was

    deleted, delete = delete_positions(lh, t, de, [1, 2])  # ids 2 and 4
    assert deleted.delta_version == first.delta_version + 1 and not deleted.delta_lagging
    expected = [i for i in range(20) if i not in (2, 4)]
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    actions = log_actions(root, deleted.delta_version)
    assert actions[1]["protocol"]["readerFeatures"] == ["deletionVectors"] and "changeDataFeed" in actions[1]["protocol"]["writerFeatures"]
    (add,) = [a["add"] for a in actions if "add" in a]
    (remove,) = [a["remove"] for a in actions if "remove" in a]
    assert add["path"] == remove["path"] and "deletionVector" not in remove and json.loads(add["stats"])["numRecords"] == 10
    assert add["deletionVector"]["cardinality"] == 2 and add["deletionVector"]["pathOrInlineDv"].startswith("_deletes")
    assert dv.Descriptor.from_json(add["deletionVector"]).file_uri(lh.load(t).location()).endswith(f"deletion_vector_{dv.vector_uuid(delete.file_path)}.bin")
    assert {(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a} == {(DELTA_APP_ID, lh.load(t).current_snapshot().sequence_number)}
    delta = DeltaTable(root)
    assert pa.table(delta.deletion_vectors()).column("selection_vector").to_pylist() == [[i not in (1, 2) for i in range(10)]]
    assert sorted(pa.table(delta.scan(columns=["id"])).column("id").to_pylist()) == expected
    feed = pa.table(delta.load_cdf(starting_version=deleted.delta_version).read_all()).to_pylist()
    assert sorted((r["id"], r["_change_type"]) for r in feed) == [(2, "delete"), (4, "delete")]

    # A later delete from the same file: the union replaces the earlier delete file, the remove names the old vector.
    again, _ = delete_positions(lh, t, de, [1, 2, 5], replaces=delete)
    expected.remove(10)
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    actions = log_actions(root, again.delta_version)
    assert not any("protocol" in a for a in actions)
    (remove,) = [a["remove"] for a in actions if "remove" in a]
    assert remove["deletionVector"] == add["deletionVector"]
    feed = pa.table(DeltaTable(root).load_cdf(starting_version=again.delta_version).read_all()).to_pylist()
    assert [(r["id"], r["_change_type"]) for r in feed] == [(10, "delete")]

    # Removing the data file (its delete file goes with it): the remove names the vector, so no reader keeps the file.
    table = lh.load(t)
    gone = transaction.commit(lh.context, t, table, FileChanges(removes=[file_of(lh, t, "DE")]), {SummaryKeys.OPERATION: Operation.OVERWRITE}, mode=Operation.OVERWRITE)
    odd = [i for i in range(20) if i % 2]
    assert iceberg_ids(lh, t) == odd and delta_ids(duck, root) == odd
    (remove,) = [a["remove"] for a in log_actions(root, gone.delta_version) if "remove" in a]
    assert remove["deletionVector"]["cardinality"] == 3
    assert pa.table(DeltaTable(root).deletion_vectors()).num_rows == 0


def test_a_lagging_delta_catches_up_with_its_vectors_and_a_copy_on_write_table_still_refuses(lh, spark, duck):
    t = "mor.lag"
    lh.write(people(spark), t, partition_by=["country"], table=TableOptions(properties=MOR))
    root = lh.load(t).location().removeprefix("file://")
    de = file_of(lh, t, "DE")
    table = lh.load(t)
    delete = write_delete_file(lh.storage, table.location(), de, pa.array([0], pa.int64()))
    # Iceberg alone (as when the Delta commit failed): then repair mirrors the snapshot through the same path.
    from lakehouse_assets.core.formats import iceberg_committer as ic

    ic.commit_files(table, [], [], {SummaryKeys.OPERATION: Operation.MERGE}, added_delete_files=[delete])
    assert lh.delta_lag(t) == 1
    lh.repair(t)
    assert lh.delta_lag(t) == 0
    assert delta_ids(duck, root) == iceberg_ids(lh, t) == list(range(1, 20))

    cow = "mor.cow"
    lh.write(people(spark), cow, partition_by=["country"])
    result, _ = delete_positions(lh, cow, file_of(lh, cow, "DE"), [0])
    assert result.delta_lagging and "delete file(s) (position-deletes)" in result.delta_error and "--apply-deletes" in result.delta_error
    assert DeltaTable(lh.load(cow).location()).protocol().reader_features is None

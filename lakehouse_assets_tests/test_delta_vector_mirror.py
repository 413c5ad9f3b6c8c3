"""The Delta mirror of position deletes: each snapshot that deletes rows by position becomes ONE Delta version that
re-adds the data files it touches with deletion vectors, read back by DuckDB's delta extension (delta-kernel-rs) and
delta-rs's kernel, with an exact change data feed.

The snapshots are built at the commit seam (position_deletes.write_delete_file + transaction.commit), as a
merge-on-read write commits them."""

from __future__ import annotations

import json
import os

import pyarrow as pa
from deltalake import DeltaTable

from lakehouse_assets import TableOptions
from lakehouse_assets.core.formats.deletes import table_files
from lakehouse_assets.core.formats.delta import deletion_vectors as dv
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


def feed_check(lh, t):
    """verify --deep's check of the current version's change data files against the rows its snapshot changed."""
    from lakehouse_assets.core.maintenance.verify.change_data import change_data_differences

    table = lh.load(t)
    return change_data_differences(table, lh.mirror(table), DeltaTable(table.location()))


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
    assert feed_check(lh, t) == ({"version": deleted.delta_version, "cdc_files": 1, "cdc_rows": 2}, [])  # verify --deep's check

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
    assert feed_check(lh, t)[1] == []

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
    from lakehouse_assets.core.formats.iceberg import committer as ic

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


def test_a_delta_table_that_deletes_with_vectors_is_imported_as_merge_on_read_its_vectors_kept(lh, spark, duck, tmp_path):
    from .test_import import delete_ids_2_and_4_with_a_vector, source_rows

    root = tmp_path / "dv_mor"
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    de, us = delete_ids_2_and_4_with_a_vector(root, data, configuration={dv.ENABLE_PROPERTY: "true"})
    de_vector = [a["add"] for a in log_actions(str(root), 1) if "add" in a][0]["deletionVector"]
    assert de_vector["storageType"] == "i"  # inline, as Delta Lake on Spark writes small vectors
    report = lh.import_table("imp.dv_mor", str(root))  # no apply_deletes: nothing rewritten

    t = "imp.dv_mor"
    expected = sorted(r[0] for r in rows if r[0] not in (2, 4))
    assert report["deletion_vectors_kept"] == 1 and report["deletion_vectors_purged"] == 0 and report["rows"] == len(rows)
    table = lh.load(t)
    assert all(table.properties[p] == TableProperties.MERGE_ON_READ for p in TableProperties.ROW_LEVEL_MODES)
    (delete,) = [e.data_file for e in table_files(table).position_deletes]
    assert delete.file_path.endswith("-deletes.parquet") and "/_deletes/" in delete.file_path and delete.record_count == 2
    assert {e.data_file.file_path.rsplit("/", 1)[1] for e in table_files(table).data} == {p.rsplit("/", 1)[1] for p in (de["path"], us["path"])}
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, str(root)) == expected

    # A later merge-on-read delete from the same file replaces the imported vector (an inline one, Delta Lake's) with the mirror's.
    from lakehouse_assets.core.formats.position_deletes import read_positions

    de_file = file_of(lh, t, "DE")
    positions = sorted({*read_positions(lh.storage, [delete], de_file.file_path).to_pylist(), 0})
    result, _ = delete_positions(lh, t, de_file, positions, replaces=delete)
    expected.remove(0)
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, str(root)) == expected
    (remove,) = [a["remove"] for a in log_actions(str(root), result.delta_version) if "remove" in a]
    assert remove["deletionVector"] == de_vector and remove["path"] == de["path"]


def test_another_engines_delta_delete_with_a_vector_is_adopted_as_a_position_delete(lh, spark, duck):
    from .test_import import inline_deletion_vector

    t = "mor.adopt"
    first = lh.write(people(spark), t, partition_by=["country"], table=TableOptions(properties=MOR))
    root = lh.load(t).location().removeprefix("file://")
    (de_add,) = [a["add"] for a in log_actions(root, first.delta_version) if "add" in a and "country=DE" in a["add"]["path"]]
    # Delta Lake on Spark deletes ids 0 and 6 (positions 0 and 3 of the DE file) with an inline vector.
    vector = inline_deletion_vector([0, 3])
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [dv.FEATURE], "writerFeatures": ["changeDataFeed", dv.FEATURE]}
    foreign = [{"commitInfo": {"operation": "DELETE", "engineInfo": "Apache-Spark/3.5.0 Delta-Lake/3.2.0"}}, {"protocol": protocol},
               {"remove": {"path": de_add["path"], "partitionValues": de_add["partitionValues"], "deletionTimestamp": 1, "dataChange": True}},
               {"add": {**de_add, "dataChange": True, "deletionVector": vector}}]
    with open(f"{root}/_delta_log/{first.delta_version + 1:020d}.json", "x") as f:
        f.write("".join(json.dumps(a) + "\n" for a in foreign))

    report = lh.repair(t, adopt_delta=True)
    assert report["repaired"] and len(report["adopt_delta"]["adopted_versions"]) == 1
    expected = [i for i in range(20) if i not in (0, 6)]
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    (delete,) = [e.data_file for e in table_files(lh.load(t)).position_deletes]
    assert delete.record_count == 2 and lh.delta_lag(t) == 0

    # The next merge-on-read delete of that file removes the file as the foreign version left it (its inline vector).
    from lakehouse_assets.core.formats.position_deletes import read_positions

    de = file_of(lh, t, "DE")
    result, _ = delete_positions(lh, t, de, [*read_positions(lh.storage, [delete], de.file_path).to_pylist(), 9], replaces=delete)
    expected.remove(18)
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    (remove,) = [a["remove"] for a in log_actions(root, result.delta_version) if "remove" in a]
    assert remove["deletionVector"] == vector


def test_rollback_of_a_merge_on_read_table_carries_its_position_deletes_and_vectors(lh, spark, duck):
    t = "mor.rollback"
    first = lh.write(people(spark), t, partition_by=["country"], table=TableOptions(properties=MOR))
    root = lh.load(t).location().removeprefix("file://")
    de = file_of(lh, t, "DE")
    once, delete = delete_positions(lh, t, de, [1])  # id 2
    delete_positions(lh, t, de, [1, 4], replaces=delete)  # ids 2 and 8

    back = lh.rollback(t, snapshot_id=once.iceberg_snapshot_id)
    expected = [i for i in range(20) if i != 2]
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    (add,) = [a["add"] for a in log_actions(root, back.delta_version) if "add" in a]
    assert add["deletionVector"]["cardinality"] == 1

    whole = lh.rollback(t, snapshot_id=first.iceberg_snapshot_id)  # before any delete: the file is whole again in both formats
    assert iceberg_ids(lh, t) == list(range(20)) and delta_ids(duck, root) == list(range(20))
    (add,) = [a["add"] for a in log_actions(root, whole.delta_version) if "add" in a]
    (remove,) = [a["remove"] for a in log_actions(root, whole.delta_version) if "remove" in a]
    assert "deletionVector" not in add and remove["deletionVector"]["cardinality"] == 1
    assert table_files(lh.load(t)).deletes == [] and pa.table(DeltaTable(root).deletion_vectors()).num_rows == 0


def test_a_delta_log_started_at_a_snapshot_carries_its_position_deletes_as_vectors(lh, duck):
    """pyiceberg writes a merge-on-read table, an engine its position deletes (one file-scoped, one naming two data files,
    as Java Iceberg's partition-scoped deletes do). A Delta log started at the current snapshot (one commit that makes
    the file sets equal, as for expired history) carries them as vectors."""
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from lakehouse_assets.core.formats.iceberg import committer as ic
    from lakehouse_assets.core.formats.position_deletes import FILE_SCHEMA

    lh.catalog.create_namespace("ice")
    table = lh.catalog.create_table("ice.orders", Schema(NestedField(1, "id", LongType(), required=False)), properties={TableProperties.DELETE_MODE: TableProperties.MERGE_ON_READ})
    table.append(pa.table({"id": pa.array(range(10), pa.int64())}))
    table.append(pa.table({"id": pa.array(range(10, 15), pa.int64())}))
    first, second = sorted((e.data_file for e in table_files(table).data), key=lambda f: f.record_count, reverse=True)
    scoped = write_delete_file(lh.storage, table.location(), first, pa.array([0, 2], pa.int64()))
    ic.commit_files(table, [], [], {}, added_delete_files=[scoped])
    # A delete file naming two data files (no file_path bounds): deletes id 4 of the first and id 11 of the second.

    both = f"{table.location()}/data/both-deletes.parquet"
    pq.write_table(pa.table([pa.array([first.file_path, second.file_path]), pa.array([4, 1], pa.int64())], schema=FILE_SCHEMA), both.removeprefix("file://"))
    entry = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=both, file_format=FileFormat.PARQUET, partition=first.partition,
                               record_count=2, file_size_in_bytes=os.path.getsize(both.removeprefix("file://")))
    entry.spec_id = first.spec_id
    ic.commit_files(lh.catalog.load_table("ice.orders"), [], [], {}, added_delete_files=[entry])
    expected = [i for i in range(15) if i not in (0, 2, 4, 11)]
    assert iceberg_ids(lh, "ice.orders") == expected

    table = lh.load("ice.orders")
    lh.mirror(table).start_at(table)
    root = table.location().removeprefix("file://")
    assert delta_ids(duck, root) == expected
    vectors = pa.table(DeltaTable(root).deletion_vectors())
    assert sorted(sum(1 for keep in v if not keep) for v in vectors.column("selection_vector").to_pylist()) == [1, 3]


def test_a_branch_with_position_deletes_is_published_to_delta_as_vectors(lh, spark, duck):
    from lakehouse_assets.core.table import branches

    t = "mor.branch"
    lh.write(people(spark), t, partition_by=["country"], table=TableOptions(properties=MOR))
    root = lh.load(t).location().removeprefix("file://")
    lh.write(people(spark, 0).union(spark.createDataFrame([(100, "n100", "DE")], "id long, name string, country string")), t, branch="audit")
    view = branches.on_branch(lh.load(t), "audit")
    de = file_of(lh, t, "DE")
    delete = write_delete_file(lh.storage, view.location(), de, pa.array([2], pa.int64()))  # id 4
    changes = FileChanges(added_delete_files=[delete], created=[delete.file_path])
    summary = {SummaryKeys.OPERATION: Operation.MERGE, SummaryKeys.BRANCH: "audit"}  # as a write to the branch records it
    staged = transaction.commit(lh.context, t, view, changes, summary, mode=Operation.MERGE, branch="audit")
    assert staged.delta_version is None and delta_ids(duck, root) == list(range(20))  # Delta mirrors main only

    published = lh.publish(t, "audit")
    expected = sorted([i for i in range(20) if i != 4] + [100])
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    assert pa.table(DeltaTable(root).deletion_vectors()).column("selection_vector").to_pylist() == [[i != 2 for i in range(10)]]
    assert published.delta_version is not None and lh.delta_lag(t) == 0


def test_a_file_whose_vector_the_checkpoint_holds_gets_its_next_vector_naming_the_old_one(lh, spark, duck):
    """After a checkpoint, the file's add (and its vector) comes from the checkpoint's rows of that file alone
    (checkpoint_state.read_adds_of): the next delete's remove still names the old vector, and every reader agrees."""
    from lakehouse_assets.core.formats.delta.kept_logs import KEPT
    from lakehouse_assets.core.formats.delta.logged_vectors import live_vectors

    t = "mor.checkpointed"
    lh.write(people(spark), t, partition_by=["country"], table=TableOptions(properties=MOR))
    root = lh.load(t).location().removeprefix("file://")
    de = file_of(lh, t, "DE")
    _, delete = delete_positions(lh, t, de, [1, 2])  # ids 2 and 4
    DeltaTable(root).create_checkpoint()
    KEPT.clear()  # the next commit follows the log from its checkpoint
    (old,) = [a["add"]["deletionVector"] for a in log_actions(root, DeltaTable(root).version()) if "add" in a]
    assert set(live_vectors(lh.storage, lh.load(t).location(), DeltaTable(root))) == {de.file_path.rsplit(f"{root}/", 1)[-1]}

    again, _ = delete_positions(lh, t, de, [1, 2, 5], replaces=delete)  # and id 10
    (remove,) = [a["remove"] for a in log_actions(root, again.delta_version) if "remove" in a]
    assert remove["deletionVector"] == old
    expected = [i for i in range(20) if i not in (2, 4, 10)]
    assert iceberg_ids(lh, t) == expected and delta_ids(duck, root) == expected
    assert sorted(pa.table(DeltaTable(root).scan(columns=["id"])).column("id").to_pylist()) == expected
    assert lh.verify(t)["agree"]

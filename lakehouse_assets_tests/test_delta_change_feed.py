"""The Delta change data feed: every mirrored version that replaces or deletes rows carries `cdc` files with exactly
the rows `Lakehouse.changes` returns for its Iceberg snapshot, so `DeltaTable.load_cdf` and `Lakehouse.changes` agree
row for row."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import MergeOptions, Slice
from lakehouse_assets.core.properties import STATS_AS_STRUCT

COLUMNS = ["id", "name", "country"]


def people(spark, rows):
    return spark.createDataFrame(rows, "id long, name string, country string").coalesce(1)


def delta_feed(lh, t, starting_version: int) -> list[tuple]:
    """`load_cdf` from `starting_version` on: (columns..., _change_type, _commit_version), sorted."""
    root = lh.load(t).location()
    delta = DeltaTable(root, storage_options=lh.storage.delta_options(root))
    table = pa.table(delta.load_cdf(starting_version=starting_version).read_all())
    return sorted(tuple(r[c] for c in [*COLUMNS, "_change_type", "_commit_version"]) for r in table.to_pylist())


def lakehouse_changes(lh, t, since_snapshot: int | None) -> list[tuple]:
    return sorted(tuple(r[c] for c in [*COLUMNS, "_change_type", "_commit_version"]) for r in lh.changes(t, since_snapshot).collect())


def assert_feed_equals_changes(lh, t, since) -> list[tuple]:
    """`since`: the WriteResult after which both feeds are read."""
    expected = lakehouse_changes(lh, t, since.iceberg_snapshot_id)
    assert delta_feed(lh, t, since.delta_version + 1) == expected
    return expected


@pytest.mark.smoke
def test_merge_feed_is_exact(lh, spark):
    for t, partition_by in (("cdf.flat", None), ("cdf.parts", ["country"])):
        first = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(100)]), t, partition_by=partition_by)
        batch = spark.createDataFrame([(1, "new1", "US", "u"), (3, None, "US", "D"), (200, "n200", "DE", "i")], "id long, name string, country string, op string")
        lh.write(batch, t, mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
        assert assert_feed_equals_changes(lh, t, first) == [
            (1, "n1", "US", "update_preimage", first.delta_version + 1), (1, "new1", "US", "update_postimage", first.delta_version + 1),
            (3, "n3", "US", "delete", first.delta_version + 1), (200, "n200", "DE", "insert", first.delta_version + 1),
        ]


def test_every_write_mode_and_maintenance_operation_feeds_exactly_its_changes(lh, spark, duck):
    t = "cdf.modes"
    first = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(8)]), t, partition_by=["country"])
    delta = DeltaTable(lh.load(t).location())
    assert delta.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    assert delta_feed(lh, t, 0) == lakehouse_changes(lh, t, None)  # the first write's rows, all inserts

    appended = lh.write(people(spark, [(20, "n20", "US")]), t)  # an append: its added file reads as inserts
    window = Slice(values={"country": ["DE"]})
    lh.write(people(spark, [(0, "n0", "DE"), (2, "two", "DE"), (12, "n12", "DE")]), t, mode="overwrite", window=window)
    lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(1, 10)]), t, mode="overwrite")
    lh.write(people(spark, [(30, "n30", "US")]), t)
    compacted = lh.maintain(t, "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    rolled = lh.rollback(t, snapshot_id=appended.iceberg_snapshot_id)
    changes = assert_feed_equals_changes(lh, t, first)
    assert {c[3] for c in changes} == {"insert", "delete"}  # an overwrite reports a changed row as a delete and an insert
    # Only the rows that differ between the table before the rollback and at its target.
    v = rolled.delta_version
    assert [c for c in changes if c[4] == v] == [
        (0, "n0", "DE", "insert", v), (8, "n8", "DE", "delete", v), (9, "n9", "US", "delete", v), (20, "n20", "US", "insert", v),
        (30, "n30", "US", "delete", v),
    ]
    # The cdc files are never read as data: every reader of both formats sees the table's rows.
    import polars as pl

    from . import sail_reader
    from .conftest import assert_all_readers_agree, rows_of

    rows = assert_all_readers_agree(lh, spark, duck, t)  # DuckDB delta_scan, delta-rs and the Spark reader of both formats
    root = lh.load(t).location()
    assert rows_of(pl.read_delta(root).to_dicts(), sorted(COLUMNS)) == rows
    assert sail_reader.read_delta(root, sorted(COLUMNS)) == rows


def test_a_table_without_the_feed_gets_it_through_upgrade_and_until_then_delta_rs_infers_changes_from_whole_files(warehouse, spark):
    """Pinned: delta-rs 1.6.6 refuses `load_cdf` from version 0 of a table without the feed, and from version 1 on reads
    every add and remove action as inserted and deleted rows. Fails when delta-rs starts refusing (docs/changes.md)."""
    from lakehouse_assets import Lakehouse

    lh = Lakehouse(warehouse=warehouse, delta_configuration={"delta.enableChangeDataFeed": "false"})
    t = "cdf.off"
    first = lh.write(people(spark, [(i, f"n{i}", "US") for i in range(100)]), t)
    merge = lh.write(people(spark, [(i, f"new{i}", "US") for i in range(5)]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    with pytest.raises(Exception, match=r"(?i)change data (not enabled|enabled)"):
        DeltaTable(lh.load(t).location()).load_cdf(starting_version=0).read_all()
    inferred = delta_feed(lh, t, first.delta_version + 1)
    # Every row of the files the merge rewrote, once deleted and once inserted: far more than the 10 that changed.
    summary = lh.load(t).snapshot_by_id(merge.iceberg_snapshot_id).summary
    rewritten = int(summary["deleted-records"]) + int(summary["added-records"])
    assert sorted({c[3] for c in inferred}) == ["delete", "insert"] and len(inferred) == rewritten >= 100
    assert len(lakehouse_changes(lh, t, first.iceberg_snapshot_id)) == 10  # the truth: 5 pre- and 5 post-images

    upgraded = lh.upgrade(t)
    assert upgraded["change_data_feed_enabled"] and upgraded["upgraded"]
    assert lh.upgrade(t)["change_data_feed_enabled"] is False  # idempotent
    protocol = DeltaTable(lh.load(t).location()).protocol()
    assert protocol.min_writer_version == 7 and {"columnMapping", "changeDataFeed"} <= set(protocol.writer_features)
    before = lh.write(people(spark, [(99, "n99", "US")]), t)
    merged = lh.write(people(spark, [(7, "seven", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    v = merged.delta_version
    assert cdc_file_rows(lh, t, v) == lakehouse_changes(lh, t, before.iceberg_snapshot_id) == [
        (7, "n7", "US", "update_preimage", v), (7, "seven", "US", "update_postimage", v),
    ]
    # Pinned: delta-rs 1.6.6 reads no change feed of a column-mapped table (upgrade turned column mapping on too).
    with pytest.raises(Exception, match=r"Column mapping is not supported for read operation 'CHANGE DATA FEED scans'"):
        delta_feed(lh, t, before.delta_version + 1)


def test_upgrade_without_column_mapping_turns_the_feed_on_alone_and_delta_rs_reads_it(warehouse, spark):
    """`upgrade(column_mapping=False)` (`lakehouse upgrade --no-column-mapping`): the feed without column mapping, which
    delta-rs's change feed reader, its pyarrow reader and Polars refuse. The next merge's feed is exact in delta-rs."""
    import polars as pl

    from lakehouse_assets import Lakehouse

    lh = Lakehouse(warehouse=warehouse, delta_configuration={"delta.enableChangeDataFeed": "false"})
    del lh.delta_configuration[STATS_AS_STRUCT]  # a table created before new tables kept checkpoint statistics as a struct
    t = "cdf.feed_only"
    lh.write(people(spark, [(i, f"n{i}", "US") for i in range(20)]), t)
    root = lh.load(t).location()
    assert STATS_AS_STRUCT not in DeltaTable(root).metadata().configuration
    upgraded = lh.upgrade(t, column_mapping=False)
    assert upgraded["change_data_feed_enabled"] and upgraded["checkpoint_stats_as_struct_enabled"] and not upgraded["upgraded"]
    assert DeltaTable(root).metadata().configuration[STATS_AS_STRUCT] == "true"
    again = lh.upgrade(t, column_mapping=False)
    assert not again["change_data_feed_enabled"] and not again["checkpoint_stats_as_struct_enabled"]  # idempotent
    protocol = DeltaTable(root).protocol()
    assert "columnMapping" not in set(protocol.writer_features or []) and protocol.min_reader_version == 1
    before = lh.write(people(spark, [(99, "n99", "US")]), t)
    lh.write(people(spark, [(7, "seven", "US"), (8, "eight", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    v = before.delta_version + 1
    assert assert_feed_equals_changes(lh, t, before) == sorted([
        (7, "n7", "US", "update_preimage", v), (7, "seven", "US", "update_postimage", v),
        (8, "n8", "US", "update_preimage", v), (8, "eight", "US", "update_postimage", v),
    ])
    assert pl.read_delta(root).height == 21 and DeltaTable(root).to_pyarrow_table().num_rows == 21


def cdc_file_rows(lh, t, version: int) -> list[tuple]:
    """The rows of version `version`'s cdc files, read from the Delta log and the files themselves (physical column
    names mapped back to the table's), as `lakehouse_changes` gives them."""
    import json
    import os

    import pyarrow.parquet as pq

    root = lh.load(t).location().removeprefix("file://")
    actions = [json.loads(line) for line in open(os.path.join(root, "_delta_log", f"{version:020d}.json"))]
    schema = json.loads(next(a["metaData"]["schemaString"] for a in _log_since(root, version) if "metaData" in a))
    logical = {f["metadata"].get("delta.columnMapping.physicalName", f["name"]): f["name"] for f in schema["fields"]}
    rows = []
    for a in actions:
        if "cdc" in a:
            table = pq.read_table(os.path.join(root, a["cdc"]["path"]))
            for r in table.to_pylist():
                r = {logical.get(k, k): v for k, v in r.items()}
                rows.append((*(r[c] for c in COLUMNS), r["_change_type"], version))
    return sorted(rows)


def _log_since(root: str, version: int):
    """The actions of versions `version` down to 0, newest first (the latest metaData first)."""
    import json
    import os

    for v in range(version, -1, -1):
        path = os.path.join(root, "_delta_log", f"{v:020d}.json")
        if os.path.exists(path):
            yield from (json.loads(line) for line in open(path))


_KILLED_MERGE = """
import os, sys
from lakehouse_assets import Lakehouse, MergeOptions
from lakehouse_assets.core.formats.delta import log_commit as delta_log_commit
from lakehouse_assets.core.spark.session import spark_session

def killed(root_uri, storage, path, data):
    assert os.listdir(os.path.join(root_uri.removeprefix("file://"), "_change_data"))  # the cdc files are written
    os._exit(9)  # the process dies before the Delta commit file exists

delta_log_commit.put_if_absent = killed
spark = spark_session({"spark.master": "local[1]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
batch = spark.createDataFrame([(1, "new1", "US")], "id long, name string, country string")
Lakehouse(sys.argv[1]).write(batch, "cdf.killed", mode="merge", merge=MergeOptions(keys=["id"]))
"""


def test_a_kill_between_the_cdc_files_and_the_commit_leaves_no_visible_change(lh, spark, warehouse):
    """A real process, killed after its executors wrote the merge's cdc files and before the Delta commit file exists."""
    import os
    import subprocess
    import sys

    t = "cdf.killed"
    first = lh.write(people(spark, [(i, f"n{i}", "US") for i in range(10)]), t)
    with open(os.path.join(warehouse, "killed.log"), "w+") as out:  # a file, not a pipe: the dead driver's JVM may outlive it briefly
        done = subprocess.run([sys.executable, "-c", _KILLED_MERGE, warehouse], stdout=out, stderr=out, timeout=900)
        out.seek(0)
        assert done.returncode == 9, out.read()[-3000:]
    root = lh.load(t).location().removeprefix("file://")
    delta = DeltaTable(root)
    assert delta.version() == first.delta_version  # Iceberg has the merge, Delta nothing of it
    assert os.listdir(os.path.join(root, "_change_data"))  # written, referenced by no version
    assert referenced_cdc_files(root) == set()
    assert sorted(pa.table(delta.to_pyarrow_table()).column("name").to_pylist()) == sorted(f"n{i}" for i in range(10))

    repaired = lh.repair(t)
    assert repaired["delta_version"] == first.delta_version + 1, repaired
    assert assert_feed_equals_changes(lh, t, first) == [
        (1, "n1", "US", "update_preimage", first.delta_version + 1), (1, "new1", "US", "update_postimage", first.delta_version + 1),
    ]
    assert all(os.path.exists(os.path.join(root, p)) for p in referenced_cdc_files(root))


def referenced_cdc_files(root: str) -> set[str]:
    import json
    import os

    log = os.path.join(root, "_delta_log")
    return {json.loads(line)["cdc"]["path"] for name in os.listdir(log) if name.endswith(".json") for line in open(os.path.join(log, name)) if '"cdc"' in line}


def test_verify_deep_checks_the_change_data_files_against_the_iceberg_changes(lh, spark):
    import os

    import pyarrow.parquet as pq

    t = "cdf.verified"
    lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(20)]), t, partition_by=["country"])
    merged = lh.write(people(spark, [(1, "new1", "US"), (40, "n40", "DE")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    report = lh.verify(t, deep=True)
    assert report["agree"], report["differences"]
    # The merge writes its own change data: the rewrite task the row it dropped (US), the driver the upserts (US, DE).
    assert report["content"]["change_data"] == {"version": merged.delta_version, "cdc_files": 3, "cdc_rows": 3}
    # A cdc file that says another row changed is found.
    root = lh.load(t).location().removeprefix("file://")
    path = os.path.join(root, sorted(referenced_cdc_files(root))[0])
    rows = pq.read_table(path)
    pq.write_table(rows.set_column(rows.schema.get_field_index("name"), "name", pa.array(["wrong"] * rows.num_rows)), path)
    report = lh.verify(t, deep=True)
    assert not report["agree"] and any("change data files of Delta version" in d for d in report["differences"]), report["differences"]
    os.remove(path)
    assert any("missing change data file" in d for d in lh.verify(t, deep=True)["differences"])


def test_line_separators_inside_values_leave_the_delta_log_readable(lh, spark):
    # The Delta log is JSON lines ending at "\n"; JSON leaves U+2028, U+2029 and U+0085 unescaped inside strings,
    # and a string column's statistics carry its values: a log reader splitting at them would break a commit apart.
    t = "cdf.separators"
    names = ["a\u2028b", "c\u2029d", "e\x85f", "g\x1ch"]
    first = lh.write(people(spark, [(i, names[i % 4], "US") for i in range(8)]), t)
    merged = lh.write(people(spark, [(0, "\u2028z", "US"), (9, "\x85", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    report = lh.verify(t, deep=True)
    assert report["agree"], report["differences"]
    assert report["content"]["change_data"]["version"] == merged.delta_version
    changes = assert_feed_equals_changes(lh, t, first)
    assert {r[1] for r in changes if r[-2] in ("update_postimage", "insert")} == {"\u2028z", "\x85"}


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_the_feed_on_s3(backend, spark):
    """On an S3 warehouse (SeaweedFS): the executors write the cdc files to the bucket and the commit is created there
    put-if-absent; load_cdf equals Lakehouse.changes for a partitioned merge and a window overwrite."""
    lh = backend.lakehouse()
    t = f"{backend.namespace()}.people"
    first = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(20)]), t, partition_by=["country"])
    lh.write(people(spark, [(1, "new1", "US"), (40, "n40", "DE")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    lh.write(people(spark, [(0, "n0", "DE"), (2, "two", "DE")]), t, mode="overwrite", window=Slice(values={"country": ["DE"]}))
    changes = assert_feed_equals_changes(lh, t, first)
    assert (1, "new1", "US", "update_postimage", first.delta_version + 1) in changes and len(changes) == 3 + 11


def test_applying_another_engines_deletes_and_publishing_a_branch_feed_exactly(lh, spark):
    from . import foreign_writer as fw

    t = "cdf.foreign"
    first = lh.write(people(spark, [(i, f"n{i}", "US") for i in range(6)]), t)
    table = lh.load(t)
    fw.commit_deletes(table, [fw.position_deletes(table, fw.data_files(table)[0], [1])])  # another engine deletes id 1
    # Delta cannot express the delete file: the next Delta version jumps to the table with the deletes applied, and
    # its cdc files hold the one deleted row (not every row of the rewritten file).
    lh.repair(t, apply_deletes=True, spark=spark)
    assert delta_feed(lh, t, first.delta_version + 1) == [(1, "n1", "US", "delete", first.delta_version + 1)]
    # Iceberg has it as the delete file's snapshot, which no Delta version mirrors alone (applying it changed nothing).
    assert lakehouse_changes(lh, t, first.iceberg_snapshot_id) == [(1, "n1", "US", "delete", None)]

    before = lh.write(people(spark, [(9, "n9", "US")]), t)
    lh.write(people(spark, [(2, "two", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]), branch="dev")
    published = lh.publish(t, "dev")  # main fast-forwards to the branch's merge: Delta mirrors it then, with its feed
    assert published.published == "fast-forward" and published.delta_version == before.delta_version + 1
    assert assert_feed_equals_changes(lh, t, before) == [
        (2, "n2", "US", "update_preimage", before.delta_version + 1), (2, "two", "US", "update_postimage", before.delta_version + 1),
    ]


def test_a_column_mapped_table_declares_the_feed_and_writes_cdc_files_by_physical_name(lh, spark):
    from lakehouse_assets import TableOptions

    t = "cdf.mapped"
    first = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(10)]), t, partition_by=["country"],
                     table=TableOptions(properties={"delta.columnMapping.mode": "name"}))
    protocol = DeltaTable(lh.load(t).location()).protocol()
    assert {"columnMapping", "changeDataFeed"} <= set(protocol.writer_features)
    merged = lh.write(people(spark, [(1, "new1", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    v = merged.delta_version
    assert cdc_file_rows(lh, t, v) == lakehouse_changes(lh, t, first.iceberg_snapshot_id) == [
        (1, "n1", "US", "update_preimage", v), (1, "new1", "US", "update_postimage", v),
    ]
    assert lh.verify(t, deep=True)["agree"]


def test_another_engines_iceberg_commits_are_mirrored_with_their_exact_feed(lh, spark):
    """pyiceberg, as another engine, deletes a row (copy-on-write: its file rewritten), overwrites one and appends one;
    the next write mirrors those snapshots to Delta, whose feed then holds exactly those rows, as `changes` does."""
    from pyiceberg.expressions import EqualTo

    t = "cdf.foreign_commits"
    first = lh.write(people(spark, [(i, f"n{i}", "US") for i in range(6)]), t)
    table = lh.load(t)
    schema = table.schema().as_arrow()
    table.delete(EqualTo("id", 3))
    table.overwrite(pa.Table.from_pylist([{"id": 4, "name": "four", "country": "US"}], schema=schema), overwrite_filter=EqualTo("id", 4))
    table.append(pa.Table.from_pylist([{"id": 7, "name": "n7", "country": "US"}], schema=schema))
    later = lh.write(people(spark, [(8, "n8", "US")]), t)
    assert not later.delta_lagging
    changes = assert_feed_equals_changes(lh, t, first)
    assert sorted(c[:4] for c in changes) == [
        (3, "n3", "US", "delete"), (4, "four", "US", "insert"), (4, "n4", "US", "delete"), (7, "n7", "US", "insert"), (8, "n8", "US", "insert"),
    ]


def test_publishing_a_branch_merge_onto_a_moved_main_feeds_exactly_the_merge(lh, spark):
    """Main moved after the branch forked (it emptied another partition, gaining no file the merge was planned without):
    the publish re-applies the branch's merge on main, and that Delta version carries exactly its changed rows."""
    t = "cdf.reapply"
    lh.write(people(spark, [(0, "n0", "US"), (1, "n1", "US"), (4, "n4", "DE")]), t, partition_by=["country"])
    lh.write(people(spark, [(1, "one", "US"), (10, "n10", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]), branch="dev")
    moved = lh.write(people(spark, []), t, mode="overwrite", window=Slice(values={"country": ["DE"]}))  # main moves on
    published = lh.publish(t, "dev")
    assert published.published == "re-applied" and published.delta_version == moved.delta_version + 1
    v = published.delta_version
    assert assert_feed_equals_changes(lh, t, moved) == [
        (1, "n1", "US", "update_preimage", v), (1, "one", "US", "update_postimage", v), (10, "n10", "US", "insert", v),
    ]


def test_orphan_cleanup_removes_the_change_data_of_versions_past_retention_only(lh, spark):
    """As Delta's vacuum: once snapshot expiry moved the retention boundary past a version, its cdc files go with the
    orphan cleanup; the retained versions' cdc files stay, and their feed still reads."""
    import os

    t = "cdf.retention"
    lh.write(people(spark, [(i, f"n{i}", "US") for i in range(6)]), t)
    lh.write(people(spark, [(1, "one", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    old = set(os.listdir(os.path.join(lh.load(t).location().removeprefix("file://"), "_change_data")))
    last = lh.write(people(spark, [(2, "two", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    root = lh.load(t).location().removeprefix("file://")
    kept = set(os.listdir(os.path.join(root, "_change_data"))) - old
    assert old and kept
    assert lh.maintain(t, "orphan_cleanup", orphan_grace_hours=0)["files_removed"] == 0  # every version is still retained
    lh.maintain(t, "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=1)
    cleaned = lh.maintain(t, "orphan_cleanup", orphan_grace_hours=0)
    assert sorted(cleaned["orphan_paths"]) == sorted(f"_change_data/{n}" for n in old) and cleaned["files_removed"] == len(old)
    assert set(os.listdir(os.path.join(root, "_change_data"))) == kept
    assert delta_feed(lh, t, last.delta_version) == [(2, "n2", "US", "update_preimage", last.delta_version), (2, "two", "US", "update_postimage", last.delta_version)]
    deep = lh.verify(t, deep=True)
    assert deep["agree"], deep["differences"]


def cdc_paths(lh, t, version: int) -> list[str]:
    """The cdc files of one Delta version, from its commit file."""
    import json
    import os

    root = lh.load(t).location().removeprefix("file://")
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line)["cdc"]["path"] for line in f if '"cdc"' in line]


@pytest.mark.smoke  # also on a Spark Connect session (`make connect`), where the rewrite's tasks run in the server
def test_a_merge_writes_its_own_change_data_across_tasks_partitions_and_no_op_updates(lh, spark, monkeypatch):
    """The merge's rewrite writes the feed itself (the upserts' rows by the driver: `-upserts-` files). Every file in a
    task of its own, so a key's old row and its upsert are in different tasks; a key whose row moves to another
    partition is an update; an upsert equal to its row changes nothing."""
    from lakehouse_assets.core.write.merge import tasks as merge_tasks

    monkeypatch.setattr(merge_tasks, "FILES_PER_TASK_GROUP", 1)
    t = "cdf.own"
    lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(6)]), t, partition_by=["country"])
    base = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(6, 12)]), t)  # two files per partition
    batch = spark.createDataFrame(
        [(1, "n1", "US", "u"), (3, "three", "US", "u"), (7, "n7", "DE", "u"), (8, None, None, "D"), (50, "n50", "US", "i")],
        "id long, name string, country string, op string",
    )
    merged = lh.write(batch, t, mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
    v = merged.delta_version
    assert assert_feed_equals_changes(lh, t, base) == [
        (3, "n3", "US", "update_preimage", v), (3, "three", "US", "update_postimage", v),
        (7, "n7", "DE", "update_postimage", v), (7, "n7", "US", "update_preimage", v),
        (8, "n8", "DE", "delete", v), (50, "n50", "US", "insert", v),
    ]
    assert any("-upserts-" in p for p in cdc_paths(lh, t, v))
    assert lh.verify(t, deep=True)["agree"]


def test_a_merge_over_duplicate_keys_leaves_its_feed_to_the_file_comparison(lh, spark):
    """Two old rows of one key, one equal to its upsert: the rewrite's per-task labels cannot be the multiset difference,
    so the merge drops its own change data and the mirror compares the files; the feed is still exact."""
    t = "cdf.duplicates"
    lh.write(people(spark, [(1, "a", "US"), (2, "b", "US")]), t)
    base = lh.write(people(spark, [(1, "a", "US"), (2, "c", "US")]), t)  # an append: keys 1 and 2 twice each
    merged = lh.write(people(spark, [(1, "a", "US"), (2, "d", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    v = merged.delta_version
    assert assert_feed_equals_changes(lh, t, base) == [
        (1, "a", "US", "delete", v), (2, "b", "US", "update_preimage", v), (2, "c", "US", "update_preimage", v),
        (2, "d", "US", "update_postimage", v),
    ]
    assert cdc_paths(lh, t, v) and not any("-upserts-" in p for p in cdc_paths(lh, t, v))
    root = lh.load(t).location().removeprefix("file://")
    import os

    assert sorted(os.listdir(os.path.join(root, "_change_data"))) == sorted(p.split("/")[-1] for p in cdc_paths(lh, t, v))  # its own removed


def test_a_merge_on_composite_keys_compares_rows_as_spark_groups_them(lh, spark):
    """NaN equals NaN, 0.0 equals -0.0, nested values compare whole: an upsert equal to its row changes nothing, as
    `Lakehouse.changes` says."""
    import math

    t = "cdf.composite"
    schema = "id long, kind string, score double, point struct<x:double,y:double>, tags array<string>"
    nan = float("nan")
    base = lh.write(spark.createDataFrame([(1, "a", nan, (1.0, nan), ["x"]), (1, "b", 2.0, (2.0, 2.0), ["y"]), (2, "a", 0.0, None, None)], schema).coalesce(1), t)
    batch = spark.createDataFrame([(1, "a", nan, (1.0, nan), ["x"]), (1, "b", 2.0, (2.0, 3.0), ["y"]), (2, "a", -0.0, None, None)], schema)
    merged = lh.write(batch, t, mode="merge", merge=MergeOptions(keys=["id", "kind"]))
    v = merged.delta_version

    def rows(table: pa.Table) -> list[tuple]:
        return sorted((r["id"], r["kind"], r["point"]["y"], r["_change_type"]) for r in table.to_pylist())

    root = lh.load(t).location()
    feed = pa.table(DeltaTable(root).load_cdf(starting_version=base.delta_version + 1).read_all())
    changes = pa.Table.from_pylist([r.asDict(recursive=True) for r in lh.changes(t, base.iceberg_snapshot_id).collect()])
    assert rows(feed) == rows(changes) == [(1, "b", 2.0, "update_preimage"), (1, "b", 3.0, "update_postimage")]
    assert not any(math.isnan(r["score"]) for r in feed.to_pylist())
    assert any("-upserts-" in p for p in cdc_paths(lh, t, v))


def test_a_merge_that_fails_to_commit_removes_its_change_data_files(lh, spark, monkeypatch):
    """The merge's rewrite wrote its change data files before the commit; a lost Iceberg commit removes them with its
    data files, and a failed rewrite job's sweep finds them by the write's id."""
    import os

    from lakehouse_assets import TableOptions
    from lakehouse_assets.core.errors import CommitError
    from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer
    from lakehouse_assets.core.write.writer import remove_written_files

    t = "cdf.lost"
    lh.write(people(spark, [(i, f"n{i}", "US") for i in range(10)]), t, table=TableOptions(properties={"commit.retry.num-retries": "0"}))
    root = lh.load(t).location().removeprefix("file://")
    real_commit = iceberg_committer.commit_files

    def commit_after_a_concurrent_overwrite(table, adds, removes, summary, *rest, **kwargs):
        monkeypatch.setattr(iceberg_committer, "commit_files", real_commit)
        assert os.listdir(os.path.join(root, "_change_data"))  # the merge's own change data, written before its commit
        lh.write(people(spark, [(1, "other", "US")]), t, mode="overwrite")
        return real_commit(table, adds, removes, summary, *rest, **kwargs)

    monkeypatch.setattr(iceberg_committer, "commit_files", commit_after_a_concurrent_overwrite)
    with pytest.raises(CommitError):
        lh.write(people(spark, [(1, "new1", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    # What is left is the concurrent overwrite's change data, referenced by its Delta version; the merge's is gone.
    assert {f"_change_data/{n}" for n in os.listdir(os.path.join(root, "_change_data"))} == referenced_cdc_files(root)
    assert lh.verify(t, deep=True)["agree"]

    # The sweep of a failed rewrite job: the write's data and change data files go, other writes' files stay.
    for rel in ("data/abc-00001-00000.parquet", "_change_data/cdc-abc-00001-00000.zstd.parquet", "_change_data/cdc-other-00001-00000.zstd.parquet"):
        with open(os.path.join(root, rel), "wb") as f:
            f.write(b"x")
    kept = set(os.listdir(os.path.join(root, "_change_data"))) - {"cdc-abc-00001-00000.zstd.parquet"}
    assert remove_written_files(lh.storage, lh.load(t).location(), "abc") == 2
    assert set(os.listdir(os.path.join(root, "_change_data"))) == kept and not os.path.exists(os.path.join(root, "data/abc-00001-00000.parquet"))


def test_a_small_change_written_without_spark_has_the_rows_the_spark_job_finds(spark):
    """A write without Spark computes its small change's feed in its own process (core/read/arrow_changes.py): the rows
    are those the Spark job's multiset comparison finds, for repeated rows, nulls, -0.0 against 0.0, NaN, decimals and
    timestamps alike (the suite's process has a Spark session, so the function is compared here directly)."""
    import datetime as dt
    import decimal
    import math

    from lakehouse_assets.core.read.arrow_changes import net_changes
    from lakehouse_assets.core.read.changes import _net_changes

    utc = dt.timezone.utc
    ddl = "id long, amount decimal(10,2), at timestamp, ratio double, label string"

    def row(i, amount, ratio, label):
        return {"id": i, "amount": decimal.Decimal(amount), "at": dt.datetime(2024, 1, 1, i % 24, tzinfo=utc), "ratio": ratio, "label": label}

    removed = [row(1, "1.10", -0.0, "a"), row(1, "1.10", -0.0, "a"), row(2, "2.00", math.nan, None), row(3, "3.00", 1.5, "c"), row(4, "4.00", None, "d")]
    added = [row(1, "1.10", 0.0, "a"), row(2, "2.00", math.nan, None), row(3, "3.00", 1.5, "C"), row(5, "5.00", 2.5, "e"), row(5, "5.00", 2.5, "e")]
    arrow_schema = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2)), ("at", pa.timestamp("us", "UTC")), ("ratio", pa.float64()), ("label", pa.string())])

    def comparable(rows) -> list[tuple]:
        def plain(v):  # NaN equal to itself; timestamps as UTC wall-clock times, as Spark's session (UTC) returns them
            if isinstance(v, float) and math.isnan(v):
                return "NaN"
            return v.astimezone(utc).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v

        return sorted((tuple(plain(r[c]) for c in ("id", "amount", "at", "ratio", "label", "_change_type")) for r in rows), key=repr)

    in_process = net_changes(pa.Table.from_pylist(removed, arrow_schema), pa.Table.from_pylist(added, arrow_schema))
    by_spark = _net_changes(spark.createDataFrame(removed, ddl), spark.createDataFrame(added, ddl), []).collect()
    assert comparable(in_process.to_pylist()) == comparable([r.asDict() for r in by_spark])
    assert sorted(r["_change_type"] for r in in_process.to_pylist()) == ["delete", "delete", "delete", "insert", "insert", "insert"]

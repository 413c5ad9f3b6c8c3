"""`Lakehouse.changes`: the rows each commit changed, exactly, reading only the files the commits touched."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from lakehouse_assets import MergeOptions, RetentionError, Slice, SpecError
from lakehouse_assets.cli import cli
from lakehouse_assets.core.read import changes as changes_

from . import foreign_writer as fw

KEYS = ["id", "name", "country", "_change_type"]


def people(spark, rows):
    return spark.createDataFrame(rows, "id long, name string, country string").coalesce(1)


def changed(df) -> list[tuple]:
    return sorted((r["id"], r["name"], r["country"], r["_change_type"]) for r in df.collect())


@pytest.mark.smoke
def test_append_merge_overwrite_and_compaction_change_exactly_their_rows(lh, spark):
    t = "chg.people"
    first = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(6)]), t, partition_by=["country"])
    assert changed(lh.changes(t)) == [(i, f"n{i}", "US" if i % 2 else "DE", "insert") for i in range(6)]

    # A merge: id 1 updated, id 3 deleted, id 10 inserted. The US file is rewritten, but ids 5 (unchanged, in the
    # rewritten file) and every DE row (untouched file) are not changes.
    batch = spark.createDataFrame([(1, "new1", "US", "u"), (3, None, "US", "D"), (10, "n10", "DE", "i")], "id long, name string, country string, op string")
    merged = lh.write(batch, t, mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
    assert changed(lh.changes(t, first.iceberg_snapshot_id)) == [
        (1, "n1", "US", "update_preimage"), (1, "new1", "US", "update_postimage"), (3, "n3", "US", "delete"), (10, "n10", "DE", "insert"),
    ]

    # An overwrite of one partition: only the rows that differ.
    window = Slice(values={"country": ["DE"]})
    replaced = lh.write(people(spark, [(0, "n0", "DE"), (2, "two", "DE"), (12, "n12", "DE")]), t, mode="overwrite", window=window)
    assert changed(lh.changes(t, merged.iceberg_snapshot_id)) == [
        (2, "n2", "DE", "delete"), (2, "two", "DE", "insert"), (4, "n4", "DE", "delete"), (10, "n10", "DE", "delete"), (12, "n12", "DE", "insert"),
    ]

    # Compaction rewrites files with the same rows: no change.
    lh.write(people(spark, [(20, "n20", "US")]), t)
    appended = lh.write(people(spark, [(21, "n21", "US")]), t)
    compacted = lh.maintain(t, "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert lh.changes(t, appended.iceberg_snapshot_id).count() == 0

    # A range is the union of its commits, each row tagged with its commit in both formats.
    df = lh.changes(t, first.iceberg_snapshot_id, replaced.iceberg_snapshot_id)
    assert sorted({(r["_commit_snapshot_id"], r["_commit_version"]) for r in df.collect()}) == sorted(
        {(merged.iceberg_snapshot_id, merged.delta_version), (replaced.iceberg_snapshot_id, replaced.delta_version)}
    )
    assert df.columns == ["id", "name", "country", "_change_type", "_commit_snapshot_id", "_commit_version", "_commit_timestamp"]
    history = {h["iceberg_snapshot_id"]: h["delta_version"] for h in lh.history(t)}
    assert all(history[r["_commit_snapshot_id"]] == r["_commit_version"] for r in df.collect())


def test_a_whole_overwrite_reports_only_the_rows_that_differ(lh, spark):
    t = "chg.overwrite"
    first = lh.write(people(spark, [(1, "a", "US"), (2, "b", "US"), (2, "b", "US")]), t)
    lh.write(people(spark, [(1, "a", "US"), (2, "b", "US"), (3, "c", "DE")]), t, mode="overwrite")
    # Duplicated rows count as rows: one of the two (2, "b") went.
    assert changed(lh.changes(t, first.iceberg_snapshot_id)) == [(2, "b", "US", "delete"), (3, "c", "DE", "insert")]


def test_a_merge_reads_only_the_files_it_rewrote(lh, spark, monkeypatch):
    t = "chg.cost"
    read: list[str] = []
    real = changes_.read_parquet_files

    def spy(spark, uris, *args, **kwargs):  # the real reader, recording which files it is given
        read.extend(uris)
        return real(spark, uris, *args, **kwargs)

    monkeypatch.setattr(changes_, "read_parquet_files", spy)
    for part in range(4):
        lh.write(people(spark, [(part * 100 + i, f"n{i}", "US") for i in range(50)]), t)
    table = lh.load(t)
    before = table.current_snapshot().snapshot_id
    merged = lh.write(people(spark, [(101, "x", "US")]), t, mode="merge", merge=MergeOptions(keys=["id"]))
    assert merged.files_removed == 1
    assert read == []  # the merge's rewrite wrote its Delta change data itself: the mirror read no file
    read.clear()
    df = lh.changes(t, before)
    assert changed(df) == [(101, "n1", "US", "update_preimage"), (101, "x", "US", "update_postimage")]
    # Only the one file the merge removed and the one it added are read, not the table's other four.
    table = lh.load(t)
    live = {task.file.file_path for task in table.scan().plan_files()}
    assert len(read) == 2 and len(live) == 4 and len(set(read) & live) == 1, (read, live)


def test_map_and_nested_columns_compare_whole_rows(lh, spark):
    t = "chg.nested"
    rows = "SELECT id, map('k', id) AS m, named_struct('a', id, 'ts', timestamp_micros(1000000 + id)) AS st, array(id) AS arr FROM range(3)"
    first = lh.write(spark.sql(rows), t)
    batch = spark.sql("SELECT 1L AS id, map('k', 10L) AS m, named_struct('a', 1L, 'ts', timestamp_micros(1000002)) AS st, array(1L) AS arr")
    lh.write(batch, t, mode="merge", merge=MergeOptions(keys=["id"]))
    got = sorted((r["id"], r["m"]["k"], r["st"]["ts"].microsecond, r["_change_type"]) for r in lh.changes(t, first.iceberg_snapshot_id).collect())
    # The timestamps differ in one microsecond only: still an update.
    assert got == [(1, 1, 1, "update_preimage"), (1, 10, 2, "update_postimage")]


def test_ranges_outside_the_retained_history_are_refused(lh, spark):
    t = "chg.range"
    first = lh.write(people(spark, [(1, "a", "US")]), t)
    second = lh.write(people(spark, [(2, "b", "US")]), t)
    with pytest.raises(RetentionError, match=r"Table chg\.range: changes since snapshot 42 cannot be read: that snapshot is not in the table's retained history"):
        lh.changes(t, 42)
    with pytest.raises(RetentionError, match=r"Table chg\.range has no snapshot 43"):
        lh.changes(t, None, 43)
    with pytest.raises(SpecError, match=r"is not an ancestor of snapshot .*give the older one first"):
        lh.changes(t, second.iceberg_snapshot_id, first.iceberg_snapshot_id)
    assert lh.changes(t, second.iceberg_snapshot_id).count() == 0


def test_another_engines_delete_files_delete_rows_and_applying_them_changes_nothing(lh, spark):
    import pyarrow as pa

    t = "chg.foreign"
    lh.write(people(spark, [(i, f"n{i}", "US") for i in range(4)]), t)
    table = lh.load(t)
    fw.commit_deletes(table, [fw.position_deletes(table, fw.data_files(table)[0], [1])])  # id 1
    deleted_at = lh.load(t).current_snapshot().snapshot_id
    table = lh.load(t)
    fw.commit_deletes(table, [fw.equality_deletes(table, pa.table({"id": pa.array([2], pa.int64())}))])  # id 2
    second = lh.load(t).current_snapshot().snapshot_id
    df = lh.changes(t)
    assert changed(df) == sorted([(0, "n0", "US", "insert"), (1, "n1", "US", "insert"), (1, "n1", "US", "delete"), (2, "n2", "US", "insert"),
                                  (2, "n2", "US", "delete"), (3, "n3", "US", "insert")])
    assert {r["id"]: r["_commit_snapshot_id"] for r in df.collect() if r["_change_type"] == "delete"} == {1: deleted_at, 2: second}
    # Applying them rewrites the data file without those rows: nothing a reader sees changes.
    lh.repair(t, apply_deletes=True, spark=spark)
    assert lh.changes(t, second).count() == 0
    assert changed(lh.changes(t, deleted_at)) == [(2, "n2", "US", "delete")]
    assert not list(spark.sparkContext._jsc.getPersistentRDDs().values())  # reading changes leaves nothing cached


def test_cli_changes(lh, spark, warehouse):
    t = "chg.cli"
    first = lh.write(people(spark, [(1, "a", "US")]), t)
    lh.write(people(spark, [(2, "b", "US")]), t)
    out = CliRunner().invoke(cli, ["--warehouse", warehouse, "changes", t, "--since", str(first.iceberg_snapshot_id)])
    assert out.exit_code == 0, out.output
    assert f"{t}: insert 1" in out.output and "_change_type" in out.output
    assert changes_.CHANGE_TYPE == "_change_type"

"""Iceberg-primary failure semantics, idempotent retries, and bad input."""

from __future__ import annotations

import logging
import os

import pytest
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyspark.sql import functions as F

from lakehouse_assets import CommitError, CommitOutcomeUnknown, SchemaError, SpecError, TableOptions
from lakehouse_assets.core.errors import CommitConflict
from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer

from .conftest import assert_all_readers_agree, unreadable_delta_log


def small(spark, start=0, n=20):
    return spark.range(start, start + n).select("id", (F.col("id") % 3).cast("string").alias("g"))


def data_files_on_disk(lh, identifier) -> set[str]:
    root = lh.table_location(identifier)[len("file://"):]
    found = set()
    for dirpath, _, names in os.walk(os.path.join(root, "data")):
        found |= {os.path.join(dirpath, n) for n in names if n.endswith(".parquet")}
    return found


def test_delta_failure_keeps_the_write_warns_and_is_repaired(lh, spark, duck, caplog):
    first = lh.write(small(spark), "f.delta_fails")
    with unreadable_delta_log(first.location), caplog.at_level(logging.WARNING, logger="lakehouse"):
        r = lh.write(small(spark, 100), "f.delta_fails")
        assert r.iceberg_snapshot_id is not None and r.rows_written == 20
        assert r.delta_lagging and r.delta_version is None and r.delta_error
        assert any("Delta commit attempt 1 of 2 failed" in m for m in caplog.messages)
        assert any("Delta lags Iceberg" in m for m in caplog.messages)
        assert lh.delta_lag("f.delta_fails") is None  # the log cannot be read: unknown lag, repair needed
    assert lh.delta_lag("f.delta_fails") == 1
    report = lh.verify("f.delta_fails")
    assert not report["agree"] and report["delta_lag_snapshots"] == 1
    assert any("lags Iceberg by 1 snapshot" in d for d in report["differences"])
    repaired = lh.repair("f.delta_fails")
    assert repaired["delta_version"] == first.delta_version + 1 and repaired["repaired"]
    assert lh.repair("f.delta_fails")["repaired"] is False  # idempotent
    assert lh.delta_lag("f.delta_fails") == 0
    assert_all_readers_agree(lh, spark, duck, "f.delta_fails")


def test_next_write_catches_delta_up(lh, spark, duck):
    first = lh.write(small(spark), "f.catch_up")
    with unreadable_delta_log(first.location):
        assert lh.write(small(spark, 100), "f.catch_up").delta_lagging
    r = lh.write(small(spark, 200), "f.catch_up")
    assert not r.delta_lagging and r.delta_version == first.delta_version + 2  # one Delta version per Iceberg snapshot
    assert_all_readers_agree(lh, spark, duck, "f.catch_up")


def test_iceberg_failure_commits_nothing_and_removes_files(lh, spark, monkeypatch):
    lh.write(small(spark), "f.ice_fails", table=TableOptions(properties={"commit.retry.num-retries": "0"}))
    before_snapshot = lh.load("f.ice_fails").current_snapshot().snapshot_id
    before_files = data_files_on_disk(lh, "f.ice_fails")
    real_commit = iceberg_committer.commit_files

    def commit_after_a_concurrent_overwrite(table, adds, removes, summary, *rest, **kw):
        # Another writer replaces the table between our file write and our commit: a real conflict
        # that the catalog rejects, because the files we remove are already gone.
        monkeypatch.setattr(iceberg_committer, "commit_files", real_commit)
        lh.write(small(spark, 500, 5), "f.ice_fails", mode="overwrite")
        return real_commit(table, adds, removes, summary, *rest, **kw)

    monkeypatch.setattr(iceberg_committer, "commit_files", commit_after_a_concurrent_overwrite)
    with pytest.raises(CommitError, match=r"Table f\.ice_fails: the Iceberg commit failed .* nothing was committed and the written files were removed"):
        lh.write(small(spark, 1000), "f.ice_fails", mode="overwrite")
    table = lh.load("f.ice_fails")
    assert table.current_snapshot().snapshot_id != before_snapshot  # only the concurrent writer landed
    assert lh.read(spark, "f.ice_fails").count() == 5
    live = {f.file_path[len("file://"):] for f in iceberg_committer.live_data_files(table)}
    assert data_files_on_disk(lh, "f.ice_fails") - before_files == live  # our files are gone, the winner's remain
    assert lh.verify("f.ice_fails")["agree"]


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_commit_the_catalog_could_not_confirm_that_landed_is_the_write(lh, spark, duck, monkeypatch, mode):
    """A REST catalog answers 500, 502 or 504 to a commit that landed (pyiceberg: CommitStateUnknownException): the
    write finds its snapshot and goes on to Delta, instead of removing files the table now references."""
    lh.write(small(spark), "f.unconfirmed")
    real_commit = iceberg_committer.commit_files

    def commit_then_lose_the_answer(*args, **kw):
        real_commit(*args, **kw)
        raise CommitStateUnknownException("502 Bad Gateway")

    monkeypatch.setattr(iceberg_committer, "commit_files", commit_then_lose_the_answer)
    r = lh.write(small(spark, 100), "f.unconfirmed", mode=mode)
    monkeypatch.undo()
    assert r.rows_written == 20 and not r.delta_lagging
    assert r.iceberg_snapshot_id == lh.load("f.unconfirmed").current_snapshot().snapshot_id
    expected = [(str(i % 3), i) for i in (range(100, 120) if mode == "overwrite" else [*range(20), *range(100, 120)])]
    assert_all_readers_agree(lh, spark, duck, "f.unconfirmed", expected=expected)


def test_a_commit_the_catalog_could_not_confirm_that_did_not_land_keeps_its_files(lh, spark, monkeypatch):
    """The files of a commit whose outcome is unknown and that is not visible are kept (it may still land); the table
    is as it was, and a new table the write created stays for the commit."""
    lh.write(small(spark), "f.unconfirmed")
    before_snapshot, before_files = lh.load("f.unconfirmed").current_snapshot().snapshot_id, data_files_on_disk(lh, "f.unconfirmed")

    def lose_the_request(*args, **kw):
        raise CommitStateUnknownException("504 Gateway Timeout")

    monkeypatch.setattr(iceberg_committer, "commit_files", lose_the_request)
    unknown = (r"the catalog could not confirm the Iceberg commit \(CommitStateUnknownException: 504 Gateway Timeout\), and no new "
               r"snapshot is this commit. The written files are kept, since the commit may still land")
    with pytest.raises(CommitOutcomeUnknown, match=r"Table f\.unconfirmed: " + unknown):
        lh.write(small(spark, 100), "f.unconfirmed")
    with pytest.raises(CommitOutcomeUnknown, match=r"Table f\.unconfirmed_new: " + unknown):
        lh.write(small(spark, 100), "f.unconfirmed_new")
    monkeypatch.undo()
    assert lh.load("f.unconfirmed").current_snapshot().snapshot_id == before_snapshot
    assert len(data_files_on_disk(lh, "f.unconfirmed") - before_files) >= 1  # kept, unreferenced: orphan cleanup's after its grace
    assert lh.read(spark, "f.unconfirmed").count() == 20 and lh.verify("f.unconfirmed")["agree"]
    assert "f.unconfirmed_new" in lh.table_names() and data_files_on_disk(lh, "f.unconfirmed_new")


def test_a_commit_the_catalog_could_not_confirm_is_not_confused_with_a_concurrent_one(lh, spark, monkeypatch):
    """Another writer's snapshot that lands meanwhile, removing the same files, is not taken for this commit."""
    lh.write(small(spark), "f.unconfirmed_race")
    real_commit = iceberg_committer.commit_files

    def another_writer_wins_and_the_answer_is_lost(*args, **kw):
        monkeypatch.setattr(iceberg_committer, "commit_files", real_commit)
        lh.write(small(spark, 500, 5), "f.unconfirmed_race", mode="overwrite")  # removes the same files ours would
        raise CommitStateUnknownException("502 Bad Gateway")

    monkeypatch.setattr(iceberg_committer, "commit_files", another_writer_wins_and_the_answer_is_lost)
    with pytest.raises(CommitOutcomeUnknown, match="no new snapshot is this commit"):
        lh.write(small(spark).limit(0), "f.unconfirmed_race", mode="overwrite")  # removes every file, adds none
    assert lh.read(spark, "f.unconfirmed_race").count() == 5 and lh.verify("f.unconfirmed_race")["agree"]


def test_a_file_the_cleanup_cannot_remove_leaves_the_commit_error_and_the_others_removed(lh, spark, monkeypatch, caplog):
    """Removing a failed commit's files is best effort: one that storage refuses to delete is logged and left to
    orphan cleanup, the rest are removed, and the commit's own error is what the caller gets."""
    # No new attempt after the lost race below: its error is the one to check.
    lh.write(small(spark), "f.cleanup", partition_by=["g"], table=TableOptions(properties={"commit.retry.num-retries": "0"}))
    before = data_files_on_disk(lh, "f.cleanup")
    stuck = []

    def refuse_and_block_one_file(table, adds, removes, summary, *rest, **kw):
        assert len(adds) == 3  # one file per value of g
        stuck.append(adds[0].file_path[len("file://"):])
        os.remove(stuck[0])
        os.makedirs(os.path.join(stuck[0], "in-the-way"))  # a folder where the file was: storage cannot delete it as a file
        raise CommitFailedException("Requirement failed: branch main has changed")

    monkeypatch.setattr(iceberg_committer, "commit_files", refuse_and_block_one_file)
    with caplog.at_level(logging.WARNING, logger="lakehouse"), pytest.raises(CommitConflict, match=r"Table f\.cleanup: the Iceberg commit failed .*nothing was committed and 1 written file\(s\) could not be removed \(e\.g\. file://") as failed:
        lh.write(small(spark, 100), "f.cleanup")
    assert data_files_on_disk(lh, "f.cleanup") == before  # the two other files were removed
    assert stuck[0] in str(failed.value) and "orphan cleanup removes them after its grace period" in str(failed.value)
    assert any("1 written file(s) could not be removed and are left to orphan cleanup, e.g. file://" + stuck[0] in m for m in caplog.messages)


def test_retried_write_with_same_id_commits_once(lh, spark, duck):
    r1 = lh.write(small(spark), "f.idem", write_id="run-42:partition-a")
    r2 = lh.write(small(spark), "f.idem", write_id="run-42:partition-a")
    assert r2.duplicate_of_earlier_write and r2.iceberg_snapshot_id == r1.iceberg_snapshot_id
    assert r2.delta_version == r1.delta_version
    assert len(lh.history("f.idem")) == 1
    assert lh.read(spark, "f.idem").count() == 20
    lh.write(small(spark), "f.idem", write_id="run-42:partition-b")
    assert lh.read(spark, "f.idem").count() == 40
    assert_all_readers_agree(lh, spark, duck, "f.idem")


def _nothing_committed(lh, identifier):
    assert identifier not in lh.table_names()
    assert not os.path.exists(lh.table_location(identifier)[len("file://"):])


def test_unknown_partition_column(lh, spark):
    with pytest.raises(SpecError, match=r"Table f\.bad1: partition column 'nope' \(from 'day\(nope\)'\) is not in the data. Columns are: id, g"):
        lh.write(small(spark), "f.bad1", partition_by=["day(nope)"])
    _nothing_committed(lh, "f.bad1")


def test_transform_the_column_type_does_not_support(lh, spark):
    with pytest.raises(SpecError, match=r"Table f\.bad2: partition transform 'day\(id\)' cannot apply to column 'id' of type long"):
        lh.write(small(spark), "f.bad2", partition_by=["day(id)"])
    _nothing_committed(lh, "f.bad2")


def test_type_neither_format_can_represent(lh, spark):
    df = spark.sql("SELECT id, INTERVAL '1' DAY AS wait FROM range(3)")
    with pytest.raises(SchemaError, match=r"Table f\.bad3: column 'wait' has Spark type interval day"):
        lh.write(df, "f.bad3")
    _nothing_committed(lh, "f.bad3")
    with pytest.raises(SchemaError, match=r"column 'nothing'.*all nulls"):
        lh.write(spark.sql("SELECT id, NULL AS nothing FROM range(3)"), "f.bad3")


def test_incompatible_schema_change_is_refused_before_writing(lh, spark):
    lh.write(small(spark), "f.bad4")
    files = data_files_on_disk(lh, "f.bad4")
    with pytest.raises(SchemaError, match=r"Table f\.bad4: column 'id' is long in the table but string in the data"):
        lh.write(small(spark).select(F.col("id").cast("string").alias("id"), "g"), "f.bad4")
    assert data_files_on_disk(lh, "f.bad4") == files
    with pytest.raises(SpecError, match=r"partitioned by \[\], not \['g'\]"):
        lh.write(small(spark), "f.bad4", partition_by=["g"])


def test_empty_dataframe(lh, spark, duck):
    """Documented: an empty append commits nothing; an empty overwrite empties the table."""
    empty = small(spark).limit(0)
    r = lh.write(empty, "f.empty")
    assert r.iceberg_snapshot_id is None and r.rows_written == 0 and r.files_added == 0
    assert lh.verify("f.empty")["agree"]  # the table exists in both formats, with no rows
    lh.write(small(spark), "f.empty")
    before = len(lh.history("f.empty"))
    r = lh.write(empty, "f.empty")
    assert len(lh.history("f.empty")) == before and r.files_added == 0
    r = lh.write(empty, "f.empty", mode="overwrite")
    assert r.rows_removed == 20 and lh.read(spark, "f.empty").count() == 0
    assert_all_readers_agree(lh, spark, duck, "f.empty", [])

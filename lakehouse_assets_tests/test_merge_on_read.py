"""Merge-on-read writes: merges, CDC deletes and window overwrites remove rows by position, checked against a
copy-on-write twin that gets the same writes (same rows after each, same changes), with no data file rewritten
and one position-delete file per data file that lost rows. Read back with pyiceberg, which applies the deletes."""

from __future__ import annotations

import collections
import datetime as dt
import os
from types import SimpleNamespace

import pytest

from lakehouse_assets import DeleteFilesError, MergeOptions, SpecError, TableOptions, Window
from lakehouse_assets.core.formats.deletes import table_files
from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer
from lakehouse_assets.core.formats.position_deletes import referenced_data_file
from lakehouse_assets.core.formats.snapshot_changes import snapshot_change
from lakehouse_assets.core.properties import SummaryKeys, TableProperties
from lakehouse_assets.core.write.merge import batch as merge_batch

from .conftest import rows_of
from .test_write_modes import events

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

ICEBERG = ("iceberg",)
MOR = {p: TableProperties.MERGE_ON_READ for p in TableProperties.ROW_LEVEL_MODES}
OPS = MergeOptions(keys=["id"], operation_column="op")
SCHEMA = "id long, part string, v string, op string"


def rows(lh, identifier: str) -> list[tuple]:
    """The table's rows as pyiceberg reads them (its scans apply position deletes)."""
    return sorted(tuple(r.values()) for r in lh.load(identifier).scan().to_arrow().to_pylist())


def one_delete_file_per_data_file(lh, identifier: str) -> dict[str, int]:
    """Every live delete file is file-scoped, at most one per data file, naming a live data file; the positions per file."""
    files = table_files(lh.load(identifier))
    per_file = collections.Counter(referenced_data_file(e.data_file) for e in files.deletes)
    assert None not in per_file and set(per_file.values()) <= {1}, per_file
    assert set(per_file) <= {e.data_file.file_path for e in files.data}
    return {referenced_data_file(e.data_file): e.data_file.record_count for e in files.deletes}


def changes(lh, identifier: str, start: int, end: int) -> list[tuple]:
    df = lh.changes(identifier, start, end).drop("_commit_snapshot_id", "_commit_version", "_commit_timestamp")
    return sorted(rows_of(df.collect()))


@pytest.fixture(params=["keys on the driver", "spark"])
def road(request, monkeypatch, spark):
    """Positions found by the pyarrow tasks (a cached small batch's keys on the driver) or by Spark's semi-join."""
    if request.param == "spark":
        monkeypatch.setattr(merge_batch, "KEYS_ON_DRIVER_ROWS", 0)
    cached = []

    def batch(data):
        df = spark.createDataFrame(data, SCHEMA).cache()
        df.count()
        cached.append(df)
        return df

    yield SimpleNamespace(name=request.param, batch=batch)
    for df in cached:
        df.unpersist()


def test_merges_delete_by_position_and_read_as_copy_on_write(lh, spark, road):
    """Several merges (updates, CDC deletes, inserts, a key moving partition, a key deleted then inserted again,
    a row updated twice) give both tables the same rows; the merge-on-read one never removes a data file."""
    mor, cow = "mor.people", "mor.people_cow"
    for name, props in ((mor, MOR), (cow, {})):
        for part in ("a", "b"):  # two files per partition
            for lo in (0, 5):
                start = lo + (10 if part == "b" else 0)
                data = [(i, part, "v0", "u") for i in range(start, start + 5)]
                lh.write(spark.createDataFrame(data, SCHEMA).drop("op"), name, partition_by=["part"], table=TableOptions(formats=ICEBERG, properties=props))
    merges = [
        [(1, "a", "v1", "u"), (6, "a", "v1", "u"), (2, "a", None, "d"), (100, "b", "new", "u")],
        [(1, "a", "v2", "u"), (6, "a", None, "d"), (3, "a", "v1", "u"), (12, "b", "v1", "u"), (999, "a", None, "d")],
        [(2, "a", "back", "u"), (3, "a", None, "d"), (4, "b", "moved", "u"), (100, "b", "new", "u")],
        [(2, "a", None, "d"), (13, "b", None, "d"), (14, "b", None, "d")],
    ]
    deletes_before: dict[str, int] = {}
    for data in merges:
        before = {name: lh.load(name).current_snapshot().snapshot_id for name in (mor, cow)}
        r = lh.write(road.batch(data), mor, mode="merge", merge=OPS)
        lh.write(road.batch(data), cow, mode="merge", merge=OPS)
        assert rows(lh, mor) == rows(lh, cow)
        table = lh.load(mor)
        snap = table.current_snapshot()
        assert snapshot_change(table, snap).removes == []  # no data file rewritten
        summary = snap.summary.additional_properties
        assert summary[SummaryKeys.MERGE_STRATEGY] == "merge-on-read" and summary[SummaryKeys.MERGE_REWRITTEN_FILES] == "0"
        deletes = one_delete_file_per_data_file(lh, mor)
        new = {f: n - deletes_before.get(f, 0) for f, n in deletes.items() if n != deletes_before.get(f)}
        assert summary[SummaryKeys.MERGE_DELETED_FILES] == str(len(new))
        assert summary[SummaryKeys.MERGE_ROWS_DELETED] == str(sum(new.values())) == str(r.rows_removed)
        assert all(n >= deletes_before.get(f, 0) for f, n in deletes.items())  # a union: earlier positions stay deleted
        deletes_before = deletes
        if road.name == "spark":  # the changes read the files whichever road found the positions: one is enough
            assert changes(lh, mor, before[mor], snap.snapshot_id) == changes(lh, cow, before[cow], lh.load(cow).current_snapshot().snapshot_id)
    assert lh.load(cow).current_snapshot().summary[SummaryKeys.MERGE_STRATEGY] == "copy-on-write"


def test_the_next_merge_and_the_delta_mirror_take_a_merges_positions_from_memory(lh, spark, monkeypatch, road):
    """A merge replaces a data file's delete file with the union of its positions and the new ones, and the Delta
    mirror turns each into a vector: neither reads back a delete file this process wrote. Both formats agree."""
    from lakehouse_assets.core.formats import position_deletes

    t = "mor.memory"
    lh.write(spark.createDataFrame([(i, "a", "v0", "u") for i in range(10)], SCHEMA).drop("op"), t, table=TableOptions(properties=MOR))
    reads = []
    original = position_deletes._read
    monkeypatch.setattr(position_deletes, "_read", lambda *a: reads.append(a[1].file_path) or original(*a))
    for data in ([(1, "a", "v1", "u"), (2, "a", None, "d")], [(1, "a", "v2", "u"), (3, "a", None, "d")]):
        lh.write(road.batch(data), t, mode="merge", merge=OPS)
    assert reads == []
    assert rows(lh, t) == [(0, "a", "v0"), (1, "a", "v2"), *[(i, "a", "v0") for i in range(4, 10)]]
    assert lh.verify(t)["agree"] and reads, "the check reads the delete files themselves"


def test_a_window_overwrite_deletes_the_windows_rows_by_position(lh, spark):
    """Unpartitioned: every file straddles the window; its rows inside it are deleted by position, twice over."""
    day2 = Window("event_time", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 3, tzinfo=dt.timezone.utc))
    props = {TableProperties.DELETE_MODE: TableProperties.MERGE_ON_READ}
    for name, p in (("mor.win", props), ("mor.win_cow", {})):
        lh.write(events(spark, 0, 300), name, table=TableOptions(formats=ICEBERG, properties=p))
    straddling = {e.data_file.file_path for e in table_files(lh.load("mor.win")).data}
    for start, dropped in ((10_000, 0), (20_000, 1)):  # the second drops the first's file, wholly inside the window
        replacement = events(spark, start, 300).filter("event_time >= '2024-01-02' AND event_time < '2024-01-03'")
        r = lh.write(replacement, "mor.win", mode="overwrite", window=day2)
        lh.write(replacement, "mor.win_cow", mode="overwrite", window=day2)
        assert rows(lh, "mor.win") == rows(lh, "mor.win_cow")
        assert r.files_removed == dropped and straddling <= {e.data_file.file_path for e in table_files(lh.load("mor.win")).data}
        assert r.rows_removed > 0
        assert set(one_delete_file_per_data_file(lh, "mor.win")) == straddling


def test_a_failed_merge_on_read_write_leaves_no_file(lh, spark, monkeypatch):
    lh.write(spark.createDataFrame([(i, "a", "v0") for i in range(5)], "id long, part string, v string"), "mor.fail",
             table=TableOptions(formats=ICEBERG, properties=MOR))
    lh.write(spark.createDataFrame([(1, "a", "v1", "u")], SCHEMA), "mor.fail", mode="merge", merge=OPS)
    location = lh.load("mor.fail").location()[len("file://"):]
    before = {os.path.join(d, f) for d, _, fs in os.walk(location) for f in fs if "/_iceberg" not in d}

    def refuse(*args, **kwargs):
        raise RuntimeError("the catalog is down")

    monkeypatch.setattr(iceberg_committer, "commit_files", refuse)
    with pytest.raises(Exception, match="the catalog is down"):
        lh.write(spark.createDataFrame([(1, "a", "v2", "u"), (3, "a", None, "d")], SCHEMA), "mor.fail", mode="merge", merge=OPS)
    after = {os.path.join(d, f) for d, _, fs in os.walk(location) for f in fs if "/_iceberg" not in d}
    assert after == before


def test_a_merge_stream_into_a_merge_on_read_table_deletes_by_position(lh, spark, tmp_path):
    from .test_streaming import land, run_stream
    from .test_streaming import rows as stream_rows

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", stream_rows(0, 6))
    land(landing, "1.json", [{"id": 1, "name": "one", "amount": 11, "op": "u"}, {"id": 2, "name": None, "amount": None, "op": "d"}])
    land(landing, "2.json", [{"id": 1, "name": "uno", "amount": 12, "op": "u"}, {"id": 3, "name": None, "amount": None, "op": "d"}])
    sink = lh.stream_writer("mor.stream", "merge", merge=MergeOptions(keys="id", operation_column="op"), table=TableOptions(formats=ICEBERG, properties=MOR))
    run_stream(spark, landing, checkpoint, sink)
    assert [r.rows_removed for r in sink.results] == [0, 2, 2]  # id 1's first version and id 2; its second version and id 3
    got = sorted((r["id"], r["name"], r["amount"]) for r in lh.load("mor.stream").scan().to_arrow().to_pylist())
    assert got == [(0, "n0", 0), (1, "uno", 12), (4, "n4", 40), (5, "n5", 50)]
    table = lh.load("mor.stream")
    assert all(snapshot_change(table, s).removes == [] for s in table.metadata.snapshots)
    one_delete_file_per_data_file(lh, "mor.stream")


def test_the_write_mode_is_set_later_by_alter_and_the_next_merge_follows(lh, spark, warehouse):
    from .test_cli import run

    name = "mor.later"
    lh.write(spark.createDataFrame([(i, "a", "v0") for i in range(4)], "id long, part string, v string"), name, table=TableOptions(formats=ICEBERG))
    r = lh.write(spark.createDataFrame([(1, "a", "v1", "u")], SCHEMA), name, mode="merge", merge=OPS)
    assert r.files_removed == 1  # copy-on-write by default
    out = lh.alter(name, write_mode="Merge-On-Read")
    assert out["write_modes_before"] == {p: "copy-on-write" for p in TableProperties.ROW_LEVEL_MODES}
    assert {p: lh.load(name).properties[p] for p in MOR} == MOR
    r = lh.write(spark.createDataFrame([(2, "a", None, "d")], SCHEMA), name, mode="merge", merge=OPS)
    assert r.files_removed == 0 and r.rows_removed == 1 and len(table_files(lh.load(name)).deletes) == 1
    assert rows(lh, name) == [(0, "a", "v0"), (1, "a", "v1"), (3, "a", "v0")]
    with pytest.raises(SpecError, match=rf"Table {name}: unknown row-level write mode 'fast'; use 'copy-on-write'"):
        lh.alter(name, write_mode="fast")
    assert "write mode copy-on-write" in run("alter", name, "--write-mode", "copy-on-write", warehouse=warehouse).stdout
    assert lh.load(name).properties[TableProperties.MERGE_MODE] == "copy-on-write"
    # Back to copy-on-write: merges refuse the table's own delete files until they are applied, then rewrite as before.
    again = spark.createDataFrame([(3, "a", "v1", "u")], SCHEMA)
    with pytest.raises(DeleteFilesError, match=rf"lakehouse repair {name} --apply-deletes"):
        lh.write(again, name, mode="merge", merge=OPS)
    lh.repair(name, apply_deletes=True)
    assert lh.write(again, name, mode="merge", merge=OPS).files_removed == 1 and table_files(lh.load(name)).deletes == []
    assert rows(lh, name) == [(0, "a", "v0"), (1, "a", "v1"), (3, "a", "v1")]


@pytest.mark.parametrize("road", ["keys on the driver", "spark"])
def test_both_formats_read_merge_on_read_merges_and_feed_their_changes_as_copy_on_write(lh, spark, duck, monkeypatch, road):
    """With Delta on: DuckDB's delta_scan sees the twin's rows after each merge, and the Delta change data feed of
    each merge (written by the merge itself on the driver road, by the mirror from the files on Spark's road) holds
    the twin's rows, row for row."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from lakehouse_assets.core.write.merge import changes as merge_changes

    written = []
    real_finish = merge_changes.finish

    def finish(spec, *args, **kwargs):
        out = real_finish(spec, *args, **kwargs)
        if spec.writer.root_uri.rstrip("/").endswith("/both"):  # the merge-on-read table's, not its twin's rewrite
            written.append(out is not None)
        return out

    monkeypatch.setattr(merge_changes, "finish", finish)
    if road == "spark":
        monkeypatch.setattr(merge_batch, "KEYS_ON_DRIVER_ROWS", 0)
    mor, cow = "mor.both", "mor.both_cow"
    for name, props in ((mor, MOR), (cow, {})):
        lh.write(spark.createDataFrame([(i, "a" if i % 2 else "b", "v0") for i in range(12)], "id long, part string, v string").coalesce(1),
                 name, partition_by=["part"], table=TableOptions(properties=props))

    def feed(name: str, version: int) -> list[tuple]:
        table = pa.table(DeltaTable(lh.load(name).location()).load_cdf(starting_version=version, ending_version=version).read_all())
        return sorted((r["id"], r["part"], r["v"], r["_change_type"]) for r in table.to_pylist())

    for data in ([(1, "a", "v1", "u"), (2, "b", None, "d"), (50, "a", "new", "u")], [(1, "a", "v2", "u"), (3, "a", None, "d"), (4, "a", "moved", "u")]):
        cached = spark.createDataFrame(data, SCHEMA).cache()
        cached.count()
        r = lh.write(cached, mor, mode="merge", merge=OPS)
        t = lh.write(cached, cow, mode="merge", merge=OPS)
        cached.unpersist()
        assert not r.delta_lagging, r.delta_error
        expected = rows(lh, cow)
        assert rows(lh, mor) == expected
        root = lh.load(mor).location().removeprefix("file://")
        assert sorted(duck.execute(f"SELECT id, part, v FROM delta_scan('{root}')").fetchall()) == expected
        assert feed(mor, r.delta_version) == feed(cow, t.delta_version)
    assert written == ([True, True] if road != "spark" else [])
    assert "deletionVectors" in (DeltaTable(lh.load(mor).location()).protocol().reader_features or [])


def test_a_small_merge_matches_writes_and_feeds_in_one_job_unless_its_upserts_are_too_large(lh, spark, monkeypatch):
    """A cached small batch: the positions, the upserts and the Delta change data come from one Spark job, as many
    jobs as the copy-on-write twin's one-job rewrite. Upserts too large to travel with the tasks are written by
    Spark's writer after the matching job. Either way: the twin's rows, and its change data feed row for row."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from lakehouse_assets.core.write.merge import on_read_tasks as merge_on_read_tasks
    from lakehouse_assets.core.write.merge import tasks as merge_tasks

    from .conftest import spark_jobs

    roads = []
    real = merge_on_read_tasks.match_and_write

    def match_and_write(*args, **kwargs):
        out = real(*args, **kwargs)
        roads.append(out.wrote_upserts)
        return out

    monkeypatch.setattr(merge_on_read_tasks, "match_and_write", match_and_write)
    mor, cow = "mor.small", "mor.small_cow"
    for name, props in ((mor, MOR), (cow, {})):
        for lo in (0, 20):  # two files per partition
            data = [(i, "a" if i % 2 else "b", "v0") for i in range(lo, lo + 20)]
            lh.write(spark.createDataFrame(data, "id long, part string, v string").coalesce(1), name, partition_by=["part"], table=TableOptions(properties=props))

    def feed(name: str, version: int) -> list[tuple]:
        table = pa.table(DeltaTable(lh.load(name).location()).load_cdf(starting_version=version, ending_version=version).read_all())
        return sorted((r["id"], r["part"], r["v"], r["_change_type"]) for r in table.to_pylist())

    batches = [[(1, "a", "v1", "u"), (22, "b", None, "d"), (5, "a", "v0", "u"), (50, "a", "new", "u")], [(3, "a", "v2", "u"), (24, "b", None, "d"), (1, "b", "moved", "u")]]
    for i, data in enumerate(batches):
        if i == 1:  # upserts too large to travel: neither on the driver with the batch's rows nor collected
            monkeypatch.setattr(merge_batch, "ROWS_ON_DRIVER_BYTES", 0)
            monkeypatch.setattr(merge_tasks, "UPSERTS_ON_DRIVER_BYTES", 0)
        cached = spark.createDataFrame(data, SCHEMA).cache()
        cached.count()
        jobs = spark_jobs(spark)
        r = lh.write(cached, mor, mode="merge", merge=OPS)
        jobs, twin_jobs = spark_jobs(spark) - jobs, spark_jobs(spark)
        t = lh.write(cached, cow, mode="merge", merge=OPS)
        twin_jobs = spark_jobs(spark) - twin_jobs
        cached.unpersist()
        assert not r.delta_lagging, r.delta_error
        assert rows(lh, mor) == rows(lh, cow)
        assert feed(mor, r.delta_version) == feed(cow, t.delta_version)
        assert r.rows_removed == 3  # the equal upsert of 5 too: its row is replaced by position
        if i == 0:
            assert jobs == twin_jobs, (jobs, twin_jobs)
    assert roads == [True, False]


def test_an_asset_opts_in_by_its_metadata(lh, spark, dagster_resources):
    from dagster import asset, materialize

    batches = [[(i, "a", "v0", "u") for i in range(6)], [(1, "a", "v1", "u"), (2, "a", None, "d")]]

    @asset(key_prefix=["mor"], metadata={"write_mode": "merge", "merge_keys": ["id"], "merge_operation_column": "op", "formats": ["iceberg"], "table_properties": MOR})
    def contacts():
        return spark.createDataFrame(batches.pop(0), SCHEMA)

    for _ in range(2):
        assert materialize([contacts], resources=dagster_resources).success
    table = lh.load("mor.contacts")
    assert table.current_snapshot().summary[SummaryKeys.MERGE_STRATEGY] == "merge-on-read"
    assert snapshot_change(table, table.current_snapshot()).removes == [] and len(table_files(table).deletes) == 1
    assert rows(lh, "mor.contacts") == [(0, "a", "v0"), (1, "a", "v1"), (3, "a", "v0"), (4, "a", "v0"), (5, "a", "v0")]

"""Conformance suite: every catalog x storage combination behaves like the local default.

Combinations (servers start once per session, see servers.py): SeaweedFS S3 + its Iceberg REST
catalog (OAuth2 client credentials), PostgreSQL SQL catalog on SeaweedFS S3 and on a local
warehouse, AWS Glue (moto) on moto's S3, a SQLite SQL catalog and PostgreSQL on Azure Blob Storage
(Azurite). GCS (fake-gcs-server) runs the same operations Iceberg-only in test_clouds.py.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from lakehouse_assets import MergeOptions, TableOptions
from lakehouse_assets.core.read import duckdb_readers

from .conftest import assert_all_readers_agree, rows_of


def events(spark, start: int, n: int):
    return spark.range(start, start + n).select(
        F.col("id"),
        (F.col("id") % 3).cast("string").alias("country"),
        (F.lit("2024-01-01").cast("timestamp") + F.expr("make_interval(0, 0, 0, 0, id % 48, 0, 0)")).alias("event_time"),
        (F.col("id") * 1.5).alias("amount"),
    )


def expected(start: int, n: int):
    import datetime as dt

    return [(i * 1.5, str(i % 3), (dt.datetime(2024, 1, 1) + dt.timedelta(hours=i % 48)).isoformat(), i) for i in range(start, start + n)]


def test_create_append_overwrite_time_travel(backend, spark):
    lh = backend.lakehouse()
    duck = duckdb_readers.connect(lh.storage)
    ident = f"{backend.namespace()}.events"
    created = lh.write(events(spark, 0, 30), ident, partition_by=["country", "day(event_time)"])
    # Under the warehouse, in its stored form (az://c/p is stored as abfss://c@<account>.dfs.core.windows.net/p).
    assert created.location.startswith(lh.warehouse + "/")
    assert created.delta_version == 1  # version 0 creates the Delta table
    appended = lh.write(events(spark, 30, 20), ident)
    assert appended.delta_version == created.delta_version + 1
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 50), duck_formats=backend.duck_formats)
    replaced = lh.write(events(spark, 100, 10), ident, mode="overwrite")
    assert replaced.rows_removed == 50 and replaced.delta_version == appended.delta_version + 1
    assert_all_readers_agree(lh, spark, duck, ident, expected(100, 10), duck_formats=backend.duck_formats)
    # Time travel by Iceberg snapshot and by Delta version land on the same rows.
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 50), snapshot_id=appended.iceberg_snapshot_id, delta_version=appended.delta_version, duck_formats=backend.duck_formats)
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 30), snapshot_id=created.iceberg_snapshot_id, delta_version=created.delta_version, duck_formats=backend.duck_formats)
    history = lh.history(ident)
    assert [h["delta_version"] for h in history] == [replaced.delta_version, appended.delta_version, created.delta_version]
    assert ident in lh.table_names()


@pytest.mark.parametrize(
    "backend,retries",
    # with 0 retries, losers must fail cleanly. Azurite honours If-None-Match: * (test_clouds.py), and GCS's
    # x-goog-if-generation-match: 0 is honoured by fake-gcs-server behind the XML API layer (gcs_xml_api.py),
    # so Delta commits are safe there.
    [("rest-s3", "10"), ("postgres-s3", "10"), ("postgres-s3", "0"), ("postgres-azure", "10"), ("postgres-gcs", "10"), ("postgres-gcs", "0")],
    indirect=["backend"],
)
def test_four_concurrent_writers_land_in_both_formats(backend, retries, spark):
    """Four writers append to one table at once: each write lands in both formats or fails clearly."""
    import json
    import threading

    from deltalake import DeltaTable

    from lakehouse_assets import LakehouseError
    from lakehouse_assets.core.properties import DeltaCommitKeys

    ICEBERG_SNAPSHOT_ID = DeltaCommitKeys.ICEBERG_SNAPSHOT_ID

    lh = backend.lakehouse()
    ident = f"{backend.namespace()}.concurrent"
    first = lh.write(events(spark, 0, 10), ident, table=TableOptions(properties={"commit.retry.num-retries": retries, "commit.retry.min-wait-ms": "50"}))
    results, errors = {}, {}
    barrier = threading.Barrier(4)

    def writer(i: int):
        own = backend.lakehouse()  # its own catalog connection, as a separate process would have
        df = events(spark, 1000 * (i + 1), 10 + i)
        barrier.wait()
        try:
            results[i] = own.write(df, ident)
        except LakehouseError as e:
            errors[i] = e

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors.values():
        assert f"Table {ident}: the Iceberg commit failed" in str(e) and "nothing was committed and the written files were removed" in str(e), e
        assert "Other writers committed first: retry the write, or raise the table property commit.retry.num-retries" in str(e), e
    assert results, f"no concurrent write succeeded: {errors}"
    print(f"concurrent writers: {len(results)} committed, {len(errors)} failed: {[str(e)[:160] for e in errors.values()]}")
    for r in results.values():
        assert not r.delta_lagging, r.delta_error
    expected_rows = 10 + sum(r.rows_written for r in results.values())
    assert sum(r.rows_written for r in results.values()) == sum(10 + i for i in results)
    table = lh.load(ident)
    assert table.scan().to_arrow().num_rows == expected_rows
    delta = DeltaTable(table.location(), storage_options=lh.storage.delta_options(table.location()))
    assert delta.to_pyarrow_table().num_rows == expected_rows
    # No Delta version lost: one version per Iceberg snapshot, each tagged with its own snapshot id.
    assert delta.version() == first.delta_version + len(results)
    mirrored = {int(c[ICEBERG_SNAPSHOT_ID]) for c in delta.history() if ICEBERG_SNAPSHOT_ID in c}
    assert mirrored == {s.snapshot_id for s in table.snapshots()}
    by_snapshot = {int(c[ICEBERG_SNAPSHOT_ID]): c["version"] for c in delta.history() if ICEBERG_SNAPSHOT_ID in c}
    for r in results.values():
        assert by_snapshot[r.iceberg_snapshot_id] == r.delta_version, json.dumps(r.to_dict(), default=str)
    # Failed writers removed their files: every data file on storage is live in both formats.
    from pyarrow.fs import FileSelector, FileType

    fs, root = lh.storage.filesystem(table.location())
    on_storage = {i.path for i in fs.get_file_info(FileSelector(f"{root}/data", recursive=True)) if i.type == FileType.File}
    live = {lh.storage.filesystem(t.file.file_path)[1] for t in table.scan().plan_files()}
    assert on_storage == live, f"{len(errors)} failed writes left files behind: {sorted(on_storage - live)}"
    duck = duckdb_readers.connect(lh.storage)
    assert_all_readers_agree(lh, spark, duck, ident, duck_formats=backend.duck_formats)


def test_merge_on_every_backend(backend, spark, monkeypatch):
    from lakehouse_assets.core.write.merge import tasks as merge_tasks

    lh = backend.lakehouse()
    duck = duckdb_readers.connect(lh.storage)
    ident = f"{backend.namespace()}.merged"
    lh.write(events(spark, 0, 20), ident)
    matched = []  # the small batch's files are matched and rewritten by one job of pyarrow tasks, on every storage
    real = merge_tasks.rewrite_in_one_job
    monkeypatch.setattr(merge_tasks, "rewrite_in_one_job", lambda *a, **k: matched.append(real(*a, **k)) or matched[-1])
    # Update ids 10..19, insert 20..29.
    r = lh.write(events(spark, 10, 20).withColumn("amount", F.col("amount") + 1), ident, mode="merge", merge=MergeOptions(keys=["id"]))
    assert len(matched) == 1 and len(matched[0]) == r.files_removed >= 1
    want = expected(0, 10) + [(a + 1, c, t, i) for a, c, t, i in expected(10, 20)]
    assert r.delta_version is not None and not r.delta_lagging
    assert_all_readers_agree(lh, spark, duck, ident, want, duck_formats=backend.duck_formats)


def test_maintenance_on_every_backend(backend, spark):
    lh = backend.lakehouse()
    duck = duckdb_readers.connect(lh.storage)
    ident = f"{backend.namespace()}.maintained"
    for i in range(4):
        lh.write(events(spark, 10 * i, 10), ident)
    before = rows_of(lh.read(spark, ident).collect())
    # Compaction's pyarrow tasks read and write through the backend's file system (object stores too): the
    # 4 appends' files (one per Spark task each) into one file.
    files_before = len(list(lh.load(ident).scan().plan_files()))
    compacted = lh.maintain(ident, "compaction", spark=spark, compaction_min_input_files=2)
    assert files_before >= 4 and compacted["committed"] and compacted["files_rewritten"] == files_before and compacted["files_added"] == 1, compacted
    assert rows_of(lh.read(spark, ident).collect()) == before
    metadata_before = lh.load(ident).metadata_location
    # No grace period, so orphan removal considers every file (incl. the REST server's metadata/ JSON).
    lh.maintain(ident, "full_maintenance", spark=spark, orphan_grace_hours=0)
    assert rows_of(lh.read(spark, ident).collect()) == before
    # SeaweedFS's REST catalog writes metadata JSON under <table>/metadata/ (it ignores
    # write.metadata.path): a cleanup must not delete it.
    fs, path = lh.storage.filesystem(lh.load(ident).metadata_location)
    assert fs.get_file_info(path).is_file
    assert metadata_before  # the previous metadata may be expired, the current one must exist
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 40), duck_formats=backend.duck_formats)


def test_import_of_a_pyiceberg_table_in_place_on_every_backend(backend, spark):
    """A table another engine (pyiceberg) created and wrote in the backend's catalog and storage is managed in place:
    its Iceberg metadata stays as it is, a Delta log is added over its live files, and a merge keeps both agreeing."""
    import pyarrow as pa
    from deltalake import DeltaTable

    lh = backend.lakehouse()
    duck = duckdb_readers.connect(lh.storage)
    namespace = backend.namespace()
    ident = f"{namespace}.foreign"
    lh.catalog.create_namespace(namespace)
    table = lh.catalog.create_table(ident, schema=pa.schema([("id", pa.int64()), ("name", pa.string())]))
    table.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    before = table.refresh().metadata_location

    report = lh.import_table(ident)

    assert report["source_format"] == "iceberg" and report["rows"] == 3 and report["delta_version"] == 1
    assert lh.load(ident).metadata_location == before
    location = lh.load(ident).location()
    assert DeltaTable(location, storage_options=lh.storage.delta_options(location)).version() == 1
    lh.write(spark.createDataFrame([(2, "changed"), (4, "d")], "id long, name string"), ident, mode="merge", merge=MergeOptions(keys=["id"]))
    want = [(1, "a"), (2, "changed"), (3, "c"), (4, "d")]
    assert_all_readers_agree(lh, spark, duck, ident, want, duck_formats=backend.duck_formats)


@pytest.mark.parametrize("backend", ["postgres-s3", "glue-s3"], indirect=True)
def test_rename_erase_then_drop_keeping_the_files_then_purging_them(backend, spark):
    lh = backend.lakehouse()
    duck = duckdb_readers.connect(lh.storage)
    ns = backend.namespace()
    written = lh.write(events(spark, 0, 12), f"{ns}.events", partition_by=["country"])
    renamed = lh.rename(f"{ns}.events", f"{ns}.events_v2")
    assert renamed["location"] == written.location and f"{ns}.events" not in lh.table_names()
    assert_all_readers_agree(lh, spark, duck, f"{ns}.events_v2", expected(0, 12), duck_formats=backend.duck_formats)
    lh.write(events(spark, 12, 3), f"{ns}.events_v2")  # writes go on under the new name, into the same root
    lh.delete(f"{ns}.events_v2", "id = 13")  # hidden from reads, still in the old file, the feed and the manifests
    assert not lh.prove_erased(f"{ns}.events_v2", "id = 13")["erased"]
    erased = lh.erase(f"{ns}.events_v2", "id = 13")  # on object storage: listing, decoding and deleting through it
    assert erased["proof"]["erased"] and erased["files_deleted"] > 0, erased["proof"]
    assert_all_readers_agree(lh, spark, duck, f"{ns}.events_v2", [r for r in expected(0, 15) if r[3] != 13], duck_formats=backend.duck_formats)

    kept = lh.drop(f"{ns}.events_v2")
    assert f"{ns}.events_v2" not in lh.table_names() and "register_table" in kept["how_to_register_again"]
    lh.catalog.register_table(f"{ns}.events_v2", kept["metadata_location"])  # as the report says: the history comes back
    assert_all_readers_agree(lh, spark, duck, f"{ns}.events_v2", [r for r in expected(0, 15) if r[3] != 13], duck_formats=backend.duck_formats)

    purged = lh.drop(f"{ns}.events_v2", purge=True)
    assert purged["files_removed"] > 0
    fs, path = lh.storage.filesystem(written.location)
    from pyarrow.fs import FileSelector

    assert [f for f in fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True)) if f.is_file] == []

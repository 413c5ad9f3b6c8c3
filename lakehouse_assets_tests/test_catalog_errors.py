"""Troubleshooting: each misconfiguration users hit on object storage and shared catalogs gives an actionable error."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from lakehouse_assets import Lakehouse, MergeOptions, TableOptions
from lakehouse_assets.core.errors import CatalogError, SpecError, TableNotFound
from lakehouse_assets.core.read import duckdb_readers
from lakehouse_assets.core.write.small_writes import COMMITS, WINDOW_SECONDS

from .conftest import assert_all_readers_agree
from .servers import READONLY_ACCESS_KEY, READONLY_SECRET_KEY, SECRET_KEY, free_ports
from .test_failures import data_files_on_disk


def small(spark, start=0, n=10):
    return spark.range(start, start + n).select("id", (F.col("id") % 3).cast("string").alias("g"))


@pytest.mark.parametrize("backend", ["rest-s3", "postgres-s3", "glue-s3"], indirect=True)
def test_reading_a_missing_namespace_names_it(backend, spark):
    lh = backend.lakehouse()
    ns = backend.namespace()
    with pytest.raises(TableNotFound) as info:
        lh.read(spark, f"{ns}.nothing")
    message = str(info.value)
    assert f"Table {ns}.nothing does not exist in catalog" in message
    if backend.id == "glue-s3":
        assert f"The Glue database {ns!r} does not exist in us-east-1: create the Glue database first" in message
        assert "verify the region" in message
    else:
        assert f"Namespace {ns!r} does not exist" in message and "a write creates it" in message


@pytest.mark.parametrize("backend", ["glue-s3"], indirect=True)
def test_glue_in_the_wrong_region_says_so(backend, spark):
    ns = backend.namespace()
    backend.lakehouse().write(small(spark), f"{ns}.t")
    elsewhere = Lakehouse(backend.warehouse, catalog_name="glue", catalog_properties={**backend.catalog_properties, "glue.region": "eu-west-1"})
    with pytest.raises(TableNotFound, match=rf"Glue database '{ns}' does not exist in eu-west-1: create the Glue database first .* verify the region"):
        elsewhere.load(f"{ns}.t")


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_wrong_s3_endpoint_fails_before_any_work(backend, spark, monkeypatch):
    (closed,) = free_ports(1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    lh = backend.lakehouse()
    ns = backend.namespace()
    with pytest.raises(CatalogError, match=rf"Cannot reach the object store for s3://.* \(endpoint http://127.0.0.1:{closed}, region us-east-1\)\. Check AWS_ENDPOINT_URL"):
        lh.write(small(spark), f"{ns}.t")
    assert not lh.catalog.namespace_exists(ns)  # nothing was created


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_access_denied_names_the_permissions_and_hides_the_secret(backend, spark, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-0000")
    lh = backend.lakehouse()
    with pytest.raises(CatalogError) as info:
        lh.write(small(spark), f"{backend.namespace()}.t")
    message = str(info.value)
    assert message.startswith("Access denied to s3://lakehouse-s3/pg")
    assert "s3:ListBucket on the bucket and s3:GetObject, s3:PutObject, s3:DeleteObject" in message
    assert "not-the-secret-0000" not in message and SECRET_KEY not in message


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_credential_without_write_permission(backend, spark, monkeypatch):
    """Valid keys that may list and read but not write: the executors' failure names the missing permission."""
    ident = f"{backend.namespace()}.t"
    before = backend.lakehouse().write(small(spark), ident)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", READONLY_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", READONLY_SECRET_KEY)
    reader = backend.lakehouse()
    assert reader.read(spark, ident).count() == 10  # reading is allowed
    with pytest.raises(CatalogError) as info:
        reader.write(small(spark, 100), ident)
    message = str(info.value)
    assert message.startswith(f"Access denied to {before.location}") and "s3:PutObject" in message
    assert READONLY_SECRET_KEY not in message and SECRET_KEY not in message
    assert reader.load(ident).current_snapshot().snapshot_id == before.iceberg_snapshot_id  # nothing committed


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_missing_bucket(backend, spark):
    lh = Lakehouse("s3://no-such-bucket-here/wh", catalog_name="pg")
    with pytest.raises(CatalogError, match=r"Bucket 'no-such-bucket-here' of s3://no-such-bucket-here/wh does not exist .* Create it"):
        lh.write(small(spark), f"{backend.namespace()}.t")


@pytest.mark.parametrize("backend", ["rest-s3"], indirect=True)
def test_unreachable_rest_catalog(backend, monkeypatch):
    (closed,) = free_ports(1)
    monkeypatch.setenv("PYICEBERG_CATALOG__REST__URI", f"http://127.0.0.1:{closed}")
    with pytest.raises(CatalogError, match=r"Cannot open Iceberg catalog 'rest' \(rest\): .* Check its URI, credentials and region .* PYICEBERG_CATALOG__REST__\*"):
        backend.lakehouse()


@pytest.mark.parametrize("location", ["hdfs://namenode/warehouse", "wasbs://c@a.blob.core.windows.net/w", "r2://bucket/w"])
def test_unknown_uri_scheme(location):
    scheme = location.split("://")[0]
    with pytest.raises(CatalogError, match=rf"uses the URI scheme '{scheme}', which is not supported\. Use one of: file://, s3://, gs://, abfss:// \(also accepted: s3a://, s3n://, gcs://, az://, azure://, abfs://\) or a local path"):
        Lakehouse(location)


@pytest.mark.parametrize("backend", ["rest-s3"], indirect=True)
def test_delta_commit_failing_after_iceberg_on_s3(backend, spark, caplog):
    """A real storage failure of the Delta log on S3: the write lands in Iceberg, warns, and repair catches Delta up."""
    lh = backend.lakehouse()
    ident = f"{backend.namespace()}.delta_fails"
    first = lh.write(small(spark), ident)
    fs, root = lh.storage.filesystem(first.location)
    # An unreadable entry where the next Delta version goes: delta-rs can neither load nor extend the log.
    blocker = f"{root}/_delta_log/{first.delta_version + 1:020d}.json"
    with fs.open_output_stream(blocker) as out:
        out.write(b"{not json")
    with caplog.at_level(logging.WARNING, logger="lakehouse"):
        r = lh.write(small(spark, 100), ident)
    assert r.iceberg_snapshot_id is not None and r.rows_written == 10
    assert r.delta_lagging and r.delta_version is None
    assert any(f"Table {ident}: Iceberg snapshot {r.iceberg_snapshot_id} committed but the Delta commit failed twice" in m for m in caplog.messages)
    assert any(f"`lakehouse repair {ident}`" in m for m in caplog.messages)
    fs.delete_file(blocker)
    report = lh.verify(ident)
    assert not report["agree"] and report["delta_lag_snapshots"] == 1
    assert lh.repair(ident)["delta_version"] == first.delta_version + 1
    assert_all_readers_agree(lh, spark, duckdb_readers.connect(lh.storage), ident)


def test_many_tiny_batches_warn(lh, spark, caplog):
    ident = "tiny.batches"
    props = {COMMITS: "5"}
    with caplog.at_level(logging.WARNING, logger="lakehouse"):
        quiet = [lh.write(pa.table({"id": [i]}), ident, table=TableOptions(properties=props), spark=spark) for i in range(4)]
        loud = lh.write(pa.table({"id": [4]}), ident, spark=spark)
    assert all(not r.warnings for r in quiet)
    (advice,) = loud.warnings
    assert advice.startswith(f"Table {ident}: the last 5 commits came within")
    assert "added 5 rows in 5 files averaging" in advice and "write larger batches less often" in advice
    assert advice in caplog.messages
    # Large files (or a disabled check) stay quiet.
    lh.catalog.load_table(ident).transaction().set_properties({COMMITS: "0"}).commit_transaction()
    assert not lh.write(pa.table({"id": [5]}), ident, spark=spark).warnings


def test_a_small_writes_threshold_that_is_not_a_number_refuses_the_write_before_any_file(lh, spark):
    """The thresholds are read before the write, not after its commit: a bad one used to fail a write that had committed."""
    with pytest.raises(SpecError, match=rf"Table tiny.bad: table property {COMMITS}='many' is not a whole number. Nothing was written"):
        lh.write(pa.table({"id": [1]}), "tiny.bad", table=TableOptions(properties={COMMITS: "many"}), spark=spark)
    assert not lh.catalog.table_exists("tiny.bad")  # the table the refused write created is dropped
    lh.write(pa.table({"id": [1]}), "tiny.bad", spark=spark)
    table = lh.load("tiny.bad")
    before, files = table.current_snapshot().snapshot_id, data_files_on_disk(lh, "tiny.bad")
    table.transaction().set_properties({WINDOW_SECONDS: "1h"}).commit_transaction()  # as another engine might
    with pytest.raises(SpecError, match=rf"table property {WINDOW_SECONDS}='1h' is not a whole number.*or remove it for the default 3600"):
        lh.write(pa.table({"id": [2]}), "tiny.bad", spark=spark)
    table = lh.load("tiny.bad")
    assert table.current_snapshot().snapshot_id == before and data_files_on_disk(lh, "tiny.bad") == files
    table.transaction().set_properties({WINDOW_SECONDS: "7200"}).commit_transaction()
    assert lh.write(pa.table({"id": [2]}), "tiny.bad", spark=spark).rows_written == 1
    assert sorted(lh.read_arrow("tiny.bad")["id"].to_pylist()) == [1, 2]


@pytest.mark.parametrize("value", ["128MB", "0", "-1"])
def test_a_target_file_size_that_is_not_a_positive_size_refuses_writes_and_merges_before_any_file(lh, spark, value):
    lh.write(small(spark), "sized.t", spark=spark)
    table = lh.load("sized.t")
    before, files = table.current_snapshot().snapshot_id, data_files_on_disk(lh, "sized.t")
    table.transaction().set_properties({"write.target-file-size-bytes": value}).commit_transaction()  # as another engine might
    refusal = rf"Table sized.t: table property write.target-file-size-bytes='{value}' is not a file size: set it to a positive number of bytes"
    with pytest.raises(SpecError, match=refusal):
        lh.write(small(spark, 10), "sized.t", spark=spark)
    with pytest.raises(SpecError, match=refusal):
        lh.write(small(spark, 5), "sized.t", mode="merge", merge=MergeOptions(keys=["id"]), spark=spark)
    table = lh.load("sized.t")
    assert table.current_snapshot().snapshot_id == before and data_files_on_disk(lh, "sized.t") == files


def test_catalog_picked_by_name_from_env_set_after_import(tmp_path, monkeypatch):
    """pyiceberg caches its environment at import; our catalog lookup re-reads it."""
    import pyiceberg.catalog  # noqa: F401 - imported before the variables exist

    for k in [k for k in __import__("os").environ if k.startswith("PYICEBERG_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # no .pyiceberg.yaml there
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    default = Lakehouse(str(tmp_path / "wh1"))
    assert default.catalog.name == "lakehouse" and default.catalog.properties["uri"] == f"sqlite:///{tmp_path}/wh1/catalog.db"
    monkeypatch.setenv("LAKEHOUSE_CATALOG", "later")
    monkeypatch.setenv("PYICEBERG_CATALOG__LATER__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__LATER__URI", f"sqlite:///{tmp_path}/elsewhere.db")
    configured = Lakehouse(str(tmp_path / "wh2"))
    assert configured.catalog.name == "later" and configured.catalog.properties["uri"] == f"sqlite:///{tmp_path}/elsewhere.db"
    # Object storage without a configured catalog is refused with the way out.
    monkeypatch.delenv("LAKEHOUSE_CATALOG")
    with pytest.raises(CatalogError, match=r"on object storage but no catalog named 'lakehouse' is configured.*PYICEBERG_CATALOG__LAKEHOUSE__TYPE=rest"):
        Lakehouse("s3://bucket/wh")


def test_a_commit_refused_by_a_locked_sqlite_catalog_leaves_the_table_unchanged(lh, spark, warehouse, duck):
    """Another process reading catalog.db (an unfinished SELECT holds SQLite's shared lock) refuses every commit.
    The write fails naming the lock, and nothing of it survives: SQLite keeps a COMMIT refused as "database is
    locked" open, so a pooled connection would otherwise show (and a later commit would keep) the failed snapshot."""
    import glob
    import sqlite3

    from lakehouse_assets.core.errors import CommitError

    lh.write(small(spark), "lock.t")
    before = lh.load("lock.t").current_snapshot().snapshot_id
    files_before = sorted(glob.glob(f"{warehouse}/lock/t/data/**/*.parquet", recursive=True))
    reader = sqlite3.connect(f"{warehouse}/catalog.db", isolation_level=None)
    cursor = reader.execute("SELECT * FROM iceberg_tables, (SELECT 1 UNION ALL SELECT 2)")
    cursor.fetchone()  # the statement stays active: a shared lock until it is closed
    try:
        with pytest.raises(CommitError, match=r"(?s)Table lock\.t: .*database is locked.*holds a lock on the SQLite catalog"):
            lh.write(small(spark, 10), "lock.t")
        assert lh.load("lock.t").current_snapshot().snapshot_id == before
    finally:
        cursor.close()
        reader.close()
    assert sorted(glob.glob(f"{warehouse}/lock/t/data/**/*.parquet", recursive=True)) == files_before
    lh.write(small(spark, 20), "lock.t")
    assert_all_readers_agree(lh, spark, duck, "lock.t", [(str(i % 3), i) for i in [*range(10), *range(20, 30)]])

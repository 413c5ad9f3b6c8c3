"""GCS and Azure warehouses against their emulators: what each store honours, GCS conformance, cloud errors.

Azure (Azurite >= 3.37) runs the full catalog x storage conformance suite in test_catalogs.py (backends
`sqlite-azure`, `postgres-azure`). GCS (fake-gcs-server) runs the same operations here Iceberg-only,
because the emulator cannot take delta-rs's writes (pinned below, so this file notices when it can).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from lakehouse_assets import Lakehouse
from lakehouse_assets.core.errors import CatalogError
from lakehouse_assets.core.storage import StorageConfig

from .conftest import rows_of
from .servers import (  # noqa: F401 - fixtures
    AZURE_ACCOUNT,
    AZURE_CONTAINER,
    AZURE_KEY,
    GCS_BACKEND_IDS,
    GCS_BUCKET,
    azurite,
    backend,
    fake_gcs,
    postgres,
    servers_dir,
)
from .test_catalogs import events, expected


def _azure_storage(azurite, **kw) -> StorageConfig:
    return StorageConfig(azure_account_name=AZURE_ACCOUNT, azure_account_key=AZURE_KEY, azure_endpoint_url=azurite.urls["endpoint"], **kw)


# ---------------------------------------------------------------- what each emulator honours


def test_azurite_conditional_create_keeps_every_concurrent_delta_commit(azurite):
    """Eight delta-rs writers, each holding the table at version 0, commit at once.

    delta-rs writes a commit with `If-None-Match: *`; a loser gets 409, re-reads the log and commits the next
    version. A store that ignored the condition would let losers overwrite winners' log entries silently
    (measured once by hand through an ad-hoc proxy to fake-gcs-server's media upload, which ignores
    ifGenerationMatch: 8 writers, 0 errors, 2 files left)."""
    from deltalake import DeltaTable, Field, Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    storage = _azure_storage(azurite)
    uri = f"abfss://{AZURE_CONTAINER}@{AZURE_ACCOUNT}.dfs.core.windows.net/race-{uuid.uuid4().hex[:8]}"
    options = storage.delta_options(uri)
    schema = Schema([Field("x", "long", nullable=True)])
    create_table_with_add_actions(uri, schema, [], mode="error", storage_options=options)
    writers = 8
    handles = [DeltaTable(uri, storage_options=options) for _ in range(writers)]
    barrier, errors = threading.Barrier(writers), []

    def commit(i: int):
        barrier.wait()
        try:
            handles[i].create_write_transaction([AddAction(f"f{i}.parquet", 1, {}, 1, True, None)], mode="append", schema=schema)
        except Exception as e:  # noqa: BLE001 - a clean failure is allowed, a silent loss is not
            errors.append(e)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = DeltaTable(uri, storage_options=options)
    files = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
    assert files == {f"f{i}.parquet" for i in range(writers)}, f"lost commits: {errors}"
    assert not errors and table.version() == writers


def test_azurite_lists_from_an_offset(azurite):
    """delta-rs lists the log from the last known version (List Blobs `startFrom`): Azurite < 3.37 ignored it and
    every commit after version 1 failed with 'Invalid table version: 1'."""
    from deltalake import DeltaTable, Field, Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    storage = _azure_storage(azurite)
    uri = f"abfss://{AZURE_CONTAINER}@{AZURE_ACCOUNT}.dfs.core.windows.net/offset-{uuid.uuid4().hex[:8]}"
    options = storage.delta_options(uri)
    schema = Schema([Field("x", "long", nullable=True)])
    create_table_with_add_actions(uri, schema, [], mode="error", storage_options=options)
    for i in range(3):
        DeltaTable(uri, storage_options=options).create_write_transaction([AddAction(f"f{i}.parquet", 1, {}, 1, True, None)], mode="append", schema=schema)
    assert DeltaTable(uri, storage_options=options).version() == 3


def _gcs_upload(endpoint: str, name: str, body: bytes, upload_type: str) -> int:
    """One upload to fake-gcs-server's JSON API with ifGenerationMatch=0 (create only if absent); the HTTP status."""
    if upload_type == "media":
        url = f"{endpoint}/upload/storage/v1/b/{GCS_BUCKET}/o?uploadType=media&name={name}&ifGenerationMatch=0"
        request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/octet-stream"})
    else:
        meta = json.dumps({"name": name}).encode()
        payload = b"--B\r\nContent-Type: application/json\r\n\r\n" + meta + b"\r\n--B\r\nContent-Type: application/octet-stream\r\n\r\n" + body + b"\r\n--B--\r\n"
        url = f"{endpoint}/upload/storage/v1/b/{GCS_BUCKET}/o?uploadType=multipart&ifGenerationMatch=0"
        request = urllib.request.Request(url, data=payload, method="POST", headers={"Content-Type": "multipart/related; boundary=B"})
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code


def test_fake_gcs_server_facts_delta_rs_depends_on(fake_gcs):
    """Why GCS tables are tested Iceberg-only here. delta-rs (Rust object_store) writes the Delta log through
    GCS's XML API (`PUT /bucket/object` + `x-goog-if-generation-match: 0`) and lists it with `start-after`.
    fake-gcs-server: XML uploads -> 400 'invalid uploadType' (not implemented); `start-after` is ignored;
    ifGenerationMatch=0 is honoured by JSON multipart uploads but not by JSON media uploads. Real GCS does all
    of these. When this test fails, the emulator changed: move GCS into BACKEND_IDS."""
    from deltalake import write_deltalake

    endpoint = fake_gcs.urls["endpoint"]
    storage = StorageConfig(gcs_endpoint_url=endpoint)
    uri = f"gs://{GCS_BUCKET}/delta-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception) as info:
        write_deltalake(uri, pa.table({"x": [1]}), storage_options=storage.delta_options(uri))
    assert "invalid uploadType" in str(info.value), info.value

    name = f"facts-{uuid.uuid4().hex[:8]}"
    assert _gcs_upload(endpoint, f"{name}-m", b"1", "multipart") == 200
    assert _gcs_upload(endpoint, f"{name}-m", b"2", "multipart") == 412  # honoured
    assert _gcs_upload(endpoint, f"{name}-x", b"1", "media") == 200
    assert _gcs_upload(endpoint, f"{name}-x", b"2", "media") == 200  # ignored: the object was overwritten

    listing = urllib.request.urlopen(f"{endpoint}/{GCS_BUCKET}?list-type=2&prefix={name}&start-after={name}-m", timeout=10).read().decode()
    assert f"<Key>{name}-m</Key>" in listing  # start-after ignored: a real store would list only {name}-x


# ---------------------------------------------------------------- GCS conformance (Iceberg side)


@pytest.mark.parametrize("backend", GCS_BACKEND_IDS, indirect=True)
def test_gcs_create_append_overwrite_merge_time_travel_maintenance(backend, spark):
    """The conformance operations on a gs:// warehouse, Iceberg-only, read back by pyiceberg and the Spark reader."""
    lh = backend.lakehouse()
    ident = f"{backend.namespace()}.events"

    def readers(snapshot_id=None) -> list[tuple]:
        table = lh.load(ident)
        cols = sorted(f.name for f in table.schema().fields)
        pyiceberg_rows = rows_of(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), cols)
        spark_rows = rows_of(lh.read(spark, ident, snapshot_id=snapshot_id).collect(), cols)
        assert pyiceberg_rows == spark_rows
        return pyiceberg_rows

    iceberg_only = ["iceberg"]
    created = lh.write(events(spark, 0, 30), ident, partition_by=["country", "day(event_time)"], formats=iceberg_only)
    assert created.location.startswith(backend.warehouse) and created.delta_version is None
    appended = lh.write(events(spark, 30, 20), ident, formats=iceberg_only)
    assert readers() == sorted(expected(0, 50), key=repr)
    replaced = lh.write(events(spark, 100, 10), ident, mode="overwrite", formats=iceberg_only)
    assert replaced.rows_removed == 50 and readers() == sorted(expected(100, 10), key=repr)
    assert readers(appended.iceberg_snapshot_id) == sorted(expected(0, 50), key=repr)
    assert readers(created.iceberg_snapshot_id) == sorted(expected(0, 30), key=repr)
    merged = lh.write(events(spark, 105, 10).withColumn("amount", F.col("amount") + 1), ident, mode="merge", merge_keys=["id"], formats=iceberg_only)
    want = expected(100, 5) + [(a + 1, c, t, i) for a, c, t, i in expected(105, 10)]
    assert merged.iceberg_snapshot_id and readers() == sorted(want, key=repr)
    lh.maintain(ident, "full_maintenance", spark=spark, orphan_grace_hours=0)
    assert readers() == sorted(want, key=repr)
    # Files the expired snapshots needed are gone from the bucket; every live file is still there.
    from pyarrow.fs import FileSelector, FileType

    table = lh.load(ident)
    fs, root = lh.storage.filesystem(table.location())
    on_storage = {i.path for i in fs.get_file_info(FileSelector(f"{root}/data", recursive=True)) if i.type == FileType.File}
    live = {lh.storage.filesystem(t.file.file_path)[1] for t in table.scan().plan_files()}
    assert live <= on_storage
    assert ident in lh.table_names()


# ---------------------------------------------------------------- clear errors for common mistakes


def test_gcs_missing_bucket(fake_gcs, spark, tmp_path):
    storage = StorageConfig(gcs_endpoint_url=fake_gcs.urls["endpoint"])
    lh = Lakehouse("gs://no-such-bucket/wh", storage=storage, catalog_name="c", catalog_properties={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db"})
    with pytest.raises(CatalogError) as info:
        lh.write(events(spark, 0, 3), "ns.t")
    assert str(info.value).startswith("Bucket 'no-such-bucket' of gs://no-such-bucket/wh does not exist (endpoint http://127.0.0.1:")
    assert "Create it, or fix the warehouse URI or the endpoint." in str(info.value)


def test_gcs_without_credentials_or_emulator(spark, tmp_path, monkeypatch):
    """gs:// with neither Google credentials nor STORAGE_EMULATOR_HOST (this machine has no GCP metadata server)."""
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "CLOUD_STORAGE_EMULATOR_ENDPOINT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))  # no gcloud user credentials either
    lh = Lakehouse("gs://some-bucket/wh", storage=StorageConfig.from_env(), catalog_name="c", catalog_properties={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db"})
    with pytest.raises(CatalogError) as info:
        lh.write(events(spark, 0, 3), "ns.t")
    message = str(info.value)
    assert message.startswith("No Google credentials for gs://some-bucket/wh (endpoint storage.googleapis.com): set GOOGLE_APPLICATION_CREDENTIALS")
    assert "STORAGE_EMULATOR_HOST" in message


def test_azure_missing_container(azurite, spark, tmp_path):
    lh = Lakehouse("az://no-such-container/wh", storage=_azure_storage(azurite), catalog_name="c", catalog_properties={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db"})
    assert lh.warehouse == f"abfss://no-such-container@{AZURE_ACCOUNT}.dfs.core.windows.net/wh"
    with pytest.raises(CatalogError) as info:
        lh.write(events(spark, 0, 3), "ns.t")
    assert str(info.value).startswith(f"Container 'no-such-container' of {lh.warehouse} does not exist (account {AZURE_ACCOUNT}, endpoint http://127.0.0.1:")


def test_azure_wrong_key_names_the_permissions_and_hides_the_key(azurite, spark, tmp_path):
    wrong = "d3Jvbmcta2V5LWZvci1henVyaXRlLTEyMzQ1Ng=="
    storage = StorageConfig(azure_account_name=AZURE_ACCOUNT, azure_account_key=wrong, azure_endpoint_url=azurite.urls["endpoint"])
    lh = Lakehouse(f"az://{AZURE_CONTAINER}/wrong-key", storage=storage, catalog_name="c", catalog_properties={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db"})
    with pytest.raises(CatalogError) as info:
        lh.write(events(spark, 0, 3), "ns.t")
    message = str(info.value)
    assert message.startswith(f"Access denied to abfss://{AZURE_CONTAINER}@{AZURE_ACCOUNT}.dfs.core.windows.net/wrong-key (account {AZURE_ACCOUNT}")
    assert "AZURE_STORAGE_ACCOUNT_KEY" in message and "Storage Blob Data Contributor" in message
    assert wrong not in message and AZURE_KEY not in message


def test_azure_uri_without_an_account(monkeypatch):
    for k in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(CatalogError) as info:
        Lakehouse("az://lakehouse/wh", storage=StorageConfig.from_env())
    message = str(info.value)
    assert message.startswith("Warehouse abfss://lakehouse/wh: no Azure storage account is configured.")
    assert "abfss://<container>@<account>.dfs.core.windows.net/<path>" in message and "AZURE_STORAGE_ACCOUNT_NAME" in message


def test_azure_account_in_uri_and_config_must_agree():
    storage = StorageConfig(azure_account_name="other")
    with pytest.raises(CatalogError) as info:
        storage.for_warehouse(f"abfss://c@{AZURE_ACCOUNT}.dfs.core.windows.net/wh")
    assert f"names the Azure storage account {AZURE_ACCOUNT!r} but the configuration names 'other'" in str(info.value)


def test_cloud_warehouse_without_a_catalog(monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    monkeypatch.setenv("PYICEBERG_HOME", "/nonexistent")
    for k in list(__import__("os").environ):
        if k.startswith("PYICEBERG_CATALOG__"):
            monkeypatch.delenv(k)
    with pytest.raises(CatalogError) as info:
        Lakehouse("gs://bucket/wh", storage=StorageConfig(gcs_endpoint_url="http://127.0.0.1:1"))
    assert "Warehouse gs://bucket/wh is on object storage but no catalog named 'lakehouse' is configured" in str(info.value)


def test_uri_spellings_are_stored_in_one_form():
    storage = StorageConfig(azure_account_name="acct")
    assert storage.for_warehouse("gcs://b/wh/")[0] == "gs://b/wh"
    for spelling in ("az://c/wh", "azure://c/wh", "abfs://c/wh", "abfss://c/wh", "abfss://c@acct.dfs.core.windows.net/wh"):
        assert storage.for_warehouse(spelling)[0] == "abfss://c@acct.dfs.core.windows.net/wh", spelling
    fs, path = storage.filesystem("abfss://c@acct.dfs.core.windows.net/wh/t/data/x.parquet")
    assert path == "c/wh/t/data/x.parquet" and type(fs).__name__ == "AzureFileSystem"

"""GCS and Azure warehouses against their emulators: what each store honours, GCS conformance, cloud errors.

Azure (Azurite >= 3.37) and GCS (fake-gcs-server behind the XML API layer delta-rs needs, gcs_xml_api.py)
run the full catalog x storage conformance suite in test_catalogs.py (backends `sqlite-azure`,
`postgres-azure`, `sqlite-gcs`, `postgres-gcs`), both formats. Here: what each emulator honours, the
layer tested on its own, GCS maintenance down to the bucket, and clear errors for common mistakes.
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

from lakehouse_assets import Lakehouse, MergeOptions
from lakehouse_assets.core.errors import CatalogError
from lakehouse_assets.core.io.storage import StorageConfig

from .conftest import rows_of
from .servers import AZURE_ACCOUNT, AZURE_CONTAINER, AZURE_KEY, GCS_BACKEND_IDS, GCS_BUCKET
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


def test_fake_gcs_server_lacks_what_delta_rs_needs(fake_gcs):
    """Why the suite puts a layer in front of fake-gcs-server. delta-rs (Rust object_store) writes the Delta log
    through GCS's XML API (`PUT /bucket/object` + `x-goog-if-generation-match: 0`) and lists it with
    `start-after`. fake-gcs-server alone: XML uploads -> 400 'invalid uploadType'; `start-after` is ignored;
    ifGenerationMatch=0 is honoured by JSON multipart uploads (which the layer uses) but not by media uploads.
    When this test fails, the emulator changed: the layer may shrink."""
    endpoint = fake_gcs.urls["endpoint"]
    host = fake_gcs.urls["emulator"].split("//")[1]  # fake-gcs-server answers as the host its links name
    name = f"facts-{uuid.uuid4().hex[:8]}"
    xml_upload = urllib.request.Request(
        f"{endpoint}/{GCS_BUCKET}/{name}-xml", data=b"1", method="PUT", headers={"Host": host, "x-goog-if-generation-match": "0"}
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(xml_upload, timeout=10)
    assert info.value.code == 400 and "invalid uploadType" in info.value.read().decode()

    assert _gcs_upload(endpoint, f"{name}-m", b"1", "multipart") == 200
    assert _gcs_upload(endpoint, f"{name}-m", b"2", "multipart") == 412  # honoured
    assert _gcs_upload(endpoint, f"{name}-x", b"1", "media") == 200
    assert _gcs_upload(endpoint, f"{name}-x", b"2", "media") == 200  # ignored: the object was overwritten

    listing_request = urllib.request.Request(f"{endpoint}/{GCS_BUCKET}?list-type=2&prefix={name}&start-after={name}-m", headers={"Host": host})
    listing = urllib.request.urlopen(listing_request, timeout=10).read().decode()
    assert f"<Key>{name}-m</Key>" in listing  # start-after ignored: a real store would list only {name}-x


def _xml_put(endpoint: str, name: str, body: bytes, create_only: bool) -> int:
    headers = {"Content-Type": "application/octet-stream", **({"x-goog-if-generation-match": "0"} if create_only else {})}
    request = urllib.request.Request(f"{endpoint}/{GCS_BUCKET}/{name}", data=body, method="PUT", headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code


def test_gcs_xml_api_layer_creates_only_if_absent_lists_after_and_round_trips(fake_gcs):
    endpoint = fake_gcs.urls["emulator"]
    name = f"layer-{uuid.uuid4().hex[:8]}"
    # A planted race: eight writers create the same object at once; exactly one wins, the others get 412.
    statuses, barrier = [], threading.Barrier(8)

    def create(i: int) -> None:
        barrier.wait()
        statuses.append(_xml_put(endpoint, f"{name}/commit.json", f"writer {i}".encode(), create_only=True))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(statuses) == [200] + [412] * 7
    winner = urllib.request.urlopen(f"{endpoint}/{GCS_BUCKET}/{name}/commit.json", timeout=10)
    assert winner.read().startswith(b"writer ") and winner.headers["x-goog-generation"] and winner.headers["ETag"]
    assert _xml_put(endpoint, f"{name}/commit.json", b"overwrite", create_only=False) == 200  # an unconditional PUT overwrites
    # Ranged reads, and listings that honour start-after (the Delta log is listed from a version on).
    request = urllib.request.Request(f"{endpoint}/{GCS_BUCKET}/{name}/commit.json", headers={"Range": "bytes=1-3"})
    ranged = urllib.request.urlopen(request, timeout=10)
    assert ranged.status == 206 and ranged.read() == b"ver"
    for i in range(4):
        assert _xml_put(endpoint, f"{name}/log/{i:020d}.json", b"{}", create_only=True) == 200
    listing = urllib.request.urlopen(
        f"{endpoint}/{GCS_BUCKET}?list-type=2&prefix={name}/log/&start-after={name}/log/{1:020d}.json", timeout=10
    ).read().decode()
    assert [f"{name}/log/{i:020d}.json" for i in (2, 3)] == [k.split("</Key>")[0] for k in listing.split("<Key>")[1:]]
    listing = urllib.request.urlopen(f"{endpoint}/{GCS_BUCKET}?list-type=2&prefix={name}/&delimiter=/", timeout=10).read().decode()
    assert f"<Prefix>{name}/log/</Prefix>" in listing and f"<Key>{name}/commit.json</Key>" in listing


def test_two_delta_writers_of_one_version_on_gcs_one_wins(fake_gcs):
    """delta-rs itself, through the layer: two writers that read the same version both commit the next one;
    exactly one lands, the other gets delta-rs's CommitFailedError (the precondition failure), nothing is lost."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.transaction import CommitProperties

    storage = StorageConfig(gcs_endpoint_url=fake_gcs.urls["emulator"])
    uri = f"gs://{GCS_BUCKET}/race-{uuid.uuid4().hex[:8]}"
    options = storage.delta_options(uri)
    write_deltalake(uri, pa.table({"x": [0]}), storage_options=options)
    readers = [DeltaTable(uri, storage_options=options) for _ in range(2)]
    outcomes, barrier = [], threading.Barrier(2)

    def commit(table, value: int) -> None:
        barrier.wait()
        try:
            write_deltalake(table, pa.table({"x": [value]}), mode="append", commit_properties=CommitProperties(max_commit_retries=0))
            outcomes.append("committed")
        except Exception as e:  # noqa: BLE001 - the loser's error is what is checked
            outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=commit, args=(t, v)) for t, v in zip(readers, (1, 2))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(outcomes) == ["CommitFailedError", "committed"]
    final = DeltaTable(uri, storage_options=options)
    assert final.version() == 1 and len(final.to_pyarrow_table()) == 2


# ---------------------------------------------------------------- GCS: maintenance down to the bucket


@pytest.mark.parametrize("backend", GCS_BACKEND_IDS, indirect=True)
def test_gcs_create_append_overwrite_merge_time_travel_maintenance(backend, spark):
    """The conformance operations on a gs:// warehouse in both formats, read back by pyiceberg, the Spark reader of
    both formats and delta-rs; after full maintenance only what retained snapshots need is left in the bucket."""
    lh = backend.lakehouse()
    ident = f"{backend.namespace()}.events"

    def readers(snapshot_id=None) -> list[tuple]:
        table = lh.load(ident)
        cols = sorted(f.name for f in table.schema().fields)
        pyiceberg_rows = rows_of(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), cols)
        spark_rows = rows_of(lh.read(spark, ident, snapshot_id=snapshot_id).collect(), cols)
        assert pyiceberg_rows == spark_rows
        if snapshot_id is None:  # the Delta side: the Spark reader of the Delta log and delta-rs
            from deltalake import DeltaTable

            delta = DeltaTable(table.location(), storage_options=lh.storage.delta_options(table.location()))
            assert rows_of(lh.read(spark, ident, delta_version=delta.version()).collect(), cols) == pyiceberg_rows
            assert rows_of(delta.to_pyarrow_table().to_pylist(), cols) == pyiceberg_rows
            report = lh.verify(ident)
            assert report["agree"], report["differences"]
        return pyiceberg_rows

    created = lh.write(events(spark, 0, 30), ident, partition_by=["country", "day(event_time)"])
    assert created.location.startswith(backend.warehouse) and created.delta_version is not None
    appended = lh.write(events(spark, 30, 20), ident)
    assert readers() == sorted(expected(0, 50), key=repr)
    replaced = lh.write(events(spark, 100, 10), ident, mode="overwrite")
    assert replaced.rows_removed == 50 and readers() == sorted(expected(100, 10), key=repr)
    assert readers(appended.iceberg_snapshot_id) == sorted(expected(0, 50), key=repr)
    assert readers(created.iceberg_snapshot_id) == sorted(expected(0, 30), key=repr)
    merged = lh.write(events(spark, 105, 10).withColumn("amount", F.col("amount") + 1), ident, mode="merge", merge=MergeOptions(keys=["id"]))
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
    assert any("/_delta_log/" in i.path for i in fs.get_file_info(FileSelector(root, recursive=True)))  # the log is never cleaned away
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

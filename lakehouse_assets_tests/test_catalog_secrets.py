"""Credentials never end up in logs, Dagster metadata or event logs, table properties, snapshot summaries or the logs on storage."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from dagster import DagsterInstance, EnvVar, asset, materialize
from dagster._serdes import serialize_value
from dagster_aws.s3 import S3Resource
from dagster_pyspark import PySparkResource

from lakehouse_assets import Lakehouse
from lakehouse_assets.core.io.storage import StorageConfig
from lakehouse_assets.dagster.checks import build_formats_agree_checks
from lakehouse_assets.dagster.io_manager import LakehouseIOManager
from lakehouse_assets.dagster.resources import LakehouseResource

from .servers import ACCESS_KEY, AZURE_KEY, REGION, SECRET_KEY

# S3 key pair and the Azurite account key (GCS has no credential of ours: Application Default Credentials
# are read by each library from the environment, and the emulator runs unauthenticated).
SECRETS = [SECRET_KEY.encode(), ACCESS_KEY.encode(), AZURE_KEY.encode()]


def _leaks(blob: bytes | str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [s.decode() for s in SECRETS if s in data]


def _materialize_twice_and_check_dagster(lakehouse: LakehouseResource, ns: str, tmp_path, caplog, capfd) -> None:
    """A create and an append through the IO manager; nothing Dagster keeps or anything prints holds a secret."""

    @asset(key_prefix=[ns], metadata={"partition_by": ["g"]})
    def secret_probe(pyspark: PySparkResource):
        from pyspark.sql import functions as F

        return pyspark.spark_session.range(50).select("id", (F.col("id") % 4).cast("string").alias("g"))

    pyspark = PySparkResource(spark_config={})
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with caplog.at_level(logging.DEBUG):
        with DagsterInstance.from_config(str(home)) as instance:
            for _ in range(2):  # a create and an append
                result = materialize(
                    [secret_probe, *build_formats_agree_checks([secret_probe.key])],
                    resources={"io_manager": LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark), "lakehouse": lakehouse, "pyspark": pyspark},
                    instance=instance,
                )
                assert result.success
                # Dagster's event log and run records, including materialization and check metadata.
                for record in instance.all_logs(result.run_id):
                    assert not _leaks(serialize_value(record)), record
                assert not _leaks(serialize_value(instance.get_run_by_id(result.run_id)))
            (materialization,) = [e.materialization for e in result.get_asset_materialization_events()]
            assert materialization.metadata["delta_version"].value == 2  # version 0 creates the Delta table
    # Everything on disk under the Dagster home (SQLite event logs, compute logs).
    for path in Path(home).rglob("*"):
        if path.is_file():
            assert not _leaks(path.read_bytes()), path
    # Every Python log record and everything printed (Spark, pyiceberg, delta-rs, Dagster).
    assert not _leaks(caplog.text)
    out, err = capfd.readouterr()
    assert not _leaks(out) and not _leaks(err)


def _check_table_and_storage(lh: Lakehouse, ident: str) -> None:
    """Table properties, snapshot summaries and every object of the table on the object store."""
    from pyarrow.fs import FileSelector, FileType

    table = lh.load(ident)
    assert not _leaks(repr(dict(table.properties)))
    for snap in table.snapshots():
        assert not _leaks(repr(snap.summary))
    # Iceberg metadata JSON, manifest lists, manifests, Delta log (commitInfo) and checkpoints, data files.
    fs, root = lh.storage.filesystem(table.location())
    objects = [i for i in fs.get_file_info(FileSelector(root, recursive=True)) if i.type == FileType.File]
    kinds = {o.path.rsplit(".", 1)[-1] for o in objects}
    assert {"json", "avro", "parquet"} <= kinds, kinds
    assert any("/_delta_log/" in o.path for o in objects) and any("metadata.json" in o.path for o in objects)
    for o in objects:
        with fs.open_input_stream(o.path) as f:
            assert not _leaks(f.read()), o.path
    # Neither does a repr of the storage configuration.
    assert not _leaks(repr(lh.storage))


@pytest.mark.parametrize("backend", ["rest-s3"], indirect=True)
def test_credentials_are_written_nowhere(backend, spark, tmp_path, monkeypatch, caplog, capfd):
    # Dagster gets the S3 credentials from EnvVars through dagster-aws's S3Resource, not from AWS_*.
    monkeypatch.setenv("LKH_TEST_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("LKH_TEST_SECRET", SECRET_KEY)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    ns = backend.namespace()
    s3 = S3Resource(endpoint_url=backend.server.urls["s3"], region_name=REGION, aws_access_key_id=EnvVar("LKH_TEST_KEY_ID"), aws_secret_access_key=EnvVar("LKH_TEST_SECRET"))
    _materialize_twice_and_check_dagster(LakehouseResource(warehouse=backend.warehouse, s3=s3), ns, tmp_path, caplog, capfd)
    # Outside a run EnvVars are not resolved: inspect with explicit credentials.
    lh = Lakehouse(backend.warehouse, storage=StorageConfig.from_env(access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY))
    _check_table_and_storage(lh, f"{ns}.secret_probe")


@pytest.mark.parametrize("backend", ["sqlite-azure"], indirect=True)
def test_azure_account_key_is_written_nowhere(backend, spark, tmp_path, monkeypatch, caplog, capfd):
    """The Azure account key given as a Dagster EnvVar on the lakehouse resource (not AZURE_STORAGE_ACCOUNT_KEY)."""
    monkeypatch.setenv("LKH_TEST_AZURE_KEY", AZURE_KEY)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
    ns = backend.namespace()
    lakehouse = LakehouseResource(
        warehouse=backend.warehouse,
        catalog_name=backend.catalog_name,
        catalog_properties=backend.catalog_properties,
        azure_account_key=EnvVar("LKH_TEST_AZURE_KEY"),
    )
    _materialize_twice_and_check_dagster(lakehouse, ns, tmp_path, caplog, capfd)
    lh = Lakehouse(
        backend.warehouse, catalog_name=backend.catalog_name, catalog_properties=backend.catalog_properties, storage=StorageConfig.from_env(azure_account_key=AZURE_KEY)
    )
    _check_table_and_storage(lh, f"{ns}.secret_probe")

"""The Delta side registered in AWS Glue (moto), next to the Iceberg table, for Athena, EMR and Spectrum.

A registered table gets a Glue entry `<namespace>.<name>_delta` of `table_type=DELTA` at the table root with the
current columns, created by the first write and kept in sync by schema evolution and `alter`; a Glue failure never
fails the write (a warning), `verify` lists an entry out of sync and `repair` registers it again. The Delta log the
entry points at is read back with delta-rs, the way Athena resolves a Delta table through Glue.
"""

from __future__ import annotations

import os

import boto3
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import functions as F

from lakehouse_assets import GlueDeltaRegistration, Lakehouse, TableOptions

from .servers import ACCESS_KEY, REGION, SECRET_KEY, glue_backend

MAPPED = TableOptions(properties={"delta.columnMapping.mode": "name"})


@pytest.fixture
def aws(moto, monkeypatch):  # noqa: F811
    """moto as AWS (Glue and S3), through the standard environment variables only."""
    for k in list(os.environ):
        if k.startswith(("PYICEBERG_", "AWS_")) or k == "LAKEHOUSE_CATALOG":
            monkeypatch.delenv(k)
    backend = glue_backend(moto)
    for k, v in backend.env.items():
        monkeypatch.setenv(k, v)
    glue = boto3.client("glue", endpoint_url=moto.urls["endpoint"], region_name=REGION, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    return backend, glue


def _glue_lakehouse(backend, **kw) -> Lakehouse:
    """Iceberg in Glue (the suite's Glue backend) and the Delta side registered next to it."""
    return backend.lakehouse(delta_glue=GlueDeltaRegistration(**kw))


def _entry(glue, database: str, name: str) -> dict:
    return glue.get_table(DatabaseName=database, Name=name)["Table"]


def _columns(entry: dict) -> list[tuple[str, str]]:
    return [(c["Name"], c["Type"]) for c in entry["StorageDescriptor"]["Columns"]]


def _delta_rows_through_glue(lh, entry: dict) -> list[dict]:
    """What an engine that resolves the table through Glue reads: the Delta log at the entry's location."""
    location = entry["StorageDescriptor"]["Location"]
    dt = DeltaTable(location, storage_options=lh.storage.delta_options(location))
    rows = QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()  # column-mapped tables too
    return sorted(pa.table(rows).to_pylist(), key=lambda r: r["id"])


def test_first_write_registers_the_delta_side_and_schema_changes_follow(aws, spark):
    backend, glue = aws
    lh = _glue_lakehouse(backend)
    ns = backend.namespace()
    result = lh.write(spark.range(3).select("id", F.col("id").cast("string").alias("name")), f"{ns}.events", table=MAPPED)
    assert result.warnings == []
    delta = _entry(glue, ns, "events_delta")
    assert delta["Parameters"]["table_type"] == "DELTA" and delta["Parameters"]["spark.sql.sources.provider"] == "delta"
    assert delta["Parameters"]["lakehouse.iceberg-table"] == f"{ns}.events"
    assert delta["StorageDescriptor"]["Location"] == result.location.rstrip("/")
    assert delta["StorageDescriptor"]["SerdeInfo"]["Parameters"]["path"] == result.location.rstrip("/")
    assert _columns(delta) == [("id", "bigint"), ("name", "string")]
    assert _entry(glue, ns, "events")["Parameters"]["table_type"] == "ICEBERG"  # the Iceberg entry, untouched
    assert _delta_rows_through_glue(lh, delta) == [{"id": i, "name": str(i)} for i in range(3)]

    # Schema evolution: the new column reaches Glue with the write.
    lh.write(spark.range(3, 5).select("id", F.col("id").cast("string").alias("name"), (F.col("id") * 1.5).alias("amount")), f"{ns}.events")
    assert _columns(_entry(glue, ns, "events_delta")) == [("id", "bigint"), ("name", "string"), ("amount", "double")]

    # `alter`: a rename and a drop reach Glue with the metadata-only Delta version.
    lh.alter(f"{ns}.events", rename={"name": "label"}, drop=["amount"])
    delta = _entry(glue, ns, "events_delta")
    assert _columns(delta) == [("id", "bigint"), ("label", "string")]
    assert _delta_rows_through_glue(lh, delta) == [{"id": i, "label": str(i)} for i in range(5)]
    assert lh.verify(f"{ns}.events")["agree"]


def test_the_name_is_chosen_per_resource_and_per_table(aws, spark):
    backend, glue = aws
    ns = backend.namespace()
    lh = _glue_lakehouse(backend, database=f"{ns}_athena", name_suffix="_dl")
    lh.write(spark.range(2), f"{ns}.orders")  # the registration's database (created) and suffix
    assert _columns(_entry(glue, f"{ns}_athena", "orders_dl")) == [("id", "bigint")]
    lh.write(spark.range(2), f"{ns}.customers", table=TableOptions(properties={"lakehouse.delta.glue-name": f"{ns}_bi.customers_v2"}))
    assert _entry(glue, f"{ns}_bi", "customers_v2")["Parameters"]["table_type"] == "DELTA"
    lh.write(spark.range(2), f"{ns}.scratch", table=TableOptions(properties={"lakehouse.delta.glue-name": "none"}))
    assert [t["Name"] for t in glue.get_tables(DatabaseName=f"{ns}_athena")["TableList"]] == ["orders_dl"]


def test_a_table_property_alone_registers_it_with_any_iceberg_catalog(aws, spark, tmp_path):
    """An embedded SQLite catalog, no registration configured: the property registers the table with boto3's defaults."""
    backend, glue = aws
    ns = backend.namespace()
    lh = Lakehouse(str(tmp_path / "warehouse"))
    result = lh.write(spark.range(4), f"{ns}.clicks", table=TableOptions(properties={"lakehouse.delta.glue-name": f"{ns}_delta.clicks"}))
    entry = _entry(glue, f"{ns}_delta", "clicks")
    assert entry["StorageDescriptor"]["Location"] == result.location.rstrip("/")
    assert [r["id"] for r in _delta_rows_through_glue(lh, entry)] == [0, 1, 2, 3]
    lh.write(spark.range(1), f"{ns}.plain")  # no property, no registration: Glue is never asked
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        glue.get_database(Name=ns)


def test_a_glue_failure_is_a_warning_verify_reports_it_and_repair_registers_again(aws, spark):
    backend, glue = aws
    lh = _glue_lakehouse(backend)
    ns = backend.namespace()
    ident = f"{ns}.events"
    lh.write(spark.range(2), ident)
    glue.delete_table(DatabaseName=ns, Name="events_delta")  # someone removed it (or an earlier registration failed)
    report = lh.verify(ident)
    assert not report["agree"] and any("events_delta for the Delta side is missing" in d for d in report["differences"])
    repaired = lh.repair(ident)
    assert repaired["repaired"] and repaired["delta_glue_action"] == "created"
    assert lh.verify(ident)["agree"]

    # A name that belongs to another Glue table (here the Iceberg table itself) is never overwritten: the write
    # commits to both formats and warns; verify says why.
    clash = f"{ns}.clash"
    result = lh.write(spark.range(2), clash, table=TableOptions(properties={"lakehouse.delta.glue-name": f"{ns}.clash"}))
    assert result.delta_version == 1 and not result.delta_lagging
    assert any("is a table of table_type ICEBERG that this project did not register" in w for w in result.warnings)
    assert _entry(glue, ns, "clash")["Parameters"]["table_type"] == "ICEBERG"
    assert lh.load(clash).current_snapshot() is not None
    assert any("Choose another name" in d for d in lh.verify(clash)["differences"])


def test_the_dagster_resource_takes_the_registration(aws, tmp_path):
    from lakehouse_assets.dagster.resources import LakehouseResource

    resource = LakehouseResource(warehouse=str(tmp_path / "warehouse"), delta_glue={"database": "analytics", "name_suffix": "_dl"})
    assert resource.get().context.delta_glue == GlueDeltaRegistration(database="analytics", name_suffix="_dl")


def test_the_cli_takes_the_registration_from_the_environment(aws, spark, tmp_path, monkeypatch):
    """LAKEHOUSE_DELTA_GLUE (JSON) configures every process, the CLI's `verify` and `repair` included."""
    import json

    from click.testing import CliRunner

    from lakehouse_assets.cli import cli

    backend, glue = aws
    ns = backend.namespace()
    warehouse = str(tmp_path / "warehouse")
    monkeypatch.setenv("LAKEHOUSE_DELTA_GLUE", json.dumps({"database": f"{ns}_athena", "name_suffix": "_cli"}))
    Lakehouse(warehouse).write(spark.range(2), f"{ns}.visits")
    glue.delete_table(DatabaseName=f"{ns}_athena", Name="visits_cli")
    verified = CliRunner().invoke(cli, ["--warehouse", warehouse, "verify", f"{ns}.visits", "--json"])
    assert f"Glue entry {ns}_athena.visits_cli for the Delta side is missing" in verified.output
    repaired = CliRunner().invoke(cli, ["--warehouse", warehouse, "repair", f"{ns}.visits", "--json"])
    assert repaired.exit_code == 0, repaired.output
    assert json.loads(repaired.output)["delta_glue_action"] == "created"
    assert _columns(_entry(glue, f"{ns}_athena", "visits_cli")) == [("id", "bigint")]

    monkeypatch.setenv("LAKEHOUSE_DELTA_GLUE", "_delta")
    with pytest.raises(Exception, match="LAKEHOUSE_DELTA_GLUE='_delta' is not a Glue registration"):
        Lakehouse(warehouse)


def test_rename_and_drop_move_and_remove_the_delta_entry(aws, spark):
    backend, glue = aws
    lh = _glue_lakehouse(backend)
    ns = backend.namespace()
    lh.write(spark.range(3), f"{ns}.visits")
    assert _entry(glue, ns, "visits_delta")["Parameters"]["lakehouse.iceberg-table"] == f"{ns}.visits"
    lh.rename(f"{ns}.visits", f"{ns}.sessions")
    names = {t["Name"] for t in glue.get_tables(DatabaseName=ns)["TableList"]}
    assert "visits_delta" not in names and "visits" not in names
    moved = _entry(glue, ns, "sessions_delta")
    assert moved["Parameters"]["lakehouse.iceberg-table"] == f"{ns}.sessions"
    assert [r["id"] for r in _delta_rows_through_glue(lh, moved)] == [0, 1, 2]
    assert lh.drop(f"{ns}.sessions")["glue_entry_removed"] == "removed"
    assert {t["Name"] for t in glue.get_tables(DatabaseName=ns)["TableList"]} == set()

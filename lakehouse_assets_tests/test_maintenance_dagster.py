"""The maintenance job, schedule and sensors, evaluated with Dagster's own test contexts, plus the CLI
and a launch through Dagster's GraphQL API."""

from __future__ import annotations

import datetime as dt
import json
import os
import time

import pytest
from click.testing import CliRunner
from dagster import AssetKey, DagsterInstance, DagsterInvalidConfigError, RunRequest, SkipReason, build_schedule_context, build_sensor_context, validate_run_config
from deltalake import DeltaTable
from pyspark.sql import functions as F

from lakehouse_assets.cli import cli
from lakehouse_assets.core import maintenance
from lakehouse_assets.dagster.io_manager import table_identifier
from lakehouse_assets.dagster.maintenance import (
    JOB_NAME,
    OP_NAME,
    asset_key_for_table,
    compaction_sensor,
    delta_checkpoint_sensor,
    delta_lag_sensor,
    lakehouse_maintenance_job,
    nightly_maintenance_schedule,
)
from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

from .conftest import assert_all_readers_agree, unreadable_delta_log


def batch(spark, start, n=10):
    return spark.range(start, start + n).select("id", (F.col("id") % 2).cast("string").alias("g"))


@pytest.fixture
def resource(warehouse, lh):
    return LakehouseResource(warehouse=warehouse)


def run_job(resource, spark, run_config):
    return lakehouse_maintenance_job.execute_in_process(run_config=run_config, resources={"lakehouse": resource, "pyspark": spark_resource()})


def test_job_contract_and_config_validation():
    assert lakehouse_maintenance_job.name == JOB_NAME == "lakehouse_maintenance_job"
    assert [n.name for n in lakehouse_maintenance_job.nodes] == [OP_NAME] == ["lakehouse_maintenance"]
    ok = {"ops": {OP_NAME: {"config": {"tables": ["a.b"], "operations": ["compaction", "snapshot_expiry"], "dry_run": True, "snapshot_retention_days": 3}}}}
    assert validate_run_config(lakehouse_maintenance_job, ok)["ops"][OP_NAME]["config"]["operations"] == ["compaction", "snapshot_expiry"]
    defaults = validate_run_config(lakehouse_maintenance_job, {})["ops"][OP_NAME]["config"]
    assert defaults["tables"] == [] and defaults["operations"] == ["full_maintenance"] and defaults["dry_run"] is False
    with pytest.raises(DagsterInvalidConfigError, match=r"operations\[0\] not in enum type MaintenanceOperation got vacuum"):
        validate_run_config(lakehouse_maintenance_job, {"ops": {OP_NAME: {"config": {"operations": ["vacuum"]}}}})
    for identifier in ("demo.events", "a.b.c"):
        assert table_identifier(asset_key_for_table(identifier)) == identifier


def test_job_runs_operations_and_reports_observations(lh, spark, duck, resource):
    for start in range(0, 40, 10):
        lh.write(batch(spark, start), "dm.events", partition_by=["g"])
    lh.write(batch(spark, 0), "dm.other")
    result = run_job(resource, spark, {"ops": {OP_NAME: {"config": {"tables": ["dm.events"], "operations": ["compaction", "snapshot_expiry"], "snapshot_retention_days": 0, "min_snapshots_to_keep": 1}}}})
    assert result.success
    observations = result.asset_observations_for_node(OP_NAME)
    assert [o.asset_key for o in observations] == [AssetKey(["dm", "events"])] * 2
    compaction, expiry = (o.metadata for o in observations)
    assert compaction["operation"].value == "compaction" and compaction["files_rewritten"].value == 8 and compaction["files_added"].value == 2
    assert compaction["small_file_count"].value == 2 and compaction["compactable_file_count"].value == 0
    assert expiry["snapshots_expired"].value == 4 and expiry["snapshot_count"].value == 1
    assert expiry["files_removed"].value == 8 and expiry["bytes_reclaimed"].value > 0
    assert expiry["delta_log_length"].value == 6 and expiry["delta_version"].value == 5
    assert_all_readers_agree(lh, spark, duck, "dm.events")
    # Empty tables = every table; a dry run changes nothing.
    before = lh.load("dm.other").metadata_location
    dry = run_job(resource, spark, {"ops": {OP_NAME: {"config": {"dry_run": True}}}})
    assert dry.success and {o.asset_key for o in dry.asset_observations_for_node(OP_NAME)} == {AssetKey(["dm", "events"]), AssetKey(["dm", "other"])}
    assert lh.load("dm.other").metadata_location == before


def test_nightly_schedule_requests_full_maintenance_of_every_table():
    context = build_schedule_context(scheduled_execution_time=dt.datetime(2026, 1, 2, 3, 0, tzinfo=dt.timezone.utc))
    request = nightly_maintenance_schedule(context)
    assert isinstance(request, RunRequest)
    config = request.run_config["ops"][OP_NAME]["config"]
    assert config["tables"] == [] and config["operations"] == ["full_maintenance"] and config["dry_run"] is False
    validate_run_config(lakehouse_maintenance_job, request.run_config)
    assert nightly_maintenance_schedule.cron_schedule == "0 3 * * *"


def test_compaction_sensor_requests_compaction_past_the_threshold(lh, spark, resource):
    # Small writes are planned into one task, so partitioning by `g` is what gives each write two files.
    lh.write(batch(spark, 0), "dm.few", partition_by=["g"])  # two small files from one write: below the thresholds
    with build_sensor_context(resources={"lakehouse": resource}) as context:
        assert isinstance(compaction_sensor(context), SkipReason)
    for start in range(10, 70, 10):  # six writes of two files: 12 small files, 100% of the table
        lh.write(batch(spark, start), "dm.many", partition_by=["g"])
    with build_sensor_context(resources={"lakehouse": resource}) as context:
        requests = compaction_sensor(context)
    tables = {r.run_config["ops"][OP_NAME]["config"]["tables"][0]: r for r in requests}
    assert set(tables) == {"dm.many"}
    request = tables["dm.many"]
    assert request.run_config["ops"][OP_NAME]["config"]["operations"] == ["compaction"]
    assert request.run_key == f"compaction:dm.many:{lh.load('dm.many').current_snapshot().snapshot_id}"
    validate_run_config(lakehouse_maintenance_job, request.run_config)
    # After the requested run, the table no longer crosses the threshold.
    for r in requests:
        assert run_job(resource, spark, r.run_config).success
    with build_sensor_context(resources={"lakehouse": resource}) as context:
        assert isinstance(compaction_sensor(context), SkipReason)


def test_delta_lag_sensor_requests_repair_and_the_run_repairs(lh, spark, duck, resource):
    first = lh.write(batch(spark, 0), "dm.lag")
    with build_sensor_context(resources={"lakehouse": resource}) as context:
        assert isinstance(delta_lag_sensor(context), SkipReason)
    with unreadable_delta_log(first.location):
        assert lh.write(batch(spark, 10), "dm.lag").delta_lagging
    with build_sensor_context(resources={"lakehouse": resource}) as context:
        requests = delta_lag_sensor(context)
    assert len(requests) == 1 and requests[0].run_config["ops"][OP_NAME]["config"] == {"tables": ["dm.lag"], "operations": ["repair"], "dry_run": False}
    assert run_job(resource, spark, requests[0].run_config).success
    assert_all_readers_agree(lh, spark, duck, "dm.lag", [(str(i % 2), i) for i in range(20)])
    assert lh.verify("dm.lag")["delta_lag_snapshots"] == 0
    with build_sensor_context(resources={"lakehouse": resource}) as context:
        assert isinstance(delta_lag_sensor(context), SkipReason)


def test_delta_checkpoint_sensor_requests_a_checkpoint_at_the_tables_interval_and_writes_write_none(lh, spark, resource):
    """A checkpoint walks every live file: no write writes one; the sensor asks maintenance once the table's
    delta.checkpointInterval (10 here) commits have landed since the last one."""
    import pyarrow as pa

    def requested() -> list:
        with build_sensor_context(resources={"lakehouse": resource}) as context:
            result = delta_checkpoint_sensor(context)
        return [] if isinstance(result, SkipReason) else [r for r in result if r.run_config["ops"][OP_NAME]["config"]["tables"] == ["dm.cp"]]

    for i in range(8):  # the table's creation is a version too: 9 commits
        lh.write(pa.table({"id": [i]}), "dm.cp")
    assert maintenance.delta_log_stats(lh.context, lh.load("dm.cp"))["delta_commits_since_checkpoint"] == 9
    assert requested() == []
    lh.write(pa.table({"id": [8]}), "dm.cp")
    log = lh.table_location("dm.cp").removeprefix("file://") + "/_delta_log"
    assert not [n for n in os.listdir(log) if ".checkpoint." in n], "a write wrote a checkpoint"
    requests = requested()
    assert len(requests) == 1 and requests[0].run_config["ops"][OP_NAME]["config"]["operations"] == ["delta_checkpoint"]
    assert run_job(resource, spark, requests[0].run_config).success
    stats = maintenance.delta_log_stats(lh.context, lh.load("dm.cp"))
    assert stats["delta_checkpoint_version"] == stats["delta_version"] and not stats["delta_checkpoint_due"]
    assert requested() == []
    assert DeltaTable(lh.table_location("dm.cp")).to_pyarrow_table().num_rows == 9


def test_cli_maintain(lh, spark, warehouse):
    for start in (0, 10, 20):
        lh.write(batch(spark, start), "dm.cli", partition_by=["g"])
    runner = CliRunner()
    r = runner.invoke(cli, ["--warehouse", warehouse, "maintain", "dm.cli", "--op", "compaction", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["dry_run"] and report["files_rewritten"] == 6 and not report["committed"]
    assert len(lh.load("dm.cli").metadata.snapshots) == 3
    r = runner.invoke(cli, ["--warehouse", warehouse, "maintain", "--all", "--op", "full_maintenance", "--snapshot-retention-days", "0", "--min-snapshots-to-keep", "1"])
    assert r.exit_code == 0, r.output
    assert "dm.cli: full_maintenance: 6 files rewritten" in r.output and "1 snapshots" in r.output
    r = runner.invoke(cli, ["--warehouse", warehouse, "maintain", "dm.cli", "--op", "vacuum"])
    assert r.exit_code == 2 and "'vacuum' is not one of" in r.output
    r = runner.invoke(cli, ["--warehouse", warehouse, "maintain"])
    assert r.exit_code == 2 and "exactly one of TABLE or --all" in r.output


LAUNCH = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on PythonError { message }
  }
}
"""


def test_graphql_launch(lh, spark, warehouse, tmp_path, monkeypatch):
    """The job launched through Dagster's GraphQL API (the webserver's schema, in process; the run in a subprocess)."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql, infer_repository_selector

    for start in (0, 10):
        lh.write(batch(spark, start), "dm.gql")
    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE", warehouse)
    location = tmp_path / "location.py"
    location.write_text("from lakehouse_assets.definitions import defs\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    # Launch at once (no daemon): the default coordinator hands the run to the default launcher (a subprocess).
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nrun_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
    )
    with DagsterInstance.from_config(str(home)) as instance:
        with define_out_of_process_context(str(location), "defs", instance) as context:
            params = {
                "selector": {**infer_repository_selector(context), "jobName": JOB_NAME},
                "runConfigData": {"ops": {OP_NAME: {"config": {"tables": ["dm.gql"], "operations": ["snapshot_expiry", "delta_checkpoint"], "snapshot_retention_days": 0, "min_snapshots_to_keep": 1}}}},
            }
            bad = execute_dagster_graphql(context, LAUNCH, {"executionParams": {**params, "runConfigData": {"ops": {OP_NAME: {"config": {"operations": ["vacuum"]}}}}}})
            assert bad.data["launchRun"]["__typename"] == "RunConfigValidationInvalid", bad.data
            result = execute_dagster_graphql(context, LAUNCH, {"executionParams": params})
            assert result.data["launchRun"]["__typename"] == "LaunchRunSuccess", result.data
            run_id = result.data["launchRun"]["run"]["runId"]
            deadline = time.monotonic() + 120
            while not instance.get_run_by_id(run_id).is_finished and time.monotonic() < deadline:
                time.sleep(1)
            run = instance.get_run_by_id(run_id)
            assert run.is_success, (run.status, [e.message for e in instance.all_logs(run_id)][-5:])
            observations = instance.fetch_observations(AssetKey(["dm", "gql"]), limit=10).records
            assert len(observations) == 2
    table = lh.load("dm.gql")
    assert len(table.metadata.snapshots) == 1

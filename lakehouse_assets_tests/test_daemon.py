"""Maintenance runs by itself: `dagster dev`'s daemon launches the compaction, Delta-repair and scheduled
maintenance runs with nobody clicking anything.

A fresh DAGSTER_HOME and warehouse hold two tables: `ops.small_files` (one commit of many small files)
and `ops.lagging` (its last Delta commit failed, so Delta lags Iceberg by one snapshot). The code
location is configured the way a deployment would be, through environment variables: both sensors
evaluated every 10 s, and the "nightly" schedule set to fire every minute, so that its first tick comes
at the first whole minute after the daemon starts (a schedule launches no tick from before its start), as
likely as not while the sensors' runs work on the same tables. The test only watches, through the GraphQL
API, until the daemon's three runs have succeeded (it switches the schedule off once its run is there, as
a person would in the UI), then checks the tables: fewer files, Delta caught up, both formats agreeing with
every reader.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from .conftest import assert_all_readers_agree, unreadable_delta_log
from .dagster_dev import LOCATION, graphql, running_dagster_dev, tail

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

# About a minute when the machine is idle; generous because each run is a process with its own Spark
# driver, and this 2-core machine is often shared.
WAIT_FOR_RUNS_S = 420
RUNS_QUERY = """
query { runsOrError(filter: {pipelineName: "lakehouse_maintenance_job"}) {
  __typename ... on Runs { results { runId status tags { key value } } } } }
"""
SCHEDULE = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "scheduleName": "lakehouse_nightly_maintenance"}
SCHEDULE_STATE_QUERY = """
query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) {
  __typename ... on Schedule { scheduleState { id status } } } }
"""
STOP_SCHEDULE = """
mutation($id: String!) { stopRunningSchedule(id: $id) {
  __typename ... on ScheduleStateResult { scheduleState { status } } ... on PythonError { message } } }
"""


def _runs(base: str) -> list[dict]:
    data = graphql(base, RUNS_QUERY)["runsOrError"]
    assert data["__typename"] == "Runs", data
    return [{**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in data["results"]]


def _describe(runs: list[dict]) -> str:
    return "; ".join(
        f"{r['runId'][:8]} {r['status']} {r['tags'].get('lakehouse/maintenance')} {r['tags'].get('lakehouse/table', 'all tables')} "
        f"(sensor {r['tags'].get('dagster/sensor_name', '-')}, schedule {r['tags'].get('dagster/schedule_name', '-')})"
        for r in runs
    ) or "none"


def _stop_schedule(base: str) -> None:
    """Switch the nightly schedule off (what the UI's switch does), so that it launches no second run."""
    schedule = graphql(base, SCHEDULE_STATE_QUERY, {"s": SCHEDULE})["scheduleOrError"]
    assert schedule["__typename"] == "Schedule", schedule
    stopped = graphql(base, STOP_SCHEDULE, {"id": schedule["scheduleState"]["id"]})["stopRunningSchedule"]
    assert stopped.get("scheduleState", {}).get("status") == "STOPPED", stopped


def test_daemon_launches_compaction_repair_and_scheduled_maintenance_by_itself(spark, duck, capsys):
    from lakehouse_assets import Lakehouse

    root = Path(tempfile.mkdtemp(prefix="lakehouse-daemon-"))
    warehouse = root / "warehouse"
    lh = Lakehouse(str(warehouse))
    # Many small files: 16 small appends (a write plans its own tasks from the data's size, so one write of this
    # little data is one file), all far below the 128 MB target.
    for part in range(16):
        lh.write(spark.range(part * 100, (part + 1) * 100).select("id", (F.col("id") % 7).alias("k")), "ops.small_files")
    # A lagging Delta log: the second write's Delta commit fails (its log is unreadable while it runs).
    rows = spark.range(0, 100).select("id", F.lit("x").alias("v"))
    lh.write(rows, "ops.lagging")
    with unreadable_delta_log(lh.load("ops.lagging").location()):
        assert lh.write(rows, "ops.lagging").delta_lagging
    files_before = len(list(lh.load("ops.small_files").scan().plan_files()))
    assert files_before == 16 and lh.delta_lag("ops.lagging") == 1
    # (The tables exist before the daemon starts: a write in flight, Iceberg committed but Delta not
    # yet, looks like lag to the sensor, which would request a harmless but extra repair run.)

    # Every minute: the first tick is the first whole minute after the daemon has started.
    env = {
        "LAKEHOUSE_COMPACTION_SENSOR_INTERVAL_S": "10",
        "LAKEHOUSE_DELTA_LAG_SENSOR_INTERVAL_S": "10",
        "LAKEHOUSE_MAINTENANCE_CRON": "* * * * *",
    }
    started = time.monotonic()
    try:
        with running_dagster_dev(root, warehouse, env=env) as dev:
            with capsys.disabled():
                print(f"\ndagster dev up in {time.monotonic() - started:.0f} s; log {dev['log']}")
            wanted = {
                "compaction": lambda r: r["tags"].get("lakehouse/maintenance") == "compaction" and r["tags"].get("lakehouse/table") == "ops.small_files"
                and r["tags"].get("dagster/sensor_name") == "lakehouse_compaction_sensor",
                "repair": lambda r: r["tags"].get("lakehouse/maintenance") == "repair" and r["tags"].get("lakehouse/table") == "ops.lagging"
                and r["tags"].get("dagster/sensor_name") == "lakehouse_delta_lag_sensor",
                "nightly": lambda r: r["tags"].get("lakehouse/maintenance") == "nightly"
                and r["tags"].get("dagster/schedule_name") == "lakehouse_nightly_maintenance",
            }
            deadline = time.monotonic() + WAIT_FOR_RUNS_S
            schedule_on = True
            while True:
                runs = _runs(dev["base"])
                if schedule_on and any("dagster/schedule_name" in r["tags"] for r in runs):
                    _stop_schedule(dev["base"])
                    schedule_on = False
                failed = [r for r in runs if r["status"] in ("FAILURE", "CANCELED")]
                assert not failed, f"daemon-launched runs failed: {_describe(failed)}; log {dev['log']}:\n{tail(dev['log'])}"
                done = {name for name, match in wanted.items() if any(match(r) and r["status"] == "SUCCESS" for r in runs)}
                in_flight = [r for r in runs if r["status"] not in ("SUCCESS", "FAILURE", "CANCELED")]
                if done == set(wanted) and not in_flight:
                    break
                assert time.monotonic() < deadline, (
                    f"after {WAIT_FOR_RUNS_S} s the daemon has not run {sorted(set(wanted) - done)}; runs: {_describe(runs)}; "
                    f"log {dev['log']}:\n{tail(dev['log'])}"
                )
                time.sleep(3)
            # Confirm each run's final status with the Python GraphQL client as well.
            from dagster_graphql import DagsterGraphQLClient

            client = DagsterGraphQLClient("127.0.0.1", port_number=dev["port"])
            for r in runs:
                assert client.get_run_status(r["runId"]).value == "SUCCESS"
            # Nobody launched anything: every run came from a sensor or the schedule.
            assert all("dagster/sensor_name" in r["tags"] or "dagster/schedule_name" in r["tags"] for r in runs), _describe(runs)
            with capsys.disabled():
                print(f"daemon runs done {time.monotonic() - started:.0f} s after dagster dev started: {_describe(runs)}")

        lh = Lakehouse(str(warehouse))
        files_after = len(list(lh.load("ops.small_files").scan().plan_files()))
        assert files_after < files_before, (files_before, files_after)
        assert "compaction" in [h["operation"] for h in lh.history("ops.small_files")]
        assert lh.delta_lag("ops.lagging") == 0
        assert_all_readers_agree(lh, spark, duck, "ops.small_files", [(i, i % 7) for i in range(1600)])
        assert_all_readers_agree(lh, spark, duck, "ops.lagging", [(i, "x") for i in range(100)] * 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)

"""Incremental inputs: `AssetIn(metadata={"changes": True})` hands a downstream asset the upstream rows changed
since it last consumed them, exactly once across failed, retried and repeated runs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from dagster import AssetIn, DagsterInstance, RetryPolicy, asset, materialize
from dagster_pyspark import PySparkResource
from pyspark.sql import functions as F

from lakehouse_assets import Lakehouse
from lakehouse_assets.core.errors import SpecError

BATCH: list[tuple[int, int]] = []  # the rows the upstream asset appends next
FAIL: dict[str, int] = {"before_write": 0}  # attempts of the downstream asset left to fail before it returns
SEEN: list[list[tuple]] = []


@asset(key_prefix=["inc"])
def events(pyspark: PySparkResource):
    return pyspark.spark_session.createDataFrame(BATCH, "id long, amount long")


@asset(key_prefix=["inc"], ins={"events": AssetIn(key=["inc", "events"], metadata={"changes": True})}, retry_policy=RetryPolicy(max_retries=1))
def doubled(events):
    SEEN.append(sorted((r["id"], r["_change_type"]) for r in events.collect()))
    if FAIL["before_write"] > 0:
        FAIL["before_write"] -= 1
        raise RuntimeError("the asset failed after reading its input")
    return events.filter(F.col("_change_type") == "insert").select("id", (F.col("amount") * 2).alias("amount"))


def _consumed(result) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path == ["inc", "doubled"]]
    return event.materialization.metadata["lakehouse/consumed_snapshots"].value


@pytest.mark.smoke
def test_each_change_reaches_the_downstream_once_across_failures_retries_and_reruns(dagster_resources, spark, warehouse):
    lh = Lakehouse(warehouse)
    instance = DagsterInstance.ephemeral()
    SEEN.clear()

    BATCH[:] = [(i, i) for i in range(5)]
    assert materialize([events], resources=dagster_resources, instance=instance).success
    first = lh.load("inc.events").current_snapshot().snapshot_id
    result = materialize([events, doubled], selection=[doubled], resources=dagster_resources, instance=instance)
    assert result.success and SEEN[-1] == [(i, "insert") for i in range(5)]  # first run: everything
    assert _consumed(result) == {"inc.events": {"after": None, "through": first}}
    assert lh.load("inc.doubled").current_snapshot().summary["lakehouse.consumed.inc.events"] == str(first)

    BATCH[:] = [(5, 5), (6, 6)]
    assert materialize([events], resources=dagster_resources, instance=instance).success
    second = lh.load("inc.events").current_snapshot().snapshot_id
    result = materialize([events, doubled], selection=[doubled], resources=dagster_resources, instance=instance)
    assert SEEN[-1] == [(5, "insert"), (6, "insert")]  # only what changed since the first run
    assert _consumed(result) == {"inc.events": {"after": first, "through": second}}

    # A run that fails after reading commits nothing and does not advance; a retry (same run) reads the same range.
    BATCH[:] = [(7, 7)]
    assert materialize([events], resources=dagster_resources, instance=instance).success
    before = lh.load("inc.doubled").current_snapshot().snapshot_id
    FAIL["before_write"] = 2  # both attempts of the next run fail
    failed = materialize([events, doubled], selection=[doubled], resources=dagster_resources, instance=instance, raise_on_error=False)
    assert not failed.success and SEEN[-2:] == [[(7, "insert")], [(7, "insert")]]
    assert lh.load("inc.doubled").current_snapshot().snapshot_id == before
    FAIL["before_write"] = 1  # the first attempt fails, its retry succeeds
    result = materialize([events, doubled], selection=[doubled], resources=dagster_resources, instance=instance)
    assert result.success and SEEN[-2:] == [[(7, "insert")], [(7, "insert")]]

    # Nothing new upstream: the next run reads nothing and writes nothing twice.
    result = materialize([events, doubled], selection=[doubled], resources=dagster_resources, instance=instance)
    assert result.success and SEEN[-1] == []
    rows = sorted((r["id"], r["amount"]) for r in lh.read(spark, "inc.doubled").collect())
    assert rows == [(i, 2 * i) for i in range(8)]
    assert lh.verify("inc.doubled")["agree"]


def test_changes_cannot_be_combined_with_time_travel_or_a_row_filter(dagster_resources):
    @asset(key_prefix=["inc"], ins={"events": AssetIn(key=["inc", "events"], metadata={"changes": True, "snapshot_id": 1})})
    def bad(events) -> None:
        pass

    BATCH[:] = [(1, 1)]
    with pytest.raises(SpecError, match=r"Input inc/events: 'changes' reads the rows changed since the last run and cannot be combined with \['snapshot_id'\]"):
        materialize([events, bad], resources=dagster_resources)


def test_a_first_run_reads_the_upstream_as_it_is_when_its_early_history_was_expired(dagster_resources, spark, warehouse):
    lh = Lakehouse(warehouse)
    SEEN.clear()
    for batch in ([(1, 1)], [(2, 2)], [(3, 3)]):
        BATCH[:] = batch
        assert materialize([events], resources=dagster_resources).success
    expired = lh.maintain("inc.events", "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=1)
    assert expired["snapshots_expired"] == 2, expired
    with pytest.raises(Exception, match=r"history before snapshot \d+ was expired"):
        lh.changes("inc.events")
    FAIL["before_write"] = 0
    assert materialize([events, doubled], selection=[doubled], resources=dagster_resources).success
    assert SEEN[-1] == [(1, "insert"), (2, "insert"), (3, "insert")]
    assert sorted((r["id"], r["amount"]) for r in lh.read(spark, "inc.doubled").collect()) == [(1, 2), (2, 4), (3, 6)]


def test_commits_from_outside_dagster_reach_dagster_as_materializations(dagster_resources, spark, warehouse):
    from dagster import build_sensor_context

    from lakehouse_assets.dagster.foreign_commits import foreign_commits_sensor

    lh = Lakehouse(warehouse)
    BATCH[:] = [(1, 1)]
    assert materialize([events], resources=dagster_resources).success
    def tick(cursor=None):
        with build_sensor_context(cursor=cursor, resources={"lakehouse": dagster_resources["lakehouse"]}) as context:
            return foreign_commits_sensor(context)

    first = tick()
    assert not first.asset_events  # the first evaluation records where the tables are

    table = lh.load("inc.events")
    table.append(pa.table({"id": [2], "amount": [20]}, schema=table.schema().as_arrow()))  # pyiceberg, another engine
    foreign = lh.load("inc.events").current_snapshot().snapshot_id
    lh.maintain("inc.events", "compaction", spark=spark, compaction_min_input_files=2)  # rows unchanged: not reported
    BATCH[:] = [(3, 3)]
    assert materialize([events], resources=dagster_resources).success  # a Dagster run: already a materialization
    result = tick(first.cursor)
    [event] = result.asset_events
    assert event.asset_key.path == ["inc", "events"] and event.metadata["lakehouse/iceberg_snapshot_id"].value == foreign
    assert event.metadata["lakehouse/engine"].value == "unknown"  # pyiceberg names no engine in its summary (Spark and Trino do)
    again = tick(result.cursor)
    assert not again.asset_events

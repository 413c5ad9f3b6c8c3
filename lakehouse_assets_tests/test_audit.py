"""Write-audit-publish in Dagster: an audited asset's rows reach main and Delta only after its blocking checks pass.

The asset stages each materialization on the branch `audit-<run id>`; its checks read what it staged; the
publish step (`publish_asset`) runs only when every blocking check passed. A failing check leaves main and the
Delta log exactly as they were (no reader of either format sees the rows) and the staged rows on their branch.
"""

from __future__ import annotations

import pytest
from dagster import AssetCheckResult, DagsterInstance, asset, asset_check, materialize
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable

from lakehouse_assets import Lakehouse
from lakehouse_assets.core.errors import SpecError
from lakehouse_assets.dagster.audit import audit_branch, publish_asset

from .conftest import assert_all_readers_agree, rows_of

BATCH = {"rows": "SELECT id, id * 10 AS amount FROM range(0, 3)"}
ALLOWED = {"negative": 0}  # negative amounts the check lets through


@asset(key_prefix=["wap"], metadata={"audit": True})
def orders(pyspark: PySparkResource):
    return pyspark.spark_session.sql(BATCH["rows"])


@asset_check(asset=orders, blocking=True)
def no_negative_amounts(orders) -> AssetCheckResult:
    bad = orders.filter("amount < 0").count()
    return AssetCheckResult(passed=bad <= ALLOWED["negative"], metadata={"rows_seen": orders.count(), "negative": bad})


orders_published = publish_asset(orders)


def _state(lh: Lakehouse):
    table = lh.load("wap.orders")
    dt = DeltaTable(table.location())
    return table.current_snapshot().snapshot_id, dt.version(), sorted(dt.file_uris())


def _check_metadata(result) -> dict:
    evaluation = result.get_asset_check_evaluations()[0]
    return {k: v.value for k, v in evaluation.metadata.items()} | {"passed": evaluation.passed}


@pytest.mark.smoke
def test_a_passing_audit_publishes_and_a_failing_one_leaves_both_formats_untouched(dagster_resources, warehouse, spark, duck):
    lh = Lakehouse(warehouse)
    instance = DagsterInstance.ephemeral()
    defs = [orders, no_negative_amounts, orders_published]

    BATCH["rows"] = "SELECT id, id * 10 AS amount FROM range(0, 3)"
    first = materialize(defs, resources=dagster_resources, instance=instance)
    assert first.success and _check_metadata(first) == {"rows_seen": 3, "negative": 0, "passed": True}
    published = first.asset_materializations_for_node("wap__orders_published")[0].metadata
    assert published["published"].value == "fast-forward" and published["delta_version"].value is not None
    assert lh.branches("wap.orders") == {}  # the staging branch is gone once published
    assert_all_readers_agree(lh, spark, duck, "wap.orders", rows_of([{"id": i, "amount": i * 10} for i in range(3)], ["amount", "id"]))

    # The check reads the staged rows (6 rows: main's 3 and the new 3), not main's.
    BATCH["rows"] = "SELECT id, id * 10 AS amount FROM range(3, 6)"
    second = materialize(defs, resources=dagster_resources, instance=instance)
    assert second.success and _check_metadata(second)["rows_seen"] == 6
    before = _state(lh)

    # A failing blocking check: the publish step never runs; main and Delta are exactly as they were.
    BATCH["rows"] = "SELECT id, -1 AS amount FROM range(6, 8)"
    failed = materialize(defs, resources=dagster_resources, instance=instance, raise_on_error=False)
    assert not failed.success
    assert _check_metadata(failed) == {"rows_seen": 8, "negative": 2, "passed": False}
    assert not failed.asset_materializations_for_node("wap__orders_published")
    assert _state(lh) == before
    expected = rows_of([{"id": i, "amount": i * 10} for i in range(6)], ["amount", "id"])
    assert_all_readers_agree(lh, spark, duck, "wap.orders", expected)
    # The staged rows wait on their branch for inspection; discarding them changes nothing else.
    branch = audit_branch(failed.run_id)
    assert branch in lh.branches("wap.orders")
    assert lh.read_arrow("wap.orders", branch=branch).num_rows == 8
    lh.discard("wap.orders", branch)
    assert _state(lh) == before and lh.branches("wap.orders") == {}


def test_audit_and_an_environment_branch_do_not_mix(warehouse, spark):
    from lakehouse_assets.dagster.io_manager import LakehouseIOManager
    from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

    dev = LakehouseResource(warehouse=warehouse, branch="dev")
    pyspark = spark_resource()
    resources = {"lakehouse": dev, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=dev, pyspark=pyspark)}
    with pytest.raises(SpecError, match="write-audit-publish stages on a branch of main"):
        materialize([orders], resources=resources)


def _wap_job():
    """The audited asset, its check and its publish step as a job Dagster can re-execute (module level)."""
    from dagster import Definitions, define_asset_job, in_process_executor

    from lakehouse_assets.dagster.io_manager import LakehouseIOManager
    from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

    lakehouse = LakehouseResource(warehouse=WAREHOUSE["path"])
    pyspark = spark_resource()
    defs = Definitions(
        assets=[orders, orders_published], asset_checks=[no_negative_amounts], jobs=[define_asset_job("wap_job")],
        executor=in_process_executor,
        resources={"lakehouse": lakehouse, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark)},
    )
    return defs.resolve_job_def("wap_job")


WAREHOUSE = {"path": ""}


def test_re_executing_a_failed_audit_publishes_what_that_run_staged(warehouse, spark, tmp_path):
    from dagster import ReexecutionOptions, execute_job, instance_for_test, reconstructable

    WAREHOUSE["path"] = warehouse
    lh = Lakehouse(warehouse)
    BATCH["rows"] = "SELECT id, -1 AS amount FROM range(0, 2)"
    (tmp_path / "dagster").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        job = reconstructable(_wap_job)
        with execute_job(job, instance=instance, raise_on_error=False) as failed:
            assert not failed.success
        assert lh.read_arrow("wap.orders").num_rows == 0  # main: the empty first snapshot the branch forked from
        staged = audit_branch(failed.run_id)
        # The check is relaxed (a decision made after inspecting the branch), then the run re-executed from the
        # failure: the asset is not written again; the check reads what the failed run staged, and publishes it.
        BATCH["rows"] = "SELECT id, 5 AS amount FROM range(100, 101)"  # never written: the asset step is not re-run
        ALLOWED["negative"] = 2
        try:
            with execute_job(job, instance=instance, reexecution_options=ReexecutionOptions.from_failure(failed.run_id, instance)) as again:
                assert again.success
        finally:
            ALLOWED["negative"] = 0
        assert sorted(lh.read_arrow("wap.orders").column("id").to_pylist()) == [0, 1]
        assert staged not in lh.branches("wap.orders") and lh.verify("wap.orders")["agree"]


def test_a_partitioned_audited_asset_publishes_each_partition_run(dagster_resources, warehouse):
    from dagster import DailyPartitionsDefinition

    daily = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")

    @asset(key_prefix=["wap"], partitions_def=daily, metadata={"audit": True, "partition_expr": "d", "partition_by": ["day(d)"]})
    def visits(context, pyspark: PySparkResource):
        return pyspark.spark_session.sql(f"SELECT id, timestamp'{context.partition_key} 01:00:00' AS d FROM range(3)")

    @asset_check(asset=visits, blocking=True)
    def visits_seen(visits) -> AssetCheckResult:
        return AssetCheckResult(passed=True, metadata={"rows_seen": visits.count()})

    lh = Lakehouse(warehouse)
    for day, staged_rows in (("2024-01-01", 3), ("2024-01-02", 6), ("2024-01-02", 6)):  # the last: a re-run of a day
        result = materialize([visits, visits_seen, publish_asset(visits)], resources=dagster_resources, partition_key=day)
        assert result.success and _check_metadata(result)["rows_seen"] == staged_rows
    assert lh.read_arrow("wap.visits").num_rows == 6 and lh.branches("wap.visits") == {}
    assert lh.verify("wap.visits")["agree"]

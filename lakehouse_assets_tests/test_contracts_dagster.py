"""Data contracts on Dagster assets: declared in the column schema and a `contract` entry, enforced by the IO
manager's write, each rule an asset check, the quarantine table an asset."""

from __future__ import annotations

import pytest
from dagster import AssetKey, TableColumn, TableColumnConstraints, TableSchema, asset, materialize
from dagster_pyspark import PySparkResource

from lakehouse_assets.dagster.contracts import build_contract_checks, quarantine_specs

from .conftest import materialization_metadata

COLUMNS = TableSchema(
    columns=[
        TableColumn("id", "bigint", constraints=TableColumnConstraints(nullable=False, unique=True)),
        TableColumn("amount", "double"),
        TableColumn("status", "string"),
    ]
)


def _orders(policy: str, rows, *, new_columns: str = "evolve"):
    @asset(
        key=["shop", "orders"],
        metadata={
            "dagster/column_schema": COLUMNS,
            "contract": {"rules": {"amount_positive": "amount >= 0"}, "on_violation": policy, "new_columns": new_columns},
        },
    )
    def orders(pyspark: PySparkResource):
        extra = ", channel string" if rows and len(rows[0]) == 4 else ""
        return pyspark.spark_session.createDataFrame(rows, "id bigint, amount double, status string" + extra)

    return orders


def _run(assets, resources, **kw):
    checks = build_contract_checks(assets)
    return materialize([*assets, *quarantine_specs(assets), *checks], resources=resources, raise_on_error=False, **kw), checks


@pytest.mark.smoke
def test_quarantine_policy_checks_and_quarantine_asset(dagster_resources, lh):
    orders = _orders("quarantine", [(1, 10.0, "new"), (2, -1.0, "new"), (3, -2.0, "paid")])
    result, checks = _run([orders], dagster_resources)
    assert result.success
    assert {k.name for c in checks for k in c.check_keys} == {
        "contract_amount_positive", "contract_not_null_id", "contract_unique_id",
    }
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    rule = evaluations["contract_amount_positive"]
    assert not rule.passed and rule.metadata["rows_broken"].value == 2 and len(rule.metadata["sample_rows"].value) >= 1
    assert evaluations["contract_not_null_id"].passed and evaluations["contract_unique_id"].passed
    metadata = materialization_metadata(result, ["shop", "orders"])
    assert metadata["dagster/row_count"] == 1 and metadata["contract/rows_broken"] == 2
    quarantine = [m for m in result.get_asset_materialization_events() if m.asset_key == AssetKey(["shop", "orders_quarantine"])]
    assert quarantine and quarantine[-1].materialization.metadata["dagster/row_count"].value == 2
    assert len(lh.read_arrow("shop.orders_quarantine")) == 2


def test_fail_policy_fails_the_materialization_and_blocks(dagster_resources, lh):
    orders = _orders("fail", [(1, 10.0, "new"), (2, -1.0, "new")])
    result, checks = _run([orders], dagster_resources)
    assert not result.success and all(c.check_specs and next(iter(c.check_specs)).blocking for c in checks)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "amount_positive: 1 row(s)" in failure.event_specific_data.error.to_string()
    assert "shop.orders" not in lh.table_names()


def test_forbidden_schema_change_fails_the_materialization(dagster_resources, lh):
    result, _ = _run([_orders("fail", [(1, 1.0, "new")])], dagster_resources)
    assert result.success
    result, _ = _run([_orders("fail", [(2, 1.0, "new", "web")], new_columns="freeze")], dagster_resources)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    text = failure.event_specific_data.error.to_string()
    assert "column 'channel' is new" in text and "'freeze'" in text


def test_the_quarantine_asset_sits_in_its_tables_group():
    @asset(key=["shop", "refunds"], group_name="shop", metadata={"contract": {"rules": {"positive": "amount > 0"}, "on_violation": "quarantine"}})
    def refunds():
        return None

    (spec,) = quarantine_specs([refunds])
    assert spec.key == AssetKey(["shop", "refunds_quarantine"]) and spec.group_name == "shop"
    assert [d.asset_key for d in spec.deps] == [AssetKey(["shop", "refunds"])]

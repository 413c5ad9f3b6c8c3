"""Dropping and renaming a table on the embedded catalog: what depends on it refuses both until taken along."""

from __future__ import annotations

import os

import pytest

from lakehouse_assets import TableOptions
from lakehouse_assets.core.contracts.model import Contract
from lakehouse_assets.core.errors import SpecError, TableNotFound


def test_branches_and_the_quarantine_table_refuse_a_drop_or_rename_until_taken_along(lh, spark):
    contract = Contract(rules={"positive": "amount > 0"}, on_violation="quarantine")
    lh.write(spark.createDataFrame([(1, 5), (2, -1)], "id long, amount int"), "shop.orders", table=TableOptions(contract=contract))
    assert lh.read(spark, "shop.orders_quarantine").count() == 1
    lh.write(spark.createDataFrame([(3, 7)], "id long, amount int"), "shop.orders", branch="audit")

    with pytest.raises(SpecError, match=r"shop\.orders: refusing to drop it while branch\(es\) audit .* and the contract's quarantine table shop\.orders_quarantine"):
        lh.drop("shop.orders")
    with pytest.raises(SpecError, match=r"refusing to rename it while .*shop\.orders_quarantine"):
        lh.rename("shop.orders", "shop.sales")
    assert {"shop.orders", "shop.orders_quarantine"} <= set(lh.table_names())

    renamed = lh.rename("shop.orders", "sales.orders", dependents=True)  # a new namespace, created
    assert renamed["quarantine"]["table"] == "sales.orders_quarantine"
    assert lh.read(spark, "sales.orders", branch="audit").count() == 2  # the branch moved with the table
    assert lh.verify("sales.orders")["agree"]

    root = lh.load("sales.orders").location()[len("file://"):]
    dropped = lh.drop("sales.orders", purge=True, dependents=True)
    assert dropped["quarantine"]["purged"] and not os.path.exists(root)
    assert not {"sales.orders", "sales.orders_quarantine"} & set(lh.table_names())
    with pytest.raises(TableNotFound):
        lh.drop("sales.orders")
    with pytest.raises(SpecError, match=r"another namespace\.table"):
        lh.rename("sales.missing", "nodots")

"""Data contracts: declared once, enforced inside the write's job before anything lands, written into both formats."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import Contract, ContractViolation, SchemaError, TableOptions
from lakehouse_assets.core.contracts import ContractError

from .conftest import assert_all_readers_agree, rows_of

ORDERS = "id bigint, amount double, status string"
RULES = {"amount_positive": "amount >= 0", "known_status": "status IN ('new', 'paid')"}


def orders(spark, rows):
    return spark.createDataFrame(rows, ORDERS)


def contract(**kw) -> Contract:
    return Contract(**{"rules": RULES, "not_null": ["id"], "unique": ["id"], **kw})


def delta_of(lh, identifier) -> DeltaTable:
    return DeltaTable(lh.load(identifier).location())


@pytest.mark.smoke  # also on a Spark Connect session (`make connect`): the check stops the write's job with raise_error
def test_fail_policy_refuses_and_nothing_lands(lh, spark, duck):
    good = [(1, 10.0, "new"), (2, 5.0, "paid")]
    lh.write(orders(spark, good), "shop.orders", table=TableOptions(contract=contract()))
    bad = [(3, -1.0, "new"), (4, 1.0, "lost"), (5, -2.0, "x"), (6, 1.0, "new")]
    with pytest.raises(ContractViolation) as e:
        lh.write(orders(spark, bad), "shop.orders")  # the table's contract: declared once
    message = str(e.value)
    assert "amount_positive: 2 row(s)" in message and "known_status: 2 row(s)" in message
    assert '"id":3' in message and "Nothing was written" in message
    assert e.value.broken == {"amount_positive": 2, "known_status": 2}
    assert len(lh.history("shop.orders")) == 1
    assert_all_readers_agree(lh, spark, duck, "shop.orders", rows_of([{"id": i, "amount": a, "status": s} for i, a, s in good]))


def test_drop_policy_counts_and_reports(lh, spark, duck):
    rows = [(1, 10.0, "new"), (2, -5.0, "paid"), (3, 1.0, "lost"), (None, 1.0, "new"), (4, 1.0, "new"), (4, 2.0, "paid")]
    result = lh.write(orders(spark, rows), "shop.orders", table=TableOptions(contract=contract(on_violation="drop")))
    report = result.contract
    assert report["policy"] == "drop" and report["rows_checked"] == 6 and report["rows_broken"] == 5
    assert report["checks"] == {"amount_positive": 1, "known_status": 1, "not_null_id": 1, "unique_id": 2}
    assert report["samples"] and all(" {" in s for s in report["samples"])
    assert result.rows_written == 1
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(10.0, 1, "new")])


@pytest.mark.smoke  # also on a Spark Connect session: the Observation's counts return with the write's job
def test_quarantine_policy_writes_both_tables(lh, spark, duck):
    rows = [(1, 10.0, "new"), (2, -5.0, "paid"), (3, 1.0, "lost")]
    writer = {"dagster_run_id": "run-1"}
    result = lh.write(orders(spark, rows), "shop.orders", table=TableOptions(contract=contract(on_violation="quarantine")), writer=writer)
    assert result.contract["rows_quarantined"] == 2 and result.contract["quarantine_table"] == "shop.orders_quarantine"
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(10.0, 1, "new")])
    quarantined = lh.read(spark, "shop.orders_quarantine").collect()
    assert sorted((r.id, tuple(r._contract_rules), r._contract_run_id) for r in quarantined) == [
        (2, ("amount_positive",), "run-1"), (3, ("known_status",), "run-1"),
    ]
    assert all(r._contract_quarantined_at is not None for r in quarantined)
    assert lh.verify("shop.orders_quarantine")["agree"]


def test_contract_in_both_formats_and_delta_rs_enforces_it(lh, spark):
    lh.write(orders(spark, [(1, 10.0, "new")]), "shop.orders", table=TableOptions(contract=contract()))
    table = lh.load("shop.orders")
    assert Contract.from_json(table.properties["lakehouse.contract"]) == contract()
    assert table.schema().find_field("id").required and not table.schema().find_field("amount").required
    assert table.schema().identifier_field_names() == {"id"}
    delta = delta_of(lh, "shop.orders")
    configuration = delta.metadata().configuration
    assert configuration["delta.constraints.amount_positive"] == "amount >= 0"
    assert "delta.constraints.known_status" in configuration
    assert not next(f for f in delta.schema().fields if f.name == "id").nullable
    broken = pa.table({"id": pa.array([9], pa.int64()), "amount": [-1.0], "status": ["new"]}, schema=pa.schema(delta.schema().to_arrow()))
    with pytest.raises(Exception, match="failed validation"):
        write_deltalake(table.location(), broken, mode="append")  # delta-rs refuses it by itself
    lh.write(orders(spark, [(2, 3.0, "paid")]), "shop.orders")  # the mirror still commits to a constrained table
    assert lh.verify("shop.orders")["agree"]


@pytest.mark.parametrize(
    "rule, construct",
    [
        ("amount >=", "not a valid SQL boolean expression"),
        ("total >= 0", "unknown column 'total'"),
        ("rand() < 0.5", "not deterministic"),
        ("status RLIKE '^n'", "RLIKE"),
        ("id / 2 > 1", "division"),
        ("CAST(id AS STRING) = '1'", "CAST"),
        ("status = 1", "convert between types"),
    ],
)
def test_rules_outside_the_portable_subset_are_refused_before_any_file(lh, spark, rule, construct):
    with pytest.raises(ContractError) as e:
        lh.write(orders(spark, [(1, 1.0, "new")]), "shop.orders", table=TableOptions(contract=Contract(rules={"r1": rule})))
    assert "rule 'r1'" in str(e.value) and construct in str(e.value)
    assert "shop.orders" not in lh.table_names()


def test_new_column_modes(lh, spark):
    frozen = contract(new_columns="freeze")
    lh.write(orders(spark, [(1, 1.0, "new")]), "shop.orders", table=TableOptions(contract=frozen))
    wider = spark.createDataFrame([(2, 2.0, "new", "web"), (3, 3.0, "paid", None)], ORDERS + ", channel string")
    with pytest.raises(SchemaError, match="column 'channel' is new and the contract's new_columns mode is 'freeze'"):
        lh.write(wider, "shop.orders")
    result = lh.write(wider, "shop.orders", table=TableOptions(contract=contract(new_columns="discard_value")))
    assert [f.name for f in lh.load("shop.orders").schema().fields] == ["id", "amount", "status"] and result.rows_written == 2
    result = lh.write(wider, "shop.orders", table=TableOptions(contract=contract(new_columns="discard_row", on_violation="drop")))
    assert result.rows_written == 1 and result.contract["discarded"] == {"new_column_channel": 1}
    lh.write(wider.selectExpr("id + 10 AS id", "amount", "status", "channel"), "shop.orders", table=TableOptions(contract=contract(new_columns="evolve")))
    assert "channel" in [f.name for f in lh.load("shop.orders").schema().fields]


def test_type_change_modes(lh, spark):
    declared = contract(types={"amount": "double"}, type_changes="freeze")
    lh.write(orders(spark, [(1, 1.0, "new")]), "shop.orders", table=TableOptions(contract=declared))
    as_text = spark.createDataFrame([(2, "2.5", "new"), (3, "n/a", "paid")], "id bigint, amount string, status string")
    with pytest.raises(SchemaError, match="column 'amount' is string in the data but double in the contract, and the contract's type_changes mode is 'freeze'"):
        lh.write(as_text, "shop.orders")
    kept = contract(types={"amount": "double"}, type_changes="discard_row", on_violation="drop")
    result = lh.write(as_text, "shop.orders", table=TableOptions(contract=kept))
    assert result.contract["discarded"] == {"type_amount": 1} and result.rows_written == 1
    nulls = contract(rules={"known_status": RULES["known_status"]}, types={"amount": "double"}, type_changes="discard_value")
    lh.write(as_text.selectExpr("id + 10 AS id", "amount", "status"), "shop.orders", table=TableOptions(contract=nulls))
    assert sorted((r.id, r.amount) for r in lh.read(spark, "shop.orders").collect()) == [(1, 1.0), (2, 2.5), (12, 2.5), (13, None)]


def test_adding_a_rule_checks_the_rows_already_there(lh, spark, duck):
    lh.write(orders(spark, [(1, 10.0, "new"), (2, -3.0, "refunded")]), "shop.orders")
    with pytest.raises(ContractViolation) as e:
        lh.write(orders(spark, [(3, 1.0, "new")]), "shop.orders", table=TableOptions(contract=Contract(rules={"amount_positive": "amount >= 0"})))
    assert "rows already in the table break" in str(e.value) and "amount_positive: 1 row(s)" in str(e.value) and '"id":2' in str(e.value)
    assert "lakehouse.contract" not in lh.load("shop.orders").properties
    assert not any(k.startswith("delta.constraints.") for k in delta_of(lh, "shop.orders").metadata().configuration)
    assert len(lh.history("shop.orders")) == 1
    lh.write(orders(spark, [(3, 1.0, "new")]), "shop.orders", table=TableOptions(contract=Contract(rules={"no_refunds": "status <> 'lost'"})))
    assert delta_of(lh, "shop.orders").metadata().configuration["delta.constraints.no_refunds"] == "status != 'lost'"
    # Dropping the rule from the contract drops its Delta constraint; a foreign-looking Delta version never appears.
    lh.write(orders(spark, [(4, 1.0, "lost")]), "shop.orders", table=TableOptions(contract=Contract(rules={"positive_id": "id > 0"})))
    configuration = delta_of(lh, "shop.orders").metadata().configuration
    assert "delta.constraints.no_refunds" not in configuration and configuration["delta.constraints.positive_id"] == "id > 0"
    assert_all_readers_agree(lh, spark, duck, "shop.orders")


def test_merge_under_a_contract(lh, spark, duck):
    from lakehouse_assets import MergeOptions

    lh.write(orders(spark, [(1, 10.0, "new"), (2, 5.0, "new")]), "shop.orders", table=TableOptions(contract=contract(on_violation="drop")))
    batch = spark.createDataFrame(
        [(1, 11.0, "paid", "u"), (2, None, None, "d"), (3, -1.0, "new", "u"), (4, 4.0, "new", "u")], ORDERS + ", op string"
    )
    result = lh.write(batch, "shop.orders", mode="merge", merge=MergeOptions(keys="id", operation_column="op", delete_values="d"))
    assert result.contract["checks"]["amount_positive"] == 1  # the delete row is checked by nothing
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(11.0, 1, "paid"), (4.0, 4, "new")])


def test_a_merge_delete_with_a_null_key_breaks_the_not_null_check_and_deletes_nothing(lh, spark):
    """Delete rows keep no rule, but a NULL key names no row: it breaks the key's NOT NULL check like an upsert's."""
    from lakehouse_assets import MergeOptions

    lh.write(orders(spark, [(0, 1.0, "new"), (1, 2.0, "new")]), "shop.orders", table=TableOptions(contract=contract(on_violation="drop")))
    batch = spark.createDataFrame([(None, None, None, "d"), (7, 3.0, "new", "u")], ORDERS + ", op string")
    result = lh.write(batch, "shop.orders", mode="merge", merge=MergeOptions(keys="id", operation_column="op", delete_values="d"))
    assert sum(n for name, n in result.contract["checks"].items() if "id" in name and "null" in name.lower()) == 1, result.contract
    assert sorted(r["id"] for r in lh.read_arrow("shop.orders").to_pylist()) == [0, 1, 7]  # key 0 is not deleted


@pytest.mark.parametrize("mode", ["freeze", "discard_row", "discard_value"])
def test_a_merges_operation_column_is_not_a_new_column(lh, spark, duck, mode):
    from lakehouse_assets import MergeOptions

    lh.write(orders(spark, [(1, 1.0, "new"), (2, 2.0, "new")]), "shop.orders", table=TableOptions(contract=contract(new_columns=mode)))
    batch = spark.createDataFrame([(1, 5.0, "paid", "u"), (2, None, None, "d")], ORDERS + ", op string")
    lh.write(batch, "shop.orders", mode="merge", merge=MergeOptions(keys="id", operation_column="op", delete_values="d"))
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(5.0, 1, "paid")])


def test_a_failed_write_leaves_the_tables_contract_as_it_was(lh, spark):
    lh.write(orders(spark, [(1, 1.0, "new")]), "shop.orders", table=TableOptions(contract=contract()))
    stored = lh.load("shop.orders").properties["lakehouse.contract"]
    constraints = {k for k in delta_of(lh, "shop.orders").metadata().configuration if k.startswith("delta.constraints.")}
    stricter = contract(rules={**RULES, "small": "amount < 100"})
    with pytest.raises(ContractViolation):
        lh.write(orders(spark, [(2, 500.0, "new")]), "shop.orders", table=TableOptions(contract=stricter))
    assert lh.load("shop.orders").properties["lakehouse.contract"] == stored
    assert {k for k in delta_of(lh, "shop.orders").metadata().configuration if k.startswith("delta.constraints.")} == constraints


def test_window_overwrite_under_a_contract(lh, spark, duck):
    import datetime as dt

    from lakehouse_assets import Window

    schema = "day date, id bigint, amount double"
    day = dt.date(2024, 1, 2)
    lh.write(spark.createDataFrame([(dt.date(2024, 1, 1), 1, 1.0), (day, 2, 2.0)], schema), "shop.daily", partition_by=["day"],
             table=TableOptions(contract=Contract(rules={"amount_positive": "amount >= 0"}, on_violation="quarantine")))
    result = lh.write(spark.createDataFrame([(day, 3, 3.0), (day, 4, -4.0)], schema), "shop.daily", mode="overwrite", window=Window("day", day, day + dt.timedelta(days=1)))
    assert result.contract["rows_quarantined"] == 1
    assert_all_readers_agree(lh, spark, duck, "shop.daily", [(1.0, "2024-01-01", 1), (3.0, "2024-01-02", 3)])
    assert [r.id for r in lh.read(spark, "shop.daily_quarantine").collect()] == [4]


def test_stream_micro_batches_keep_the_contract(lh, spark, duck):
    sink = lh.stream_writer("shop.orders", query_id="orders-stream", table=TableOptions(contract=contract(on_violation="drop")))
    first = sink(orders(spark, [(1, 1.0, "new"), (2, -1.0, "new")]), 0)
    assert first.contract["checks"]["amount_positive"] == 1 and first.rows_written == 1
    second = sink(orders(spark, [(3, 3.0, "paid"), (4, 4.0, "lost")]), 1)
    assert second.contract["checks"]["known_status"] == 1
    assert sink(orders(spark, [(1, 1.0, "new"), (2, -1.0, "new")]), 0).duplicate_of_earlier_write  # a replayed batch commits nothing
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(1.0, 1, "new"), (3.0, 3, "paid")])


def test_constrained_delta_side_through_maintenance_and_a_refused_widening(lh, spark):
    narrow = "id int, amount double, status string"
    lh.write(spark.createDataFrame([(1, 1.0, "new")], narrow), "shop.orders", table=TableOptions(contract=Contract(rules=RULES)))
    # Widening replaces the Delta table, which delta-rs cannot create with CHECK constraints: refused, nothing written.
    with pytest.raises(SchemaError, match=r"widens column\(s\) \['id'\], and the table's contract rules are Delta CHECK constraints"):
        lh.write(orders(spark, [(2, 2.0, "paid")]), "shop.orders")
    for i in range(3):
        lh.write(spark.createDataFrame([(10 + i, 1.0, "new")], narrow), "shop.orders")
    lh.maintain("shop.orders", "compaction")
    assert lh.verify("shop.orders")["agree"] and lh.delta_lag("shop.orders") == 0
    delta = delta_of(lh, "shop.orders")
    assert set(RULES) <= {k[len("delta.constraints."):] for k in delta.metadata().configuration if k.startswith("delta.constraints.")}
    with pytest.raises(Exception, match="failed validation"):
        row = pa.table({"id": pa.array([9], pa.int32()), "amount": [-1.0], "status": ["new"]})
        write_deltalake(lh.load("shop.orders").location(), row, mode="append")


def test_quarantine_of_a_branch_write_is_staged_on_the_branch_and_published_with_it(lh, spark, duck):
    """Write-audit-publish: the quarantined rows wait on the write's branch, not on main, and reach main (both formats) with it."""
    lenient = contract(on_violation="quarantine")
    lh.write(orders(spark, [(1, 10.0, "new")]), "shop.orders", table=TableOptions(contract=lenient))
    result = lh.write(orders(spark, [(2, 5.0, "paid"), (3, -1.0, "new")]), "shop.orders", branch="audit-1")
    assert result.contract["rows_quarantined"] == 1 and result.branch == "audit-1"
    assert lh.read_arrow("shop.orders_quarantine").num_rows == 0  # main: nothing until the publish
    assert DeltaTable(lh.load("shop.orders_quarantine").location()).to_pyarrow_table().num_rows == 0
    assert [r["id"] for r in lh.read_arrow("shop.orders_quarantine", branch="audit-1").to_pylist()] == [3]
    published = lh.publish("shop.orders", "audit-1")
    assert published.contract["quarantine_table"] == "shop.orders_quarantine"
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(10.0, 1, "new"), (5.0, 2, "paid")])
    assert [r["id"] for r in DeltaTable(lh.load("shop.orders_quarantine").location()).to_pyarrow_table().to_pylist()] == [3]
    assert lh.verify("shop.orders_quarantine")["agree"]
    # A discarded branch takes its quarantined rows with it.
    lh.write(orders(spark, [(4, -4.0, "new")]), "shop.orders", branch="audit-2")
    assert lh.discard("shop.orders", "audit-2")["quarantine"]["branch"] == "audit-2"
    assert "audit-2" not in lh.branches("shop.orders_quarantine")


def test_a_merge_checks_unique_columns_against_the_rows_the_table_keeps(lh, spark, duck):
    """Unique columns other than the merge keys: a batch row may not take a value a table row keeps, nor repeat one."""
    from lakehouse_assets import MergeOptions

    users = "id bigint, email string"
    lh.write(spark.createDataFrame([(1, "a"), (2, "b"), (9, "z")], users), "shop.users",
             table=TableOptions(contract=Contract(unique=["email"], on_violation="drop")))
    batch = spark.createDataFrame(
        [(3, "a", "u"), (2, "c", "u"), (4, "b", "u"), (5, "d", "u"), (6, "d", "u"), (9, None, "d"), (10, "z", "u")], users + ", op string"
    )
    result = lh.write(batch, "shop.users", mode="merge", merge=MergeOptions(keys="id", operation_column="op"))
    # 3 takes the "a" row 1 keeps; 5 and 6 share "d". 4 takes the "b" that 2 gives up, 10 the "z" of 9, deleted: both fine.
    assert result.contract["checks"]["unique_email"] == 3, result.contract
    assert_all_readers_agree(lh, spark, duck, "shop.users", [("a", 1), ("c", 2), ("b", 4), ("z", 10)])


def test_not_null_on_an_existing_optional_column_checks_the_rows_then_reaches_both_formats(lh, spark, duck):
    lh.write(orders(spark, [(1, 10.0, "new"), (2, 5.0, None)]), "shop.orders")
    assert not lh.load("shop.orders").schema().find_field("amount").required
    with pytest.raises(ContractViolation, match=r"not_null_status: 1 row\(s\), e.g. .*\"id\":2"):
        lh.write(orders(spark, [(3, 1.0, "new")]), "shop.orders", table=TableOptions(contract=Contract(not_null=["status"])))
    lh.write(orders(spark, [(3, 1.0, "new")]), "shop.orders", table=TableOptions(contract=Contract(not_null=["id", "amount"])))
    schema = lh.load("shop.orders").schema()
    assert schema.find_field("id").required and schema.find_field("amount").required and not schema.find_field("status").required
    delta = delta_of(lh, "shop.orders")
    assert {f.name: f.nullable for f in delta.schema().fields} == {"id": False, "amount": False, "status": True}
    assert lh.verify("shop.orders")["agree"]
    null_amount = pa.table({"id": pa.array([9], pa.int64()), "amount": pa.array([None], pa.float64()), "status": ["new"]})
    with pytest.raises(Exception, match="failed validation"):
        write_deltalake(lh.load("shop.orders").location(), null_amount, mode="append")  # delta-rs keeps the NOT NULL itself
    lh.write(orders(spark, [(4, 4.0, "paid")]), "shop.orders")  # the mirror goes on over the tightened schema
    assert lh.verify("shop.orders")["agree"]
    assert_all_readers_agree(lh, spark, duck, "shop.orders")


def test_verify_names_where_the_delta_side_no_longer_holds_the_contract(lh, spark):
    lh.write(orders(spark, [(1, 10.0, "new")]), "shop.orders", table=TableOptions(contract=contract()))
    assert lh.verify("shop.orders")["agree"]
    delta = delta_of(lh, "shop.orders")
    delta.alter.drop_constraint("amount_positive")  # another engine changes the Delta side's constraints
    delta.alter.add_constraint({"small": "amount < 1000"})
    differences = lh.verify("shop.orders")["differences"]
    assert "contract rule 'amount_positive' (amount >= 0) is no Delta CHECK constraint (delta.constraints.amount_positive)" in differences
    assert any(d.startswith("Delta CHECK constraint 'small' (amount < 1000) is not in the table's contract") for d in differences)
    assert not any("known_status" in d or "NOT NULL" in d for d in differences)


@pytest.mark.parametrize("policy", ["quarantine", "drop"])
def test_a_merge_on_read_table_under_a_contract_deletes_the_positions_of_the_rows_that_land(lh, spark, duck, policy):
    """A broken upsert lands nowhere: its key's old row stays, so its position is not deleted in either format."""
    from lakehouse_assets import MergeOptions
    from lakehouse_assets.core.formats.deletes import table_files
    from lakehouse_assets.core.properties import TableProperties

    mor = {p: TableProperties.MERGE_ON_READ for p in TableProperties.ROW_LEVEL_MODES}
    rows = [(i, float(i), "new") for i in range(10)]
    lh.write(orders(spark, rows).coalesce(1), "shop.orders", table=TableOptions(properties=mor, contract=contract(on_violation=policy)))
    batch = spark.createDataFrame(
        [(2, 20.0, "paid", "u"), (5, 50.0, "paid", "u"), (7, -7.0, "paid", "u"), (3, None, None, "d"), (20, 1.0, "new", "u"), (21, 1.0, "lost", "u")],
        ORDERS + ", op string",
    )
    result = lh.write(batch, "shop.orders", mode="merge", merge=MergeOptions(keys="id", operation_column="op", delete_values="d"))
    assert result.contract["checks"]["amount_positive"] == 1 and result.contract["checks"]["known_status"] == 1
    files = table_files(lh.load("shop.orders"))
    assert len(files.data) == 2 and [e.data_file.record_count for e in files.deletes] == [3]  # ids 2, 3 and 5: not 7
    kept = {i: (float(i), "new") for i in range(10) if i != 3} | {2: (20.0, "paid"), 5: (50.0, "paid"), 20: (1.0, "new")}
    assert_all_readers_agree(lh, spark, duck, "shop.orders", [(a, i, s) for i, (a, s) in kept.items()])
    report = lh.verify("shop.orders", deep=True)
    assert report["agree"], report["differences"]
    if policy == "quarantine":
        assert sorted(r.id for r in lh.read(spark, "shop.orders_quarantine").collect()) == [7, 21]

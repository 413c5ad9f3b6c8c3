"""Static and multi partitions, partition mappings, single-run backfills, write modes and table metadata.

Every write is read back by every reader of both formats (DuckDB iceberg_scan/delta_scan, pyiceberg,
delta-rs, Spark) against the rows the partitions should hold.
"""

import datetime as dt

import pytest
from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetSelection,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionMapping,
    asset,
    materialize,
)
from dagster_pyspark import PySparkResource

from lakehouse_assets import Slice, SpecError, Window
from lakehouse_assets.dagster.io_manager import LakehouseIOManager, WriteMode, partition_slice
from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

from .conftest import assert_all_readers_agree
from .conftest import materialization_metadata as _metadata

UTC = dt.timezone.utc
REGIONS = ["APAC", "EU", "US"]
regions = StaticPartitionsDefinition(REGIONS)
days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-15")
day_region = MultiPartitionsDefinition({"date": days, "region": regions})
# What each partition holds; a test bumps VERSION to make a re-run write different values.
VERSION = {"v": 1}


def _rows(day: str | None, region: str, n: int = 4) -> list[tuple]:
    """(id, region, ts, amount) for one partition; ts inside the day (or 2024-01-01 for region-only partitions)."""
    base = dt.datetime.fromisoformat(day or "2024-01-01").replace(tzinfo=UTC)
    return [(f"{region}-{day or '-'}-{i}", region, base + dt.timedelta(hours=5 * i), 10 * VERSION["v"] + i) for i in range(n)]


def _df(spark, rows):
    return spark.createDataFrame(rows, "id string, region string, ts timestamp, amount long")


@asset(key_prefix=["p"], partitions_def=regions, backfill_policy=BackfillPolicy.single_run(),
       metadata={"partition_by": ["region"], "partition_expr": "region"})
def sales_by_region(context: AssetExecutionContext, pyspark: PySparkResource):
    # A single-run backfill hands one step every region of the range.
    return _df(pyspark.spark_session, [r for key in context.partition_keys for r in _rows(None, key)])


@asset(key_prefix=["p"], partitions_def=day_region, metadata={"partition_expr": {"date": "ts", "region": "region"}})
def sales(context: AssetExecutionContext, pyspark: PySparkResource):
    """Unpartitioned table, so a slice cuts through files that hold other days and regions."""
    keys = context.partition_key.keys_by_dimension
    return _df(pyspark.spark_session, _rows(keys["date"], keys["region"]))


@asset(key_prefix=["p"], partitions_def=days, backfill_policy=BackfillPolicy.single_run(),
       metadata={"partition_by": ["day(ts)"], "partition_expr": "ts", "write_mode": WriteMode.overwrite})
def daily_sales(context: AssetExecutionContext, pyspark: PySparkResource):
    return _df(pyspark.spark_session, [r for key in context.partition_keys for r in _rows(key, "EU", 2)])


@asset(key_prefix=["p"], partitions_def=days,
       ins={"daily_sales": AssetIn(key=["p", "daily_sales"], partition_mapping=TimeWindowPartitionMapping(start_offset=-6))},
       metadata={"partition_expr": "day"})
def weekly_rolling(context: AssetExecutionContext, daily_sales):
    from pyspark.sql import functions as F

    # The last 7 days of daily_sales, and nothing else.
    seen = sorted({r[0] for r in daily_sales.select(F.to_date("ts").cast("string")).collect()})
    context.add_output_metadata({"days_read": ", ".join(seen)})
    return daily_sales.agg(F.count("*").alias("rows"), F.sum("amount").alias("amount")).select(
        F.lit(dt.date.fromisoformat(context.partition_key)).alias("day"), "rows", "amount")


@asset(key_prefix=["p"], partitions_def=days, ins={"sales": AssetIn(key=["p", "sales"])}, metadata={"partition_expr": "day"})
def sales_all_regions(context: AssetExecutionContext, sales):
    """Daily asset over the day x region asset: one date, every region (Dagster's multi-to-single mapping)."""
    from pyspark.sql import functions as F

    return sales.groupBy(F.to_date("ts").alias("day")).agg(F.count("*").alias("rows"), F.countDistinct("region").alias("regions"))


@asset(key_prefix=["p"], ins={"sales_by_region": AssetIn(key=["p", "sales_by_region"])}, metadata={"write_mode": "overwrite"})
def region_totals(sales_by_region):
    """Unpartitioned asset reading every region of a static-partitioned one."""
    return sales_by_region.groupBy("region").count()


def _files_by_value(lh, identifier, column):
    """Live data file paths per value of `column` (for identity-partitioned tables)."""
    out: dict = {}
    for task in lh.load(identifier).scan().plan_files():
        out.setdefault(task.file.partition[0], set()).add(task.file.file_path)
    return out


def _range_tags(start: str, end: str) -> dict:
    return {"dagster/asset_partition_range_start": start, "dagster/asset_partition_range_end": end}


# ------------------------------------------------------------------ mapping partitions to slices (no Spark)


def test_partition_slices_follow_dagsters_db_io_manager_shape():
    s = partition_slice("p/x", regions, ["EU"], "region")
    assert s == Slice(values={"region": ["EU"]}) and s.columns == ["region"]
    s = partition_slice("p/x", days, ["2024-01-02", "2024-01-03"], "ts")
    assert s.window == Window("ts", dt.datetime(2024, 1, 2, tzinfo=UTC), dt.datetime(2024, 1, 4, tzinfo=UTC)) and not s.values
    keys = [MultiPartitionKey({"date": d, "region": r}) for d in ("2024-01-02", "2024-01-03") for r in ("EU", "US")]
    s = partition_slice("p/x", day_region, keys, {"date": "ts", "region": "region"})
    assert s.window.column == "ts" and s.window.end == dt.datetime(2024, 1, 4, tzinfo=UTC) and s.values == {"region": ["EU", "US"]}
    assert s.describe() == "ts in [2024-01-02 00:00:00+00:00, 2024-01-04 00:00:00+00:00) and region in (EU, US)"
    # Keys given as strings (as Dagster stores them) map the same way.
    assert partition_slice("p/x", day_region, [str(k) for k in keys], {"date": "ts", "region": "region"}) == s


@pytest.mark.parametrize(
    "partitions_def, keys, expr, message",
    [
        (regions, ["EU"], None, r"Asset p/x is partitioned but has no 'partition_expr' metadata .*'partition_expr': '<column>'"),
        (day_region, [MultiPartitionKey({"date": "2024-01-01", "region": "EU"})], "ts",
         r"Asset p/x has multi-partitions \(date, region\): its 'partition_expr' must map each dimension to a column"),
        (day_region, [MultiPartitionKey({"date": "2024-01-01", "region": "EU"})], {"date": "ts"},
         r"'partition_expr' has no entry for the partition dimension 'region'"),
        (day_region, [MultiPartitionKey({"date": "2024-01-01", "region": "EU"}), MultiPartitionKey({"date": "2024-01-02", "region": "US"})],
         {"date": "ts", "region": "region"}, r"are not every combination of their dimensions' keys"),
        (days, ["2024-01-01", "2024-01-03"], "ts", r"the time partitions of this run are not adjacent"),
    ],
)
def test_partition_slice_errors_name_the_asset_and_the_fix(partitions_def, keys, expr, message):
    with pytest.raises(SpecError, match=message):
        partition_slice("p/x", partitions_def, keys, expr)


def test_write_mode_enum_and_unknown_mode_error():
    assert WriteMode.from_metadata("p/x", None) is WriteMode.append
    assert WriteMode.from_metadata("p/x", "Overwrite") is WriteMode.overwrite
    assert WriteMode.from_metadata("p/x", WriteMode.merge) is WriteMode.merge
    with pytest.raises(SpecError, match=r"Asset p/x: unknown write_mode 'upsert' in its metadata; use one of 'append', 'overwrite', 'merge'"):
        WriteMode.from_metadata("p/x", "upsert")


def test_unknown_write_mode_fails_the_materialization_naming_the_asset(dagster_resources):
    @asset(key_prefix=["p"], metadata={"write_mode": "replace"})
    def bad_mode(pyspark: PySparkResource):
        return pyspark.spark_session.range(3)

    result = materialize([bad_mode], resources=dagster_resources, raise_on_error=False)
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "Asset p/bad_mode: unknown write_mode 'replace'" in str(failure.event_specific_data.error)


# ------------------------------------------------------------------ static partitions


def test_static_partitions_replace_exactly_their_slice_and_emit_table_metadata(dagster_resources, warehouse, spark, duck):
    from lakehouse_assets import Lakehouse

    lh = Lakehouse(warehouse)
    VERSION["v"] = 1
    for region in ("EU", "US"):
        assert materialize([sales_by_region], resources=dagster_resources, partition_key=region).success
    us_files = _files_by_value(lh, "p.sales_by_region", "region")["US"]
    VERSION["v"] = 2
    result = materialize([sales_by_region], resources=dagster_resources, partition_key="EU")
    assert result.success
    expected = _rows(None, "EU")
    VERSION["v"] = 1
    expected += _rows(None, "US")
    assert_all_readers_agree(lh, spark, duck, "p.sales_by_region", [_norm_row(r) for r in expected])
    assert _files_by_value(lh, "p.sales_by_region", "region")["US"] == us_files  # the other slice was not touched
    history = lh.history("p.sales_by_region")
    assert history[0]["operation"] == "overwrite-window" and history[0]["writer"]["partition"] == "EU"

    # Idempotent: the same partition again leaves the same rows.
    VERSION["v"] = 2
    assert materialize([sales_by_region], resources=dagster_resources, partition_key="EU").success
    assert_all_readers_agree(lh, spark, duck, "p.sales_by_region", [_norm_row(r) for r in expected])

    md = _metadata(result, ["p", "sales_by_region"])
    schema = md["dagster/column_schema"]
    assert [(c.name, c.type, c.constraints.nullable) for c in schema.columns] == [
        ("id", "string", True), ("region", "string", True), ("ts", "timestamptz", True), ("amount", "long", True)]
    field_ids = {f.name: f.field_id for f in lh.load("p.sales_by_region").schema().fields}
    assert [c.description for c in schema.columns] == [f"Iceberg field id {field_ids[c.name]}" for c in schema.columns]
    assert md["dagster/table_name"] == "p.sales_by_region"
    assert md["dagster/uri"] == lh.load("p.sales_by_region").location() and md["dagster/uri"].endswith("/p/sales_by_region")
    assert md["partition_spec"] == "region" and md["dagster/partition_row_count"] == 4
    assert md["partition_slice"] == "region in (EU)"


def _norm_row(r):
    return (r[3], r[0], r[1], r[2].astimezone(UTC).replace(tzinfo=None).isoformat())  # columns sorted: amount, id, region, ts


def test_single_run_backfill_of_static_and_daily_partitions_is_one_commit(dagster_resources, warehouse, spark, duck):
    from lakehouse_assets import Lakehouse

    lh = Lakehouse(warehouse)
    VERSION["v"] = 1
    result = materialize([sales_by_region], resources=dagster_resources, tags=_range_tags("APAC", "US"))
    assert result.success
    assert len(lh.history("p.sales_by_region")) == 1  # three partitions, one Iceberg snapshot
    assert lh.history("p.sales_by_region")[0]["writer"]["partition"] == "APAC...US"
    expected = [r for region in REGIONS for r in _rows(None, region)]
    assert_all_readers_agree(lh, spark, duck, "p.sales_by_region", [_norm_row(r) for r in expected])

    result = materialize([daily_sales], resources=dagster_resources, tags=_range_tags("2024-01-01", "2024-01-07"))
    assert result.success and len(lh.history("p.daily_sales")) == 1
    assert _metadata(result, ["p", "daily_sales"])["dagster/partition_row_count"] == 14
    # Re-running the middle of the range in one run replaces just those days, again in one commit.
    VERSION["v"] = 3
    assert materialize([daily_sales], resources=dagster_resources, tags=_range_tags("2024-01-03", "2024-01-04")).success
    assert len(lh.history("p.daily_sales")) == 2
    expected = [r for d in range(1, 8) for r in (_rows(f"2024-01-0{d}", "EU", 2) if d in (3, 4) else [])]
    VERSION["v"] = 1
    expected += [r for d in range(1, 8) if d not in (3, 4) for r in _rows(f"2024-01-0{d}", "EU", 2)]
    assert_all_readers_agree(lh, spark, duck, "p.daily_sales", [_norm_row(r) for r in expected])


# ------------------------------------------------------------------ multi partitions


def test_multi_partitions_replace_exactly_their_slice_in_both_formats(dagster_resources, warehouse, spark, duck):
    from lakehouse_assets import Lakehouse

    lh = Lakehouse(warehouse)
    VERSION["v"] = 1
    keys = [("2024-01-01", "EU"), ("2024-01-01", "US"), ("2024-01-02", "EU")]
    for d, r in keys:
        assert materialize([sales], resources=dagster_resources, partition_key=MultiPartitionKey({"date": d, "region": r})).success
    VERSION["v"] = 5
    result = materialize([sales], resources=dagster_resources, partition_key=MultiPartitionKey({"date": "2024-01-01", "region": "EU"}))
    assert result.success
    expected = _rows("2024-01-01", "EU")
    VERSION["v"] = 1
    expected += _rows("2024-01-01", "US") + _rows("2024-01-02", "EU")
    assert_all_readers_agree(lh, spark, duck, "p.sales", [_norm_row(r) for r in expected])
    md = _metadata(result, ["p", "sales"])
    assert md["partition_slice"] == "ts in [2024-01-01 00:00:00+00:00, 2024-01-02 00:00:00+00:00) and region in (EU)"
    assert md["partition_spec"] == "unpartitioned" and md["dagster/partition_row_count"] == 4
    assert lh.history("p.sales")[0]["writer"]["partition"] == "2024-01-01|EU"

    # Downstream daily asset: one date, every region of the multi-partitioned upstream.
    result = materialize([sales, sales_all_regions], resources=dagster_resources, partition_key="2024-01-01", selection=AssetSelection.assets(sales_all_regions))
    assert result.success
    assert [tuple(r) for r in lh.read(spark, "p.sales_all_regions").collect()] == [(dt.date(2024, 1, 1), 8, 2)]


def test_rows_outside_the_slice_are_refused_and_nothing_is_committed(dagster_resources, warehouse):
    from lakehouse_assets import Lakehouse

    @asset(key_prefix=["p"], partitions_def=day_region, name="sales", metadata={"partition_expr": {"date": "ts", "region": "region"}})
    def wrong_region(context: AssetExecutionContext, pyspark: PySparkResource):
        keys = context.partition_key.keys_by_dimension
        return _df(pyspark.spark_session, _rows(keys["date"], keys["region"]) + _rows(keys["date"], "US", 1))

    VERSION["v"] = 1
    assert materialize([sales], resources=dagster_resources, partition_key=MultiPartitionKey({"date": "2024-01-01", "region": "US"})).success
    lh = Lakehouse(warehouse)
    before = lh.tables()
    result = materialize([wrong_region], resources=dagster_resources, partition_key=MultiPartitionKey({"date": "2024-01-01", "region": "EU"}), raise_on_error=False)
    assert not result.success
    error = str([e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0].event_specific_data.error)
    assert "Table p.sales: the data for partition slice ts in [2024-01-01 00:00:00+00:00, 2024-01-02 00:00:00+00:00) and region in (EU) has rows outside it" in error
    assert "region=US" in error and "nothing was committed" in error
    assert lh.tables() == before


# ------------------------------------------------------------------ merge into a partition's slice

# What each day's run of the merged asset returns: (id, ts hour, amount, op); op "D" deletes the key.
ORDERS: dict[str, list[tuple]] = {}


def _orders_asset(partition_by):
    metadata = {"partition_expr": "ts", "write_mode": "merge", "merge_keys": ["id"], "merge_operation_column": "op", "merge_delete_values": ["D"]}
    if partition_by:
        metadata["partition_by"] = partition_by

    @asset(key_prefix=["p"], name="orders", partitions_def=days, metadata=metadata)
    def orders(context: AssetExecutionContext, pyspark: PySparkResource):
        base = dt.datetime.fromisoformat(context.partition_key).replace(tzinfo=UTC)
        rows = [(i, base + dt.timedelta(hours=h), a, op) for i, h, a, op in ORDERS[context.partition_key]]
        return pyspark.spark_session.createDataFrame(rows, "id string, ts timestamp, amount long, op string")

    return orders


@pytest.mark.parametrize("partition_by", [["day(ts)"], None], ids=["day-partitioned", "unpartitioned-compacted"])
def test_a_partitioned_asset_merges_its_rows_by_key_into_its_slice_only(dagster_resources, warehouse, spark, duck, partition_by):
    """Key `a` exists on both days: the merge of 2024-01-02 updates, deletes and inserts there and never touches 2024-01-03.
    Unpartitioned and compacted, one file holds both days: the merge matches that file row by row inside the slice."""
    from lakehouse_assets import Lakehouse

    lh = Lakehouse(warehouse)
    orders = _orders_asset(partition_by)
    ORDERS.update({"2024-01-02": [("a", 1, 1, "U"), ("b", 2, 2, "U"), ("c", 3, 3, "U")], "2024-01-03": [("a", 1, 10, "U"), ("d", 2, 11, "U")]})
    for day in ORDERS:
        assert materialize([orders], resources=dagster_resources, partition_key=day).success
    if partition_by is None:
        assert lh.maintain("p.orders", "compaction", spark=spark)["files_added"] == 1
    ORDERS["2024-01-02"] = [("a", 4, 5, "U"), ("c", 3, 3, "D"), ("e", 5, 6, "U")]
    result = materialize([orders], resources=dagster_resources, partition_key="2024-01-02")
    assert result.success
    md = _metadata(result, ["p", "orders"])
    assert md["write_mode"] == "merge" and md["partition_slice"] == "ts in [2024-01-02 00:00:00+00:00, 2024-01-03 00:00:00+00:00)"

    def row(i, day, h, amount):  # columns sorted: amount, id, ts
        return (amount, i, dt.datetime(2024, 1, day, h).isoformat())

    expected = [row("a", 2, 4, 5), row("b", 2, 2, 2), row("e", 2, 5, 6), row("a", 3, 1, 10), row("d", 3, 2, 11)]
    assert_all_readers_agree(lh, spark, duck, "p.orders", expected)
    assert lh.history("p.orders")[0]["operation"] == "merge"
    # The same partition again (a retry, a re-run) leaves the same rows.
    assert materialize([orders], resources=dagster_resources, partition_key="2024-01-02").success
    assert_all_readers_agree(lh, spark, duck, "p.orders", expected)
    # An upsert outside the slice is refused naming it; nothing is committed.
    ORDERS["2024-01-02"] = [("f", 30, 7, "U")]  # hour 30: the next day
    before = lh.load("p.orders").current_snapshot().snapshot_id
    failed = materialize([orders], resources=dagster_resources, partition_key="2024-01-02", raise_on_error=False)
    error = str([e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"][0].event_specific_data.error)
    assert "Table p.orders: the merge into partition slice ts in [2024-01-02 00:00:00+00:00, 2024-01-03 00:00:00+00:00) has rows outside it" in error
    assert "ts=2024-01-03 06:00:00" in error and "nothing was committed" in error
    assert lh.load("p.orders").current_snapshot().snapshot_id == before


# ------------------------------------------------------------------ partition mappings on load_input


def test_load_input_reads_exactly_the_mapped_upstream_partitions(dagster_resources, warehouse, spark):
    from lakehouse_assets import Lakehouse

    VERSION["v"] = 1
    assert materialize([daily_sales], resources=dagster_resources, tags=_range_tags("2024-01-01", "2024-01-10")).success
    result = materialize([daily_sales, weekly_rolling], resources=dagster_resources, partition_key="2024-01-09", selection=AssetSelection.assets(weekly_rolling))
    assert result.success
    md = _metadata(result, ["p", "weekly_rolling"])
    assert md["days_read"] == ", ".join(f"2024-01-0{d}" for d in range(3, 10))  # 7 days: 3rd..9th, not the 1st, 2nd or 10th
    lh = Lakehouse(warehouse)
    assert [tuple(r) for r in lh.read(spark, "p.weekly_rolling").collect()] == [(dt.date(2024, 1, 9), 14, 7 * (10 + 11))]

    assert materialize([sales_by_region], resources=dagster_resources, tags=_range_tags("APAC", "US")).success
    assert materialize([sales_by_region, region_totals], resources=dagster_resources, selection=AssetSelection.assets(region_totals)).success
    assert sorted(tuple(r) for r in lh.read(spark, "p.region_totals").collect()) == [(r, 4) for r in REGIONS]


def test_demo_definitions_include_a_multi_partitioned_asset():
    from lakehouse_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    node = graph.get(AssetKey(["demo", "country_revenue"]))
    assert isinstance(node.partitions_def, MultiPartitionsDefinition)

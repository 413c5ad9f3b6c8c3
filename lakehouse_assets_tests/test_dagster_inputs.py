"""Downstream inputs as the type the asset asks for, narrowed by input metadata.

A pyarrow, pandas or Polars input is read by pyiceberg and pyarrow: no Spark job runs for it. Every input
type honours `columns`, `row_filter`, `snapshot_id`, `as_of` and `as_of_run`, and the partition mapping.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from dagster import AssetIn, DagsterInstance, DailyPartitionsDefinition, asset, materialize
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame as SparkDataFrame

from lakehouse_assets import Lakehouse
from lakehouse_assets.core.errors import SpecError

from .conftest import spark_jobs

SEEN: dict[str, object] = {}


@asset(key_prefix=["shop"])
def orders(pyspark: PySparkResource):
    return pyspark.spark_session.sql("SELECT id, IF(id % 2 = 0, 'eu', 'us') AS region, id * 10 AS amount FROM range(10)")


def _downstream(name: str, annotation, metadata: dict):
    """An asset that keeps what it was given and writes nothing (`-> None`)."""

    def body(orders) -> None:
        SEEN[name] = orders

    body.__annotations__["orders"] = annotation
    body.__name__ = name
    return asset(name=name, key_prefix=["shop"], ins={"orders": AssetIn(key=["shop", "orders"], metadata=metadata)})(body)


NARROW = {"columns": ["id", "amount"], "row_filter": "region = 'eu' and amount >= 40"}
EXPECTED = [(4, 40), (6, 60), (8, 80)]


def _rows(value) -> list[tuple]:
    if isinstance(value, SparkDataFrame):
        return sorted((r["id"], r["amount"]) for r in value.collect())
    if isinstance(value, pl.LazyFrame):
        value = value.collect()
    if isinstance(value, pl.DataFrame):
        value = value.to_arrow()
    if isinstance(value, pd.DataFrame):
        value = pa.Table.from_pandas(value, preserve_index=False)
    return sorted(zip(value["id"].to_pylist(), value["amount"].to_pylist()))


@pytest.mark.parametrize(
    "annotation,kind",
    [(pa.Table, pa.Table), (pd.DataFrame, pd.DataFrame), (pl.DataFrame, pl.DataFrame), (pl.LazyFrame, pl.LazyFrame), (SparkDataFrame, SparkDataFrame)],
    ids=["pyarrow", "pandas", "polars", "polars-lazy", "spark"],
)
@pytest.mark.smoke
def test_each_input_type_reads_the_projection_and_filter(dagster_resources, spark, annotation, kind):
    assert materialize([orders], resources=dagster_resources).success
    name = f"narrow_{kind.__module__.split('.')[0]}_{kind.__name__.lower()}"
    down = _downstream(name, annotation, NARROW)
    jobs = spark_jobs(spark)
    assert materialize([orders, down], selection=[down], resources=dagster_resources).success
    value = SEEN[name]
    assert isinstance(value, kind)
    assert _rows(value) == EXPECTED
    columns = value.collect_schema().names() if isinstance(value, pl.LazyFrame) else value.column_names if isinstance(value, pa.Table) else list(value.columns)
    assert columns == ["id", "amount"]
    if kind is SparkDataFrame:
        assert spark_jobs(spark) > jobs  # the tracker sees Spark jobs (this input's collect above)
    else:
        assert spark_jobs(spark) == jobs, "a non-Spark input started a Spark job"


def test_time_travel_inputs_by_snapshot_time_and_run(dagster_resources, spark, warehouse):
    first = materialize([orders], resources=dagster_resources, instance=DagsterInstance.ephemeral())
    lh = Lakehouse(warehouse)
    snapshot = lh.load("shop.orders").current_snapshot()
    at = dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.timezone.utc)
    assert materialize([orders], resources=dagster_resources).success  # appends the same ten rows again
    assert lh.read_arrow("shop.orders").num_rows == 20
    for key, value in (("snapshot_id", snapshot.snapshot_id), ("as_of", at.isoformat()), ("as_of_run", first.run_id)):
        name = f"travel_{key}"
        down = _downstream(name, pa.Table, {"columns": ["id", "amount"], key: value})
        assert materialize([orders, down], selection=[down], resources=dagster_resources).success
        assert SEEN[name].num_rows == 10, key
        spark_down = _downstream(name + "_spark", SparkDataFrame, {key: value})
        assert materialize([orders, spark_down], selection=[spark_down], resources=dagster_resources).success
        assert SEEN[name + "_spark"].count() == 10, key


def test_partitioned_input_reads_its_partition_without_spark(dagster_resources, spark):
    days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")

    @asset(key_prefix=["shop"], partitions_def=days, metadata={"partition_expr": "ts"})
    def visits(context, pyspark: PySparkResource):
        return pyspark.spark_session.sql(f"SELECT id, timestamp'{context.partition_key} 00:00:00' + make_interval(0, 0, 0, 0, id, 0, 0) AS ts FROM range(5)")

    @asset(key_prefix=["shop"], partitions_def=days, ins={"visits": AssetIn(key=["shop", "visits"])})
    def visit_count(visits: pa.Table) -> None:
        SEEN["visit_count"] = visits

    for day in ("2024-01-01", "2024-01-02"):
        assert materialize([visits], partition_key=day, resources=dagster_resources).success
    jobs = spark_jobs(spark)
    assert materialize([visits, visit_count], selection=[visit_count], partition_key="2024-01-02", resources=dagster_resources).success
    ts = SEEN["visit_count"]["ts"].to_pylist()
    assert len(ts) == 5 and {t.date() for t in ts} == {dt.date(2024, 1, 2)}
    assert spark_jobs(spark) == jobs


def test_polars_output_is_written(dagster_resources, warehouse):
    @asset(key_prefix=["shop"])
    def rates() -> pl.DataFrame:
        return pl.DataFrame({"currency": ["EUR", "USD"], "rate": [1.0, 1.1]})

    assert materialize([rates], resources=dagster_resources).success
    assert sorted(Lakehouse(warehouse).read_arrow("shop.rates")["currency"].to_pylist()) == ["EUR", "USD"]


@pytest.mark.parametrize(
    "metadata,message",
    [
        ({"snapshot_id": 1, "as_of_run": "abc"}, "give at most one of snapshot_id, as_of, as_of_run"),
        ({"columns": "id"}, "'columns' must be a list of column names"),
        ({"as_of": "yesterday"}, "'as_of' must be a datetime or ISO 8601 text"),
        ({"columns": ["id", "nope"]}, "has no column(s) ['nope']"),
        ({"as_of_run": "no-such-run"}, "no retained snapshot written by run no-such-run"),
    ],
)
def test_bad_input_metadata_is_a_clear_error(dagster_resources, metadata, message):
    assert materialize([orders], resources=dagster_resources).success
    down = _downstream("bad", pa.Table, metadata)
    result = materialize([orders, down], selection=[down], resources=dagster_resources, raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    text = str(failure.step_failure_data.error)
    assert message in text and "shop" in text, text
    assert SpecError.__name__ in text or "RetentionError" in text

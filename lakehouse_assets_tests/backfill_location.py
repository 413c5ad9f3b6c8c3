"""A code location as a team's backfill meets it: a daily-partitioned table asset over 16 days, one run per day
(`BackfillPolicy.multi_run`), each returning a pyarrow frame (no JVM in the run), with the blocking formats_agree
check. test_concurrent_writers.py serves it with `dagster dev` and backfills every day at once."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
from dagster import BackfillPolicy, DailyPartitionsDefinition, Definitions, asset, in_process_executor

from lakehouse_assets.dagster.checks import build_formats_agree_checks
from lakehouse_assets.dagster.io_manager import LakehouseIOManager
from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

DAYS = 16  # two waves of the run queue's 8 at a time: the second queues while the first commits
ROWS = 1_000
days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-17")  # 16 days: Jan 1 to Jan 16


def rows_of(day: dt.date) -> pa.Table:
    first = (day - dt.date(2024, 1, 1)).days * ROWS
    return pa.table({"id": pa.array(range(first, first + ROWS), pa.int64()), "day": pa.array([day] * ROWS, pa.date32()),
                     "value": pa.array([f"{day}-{i}" for i in range(ROWS)])})


@asset(key_prefix=["bf"], partitions_def=days, backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=1),
       metadata={"partition_by": ["day"], "partition_expr": "day"})
def daily_events(context) -> pa.Table:
    return rows_of(dt.date.fromisoformat(context.partition_key))


lakehouse = LakehouseResource(warehouse=os.environ["LAKEHOUSE_WAREHOUSE"])
pyspark = spark_resource()
defs = Definitions(
    assets=[daily_events],
    asset_checks=build_formats_agree_checks([daily_events.key]),
    executor=in_process_executor,  # the step in the run's process: one Python start per run, not two
    resources={"lakehouse": lakehouse, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark)},
)

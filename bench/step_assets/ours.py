"""A 10,000-row asset written by the lakehouse IO manager (both formats): one Dagster step, timed whole by bench/dagster_step.py."""

import os

from dagster import Definitions, asset

from lakehouse_assets import LakehouseIOManager, LakehouseResource
from lakehouse_assets.dagster.resources import spark_resource


@asset(key_prefix=["step"], required_resource_keys={"pyspark"}, metadata={"write_mode": "append"})
def events(context):
    spark = context.resources.pyspark.spark_session
    return spark.range(10_000).selectExpr("id", "id % 7 AS k", "cast(id AS string) AS s")


pyspark = spark_resource()
defs = Definitions(
    assets=[events],
    resources={"pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=LakehouseResource(warehouse=os.environ["STEP_WAREHOUSE"]), pyspark=pyspark)},
)

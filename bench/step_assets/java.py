"""The same 10,000-row asset written with Spark and the Java Iceberg runtime (`writeTo(...).append()`): the comparison
for bench/dagster_step.py."""

import os

from dagster import Definitions, asset


@asset(key_prefix=["step"])
def events() -> None:
    from pyspark.sql import SparkSession

    from lakehouse_assets_tests import java_iceberg

    builder = SparkSession.builder.master("local[2]").appName("step-java-iceberg")
    for key, value in java_iceberg.spark_conf(os.environ["STEP_WAREHOUSE"]).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    df = spark.range(10_000).selectExpr("id", "id % 7 AS k", "cast(id AS string) AS s")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS java.step")
    if spark.catalog.tableExists("java.step.events"):
        df.writeTo("java.step.events").append()
    else:
        df.writeTo("java.step.events").using("iceberg").create()


defs = Definitions(assets=[events])

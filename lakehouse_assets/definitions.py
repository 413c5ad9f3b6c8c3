"""The code location: `lakehouse_assets.definitions:defs`."""

from __future__ import annotations

import os

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from .dagster.checks import build_formats_agree_checks
from .dagster.demo_assets import (
    country_revenue,
    customer_changes,
    customers,
    daily,
    daily_user_activity,
    day_by_country,
    demo_assets,
    events,
    payments,
    payments_amounts_positive,
    payments_published,
)
from .dagster.foreign_commits import foreign_commits_sensor
from .dagster.io_manager import LakehouseIOManager
from .dagster.maintenance import maintenance_jobs, maintenance_schedules, maintenance_sensors
from .dagster.resources import LakehouseResource, spark_resource
from .dagster.rollback import lakehouse_rollback_job
from .dagster.schema_ops import lakehouse_alter_job

lakehouse = LakehouseResource(warehouse=os.environ.get("LAKEHOUSE_WAREHOUSE", "./warehouse"))
pyspark = spark_resource()

demo_customers_job = define_asset_job(
    "demo_customers_job",
    selection=AssetSelection.assets(customers, customer_changes),
    description="Merge the next CDC batch into the customer dimension, then append what it changed to the change log.",
)
demo_daily_job = define_asset_job(
    "demo_daily_job",
    selection=AssetSelection.assets(events, daily_user_activity),
    partitions_def=daily,
    description="One day of events and its daily aggregate (the main job).",
)

demo_country_job = define_asset_job(
    "demo_country_job",
    selection=AssetSelection.assets(country_revenue),
    partitions_def=day_by_country,
    description="Revenue per (country, date) partition; a range of partitions runs as one step and one commit.",
)

demo_payments_job = define_asset_job(
    "demo_payments_job",
    selection=AssetSelection.assets(payments, payments_published),
    description="Write-audit-publish: stage the payments batch on a branch, audit it, publish it if the blocking check passes.",
)

defs = Definitions(
    assets=[*demo_assets, payments_published],
    asset_checks=[*build_formats_agree_checks([a.key for a in demo_assets]), payments_amounts_positive],
    jobs=[demo_customers_job, demo_daily_job, demo_country_job, demo_payments_job, *maintenance_jobs, lakehouse_alter_job, lakehouse_rollback_job],
    schedules=maintenance_schedules,
    sensors=[*maintenance_sensors, foreign_commits_sensor],
    resources={
        "lakehouse": lakehouse,
        "pyspark": pyspark,
        "io_manager": LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark),
    },
    # One JVM for the whole run: Spark parallelises inside each step.
    executor=in_process_executor,
)

"""The demo's code location (`lakehouse_assets.definitions:defs`): the demo's assets and jobs, merged with
what `lakehouse_definitions` gives any project (resources, IO manager, checks, maintenance, rollback and
alter jobs, schedule, sensors)."""

from __future__ import annotations

import os

from dagster import AssetSelection, Definitions, define_asset_job

from .dagster.definitions_factory import lakehouse_definitions
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
from .dagster.resources import LakehouseResource, spark_resource

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

defs = Definitions.merge(
    lakehouse_definitions(assets=demo_assets, lakehouse=lakehouse, pyspark=pyspark),
    Definitions(
        assets=[payments_published],
        asset_checks=[payments_amounts_positive],
        jobs=[demo_customers_job, demo_daily_job, demo_country_job, demo_payments_job],
    ),
)

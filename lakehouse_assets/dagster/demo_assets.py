"""The demo: realistic, generated-in-Spark data (no network), three tables.

* demo.events              behavioural events, daily partitions, partitioned by day(event_time) and bucket(16, user_id)
* demo.customers           a customer dimension: a merge of CDC batches (inserts, updates, deletes)
* demo.daily_user_activity a daily aggregate of both
* demo.country_revenue     revenue per day and customer country: a multi-partitioned asset (date x country)
* demo.invoices            invoices under a data contract: rows that break it go to demo.invoices_quarantine

Generation is deterministic per partition, so re-running a day reproduces it exactly.
"""


import datetime as dt

from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetIn,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
    asset,
    asset_check,
)
from dagster_pyspark import PySparkResource

from .audit import publish_asset
from .resources import LakehouseResource
from .streaming import streaming_ingest_asset

DEMO_START = "2024-01-01"
daily = DailyPartitionsDefinition(start_date=DEMO_START, end_date="2024-03-01")
GROUP = "lakehouse_demo"
# Shown as icons on the asset graph: computed in Spark, stored as Iceberg and Delta.
KINDS = {"spark", "iceberg", "deltalake"}
N_USERS = 5_000
COUNTRIES = ("BR", "DE", "FR", "GB", "IN", "JP", "US")  # the customers' countries (customer_cdc_batch)
day_by_country = MultiPartitionsDefinition({"date": daily, "country": StaticPartitionsDefinition(list(COUNTRIES))})
EVENTS_PER_DAY = 40_000


def _day_seed(day: str) -> int:
    return (dt.date.fromisoformat(day) - dt.date.fromisoformat(DEMO_START)).days


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    partitions_def=daily,
    metadata={
        "partition_by": ["day(event_time)", "bucket(16, user_id)"],
        "partition_expr": "event_time",
        "write_mode": "append",
    },
    description="Behavioural events (page views, clicks, purchases), one day per partition.",
)
def events(context: AssetExecutionContext, pyspark: PySparkResource):
    from pyspark.sql import functions as F

    spark = pyspark.spark_session
    day = context.partition_key
    seed = _day_seed(day)
    start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc)
    ids = spark.range(0, EVENTS_PER_DAY, numPartitions=4)
    h = lambda salt: F.abs(F.hash(F.col("id"), F.lit(seed), F.lit(salt)))  # noqa: E731 - deterministic pseudo-random
    kinds = F.array(*[F.lit(k) for k in ("page_view", "page_view", "page_view", "click", "click", "add_to_cart", "purchase")])
    devices = F.array(*[F.lit(d) for d in ("mobile", "desktop", "tablet")])
    return ids.select(
        (F.lit(seed) * EVENTS_PER_DAY + F.col("id")).alias("event_id"),
        (h(1) % N_USERS).cast("long").alias("user_id"),
        (F.lit(start) + F.make_interval(secs=(h(2) % 86_400_000_000).cast("decimal(18,6)") / 1_000_000)).alias("event_time"),
        F.element_at(kinds, (h(3) % 7 + 1).cast("int")).alias("event_type"),
        F.concat(F.lit("/product/"), (h(4) % 500).cast("string")).alias("page"),
        F.element_at(devices, (h(5) % 3 + 1).cast("int")).alias("device"),
        F.when(h(6) % 7 == 0, (h(7) % 20000 / 100).cast("decimal(10,2)")).alias("revenue"),
        F.struct(
            F.concat_ws(".", (h(8) % 256).cast("string"), (h(9) % 256).cast("string"), F.lit("0"), F.lit("1")).alias("ip"),
            F.element_at(F.array(F.lit("chrome"), F.lit("firefox"), F.lit("safari")), (h(10) % 3 + 1).cast("int")).alias("browser"),
        ).alias("context"),
    )


CDC_NEW_PER_BATCH = 50


def customer_cdc_batch(spark, batch: int):
    """CDC batch number `batch` of the customer dimension (deterministic).

    Batch 0 inserts N_USERS customers. Every later batch updates ~5% of the customers (new country,
    segment, email), deletes ~0.5%, inserts CDC_NEW_PER_BATCH new ones, and repeats ~10% of its updates
    with an older `updated_at` and stale values: the merge keeps the newest row per customer.
    """
    from pyspark.sql import functions as F

    h = lambda salt: F.abs(F.hash(F.col("id"), F.lit(batch), F.lit(salt)))  # noqa: E731 - deterministic pseudo-random
    countries = F.array(*[F.lit(c) for c in ("US", "DE", "FR", "GB", "BR", "IN", "JP")])  # order fixes the data; see COUNTRIES
    segments = F.array(F.lit("consumer"), F.lit("smb"), F.lit("enterprise"))
    known = N_USERS + max(0, batch - 1) * CDC_NEW_PER_BATCH  # customers that existed before this batch
    ids = spark.range(0, N_USERS if batch == 0 else known + CDC_NEW_PER_BATCH, numPartitions=2)
    if batch == 0:
        ops = ids.withColumn("op", F.lit("I"))
    else:
        op = (F.when(F.col("id") >= known, "I").when(h(0) % 200 == 7, "D").when(h(0) % 100 < 5, "U"))
        ops = ids.withColumn("op", op).filter(F.col("op").isNotNull())
    at = F.lit(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)) + F.make_interval(days=F.lit(batch))
    rows = ops.select(
        F.col("id").alias("customer_id"),
        F.concat(F.lit("customer-"), F.col("id").cast("string")).alias("name"),
        F.concat(F.lit("user"), F.col("id").cast("string"), F.lit("+"), F.lit(batch).cast("string"), F.lit("@example.com")).alias("email"),
        F.element_at(countries, (h(1) % 7 + 1).cast("int")).alias("country"),
        F.element_at(segments, (h(2) % 3 + 1).cast("int")).alias("segment"),
        (F.lit(dt.datetime(2023, 1, 1, tzinfo=dt.timezone.utc)) + F.make_interval(days=(F.abs(F.hash(F.col("id"))) % 365).cast("int"))).alias("signup_time"),
        at.alias("updated_at"),
        F.col("op"),
    )
    stale = rows.filter((F.col("op") == "U") & (h(3) % 10 == 0)).select(
        "customer_id", "name", F.lit("stale@example.com").alias("email"), F.lit("XX").alias("country"), "segment", "signup_time",
        (F.col("updated_at") - F.expr("INTERVAL 1 HOUR")).alias("updated_at"), "op",
    )
    return rows.unionByName(stale)


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    metadata={
        "partition_by": ["country"],
        "write_mode": "merge",
        "merge_keys": ["customer_id"],
        "merge_operation_column": "op",
        "merge_delete_values": ["D"],
        "merge_order_by": ["updated_at"],
    },
    description="Customer dimension: each materialization merges the next CDC batch (inserts, updates, deletes).",
)
def customers(context: AssetExecutionContext, pyspark: PySparkResource, lakehouse: LakehouseResource):
    from ..core.errors import TableNotFound

    try:
        batch = len(lakehouse.get().load("demo.customers").snapshots())  # one snapshot per merged batch
    except TableNotFound:
        batch = 0
    context.log.info(f"customers: merging CDC batch {batch}")
    return customer_cdc_batch(pyspark.spark_session, batch)


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    partitions_def=daily,
    ins={"events": AssetIn(key=["demo", "events"]), "customers": AssetIn(key=["demo", "customers"])},
    metadata={"partition_by": ["day(activity_date)"], "partition_expr": "activity_date"},
    description="Per day, country and segment: active users, events, purchases and revenue.",
)
def daily_user_activity(context: AssetExecutionContext, events, customers):
    from pyspark.sql import functions as F

    joined = events.join(customers, events.user_id == customers.customer_id, "left")
    return joined.groupBy(
        F.to_date("event_time").alias("activity_date"),
        F.coalesce("country", F.lit("unknown")).alias("country"),
        F.coalesce("segment", F.lit("unknown")).alias("segment"),
    ).agg(
        F.countDistinct("user_id").alias("active_users"),
        F.count("*").alias("events"),
        F.sum(F.when(F.col("event_type") == "purchase", 1).otherwise(0)).alias("purchases"),
        F.sum("revenue").alias("revenue"),
    )


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    partitions_def=day_by_country,
    # A backfill of many (date, country) partitions runs as one step and commits once.
    backfill_policy=BackfillPolicy.single_run(),
    ins={"events": AssetIn(key=["demo", "events"]), "customers": AssetIn(key=["demo", "customers"])},
    metadata={"partition_by": ["country"], "partition_expr": {"date": "day", "country": "country"}},
    description="Revenue and purchases per day and customer country; one partition per (date, country).",
)
def country_revenue(context: AssetExecutionContext, events, customers):
    from pyspark.sql import functions as F

    # `events` holds the partitions' days (the date dimension maps to the daily events), `customers` all customers.
    countries = sorted({k.keys_by_dimension["country"] for k in context.partition_keys})
    buyers = customers.filter(F.col("country").isin(countries)).select("customer_id", "country")
    purchases = events.filter(F.col("event_type") == "purchase").join(buyers, events.user_id == buyers.customer_id)
    return purchases.groupBy(F.to_date("event_time").alias("day"), "country").agg(
        F.count("*").alias("purchases"), F.countDistinct("user_id").alias("buyers"), F.sum("revenue").alias("revenue")
    )


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    # Only the rows changed since this asset last ran, once: the consumed snapshot is recorded in this table's commit.
    ins={"customers": AssetIn(key=["demo", "customers"], metadata={"changes": True})},
    metadata={"write_mode": "append"},
    description="The customer dimension's change log: every row each CDC merge inserted, updated or deleted, appended once.",
)
def customer_changes(customers):
    return customers.select("customer_id", "country", "segment", "_change_type", "_commit_snapshot_id", "_commit_version", "_commit_timestamp")


PAYMENTS_BATCH_TAG = "demo/payments_batch"  # a number, or "bad": a batch with negative amounts


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    metadata={"audit": True},
    description="Payments, written with write-audit-publish: staged on a branch, published to main and Delta only "
    "when the blocking check passes (demo/payments_published).",
)
def payments(context: AssetExecutionContext, pyspark: PySparkResource):
    from pyspark.sql import functions as F

    batch = context.run.tags.get(PAYMENTS_BATCH_TAG, "1")
    first = 1_000 * (int(batch) if batch.isdigit() else 9)
    df = pyspark.spark_session.range(first, first + 1_000).select(
        F.col("id").alias("payment_id"), (F.col("id") % 997).alias("customer_id"), ((F.col("id") % 500) / 4 + 1).alias("amount")
    )
    # A bad batch: a refund run that booked a few amounts negative.
    return df.withColumn("amount", F.when(F.col("payment_id") % 100 == 0, -F.col("amount")).otherwise(F.col("amount"))) if batch == "bad" else df


@asset_check(asset=payments, blocking=True, description="No payment has a negative amount: otherwise nothing is published.")
def payments_amounts_positive(payments) -> AssetCheckResult:
    negative = payments.filter("amount < 0").count()
    return AssetCheckResult(passed=negative == 0, metadata={"negative_amounts": negative, "rows_audited": payments.count()})


payments_published = publish_asset(payments, group_name=GROUP)

INVOICES = 2_000
INVOICE_COLUMNS = TableSchema(
    columns=[
        TableColumn("invoice_id", "bigint", constraints=TableColumnConstraints(nullable=False, unique=True)),
        TableColumn("customer_id", "bigint", constraints=TableColumnConstraints(nullable=False)),
        TableColumn("amount", "double"),
        TableColumn("currency", "string"),
    ]
)


@asset(
    key_prefix=["demo"],
    group_name=GROUP,
    kinds=KINDS,
    metadata={
        "dagster/column_schema": INVOICE_COLUMNS,
        "contract": {
            "rules": {"amount_positive": "amount > 0", "known_currency": "currency IN ('EUR', 'USD', 'GBP')"},
            "new_columns": "freeze",
            "on_violation": "quarantine",
        },
    },
    description="Invoices under a data contract: each rule is an asset check; rows that break one go to demo/invoices_quarantine.",
)
def invoices(pyspark: PySparkResource):
    from pyspark.sql import functions as F

    ids = pyspark.spark_session.range(0, INVOICES, numPartitions=2)
    # An export with a few credit notes booked as negative invoices and a few in a currency nobody bills in.
    amount = F.when(F.col("id") % 250 == 0, -F.lit(10.0)).otherwise((F.col("id") % 300) / 2 + 5)
    currency = F.when(F.col("id") % 400 == 7, "XXX").otherwise(F.element_at(F.array(F.lit("EUR"), F.lit("USD"), F.lit("GBP")), (F.col("id") % 3 + 1).cast("int")))
    return ids.select(F.col("id").alias("invoice_id"), (F.col("id") % 997).alias("customer_id"), amount.alias("amount"), currency.alias("currency"))

# Orders exported as JSON files into a landing folder, streamed in (availableNow): each run ingests the new files once.
ORDER_SCHEMA = "order_id long, customer_id long, amount decimal(10,2), ordered_at timestamp"
landed_orders = streaming_ingest_asset(
    "landed_orders",
    key_prefix=["demo"],
    group_name=GROUP,
    table="demo.landed_orders",
    landing="{warehouse}/_landing/orders",
    schema=ORDER_SCHEMA,
    max_files_per_batch=2,
)

demo_assets = [events, customers, customer_changes, daily_user_activity, country_revenue, payments, landed_orders, invoices]

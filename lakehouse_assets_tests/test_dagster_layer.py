"""The Dagster layer: IO manager, time-window partitions, load_input, output metadata, blocking checks."""

import datetime as dt

import pytest
from dagster import AssetExecutionContext, AssetIn, AssetSelection, DailyPartitionsDefinition, asset, in_process_executor, materialize
from dagster_pyspark import PySparkResource
from pyspark.sql import functions as F

from lakehouse_assets.dagster.checks import build_formats_agree_checks
from lakehouse_assets.dagster.io_manager import LakehouseIOManager, table_identifier
from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

from .conftest import materialization_metadata as _metadata
from .conftest import unreadable_delta_log

days = DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-10")


@asset(key_prefix=["shop"], partitions_def=days, metadata={"partition_by": ["day(ts)", "bucket(4, user_id)"], "partition_expr": "ts"})
def clicks(context: AssetExecutionContext, pyspark: PySparkResource):
    start = dt.datetime.fromisoformat(context.partition_key).replace(tzinfo=dt.timezone.utc)
    spark = pyspark.spark_session
    return spark.range(0, 240).select(
        F.col("id").alias("click_id"),
        (F.col("id") % 13).alias("user_id"),
        (F.lit(start) + F.make_interval(mins=(F.col("id") * 6).cast("int"))).alias("ts"),
    )


@asset(key_prefix=["shop"], metadata={"write_mode": "overwrite"})
def users(pyspark: PySparkResource):
    return pyspark.spark_session.range(0, 13).select(F.col("id").alias("user_id"), F.concat(F.lit("u"), F.col("id")).alias("name"))


@asset(
    key_prefix=["shop"],
    partitions_def=days,
    ins={"clicks": AssetIn(key=["shop", "clicks"]), "users": AssetIn(key=["shop", "users"])},
    metadata={"partition_expr": "day"},
)
def clicks_per_user(context: AssetExecutionContext, clicks, users):
    context.add_output_metadata({"upstream_clicks_rows": clicks.count()})
    return clicks.join(users, "user_id").groupBy(F.to_date("ts").alias("day"), "name").count()


@asset(key_prefix=["shop"])
def small_pyarrow():
    import pyarrow as pa

    return pa.table({"k": [1, 2], "v": ["x", "y"]})


ASSETS = [clicks, users, clicks_per_user, small_pyarrow]


def test_table_identifier_from_asset_key():
    from dagster import AssetKey

    assert table_identifier(AssetKey(["demo", "events"])) == "demo.events"
    assert table_identifier(AssetKey(["a", "b", "c"])) == "a.b.c"
    assert table_identifier(AssetKey(["solo"])) == "default.solo"


@pytest.mark.smoke
def test_materialize_partitions_metadata_checks_and_load_input(dagster_resources, warehouse, spark, duck):
    from lakehouse_assets import Lakehouse

    checks = build_formats_agree_checks([a.key for a in ASSETS])
    users_result = materialize([users, small_pyarrow, *checks[1:2], *checks[3:]], resources=dagster_resources)
    assert users_result.success
    for day in ("2024-01-01", "2024-01-02"):
        result = materialize(
            [clicks, clicks_per_user, users, *checks[:1], *checks[2:3]],
            resources=dagster_resources,
            partition_key=day,
            selection=AssetSelection.assets(clicks, clicks_per_user),  # their checks come along
        )
        assert result.success
        md = _metadata(result, ["shop", "clicks"])
        assert md["dagster/row_count"] == 240 and md["files_added"] >= 1 and md["bytes_added"] > 0
        assert isinstance(md["iceberg_snapshot_id"], int) and isinstance(md["delta_version"], int)
        assert md["table_location"].endswith("/shop/clicks") and md["write_mode"] == "overwrite"
        assert md["iceberg_commit_seconds"] >= 0 and md["delta_commit_seconds"] >= 0
        evaluations = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert len(evaluations) == 2 and all(e.passed for e in evaluations)
        # load_input handed the downstream asset only its partition: 240 clicks over 13 users.
        assert _metadata(result, ["shop", "clicks_per_user"])["upstream_clicks_rows"] == 240
    lh = Lakehouse(warehouse)
    assert lh.read(spark, "shop.clicks").count() == 480
    assert lh.read(spark, "shop.clicks_per_user").agg(F.sum("count")).first()[0] == 480
    assert lh.read(spark, "shop.small_pyarrow").count() == 2
    # Re-running a partition replaces exactly its window.
    again = materialize([clicks], resources=dagster_resources, partition_key="2024-01-02")
    assert again.success and lh.read(spark, "shop.clicks").count() == 480
    history = lh.history("shop.clicks")
    assert history[0]["operation"] == "overwrite-window" and history[0]["writer"]["partition"] == "2024-01-02"
    assert history[0]["writer"]["dagster_run_id"] == again.run_id
    for name in ("shop.clicks", "shop.users", "shop.clicks_per_user", "shop.small_pyarrow"):
        assert lh.verify(name)["agree"]


@pytest.mark.smoke
def test_check_fails_and_shows_the_difference(dagster_resources, warehouse, spark):

    from lakehouse_assets import Lakehouse

    checks = build_formats_agree_checks([users.key])
    assert materialize([users, *checks], resources=dagster_resources).success
    lh = Lakehouse(warehouse)
    with unreadable_delta_log(lh.load("shop.users").location()):
        result = materialize([users, *checks], resources=dagster_resources, raise_on_error=False)
    evaluation = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"][0]
    assert not evaluation.passed
    assert "Delta" in evaluation.metadata["differences"].value


def test_time_partitioned_asset_without_partition_expr_is_a_clear_error(dagster_resources):
    @asset(key_prefix=["shop"], partitions_def=days)
    def no_expr(context: AssetExecutionContext, pyspark: PySparkResource):
        return pyspark.spark_session.range(3).select(F.current_timestamp().alias("ts"))

    result = materialize([no_expr], resources=dagster_resources, partition_key="2024-01-01", raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "has no 'partition_expr' metadata" in str(failure.event_specific_data.error)


@pytest.mark.smoke
def test_code_location_loads_and_jobs_resolve():
    from lakehouse_assets.definitions import defs

    assert {j for j in ("demo_customers_job", "demo_daily_job")} <= {j.name for j in defs.resolve_all_job_defs()}
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"demo/events", "demo/customers", "demo/daily_user_activity"} <= keys
    assert defs.resolve_job_def("demo_daily_job").executor_def is in_process_executor


def test_a_code_location_with_the_io_manager_loads_without_the_core():
    """Every Dagster process loads the code location (daemon, webserver, each run's worker); the lakehouse core,
    dagster-aws and boto3 are imported only where a run uses a table or S3Resource."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dagster import Definitions, asset\n"
        "from lakehouse_assets import LakehouseIOManager, LakehouseResource\n"
        "from lakehouse_assets.dagster.resources import spark_resource\n"
        "@asset\n"
        "def t(): ...\n"
        "pyspark = spark_resource()\n"
        "Definitions(assets=[t], resources={'io_manager': LakehouseIOManager(lakehouse=LakehouseResource(warehouse='w'), pyspark=pyspark)})\n"
        "heavy = ('lakehouse_assets.core.lakehouse', 'pyiceberg.table', 'pyiceberg.io.pyarrow', 'dagster_aws', 'boto3')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("location", ["factory", "demo"])
def test_a_code_location_loads_without_catalogs_delta_or_pyiceberg_tables(location):
    """`lakehouse_definitions` (checks, maintenance jobs, sensors) builds its jobs' config from the operation registry
    alone: the catalogs (SQLAlchemy), delta-rs, the table context and pyiceberg's table and pyarrow FileIO modules (which
    bring pyarrow.dataset and pandas) load only when a run or a tick touches a table. So does the demo's code location."""
    import subprocess
    import sys

    load = {
        "factory": (
            "from dagster import asset\n"
            "from lakehouse_assets import LakehouseResource, MergeOptions, lakehouse_definitions\n"
            "@asset\n"
            "def t(): ...\n"
            "lakehouse_definitions([t], LakehouseResource(warehouse='w'))\n"
        ),
        "demo": "import lakehouse_assets.definitions\n",
    }[location]
    code = (
        "import sys\n" + load +
        "heavy = ('lakehouse_assets.core.table.context', 'pyiceberg.catalog.sql', 'sqlalchemy', 'deltalake', 'dagster_aws', 'boto3',\n"
        "         'pyiceberg.table', 'pyiceberg.io.pyarrow', 'pyarrow.dataset', 'pandas')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_spark_config_can_point_at_a_cluster(monkeypatch):
    from lakehouse_assets.dagster.resources import spark_config

    monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", '{"spark.executor.memory": "8g", "spark.sql.shuffle.partitions": "400"}')
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "spark://10.0.0.5:7077")
    config = spark_config({"spark.app.name": "nightly"})
    assert config["spark.master"] == "spark://10.0.0.5:7077"
    assert config["spark.executor.memory"] == "8g" and config["spark.sql.shuffle.partitions"] == "400"
    assert config["spark.app.name"] == "nightly" and config["spark.sql.session.timeZone"] == "UTC"
    monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", "not json")
    with pytest.raises(ValueError, match="LAKEHOUSE_SPARK_CONF must be a JSON object"):
        spark_config()

"""The formats-agree check compares what each file means, and catches each kind of planted divergence.

Each plant rewrites the Delta log with delta-rs (as a buggy mirror would have): same files, same
transaction tag (so Delta does not look stale), but the partition values or stats of bugs 1-3.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from deltalake.transaction import AddAction, CommitProperties, Transaction, create_table_with_add_actions

from lakehouse_assets import TableOptions
from lakehouse_assets.cli import cli
from lakehouse_assets.core.formats.delta import actions as delta_actions
from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer
from lakehouse_assets.core.io.storage import relative_to
from lakehouse_assets.core.properties import DELTA_APP_ID as APP_ID
from lakehouse_assets.core.schema.spec import delta_partition_columns, statistics_policy
from lakehouse_assets.core.schema.type_mapping import delta_schema

from .test_edge_values import local


def plant_delta_log(lh, identifier, partition_values=None, stats=None, drop_paths=()):
    """Replace the Delta log by one commit holding the live Iceberg files with planted partition values/stats.

    `partition_values(data_file, correct) -> dict` and `stats(data_file, correct: dict) -> dict` return what to write.
    """
    table = lh.load(identifier)
    root = table.location()
    schema = table.schema()
    adds = []
    for f in iceberg_committer.live_data_files(table):
        path = relative_to(root, f.file_path)
        if path in drop_paths:
            continue
        try:
            pv = delta_actions.delta_partition_values(table.spec(), schema, f)
        except ValueError:
            pv = None
        st = json.loads(delta_actions.delta_stats(schema, f, statistics_policy(table)))
        pv = partition_values(f, pv) if partition_values else pv
        st = stats(f, st) if stats else st
        adds.append(AddAction(path, f.file_size_in_bytes, pv, 0, True, json.dumps(st)))
    shutil.rmtree(local(root) + "/_delta_log", ignore_errors=True)
    create_table_with_add_actions(
        root,
        delta_schema(schema),
        adds,
        mode="error",
        partition_by=delta_partition_columns(table.spec(), schema) or None,
        commit_properties=CommitProperties(app_transactions=[Transaction(APP_ID, table.current_snapshot().sequence_number)]),
    )


def differences(report) -> str:
    assert not report["agree"]
    assert report["delta_lag_snapshots"] == 0  # the plant is not seen as a lagging mirror: only the meaning differs
    return " | ".join(report["differences"])


def test_a_correct_table_agrees_deeply(lh, spark, warehouse):
    df = spark.sql(
        "SELECT id, CAST(id % 3 AS STRING) AS g, DATE'0001-01-01' + CAST(id AS INT) AS d, TIMESTAMP_NTZ'9999-12-31 23:59:59.999999' AS top, "
        "named_struct('a', id, 'b', array(id, NULL)) AS nested, CAST(NULL AS STRING) AS nothing FROM range(30)"
    )
    lh.write(df, "v.ok", partition_by=["g", "d"])
    report = lh.verify("v.ok", deep=True)
    assert report["agree"], report["differences"]
    assert report["content"]["partitions"] == 30 and report["content"]["row_hash"]
    result = CliRunner().invoke(cli, ["--warehouse", warehouse, "verify", "v.ok", "--deep", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["content"]["partitions"] == 30
    maintenance = lh.maintain("v.ok", "verify_deep")
    assert maintenance["agree"] and maintenance["content"]["partitions"] == 30


def test_bug1_top_of_range_timestamp_stat_clamped_below_the_value(lh, spark):
    lh.write(spark.sql("SELECT TIMESTAMP_NTZ'9999-12-31 23:59:59.999999' AS ts, 1 AS k"), "v.top")
    assert lh.verify("v.top")["agree"]

    def clamp(f, st):
        # A max below the real maximum's millisecond (the protocol's truncation to .999 is a valid max: readers widen it).
        st["minValues"]["ts"] = st["maxValues"]["ts"] = "9999-12-31T23:59:59.998"
        return st

    plant_delta_log(lh, "v.top", stats=clamp)
    assert "Delta max of 'ts' is" in differences(lh.verify("v.top"))
    # ...and bug 1 as it happened (the mirror failed: Delta lacks the file) is caught too.
    path = relative_to(lh.load("v.top").location(), iceberg_committer.live_data_files(lh.load("v.top"))[0].file_path)
    plant_delta_log(lh, "v.top", drop_paths={path})
    assert "live only in Iceberg" in differences(lh.verify("v.top"))


def test_bug2_empty_string_partition_value_read_as_null(lh, spark):
    # Iceberg holds '' (allowed for an Iceberg-only table); the planted Delta log spells it "" (NULL to Delta).
    df = spark.sql("SELECT CASE id WHEN 0 THEN '' WHEN 1 THEN 'eu' END AS region, id AS k FROM range(2)")  # nullable, as "" needs
    lh.write(df, "v.empty", partition_by=["region"], table=TableOptions(formats=["iceberg"]))
    table = lh.load("v.empty")
    with table.transaction() as tx:
        tx.set_properties({"lakehouse.formats": "iceberg,delta"})

    def spell(f, pv):
        return {"region": f.partition[0]}

    plant_delta_log(lh, "v.empty", partition_values=spell)
    found = differences(lh.verify("v.empty"))
    assert "unrepresentable partition value" in found and "'region' is ''" in found
    deep = differences(lh.verify("v.empty", deep=True))
    assert "row counts per partition differ" in deep and "the rows differ" in deep


def test_bug3_unpadded_years_in_partition_values_and_stats(lh, spark):
    df = spark.sql("SELECT DATE'0001-01-01' AS d, TIMESTAMP'0010-05-06 07:08:09' AS ts, 1 AS k")
    lh.write(df, "v.ancient", partition_by=["d"])
    assert lh.verify("v.ancient", deep=True)["agree"]

    plant_delta_log(lh, "v.ancient", partition_values=lambda f, pv: {"d": "1-01-01"})
    assert "partition value spelling" in differences(lh.verify("v.ancient"))

    def unpadded(f, st):
        st["minValues"]["ts"] = "10-05-06T07:08:09.000Z"
        st["maxValues"]["ts"] = "10-05-06T07:08:09.000Z"
        return st

    plant_delta_log(lh, "v.ancient", stats=unpadded)
    assert "Delta min of 'ts' is missing or unreadable, expected '0010-05-06T07:08:09.000Z'" in differences(lh.verify("v.ancient"))


def test_wrong_null_count(lh, spark):
    lh.write(spark.sql("SELECT id, IF(id = 0, NULL, id) AS x FROM range(5)").coalesce(1), "v.counts")

    def wrong(f, st):
        st["nullCount"]["x"] = 0
        return st

    plant_delta_log(lh, "v.counts", stats=wrong)
    assert "null count difference" in differences(lh.verify("v.counts"))


@pytest.mark.parametrize("planted", ["eu", None])
def test_wrong_partition_value(lh, spark, planted):
    lh.write(spark.sql("SELECT IF(id >= 0, 'us', NULL) AS region, id AS k FROM range(1)"), "v.region", partition_by=["region"])
    plant_delta_log(lh, "v.region", partition_values=lambda f, pv: {"region": planted})
    found = differences(lh.verify("v.region"))
    assert "partition value difference" in found and "'region' is 'us' in Iceberg" in found


@pytest.mark.parametrize("term", ["month(ts)", "day(d)", "truncate(10, i)", "ts"])
def test_verify_refuses_a_partition_record_that_is_not_the_rows_partition(lh, spark, monkeypatch, term):
    """Planted divergence: a writer whose partition values are off by one (as year/month computed under a non-UTC
    Spark session time zone once were). Both logs hold the same files and rows, yet Iceberg readers pruning by the
    record miss rows Delta readers see: the formats-agree check must say so."""
    from pyspark.sql import functions as F

    from lakehouse_assets.core.schema import partition_columns as pc_module

    name = f"vd.record_{''.join(ch for ch in term if ch.isalnum())}"
    df = spark.sql("SELECT CAST(id AS INT) AS i, DATE_ADD(DATE'2024-01-10', CAST(id AS INT)) AS d, "
                   "TIMESTAMP'2024-01-10 00:00:00+00:00' + make_interval(0, 0, 0, CAST(id AS INT), 0, 0, 0) AS ts FROM range(4)")
    lh.write(df, name + "_ok", partition_by=[term])
    assert lh.verify(name + "_ok")["agree"]
    real = pc_module.partition_columns
    if term == "ts":
        shifted = lambda schema, spec: [F.col("ts") + F.expr("INTERVAL 1 DAY")]  # noqa: E731
    else:
        shifted = lambda schema, spec: [e + 1 for e in real(schema, spec)]  # noqa: E731
    monkeypatch.setattr(pc_module, "partition_columns", shifted)
    lh.write(df, name, partition_by=[term])
    report = lh.verify(name)
    assert not report["agree"] and any("partition record" in d for d in report["differences"]), report["differences"]

"""Rollback of both formats in one step: the rows of an earlier point, as one new commit in each format.

The point is named by an Iceberg snapshot, a Delta version, a time or a Dagster run. Every reader of
both formats then sees the target's rows, history is kept (time travel before the rollback still works),
and later writes, merges and compactions go on as usual. What cannot be given back exactly is refused
with nothing changed.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable

from lakehouse_assets import Lakehouse, MergeOptions, Slice, TableOptions
from lakehouse_assets.core.errors import RetentionError, SchemaError, SpecError

from .conftest import assert_all_readers_agree, rows_of
from .test_cli import run
from .test_edge_values import local

BASE = "SELECT id, id % 3 AS g, concat('v', id) AS v FROM range({lo}, {hi})"


def _rows(lh, identifier):
    return rows_of(lh.read_arrow(identifier).to_pylist(), ["g", "id", "v"])


def _history(lh, spark, name):
    """Three commits after the first one: an append, a merge, an overwrite of one partition's rows."""
    first = lh.write(spark.sql(BASE.format(lo=0, hi=9)), name, partition_by=["g"])
    expected = _rows(lh, name)
    lh.write(spark.sql(BASE.format(lo=9, hi=12)), name)
    lh.write(spark.sql("SELECT id, id % 3 AS g, 'merged' AS v FROM range(0, 3)"), name, mode="merge", merge=MergeOptions(keys=["id"]))
    lh.write(spark.sql("SELECT 100 AS id, 0 AS g, 'only' AS v"), name, mode="overwrite", window=_slice_g0())
    return first, expected


def _slice_g0():
    return Slice(values={"g": [0]})


@pytest.mark.smoke
def test_rollback_by_snapshot_gives_both_formats_the_old_rows_as_a_new_commit(lh, spark, duck):
    first, expected = _history(lh, spark, "rb.snap")
    before = lh.history("rb.snap")
    result = lh.rollback("rb.snap", snapshot_id=first.iceberg_snapshot_id)
    assert not result.delta_lagging and result.mode == "rollback"
    rows = assert_all_readers_agree(lh, spark, duck, "rb.snap")
    assert rows == rows_of([{"id": i, "g": i % 3, "v": f"v{i}"} for i in range(9)], ["g", "id", "v"]) == expected
    # A forward commit in each format, naming its target; earlier history kept and readable.
    after = lh.history("rb.snap")
    assert [h["operation"] for h in after] == ["rollback"] + [h["operation"] for h in before]
    assert after[0]["delta_version"] == before[0]["delta_version"] + 1
    commit = [c for c in DeltaTable(lh.load("rb.snap").location()).history() if c["version"] == after[0]["delta_version"]][0]
    assert commit["lakehouse.rollback.target-snapshot-id"] == str(first.iceberg_snapshot_id)
    assert len(lh.read_arrow("rb.snap", snapshot_id=before[0]["iceberg_snapshot_id"])) == 9  # 12 rows, less the 4 of g = 0, plus 'only'
    assert len(lh.read(spark, "rb.snap", delta_version=before[0]["delta_version"]).collect()) == 9
    # No data file was written: every live file is one the first snapshot wrote.
    assert {t.file.file_path for t in lh.load("rb.snap").scan().plan_files()} == {
        t.file.file_path for t in lh.load("rb.snap").scan(snapshot_id=first.iceberg_snapshot_id).plan_files()
    }


def test_rollback_by_delta_version_time_and_then_every_operation_goes_on(lh, spark, duck):
    first, expected = _history(lh, spark, "rb.more")
    table = lh.load("rb.more")
    merged = [h for h in lh.history("rb.more") if h["operation"] == "merge"][0]
    lh.rollback("rb.more", delta_version=merged["delta_version"])
    at_merge = rows_of(lh.read_arrow("rb.more", snapshot_id=merged["iceberg_snapshot_id"]).to_pylist(), ["g", "id", "v"])
    assert assert_all_readers_agree(lh, spark, duck, "rb.more") == at_merge

    when = dt.datetime.fromtimestamp(table.snapshot_by_id(first.iceberg_snapshot_id).timestamp_ms / 1000, dt.timezone.utc)
    lh.rollback("rb.more", as_of=when)
    assert assert_all_readers_agree(lh, spark, duck, "rb.more") == expected
    # Writes, merges and compaction after a rollback.
    lh.write(spark.sql(BASE.format(lo=50, hi=52)), "rb.more")
    lh.write(spark.sql("SELECT 1 AS id, 1 AS g, 'again' AS v"), "rb.more", mode="merge", merge=MergeOptions(keys=["id"]))
    report = lh.maintain("rb.more", "compaction", spark=spark)
    assert report is not None
    rows = assert_all_readers_agree(lh, spark, duck, "rb.more")
    assert len(rows) == 11 and (1, 1, "again") in rows


def test_rollback_to_a_dagster_run_through_the_job_and_the_cli(dagster_resources, spark, warehouse):
    from dagster import asset, materialize

    from lakehouse_assets.dagster.rollback import lakehouse_rollback_job, rollback_run_config

    @asset(key_prefix=["rb"])
    def runs(pyspark: PySparkResource):
        return pyspark.spark_session.sql(BASE.format(lo=0, hi=4))

    good = materialize([runs], resources=dagster_resources)
    assert materialize([runs], resources=dagster_resources).success  # a second run appends the rows again
    lh = Lakehouse(warehouse)
    assert len(lh.read_arrow("rb.runs")) == 8
    result = lakehouse_rollback_job.execute_in_process(run_config=rollback_run_config("rb.runs", run_id=good.run_id), resources={"lakehouse": dagster_resources["lakehouse"]})
    assert result.success
    assert len(lh.read_arrow("rb.runs")) == 4 and lh.verify("rb.runs", deep=True)["agree"]
    observation = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"][0]
    assert observation.event_specific_data.asset_observation.asset_key.path == ["rb", "runs"]

    second = lh.history("rb.runs")[1]  # the second run's append, before the rollback
    out = json.loads(run("rollback", "rb.runs", "--to-snapshot", str(second["iceberg_snapshot_id"]), "--json", warehouse=warehouse).stdout)
    assert out["mode"] == "rollback" and out["files_added"] > 0
    assert len(lh.read_arrow("rb.runs")) == 8 and lh.verify("rb.runs")["agree"]
    failed = run("rollback", "rb.runs", warehouse=warehouse, check=False)
    assert failed.returncode != 0 and "give exactly one of snapshot_id, delta_version, as_of, run_id" in failed.stderr


def test_a_target_whose_files_are_gone_is_refused_and_nothing_changes(lh, spark):
    first = lh.write(spark.sql(BASE.format(lo=0, hi=6)).coalesce(1), "rb.gone")
    lh.write(spark.sql(BASE.format(lo=6, hi=9)), "rb.gone", mode="overwrite")
    (gone,) = [t.file.file_path for t in lh.load("rb.gone").scan(snapshot_id=first.iceberg_snapshot_id).plan_files()]
    os.remove(local(gone))  # as a retention cleanup or another engine would
    table = lh.load("rb.gone")
    delta_before = DeltaTable(table.location()).version()
    with pytest.raises(RetentionError) as e:
        lh.rollback("rb.gone", snapshot_id=first.iceberg_snapshot_id)
    assert "rb.gone" in str(e.value) and "no longer exist" in str(e.value) and "Nothing was changed" in str(e.value)
    assert lh.load("rb.gone").current_snapshot().snapshot_id == table.current_snapshot().snapshot_id
    assert DeltaTable(table.location()).version() == delta_before
    with pytest.raises(RetentionError, match="no snapshot 42"):
        lh.rollback("rb.gone", snapshot_id=42)
    with pytest.raises(SpecError, match="give exactly one of"):
        lh.rollback("rb.gone", snapshot_id=first.iceberg_snapshot_id, delta_version=0)


def test_a_schema_the_target_cannot_be_read_back_with_is_refused(lh, spark):
    first = lh.write(spark.sql("SELECT id, cast(id AS int) AS n, 'x' AS note FROM range(3)"), "rb.dropped", table=TableOptions(formats=["iceberg"]))
    lh.alter("rb.dropped", drop=["note"])
    with pytest.raises(SchemaError, match="column 'note' of the target snapshot .* was dropped since"):
        lh.rollback("rb.dropped", snapshot_id=first.iceberg_snapshot_id)

    widen = lh.write(spark.sql("SELECT id, cast(id AS int) AS n FROM range(3)"), "rb.widened")
    lh.write(spark.sql("SELECT id, id AS n FROM range(3, 5)"), "rb.widened")  # int -> long rewrites the table
    with pytest.raises(SchemaError, match="column 'n' was int at the target snapshot"):
        lh.rollback("rb.widened", snapshot_id=widen.iceberg_snapshot_id)
    # A column added since is kept, holding nulls for the rolled-back rows.
    added = lh.write(spark.sql("SELECT id FROM range(2)"), "rb.added")
    lh.write(spark.sql("SELECT id, 'new' AS extra FROM range(2, 4)"), "rb.added")
    lh.rollback("rb.added", snapshot_id=added.iceberg_snapshot_id)
    assert sorted(lh.read_arrow("rb.added").to_pylist(), key=lambda r: r["id"]) == [{"id": 0, "extra": None}, {"id": 1, "extra": None}]
    assert lh.verify("rb.added", deep=True)["agree"]

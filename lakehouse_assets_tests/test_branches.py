"""Writes to an Iceberg branch, reads of it, publish and discard.

A branch write changes neither main nor the Delta log: Iceberg readers of main, delta-rs and DuckDB see
nothing of it. Publishing fast-forwards main when it did not move, or re-applies the branch's change on
top of what another writer committed when that is safe, and refuses otherwise with nothing changed.
After a publish, every reader of both formats agrees.
"""

from __future__ import annotations

import pytest
from dagster import asset, materialize
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable

from lakehouse_assets import MergeOptions
from lakehouse_assets.core.errors import CommitConflict, SchemaError, SpecError, TableNotFound

from .conftest import assert_all_readers_agree, rows_of
from .test_cli import run

ROWS = "SELECT id, id % 3 AS g, concat('v', id) AS v FROM range({lo}, {hi})"


def _rows(lh, name, **kw):
    return rows_of(lh.read_arrow(name, **kw).to_pylist(), ["g", "id", "v"])


def _expected(ids, v=lambda i: f"v{i}"):
    return rows_of([{"id": i, "g": i % 3, "v": v(i)} for i in ids], ["g", "id", "v"])


def _delta_state(lh, name):
    dt = DeltaTable(lh.load(name).location())
    return dt.version(), sorted(dt.file_uris())


@pytest.mark.smoke
def test_a_branch_write_is_invisible_to_main_and_delta_until_published(lh, spark, duck):
    lh.write(spark.sql(ROWS.format(lo=0, hi=6)), "br.t", partition_by=["g"])
    main_before, delta_before = lh.load("br.t").current_snapshot().snapshot_id, _delta_state(lh, "br.t")

    staged = lh.write(spark.sql(ROWS.format(lo=6, hi=9)), "br.t", branch="audit")
    assert staged.branch == "audit" and staged.delta_version is None
    # Main, its Iceberg readers and the Delta log (delta-rs, DuckDB) are as they were.
    assert lh.load("br.t").current_snapshot().snapshot_id == main_before
    assert _delta_state(lh, "br.t") == delta_before
    assert_all_readers_agree(lh, spark, duck, "br.t", _expected(range(6)))
    # The branch holds main's rows plus the staged ones, in Spark and in Arrow.
    assert rows_of([r.asDict() for r in lh.read(spark, "br.t", branch="audit").collect()], ["g", "id", "v"]) == _expected(range(9))
    assert _rows(lh, "br.t", branch="audit") == _expected(range(9))
    assert lh.branches("br.t") == {"audit": staged.iceberg_snapshot_id}

    published = lh.publish("br.t", "audit")
    assert published.published == "fast-forward" and published.snapshots_published == 1
    assert published.iceberg_snapshot_id == staged.iceberg_snapshot_id  # main is now the staged snapshot: no copy
    assert published.delta_version == delta_before[0] + 1 and not published.delta_lagging
    assert_all_readers_agree(lh, spark, duck, "br.t", _expected(range(9)))
    assert lh.verify("br.t")["agree"]
    assert lh.publish("br.t", "audit").published == "nothing to publish"


def test_merge_and_overwrite_on_a_branch_plan_against_the_branch(lh, spark, duck):
    lh.write(spark.sql(ROWS.format(lo=0, hi=6)), "br.m", partition_by=["g"])
    lh.write(spark.sql(ROWS.format(lo=6, hi=8)), "br.m", branch="dev")
    # The merge matches a row that exists only on the branch (7), and one of main's (0).
    lh.write(spark.sql("SELECT id, id % 3 AS g, 'merged' AS v FROM (SELECT explode(array(0, 7)) AS id)"), "br.m", mode="merge",
             merge=MergeOptions(keys=["id"]), branch="dev")
    merged = {0: "merged", 7: "merged"}
    assert _rows(lh, "br.m", branch="dev") == _expected(range(8), lambda i: merged.get(i, f"v{i}"))
    assert _rows(lh, "br.m") == _expected(range(6))
    lh.publish("br.m", "dev")
    assert_all_readers_agree(lh, spark, duck, "br.m", _expected(range(8), lambda i: merged.get(i, f"v{i}")))
    # An overwrite on the branch replaces the branch's rows, not main's only.
    lh.write(spark.sql(ROWS.format(lo=100, hi=102)), "br.m", mode="overwrite", branch="dev")
    assert _rows(lh, "br.m", branch="dev") == _expected([100, 101])
    published = lh.publish("br.m", "dev")
    assert published.published == "fast-forward"
    assert_all_readers_agree(lh, spark, duck, "br.m", _expected([100, 101]))
    assert lh.verify("br.m")["agree"]


def test_publish_after_main_moved_reapplies_appends_and_refuses_what_it_cannot(lh, spark, duck):
    lh.write(spark.sql(ROWS.format(lo=0, hi=6)), "br.r", partition_by=["g"])
    lh.write(spark.sql(ROWS.format(lo=6, hi=8)), "br.r", branch="add")
    lh.write(spark.sql(ROWS.format(lo=10, hi=12)), "br.r")  # another writer commits to main meanwhile
    main_moved = lh.load("br.r").current_snapshot().snapshot_id
    published = lh.publish("br.r", "add")
    assert published.published == "re-applied"
    snap = lh.load("br.r").current_snapshot()
    assert snap.parent_snapshot_id == main_moved and snap.summary["lakehouse.published.branch"] == "add"
    assert_all_readers_agree(lh, spark, duck, "br.r", _expected([*range(8), 10, 11]))

    # A merge staged while main gained rows: refused, nothing changed in either format.
    lh.write(spark.sql("SELECT id, id % 3 AS g, 'm' AS v FROM range(0, 2)"), "br.r", mode="merge", merge=MergeOptions(keys=["id"]), branch="fix")
    lh.write(spark.sql(ROWS.format(lo=20, hi=21)), "br.r")
    before = (lh.load("br.r").current_snapshot().snapshot_id, _delta_state(lh, "br.r"))
    with pytest.raises(CommitConflict, match="merges, and main gained 1 data file"):
        lh.publish("br.r", "fix")
    assert (lh.load("br.r").current_snapshot().snapshot_id, _delta_state(lh, "br.r")) == before

    # An overwrite whose files main already replaced: refused too.
    lh.write(spark.sql(ROWS.format(lo=30, hi=31)), "br.r", mode="overwrite", branch="redo")
    lh.write(spark.sql(ROWS.format(lo=40, hi=41)), "br.r", mode="overwrite")
    with pytest.raises(CommitConflict, match="replaces .* file\\(s\\) that main no longer has"):
        lh.publish("br.r", "redo")
    assert _rows(lh, "br.r") == _expected([40])

    # Discarding leaves main and Delta alone; the branch is gone.
    before = (lh.load("br.r").current_snapshot().snapshot_id, _delta_state(lh, "br.r"))
    assert lh.discard("br.r", "fix")["unpublished_snapshots"] == 1
    assert "fix" not in lh.branches("br.r")
    assert (lh.load("br.r").current_snapshot().snapshot_id, _delta_state(lh, "br.r")) == before
    assert lh.verify("br.r")["agree"]


def test_a_reapplied_branch_published_again_commits_only_what_it_staged_since(lh, spark, duck):
    """A publish run again (a retried Dagster step, a second `lakehouse publish`) finds its earlier re-apply on main."""
    lh.write(spark.sql(ROWS.format(lo=0, hi=6)), "br.again", partition_by=["g"])
    lh.write(spark.sql(ROWS.format(lo=6, hi=8)), "br.again", branch="add")
    lh.write(spark.sql(ROWS.format(lo=10, hi=12)), "br.again")  # main moves: the publish re-applies
    assert lh.publish("br.again", "add").published == "re-applied"
    published = (lh.load("br.again").current_snapshot().snapshot_id, _delta_state(lh, "br.again"))
    again = lh.publish("br.again", "add")
    assert again.published == "nothing to publish" and again.snapshots_published == 0
    assert (lh.load("br.again").current_snapshot().snapshot_id, _delta_state(lh, "br.again")) == published
    assert_all_readers_agree(lh, spark, duck, "br.again", _expected([*range(8), 10, 11]))
    # The branch goes on: its next publish brings only the new rows.
    lh.write(spark.sql(ROWS.format(lo=20, hi=22)), "br.again", branch="add")
    later = lh.publish("br.again", "add")
    assert later.published == "re-applied" and later.snapshots_published == 1
    assert_all_readers_agree(lh, spark, duck, "br.again", _expected([*range(8), 10, 11, 20, 21]))
    assert lh.verify("br.again")["agree"]


def test_a_data_file_iceberg_lists_twice_fails_the_formats_agree_check(lh, spark):
    """What a publish applied twice did: Iceberg listed the same file twice (its rows read twice), Delta once."""
    lh.write(spark.sql(ROWS.format(lo=0, hi=6)), "br.twice")
    table = lh.catalog.load_table("br.twice")
    (task,) = list(table.scan().plan_files())
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(task.file)  # as another engine might, or the old publish
    assert lh.read(spark, "br.twice").count() == 12
    report = lh.verify("br.twice")
    assert not report["agree"]
    assert any("Iceberg lists data file" in d and "2 times" in d for d in report["differences"])


def test_branch_errors_are_clear(lh, spark):
    lh.write(spark.sql(ROWS.format(lo=0, hi=3)), "br.e")
    with pytest.raises(TableNotFound, match="has no Iceberg branch 'nope'"):
        lh.read_arrow("br.e", branch="nope")
    with pytest.raises(SpecError, match="not a usable branch name"):
        lh.write(spark.sql(ROWS.format(lo=0, hi=1)), "br.e", branch="bad name")
    with pytest.raises(SchemaError, match="changes the table's schema"):
        lh.write(spark.sql("SELECT id, id % 3 AS g, 'x' AS v, 1 AS extra FROM range(1)"), "br.e", branch="dev")
    assert lh.branches("br.e") == {}  # nothing was written, no branch created
    lh.write(spark.sql(ROWS.format(lo=5, hi=6)), "br.e", branch="dev")
    with pytest.raises(SpecError, match="not both"):
        lh.read_arrow("br.e", branch="dev", snapshot_id=1)


def test_a_snapshot_expiry_keeps_what_a_branch_references(lh, spark):
    lh.write(spark.sql(ROWS.format(lo=0, hi=3)), "br.x")
    lh.write(spark.sql(ROWS.format(lo=3, hi=5)), "br.x", branch="keep")
    for lo in (10, 20):
        lh.write(spark.sql(ROWS.format(lo=lo, hi=lo + 1)), "br.x", mode="overwrite")
    expiry = lh.maintain("br.x", "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=1)
    assert expiry["snapshots_expired"] == 1  # the first overwrite; main's head, the branch and its fork point stay
    lh.maintain("br.x", "orphan_cleanup", orphan_grace_hours=0)
    assert _rows(lh, "br.x", branch="keep") == _expected(range(5))
    # The snapshot the branch forked from was kept, so its change (an append of 3 and 4) is still known.
    assert lh.publish("br.x", "keep").published == "re-applied"
    assert _rows(lh, "br.x") == _expected([3, 4, 20])
    assert lh.verify("br.x")["agree"]


def test_cli_publish_and_discard(lh, spark, warehouse):
    lh.write(spark.sql(ROWS.format(lo=0, hi=3)), "br.c")
    lh.write(spark.sql(ROWS.format(lo=3, hi=4)), "br.c", branch="a")
    lh.write(spark.sql(ROWS.format(lo=4, hi=5)), "br.c", branch="b")
    assert "fast-forward" in run("publish", "br.c", "--branch", "a", warehouse=warehouse).stdout
    assert "discarded branch b (1 unpublished" in run("discard", "br.c", "--branch", "b", warehouse=warehouse).stdout
    refused = run("discard", "br.c", "--branch", "b", warehouse=warehouse, check=False)
    assert refused.returncode != 0 and "has no Iceberg branch 'b'" in refused.stderr
    assert _rows(lh, "br.c") == _expected(range(4)) and lh.branches("br.c") == {"a": lh.load("br.c").current_snapshot().snapshot_id}


def test_an_environment_branch_keeps_a_deployment_off_main_and_delta(lh, spark, duck, warehouse):
    from lakehouse_assets.dagster.io_manager import LakehouseIOManager
    from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

    lh.write(spark.sql(ROWS.format(lo=0, hi=4)), "env.source")  # production's table, no dev branch yet
    lh.write(_totals(lh.read(spark, "env.source")), "env.totals")  # production's totals, with the columns the asset writes

    @asset(key_prefix=["env"])
    def source(pyspark: PySparkResource):
        return pyspark.spark_session.sql(ROWS.format(lo=4, hi=6))  # appended on dev

    @asset(key_prefix=["env"], metadata={"write_mode": "overwrite"})
    def totals(source):
        return _totals(source)

    dev = LakehouseResource(warehouse=warehouse, branch="dev")
    pyspark = spark_resource()
    resources = {"lakehouse": dev, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=dev, pyspark=pyspark)}
    before = {t: (lh.load(t).current_snapshot().snapshot_id, _delta_state(lh, t)) for t in ("env.source", "env.totals")}

    # Only the downstream runs first: the upstream has no dev branch, so it reads main (4 rows).
    assert materialize([source, totals], selection=[totals], resources=resources).success
    assert _rows(lh, "env.totals", branch="dev") == rows_of([{"id": g, "g": g, "v": str(n)} for g, n in ((0, 2), (1, 1), (2, 1))], ["g", "id", "v"])
    # Then both: the downstream reads the upstream's dev branch (6 rows).
    assert materialize([source, totals], resources=resources).success
    assert _rows(lh, "env.source", branch="dev") == _expected(range(6))
    assert _rows(lh, "env.totals", branch="dev") == rows_of([{"id": g, "g": g, "v": "2"} for g in range(3)], ["g", "id", "v"])
    # Main and Delta of both tables are untouched.
    assert {t: (lh.load(t).current_snapshot().snapshot_id, _delta_state(lh, t)) for t in before} == before
    assert_all_readers_agree(lh, spark, duck, "env.source", _expected(range(4)))

    # One command publishes every table on the branch; `tables` and `history` say where branch data lives.
    out = run("publish", "--branch", "dev", warehouse=warehouse).stdout
    assert "env.source: published branch dev (fast-forward" in out and "env.totals: published branch dev (fast-forward" in out
    assert_all_readers_agree(lh, spark, duck, "env.totals", rows_of([{"id": g, "g": g, "v": "2"} for g in range(3)], ["g", "id", "v"]))
    assert "BRANCHES (ICEBERG ONLY)" in run("tables", warehouse=warehouse).stdout
    lh.write(spark.sql(ROWS.format(lo=9, hi=10)), "env.source", branch="dev")
    assert "branch dev, no Delta version" in run("history", "env.source", "--branch", "dev", warehouse=warehouse).stdout


def _totals(df):
    return df.groupBy("g").count().selectExpr("cast(g AS bigint) AS id", "g", "cast(count AS string) AS v")


def test_publish_after_main_changed_its_schema_or_partition_spec(lh, spark, duck):
    # Main gained a column since the branch forked: the staged files (without it) are re-applied, and every
    # reader of both formats reads the new column as NULL in their rows.
    lh.write(spark.sql(ROWS.format(lo=0, hi=4)), "br.s", partition_by=["g"])
    lh.write(spark.sql(ROWS.format(lo=4, hi=6)), "br.s", branch="dev")
    lh.write(spark.sql("SELECT id, id % 3 AS g, concat('v', id) AS v, 'x' AS x FROM range(10, 12)"), "br.s")
    assert lh.publish("br.s", "dev").published == "re-applied"
    expected = sorted([(i % 3, i, f"v{i}", None) for i in range(6)] + [(i % 3, i, f"v{i}", "x") for i in (10, 11)], key=repr)
    assert_all_readers_agree(lh, spark, duck, "br.s", expected)

    # Another engine changed main's partition spec since the branch was written: the staged files carry the
    # old spec, so re-applying them would record wrong partitions. Refused, nothing changed.
    lh.write(spark.sql(ROWS.format(lo=20, hi=22)), "br.s", branch="late")
    lh.write(spark.sql(ROWS.format(lo=30, hi=31)), "br.s")
    with lh.load("br.s").update_spec() as spec:
        spec.add_identity("id")
    before = (lh.load("br.s").current_snapshot().snapshot_id, _delta_state(lh, "br.s"))
    with pytest.raises(CommitConflict, match="partition spec changed since"):
        lh.publish("br.s", "late")
    assert (lh.load("br.s").current_snapshot().snapshot_id, _delta_state(lh, "br.s")) == before
    assert "late" in lh.branches("br.s")


def test_a_write_to_main_racing_a_fast_forward_sends_the_publish_to_re_apply(lh, spark, duck, monkeypatch):
    from lakehouse_assets.core.table import branches as branches_module

    lh.write(spark.sql(ROWS.format(lo=0, hi=3)), "br.race", partition_by=["g"])
    lh.write(spark.sql(ROWS.format(lo=3, hi=5)), "br.race", branch="dev")
    fork_point, raced = branches_module.fork_point, []

    def main_moves_after_publish_read_it(table, head):
        if not raced:  # the publish read main at the fork; another writer commits to main before it fast-forwards
            raced.append(lh.write(spark.sql(ROWS.format(lo=10, hi=11)), "br.race").iceberg_snapshot_id)
        return fork_point(table, head)

    monkeypatch.setattr(branches_module, "fork_point", main_moves_after_publish_read_it)
    published = lh.publish("br.race", "dev")
    assert published.published == "re-applied"
    assert lh.load("br.race").current_snapshot().parent_snapshot_id == raced[0]  # on top of the racing write: nothing lost
    assert_all_readers_agree(lh, spark, duck, "br.race", _expected([*range(5), 10]))

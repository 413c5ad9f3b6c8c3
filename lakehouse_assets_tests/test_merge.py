"""mode="merge": copy-on-write upserts and CDC deletes, identical in Iceberg and Delta."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from lakehouse_assets import InputError, MergeOptions, SpecError, TableOptions

from .conftest import assert_all_readers_agree

COLS = ["country", "id", "name", "version"]


def people(spark, lo, hi, version=0, parts=1):
    """Nullable columns, like the CDC batches below (a NOT NULL -> nullable change is its own Delta version)."""
    cols = {
        "id": F.col("id"),
        "name": F.concat(F.lit("p"), F.col("id").cast("string")),
        "country": F.element_at(F.array(F.lit("US"), F.lit("DE"), F.lit("FR")), (F.col("id") % 3 + 1).cast("int")),
        "version": F.lit(version).cast("long"),
    }
    # CASE WHEN without ELSE is nullable; its condition must not fold to true (Spark 4's optimizer folds `lit(True)`).
    return spark.range(lo, hi, numPartitions=parts).select(*[F.when(F.col("id") >= 0, c).alias(n) for n, c in cols.items()])


def expected(rows: dict) -> list[tuple]:
    return [(c, i, n, v) for i, (n, c, v) in rows.items()]


def model(lo, hi, version=0):
    return {i: (f"p{i}", ["US", "DE", "FR"][i % 3], version) for i in range(lo, hi)}


def live_paths(lh, name):
    return {t.file.file_path for t in lh.load(name).scan().plan_files()}


def delta_log(lh, name, version):
    root = lh.load(name).location()[len("file://"):]
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f]


def three_files(lh, spark, name, **kw):
    """Keys 0-99, 100-199, 200-299 in three separate files (three appends)."""
    for lo in (0, 100, 200):
        lh.write(people(spark, lo, lo + 100), name, **kw)
    return live_paths(lh, name)


@pytest.mark.smoke
def test_merge_rewrites_only_files_with_matched_keys(lh, spark, duck):
    before = three_files(lh, spark, "m.people")
    assert len(before) == 3
    delta_before = DeltaTable(lh.load("m.people").location()).version()
    snaps_before = len(lh.load("m.people").snapshots())
    batch = spark.createDataFrame(
        [(150, "updated", "GB", 1, "u"), (160, None, None, None, "delete"), (1000, "new", "US", 1, "i")],
        "id long, name string, country string, version long, _op string",
    )
    r = lh.write(batch, "m.people", mode="merge", merge=MergeOptions(keys=["id"], operation_column="_op"))
    after = live_paths(lh, "m.people")
    # Only the file holding keys 100-199 was replaced; the other two are the very same files.
    assert r.files_removed == 1 and len(before - after) == 1 and len(before & after) == 2
    assert r.rows_removed == 100 and r.rows_written == 100  # 98 kept + 1 updated + 1 inserted
    # One Iceberg overwrite snapshot, one Delta commit holding the remove and the adds.
    table = lh.load("m.people")
    assert len(table.snapshots()) == snaps_before + 1
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert table.current_snapshot().summary["lakehouse.merge.candidate-files"] == "1"  # In-set pruning on id stats
    assert r.delta_version == delta_before + 1
    actions = delta_log(lh, "m.people", r.delta_version)
    removed = [a["remove"]["path"] for a in actions if "remove" in a]
    added = [a["add"]["path"] for a in actions if "add" in a]
    assert len(removed) == 1 and len(added) == r.files_added
    assert [a for a in actions if "commitInfo" in a][0]["commitInfo"]["lakehouse.operation"] == "merge"
    want = model(0, 300)
    want[150] = ("updated", "GB", 1)
    del want[160]
    want[1000] = ("new", "US", 1)
    assert_all_readers_agree(lh, spark, duck, "m.people", expected(want))
    # The control column is not stored.
    assert "_op" not in [f.name for f in table.schema().fields]
    assert "_op" not in DeltaTable(table.location()).schema().to_arrow().names
    history = lh.history("m.people")[0]
    assert history["operation"] == "merge" and history["delta_version"] == r.delta_version
    assert history["files_removed"] == 1 and history["rows_removed"] == 100


def test_merge_without_matches_touches_no_file(lh, spark, duck):
    before = three_files(lh, spark, "m.inserts")
    r = lh.write(people(spark, 500, 510, version=2), "m.inserts", mode="merge", merge=MergeOptions(keys=["id"]))
    assert r.files_removed == 0 and before <= live_paths(lh, "m.inserts")
    assert lh.load("m.inserts").current_snapshot().summary["lakehouse.merge.candidate-files"] == "0"
    assert_all_readers_agree(lh, spark, duck, "m.inserts", expected({**model(0, 300), **model(500, 510, 2)}))


def test_min_max_pruning_skips_files_outside_the_key_range(lh, spark):
    three_files(lh, spark, "m.range")
    # 300 distinct keys: more than the In-set limit, so the filter is the key range [180, 479].
    batch = people(spark, 180, 480, version=5)
    r = lh.write(batch, "m.range", mode="merge", merge=MergeOptions(keys=["id"]))
    summary = lh.load("m.range").current_snapshot().summary
    assert summary["lakehouse.merge.candidate-files"] == "2" and summary["lakehouse.merge.rewritten-files"] == "2"
    assert r.files_removed == 2
    assert lh.read(spark, "m.range").count() == 480


@pytest.mark.smoke
def test_cdc_deleted_at_column(lh, spark, duck):
    lh.write(people(spark, 0, 10), "m.softdel")
    batch = spark.createDataFrame(
        [(1, "p1", "DE", 3, None), (2, "p2", "FR", 3, "2024-05-01 00:00:00"), (11, "p11", "FR", 3, None)],
        "id long, name string, country string, version long, deleted_at string",
    ).withColumn("deleted_at", F.to_timestamp("deleted_at"))
    lh.write(batch, "m.softdel", mode="merge", merge=MergeOptions(keys=["id"], deleted_at_column="deleted_at"))
    want = model(0, 10)
    want[1] = ("p1", "DE", 3)
    del want[2]
    want[11] = ("p11", "FR", 3)
    assert_all_readers_agree(lh, spark, duck, "m.softdel", expected(want))
    assert "deleted_at" not in [f.name for f in lh.load("m.softdel").schema().fields]


def test_duplicate_keys_last_row_by_order_by_wins(lh, spark, duck):
    lh.write(people(spark, 0, 5), "m.dups")
    batch = spark.createDataFrame(
        [(1, "old", "US", 1, "u"), (1, "newest", "US", 3, "u"), (1, "mid", "US", 2, "u"),
         (2, "x", "US", 1, "u"), (2, None, None, 2, "d"),  # delete is the last event for key 2
         (3, None, None, 1, "d"), (3, "back", "DE", 2, "i")],  # re-inserted after a delete
        "id long, name string, country string, version long, op string",
    )
    lh.write(batch, "m.dups", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op", delete_values=["d"], order_by="version"))
    want = model(0, 5)
    want[1] = ("newest", "US", 3)
    del want[2]
    want[3] = ("back", "DE", 2)
    assert_all_readers_agree(lh, spark, duck, "m.dups", expected(want))


def test_duplicate_keys_without_order_by_fail_and_commit_nothing(lh, spark):
    lh.write(people(spark, 0, 5), "m.dupfail")
    before = lh.load("m.dupfail").current_snapshot().snapshot_id
    batch = spark.createDataFrame([(1, "a", "US", 1), (1, "b", "US", 2)], "id long, name string, country string, version long")
    with pytest.raises(InputError, match=r"Table m\.dupfail: the merge batch has several rows for the same key \(id\).*order_by"):
        lh.write(batch, "m.dupfail", mode="merge", merge=MergeOptions(keys=["id"]))
    assert lh.load("m.dupfail").current_snapshot().snapshot_id == before


def test_null_keys_fail_and_commit_nothing(lh, spark):
    lh.write(people(spark, 0, 5), "m.nulls")
    table = lh.load("m.nulls")
    before, root = table.current_snapshot().snapshot_id, table.location()[len("file://"):]
    files_before = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs)
    delta_before = DeltaTable(root).version()
    batch = spark.createDataFrame([(1, "a", "US", 1), (None, "b", "US", 2)], "id long, name string, country string, version long")
    with pytest.raises(InputError, match=r"Table m\.nulls: 1 row\(s\) of the merge batch have a null merge key \(id\)"):
        lh.write(batch, "m.nulls", mode="merge", merge=MergeOptions(keys=["id"]))
    assert lh.load("m.nulls").current_snapshot().snapshot_id == before and DeltaTable(root).version() == delta_before
    assert sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs) == files_before


@pytest.mark.parametrize("filled_cache", [True, False], ids=["cached-and-counted", "uncached"])
def test_the_batch_check_refuses_null_and_duplicate_keys_on_either_path(lh, spark, duck, filled_cache, monkeypatch):
    """A cached, filled, small batch is checked in one task (no shuffle); any other in parallel. Same verdicts.
    (Keys on the driver, the third path, are turned off here: test_merge_matching.py checks that one.)"""
    from lakehouse_assets.core.write.merge import batch as merge_batch

    monkeypatch.setattr(merge_batch, "KEYS_ON_DRIVER_ROWS", 0)

    name = f"m.check_{'cached' if filled_cache else 'plain'}"
    lh.write(people(spark, 0, 5, parts=2), name)
    before = lh.load(name).current_snapshot().snapshot_id
    schema = "id long, name string, country string, version long"

    cached = []

    def batch(rows):
        df = spark.createDataFrame(rows, schema).repartition(3)  # several partitions: the one-task path must see them all
        if filled_cache:
            df = df.cache()
            cached.append(df)
            df.count()
        assert (merge_batch.filled_cache_rows(df) is not None) is filled_cache
        return df

    try:
        dups = batch([(1, "a", "US", 1), (7, "x", "DE", 1), (1, "b", "US", 2)])
        with pytest.raises(InputError, match=rf"Table {name}: the merge batch has several rows for the same key \(id\)"):
            lh.write(dups, name, mode="merge", merge=MergeOptions(keys=["id"]))
        nulls = batch([(1, "a", "US", 1), (None, "b", "US", 2), (None, "c", "US", 3)])
        with pytest.raises(InputError, match=rf"Table {name}: 2 row\(s\) of the merge batch have a null merge key"):
            lh.write(nulls, name, mode="merge", merge=MergeOptions(keys=["id"]))
        assert lh.load(name).current_snapshot().snapshot_id == before
        good = batch([(1, "one", "US", 9), (8, "eight", "FR", 9)])
        r = lh.write(good, name, mode="merge", merge=MergeOptions(keys=["id"]))
    finally:
        for df in cached:
            df.unpersist()
    assert r.files_added >= 1
    want = model(0, 5)
    want[1], want[8] = ("one", "US", 9), ("eight", "FR", 9)
    assert_all_readers_agree(lh, spark, duck, name, expected(want))


def test_a_batch_used_again_after_its_merge_is_not_cached_again(lh, spark):
    """The merge caches a DataFrame of its own over the batch, not the caller's object: the caller's DataFrame, run
    again after the merge (a count, another sink), would otherwise carry the released cache in its plan and cache
    itself anew, a cache nobody releases."""
    three_files(lh, spark, "m.again")
    cached_before = {r.id() for r in spark.sparkContext._jsc.getPersistentRDDs().values()}
    batch = people(spark, 150, 160, version=1)
    lh.write(batch, "m.again", mode="merge", merge=MergeOptions(keys=["id"]))
    assert len(batch.collect()) == 10 and not batch.storageLevel.useMemory
    assert {r.id() for r in spark.sparkContext._jsc.getPersistentRDDs().values()} == cached_before


def test_merge_leaves_the_callers_cache_alone(lh, spark):
    """A batch the caller cached stays cached (a merge used to unpersist it); an uncached one is not left cached."""
    three_files(lh, spark, "m.cached")
    cached = people(spark, 150, 160, version=1).cache()
    cached.count()
    lh.write(cached, "m.cached", mode="merge", merge=MergeOptions(keys=["id"]))
    assert cached.storageLevel.useMemory
    # Another DataFrame object over the same plan finds the same cache entry, and leaves it too.
    lh.write(people(spark, 150, 160, version=1), "m.cached", mode="merge", merge=MergeOptions(keys=["id"]))
    assert cached.storageLevel.useMemory
    cached.unpersist()
    uncached = people(spark, 170, 175, version=2)
    lh.write(uncached, "m.cached", mode="merge", merge=MergeOptions(keys=["id"]))
    assert not uncached.storageLevel.useMemory
    assert {r["version"] for r in lh.read(spark, "m.cached").filter("id >= 150 AND id < 160").collect()} == {1}


def test_merge_arguments_are_checked(lh, spark):
    with pytest.raises(SpecError, match=r"Table m\.args: mode='merge' needs merge=MergeOptions\(keys=\[\.\.\.\]\)"):
        lh.write(people(spark, 0, 3), "m.args", mode="merge")
    with pytest.raises(SpecError, match=r"Table m\.args: mode='merge' needs merge keys.*asset metadata 'merge_keys'"):
        lh.write(people(spark, 0, 3), "m.args", mode="merge", merge=MergeOptions(keys=[]))
    with pytest.raises(SpecError, match=r"Table m\.args: merge options were given but mode is 'append'; use mode='merge'"):
        lh.write(people(spark, 0, 3), "m.args", merge=MergeOptions(keys=["id"]))
    with pytest.raises(SpecError, match=r"merge column\(s\) \['nope'\] are not in the data"):
        lh.write(people(spark, 0, 3), "m.args", mode="merge", merge=MergeOptions(keys=["id"], operation_column="nope"))


def test_partitioned_merge_moves_keys_between_partitions(lh, spark, duck):
    lh.write(people(spark, 0, 30, parts=2), "m.part", partition_by=["country"])
    before = live_paths(lh, "m.part")
    # Key 0 (US) moves to DE, key 3 (US) is deleted, key 31 is new in FR. Files of FR are untouched.
    batch = spark.createDataFrame(
        [(0, "moved", "DE", 1, "u"), (3, None, None, None, "D"), (31, "new", "FR", 1, "i")],
        "id long, name string, country string, version long, op string",
    )
    r = lh.write(batch, "m.part", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
    after = live_paths(lh, "m.part")
    fr_files = {p for p in before if "/country=FR/" in p}
    assert fr_files and fr_files <= after
    assert r.files_removed == len({p for p in before if "/country=US/" in p})
    want = model(0, 30)
    want[0] = ("moved", "DE", 1)
    del want[3]
    want[31] = ("new", "FR", 1)
    assert_all_readers_agree(lh, spark, duck, "m.part", expected(want))
    delta = DeltaTable(lh.load("m.part").location())
    assert delta.metadata().partition_columns == ["country"]
    dv = {a["path"]: a["partition.country"] for a in pa.table(delta.get_add_actions(flatten=True)).to_pylist()}
    assert all(f"/country={c}/" in "/" + p for p, c in dv.items())


def test_merge_composite_keys_and_time_travel_before_the_merge(lh, spark, duck):
    first = lh.write(people(spark, 0, 20), "m.comp")
    batch = spark.createDataFrame(
        [(5, "US", "changed", 9), (5, "XX", "other", 9), (4, "DE", "updated", 9)], "id long, country string, name string, version long"
    )
    lh.write(batch, "m.comp", mode="merge", merge=MergeOptions(keys=["id", "country"]))
    # Key (5, FR) is not in the batch: (5, US) and (5, XX) are new and the old (5, FR) row stays; (4, DE) is updated.
    rows = [r for r in expected(model(0, 20)) if r[:2] != ("DE", 4)] + [("US", 5, "changed", 9), ("XX", 5, "other", 9), ("DE", 4, "updated", 9)]
    assert_all_readers_agree(lh, spark, duck, "m.comp", rows)
    assert_all_readers_agree(
        lh, spark, duck, "m.comp", expected(model(0, 20)), snapshot_id=first.iceberg_snapshot_id, delta_version=first.delta_version
    )


def test_merge_into_a_new_table_creates_it(lh, spark, duck):
    batch = spark.createDataFrame([(1, "a", "US", 1, "i"), (2, "b", "US", 1, "d")], "id long, name string, country string, version long, op string")
    lh.write(batch, "m.fresh", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
    assert_all_readers_agree(lh, spark, duck, "m.fresh", [("US", 1, "a", 1)])


def test_demo_customers_is_a_merge_of_cdc_batches_through_the_io_manager(lh, spark, duck, warehouse):
    """The asset's metadata (write_mode=merge, merge_keys, operation column, order_by) drives the IO manager."""
    from dagster import materialize

    from lakehouse_assets.dagster.demo_assets import N_USERS, customer_cdc_batch, customer_changes, customers
    from lakehouse_assets.dagster.io_manager import LakehouseIOManager
    from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

    resource = LakehouseResource(warehouse=warehouse)
    pyspark = spark_resource()
    resources = {"lakehouse": resource, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=resource, pyspark=pyspark)}
    for _ in range(3):
        assert materialize([customers, customer_changes], resources=resources).success
    history = lh.history("demo.customers")
    assert [h["operation"] for h in history] == ["merge", "merge", "merge"]
    assert history[0]["files_removed"] > 0 and history[0]["writer"]["asset"] == "demo/customers"
    # Replay the three batches in a plain-Python model: last row per key by updated_at, "D" deletes.
    state: dict[int, tuple] = {}
    for b in range(3):
        latest: dict[int, dict] = {}
        for r in customer_cdc_batch(spark, b).collect():
            if r["customer_id"] not in latest or r["updated_at"] > latest[r["customer_id"]]["updated_at"]:
                latest[r["customer_id"]] = r.asDict()
        for k, r in latest.items():
            if r["op"] == "D":
                state.pop(k, None)
            else:
                state[k] = (r["country"], k, r["email"])
    rows = assert_all_readers_agree(lh, spark, duck, "demo.customers")
    got = {(r[0], r[1], r[2]) for r in rows}  # columns sorted: country, customer_id, email, ...
    assert got == set(state.values())
    assert len(state) < N_USERS + 2 * 50 and "XX" not in {c for c, _, _ in got}  # deletes happened; stale rows lost
    # The change log (an incremental input of `customers`) replays to the same customers: every change once.
    log = lh.read(spark, "demo.customer_changes").collect()
    replay: dict[int, str] = {}
    for r in sorted(log, key=lambda r: (r["_commit_version"], r["_change_type"] in ("insert", "update_postimage"))):
        if r["_change_type"] in ("delete", "update_preimage"):
            assert replay.pop(r["customer_id"]) == r["country"]
        else:
            assert r["customer_id"] not in replay
            replay[r["customer_id"]] = r["country"]
    assert replay == {k: c for c, k, _ in state.values()}
    assert {r["_commit_snapshot_id"] for r in log} == {h["iceberg_snapshot_id"] for h in history}


def test_merge_batch_with_a_new_column_evolves_both_formats(lh, spark, duck):
    three_files(lh, spark, "m.evolve")
    batch = spark.createDataFrame([(150, "p150", "FR", 1, "gold"), (999, "p999", "US", 1, "silver")],
                                  "id long, name string, country string, version long, tier string")
    r = lh.write(batch, "m.evolve", mode="merge", merge=MergeOptions(keys=["id"]))
    assert r.files_removed == 1
    want = [(c, i, n, None, v) for (c, i, n, v) in expected(model(0, 300)) if i != 150]
    want += [("FR", 150, "p150", "gold", 1), ("US", 999, "p999", "silver", 1)]
    assert_all_readers_agree(lh, spark, duck, "m.evolve", want)
    assert [f.name for f in lh.load("m.evolve").schema().fields][-1] == "tier"


def test_a_tie_for_the_last_row_is_refused(lh, spark):
    lh.write(people(spark, 0, 5), "m.tie")
    before = lh.load("m.tie").current_snapshot().snapshot_id
    batch = spark.createDataFrame([(1, "a", "US", 2), (1, "b", "US", 2), (2, "c", "US", 1)], "id long, name string, country string, version long")
    with pytest.raises(InputError, match=r"Table m\.tie: .* same key \(id\) with the same latest version"):
        lh.write(batch, "m.tie", mode="merge", merge=MergeOptions(keys=["id"], order_by=["version"]))
    assert lh.load("m.tie").current_snapshot().snapshot_id == before


def test_merge_on_a_widened_iceberg_only_table_reads_files_through_pyarrow(lh, spark, duck):
    """Old files hold INT32 keys after int -> long widening: the matching join and rewrite read them with pyarrow
    (the executor-side reader that object stores use too), including the per-row file path column."""
    lh.write(spark.sql("SELECT CAST(id AS INT) AS k, CAST(id AS STRING) AS v FROM range(10)"), "m.wide", table=TableOptions(formats=["iceberg"]))
    lh.write(spark.sql("SELECT CAST(id AS INT) AS k, CAST(id AS STRING) AS v FROM range(10, 20)"), "m.wide")
    batch = spark.createDataFrame([(3, "three", "u"), (15, None, "d"), (1 << 40, "big", "i")], "k long, v string, op string")
    r = lh.write(batch, "m.wide", mode="merge", merge=MergeOptions(keys=["k"], operation_column="op"))
    assert r.files_removed == 2  # both files held a matched key
    assert [str(f.field_type) for f in lh.load("m.wide").schema().fields] == ["long", "string"]
    want = {i: str(i) for i in range(20)}
    want[3] = "three"
    del want[15]
    want[1 << 40] = "big"
    table = lh.load("m.wide")
    from lakehouse_assets.core.read import duckdb_readers

    got = duck.execute(f"SELECT k, v FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)}").fetchall()
    assert sorted(got) == sorted(want.items())
    assert sorted(tuple(r) for r in lh.read(spark, "m.wide").collect()) == sorted(want.items())


def test_merge_with_the_same_write_id_commits_once(lh, spark, duck):
    lh.write(people(spark, 0, 10), "m.idem")
    batch = spark.createDataFrame([(1, "x", "US", 1, "u"), (2, None, None, None, "d")], "id long, name string, country string, version long, op string")
    r1 = lh.write(batch, "m.idem", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"), write_id="run-7")
    r2 = lh.write(batch, "m.idem", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"), write_id="run-7")
    assert r2.duplicate_of_earlier_write and (r2.iceberg_snapshot_id, r2.delta_version) == (r1.iceberg_snapshot_id, r1.delta_version)
    want = model(0, 10)
    want[1] = ("x", "US", 1)
    del want[2]
    assert_all_readers_agree(lh, spark, duck, "m.idem", expected(want))
    assert not [rdd for rdd in spark.sparkContext._jsc.getPersistentRDDs().values()]  # nothing left cached


def _with_a_concurrent_append(lh, spark, monkeypatch, name, concurrent):
    """Commit `concurrent` (another writer's append) right before the merge's first Iceberg commit."""
    from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer

    real_commit = iceberg_committer.commit_files

    def commit_after_a_concurrent_append(table, adds, removes, summary, *rest, **kw):
        monkeypatch.setattr(iceberg_committer, "commit_files", real_commit)
        lh.write(concurrent, name)
        return real_commit(table, adds, removes, summary, *rest, **kw)

    monkeypatch.setattr(iceberg_committer, "commit_files", commit_after_a_concurrent_append)


def test_a_concurrent_append_of_a_merged_key_fails_the_merge_with_advice(lh, spark, monkeypatch):
    """The merge re-validates its lost race: the concurrent append's rows hold a key the merge changes, named in the error."""
    from lakehouse_assets import CommitError

    lh.write(people(spark, 0, 10), "m.race")
    _with_a_concurrent_append(lh, spark, monkeypatch, "m.race", people(spark, 1, 2, version=7))  # key 1 again
    batch = spark.createDataFrame([(1, "merged", "US", 9)], "id long, name string, country string, version long")
    with pytest.raises(
        CommitError,
        match=r"Table m\.race: the merge conflicts with a concurrent write: snapshot \d+ \(append\) added rows with merge keys \(id\) "
        r"that this batch also writes\. Nothing was committed.*Run the merge again: it re-plans",
    ):
        lh.write(batch, "m.race", mode="merge", merge=MergeOptions(keys=["id"]))
    assert sorted(r["version"] for r in lh.read(spark, "m.race").filter("id = 1").collect()) == [0, 7]  # merge did not land
    assert lh.verify("m.race")["agree"]


def test_a_concurrent_append_without_merged_keys_is_revalidated_and_the_merge_lands(lh, spark, duck, monkeypatch):
    lh.write(people(spark, 0, 10), "m.race2")
    _with_a_concurrent_append(lh, spark, monkeypatch, "m.race2", people(spark, 50, 52, version=7))  # keys the batch lacks
    batch = spark.createDataFrame([(1, "merged", "US", 9)], "id long, name string, country string, version long")
    result = lh.write(batch, "m.race2", mode="merge", merge=MergeOptions(keys=["id"]))
    assert not result.delta_lagging
    rows = model(0, 10)
    rows.update(model(50, 52, version=7))
    rows[1] = ("merged", "US", 9)
    assert_all_readers_agree(lh, spark, duck, "m.race2", expected(rows))
    assert lh.verify("m.race2")["agree"]

"""Which files hold the batch's keys: two roads, one answer.

A merge finds the candidate files that hold a key of its batch either with Spark's semi-join, or, for a
small batch of exactly comparable key types, with pyarrow tasks that test each candidate's key columns
against the batch's keys brought to the driver (merge._files_holding). Both roads must rewrite the same
files and leave the same rows, whatever the key type, the names the files use for the key, or their width.
"""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from pyspark.sql import functions as F

from lakehouse_assets import InputError
from lakehouse_assets.core import merge

from .conftest import _norm, assert_all_readers_agree

ICEBERG_ONLY = ["iceberg"]


@pytest.fixture(params=["driver", "spark"])
def road(request, monkeypatch):
    """Force a matching road and record which one each merge took."""
    taken = []
    real = merge._files_holding

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        taken.append("driver" if out is not None else "cast fallback")
        return out

    monkeypatch.setattr(merge, "_files_holding", spy)
    if request.param == "spark":
        monkeypatch.setattr(merge, "KEYS_ON_DRIVER_ROWS", 0)
    yield request.param, taken


def _took(road_):
    name, seen = road_
    assert seen == (["driver"] if name == "driver" else []), f"expected the {name} road, saw {seen}"


# Key values with the awkward members of each type: quotes, backslashes, non-ASCII and empty strings;
# the sentinel dates; decimals beyond a long. Row i lands in partition i % 3.
KEYS = {
    "string": ("string", ["a'b", "é", "", "x\\y", "z", "Ω", "q\"", "plain", "tab\t"]),
    "date": ("date", [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(1582, 10, 4), dt.date(2024, 2, 29), dt.date(1900, 1, 1)]),
    "decimal": ("decimal(38,4)", [decimal.Decimal("12345678901234567890123.4567"), decimal.Decimal("-1.0000"), decimal.Decimal("0.0001"), decimal.Decimal("7"), decimal.Decimal("-99999999999999999999999.9999"), decimal.Decimal("3.1416")]),
    "int": ("int", [-(2**31), 2**31 - 1, 0, 1, -1, 42]),
}


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_both_roads_rewrite_the_same_files_for_every_key_type(lh, spark, duck, road, kind):
    ddl, values = KEYS[kind]
    name = f"mm.{kind}_{road[0]}"
    rows = [(v, i % 3, "old") for i, v in enumerate(values)] + [(None, 1, "null key")]  # a null key matches nothing
    lh.write(spark.createDataFrame(rows, f"k {ddl}, part int, v string"), name, partition_by=["part"])
    update, delete = values[0], values[3]  # both in partition 0
    new = {"string": "new", "date": dt.date(2000, 1, 1), "decimal": decimal.Decimal("5.5000"), "int": 5}[kind]
    batch = spark.createDataFrame([(update, 0, "new", "u"), (delete, 0, None, "d"), (new, 0, "inserted", "i")], f"k {ddl}, part int, v string, op string")
    r = lh.write(batch, name, mode="merge", merge_keys=["k"], operation_column="op")
    _took(road)
    assert r.files_removed == 1  # only partition 0's file held a key of the batch
    want = [(v, i % 3, "new" if v == update else "old") for i, v in enumerate(values) if v != delete] + [(None, 1, "null key"), (new, 0, "inserted")]
    assert_all_readers_agree(lh, spark, duck, name, [tuple(_norm(x) for x in row) for row in want])  # columns in name order: k, part, v


def test_both_roads_agree_on_composite_keys(lh, spark, duck, road):
    name = f"mm.composite_{road[0]}"
    lh.write(spark.sql("SELECT CAST(id % 4 AS INT) AS a, CONCAT('s', id % 3) AS b, CAST(id % 3 AS INT) AS part, 'old' AS v FROM range(12)"), name, partition_by=["part"])
    # (1, s1) lives in partition 1 only; (0, s2) in partition 2; (3, s9) is new.
    batch = spark.createDataFrame([(1, "s1", 1, "new"), (0, "s2", 2, "new"), (3, "s9", 0, "new")], "a int, b string, part int, v string")
    r = lh.write(batch, name, mode="merge", merge_keys=["a", "b"])
    _took(road)
    assert r.files_removed == 2
    rows = spark.sql("SELECT CAST(id % 4 AS INT) AS a, CONCAT('s', id % 3) AS b, CAST(id % 3 AS INT) AS part, 'old' AS v FROM range(12)").collect()
    want = {(x.a, x.b): (x.part, x.v) for x in rows} | {(1, "s1"): (1, "new"), (0, "s2"): (2, "new"), (3, "s9"): (0, "new")}
    got = assert_all_readers_agree(lh, spark, duck, name)
    assert sorted(got) == sorted((a, b, p, v) for (a, b), (p, v) in want.items())


def test_both_roads_find_keys_under_the_names_and_widths_the_files_use(lh, spark, duck, road):
    """Old files call the key `k` and hold it as INT32; the table now calls it `key`, a long. Both roads
    read the files by field id and compare in the table's type; the batch's keys are ints."""
    name = f"mm.renamed_{road[0]}"
    lh.write(spark.sql("SELECT CAST(id AS INT) AS k, 'old' AS v FROM range(5)"), name, formats=ICEBERG_ONLY)
    lh.alter(name, rename={"k": "key"})
    lh.write(spark.sql("SELECT CAST(id AS LONG) AS key, 'old' AS v FROM range(5, 10)"), name)  # widens key to long
    lh.write(spark.sql("SELECT CAST(id AS LONG) AS key, 'old' AS v FROM range(10, 15)"), name)
    assert [str(f.field_type) for f in lh.load(name).schema().fields] == ["long", "string"]
    batch = spark.createDataFrame([(2, "new"), (7, "new")], "key int, v string")
    r = lh.write(batch, name, mode="merge", merge_keys=["key"])
    _took(road)
    assert r.files_removed == 2  # the INT32 file named `k` and the first long file; the third is untouched
    want = sorted((i, "new" if i in (2, 7) else "old") for i in range(15))
    assert sorted(tuple(x) for x in lh.read(spark, name).collect()) == want
    from lakehouse_assets.core import duckdb_readers

    table = lh.load(name)
    assert sorted(duck.execute(f"SELECT key, v FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)}").fetchall()) == want


def test_the_driver_road_checks_null_and_duplicate_keys_of_a_cached_batch(lh, spark):
    """A cached, counted small batch is checked from its keys on the driver: no Spark aggregate, same verdicts."""
    name = "mm.checks"
    lh.write(spark.sql("SELECT id AS k, 'old' AS v FROM range(5)"), name)
    before = lh.load(name).current_snapshot().snapshot_id
    cached = []

    def batch(rows):
        df = spark.createDataFrame(rows, "k long, v string").repartition(3).cache()
        df.count()
        cached.append(df)
        assert merge._keys_on_driver(df, ["k"], merge._filled_cache_rows(df)) is not None
        return df

    try:
        with pytest.raises(InputError, match=rf"Table {name}: the merge batch has several rows for the same key \(k\)"):
            lh.write(batch([(1, "a"), (7, "x"), (1, "b")]), name, mode="merge", merge_keys=["k"])
        with pytest.raises(InputError, match=rf"Table {name}: 2 row\(s\) of the merge batch have a null merge key"):
            lh.write(batch([(1, "a"), (None, "b"), (None, "c")]), name, mode="merge", merge_keys=["k"])
        assert lh.load(name).current_snapshot().snapshot_id == before
        # Duplicates with an order_by: the last row wins (the deduplicated batch then matches through Spark).
        df = spark.createDataFrame([(1, "first", 1), (1, "last", 2), (9, "nine", 1)], "k long, v string, seq int").cache()
        df.count()
        cached.append(df)
        lh.write(df, name, mode="merge", merge_keys=["k"], order_by=["seq"])
    finally:
        for df in cached:
            df.unpersist()
    got = sorted((x.k, x.v) for x in lh.read(spark, name).collect())
    assert got == [(0, "old"), (1, "last"), (2, "old"), (3, "old"), (4, "old"), (9, "nine")]


def test_a_batch_above_the_driver_limit_matches_through_spark(lh, spark, monkeypatch):
    taken = []
    real = merge._files_holding
    monkeypatch.setattr(merge, "_files_holding", lambda *a, **k: taken.append(1) or real(*a, **k))
    monkeypatch.setattr(merge, "KEYS_ON_DRIVER_ROWS", 2)
    lh.write(spark.sql("SELECT id AS k, 'old' AS v FROM range(6)"), "mm.limit")
    lh.write(spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "k long, v string"), "mm.limit", mode="merge", merge_keys=["k"])
    assert taken == []
    lh.write(spark.createDataFrame([(4, "d")], "k long, v string").withColumn("v", F.upper("v")), "mm.limit", mode="merge", merge_keys=["k"])
    assert taken == [1]
    got = sorted((x.k, x.v) for x in lh.read(spark, "mm.limit").collect())
    assert got == [(0, "old"), (1, "a"), (2, "b"), (3, "c"), (4, "D"), (5, "old")]

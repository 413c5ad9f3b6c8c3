"""Which files hold the batch's keys, and their rewrite: several roads, one answer.

A merge finds the candidate files that hold a key of its batch either with Spark's semi-join, or, for a
small batch of exactly comparable key types, with pyarrow tasks that test each candidate's key columns
against the batch's keys brought to the driver: in one job with the rewrite (merge_tasks.rewrite_in_one_job)
or before Spark's shuffled rewrite (merge_tasks.files_holding). Every road must rewrite the same files and
leave the same rows, whatever the key type, the names the files use for the key, or their width.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F

from lakehouse_assets import InputError, MergeOptions, TableOptions
from lakehouse_assets.core.properties import SummaryKeys
from lakehouse_assets.core.write.merge import batch as merge_batch
from lakehouse_assets.core.write.merge import plan as merge_plan
from lakehouse_assets.core.write.merge import tasks as merge_tasks

from .conftest import _norm, assert_all_readers_agree

ICEBERG_ONLY = ["iceberg"]


@pytest.fixture(params=["cached", "driver", "shuffled", "spark"])
def road(request, monkeypatch, spark):
    """Force a road and record which one each merge took.

    cached:   the caller cached and counted the batch: its keys come to the driver before the check, which
              runs on them (merge_batch._checks_of); matching and rewrite are one job of pyarrow tasks
              (merge_tasks.rewrite_in_one_job);
    driver:   an uncached batch: Spark's check aggregate, then the keys of the cache it filled, the one job;
    shuffled: a cached batch whose rewrite does not take the one job (as when its upserts are too large to
              travel with the tasks): pyarrow matching (merge_tasks.files_holding), then Spark's shuffled rewrite;
    spark:    the keys never come to the driver (the limit set to 0): Spark's aggregate and semi-join.
    """
    name = request.param
    seen = {"checks on the driver": 0, "pyarrow matching": 0, "one job": 0}
    for module, fn, label in (
        (merge_batch, merge_batch._checks_of, "checks on the driver"),
        (merge_tasks, merge_tasks.files_holding, "pyarrow matching"),
        (merge_tasks, merge_tasks.rewrite_in_one_job, "one job"),
    ):
        def spy(*args, _fn=fn, _label=label, **kwargs):
            out = _fn(*args, **kwargs)
            seen[_label] += out is not None  # the one job returns None when it does not apply
            return out

        monkeypatch.setattr(module, fn.__name__, spy)
    if name == "spark":
        monkeypatch.setattr(merge_batch, "KEYS_ON_DRIVER_ROWS", 0)
    if name == "shuffled":
        monkeypatch.setattr(merge_tasks, "UPSERTS_ON_DRIVER_BYTES", -1)
    cached = []

    def batch(df):
        if name in ("cached", "shuffled"):
            df = df.cache()
            df.count()
            cached.append(df)
        return df

    def took(merges=1):
        want = {
            "cached": {"checks on the driver": merges, "pyarrow matching": 0, "one job": merges},
            "driver": {"checks on the driver": 0, "pyarrow matching": 0, "one job": merges},
            "shuffled": {"checks on the driver": merges, "pyarrow matching": merges, "one job": 0},
            "spark": {"checks on the driver": 0, "pyarrow matching": 0, "one job": 0},
        }[name]
        assert seen == want, f"expected the {name} road, saw {seen}"

    yield SimpleNamespace(name=name, batch=batch, took=took)
    for df in cached:
        df.unpersist()


def _summary(lh, name) -> dict:
    return lh.load(name).current_snapshot().summary.additional_properties


# Key values with the awkward members of each type: quotes, backslashes, non-ASCII and empty strings; the
# sentinel dates; decimals beyond a long; each integer type's extremes. Row i lands in partition i % 3.
# `absent`: two keys the table does not hold, each inside the key range of partition 1's and 2's files, so
# that pruning keeps every file as a candidate and only the matching itself can tell them apart.
KEYS = {
    "string": ("string", ["a'b", "é", "", "x\\y", "z", "Ω", "q\"", "plain", "tab\t"], ["q-new", "Z"]),
    "date": ("date", [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(1582, 10, 4), dt.date(2024, 2, 29), dt.date(1900, 1, 1)], [dt.date(3000, 1, 1), dt.date(1950, 6, 15)]),
    "decimal": (
        "decimal(38,4)",
        [decimal.Decimal("12345678901234567890123.4567"), decimal.Decimal("-1.0000"), decimal.Decimal("0.0001"), decimal.Decimal("7.0000"), decimal.Decimal("-99999999999999999999999.9999"), decimal.Decimal("3.1416")],
        [decimal.Decimal("-5.0000"), decimal.Decimal("2.0000")],
    ),
    "int": ("int", [-(2**31), 2**31 - 1, 0, 1, -1, 42], [5, 7]),
    "long": ("long", [-(2**63), 2**63 - 1, 0, 1, -1, 42], [5, 7]),
    "short": ("smallint", [-(2**15), 2**15 - 1, 0, 1, -1, 42], [5, 7]),
}


@pytest.mark.parametrize("pruning", ["in-set", "range"])
@pytest.mark.parametrize("kind", sorted(KEYS))
def test_both_roads_rewrite_the_same_files_for_every_key_type(lh, spark, duck, road, kind, pruning, monkeypatch):
    """Pruning by the batch's distinct keys (an In-set, up to IN_SET_LIMIT) or by their min/max: either
    comes from the driver's keys on the cached road, so both are checked on every road."""
    if pruning == "range":
        monkeypatch.setattr(merge_plan, "IN_SET_LIMIT", 0)
    ddl, values, absent = KEYS[kind]
    name = f"mm.{kind}_{road.name}_{pruning.replace('-', '_')}"
    rows = [(v, i % 3, "old") for i, v in enumerate(values)] + [(None, 1, "null key")]  # a null key matches nothing
    lh.write(spark.createDataFrame(rows, f"k {ddl}, part int, v string"), name, partition_by=["part"])
    update, delete = values[0], values[3]  # both in partition 0
    batch = spark.createDataFrame(
        [(update, 0, "new", "u"), (delete, 0, None, "d")] + [(a, 0, "inserted", "i") for a in absent], f"k {ddl}, part int, v string, op string"
    )
    r = lh.write(road.batch(batch), name, mode="merge", merge=MergeOptions(keys=["k"], operation_column="op"))
    road.took()
    assert _summary(lh, name)[SummaryKeys.MERGE_CANDIDATE_FILES] == "3"  # pruning kept every file...
    assert r.files_removed == 1  # ...and only partition 0's file held a key of the batch
    want = [(v, i % 3, "new" if v == update else "old") for i, v in enumerate(values) if v != delete]
    want += [(None, 1, "null key")] + [(a, 0, "inserted") for a in absent]
    assert_all_readers_agree(lh, spark, duck, name, [tuple(_norm(x) for x in row) for row in want])  # columns in name order: k, part, v


# Composite keys: partition 0 holds x1 and y1 in different rows but not the pair (x1, y1), which partition
# 1 holds; a matcher testing each column on its own would rewrite partition 0 as well.
COMPOSITE = {
    "int_string": ("a int, b string", [0, 1, 2, 3, 4, 5], ["s0", "s1", "s2", "s3", "s4", "s5"]),
    "date_decimal": (
        "a date, b decimal(10,2)",
        [dt.date(1, 1, 1), dt.date(1970, 1, 1), dt.date(2000, 2, 29), dt.date(2024, 1, 1), dt.date(2025, 6, 1), dt.date(9999, 12, 31)],
        [decimal.Decimal(x) for x in ("-1.50", "0.00", "1.25", "2.50", "3.75", "99999999.99")],
    ),
}


@pytest.mark.parametrize("kind", sorted(COMPOSITE))
def test_both_roads_match_composite_keys_as_pairs(lh, spark, duck, road, kind):
    ddl, x, y = COMPOSITE[kind]
    name = f"mm.composite_{kind}_{road.name}"
    table = [(x[1], y[0], 0), (x[2], y[1], 0), (x[1], y[1], 1), (x[3], y[3], 1), (x[0], y[2], 2), (x[5], y[5], 2)]
    lh.write(spark.createDataFrame([(*t, "old") for t in table], f"{ddl}, part int, v string"), name, partition_by=["part"])
    batch = spark.createDataFrame([(x[1], y[1], 1, "new"), (x[0], y[2], 2, "new"), (x[4], y[4], 0, "new")], f"{ddl}, part int, v string")
    r = lh.write(road.batch(batch), name, mode="merge", merge=MergeOptions(keys=["a", "b"]))
    road.took()
    assert _summary(lh, name)[SummaryKeys.MERGE_CANDIDATE_FILES] == "3"
    assert r.files_removed == 2  # partitions 1 and 2; partition 0 holds x1 and y1, never together
    want = {(a, b): (p, "old") for a, b, p in table} | {(x[1], y[1]): (1, "new"), (x[0], y[2]): (2, "new"), (x[4], y[4]): (0, "new")}
    rows = [(a, b, p, v) for (a, b), (p, v) in want.items()]
    assert_all_readers_agree(lh, spark, duck, name, [tuple(_norm(c) for c in row) for row in rows])


def test_both_roads_find_keys_under_the_names_and_widths_the_files_use(lh, spark, duck, road):
    """Old files call the key `k` and hold it as INT32; the table now calls it `key`, a long. Both roads
    read the files by field id and compare in the table's type; the batch's keys are ints."""
    name = f"mm.renamed_{road.name}"
    lh.write(spark.sql("SELECT CAST(id AS INT) AS k, 'old' AS v FROM range(5)").coalesce(1), name, table=TableOptions(formats=ICEBERG_ONLY))  # one file each
    lh.alter(name, rename={"k": "key"})
    lh.write(spark.sql("SELECT CAST(id AS LONG) AS key, 'old' AS v FROM VALUES (5), (6), (8), (9) AS t(id)").coalesce(1), name)  # widens key
    lh.write(spark.sql("SELECT CAST(id AS LONG) AS key, 'old' AS v FROM VALUES (7), (10), (11) AS t(id)").coalesce(1), name)
    assert [str(f.field_type) for f in lh.load(name).schema().fields] == ["long", "string"]
    batch = spark.createDataFrame([(2, "new"), (7, "new")], "key int, v string")
    r = lh.write(road.batch(batch), name, mode="merge", merge=MergeOptions(keys=["key"]))
    road.took()
    # The middle file's range [5, 9] covers 7 without holding it: a candidate, not rewritten.
    assert _summary(lh, name)[SummaryKeys.MERGE_CANDIDATE_FILES] == "3"
    assert r.files_removed == 2  # the INT32 file named `k` and the last one
    want = sorted((i, "new" if i in (2, 7) else "old") for i in [*range(12)])
    assert sorted(tuple(x) for x in lh.read(spark, name).collect()) == want
    from lakehouse_assets.core.read import duckdb_readers

    table = lh.load(name)
    assert sorted(duck.execute(f"SELECT key, v FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)}").fetchall()) == want


def test_both_roads_skip_files_written_before_the_key_column_existed(lh, spark, duck, road):
    """A key added by schema evolution is null in older files: they hold no key of the batch."""
    name = f"mm.late_key_{road.name}"
    lh.write(spark.sql("SELECT id AS x, 'old' AS v FROM range(3)"), name)
    lh.write(spark.sql("SELECT id AS x, 'old' AS v, id * 10 AS k FROM range(3, 6)"), name)  # adds k
    batch = spark.createDataFrame([(40, "new", 99), (70, "new", 7)], "k long, v string, x long")
    r = lh.write(road.batch(batch), name, mode="merge", merge=MergeOptions(keys=["k"]))
    road.took()
    assert r.files_removed == 1  # the file with k; the older one has no k at all
    want = [(None, "old", 0), (None, "old", 1), (None, "old", 2), (30, "old", 3), (40, "new", 99), (50, "old", 5), (70, "new", 7)]
    assert_all_readers_agree(lh, spark, duck, name, want)


def test_an_empty_batch_matches_nothing_and_reads_no_file(lh, spark, road):
    name = f"mm.empty_{road.name}"
    lh.write(spark.sql("SELECT id AS k, 'old' AS v FROM range(4)"), name)
    r = lh.write(road.batch(spark.createDataFrame([], "k long, v string")), name, mode="merge", merge=MergeOptions(keys=["k"]))
    assert r.files_removed == 0 and r.rows_written == 0
    assert sorted((x.k, x.v) for x in lh.read(spark, name).collect()) == [(i, "old") for i in range(4)]


def _keys_on_driver_matchings(monkeypatch) -> list:
    """A list that gets a 1 for each merge that matched with the batch's keys on the driver (either road)."""
    taken: list = []
    for fn in (merge_tasks.files_holding, merge_tasks.rewrite_in_one_job):
        def spy(*args, _fn=fn, **kwargs):
            out = _fn(*args, **kwargs)
            if out is not None:
                taken.append(1)
            return out

        monkeypatch.setattr(merge_tasks, fn.__name__, spy)
    return taken


def test_the_driver_road_checks_null_and_duplicate_keys_of_a_cached_batch(lh, spark, monkeypatch):
    """A cached, counted small batch is checked from its keys on the driver: no Spark aggregate, same verdicts.
    Duplicates resolved by order_by keep the driver road: the distinct keys are the deduplicated batch's keys."""
    name = "mm.checks"
    lh.write(spark.sql("SELECT id AS k, 'old' AS v FROM range(5)"), name)
    before = lh.load(name).current_snapshot().snapshot_id
    matched = _keys_on_driver_matchings(monkeypatch)
    cached = []

    def batch(rows, schema="k long, v string"):
        df = spark.createDataFrame(rows, schema).repartition(3).cache()
        df.count()
        cached.append(df)
        assert merge_batch.keys_on_driver(df, ["k"], merge_batch.filled_cache_rows(df)) is not None
        return df

    try:
        with pytest.raises(InputError, match=rf"Table {name}: the merge batch has several rows for the same key \(k\)"):
            lh.write(batch([(1, "a"), (7, "x"), (1, "b")]), name, mode="merge", merge=MergeOptions(keys=["k"]))
        with pytest.raises(InputError, match=rf"Table {name}: 2 row\(s\) of the merge batch have a null merge key"):
            lh.write(batch([(1, "a"), (None, "b"), (None, "c")]), name, mode="merge", merge=MergeOptions(keys=["k"]))
        assert lh.load(name).current_snapshot().snapshot_id == before and matched == []
        lh.write(batch([(1, "first", 1), (1, "last", 2), (9, "nine", 1)], "k long, v string, seq int"), name, mode="merge", merge=MergeOptions(keys=["k"], order_by=["seq"]))
        assert matched == [1]
    finally:
        for df in cached:
            df.unpersist()
    got = sorted((x.k, x.v) for x in lh.read(spark, name).collect())
    assert got == [(0, "old"), (1, "last"), (2, "old"), (3, "old"), (4, "old"), (9, "nine")]


@pytest.mark.parametrize("limit", ["rows", "bytes"])
def test_a_batch_above_the_driver_limits_matches_through_spark(lh, spark, monkeypatch, limit):
    taken = _keys_on_driver_matchings(monkeypatch)
    # Rows: at most 2 keys; bytes: at most 30 bytes of keys (3 longs are 24 bytes, 3 long strings are not).
    monkeypatch.setattr(merge_batch, "KEYS_ON_DRIVER_ROWS" if limit == "rows" else "KEYS_ON_DRIVER_BYTES", 2 if limit == "rows" else 30)
    name = f"mm.limit_{limit}"
    lh.write(spark.sql("SELECT CAST(id AS STRING) AS k, 'old' AS v FROM range(6)"), name)
    big = "".join(["k"] * 20)
    batch = spark.createDataFrame([("1", "a"), ("2", "b"), ("3" if limit == "rows" else "3" + big, "c")], "k string, v string")
    lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["k"]))
    assert taken == []
    lh.write(spark.createDataFrame([("4", "d")], "k string, v string").withColumn("v", F.upper("v")), name, mode="merge", merge=MergeOptions(keys=["k"]))
    assert taken == [1]
    got = sorted((x.k, x.v) for x in lh.read(spark, name).collect())
    third = [("3", "c")] if limit == "rows" else [("3", "old"), ("3" + big, "c")]
    assert got == sorted([("0", "old"), ("1", "a"), ("2", "b"), ("4", "D"), ("5", "old")] + third)


def test_the_pyarrow_reader_resolves_file_columns_as_spark_does(tmp_path):
    """Both roads must see the same columns: by name, a file's `ID` is the table's `id` (Spark's Parquet
    reader ignores case by default), two spellings of it are an error, and a file without any of the
    wanted columns still has its rows (as nulls), as Spark reads it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakehouse_assets.core.io.storage import StorageConfig
    from lakehouse_assets.core.read.reader import ParquetFileReader

    def read(table: pa.Table, want: pa.Schema):
        path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
        pq.write_table(table, path)
        reader = ParquetFileReader(StorageConfig(), want)
        return pa.Table.from_batches(list(reader(iter([pa.record_batch([pa.array([f"file://{path}"])], names=["path"])]))), schema=want).to_pylist()

    want = pa.schema([("id", pa.int64()), ("v", pa.string())])
    assert read(pa.table({"ID": [1, 2], "v": ["a", "b"]}), want) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert read(pa.table({"id": [1], "ID": [2], "v": ["a"]}), want) == [{"id": 1, "v": "a"}]  # the exact name first
    with pytest.raises(ValueError, match="several columns named 'id' ignoring case"):
        read(pa.table({"Id": [1], "ID": [2]}), want)
    assert read(pa.table({"other": [1, 2, 3]}), want) == [{"id": None, "v": None}] * 3


# The one-job rewrite (merge_tasks.rewrite_in_one_job) against Spark's shuffled rewrite, per partition transform:
# the same rows, and the same files per partition (a partition's kept rows and its upserts in one file).
SOURCE = """
SELECT id, CAST(id % 3 AS STRING) AS cat, DATE_ADD(DATE'2023-03-19', CAST(id % 4 AS INT)) AS d,
       TIMESTAMP'2024-01-01 05:00:00' + make_interval(0, 0, 0, 0, CAST(id * 7 AS INT), 0, 0) AS ts,
       CAST(TIMESTAMP'2024-01-01 05:00:00' + make_interval(0, 0, 0, 0, CAST(id * 5 AS INT), 0, 0) AS TIMESTAMP_NTZ) AS ntz,
       CAST(id * 3.5 AS DECIMAL(10, 2)) AS dec, CAST(id * 3 AS INT) AS i, CONCAT(CHR(97 + id % 4), 'x', id) AS s, 'old' AS v
FROM range({lo}, {hi})
"""
TERMS = [["cat"], ["d"], ["ts"], ["day(ts)"], ["month(d)"], ["hour(ntz)"], ["bucket(4, id)"], ["bucket(4, d)"], ["truncate(10, i)"],
         ["truncate(1, s)"], ["truncate(1000, dec)"], ["cat", "day(ts)"], ["bucket(4, s)"], []]


# The collected road computes partition values with the writer's own Spark expressions: a few layouts suffice.
COLLECTED = [["cat", "day(ts)"], ["truncate(10, i)"], ["bucket(4, s)"], []]
CASES_ONE_JOB = [(t, "rows") for t in TERMS] + [(t, "collected") for t in COLLECTED]


@pytest.mark.parametrize("terms,upserts", CASES_ONE_JOB, ids=[f"{'+'.join(t) or 'unpartitioned'}-{u}" for t, u in CASES_ONE_JOB])
def test_the_one_job_rewrite_writes_what_the_shuffled_rewrite_writes(lh, spark, duck, monkeypatch, terms, upserts):
    """Updates of ids 1 and 2, a delete of id 3, inserts 101 and 102 into 1's and 2's partitions and 103 elsewhere.

    rows:      the check's collect brought the whole batch; partition keys from pyiceberg's transforms;
    collected: the upserts collected with Spark's partition values, as when the batch is above
               ROWS_ON_DRIVER_BYTES. `bucket(4, s)` is a transform Spark does not compute: that table
               then keeps the shuffled rewrite."""
    if upserts == "collected":
        monkeypatch.setattr(merge_batch, "ROWS_ON_DRIVER_BYTES", -1)
    roads = _keys_on_driver_matchings(monkeypatch)
    one_job = []
    real = merge_tasks.rewrite_in_one_job
    monkeypatch.setattr(merge_tasks, "rewrite_in_one_job", lambda *a, **k: (lambda out: one_job.append(out is not None) or out)(real(*a, **k)))
    base = spark.sql(SOURCE.format(lo=0, hi=24))
    updated = base.filter("id IN (1, 2)").withColumn("v", F.lit("new")).withColumn("op", F.lit("U"))
    inserted = base.filter("id IN (1, 2)").withColumn("id", F.col("id") + 100).withColumn("v", F.lit("ins")).withColumn("op", F.lit("I"))
    elsewhere = spark.sql(SOURCE.format(lo=50, hi=51)).withColumn("id", F.lit(103).cast("long")).withColumn("op", F.lit("I"))
    batch = updated.unionByName(base.filter("id = 3").withColumn("op", F.lit("D"))).unionByName(inserted).unionByName(elsewhere).cache()
    batch.count()
    results = {}
    try:
        for road in ("one job", "shuffled"):
            name = f"mm.onejob_{'_'.join(''.join(ch for ch in t if ch.isalnum()) for t in terms) or 'none'}_{road.replace(' ', '_')}_{upserts}"
            lh.write(base, name, partition_by=terms)
            with monkeypatch.context() as m:
                if road == "shuffled":
                    m.setattr(merge_tasks, "UPSERTS_ON_DRIVER_BYTES", -1)
                r = lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
            table = lh.load(name)
            per_partition = sorted(Counter(str(t.file.partition) for t in table.scan().plan_files()).items())
            rows = sorted(tuple(_norm(v) for _, v in sorted(row.asDict().items())) for row in lh.read(spark, name).collect())  # columns by name
            results[road] = (r.files_removed, r.files_added, per_partition, rows)
            if road == "one job":
                assert_all_readers_agree(lh, spark, duck, name, rows)
    finally:
        batch.unpersist()
    assert one_job == [upserts == "rows" or terms != ["bucket(4, s)"], False] and roads == [1, 1]
    assert results["one job"] == results["shuffled"]
    id_at = sorted(base.columns).index("id")
    assert sorted(row[id_at] for row in results["one job"][3]) == [i for i in range(24) if i != 3] + [101, 102, 103]


def test_the_one_job_rewrite_drops_a_file_whose_rows_are_all_deleted_and_reads_partitions_in_several_groups(lh, spark, monkeypatch):
    """Partition 1 loses every row (its file goes, nothing replaces it); partition 0 holds three files, each
    read in a group of its own (FILES_PER_TASK_GROUP = 1), two of them rewritten, the third left as it is."""
    monkeypatch.setattr(merge_tasks, "FILES_PER_TASK_GROUP", 1)
    name = "mm.onejob_groups"
    for lo in (0, 10, 20):
        lh.write(spark.sql(f"SELECT id, CAST(id % 2 AS INT) AS part, 'old' AS v FROM range({lo}, {lo + 10})"), name, partition_by=["part"])
    odd = [(i, 1, None, "D") for i in range(1, 30, 2)]
    batch = spark.createDataFrame([(0, 0, "new", "U"), (12, 0, "new", "U"), (100, 0, "ins", "I"), *odd], "id long, part int, v string, op string").cache()
    batch.count()
    taken = _keys_on_driver_matchings(monkeypatch)
    try:
        r = lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
    finally:
        batch.unpersist()
    assert taken == [1]
    assert r.files_removed == 5  # the 3 odd files, and the 2 even ones holding 0 and 12 (not the one of 20-29)
    added = [t.file for t in lh.load(name).scan().plan_files() if "/part=0/" in t.file.file_path]
    # A task writes a partition's rows into one file: at most one per task (2 here), beside the untouched file.
    assert 2 <= len(added) <= 3 and r.files_added == len(added) - 1
    assert not [t for t in lh.load(name).scan().plan_files() if "/part=1/" in t.file.file_path]
    got = sorted((x.id, x.part, x.v) for x in lh.read(spark, name).collect())
    want = sorted([(i, 0, "new" if i in (0, 12) else "old") for i in range(0, 30, 2)] + [(100, 0, "ins")])
    assert got == want


def _one_job_results(monkeypatch) -> list:
    """A list that gets each one-job rewrite's outcome: True when it rewrote, False when it declined."""
    taken: list = []
    real = merge_tasks.rewrite_in_one_job

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(merge_tasks, "rewrite_in_one_job", spy)
    return taken


def _cached(df):
    df = df.cache()
    df.count()
    return df


def test_the_one_job_rewrite_matches_composite_keys_beside_nested_columns(lh, spark, monkeypatch):
    """Arrow's join refuses nested columns beside its keys: the rewrite joins the key columns only."""
    taken = _one_job_results(monkeypatch)
    name = "mm.onejob_nested"
    cols = "id int, part string, arr array<int>, st struct<a:int,b:string>, m map<string,int>, v string"
    rows = [(i, "p" if i % 2 else "q", [i, i + 1], (i, f"s{i}"), {"k": i}, "old") for i in range(6)]
    lh.write(spark.createDataFrame(rows, cols), name, partition_by=["part"])
    batch = _cached(spark.createDataFrame([(1, "p", [9], (9, "new"), {"n": 9}, "new"), (2, "p", None, None, None, "moved")], cols))
    try:
        r = lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["id", "part"]))
    finally:
        batch.unpersist()
    assert taken == [True] and r.files_removed == 1  # (1, p) is in partition p; (2, p) is new (2 is in q)
    got = sorted((x.id, x.part, x.arr, tuple(x.st) if x.st else None, x.m, x.v) for x in lh.read(spark, name).collect())
    want = [(i, "p" if i % 2 else "q", [i, i + 1], (i, f"s{i}"), {"k": i}, "old") for i in range(6) if i != 1]
    want += [(1, "p", [9], (9, "new"), {"n": 9}, "new"), (2, "p", None, None, None, "moved")]
    assert got == sorted(want)
    assert lh.verify(name)["agree"]


@pytest.mark.parametrize("upserts", ["rows", "collected"])
@pytest.mark.parametrize("term", ["month(ts)", "year(ts)", "day(ts)"])
def test_the_one_job_rewrite_partitions_instants_in_utc_whatever_the_session_time_zone(lh, spark, monkeypatch, term, upserts):
    """Spark labels collected timestamps with the session time zone; Iceberg's year/month/day are of the UTC
    instant. 2024-03-01 03:00 UTC is still February in Los Angeles: the row belongs to March (and 2023-12-31
    23:00 in Los Angeles is 2024 in UTC). Every live file's partition must be its rows' UTC one."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.transforms import parse_transform
    from pyiceberg.types import TimestamptzType

    if upserts == "collected":
        monkeypatch.setattr(merge_batch, "ROWS_ON_DRIVER_BYTES", -1)
    taken = _one_job_results(monkeypatch)
    name = f"mm.onejob_tz_{term[:-4]}_{upserts}"
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        ts = "TIMESTAMP'{}'"
        lh.write(spark.sql(f"SELECT 1L AS id, {ts.format('2024-02-15 12:00:00+00:00')} AS ts, 'old' AS v"), name, partition_by=[term])
        batch = _cached(spark.sql(
            f"SELECT 1L AS id, {ts.format('2024-02-15 12:00:00+00:00')} AS ts, 'new' AS v UNION ALL "
            f"SELECT 2L, {ts.format('2024-03-01 03:00:00+00:00')}, 'march' UNION ALL SELECT 3L, {ts.format('2024-01-01 07:00:00+00:00')}, 'ny'"
        ))
        try:
            lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["id"]))
        finally:
            batch.unpersist()
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    assert taken == [True]
    table = lh.load(name)
    transform = parse_transform(term.split("(")[0]).transform(TimestamptzType())
    for task in table.scan().plan_files():
        stored = pq.read_table(task.file.file_path.removeprefix("file://"), columns=["ts"]).column("ts")
        micros = stored.cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_pylist()
        assert {transform(m) for m in micros} == {task.file.partition[0]}, f"{task.file.file_path}: rows of another partition"
    march = lh.read(spark, name, row_filter="ts >= '2024-03-01T00:00:00+00:00'").collect()
    assert [x.id for x in march] == [2]  # pruning by partition finds it
    assert lh.verify(name)["agree"]


def test_a_merge_refuses_a_truncate_that_leaves_the_int_range_on_every_road(lh, spark, monkeypatch):
    """The rows road keys upserts with pyiceberg's truncate, which wraps within W of the minimum (Spark's
    expression refuses it): both refuse with the column named, and nothing is committed or left behind."""
    name = "mm.onejob_wrap"
    lh.write(spark.sql("SELECT CAST(id AS INT) AS i, 'old' AS v FROM range(3)"), name, partition_by=["truncate(10, i)"])
    before = lh.load(name).current_snapshot().snapshot_id
    for road in ("rows", "collected"):
        with monkeypatch.context() as m:
            if road == "collected":
                m.setattr(merge_batch, "ROWS_ON_DRIVER_BYTES", -1)
            batch = _cached(spark.sql("SELECT CAST(-2147483648 AS INT) AS i, 'min' AS v UNION ALL SELECT 1, 'new'"))
            try:
                with pytest.raises(InputError, match=r"Table mm\.onejob_wrap: column 'i' .*truncate\(10\) leaves the int range"):
                    lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["i"]))
            finally:
                batch.unpersist()
        table = lh.load(name)
        assert table.current_snapshot().snapshot_id == before
        on_disk = {p.name for p in Path(table.location().removeprefix("file://"), "data").rglob("*.parquet")}
        assert on_disk == {t.file.file_path.rsplit("/", 1)[1] for t in table.scan().plan_files()}, road


def test_candidates_of_an_older_partition_spec_take_the_shuffled_rewrite(lh, spark, monkeypatch):
    """Another engine evolved the spec of an Iceberg-only table: the old files' rows are not all of one partition
    of the new spec, so the one job declines and Spark's rewrite recomputes their partitions."""
    taken = _one_job_results(monkeypatch)
    name = "mm.onejob_oldspec"
    lh.write(spark.sql("SELECT id, CAST(id % 2 AS INT) AS part, CONCAT('n', id % 3) AS name, 'old' AS v FROM range(6)"), name,
             partition_by=["part"], table=TableOptions(formats=ICEBERG_ONLY))
    table = lh.load(name)
    with table.update_spec() as update:
        update.add_identity("name")
    batch = _cached(spark.sql("SELECT 1L AS id, 1 AS part, 'n1' AS name, 'new' AS v"))
    try:
        r = lh.write(batch, name, mode="merge", merge=MergeOptions(keys=["id"]))
    finally:
        batch.unpersist()
    assert taken == [False] and r.files_removed == 1
    table = lh.load(name)
    assert {t.file.spec_id for t in table.scan().plan_files() if "/name=" in t.file.file_path} == {table.spec().spec_id}
    got = sorted((x.id, x.v) for x in lh.read(spark, name).collect())
    assert got == [(0, "old"), (1, "new"), (2, "old"), (3, "old"), (4, "old"), (5, "old")]

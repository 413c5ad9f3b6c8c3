"""All seven partition transforms end to end in both formats, file pruning evidence, and time travel."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from deltalake import DeltaTable

from lakehouse_assets import MergeOptions, RetentionError

from .conftest import assert_all_readers_agree, rows_of
from .versions import assert_same_at

UTC = dt.timezone.utc

# 48 rows. d spans ~2.6 years (20 days apart), ts/ntz ~2 months (31 hours apart), ts2 2023-2024 (10 days apart).
SOURCE = """
SELECT id, CAST(id AS INT) AS i, CAST(id % 3 AS INT) AS grp, CHAR(97 + CAST(id % 4 AS INT)) AS cat,
       CONCAT(CHAR(97 + CAST(id % 6 AS INT)), 'xyz', id) AS s,
       DATE_ADD(DATE'2022-11-01', CAST(id * 20 AS INT)) AS d,
       TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id * 31 AS INT), 0, 0) AS ts,
       CAST(TIMESTAMP_NTZ'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id * 31 AS INT), 0, 0) AS TIMESTAMP_NTZ) AS ntz,
       TIMESTAMP'2023-06-01 00:00:00' + make_interval(0, 0, 0, CAST(id * 10 AS INT), 0, 0, 0) AS ts2,
       CAST(id * 1.25 AS DECIMAL(10, 2)) AS dec,
       CAST(CONCAT('b', id) AS BINARY) AS bin
FROM range(48)
"""


def ts(*a):
    return dt.datetime(*a, tzinfo=UTC)


# (partition term, Iceberg row filter, Delta pruning predicate (tuples or SQL), the same predicate as a Spark filter, Delta prunes by value?)
# Delta has no hash or truncation partitions: identity transforms are Delta partition columns, every other transform
# is pruned through per-file min/max stats. Range transforms (time, truncate) keep each file's values in a narrow
# range, so the stats skip exactly what Iceberg skips; bucket scatters values, so Delta reads a (correct) superset.
CASES = [
    ("cat", "cat = 'b'", [("cat", "=", "b")], "cat = 'b'", True),
    ("grp", "grp = 1", [("grp", "=", 1)], "grp = 1", True),
    ("year(d)", "d >= '2023-01-01' AND d < '2024-01-01'", [("d", ">=", dt.date(2023, 1, 1)), ("d", "<", dt.date(2024, 1, 1))],
     "d >= DATE'2023-01-01' AND d < DATE'2024-01-01'", True),
    ("year(ts2)", "ts2 >= '2024-01-01T00:00:00+00:00'", [("ts2", ">=", ts(2024, 1, 1))], "ts2 >= TIMESTAMP'2024-01-01 00:00:00'", True),
    ("month(d)", "d >= '2023-03-01' AND d < '2023-04-01'", [("d", ">=", dt.date(2023, 3, 1)), ("d", "<", dt.date(2023, 4, 1))],
     "d >= DATE'2023-03-01' AND d < DATE'2023-04-01'", True),
    ("month(ts)", "ts >= '2024-02-01T00:00:00+00:00' AND ts < '2024-03-01T00:00:00+00:00'",
     [("ts", ">=", ts(2024, 2, 1)), ("ts", "<", ts(2024, 3, 1))], "ts >= TIMESTAMP'2024-02-01' AND ts < TIMESTAMP'2024-03-01'", True),
    ("day(ts)", "ts >= '2024-01-02T00:00:00+00:00' AND ts < '2024-01-03T00:00:00+00:00'",
     [("ts", ">=", ts(2024, 1, 2)), ("ts", "<", ts(2024, 1, 3))], "ts >= TIMESTAMP'2024-01-02' AND ts < TIMESTAMP'2024-01-03'", True),
    ("day(d)", "d = '2023-03-21'", [("d", "=", dt.date(2023, 3, 21))], "d = DATE'2023-03-21'", True),
    ("hour(ts)", "ts >= '2024-01-02T07:00:00+00:00' AND ts < '2024-01-02T08:00:00+00:00'",
     [("ts", ">=", ts(2024, 1, 2, 7)), ("ts", "<", ts(2024, 1, 2, 8))], "ts >= TIMESTAMP'2024-01-02 07:00:00' AND ts < TIMESTAMP'2024-01-02 08:00:00'", True),
    ("hour(ntz)", "ntz >= '2024-01-02T07:00:00' AND ntz < '2024-01-02T08:00:00'",
     [("ntz", ">=", dt.datetime(2024, 1, 2, 7)), ("ntz", "<", dt.datetime(2024, 1, 2, 8))],
     "ntz >= TIMESTAMP_NTZ'2024-01-02 07:00:00' AND ntz < TIMESTAMP_NTZ'2024-01-02 08:00:00'", True),
    ("bucket(4, id)", "id = 17", [("id", "=", 17)], "id = 17", False),
    ("bucket(4, s)", "s = 'fxyz5'", [("s", "=", "fxyz5")], "s = 'fxyz5'", False),
    ("bucket(4, d)", "d = '2023-03-21'", [("d", "=", dt.date(2023, 3, 21))], "d = DATE'2023-03-21'", False),
    ("bucket(4, dec)", "dec = 5.00", "dec = CAST(5 AS DECIMAL(10, 2))", "dec = 5", False),
    ("bucket(4, bin)", None, None, None, False),
    ("truncate(10, i)", "i >= 20 AND i < 30", [("i", ">=", 20), ("i", "<", 30)], "i >= 20 AND i < 30", True),
    ("truncate(1, s)", "s >= 'c' AND s < 'd'", [("s", ">=", "c"), ("s", "<", "d")], "s >= 'c' AND s < 'd'", True),
    # Decimal columns carry no Delta stats (Iceberg's exact bounds have no lossless Delta JSON form here): superset.
    ("truncate(1000, dec)", "dec >= 20 AND dec < 30", "dec >= CAST(20 AS DECIMAL(10, 2)) AND dec < CAST(30 AS DECIMAL(10, 2))",
     "dec >= 20 AND dec < 30", False),
    ("truncate(2, bin)", None, None, None, False),
]


@pytest.mark.parametrize("term,iceberg_filter,delta_filter,spark_filter,delta_exact", CASES, ids=[c[0] for c in CASES])
def test_partition_transform_end_to_end_and_pruning(lh, spark, duck, term, iceberg_filter, delta_filter, spark_filter, delta_exact):
    name = "tr.t_" + "".join(ch for ch in term if ch.isalnum())
    lh.write(spark.sql(SOURCE), name, partition_by=[term])
    rows = assert_all_readers_agree(lh, spark, duck, name)
    assert len(rows) == 48
    table = lh.load(name)
    all_files = {t.file.file_path for t in table.scan().plan_files()}
    assert len(all_files) > 1 and all(f"/{table.spec().fields[0].name}=" in p for p in all_files)
    if iceberg_filter is None:
        return  # binary: no literal in the filter grammar; written, partitioned and read in both formats above
    root = table.location()
    expected = spark.sql(SOURCE).filter(spark_filter).count()
    assert expected > 0
    # Iceberg scan planning (partition values + min/max) keeps only some files, and they hold every match.
    planned = {t.file.file_path for t in table.scan(row_filter=iceberg_filter).plan_files()}
    assert 0 < len(planned) < len(all_files)
    assert lh.read(spark, name, row_filter=iceberg_filter).filter(spark_filter).count() == expected
    # Delta: delta-rs file skipping from the log's partition values and per-file stats.
    delta = DeltaTable(root)
    delta_files = {"file://" + u if u.startswith("/") else u for u in delta.file_uris(file_pruning_predicate=delta_filter)}
    assert planned <= delta_files <= all_files
    if delta_exact:
        assert delta_files == planned, f"{term}: Delta reads {len(delta_files)} files, Iceberg {len(planned)}"
    from lakehouse_assets.core.read.reader import read_parquet_files
    from lakehouse_assets.core.schema.type_mapping import iceberg_to_spark_schema

    only_delta_files = read_parquet_files(spark, sorted(delta_files), iceberg_to_spark_schema(table.schema()), lh.storage)
    assert only_delta_files.filter(spark_filter).count() == expected
    if term in ("cat", "grp"):
        assert delta.metadata().partition_columns == [term]


def test_identity_partition_values_in_the_delta_log(lh, spark):
    lh.write(spark.sql(SOURCE), "tr.ident", partition_by=["cat", "day(ts)"])
    import pyarrow as pa

    delta = DeltaTable(lh.load("tr.ident").location())
    assert delta.metadata().partition_columns == ["cat"]  # day() has no Delta equivalent: stats prune it
    actions = pa.table(delta.get_add_actions(flatten=True)).to_pylist()
    assert {a["partition.cat"] for a in actions} == {"a", "b", "c", "d"}
    assert all(f"/cat={a['partition.cat']}/" in "/" + a["path"] for a in actions)
    assert all(a["min.ts"] is not None and a["max.ts"] is not None for a in actions)


@pytest.mark.smoke
def test_time_travel_by_snapshot_version_and_timestamp(lh, spark, duck):
    marks, results = [], []
    ops = [
        lambda: lh.write(spark.sql("SELECT id, 'v1' AS tag FROM range(5)"), "tt.t"),
        lambda: lh.write(spark.sql("SELECT id, 'v2' AS tag FROM range(5, 8)"), "tt.t"),
        lambda: lh.write(spark.sql("SELECT id, 'v3' AS tag FROM range(100, 102)"), "tt.t", mode="overwrite"),
        lambda: lh.write(spark.createDataFrame([(6, "v4", "u"), (7, None, "d")], "id long, tag string, op string"), "tt.t",
                         mode="merge", merge=MergeOptions(keys=["id"], operation_column="op")),
    ]
    for op in ops:
        results.append(op())
        time.sleep(0.05)
        marks.append(dt.datetime.now(UTC))
        time.sleep(0.05)
    expected = [
        [(i, "v1") for i in range(5)],
        [(i, "v1") for i in range(5)] + [(5, "v2"), (6, "v2"), (7, "v2")],
        [(100, "v3"), (101, "v3")],
        [(100, "v3"), (101, "v3")],  # merge into a table without keys 6 and 7: 6 inserted, 7 deleted (absent)
    ]
    expected[3] = expected[3] + [(6, "v4")]
    history = {h["iceberg_snapshot_id"]: h for h in lh.history("tt.t")}
    for r, mark, want in zip(results, marks, expected):
        want_rows = rows_of([{"id": i, "tag": t} for i, t in want], ["id", "tag"])
        # By Iceberg snapshot id: the mapped Delta version is the one history shows.
        p = lh.point_in_time("tt.t", snapshot_id=r.iceberg_snapshot_id)
        assert (p.iceberg_snapshot_id, p.delta_version) == (r.iceberg_snapshot_id, r.delta_version)
        assert history[r.iceberg_snapshot_id]["delta_version"] == r.delta_version
        # By Delta version, and by timestamp: the same point.
        assert lh.point_in_time("tt.t", delta_version=r.delta_version) == p
        assert lh.point_in_time("tt.t", as_of=mark) == p
        assert_same_at(lh, spark, duck, "tt.t", p.iceberg_snapshot_id, p.delta_version, want_rows)
        # Delta's own timestamp resolution (delta-rs load_as_version) lands on the same version.
        d = DeltaTable(lh.load("tt.t").location())
        d.load_as_version(mark)
        assert d.version() == r.delta_version
        assert rows_of(lh.read(spark, "tt.t", as_of=mark).collect(), ["id", "tag"]) == want_rows
    assert history[results[3].iceberg_snapshot_id]["operation"] == "merge"
    with pytest.raises(RetentionError, match=r"Table tt\.t has no snapshot at or before"):
        lh.point_in_time("tt.t", as_of=dt.datetime(2000, 1, 1, tzinfo=UTC))
    with pytest.raises(RetentionError, match=r"Table tt\.t has no snapshot 12345"):
        lh.point_in_time("tt.t", snapshot_id=12345)

"""Lakehouse.read(row_filter=<pyiceberg expression>) filters rows, not only files, with exact literals.

Iceberg planning prunes files; the rows of a planned file that do not match must be filtered in Spark.
Each expression is checked against two references: the same filter as Spark SQL over the whole table
(Spark parses its own literals) and pyiceberg's own scan, which filters rows in Arrow (for the
predicates where Arrow and SQL agree on nulls).
"""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from pyiceberg.expressions import (
    And,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNaN,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    NotIn,
    NotNull,
    NotStartsWith,
    Or,
    StartsWith,
)

from lakehouse_assets import SpecError, TableOptions

UTC = dt.timezone.utc
ROWS = [
    # id, i, l, f, d, dec, s, b, flag, day, ts (timestamptz), ntz (timestamp), st.x
    (1, 1, 10, 0.5, 1.5, decimal.Decimal("1.10"), "abc", b"\x01", True, dt.date(1, 1, 1),
     dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(1, 1, 1), (3,)),
    (2, 2, 20, 1.5, float("nan"), decimal.Decimal("2.25"), "abd", b"\x02", False, dt.date(2024, 1, 1),
     dt.datetime(2024, 1, 1, 11, 59, 59, 999999, tzinfo=UTC), dt.datetime(2024, 1, 1, 12, 0, 0, 1), (4,)),
    (3, 3, 30, 2.5, 2.5, decimal.Decimal("-3.00"), None, b"\x03\x00", True, dt.date(9999, 12, 31),
     dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), None),
    (4, None, 40, 3.5, 3.5, None, "xyz", None, None, None, None, None, (5,)),
    (5, 2147483647, 50, 4.5, 0.5, decimal.Decimal("0.01"), "q", b"", False, dt.date(1970, 1, 1),
     dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1), (6,)),
]
SCHEMA = (
    "id long, i int, l long, f float, d double, dec decimal(10,2), s string, b binary, flag boolean, day date, "
    "ts timestamp, ntz timestamp_ntz, st struct<x: long>"
)

# (pyiceberg expression, the same filter as Spark SQL, compare with pyiceberg's Arrow filter too)
CASES = [
    (EqualTo("i", 2), "i = 2", True),
    (NotEqualTo("l", 20), "l != 20", True),
    (GreaterThan("f", 1.5), "f > 1.5", True),
    (LessThanOrEqual("d", 2.5), "d <= 2.5", True),
    (EqualTo("dec", decimal.Decimal("1.10")), "dec = 1.10", True),
    (LessThan("dec", 0), "dec < 0", True),
    (In("s", {"abc", "xyz"}), "s IN ('abc', 'xyz')", True),
    (NotIn("s", {"abc"}), "s NOT IN ('abc')", False),  # Arrow keeps the null row, SQL does not
    (StartsWith("s", "ab"), "s LIKE 'ab%'", True),
    (NotStartsWith("s", "ab"), "NOT s LIKE 'ab%'", False),
    (IsNull("s"), "s IS NULL", True),
    (NotNull("dec"), "dec IS NOT NULL", True),
    (IsNaN("d"), "isnan(d)", True),
    (EqualTo("b", b"\x03\x00"), "b = X'0300'", True),
    (EqualTo("flag", True), "flag = true", True),
    (EqualTo("day", "0001-01-01"), "day = DATE'0001-01-01'", True),
    (GreaterThanOrEqual("day", "9999-12-31"), "day >= DATE'9999-12-31'", True),
    (LessThan("ts", "2024-01-01T12:00:00+00:00"), "ts < TIMESTAMP'2024-01-01 12:00:00+00:00'", True),
    (EqualTo("ts", "0001-01-01T00:00:00+00:00"), "ts = TIMESTAMP'0001-01-01 00:00:00+00:00'", True),
    (EqualTo("ntz", "2024-01-01T12:00:00.000001"), "ntz = TIMESTAMP_NTZ'2024-01-01 12:00:00.000001'", True),
    (GreaterThan("ntz", "9999-12-31T23:59:59.999998"), "ntz > TIMESTAMP_NTZ'9999-12-31 23:59:59.999998'", True),
    (EqualTo("ntz", "0001-01-01T00:00:00"), "ntz = TIMESTAMP_NTZ'0001-01-01 00:00:00'", True),
    (EqualTo("st.x", 4), "st.x = 4", True),
    (And(Or(EqualTo("i", 1), EqualTo("l", 40)), Not(EqualTo("flag", False))), "(i = 1 OR l = 40) AND NOT flag = false", True),
    # A member outside int's range binds to a placeholder holding int's max: it must match nothing
    # (pyiceberg's own Arrow filter matches i = 2147483647 there).
    (In("i", {1, 2**40}), "i IN (1)", False),
    (NotIn("i", {2**40, 2**41}), "i IS NOT NULL", False),
    # NaN satisfies no ordering comparison (Iceberg's rule; Spark SQL alone orders NaN above every number).
    (GreaterThan("d", 1.0), "d > 1.0 AND NOT isnan(d)", True),
    (GreaterThanOrEqual("d", 0.5), "d >= 0.5 AND NOT isnan(d)", True),
]


@pytest.fixture(scope="module")
def filtered_table(spark, tmp_path_factory):
    from lakehouse_assets import Lakehouse

    lh = Lakehouse(str(tmp_path_factory.mktemp("row_filters")))
    # One file holding every row: planning cannot prune any of them, so only the row filter can.
    lh.write(spark.createDataFrame(ROWS, SCHEMA).coalesce(1), "f.rows")
    return lh


@pytest.mark.parametrize("expr, sql, arrow_agrees", CASES, ids=[c[1] for c in CASES])
def test_an_expression_row_filter_filters_rows_like_its_sql(filtered_table, spark, expr, sql, arrow_agrees):
    lh = filtered_table
    ours = sorted(r["id"] for r in lh.read(spark, "f.rows", row_filter=expr).select("id").collect())
    as_sql = sorted(r["id"] for r in lh.read(spark, "f.rows").filter(sql).select("id").collect())  # Spark parses the literals
    assert ours == as_sql
    assert len(ours) < len(ROWS)  # the filter did filter: every case leaves some row out
    if arrow_agrees:
        assert ours == sorted(lh.load("f.rows").scan(row_filter=expr).to_arrow().column("id").to_pylist())


@pytest.mark.smoke
def test_an_expression_row_filter_on_time_travel_and_delta_reads(filtered_table, spark):
    lh = filtered_table
    table = lh.load("f.rows")
    snap = table.current_snapshot().snapshot_id
    assert [r["id"] for r in lh.read(spark, "f.rows", snapshot_id=snap, row_filter=EqualTo("l", 30)).collect()] == [3]
    version = lh.point_in_time("f.rows", snapshot_id=snap).delta_version
    assert [r["id"] for r in lh.read(spark, "f.rows", delta_version=version, row_filter=EqualTo("l", 30)).collect()] == [3]


def test_an_expression_row_filter_on_a_missing_column_names_it(filtered_table, spark):
    with pytest.raises(Exception, match="nope"):
        filtered_table.read(spark, "f.rows", row_filter=EqualTo("nope", 1))


def test_an_expression_row_filter_error_is_a_spec_error_on_delta_reads(filtered_table, spark):
    with pytest.raises(SpecError, match=r"Table f\.rows: row_filter .* does not fit the table's columns"):
        filtered_table.read(spark, "f.rows", delta_version=filtered_table.point_in_time("f.rows").delta_version, row_filter=EqualTo("nope", 1))


def test_nan_rows_match_no_ordering_comparison_whatever_the_file_layout(lh, spark):
    """Iceberg's pruning leaves NaN out of a file's bounds: a NaN row must not match `>` in one file and not another."""
    for values in ([float("nan"), 0.5], [float("nan"), 5.0]):
        lh.write(spark.createDataFrame([(v,) for v in values], "d double").coalesce(1), "f.nans")
    assert len(lh.load("f.nans").current_snapshot().summary["total-data-files"]) and len({t.file.file_path for t in lh.load("f.nans").scan().plan_files()}) == 2
    assert [r["d"] for r in lh.read(spark, "f.nans", row_filter=GreaterThan("d", 1.0)).collect()] == [5.0]
    assert [r["d"] for r in lh.read(spark, "f.nans", row_filter="d > 1.0").collect()] == [5.0]


def test_a_time_travel_filter_means_the_columns_of_its_snapshot_after_names_were_swapped(lh, spark):
    """Iceberg-only table, two files; then a and b swap names. Reading the old snapshot with `a = 1` means the
    old `a`: pyiceberg plans with the current names (where `a` is the old `b`), so planning must not prune by it."""
    for a, b in ((1, 100), (2, 200)):
        lh.write(spark.createDataFrame([(a, b)], "a long, b long"), "f.swapped", table=TableOptions(formats=["iceberg"]))
    before = lh.load("f.swapped").current_snapshot().snapshot_id
    lh.alter("f.swapped", rename={"a": "x"})
    lh.alter("f.swapped", rename={"b": "a"})
    lh.alter("f.swapped", rename={"x": "b"})
    for row_filter in (EqualTo("a", 1), "a = 1"):
        rows = lh.read(spark, "f.swapped", snapshot_id=before, row_filter=row_filter).collect()
        assert [(r["a"], r["b"]) for r in rows] == [(1, 100)], row_filter
    now = lh.read(spark, "f.swapped", row_filter=EqualTo("a", 200)).collect()  # the current names: a is the old b
    assert [(r["a"], r["b"]) for r in now] == [(200, 2)]


def test_a_delta_version_filter_binds_to_the_schema_of_that_version(lh, spark):
    """A float column later widened to double: the old version's filter literal is a float, as its files hold."""
    lh.write(spark.createDataFrame([(1, 0.1)], "id long, f float"), "f.widened")
    point = lh.point_in_time("f.widened")
    lh.write(spark.createDataFrame([(2, 0.25)], "id long, f double"), "f.widened")
    assert str(lh.load("f.widened").schema().find_field("f").field_type) == "double"
    rows = lh.read(spark, "f.widened", delta_version=point.delta_version, row_filter=EqualTo("f", 0.1)).collect()
    assert [r["id"] for r in rows] == [1]
    # The same point in time read through Iceberg with the same filter: both formats give the same rows.
    iceberg_rows = lh.read(spark, "f.widened", snapshot_id=point.iceberg_snapshot_id, row_filter=EqualTo("f", 0.1)).collect()
    assert [r["id"] for r in iceberg_rows] == [1]


DECIMAL_BEYOND = [
    # A literal with more integer digits than decimal(10,2) holds: beyond every value of the column.
    # (Spark would cast it to null, which matches nothing.)
    (LessThan("dec", decimal.Decimal("123456789.00")), {1, 2, 3, 5}),
    (GreaterThan("dec", decimal.Decimal("-123456789.00")), {1, 2, 3, 5}),
    (GreaterThanOrEqual("dec", decimal.Decimal("123456789.00")), set()),
    (EqualTo("dec", decimal.Decimal("123456789.00")), set()),
    (NotEqualTo("dec", decimal.Decimal("123456789.00")), {1, 2, 3, 5}),
    (In("dec", {decimal.Decimal("123456789.00"), decimal.Decimal("2.25")}), {2}),
    (NotIn("dec", {decimal.Decimal("123456789.00"), decimal.Decimal("2.25")}), {1, 3, 5}),
]


@pytest.mark.parametrize("expr, want", DECIMAL_BEYOND, ids=[repr(c[0])[:60] for c in DECIMAL_BEYOND])
def test_a_decimal_literal_beyond_the_columns_precision_compares_as_beyond_every_value(filtered_table, spark, expr, want):
    """pyiceberg binds `dec < 123456789.00` to a decimal(10,2) column (it checks the scale only); the rows
    must be Iceberg's (every non-null value is below it), as its pruning reads it. (pyiceberg's own Arrow
    scan raises on such a literal, so the expected rows are written out here.)"""
    lh = filtered_table
    assert {r["id"] for r in lh.read(spark, "f.rows", row_filter=expr).select("id").collect()} == want


def test_a_long_chain_of_one_operator_is_written_flat(filtered_table, spark):
    """A left-deep OR of many terms (as `functools.reduce(Or, ...)` builds it) becomes one flat SQL chain,
    which Spark's parser reads in a loop rather than one recursion level per term."""
    import functools

    from lakehouse_assets.core.read.spark_filters import bind_row_filter, spark_row_filter_sql

    expr = functools.reduce(Or, [EqualTo("l", v) for v in range(0, 3000, 10)])
    table = filtered_table.load("f.rows")
    text = spark_row_filter_sql("f.rows", table.schema(), bind_row_filter("f.rows", table.schema(), expr))
    depth = deepest = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, depth)
    assert text.count(" OR ") == 299 and deepest <= 3  # the chain, a predicate, a literal's CAST: not 300 levels
    assert sorted(r["id"] for r in filtered_table.read(spark, "f.rows", row_filter=expr).select("id").collect()) == [1, 2, 3, 4, 5]


def test_a_filter_on_an_unusual_name_under_regex_column_names_says_what_to_change(lh, spark):
    lh.write(spark.createDataFrame([(1, 10), (2, 20)], "`order-id` long, n long"), "f.oddnames")
    assert [r["n"] for r in lh.read(spark, "f.oddnames", row_filter=EqualTo("order-id", 2)).collect()] == [20]
    spark.conf.set("spark.sql.parser.quotedRegexColumnNames", "true")
    try:
        with pytest.raises(SpecError, match=r"Table f\.oddnames: .*spark\.sql\.parser\.quotedRegexColumnNames=false"):
            lh.read(spark, "f.oddnames", row_filter=EqualTo("order-id", 2))
        assert [r["n"] for r in lh.read(spark, "f.oddnames", row_filter=EqualTo("n", 10)).collect()] == [10]  # plain names still work
    finally:
        spark.conf.unset("spark.sql.parser.quotedRegexColumnNames")


def _has_filter(df) -> bool:
    return "Filter" in df._jdf.queryExecution().optimizedPlan().toString()


def test_a_filter_the_partitions_decide_is_not_evaluated_again_on_the_rows(lh, spark):
    """Where every planned file's partition satisfies the filter for all its rows (Iceberg's residual is true),
    Spark gets no row filter, as with Java Iceberg's reader; anywhere else the rows are still filtered."""
    rows = [(i, dt.datetime(2024, 1, 1 + i % 3, (5 * i) % 24, tzinfo=UTC), i % 4 if i % 5 else None) for i in range(30)]
    lh.write(spark.createDataFrame(rows, "id long, ts timestamp, k long"), "f.days", partition_by=["day(ts)", "k"])

    def ids(row_filter):
        df = lh.read(spark, "f.days", row_filter=row_filter)
        return _has_filter(df), sorted(r["id"] for r in df.collect())

    def want(keep):
        return sorted(i for i, ts, k in rows if keep(ts, k))

    day2 = dt.datetime(2024, 1, 2, tzinfo=UTC)
    aligned = "ts >= '2024-01-02T00:00:00+00:00' AND ts < '2024-01-03T00:00:00+00:00'"
    assert ids(aligned) == (False, want(lambda ts, k: day2 <= ts < day2 + dt.timedelta(days=1)))
    assert ids(In("k", [2, 3])) == (False, want(lambda ts, k: k in (2, 3)))
    # A filter that keeps a null partition next to a comparison: pyiceberg 0.12's residual evaluation compares
    # the null (`None > 1`, a TypeError), so every file is planned and the rows are filtered, in Spark and Arrow.
    with pytest.raises(TypeError, match="not supported between instances of 'NoneType'"):
        lh.load("f.days").scan(row_filter=Or(GreaterThan("k", 1), IsNull("k"))).plan_files()
    nulls_or_above_1 = want(lambda ts, k: k is None or k > 1)
    assert ids(Or(GreaterThan("k", 1), IsNull("k"))) == (True, nulls_or_above_1)
    assert sorted(lh.read_arrow("f.days", row_filter=Or(GreaterThan("k", 1), IsNull("k")))["id"].to_pylist()) == nulls_or_above_1
    # Mid-day: the partition cannot decide, so the rows are filtered.
    assert ids("ts >= '2024-01-02T12:00:00+00:00'") == (True, want(lambda ts, k: ts >= day2 + dt.timedelta(hours=12)))
    # A negation is still filtered on the rows: Iceberg's residuals say `null != 1` is true (two-valued logic),
    # and a row filter means SQL's rows (a comparison with null matches nothing).
    assert ids(NotEqualTo("k", 1)) == (True, want(lambda ts, k: k is not None and k != 1))
    assert ids(Not(In("k", [0, 1]))) == (True, want(lambda ts, k: k is not None and k not in (0, 1)))

"""Column statistics: one policy for both formats, on tables of any width.

Delta readers parse the statistics of the columns in `delta.dataSkippingStatsColumns` (else the first
`delta.dataSkippingNumIndexedCols` leaf columns, 32 by default); Iceberg keeps them per its
`write.metadata.metrics.*` properties. The policy (core/schema/statistics.py) makes both index the same
columns, the formats-agree check compares exactly those, and no statistic in either log claims a bound
the file's rows break. Wide tables are read back, filtered on a late column, by every reader here.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import GreaterThanOrEqual
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, StructType
from pyspark.sql import functions as F

from lakehouse_assets import Lakehouse, MergeOptions, TableOptions
from lakehouse_assets.core.errors import SpecError
from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer
from lakehouse_assets.core.read import duckdb_readers
from lakehouse_assets.core.schema.statistics import (
    DELTA_STATS_COLUMNS,
    delta_indexed_columns,
    parse_column_list,
    quote_column,
    table_policy,
)

from . import java_iceberg
from .test_edge_values import adds, local
from .test_verify_deep import plant_delta_log

# ---------------------------------------------------------------- the policy (no Spark)


def _schema(n: int, *extra: NestedField) -> Schema:
    fields = [NestedField(i + 1, f"c{i}", LongType(), required=False) for i in range(n)]
    return Schema(*fields, *extra)


def _bounded(policy) -> list[str]:
    return [f.name for f in policy.schema.fields if f.field_type.is_primitive and policy.has_bounds(f.field_id)]


def test_default_is_icebergs_rule_first_100_top_level_columns_in_both_formats():
    schema = _schema(120)
    policy = table_policy("s.t", schema, {})
    assert _bounded(policy) == [f"c{i}" for i in range(100)]
    assert policy.delta_columns() == [f"c{i}" for i in range(100)]
    # A prefix of the schema: Delta's "first N leaf columns", so columns added later need no new Delta version.
    assert policy.delta_configuration() == {"delta.dataSkippingNumIndexedCols": "100"}
    assert policy.delta_configuration({DELTA_STATS_COLUMNS: "c0"}) == {DELTA_STATS_COLUMNS: ",".join(f"c{i}" for i in range(100))}
    assert delta_indexed_columns(schema, policy.delta_configuration(), []) == {f"c{i}" for i in range(100)}
    # Iceberg's form for pyiceberg's collector: nothing by default, the chosen columns by name.
    props = policy.iceberg_properties()
    assert props["write.metadata.metrics.default"] == "none"
    assert props["write.metadata.metrics.column.c99"] == "full" and "write.metadata.metrics.column.c100" not in props


def test_an_explicit_default_or_a_higher_limit_covers_every_column():
    schema = _schema(1000)
    assert len(_bounded(table_policy("s.t", schema, {"write.metadata.metrics.default": "full"}))) == 1000
    assert len(_bounded(table_policy("s.t", schema, {"write.metadata.metrics.max-inferred-column-defaults": "1000"}))) == 1000
    counts = table_policy("s.t", schema, {"write.metadata.metrics.default": "counts"})
    assert _bounded(counts) == [] and len(counts.delta_columns()) == 1000  # null counts in both, no bounds


def test_delta_properties_choose_the_columns_for_iceberg_too():
    s = NestedField(10, "s", StructType(NestedField(11, "a", LongType(), required=False), NestedField(12, "b", LongType(), required=False)), required=False)
    schema = Schema(NestedField(1, "p", StringType(), required=False), s, NestedField(2, "x", LongType(), required=False),
                    NestedField(3, "y", StringType(), required=False), NestedField(4, "z", LongType(), required=False))
    # The first 3 leaf columns, the partition column not counted (Delta's rule): s.a, s.b, x.
    policy = table_policy("s.t", schema, {"delta.dataSkippingNumIndexedCols": "3"}, partition_columns=["p"])
    assert policy.delta_columns() == ["x"]  # Delta keeps statistics of top-level columns; p holds partition values
    assert _bounded(policy) == ["p", "x"]  # Iceberg keeps the partition column's bounds, as it always does
    assert policy.has_counts(11) and not policy.has_bounds(11)  # nested: null counts in Iceberg, as pyiceberg writes them
    assert not policy.has_counts(3) and not policy.has_counts(4)
    assert delta_indexed_columns(schema, {"delta.dataSkippingNumIndexedCols": "3"}, ["p"]) == {"s", "x"}

    named = table_policy("s.t", schema, {"delta.dataSkippingStatsColumns": "z, `y`", "write.metadata.metrics.column.x": "counts"})
    assert named.delta_columns() == ["x", "y", "z"] and _bounded(named) == ["y", "z"]
    # The struct before them is listed too: delta-rs parses no statistics after a struct its list leaves out.
    assert named.delta_configuration() == {DELTA_STATS_COLUMNS: "s,x,y,z"}
    assert named.mode(3).length == 16  # strings: Iceberg's truncate(16)


def test_a_per_column_none_removes_the_column_from_both_formats():
    policy = table_policy("s.t", _schema(5), {"write.metadata.metrics.column.c2": "none"})
    assert policy.delta_columns() == ["c0", "c1", "c3", "c4"]
    empty = table_policy("s.t", _schema(2), {"write.metadata.metrics.default": "none"})
    assert empty.delta_columns() == [] and empty.delta_configuration() == {"delta.dataSkippingNumIndexedCols": "0"}
    assert empty.delta_configuration({DELTA_STATS_COLUMNS: "c1"}) == {DELTA_STATS_COLUMNS: ""}  # a list, once set, is what readers use


@pytest.mark.parametrize("names", [["a"], ["a b", "x,y"], ["c`d", "`"], ["ü", "s.x"]])
def test_delta_column_lists_round_trip(names):
    assert parse_column_list(",".join(map(quote_column, names))) == names


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("write.metadata.metrics.default", "truncate(0)", "is not a metrics mode; use none, counts, truncate(N) or full"),
        ("write.metadata.metrics.column.c1", "fast", "is not a metrics mode"),
        ("write.metadata.metrics.max-inferred-column-defaults", "many", "must be an integer of at least 0"),
        ("delta.dataSkippingNumIndexedCols", "-2", "must be an integer of at least -1"),
    ],
)
def test_a_bad_statistics_property_is_a_clear_error(key, value, expected):
    with pytest.raises(SpecError) as e:
        table_policy("shop.orders", _schema(3), {key: value})
    assert "shop.orders" in str(e.value) and key in str(e.value) and expected in str(e.value)


# ---------------------------------------------------------------- wide tables end to end


def _wide(spark, n: int, start: int, rows: int):
    """`n` columns: id, a string, then longs c2.. whose values grow with id (so files have disjoint ranges)."""
    cols = ", ".join(f"id * {i} AS c{i}" for i in range(2, n))
    return spark.sql(f"SELECT id, concat('s', cast(id AS string)) AS c1, {cols} FROM range({start}, {start + rows})")


def _assert_bounds_hold_against_rows(lh, identifier: str) -> int:
    """Every statistic in both logs is a true bound of its file's rows (and counts its nulls). Returns the columns checked."""
    table = lh.load(identifier)
    schema = table.schema()
    delta_stats = {a["path"]: json.loads(a["stats"]) for a in adds(table.location())}
    checked = 0
    for f in iceberg_committer.live_data_files(table):
        rel = os.path.relpath(local(f.file_path), local(table.location()))
        data = pq.read_table(local(f.file_path))
        stats = delta_stats[rel]
        for field in schema.fields:
            if not field.field_type.is_primitive:
                continue
            column = data.column(field.name)
            lo, hi = pc.min(column).as_py(), pc.max(column).as_py()
            if field.field_id in (f.lower_bounds or {}):
                assert from_bytes(field.field_type, f.lower_bounds[field.field_id]) <= lo
                assert from_bytes(field.field_type, f.upper_bounds[field.field_id]) >= hi
                checked += 1
            if field.name in stats["minValues"]:
                assert stats["minValues"][field.name] <= lo and stats["maxValues"][field.name] >= hi, (identifier, field.name)
            if field.name in stats["nullCount"]:
                assert stats["nullCount"][field.name] == column.null_count
    return checked


def _delta_indexed(table) -> set[str]:
    """The columns whose statistics Delta readers parse, from the Delta log's own configuration."""
    delta = DeltaTable(table.location())
    return delta_indexed_columns(table.schema(), delta.metadata().configuration, delta.metadata().partition_columns)


@pytest.mark.smoke
@pytest.mark.parametrize("width", [33, 120, 1000])
def test_wide_tables_agree_after_append_and_merge_and_every_reader_filters_a_late_column(lh, spark, duck, width):
    name = f"wide.t{width}"
    lh.write(_wide(spark, width, 0, 20).coalesce(1), name)
    lh.write(_wide(spark, width, 20, 20).coalesce(1), name)
    report = lh.verify(name, deep=True)
    assert report["agree"], report["differences"]
    # A merge rewrites the file holding ids 15..19 and adds the new ids.
    lh.write(_wide(spark, width, 15, 10).withColumn("c1", F.lit("merged")), name, mode="merge", merge=MergeOptions(keys=["id"]))
    report = lh.verify(name, deep=True)
    assert report["agree"], report["differences"]

    table = lh.load(name)
    indexed = min(width, 100)
    delta = DeltaTable(table.location())
    assert _delta_indexed(table) == {f.name for f in table.schema().fields[:indexed]}
    flat = pa.table(delta.get_add_actions(flatten=True))
    assert sorted(c for c in flat.column_names if c.startswith("min.")) == sorted(f"min.{f.name}" for f in table.schema().fields[:indexed])
    assert _assert_bounds_hold_against_rows(lh, name) == indexed * len(iceberg_committer.live_data_files(table))

    # "Column 900 of 1,000" (or the last of a narrower table): c{late} = id * late, ids 0..39 after the merge.
    late = min(900, width - 1)
    threshold = 37 * late
    expected = [37, 38, 39]
    where = f"c{late} >= {threshold}"
    assert sorted(r["id"] for r in lh.read(spark, name, row_filter=where).select("id").collect()) == expected
    for src in (duckdb_readers.iceberg_scan_sql(table.metadata_location), duckdb_readers.delta_scan_sql(table.location())):
        assert sorted(r[0] for r in duck.execute(f"SELECT id FROM {src} WHERE {where}").fetchall()) == expected, src
    assert sorted(table.scan(row_filter=GreaterThanOrEqual(f"c{late}", threshold), selected_fields=("id",)).to_arrow()["id"].to_pylist()) == expected
    dataset = delta.to_pyarrow_dataset()
    assert sorted(dataset.to_table(columns=["id"], filter=pc.field(f"c{late}") >= threshold)["id"].to_pylist()) == expected
    if java_iceberg.available():  # the reference implementation exists here for Spark 3.5 only
        java = java_iceberg.read_metadata(spark, table.metadata_location)
        assert sorted(r["id"] for r in java.where(where).select("id").collect()) == expected


def test_iceberg_metrics_properties_are_translated_to_delta(lh, spark, duck):
    df = spark.sql("SELECT id, id * 2 AS b, cast(id AS string) AS c FROM range(10)")
    lh.write(df.coalesce(1), "st.iceberg_props", table=TableOptions(properties={"write.metadata.metrics.default": "none", "write.metadata.metrics.column.b": "full"}))
    table = lh.load("st.iceberg_props")
    (f,) = iceberg_committer.live_data_files(table)
    b = table.schema().find_field("b").field_id
    assert set(f.lower_bounds) == {b} and set(f.null_value_counts) == {b}
    delta = DeltaTable(table.location())
    assert delta.metadata().configuration[DELTA_STATS_COLUMNS] == "b"
    assert [c for c in pa.table(delta.get_add_actions(flatten=True)).column_names if c.startswith(("min.", "null_count."))] == ["null_count.b", "min.b"]
    assert lh.verify("st.iceberg_props", deep=True)["agree"]


def test_delta_properties_are_translated_to_iceberg_per_table_and_resource_wide(warehouse, spark, monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    df = spark.sql("SELECT id % 2 AS p, id AS a, id * 2 AS b, id * 3 AS c FROM range(10)")
    lh = Lakehouse(warehouse)
    lh.write(df, "st.num_indexed", partition_by=["p"], table=TableOptions(properties={"delta.dataSkippingNumIndexedCols": "2"}))
    table = lh.load("st.num_indexed")
    ids = {f.name: f.field_id for f in table.schema().fields}
    for f in iceberg_committer.live_data_files(table):
        assert set(f.lower_bounds) == {ids["p"], ids["a"], ids["b"]}  # the first two data columns, and the partition column
    assert _delta_indexed(table) == {"a", "b"}
    assert lh.verify("st.num_indexed", deep=True)["agree"]

    resource_wide = Lakehouse(warehouse, delta_configuration={"delta.dataSkippingStatsColumns": "c"})
    resource_wide.write(df, "st.resource")
    table = resource_wide.load("st.resource")
    assert table.properties["delta.dataSkippingStatsColumns"] == "c"  # the table's own property from now on
    for f in iceberg_committer.live_data_files(table):
        assert set(f.lower_bounds) == {table.schema().find_field("c").field_id}
    assert resource_wide.verify("st.resource")["agree"]


def test_changed_properties_and_new_columns_reach_delta_on_the_next_write(lh, spark):
    df = spark.sql("SELECT id, id * 2 AS b FROM range(5)")
    lh.write(df, "st.evolving", table=TableOptions(properties={"write.metadata.metrics.max-inferred-column-defaults": "1"}))
    table = lh.load("st.evolving")
    assert _delta_indexed(table) == {"id"}
    with table.transaction() as tx:  # e.g. ALTER TABLE ... SET TBLPROPERTIES from another engine
        tx.set_properties({"write.metadata.metrics.max-inferred-column-defaults": "3"})
    lh.write(spark.sql("SELECT id + 5 AS id, id AS b, id AS added FROM range(5)"), "st.evolving")
    assert _delta_indexed(lh.load("st.evolving")) == {"id", "b", "added"}
    report = lh.verify("st.evolving", deep=True)
    assert report["agree"], report["differences"]


def test_a_struct_before_the_indexed_columns_does_not_hide_their_statistics(lh, spark):
    """A column list that leaves out a struct would make delta-rs parse nothing after it: the list names it."""
    df = spark.sql("SELECT id, named_struct('a', id) AS st, id * 2 AS b, id * 3 AS c FROM range(6)")
    lh.write(df.coalesce(1), "st.struct", table=TableOptions(properties={"write.metadata.metrics.column.id": "none"}))
    table = lh.load("st.struct")
    delta = DeltaTable(table.location())
    assert delta.metadata().configuration[DELTA_STATS_COLUMNS] == "st,b,c"
    flat = pa.table(delta.get_add_actions(flatten=True)).to_pylist()[0]
    assert (flat["min.b"], flat["max.c"]) == (0, 15)
    assert lh.verify("st.struct", deep=True)["agree"]


def test_verify_compares_what_delta_indexes_and_nothing_more(lh, spark):
    """A Delta log with the default configuration (the first 32 columns) and statistics for all 40: a wrong
    statistic of column 35 is not read by any Delta reader and is no difference; one of column 5 is."""
    lh.write(_wide(spark, 40, 0, 10).coalesce(1), "st.default32")
    plant_delta_log(lh, "st.default32")  # a fresh log: no dataSkipping configuration, every column's statistics
    report = lh.verify("st.default32")
    assert report["agree"], report["differences"]

    def wrong(column):
        def edit(f, st):
            st["minValues"][column] = -1
            return st

        return edit

    plant_delta_log(lh, "st.default32", stats=wrong("c35"))
    assert lh.verify("st.default32")["agree"]
    plant_delta_log(lh, "st.default32", stats=wrong("c5"))
    report = lh.verify("st.default32")
    assert not report["agree"] and "Delta min of 'c5' is -1" in " ".join(report["differences"])


def test_the_blocking_check_passes_on_a_wide_asset(dagster_resources, spark):
    from dagster import asset, materialize

    from lakehouse_assets.dagster.checks import build_formats_agree_checks

    @asset(key_prefix=["wide"])
    def features(pyspark: PySparkResource):
        return _wide(pyspark.spark_session, 60, 0, 30)

    checks = build_formats_agree_checks([features.key])
    result = materialize([features, *checks], resources=dagster_resources)
    evaluations = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert result.success and [e.passed for e in evaluations] == [True]


def test_truncated_string_bounds_stay_true_bounds_in_both_logs(lh, spark):
    """Iceberg truncates string bounds to 16 characters (its upper bound rounded up); the Delta statistic derived
    from it must still bound the rows, or be left out."""
    long_text = "z" * 40
    df = spark.sql(f"SELECT id, IF(id = 1, '{long_text}', cast(id AS string)) AS s, {', '.join(f'id AS c{i}' for i in range(40))} FROM range(3)")
    lh.write(df.coalesce(1), "st.edges")
    assert _assert_bounds_hold_against_rows(lh, "st.edges") == 42
    table = lh.load("st.edges")
    (f,) = iceberg_committer.live_data_files(table)
    s_id = table.schema().find_field("s").field_id
    assert len(from_bytes(StringType(), f.upper_bounds[s_id])) == 16  # truncate(16), rounded up
    (add,) = adds(table.location())
    assert json.loads(add["stats"])["maxValues"].get("s", long_text) >= long_text
    assert lh.verify("st.edges", deep=True)["agree"]

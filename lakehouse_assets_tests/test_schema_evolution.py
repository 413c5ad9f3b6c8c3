"""Schema evolution: both formats accept or refuse each change the same way and expose the same schema after it."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import SchemaError, TableOptions

from .conftest import assert_all_readers_agree
from .versions import assert_same_at

BASE = """
SELECT id, CAST(id AS INT) AS i, CAST(id / 2 AS FLOAT) AS f, CAST(id / 4 AS DECIMAL(10, 2)) AS dec,
       NULLIF(CONCAT('s', id), '') AS s, named_struct('a', CAST(id AS INT)) AS st
FROM range({lo}, {hi})
"""

# (name, SELECT over range(lo, hi) producing the new batch, accepted on a Delta-enabled table?)
MATRIX = [
    ("add column", "SELECT *, CONCAT('n', id) AS added FROM ({base})", True),
    ("column order", "SELECT st, s, dec, f, i, id FROM ({base})", True),
    ("int data into a long column", "SELECT CAST(id AS INT) AS id, i, f, dec, s, st FROM ({base})", True),
    ("drop optional column", "SELECT id, i, f, dec, st FROM ({base})", True),
    ("rename = new column, old one null", "SELECT id, i, f, dec, s AS s_renamed, st FROM ({base})", True),
    ("int to long", "SELECT id, CAST(i AS BIGINT) AS i, f, dec, s, st FROM ({base})", True),
    ("float to double", "SELECT id, i, CAST(f AS DOUBLE) AS f, dec, s, st FROM ({base})", True),
    ("decimal precision up", "SELECT id, i, f, CAST(dec AS DECIMAL(14, 2)) AS dec, s, st FROM ({base})", True),
    ("string to int", "SELECT id, i, f, dec, CAST(id AS INT) AS s, st FROM ({base})", False),
    ("int to string", "SELECT id, CAST(i AS STRING) AS i, f, dec, s, st FROM ({base})", False),
    ("decimal scale change", "SELECT id, i, f, CAST(dec AS DECIMAL(12, 4)) AS dec, s, st FROM ({base})", False),
    ("drop required column", "SELECT i, f, dec, s, st FROM ({base})", False),
    ("case-only rename", "SELECT id, i, f, dec, s AS S, st FROM ({base})", False),
    ("nested struct change", "SELECT id, i, f, dec, s, named_struct('a', st.a, 'b', 1) AS st FROM ({base})", False),
]


def _files_under(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs)


def _schemas(lh, name):
    """Column -> type as each format declares it (Iceberg via its Delta rendering, Delta from its log)."""
    from lakehouse_assets.core.schema.type_mapping import delta_schema

    table = lh.load(name)
    iceberg = {f.name: str(f.type) for f in pa.schema(delta_schema(table.schema()).to_arrow())}
    delta = {f.name: str(f.type) for f in pa.schema(DeltaTable(table.location()).schema().to_arrow())}
    return iceberg, delta


@pytest.mark.parametrize("name,sql,accepted", MATRIX, ids=[m[0] for m in MATRIX])
def test_schema_change_matrix(lh, spark, duck, name, sql, accepted):
    lh.write(spark.sql(BASE.format(lo=0, hi=10)), "se.matrix")
    table = lh.load("se.matrix")
    root = table.location()[len("file://"):]
    before = (table.current_snapshot().snapshot_id, DeltaTable(root).version(), _schemas(lh, "se.matrix"), _files_under(root))
    batch = spark.sql(sql.format(base=BASE.format(lo=10, hi=15)))
    if accepted:
        lh.write(batch, "se.matrix")
        iceberg, delta = _schemas(lh, "se.matrix")
        assert iceberg == delta, f"{name}: the formats expose different schemas"
        rows = assert_all_readers_agree(lh, spark, duck, "se.matrix")
        assert len(rows) == 15
    else:
        with pytest.raises(SchemaError, match=r"Table se\.matrix: "):
            lh.write(batch, "se.matrix")
        table = lh.load("se.matrix")
        after = (table.current_snapshot().snapshot_id, DeltaTable(root).version(), _schemas(lh, "se.matrix"), _files_under(root))
        assert after == before, f"{name}: a refused change left a trace"


def test_incompatible_changes_are_refused_before_any_file_is_written(lh, spark):
    lh.write(spark.sql("SELECT CAST(id AS INT) AS k FROM range(3)"), "se.narrow")  # int column
    root = lh.load("se.narrow").location()[len("file://"):]
    files = _files_under(root)
    with pytest.raises(SchemaError, match=r"Table se\.narrow: column 'k' is int in the table but string in the data"):
        lh.write(spark.sql("SELECT CAST(id AS STRING) AS k FROM range(3)"), "se.narrow")
    lh.write(spark.sql("SELECT CAST(id AS STRING) AS x, CAST(id AS INT) AS k FROM range(1)"), "se.narrow")  # accepted: new column
    with pytest.raises(SchemaError, match=r"column 'x' is string in the table but int in the data"):
        lh.write(spark.sql("SELECT CAST(id AS INT) AS x FROM range(1)"), "se.narrow")
    assert len(_files_under(root)) == len(files) + 1


def test_new_columns_read_null_in_older_files_in_both_formats(lh, spark, duck):
    first = lh.write(spark.sql("SELECT id, NULLIF(CONCAT('a', id), '') AS a FROM range(3)"), "se.add")
    second = lh.write(spark.sql("SELECT id, CONCAT('a', id) AS a, id * 10 AS b FROM range(3, 5)"), "se.add")
    table = lh.load("se.add")
    ids = {f.name: f.field_id for f in table.schema().fields}
    assert ids["b"] > max(ids["id"], ids["a"])  # a new Iceberg field id
    assert_all_readers_agree(lh, spark, duck, "se.add", [("a0", None, 0), ("a1", None, 1), ("a2", None, 2), ("a3", 30, 3), ("a4", 40, 4)])
    # The Delta log carries the schema change as its own metadata-only version before the data version.
    delta = DeltaTable(table.location())
    assert second.delta_version == first.delta_version + 2
    schema_commit = [c for c in delta.history() if c["version"] == first.delta_version + 1][0]
    assert schema_commit["lakehouse.operation"] == "schema-change"
    assert DeltaTable(table.location(), version=first.delta_version).schema().to_arrow().names == ["id", "a"]
    # Time travel to before the change reads the old schema in both formats.
    assert_same_at(lh, spark, duck, "se.add", first.iceberg_snapshot_id, first.delta_version, [("a0", 0), ("a1", 1), ("a2", 2)])
    # The metadata-only Delta version has the new column and the old rows.
    v1 = DeltaTable(table.location(), version=first.delta_version + 1)
    assert v1.schema().to_arrow().names == ["id", "a", "b"] and v1.to_pyarrow_table().num_rows == 3
    # history maps the data version, and the schema-only version does not hide it.
    assert [h["delta_version"] for h in lh.history("se.add")] == [second.delta_version, first.delta_version]


def test_widening_a_delta_mirrored_table_rewrites_it_once_in_both_formats(lh, spark, duck):
    """Delta has no in-place type change without typeWidening (not writable with delta-rs): the widening
    write rewrites the live files in the new types and Delta mirrors it as one CREATE OR REPLACE."""
    first = lh.write(spark.sql("SELECT CAST(id AS INT) AS k, CAST(id AS FLOAT) AS f, id % 2 AS g FROM range(6)"), "se.widen_delta", partition_by=["g"])
    old_files = {t.file.file_path for t in lh.load("se.widen_delta").scan().plan_files()}
    second = lh.write(spark.sql("SELECT id + 100 AS k, CAST(id AS DOUBLE) AS f, id % 2 AS g FROM range(2)"), "se.widen_delta")
    table = lh.load("se.widen_delta")
    assert [str(f.field_type) for f in table.schema().fields] == ["long", "double", "long"]
    iceberg, delta = _schemas(lh, "se.widen_delta")
    assert iceberg == delta and delta["k"] == "int64" and delta["f"] == "double"
    live = {t.file.file_path for t in table.scan().plan_files()}
    assert not live & old_files  # every file now holds the wide types
    assert second.files_removed == len(old_files) and second.delta_version == first.delta_version + 1
    for path in live:
        assert str(pa.parquet.read_schema(path[len("file://"):]).field("k").type) == "int64"
    commit = [c for c in DeltaTable(table.location()).history() if c["version"] == second.delta_version][0]
    assert commit["operation"] == "CREATE OR REPLACE TABLE" and commit["lakehouse.delta.replaced-for"] == "type-widening"
    rows = [(float(i), i % 2, i) for i in range(6)] + [(0.0, 0, 100), (1.0, 1, 101)]
    assert_all_readers_agree(lh, spark, duck, "se.widen_delta", rows)
    # Before the widening, both formats still read the old rows in the old types.
    assert_same_at(lh, spark, duck, "se.widen_delta", first.iceberg_snapshot_id, first.delta_version, [(float(i), i % 2, i) for i in range(6)])
    assert str(pa.schema(DeltaTable(table.location(), version=first.delta_version).schema().to_arrow()).field("k").type) == "int32"
    # The next ordinary write mirrors as usual.
    third = lh.write(spark.sql("SELECT id + 200 AS k, CAST(id AS DOUBLE) AS f, 0 AS g FROM range(1)"), "se.widen_delta")
    assert third.delta_version == second.delta_version + 1 and lh.verify("se.widen_delta")["agree"]


def test_widening_works_on_iceberg_only_tables(lh, spark, duck):
    lh.write(spark.sql("SELECT CAST(id AS INT) AS k, CAST(id AS FLOAT) AS f FROM range(3)"), "se.wide", table=TableOptions(formats=["iceberg"]))
    lh.write(spark.sql("SELECT id + 100 AS k, CAST(id AS DOUBLE) AS f FROM range(2)"), "se.wide")
    table = lh.load("se.wide")
    assert [str(f.field_type) for f in table.schema().fields] == ["long", "double"]
    from lakehouse_assets.core.read import duckdb_readers

    got = sorted(duck.execute(f"SELECT k, f FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)}").fetchall())
    assert got == [(0, 0.0), (1, 1.0), (2, 2.0), (100, 0.0), (101, 1.0)]
    assert sorted(tuple(r) for r in lh.read(spark, "se.wide").collect()) == got


def test_schema_evolution_can_be_switched_off(lh, spark):
    lh.write(spark.sql("SELECT id FROM range(3)"), "se.off", table=TableOptions(schema_evolution=False))
    with pytest.raises(SchemaError, match=r"Table se\.off: schema evolution is off and the data has new columns \['x'\]"):
        lh.write(spark.sql("SELECT id, 1 AS x FROM range(3)"), "se.off", table=TableOptions(schema_evolution=False))
    # Per table, whatever the writer asks: the table property.
    lh.write(spark.sql("SELECT id FROM range(3)"), "se.off2", table=TableOptions(properties={"lakehouse.schema-evolution": "false"}))
    with pytest.raises(SchemaError, match="schema evolution is off"):
        lh.write(spark.sql("SELECT id, 1 AS x FROM range(3)"), "se.off2")
    assert [f.name for f in lh.load("se.off2").schema().fields] == ["id"]


def test_rename_is_a_new_column_in_both_formats(lh, spark, duck):
    """No rename operation: Iceberg would keep the field id, Delta (no column mapping) would lose the old values.

    A DataFrame with a renamed column therefore adds a new column; the old one stays and reads null for new rows.
    """
    lh.write(spark.sql("SELECT id, NULLIF(CONCAT('n', id), '') AS name FROM range(2)"), "se.rename")
    lh.write(spark.sql("SELECT id, CONCAT('f', id) AS full_name FROM range(2, 3)"), "se.rename")
    iceberg, delta = _schemas(lh, "se.rename")
    assert list(iceberg) == list(delta) == ["id", "name", "full_name"]
    assert_all_readers_agree(lh, spark, duck, "se.rename", [(None, 0, "n0"), (None, 1, "n1"), ("f2", 2, None)])


def test_relaxing_not_null_is_mirrored_to_delta(lh, spark, duck):
    lh.write(spark.sql("SELECT id FROM range(2)"), "se.nullable")  # spark.range: NOT NULL
    table = lh.load("se.nullable")
    assert table.schema().find_field("id").required
    assert not DeltaTable(table.location()).schema().fields[0].nullable
    lh.write(spark.createDataFrame([(None,), (5,)], "id long"), "se.nullable")
    assert not lh.load("se.nullable").schema().find_field("id").required
    assert DeltaTable(table.location()).schema().fields[0].nullable
    assert_all_readers_agree(lh, spark, duck, "se.nullable", [(0,), (1,), (5,), (None,)])


def test_a_failed_write_leaves_the_schema_unchanged(lh, spark):
    """The schema change is committed in the same Iceberg transaction as the snapshot: no snapshot, no change."""
    import datetime as dt

    from lakehouse_assets import InputError, Window

    lh.write(spark.sql("SELECT id, DATE_ADD(DATE'2024-01-01', CAST(id AS INT)) AS d FROM range(3)"), "se.atomic", partition_by=["d"])
    table = lh.load("se.atomic")
    root = table.location()[len("file://"):]
    before = (table.metadata.current_schema_id, _schemas(lh, "se.atomic"), _files_under(root), DeltaTable(root).version())
    # New column + rows outside the window: refused after the files were written, before the commit.
    bad = spark.sql("SELECT id, DATE_ADD(DATE'2024-01-01', CAST(id AS INT)) AS d, 'x' AS extra FROM range(3)")
    with pytest.raises(InputError, match="outside it"):
        lh.write(bad, "se.atomic", mode="overwrite", window=Window("d", dt.date(2024, 1, 1), dt.date(2024, 1, 2)))
    table = lh.load("se.atomic")
    assert (table.metadata.current_schema_id, _schemas(lh, "se.atomic"), _files_under(root), DeltaTable(root).version()) == before
    assert lh.verify("se.atomic")["agree"]


def test_delta_rs_write_transaction_ignores_a_changed_schema(tmp_path):
    """Why the mirror ALTERs Delta first: create_write_transaction(schema=...) writes no metaData action."""
    import json

    import pyarrow.parquet as pq
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    root = str(tmp_path / "t")
    create_table_with_add_actions(root, DeltaSchema.from_arrow(pa.schema([("a", pa.int32())])), [], mode="error")
    pq.write_table(pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}), f"{root}/f.parquet")
    add = AddAction(path="f.parquet", size=os.path.getsize(f"{root}/f.parquet"), partition_values={}, modification_time=0,
                    data_change=True, stats=json.dumps({"numRecords": 1}))
    DeltaTable(root).create_write_transaction([add], mode="append", schema=DeltaSchema.from_arrow(pa.schema([("a", pa.int32()), ("b", pa.string())])))
    with open(os.path.join(root, "_delta_log", f"{1:020d}.json")) as f:
        assert [next(iter(json.loads(line))) for line in f] == ["commitInfo", "add"]
    assert DeltaTable(root).schema().to_arrow().names == ["a"]  # column b is invisible to Delta readers

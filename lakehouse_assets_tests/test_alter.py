"""Renames and drops (`Lakehouse.alter`, `lakehouse alter`, the Dagster alter job).

Iceberg-only tables: one schema update, no data file touched, every Iceberg reader (DuckDB
`iceberg_scan`, pyiceberg, our Spark reader) resolves the old files by field id, older snapshots read
with their old names, a dropped name written again is a new column. Delta-mirrored tables without Delta column
mapping are refused with the command that turns it on (test_renames_both_formats.py covers both formats), and
the test at the end pins down what delta-rs 1.6.6 cannot do with column mapping (why the project writes that
metaData itself, core/formats/delta/column_mapping.py).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, Field, QueryBuilder, write_deltalake

from lakehouse_assets import MergeOptions, SchemaError, TableOptions
from lakehouse_assets.cli import cli
from lakehouse_assets.core.errors import SpecError
from lakehouse_assets.core.read import duckdb_readers

from .conftest import rows_of

ICEBERG_ONLY = ["iceberg"]


def _files(table) -> dict[str, float]:
    root = table.location()[len("file://"):]
    return {os.path.join(d, f): os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs}


def iceberg_readers(lh, spark, duck, identifier: str, snapshot_id: int | None = None) -> dict[str, tuple[list[str], list[tuple]]]:
    """(column names, rows) through DuckDB iceberg_scan, pyiceberg and our Spark reader: now, or at a snapshot
    (time travel reads with the snapshot's schema; "now" with the current one, which an alter changes without a snapshot)."""
    table = lh.load(identifier)
    schema = table.schema() if snapshot_id is None else table.schemas()[table.snapshot_by_id(snapshot_id).schema_id]
    columns = [f.name for f in schema.fields]
    scan = duckdb_readers.iceberg_scan_sql(table.metadata_location)
    if snapshot_id is not None:
        scan = scan[:-1] + f", snapshot_from_id={snapshot_id})"
    res = duck.execute(f"SELECT * FROM {scan}")
    names = [d[0] for d in res.description]
    out = {"duckdb_iceberg": (names, rows_of([dict(zip(names, r)) for r in res.fetchall()], columns))}
    arrow = (table.scan() if snapshot_id is None else table.scan(snapshot_id=snapshot_id)).to_arrow()
    out["pyiceberg"] = (arrow.column_names, rows_of(arrow.to_pylist(), columns))
    df = lh.read(spark, identifier, snapshot_id=snapshot_id)
    out["spark"] = (df.columns, rows_of(df.collect(), columns))
    return out


def assert_iceberg_readers(lh, spark, duck, identifier, columns, expected, snapshot_id=None):
    for reader, (names, rows) in iceberg_readers(lh, spark, duck, identifier, snapshot_id).items():
        assert names == columns, f"{identifier}: {reader} exposes {names}, expected {columns}"
        assert rows == sorted(expected, key=repr), f"{identifier}: {reader} returned other rows"


def test_rename_and_drop_are_one_schema_update_and_rewrite_no_file(lh, spark, duck):
    t = "alt.people"
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, CONCAT('x', id) AS note FROM range(3)"), t, table=TableOptions(formats=ICEBERG_ONLY))
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, CONCAT('x', id) AS note FROM range(3, 5)"), t)
    table = lh.load(t)
    before_snapshot, before_files = table.current_snapshot().snapshot_id, _files(table)
    before_metadata_log = len(table.metadata.metadata_log)
    name_id = table.schema().find_field("name").field_id

    result = lh.alter(t, rename={"name": "full_name"}, drop=["note"])

    table = lh.load(t)
    assert table.current_snapshot().snapshot_id == before_snapshot == result["iceberg_snapshot_id"]  # no snapshot
    assert len(table.metadata.metadata_log) == before_metadata_log + 1  # exactly one metadata commit
    assert _files(table) == before_files  # same files, untouched (same modification times)
    assert result["data_files_rewritten"] == 0
    assert result["columns"] == {"id": "long", "full_name": "string"}
    assert table.schema().find_field("full_name").field_id == name_id  # same column, new name
    expected = [(i, f"n{i}") for i in range(5)]
    assert_iceberg_readers(lh, spark, duck, t, ["id", "full_name"], expected)

    # Time travel: the snapshot before the alter reads with its own, old names.
    assert_iceberg_readers(lh, spark, duck, t, ["id", "name", "note"], [(i, f"n{i}", f"x{i}") for i in range(5)], snapshot_id=before_snapshot)

    # Writes after the rename use the new name; old and new files read together by field id.
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS full_name FROM range(5, 7)"), t)
    assert_iceberg_readers(lh, spark, duck, t, ["id", "full_name"], [(i, f"n{i}") for i in range(7)])


def test_a_dropped_name_written_again_is_a_new_column_that_never_reads_old_values(lh, spark, duck):
    t = "alt.readd"
    lh.write(spark.sql("SELECT id, CONCAT('old', id) AS note, CONCAT('a', id) AS a FROM range(3)"), t, table=TableOptions(formats=ICEBERG_ONLY))
    old_ids = {f.name: f.field_id for f in lh.load(t).schema().fields}
    lh.alter(t, drop=["note"])
    lh.alter(t, rename={"a": "b"})
    # A DataFrame with `note` and `a` again: both are new columns (new field ids), old files hold none of their values.
    lh.write(spark.sql("SELECT id, CONCAT('new', id) AS note, CONCAT('b', id) AS b, CONCAT('a', id) AS a FROM range(3, 5)"), t)
    schema = lh.load(t).schema()
    assert schema.find_field("note").field_id not in old_ids.values()
    assert schema.find_field("a").field_id not in old_ids.values()
    assert schema.find_field("b").field_id == old_ids["a"]
    expected = [(i, f"a{i}", None, None) for i in range(3)] + [(i, f"b{i}", f"new{i}", f"a{i}") for i in range(3, 5)]
    assert_iceberg_readers(lh, spark, duck, t, ["id", "b", "note", "a"], expected)


@pytest.mark.smoke
def test_merge_window_overwrite_widening_and_compaction_after_a_rename(lh, spark, duck):
    from lakehouse_assets import Window

    t = "alt.ops"
    base = "SELECT id AS k, CAST(id AS INT) AS n, CONCAT('v', id) AS v, TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id % 3 AS INT)) AS ts FROM range({lo}, {hi})"
    lh.write(spark.sql(base.format(lo=0, hi=6)), t, table=TableOptions(formats=ICEBERG_ONLY), partition_by=["day(ts)"])
    lh.write(spark.sql(base.format(lo=6, hi=9)), t)
    lh.alter(t, rename={"k": "key", "v": "value"})
    model = {i: (i, f"v{i}", i % 3) for i in range(9)}

    # Merge keyed on a renamed column: pruning, matching and the rewrite all resolve old files by field id.
    cdc = spark.sql("SELECT id AS key, CAST(id AS INT) AS n, CONCAT('m', id) AS value, TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id % 3 AS INT)) AS ts FROM range(7, 11)")
    lh.write(cdc, t, mode="merge", merge=MergeOptions(keys=["key"]))
    model.update({i: (i, f"m{i}", i % 3) for i in range(7, 11)})

    # Window overwrite of day 2024-01-02 (ts day offset 1).
    import datetime as dt

    day = spark.sql("SELECT id AS key, CAST(id AS INT) AS n, CONCAT('w', id) AS value, TIMESTAMP '2024-01-02 00:00:00' AS ts FROM range(100, 102)")
    lh.write(day, t, mode="overwrite", window=Window("ts", dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 3)))
    model = {k: r for k, r in model.items() if r[2] != 1}
    model.update({i: (i, f"w{i}", 1) for i in (100, 101)})

    # Widening int -> long on an Iceberg-only table is metadata only: reads go through the pyarrow reader, by id.
    lh.write(spark.sql("SELECT CAST(200 AS BIGINT) AS key, CAST(200 AS BIGINT) AS n, 'x200' AS value, TIMESTAMP '2024-01-03 00:00:00' AS ts"), t)
    model[200] = (200, "x200", 2)

    def expected():
        return [(k, k, v, f"2024-01-0{d + 1}T00:00:00") for k, (_, v, d) in model.items()]

    cols = ["key", "n", "value", "ts"]
    assert_iceberg_readers(lh, spark, duck, t, cols, expected())

    result = lh.maintain(t, "compaction", spark=spark)
    assert result["files_rewritten"] >= 2
    assert_iceberg_readers(lh, spark, duck, t, cols, expected())


def test_a_delta_mirrored_table_refuses_renames_and_drops_and_stays_unchanged(lh, spark):
    t = "alt.mirrored"
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name FROM range(3)"), t)
    table = lh.load(t)
    metadata, version = table.metadata_location, DeltaTable(table.location()).version()
    with pytest.raises(SchemaError, match=r"Table alt\.mirrored: cannot rename or drop columns of a table mirrored to Delta without Delta column mapping.*lakehouse upgrade alt\.mirrored"):
        lh.alter(t, rename={"name": "full_name"})
    with pytest.raises(SchemaError, match=r"Table alt\.mirrored: cannot rename or drop"):
        lh.alter(t, drop=["name"])
    assert lh.load(t).metadata_location == metadata
    assert DeltaTable(table.location()).version() == version
    assert lh.verify(t)["agree"]


@pytest.mark.parametrize(
    "rename,drop,error",
    [
        ({"nope": "x"}, [], r"Table alt\.bad: there is no top-level column 'nope' \(columns: id, name, day, note\)"),
        ({}, ["nope"], r"no top-level column 'nope'"),
        ({"name": "note"}, [], r"Table alt\.bad: cannot rename 'name' to 'note': column 'note' already has that name"),
        ({"name": "NOTE"}, [], r"cannot rename 'name' to 'NOTE': column 'note' already has that name \(names are compared case-insensitively"),
        ({"name": "x"}, ["name"], r"column\(s\) \['name'\] are both renamed and dropped"),
        ({}, ["day"], r"column 'day' is the source of partition field day"),
        ({}, ["id", "name", "day", "note"], r"would leave no column"),
        ({}, [], r"nothing to alter"),
        ({"name": "bad name"}, [], r"column name 'bad name' contains a character"),
    ],
    ids=["unknown rename", "unknown drop", "rename onto existing", "rename onto existing, other case", "renamed and dropped", "partition source", "everything", "nothing", "bad name"],
)
def test_bad_alters_are_refused_with_the_table_and_column_named(lh, spark, rename, drop, error):
    t = "alt.bad"
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, CAST(id AS STRING) AS day, 'x' AS note FROM range(2)"), t, table=TableOptions(formats=ICEBERG_ONLY), partition_by=["day"])
    metadata = lh.load(t).metadata_location
    with pytest.raises((SchemaError, SpecError), match=error):
        lh.alter(t, rename=rename, drop=drop)
    assert lh.load(t).metadata_location == metadata  # nothing committed


def test_cli_alter(lh, spark, warehouse):
    t = "alt.cli"
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, 'x' AS note FROM range(2)"), t, table=TableOptions(formats=ICEBERG_ONLY))
    runner = CliRunner()
    res = runner.invoke(cli, ["--warehouse", warehouse, "alter", t, "--rename", "name=full_name", "--drop", "note", "--json"], obj={})
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["renamed"] == {"name": "full_name"} and out["dropped"] == ["note"] and out["columns"] == {"id": "long", "full_name": "string"}
    assert [f.name for f in lh.load(t).schema().fields] == ["id", "full_name"]
    res = runner.invoke(cli, ["--warehouse", warehouse, "alter", t, "--rename", "full_name"], obj={})
    assert res.exit_code == 2 and "expected OLD=NEW, got 'full_name'" in res.output


def test_dagster_alter_job(lh, spark, warehouse):
    from dagster import AssetKey, DagsterInstance

    from lakehouse_assets.dagster.resources import LakehouseResource
    from lakehouse_assets.dagster.schema_ops import alter_run_config, lakehouse_alter_job
    from lakehouse_assets.definitions import defs

    assert defs.get_job_def("lakehouse_alter_job") is not None
    t = "alt.dagster"
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, 'x' AS note FROM range(2)"), t, table=TableOptions(formats=ICEBERG_ONLY))
    instance = DagsterInstance.ephemeral()
    result = lakehouse_alter_job.execute_in_process(
        run_config=alter_run_config(t, rename={"name": "full_name"}, drop=["note"]), resources={"lakehouse": LakehouseResource(warehouse=warehouse)}, instance=instance
    )
    assert result.success
    assert [f.name for f in lh.load(t).schema().fields] == ["id", "full_name"]
    observation = instance.fetch_observations(AssetKey(["alt", "dagster"]), limit=1).records[0].asset_observation
    assert observation.metadata["columns"].data == {"id": "long", "full_name": "string"}
    # A refused alter fails the run with the core's message.
    lh.write(spark.sql("SELECT id FROM range(2)"), "alt.mirrored")
    failed = lakehouse_alter_job.execute_in_process(
        run_config=alter_run_config("alt.mirrored", drop=["id"]), resources={"lakehouse": LakehouseResource(warehouse=warehouse)}, raise_on_error=False
    )
    assert not failed.success
    # With `upgrade`, the same run turns Delta column mapping on and the drop lands in both formats.
    lh.write(spark.sql("SELECT id, 'x' AS note FROM range(2)"), "alt.mirrored", mode="overwrite")
    upgraded = lakehouse_alter_job.execute_in_process(
        run_config=alter_run_config("alt.mirrored", drop=["note"], upgrade=True), resources={"lakehouse": LakehouseResource(warehouse=warehouse)}, instance=instance
    )
    assert upgraded.success
    assert [f.name for f in DeltaTable(lh.load("alt.mirrored").location()).schema().fields] == ["id"]
    assert "delta_version" in instance.fetch_observations(AssetKey(["alt", "mirrored"]), limit=1).records[0].asset_observation.metadata


def test_delta_rs_cannot_carry_column_mapping(tmp_path, duck):
    """What delta-rs 1.6.6 does with Delta column mapping: why core/formats/delta/column_mapping.py writes the metaData itself.

    Pinned so that a delta-rs upgrade that lifts a limit fails here and that module can shrink.
    """
    existing = str(tmp_path / "plain")
    write_deltalake(existing, pa.table({"a": [1, 2]}))
    plain = DeltaTable(existing)
    # An existing table cannot be upgraded: the mode cannot be set, the per-field identity cannot be written.
    with pytest.raises(Exception, match=r"Column mapping is not supported for write operation 'SET TBLPROPERTIES delta.columnMapping.mode'"):
        plain.alter.set_table_properties({"delta.columnMapping.mode": "name"})
    with pytest.raises(Exception, match=r"Not allowed to modify protected metadata"):
        plain.alter.set_column_metadata("a", {"delta.columnMapping.physicalName": "a"})
    assert not [m for m in dir(plain.alter) if "rename" in m]

    # A new table can be created with the mode, but delta-rs picks the physical names and ids itself...
    mapped = str(tmp_path / "mapped")
    write_deltalake(mapped, pa.table({"a": [1, 2]}), configuration={"delta.columnMapping.mode": "name"})
    table = DeltaTable(mapped)
    (field,) = table.schema().fields
    assert field.metadata["delta.columnMapping.physicalName"].startswith("col-")
    # ...refuses to add a column to it (the project's schema evolution)...
    with pytest.raises(Exception, match=r"Column mapping is not supported for write operation 'ADD COLUMN'"):
        table.alter.add_columns([Field("b", "long", True)])
    # ...and its Arrow reader (to_pyarrow_table, to_pandas) reads every column of it as null,
    assert table.to_pyarrow_table().to_pydict() == {"a": [None, None]}
    # while delta-rs's DataFusion reader and DuckDB's delta_scan (delta-kernel-rs) resolve the physical names.
    assert pa.table(QueryBuilder().register("t", table).execute("SELECT a FROM t").read_all()).to_pydict() == {"a": [1, 2]}
    assert sorted(duck.execute(f"SELECT a FROM delta_scan('{mapped}')").fetchall()) == [(1,), (2,)]

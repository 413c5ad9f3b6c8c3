"""Renames and drops in both formats: Delta column mapping, `Lakehouse.upgrade`, `Lakehouse.alter`.

A rename or drop is one metadata-only commit in each format: no data file is written. Files written after it
name each column by its physical name (Delta readers find it so) and carry its field id (Iceberg readers find it
so). Read back by every reader here that supports Delta column mapping (DuckDB both formats, delta-rs's
QueryBuilder, pyiceberg, Java Iceberg, Sail, our Spark reader of both formats); delta-rs's pyarrow reader
refuses the reader feature, which a test pins down.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from deltalake.query import QueryBuilder

from lakehouse_assets import MergeOptions, SchemaError, TableOptions
from lakehouse_assets.cli import cli
from lakehouse_assets.core.formats import file_columns
from lakehouse_assets.core.formats.delta import column_mapping as cm
from lakehouse_assets.core.read import duckdb_readers

from . import sail_reader
from .conftest import rows_of


def _data_files(root: str) -> set[str]:
    local = root[len("file://"):]
    return {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(local, "data")) for f in fs}


# DuckDB 1.5.5's delta_scan reads NULL for the partition column of a table in which one column is renamed and another
# dropped (each alone reads right; delta-rs and every Iceberg reader read right): pinned by the last test.
DUCKDB_DELTA_RENAME_AND_DROP = ("duckdb_delta",)


def _readers(lh, spark, duck, t: str, columns: list[str]) -> dict[str, list[tuple]]:
    """The table's rows (these columns, by their current names) through every reader of both formats."""
    table = lh.load(t)
    root = table.location()
    delta = DeltaTable(root)
    cols = ", ".join(f'"{c}"' for c in columns)

    def duck_rows(src: str) -> list[tuple]:
        res = duck.execute(f"SELECT {cols} FROM {src}")
        return rows_of([dict(zip(columns, r)) for r in res.fetchall()], columns)

    return {
        "duckdb_iceberg": duck_rows(duckdb_readers.iceberg_scan_sql(table.metadata_location)),
        "duckdb_delta": duck_rows(duckdb_readers.delta_scan_sql(root)),
        "pyiceberg": rows_of(table.scan().to_arrow().to_pylist(), columns),
        "delta_rs_sql": rows_of(pa.table(QueryBuilder().register("t", delta).execute(f"SELECT {cols} FROM t").read_all()).to_pylist(), columns),
        "spark_iceberg": rows_of(lh.read(spark, t).select(*columns).collect(), columns),
        "spark_delta": rows_of(lh.read(spark, t, delta_version=delta.version()).select(*columns).collect(), columns),
    }


def assert_readers(lh, spark, duck, t: str, columns: list[str], expected: list[tuple], known_wrong: tuple[str, ...] = ()) -> None:
    results = _readers(lh, spark, duck, t, columns)
    for reader, rows in results.items():
        if reader not in known_wrong:
            assert rows == sorted(expected, key=repr), f"{t}: {reader} returned other rows"
    report = lh.verify(t, deep=not known_wrong)  # deep verification reads Delta with DuckDB
    assert report["agree"], report["differences"]


def test_an_existing_table_is_upgraded_metadata_only_then_renames_and_drops_in_both_formats(lh, spark, duck):
    t = "ren.upgrade"
    lh.write(spark.sql("SELECT id, concat('n', id) AS name, id * 10 AS score, id % 2 AS p FROM range(6)"), t, partition_by=["p"])
    root = lh.load(t).location()
    files, before = _data_files(root), DeltaTable(root).version()

    # Before the upgrade a rename is refused, naming the command that makes it possible.
    with pytest.raises(SchemaError, match=r"Table ren\.upgrade: cannot rename or drop.*without Delta column mapping.*lakehouse upgrade ren\.upgrade"):
        lh.alter(t, rename={"name": "label"})

    report = lh.upgrade(t)
    assert report["upgraded"] and report["data_files_rewritten"] == 0
    assert report["physical_names"] == {"id": "id", "name": "name", "score": "score", "p": "p"}
    delta = DeltaTable(root)
    assert delta.version() == before + 2  # the protocol (delta-rs), then the metaData (ids and physical names)
    assert delta.protocol().reader_features == ["columnMapping"] and delta.metadata().configuration[cm.MODE] == "name"
    assert cm.physical_names(delta) == {f.field_id: f.name for f in lh.load(t).schema().fields}
    assert lh.upgrade(t)["upgraded"] is False  # idempotent
    assert _data_files(root) == files

    metadata_files = len(lh.load(t).metadata.metadata_log)
    result = lh.alter(t, rename={"name": "label", "p": "part"}, drop=["score"])
    after = DeltaTable(root)
    assert result["delta_version"] == after.version() == delta.version() + 1  # one Delta version
    assert len(lh.load(t).metadata.metadata_log) == metadata_files + 1  # one Iceberg schema update
    assert _data_files(root) == files  # no data file written
    assert [f.name for f in after.schema().fields] == ["id", "label", "part"] and after.metadata().partition_columns == ["part"]
    expected = [(i, f"n{i}", i % 2) for i in range(6)]
    assert_readers(lh, spark, duck, t, ["id", "label", "part"], expected, known_wrong=DUCKDB_DELTA_RENAME_AND_DROP)

    # Older versions keep their names in both formats.
    old = DeltaTable(root, version=before)
    assert rows_of(pa.table(QueryBuilder().register("t", old).execute("SELECT id, name, score FROM t").read_all()).to_pylist(), ["id", "name", "score"]) == [
        (i, f"n{i}", i * 10) for i in range(6)
    ]
    first = lh.load(t).snapshots()[0].snapshot_id
    assert rows_of(lh.read(spark, t, snapshot_id=first).collect(), ["id", "name", "score"]) == [(i, f"n{i}", i * 10) for i in range(6)]

    # Files written after the rename hold the physical names and the field ids: both formats read them.
    lh.write(spark.sql("SELECT id, concat('n', id) AS label, id % 2 AS part FROM range(6, 8)"), t)
    new_files = _data_files(root) - files
    assert new_files and all(pa.parquet.read_schema(f).names == ["id", "name", "p"] for f in new_files)
    expected += [(6, "n6", 0), (7, "n7", 1)]
    assert_readers(lh, spark, duck, t, ["id", "label", "part"], expected, known_wrong=DUCKDB_DELTA_RENAME_AND_DROP)
    assert sail_reader.read_delta(root, ["id", "label", "part"]) == sorted(expected, key=repr)  # Sail reads the Delta side too


def test_a_dropped_name_added_again_reads_null_for_old_rows_everywhere(lh, spark, duck):
    t = "ren.readd"
    lh.write(spark.sql("SELECT id, id * 10 AS score FROM range(3)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    lh.alter(t, drop=["score"])
    lh.write(spark.sql("SELECT id, id * 100 AS score FROM range(3, 5)"), t)  # a new column under the old name
    table = lh.load(t)
    names = file_columns.file_names(table, table.schema())
    score = table.schema().find_field("score").field_id
    assert names[score] != "score" and names[score].startswith("col-")  # a physical name never used before
    assert cm.physical_names(DeltaTable(table.location()))[score] == names[score]
    assert_readers(lh, spark, duck, t, ["id", "score"], [(0, None), (1, None), (2, None), (3, 300), (4, 400)])


def test_new_tables_get_column_mapping_from_the_table_property_or_the_resource(lh, spark, duck, warehouse):
    from lakehouse_assets import Lakehouse

    t = "ren.new"
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(4)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    delta = DeltaTable(lh.load(t).location())
    assert cm.is_mapped(delta) and cm.physical_names(delta) == {1: "id", 2: "s"}
    # Mapped from the table's first version: version 0 creates it (protocol and metaData), the write is version 1.
    assert delta.version() == 1 and [h["delta_version"] for h in lh.history(t)] == [1]
    first = DeltaTable(lh.load(t).location(), version=0)
    assert first.protocol().reader_features == ["columnMapping"] and cm.is_mapped(first)
    assert {r["name"]: r["delta_column_mapping"] for r in lh.tables()} == {t: True}
    wide = Lakehouse(warehouse, delta_configuration={cm.MODE: "name"})
    wide.write(spark.sql("SELECT id FROM range(2)"), "ren.resource")
    assert cm.is_mapped(DeltaTable(wide.load("ren.resource").location()))
    # A column added by a write gets a generated physical name; merge and compaction keep writing physical names.
    lh.write(spark.sql("SELECT id, concat('s', id) AS s, id AS extra FROM range(4, 6)"), t)
    lh.alter(t, rename={"s": "label"})
    lh.write(spark.sql("SELECT id, concat('m', id) AS label, id AS extra FROM range(3, 7)"), t, mode="merge", merge=MergeOptions(keys=["id"]))
    lh.write(spark.sql("SELECT 7 AS id, 'a7' AS label, 7 AS extra"), t)  # a second small file beside the merge's
    compacted = lh.maintain(t, "compaction", spark=spark)
    assert compacted["files_rewritten"] > 0, compacted
    expected = [(0, "s0", None), (1, "s1", None), (2, "s2", None), *[(i, f"m{i}", i) for i in range(3, 7)], (7, "a7", 7)]
    assert_readers(lh, spark, duck, t, ["id", "label", "extra"], expected)


def test_a_rename_by_another_engine_on_the_iceberg_side_is_mirrored(lh, spark, duck):
    t = "ren.foreign"
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(3)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    with lh.load(t).update_schema() as update:  # pyiceberg as the other engine
        update.rename_column("s", "label")
    lh.write(spark.sql("SELECT id, concat('s', id) AS label FROM range(3, 4)"), t)
    assert [f.name for f in DeltaTable(lh.load(t).location()).schema().fields] == ["id", "label"]
    assert_readers(lh, spark, duck, t, ["id", "label"], [(i, f"s{i}") for i in range(4)])


def renamed_with_a_foreign_file(lh, spark, t: str):
    """A column-mapped table whose column `s` is renamed `label`, then a file pyiceberg (another engine) appends under
    the current name (ids 3 and 4); returns the table as pyiceberg left it."""
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(3)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    lh.alter(t, rename={"s": "label"})
    table = lh.load(t)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("label", pa.string(), nullable=False)])
    table.append(pa.table({"id": [3, 4], "label": ["s3", "s4"]}, schema=schema))
    return table


def test_another_engines_iceberg_files_after_a_rename_are_refused_by_delta_then_rewritten(lh, spark, duck, warehouse):
    """pyiceberg, as another engine, appends files naming the renamed column by its current name: Delta readers would
    read NULL there, so the mirror refuses (loudly) and `repair(rewrite_files=True)` rewrites just those files."""
    t = "ren.foreign_files"
    renamed_with_a_foreign_file(lh, spark, t)
    report = lh.verify(t)
    assert not report["agree"] and report["delta_lag_snapshots"] == 1
    refused = lh.write(spark.sql("SELECT id, concat('s', id) AS label FROM range(5, 6)"), t)
    assert refused.delta_lagging and "--rewrite-files" in refused.delta_error and "would read NULL" in refused.delta_error
    runner = CliRunner()
    res = runner.invoke(cli, ["--warehouse", warehouse, "repair", t, "--rewrite-files", "--json"], obj={})
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["rewrite_files"]["data_files_rewritten"] == 1 and out["delta_version"] is not None
    assert_readers(lh, spark, duck, t, ["id", "label"], [(i, f"s{i}") for i in range(6)])


def test_another_engines_misnamed_file_with_deleted_rows_is_not_rewritten_with_them(lh, spark, duck):
    """Rewriting a misnamed file as it is would bring back rows a delete file removed: refused until they are applied."""
    from lakehouse_assets.core.errors import DeleteFilesError
    from lakehouse_assets.core.formats.deletes import table_files
    from lakehouse_assets.core.formats.iceberg import committer as ic
    from lakehouse_assets.core.formats.position_deletes import write_delete_file

    t = "ren.foreign_deleted"
    table = renamed_with_a_foreign_file(lh, spark, t)
    foreign = next(e.data_file for e in table_files(table).data if e.data_file.record_count == 2)
    ic.commit_files(table, [], [], {}, added_delete_files=[write_delete_file(lh.storage, table.location(), foreign, pa.array([0], pa.int64()))])
    with pytest.raises(DeleteFilesError, match=r"Table ren\.foreign_deleted: 1 data file\(s\) to rewrite .*--apply-deletes"):
        lh.repair(t, rewrite_files=True, spark=spark)
    assert lh.load(t).current_snapshot().snapshot_id == table.current_snapshot().snapshot_id  # nothing committed
    lh.repair(t, apply_deletes=True, spark=spark)
    lh.repair(t, rewrite_files=True, spark=spark)
    assert_readers(lh, spark, duck, t, ["id", "label"], [(i, f"s{i}") for i in (0, 1, 2, 4)])


def test_a_table_without_column_mapping_renamed_by_another_engine_is_repaired_by_upgrade(lh, spark, duck):
    t = "ren.unmapped"
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(3)"), t)
    with lh.load(t).update_schema() as update:
        update.rename_column("s", "label")
    report = lh.verify(t)
    assert not report["agree"]
    lh.upgrade(t)
    assert [f.name for f in DeltaTable(lh.load(t).location()).schema().fields] == ["id", "label"]
    assert_readers(lh, spark, duck, t, ["id", "label"], [(i, f"s{i}") for i in range(3)])


def test_cli_upgrade_and_alter(lh, spark, warehouse):
    t = "ren.cli"
    lh.write(spark.sql("SELECT id, 'x' AS note FROM range(2)"), t)
    runner = CliRunner()
    res = runner.invoke(cli, ["--warehouse", warehouse, "alter", t, "--rename", "note=comment"], obj={})
    assert res.exit_code != 0 and f"lakehouse upgrade {t}" in str(res.exception)
    res = runner.invoke(cli, ["--warehouse", warehouse, "upgrade", t, "--json"], obj={})
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["upgraded"] is True
    res = runner.invoke(cli, ["--warehouse", warehouse, "alter", t, "--rename", "note=comment", "--json"], obj={})
    assert res.exit_code == 0, res.output
    assert [f.name for f in DeltaTable(lh.load(t).location()).schema().fields] == ["id", "comment"]
    assert lh.verify(t)["agree"]


def test_delta_rs_pyarrow_reader_and_polars_refuse_column_mapped_tables(lh, spark):
    """Why column mapping is opt-in: delta-rs's pyarrow reader (to_pyarrow_table / to_pandas, and Polars'
    read_delta on top of it) refuses a table with the columnMapping reader feature. Pinned so that a delta-rs
    upgrade that lifts it fails here and the default can be revisited."""
    t = "ren.pyarrow"
    lh.write(spark.sql("SELECT id FROM range(2)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    import polars as pl

    root = lh.load(t).location()
    with pytest.raises(Exception, match=r"(?i)columnMapping|reader feature|not supported"):
        DeltaTable(root).to_pyarrow_table()
    with pytest.raises(Exception, match=r"requires reader features \['columnMapping'\], which polars does not support"):
        pl.read_delta(root)


def test_duckdb_delta_scan_reads_null_partition_values_after_a_rename_and_a_drop(lh, spark, duck):
    """A DuckDB 1.5.5 delta extension bug, pinned: once one column is renamed and another dropped, delta_scan reads
    the partition column as NULL; a rename alone or a drop alone reads right, and delta-rs reads the same log right.
    When this test fails, DuckDB fixed it: remove DUCKDB_DELTA_RENAME_AND_DROP."""
    t = "ren.duckbug"
    lh.write(spark.sql("SELECT id, concat('n', id) AS name, id * 10 AS score, id % 2 AS p FROM range(4)"), t, partition_by=["p"], table=TableOptions(properties={cm.MODE: "name"}))
    lh.alter(t, rename={"name": "label"})
    root = lh.load(t).location()
    assert sorted(duck.execute(f"SELECT id, p FROM {duckdb_readers.delta_scan_sql(root)}").fetchall()) == [(i, i % 2) for i in range(4)]
    lh.alter(t, drop=["score"])
    results = _readers(lh, spark, duck, t, ["id", "label", "p"])
    assert results["duckdb_delta"] == [(i, f"n{i}", None) for i in range(4)]
    assert all(rows == [(i, f"n{i}", i % 2) for i in range(4)] for r, rows in results.items() if r != "duckdb_delta")


@pytest.mark.java_iceberg
def test_java_iceberg_reads_a_renamed_column_mapped_table_at_every_snapshot(lh, spark):
    from . import java_iceberg

    t = "ren.java"
    first = lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(3)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    lh.alter(t, rename={"s": "label"})
    lh.write(spark.sql("SELECT id, concat('s', id) AS label, id AS extra FROM range(3, 5)"), t)
    table = lh.load(t)
    now = rows_of(java_iceberg.read_metadata(spark, table.metadata_location).collect(), ["id", "label", "extra"])
    assert now == [(0, "s0", None), (1, "s1", None), (2, "s2", None), (3, "s3", 3), (4, "s4", 4)]
    old = rows_of(java_iceberg.read_metadata(spark, table.metadata_location, snapshot_id=first.iceberg_snapshot_id).collect(), ["id", "s"])
    assert old == [(i, f"s{i}") for i in range(3)]


def test_a_type_widening_of_a_column_mapped_table_is_refused_before_writing(lh, spark):
    t = "ren.widen"
    lh.write(spark.sql("SELECT CAST(id AS INT) AS n FROM range(2)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    table = lh.load(t)
    with pytest.raises(SchemaError, match=r"Table ren\.widen: the data widens column\(s\) \['n'\].*column-mapped table.*Nothing was written"):
        lh.write(spark.sql("SELECT id AS n FROM range(2, 4)"), t)
    assert lh.load(t).metadata_location == table.metadata_location
    assert lh.verify(t)["agree"]


def test_delta_rs_refuses_to_write_a_column_mapped_schema(lh, spark):
    """Why widening a column-mapped table is refused (and column mapping is not the default): Delta needs the wider
    type and the rewritten files in one commit, and delta-rs refuses to write a column-mapped metaData with adds
    (`create_table_with_add_actions(mode="overwrite")`, the commit that widens a table without column mapping).
    Pinned so that a delta-rs upgrade that lifts it fails here and widening can follow."""
    from deltalake.transaction import create_table_with_add_actions

    t = "ren.pin"
    lh.write(spark.sql("SELECT CAST(id AS INT) AS n FROM range(2)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    table = lh.load(t)
    root = table.location()
    wider = DeltaTable(root).schema()
    with pytest.raises(Exception, match=r"Column mapping is not supported for write operation"):
        create_table_with_add_actions(root, wider, [], mode="overwrite", configuration={cm.MODE: "name", cm.MAX_COLUMN_ID: "1"})
    assert DeltaTable(root).version() == 1 and lh.verify(t)["agree"]


def test_writes_to_a_column_mapped_table_add_one_delta_version_each(lh, spark):
    t = "ren.versions"
    lh.write(spark.sql("SELECT id, named_struct('a', id, 'b', concat('x', id)) AS st, array(id) AS arr FROM range(2)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    root = lh.load(t).location()
    before = DeltaTable(root).version()
    for i in range(2):
        lh.write(spark.sql(f"SELECT id, named_struct('a', id, 'b', concat('x', id)) AS st, array(id) AS arr FROM range({i * 2 + 2}, {i * 2 + 4})"), t)
    assert DeltaTable(root).version() == before + 2  # no metadata-only version when the schema did not change
    assert lh.verify(t)["agree"]


def test_a_foreign_delta_append_to_a_renamed_column_mapped_table_is_adopted_by_field_id(lh, spark, duck):
    """delta-rs appends into a column-mapped table under the physical names (and tags the ids): adoption matches
    the columns by those, so every reader sees the foreign rows under the current names."""
    from deltalake import write_deltalake

    t = "ren.adopt"
    lh.write(spark.sql("SELECT id, concat('n', id) AS name FROM range(3)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    lh.alter(t, rename={"name": "label"})
    lh.write(spark.sql("SELECT id, concat('n', id) AS label, id AS extra FROM range(3, 5)"), t)
    root = lh.load(t).location()
    write_deltalake(DeltaTable(root), pa.table({"id": pa.array([100], pa.int64()), "label": ["f"], "extra": pa.array([7], pa.int64())}), mode="append")
    report = lh.repair(t, adopt_delta=True)
    assert report["repaired"] and report["adopt_delta"]["files_added"] == 1
    expected = [(0, "n0", None), (1, "n1", None), (2, "n2", None), (3, "n3", 3), (4, "n4", 4), (100, "f", 7)]
    assert_readers(lh, spark, duck, t, ["id", "label", "extra"], expected)


def test_verify_fails_when_delta_physical_names_disagree_with_iceberg(lh, spark):
    """Planted divergence: a Delta metaData whose physical name for a column is not the one the files hold."""
    t = "ren.planted"
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(3)"), t, table=TableOptions(properties={cm.MODE: "name"}))
    table = lh.load(t)
    root = table.location()
    s_id = table.schema().find_field("s").field_id
    cm.commit_schema(root, lh.storage, DeltaTable(root), table.schema(), {**file_columns.file_names(table, table.schema()), s_id: "wrong"}, operation="PLANTED",
                     commit_info={"lakehouse.operation": "schema-change"})  # fmt: skip
    report = lh.verify(t)
    assert not report["agree"] and any("column mapping" in d and "'wrong'" in d for d in report["differences"]), report["differences"]

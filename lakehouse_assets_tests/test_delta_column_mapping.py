"""Delta column mapping: the metaData commits delta-rs has no API for, and mirroring into a column-mapped table.

Each Delta field carries its Iceberg field id and a physical name; a rename changes only the logical name.
The commit file is created put-if-absent, so a concurrent writer of the same version makes the commit fail
(never overwrite). Read back by the Delta readers that support column mapping here: delta-rs's SQL
QueryBuilder and DuckDB's delta_scan (delta-rs's pyarrow reader and Polars refuse the reader feature).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.query import QueryBuilder
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from lakehouse_assets.core.formats.delta import column_mapping as cm
from lakehouse_assets.core.read import duckdb_readers

from .conftest import rows_of
from .test_edge_values import local


def _query(delta: DeltaTable, columns: list[str]) -> list[tuple]:
    cols = ", ".join(f'"{c}"' for c in columns)
    return rows_of(pa.table(QueryBuilder().register("t", delta).execute(f"SELECT {cols} FROM t").read_all()).to_pylist(), columns)


def _duck(duck, root: str, columns: list[str]) -> list[tuple]:
    res = duck.execute(f"SELECT {', '.join(columns)} FROM {duckdb_readers.delta_scan_sql(root)}")
    names = [d[0] for d in res.description]
    assert names == columns  # the logical names
    return rows_of([dict(zip(names, r)) for r in res.fetchall()], columns)


def _renamed(schema: Schema, old: str, new: str) -> Schema:
    return Schema(*[NestedField(f.field_id, new if f.name == old else f.name, f.field_type, required=f.required) for f in schema.fields])


def test_enabling_column_mapping_keeps_every_row_and_maps_iceberg_field_ids(lh, spark, duck):
    df = spark.sql("SELECT id, concat('s', id) AS s, named_struct('a', id) AS st, id % 2 AS p FROM range(6)")
    lh.write(df, "cm.enable", partition_by=["p"])
    table = lh.load("cm.enable")
    root = table.location()
    before = DeltaTable(root)
    version = cm.commit_schema(root, lh.storage, before, table.schema(), {}, operation="UPGRADE COLUMN MAPPING")

    delta = DeltaTable(root)
    assert version == delta.version()
    protocol = delta.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7) and protocol.reader_features == ["columnMapping"]
    assert delta.metadata().configuration[cm.MODE] == "name"
    assert delta.metadata().configuration[cm.MAX_COLUMN_ID] == str(table.schema().highest_field_id)
    # Every field, nested ones too, carries its Iceberg field id; physical names are the names in the files.
    ids = {f.field_id: f.name for f in table.schema().fields} | {table.schema().find_field("st.a").field_id: "a"}
    assert cm.physical_names(delta) == ids
    # Nothing else changed: table id, partition columns, the other configuration, the files.
    assert (delta.metadata().id, delta.metadata().partition_columns) == (before.metadata().id, before.metadata().partition_columns)
    assert delta.metadata().configuration["delta.checkpointInterval"] == "10"
    columns = ["id", "s", "p"]
    expected = rows_of(table.scan().to_arrow().to_pylist(), columns)
    assert _query(delta, columns) == expected == _duck(duck, root, columns)
    assert lh.verify("cm.enable")["agree"]


def test_a_rename_is_one_metadata_commit_and_every_version_reads_with_its_names(lh, spark, duck):
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(4)"), "cm.rename")
    table = lh.load("cm.rename")
    root = table.location()
    enabled = cm.commit_schema(root, lh.storage, DeltaTable(root), table.schema(), {}, operation="UPGRADE COLUMN MAPPING")
    files = sorted(os.listdir(os.path.join(local(root), "data")))
    delta = DeltaTable(root)
    renamed = cm.commit_schema(root, lh.storage, delta, _renamed(table.schema(), "s", "label"), cm.physical_names(delta), operation="RENAME COLUMN")

    assert sorted(os.listdir(os.path.join(local(root), "data"))) == files  # metadata only: no data file written
    now = DeltaTable(root)
    assert now.version() == renamed and cm.physical_names(now) == cm.physical_names(delta)  # same ids, same physical names
    expected = [(i, f"s{i}") for i in range(4)]
    assert _query(now, ["id", "label"]) == expected == _duck(duck, root, ["id", "label"])
    assert _query(DeltaTable(root, version=enabled), ["id", "s"]) == expected  # time travel: the old name


def test_a_concurrent_commit_of_the_same_version_fails_and_overwrites_nothing(lh, spark):
    lh.write(spark.sql("SELECT id FROM range(3)"), "cm.race")
    table = lh.load("cm.race")
    root = table.location()
    winner = cm.commit_schema(root, lh.storage, DeltaTable(root), table.schema(), {}, operation="UPGRADE COLUMN MAPPING")
    path = os.path.join(local(root), "_delta_log", f"{winner:020d}.json")
    written = open(path, "rb").read()
    # A writer that read the log just before the winner's commit tries the same version.
    stale = DeltaTable(root, version=winner - 1)
    with pytest.raises(CommitFailedError, match="written by another writer first"):
        cm.commit_schema(root, lh.storage, stale, table.schema(), {}, operation="RACE")
    assert open(path, "rb").read() == written
    assert json.loads(written.splitlines()[0])["commitInfo"]["operation"] == "UPGRADE COLUMN MAPPING"


def test_the_mirror_keeps_writing_and_evolving_a_column_mapped_table(lh, spark, duck):
    lh.write(spark.sql("SELECT id, id % 2 AS p FROM range(4)"), "cm.mirror", partition_by=["p"])
    table = lh.load("cm.mirror")
    root = table.location()
    cm.commit_schema(root, lh.storage, DeltaTable(root), table.schema(), {}, operation="UPGRADE COLUMN MAPPING")
    lh.write(spark.sql("SELECT id, id % 2 AS p FROM range(4, 6)"), "cm.mirror")
    # A new column: delta-rs refuses ALTER TABLE on a column-mapped table, the mirror writes the metaData itself.
    result = lh.write(spark.sql("SELECT id, id % 2 AS p, id * 10 AS added FROM range(6, 8)"), "cm.mirror")
    assert not result.delta_lagging, result.delta_error
    delta = DeltaTable(root)
    table = lh.load("cm.mirror")
    assert cm.physical_names(delta) == {f.field_id: f.name for f in table.schema().fields}
    columns = ["id", "p", "added"]
    expected = [(i, i % 2, i * 10 if i >= 6 else None) for i in range(8)]
    assert _query(delta, columns) == sorted(expected, key=repr) == _duck(duck, root, columns)
    report = lh.verify("cm.mirror", deep=True)
    assert report["agree"], report["differences"]


@pytest.mark.parametrize("backend", ["postgres-s3", "sqlite-azure"], indirect=True)
def test_put_if_absent_on_object_stores(backend, spark):
    lh = backend.lakehouse()
    name = f"{backend.namespace()}.mapped"
    lh.write(spark.sql("SELECT id FROM range(3)"), name)
    table = lh.load(name)
    root = table.location()
    options = lh.storage.delta_options(root)
    version = cm.commit_schema(root, lh.storage, DeltaTable(root, storage_options=options), table.schema(), {}, operation="UPGRADE COLUMN MAPPING")
    with pytest.raises(CommitFailedError):
        cm.commit_schema(root, lh.storage, DeltaTable(root, version=version - 1, storage_options=options), table.schema(), {}, operation="RACE")
    delta = DeltaTable(root, storage_options=options)
    assert delta.version() == version and cm.is_mapped(delta)
    assert _query(delta, ["id"]) == [(0,), (1,), (2,)]


@pytest.mark.parametrize("backend", ["postgres-s3", "sqlite-azure"], indirect=True)
def test_upgrade_rename_and_write_on_object_stores(backend, spark):
    """The whole rename flow where the Delta log and the files live in an object store (footers read through it too)."""
    lh = backend.lakehouse()
    name = f"{backend.namespace()}.renamed"
    lh.write(spark.sql("SELECT id, concat('s', id) AS s FROM range(3)"), name)
    assert lh.upgrade(name)["upgraded"]
    lh.alter(name, rename={"s": "label"})
    lh.write(spark.sql("SELECT id, concat('s', id) AS label, id AS extra FROM range(3, 5)"), name)
    root = lh.load(name).location()
    delta = DeltaTable(root, storage_options=lh.storage.delta_options(root))
    expected = [(0, "s0", None), (1, "s1", None), (2, "s2", None), (3, "s3", 3), (4, "s4", 4)]
    assert _query(delta, ["id", "label", "extra"]) == expected
    assert rows_of(lh.read(spark, name, delta_version=delta.version()).collect(), ["id", "label", "extra"]) == expected
    assert rows_of(lh.read_arrow(name).to_pylist(), ["id", "label", "extra"]) == expected
    report = lh.verify(name)
    assert report["agree"], report["differences"]

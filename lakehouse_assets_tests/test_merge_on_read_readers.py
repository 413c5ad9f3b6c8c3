"""Which readers read merge-on-read tables: the measurement behind docs/merge-on-read.md's reader table.

One module fixture builds three small tables with the same rows deleted and updated by position: ours, by one
merge-on-read merge (Iceberg v2 position-delete files, one per data file, and Delta deletion vectors), and Java
Iceberg's own merge-on-read tables in format v2 (position deletes) and v3 (deletion vectors in Puffin files),
written by DELETE and MERGE INTO in the suite's Spark session. Each reader either returns exactly the live rows
or refuses with the error the docs quote; a reader that returned deleted rows would fail here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse_assets import Lakehouse, MergeOptions, TableOptions
from lakehouse_assets.core.read import duckdb_readers

from . import java_iceberg, sail_reader

PAGE = Path(__file__).resolve().parent.parent / "docs" / "merge-on-read.md"
MERGE_ON_READ = {p: "merge-on-read" for p in ("write.merge.mode", "write.delete.mode", "write.update.mode")}
JAVA_TABLES = ("java_v2", "java_v3")


@dataclass
class MorTable:
    metadata_location: str
    root: str  # the table's folder (local path)
    expected: list[tuple]  # (id, v) of the live rows, sorted


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def _ours(spark, warehouse: str) -> MorTable:
    """Two data files of 50 rows, then one merge-on-read CDC merge: ids ending in 3 deleted, ids ending in 7 updated.
    Both formats commit it at once: Iceberg position deletes (one file per data file), Delta deletion vectors."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LAKEHOUSE_CATALOG", raising=False)
        lh = Lakehouse(warehouse)
    for lo in (0, 50):
        rows = spark.range(lo, lo + 50, numPartitions=1).selectExpr("id", "concat('a', id) AS v")
        lh.write(rows, "mor.ours", table=TableOptions(properties=MERGE_ON_READ))
    cdc = spark.range(0, 100, numPartitions=1).filter("id % 10 IN (3, 7)").selectExpr("id", "concat('b', id) AS v", "IF(id % 10 = 3, 'D', 'U') AS op")
    result = lh.write(cdc, "mor.ours", mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
    assert result.files_removed == 0 and not result.delta_lagging  # no data file rewritten
    table = lh.load("mor.ours")
    assert table.current_snapshot().summary["total-position-deletes"] == "20"  # 10 deleted, 10 replaced by their update
    expected = sorted((i, f"b{i}" if i % 10 == 7 else f"a{i}") for i in range(100) if i % 10 != 3)
    return MorTable(table.metadata_location, _local(table.location()), expected)


def _java(spark, name: str, format_version: int) -> MorTable:
    """Java Iceberg's merge-on-read table: DELETE of ids ending in 3, MERGE INTO updating ids ending in 7."""
    table = f"{java_iceberg.CATALOG}.mor_readers.{name}"
    props = ", ".join(f"'{k}'='{v}'" for k, v in {"format-version": str(format_version), **MERGE_ON_READ}.items())
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {java_iceberg.CATALOG}.mor_readers")
    spark.sql(f"CREATE TABLE {table} (id bigint, v string) USING iceberg TBLPROPERTIES ({props})")
    for lo in (0, 50):
        spark.range(lo, lo + 50, numPartitions=1).selectExpr("id", "concat('a', id) AS v").writeTo(table).append()
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 3")
    spark.range(0, 100, numPartitions=1).filter("id % 10 = 7").selectExpr("id", "concat('b', id) AS v").createOrReplaceTempView("mor_src")
    spark.sql(f"MERGE INTO {table} t USING mor_src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v")
    kinds = {(r["content"], r["file_format"]) for r in spark.sql(f"SELECT content, file_format FROM {table}.delete_files").collect()}
    assert kinds == {(1, "PARQUET" if format_version == 2 else "PUFFIN")}, kinds  # 1: position deletes
    location = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()["file"]
    expected = sorted((i, f"b{i}" if i % 10 == 7 else f"a{i}") for i in range(100) if i % 10 != 3)
    return MorTable(location, _local(location).rsplit("/metadata/", 1)[0], expected)


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory) -> dict[str, MorTable]:
    ours = _ours(spark, str(tmp_path_factory.mktemp("mor-readers") / "warehouse"))
    out = {"ours": ours, "ours_delta": ours}
    if java_iceberg.available():
        out.update(java_v2=_java(spark, "v2", 2), java_v3=_java(spark, "v3", 3))
    return out


# ------------------------------------------------------------------ the readers, each returning (id, v) tuples


def _pyiceberg(spark, t):
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(t.metadata_location).scan(selected_fields=("id", "v")).to_arrow().to_pylist()


def _duckdb_iceberg(spark, t):
    return duckdb_readers.connect().execute(f"SELECT id, v FROM {duckdb_readers.iceberg_scan_sql(t.metadata_location)}").fetchall()


def _java_iceberg(spark, t):
    return java_iceberg.read_metadata(spark, t.metadata_location).select("id", "v").collect()


def _polars_iceberg(spark, t):
    import polars as pl

    return pl.scan_iceberg(t.metadata_location).select("id", "v").collect().rows()


def _sail_iceberg(spark, t):
    return sail_reader.read(t.root, ["id", "v"], "iceberg")


def _duckdb_delta(spark, t):
    return duckdb_readers.connect().execute(f"SELECT id, v FROM {duckdb_readers.delta_scan_sql(t.root)}").fetchall()


def _delta_rs_pyarrow(spark, t):
    from deltalake import DeltaTable

    return DeltaTable(t.root).to_pyarrow_table(columns=["id", "v"]).to_pylist()


def _delta_rs_datafusion(spark, t):
    from deltalake import DeltaTable, QueryBuilder

    return pa.table(QueryBuilder().register("t", DeltaTable(t.root)).execute("SELECT id, v FROM t").read_all()).to_pylist()


def _polars_delta(spark, t):
    import polars as pl

    return pl.scan_delta(t.root).select("id", "v").collect().rows()


def _sail_delta(spark, t):
    return sail_reader.read(t.root, ["id", "v"], "delta")


def _chdb(sql: str) -> list[tuple]:
    from contextlib import chdir

    import chdb

    with chdir("/"):  # chdb reads local files below its working directory only
        return [tuple(r.values()) for r in chdb.query(sql, "ArrowTable").to_pylist()]


def _chdb_iceberg(spark, t):
    metadata = t.metadata_location.removeprefix("file://").removeprefix(t.root + "/")  # relative to the table root
    return _chdb(f"SELECT id, v FROM icebergLocal('{t.root}', SETTINGS iceberg_metadata_file_path = '{metadata}')")


def _chdb_delta(spark, t):
    return _chdb(f"SELECT id, v FROM deltaLakeLocal('{t.root}')")


def _parquet_files(spark, t):
    """The table's data files read as plain Parquet: no table format, so no deletes applied."""
    files = ", ".join(f"'{p}'" for p in sorted(Path(t.root).rglob("*.parquet")) if "v" in pq.read_schema(p).names)  # not delete files
    return duckdb_readers.connect().execute(f"SELECT id, v FROM read_parquet([{files}])").fetchall()


ICEBERG, DELTA = ("ours", *JAVA_TABLES), ("ours_delta",)
READERS = {  # label (the docs' first column starts with it) -> (reader, the tables it reads)
    "pyiceberg": (_pyiceberg, ICEBERG),
    "DuckDB 1.5 `iceberg_scan`": (_duckdb_iceberg, ICEBERG),
    "DuckDB 1.5 `delta_scan`": (_duckdb_delta, DELTA),
    "delta-rs 1.6.6 `to_pyarrow_table`": (_delta_rs_pyarrow, DELTA),
    "delta-rs 1.6.6 `QueryBuilder`": (_delta_rs_datafusion, DELTA),
    "Java Iceberg": (_java_iceberg, ICEBERG),
    "Polars 2.1 `scan_iceberg`": (_polars_iceberg, ICEBERG),
    "Polars 2.1 `scan_delta`": (_polars_delta, DELTA),
    "chdb 4.4 (ClickHouse 26.9) `icebergLocal`": (_chdb_iceberg, ICEBERG),
    "chdb 4.4 (ClickHouse 26.9) `deltaLakeLocal`": (_chdb_delta, DELTA),
    'Sail 0.7.2 `format("iceberg")`': (_sail_iceberg, ICEBERG),
    'Sail 0.7.2 `format("delta")`': (_sail_delta, DELTA),
    "a plain Parquet read": (_parquet_files, ICEBERG + DELTA),
}
COLUMNS = {"ours": 1, "ours_delta": 2, "java_v2": 3, "java_v3": 4}  # the docs table's column of each table
WRONG = "WRONG"
REFUSALS = {  # (reader, table) -> what its error says; every other pair must read the live rows exactly
    ('Sail 0.7.2 `format("iceberg")`', "ours"): "No metadata files found in table location",
    ("chdb 4.4 (ClickHouse 26.9) `icebergLocal`", "java_v3"): "Position deletes are supported only for parquet format",
    ("delta-rs 1.6.6 `to_pyarrow_table`", "ours_delta"): "The table has set these reader features: {'deletionVectors'} but these are not yet supported by the deltalake reader.",
}
WRONG_READERS = {"a plain Parquet read"}  # they return deleted rows: the docs say so in bold


def _cases():
    for reader, (fn, readable) in READERS.items():
        for table in readable:
            marks = [pytest.mark.java_iceberg] if table in JAVA_TABLES or reader == "Java Iceberg" else []
            yield pytest.param(reader, table, marks=marks, id=f"{table}-{fn.__name__.strip('_')}")


@pytest.mark.parametrize(("reader", "table"), list(_cases()))
def test_each_reader_reads_the_live_rows_or_refuses_loudly(reader, table, tables, spark):
    t = tables[table]
    if (reader, table) in REFUSALS:
        with pytest.raises(Exception, match=re.escape(REFUSALS[reader, table])):
            READERS[reader][0](spark, t)
        return
    rows = sorted(tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in READERS[reader][0](spark, t))
    if reader in WRONG_READERS:
        assert set(rows) > set(t.expected), f"{reader} on {table}: expected the deleted rows back"
    else:
        assert rows == t.expected, f"{reader} on {table}: {len(rows)} rows, {len(set(rows) - set(t.expected))} of them deleted or outdated"


def test_the_docs_table_says_what_the_readers_do():
    """Each measured cell of docs/merge-on-read.md's reader table: correct, refuses (quoting the error), WRONG."""
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith("| ")]
    for reader, (_, readable) in READERS.items():
        (row,) = [line for line in lines if line[2:].startswith(reader)]
        cells = [c.strip() for c in row.strip("|").split("|")]
        for table in readable:
            column = COLUMNS[table]
            cell = cells[column]
            if reader in WRONG_READERS:
                assert WRONG in cell, (reader, table, cell)
            elif (reader, table) in REFUSALS:
                assert cell.startswith("refuses") and REFUSALS[reader, table] in cell, (reader, table, cell)
            else:
                assert cell == "correct", (reader, table, cell)

"""An import never changes what a Delta table's existing readers see: the source keeps its table id, name, description,
schema and types (byte, short, arrays and structs of them, timestamp_ntz, char/varchar), protocol, checkpoint interval
and change-feed setting; the versions the import adds carry no metaData or protocol action. Later writes, merges and
compaction through the lakehouse keep the Delta types, and every reader of both formats agrees. Tables are written by
delta-rs; what it cannot write (Spark's protocol and metaData, a variant column) by hand from the Delta protocol over
Parquet files written with pyarrow."""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from lakehouse_assets import ImportRefused, MergeOptions
from lakehouse_assets.core.errors import LakehouseError, MirrorRefused
from lakehouse_assets.core.read import duckdb_readers

from .conftest import assert_all_readers_agree
from .test_import import mapped_rows_everywhere, tree_digest


def log_state(root) -> dict:
    """What a Delta reader takes from the log's metaData and protocol."""
    d = DeltaTable(str(root))
    m, p = d.metadata(), d.protocol()
    return {
        "id": m.id, "name": m.name, "description": m.description, "schema": json.loads(d.schema().to_json()),
        "partition_columns": list(m.partition_columns), "configuration": dict(m.configuration),
        "protocol": (p.min_reader_version, p.min_writer_version, sorted(p.reader_features or []), sorted(p.writer_features or [])),
    }  # fmt: skip


def actions_since(root, version: int) -> list[str]:
    """The kinds of actions in the JSON commits after `version`."""
    kinds = []
    for name in sorted(os.listdir(os.path.join(root, "_delta_log"))):
        if name.endswith(".json") and int(name.split(".")[0]) > version:
            with open(os.path.join(root, "_delta_log", name)) as f:
                kinds += [next(iter(json.loads(line))) for line in f if line.strip()]
    return kinds


def delta_types(duck, root) -> dict[str, tuple[str, str, str]]:
    """Column -> (the log's Arrow type, delta-rs's read type, DuckDB delta_scan's type)."""
    d = DeltaTable(str(root))
    log = {f.name: str(f.type) for f in pa.schema(d.schema().to_arrow())}
    if "columnMapping" in (d.protocol().reader_features or []):  # delta-rs's pyarrow reader refuses it, its DataFusion reader reads it
        read = {f.name: str(f.type) for f in pa.table(QueryBuilder().register("t", d).execute("SELECT * FROM t").read_all()).schema}
    else:
        read = {f.name: str(f.type) for f in d.to_pyarrow_table().schema}
    res = duck.execute(f"DESCRIBE SELECT * FROM {duckdb_readers.delta_scan_sql(str(root))}").fetchall()
    return {name: (log[name], read[name], dict((r[0], r[1]) for r in res)[name]) for name in log}


def assert_unchanged(duck, root, before: dict, types: dict) -> None:
    assert log_state(root) == before
    assert delta_types(duck, root) == types


# ---------------------------------------------------------------- byte, short, arrays and structs of them

NARROW = pa.schema([
    ("id", pa.int64()), ("b", pa.int8()), ("s", pa.int16()),
    ("ls", pa.list_(pa.int16())), ("st", pa.struct([("x", pa.int16()), ("y", pa.string())])),
])  # fmt: skip
NARROW_SPARK = "id long, b int, s int, ls array<int>, st struct<x: int, y: string>"
NARROW_COLUMNS = ["b", "id", "ls", "s", "st"]


def narrow_rows(ids):
    return [(i, i % 100 - 50, i * 100 - 30000, [i, -i], {"x": -i, "y": f"y{i}"}) for i in ids]


def expected(rows):
    """Rows as the readers' normalised form, in NARROW_COLUMNS order."""
    return [(b, i, tuple(ls), s, tuple(sorted(st.items()))) for i, b, s, ls, st in rows]


def test_a_delta_rs_table_with_byte_and_short_columns_keeps_its_metadata_types_and_readers(lh, spark, duck, tmp_path):
    root = str(tmp_path / "narrow")
    rows = narrow_rows(range(1, 7))
    data = pa.Table.from_pylist([dict(zip(NARROW.names, r)) for r in rows], schema=NARROW)
    config = {"delta.checkpointInterval": "7", "delta.enableChangeDataFeed": "false", "delta.logRetentionDuration": "interval 60 days"}
    write_deltalake(root, data.slice(0, 3), name="narrow_events", description="byte and short columns", configuration=config)
    write_deltalake(root, data.slice(3), mode="append")
    before, types, source_version = log_state(root), delta_types(duck, root), DeltaTable(root).version()
    assert types["b"] == ("int8", "int8", "TINYINT") and types["s"] == ("int16", "int16", "SMALLINT")
    assert types["ls"][2] == "SMALLINT[]"

    report = lh.import_table("fid.narrow", root)

    # One version of the lakehouse's own, recording the mirrored snapshot: no metaData, no protocol.
    assert report["delta_version"] == source_version + 1
    assert sorted(set(actions_since(root, source_version))) == ["commitInfo", "txn"]
    assert_unchanged(duck, root, before, types)
    assert_all_readers_agree(lh, spark, duck, "fid.narrow", expected(rows), columns=NARROW_COLUMNS)
    deep = lh.verify("fid.narrow", deep=True)
    assert deep["agree"], deep["differences"]

    lh.write(spark.createDataFrame(narrow_rows([7, 8]), NARROW_SPARK), "fid.narrow", mode="append")
    rows += narrow_rows([7, 8])
    changed = [(1, 99, 32767, [-32768], {"x": 32767, "y": "changed"})]
    lh.write(spark.createDataFrame(changed + narrow_rows([9]), NARROW_SPARK), "fid.narrow", mode="merge", merge=MergeOptions(keys=["id"]))
    rows = [r for r in rows if r[0] != 1] + changed + narrow_rows([9])
    assert_all_readers_agree(lh, spark, duck, "fid.narrow", expected(rows), columns=NARROW_COLUMNS)
    assert_unchanged(duck, root, before, types)
    compacted = lh.maintain("fid.narrow", "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert_all_readers_agree(lh, spark, duck, "fid.narrow", expected(rows), columns=NARROW_COLUMNS)
    assert_unchanged(duck, root, before, types)
    assert not {"metaData", "protocol"} & set(actions_since(root, source_version))
    # The files the lakehouse wrote hold the Delta types, as the source's files do.
    live = DeltaTable(root).file_uris()
    written = [u for u in live if "/data/" in u]
    assert written and all(pq.read_schema(u.removeprefix("file://")).field("s").type == pa.int16() for u in written)
    deep = lh.verify("fid.narrow", deep=True)
    assert deep["agree"], deep["differences"]


def test_a_value_out_of_a_delta_short_columns_range_is_refused_before_any_commit(lh, spark, duck, tmp_path):
    root = str(tmp_path / "short")
    rows = narrow_rows([1, 2])
    write_deltalake(root, pa.Table.from_pylist([dict(zip(NARROW.names, r)) for r in rows], schema=NARROW))
    lh.import_table("fid.short", root)
    snapshot, version = lh.load("fid.short").current_snapshot().snapshot_id, DeltaTable(root).version()

    with pytest.raises(LakehouseError, match=r"column 's' cannot be written as int16"):
        lh.write(spark.createDataFrame([(3, 1, 40000, [1], {"x": 1, "y": "y"})], NARROW_SPARK), "fid.short", mode="append")

    assert lh.load("fid.short").current_snapshot().snapshot_id == snapshot and DeltaTable(root).version() == version
    assert_all_readers_agree(lh, spark, duck, "fid.short", expected(rows), columns=NARROW_COLUMNS)


# ---------------------------------------------------------------- delta.appendOnly


def test_an_append_only_delta_table_imports_takes_appends_and_refuses_removes_by_name(lh, spark, duck, tmp_path):
    root = str(tmp_path / "append_only")
    rows = [(i, f"n{i}", i * 10) for i in range(6)]
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "v": pa.array([r[2] for r in rows], pa.int16())})
    write_deltalake(root, data.slice(0, 3), configuration={"delta.appendOnly": "true"})
    write_deltalake(root, data.slice(3), mode="append")
    before, types = log_state(root), delta_types(duck, root)
    columns = ["id", "name", "v"]

    lh.import_table("fid.append_only", root)

    assert_unchanged(duck, root, before, types)
    lh.write(spark.createDataFrame([(6, "n6", 60)], "id long, name string, v int"), "fid.append_only", mode="append")
    rows.append((6, "n6", 60))
    assert_all_readers_agree(lh, spark, duck, "fid.append_only", rows, columns=columns)
    snapshot, version = lh.load("fid.append_only").current_snapshot().snapshot_id, DeltaTable(root).version()
    for mode in ("merge", "overwrite"):
        with pytest.raises(MirrorRefused, match=r"fid\.append_only: its Delta table sets delta\.appendOnly=true.*Nothing was committed"):
            lh.write(spark.createDataFrame([(0, "x", 1)], "id long, name string, v int"), "fid.append_only", mode=mode, merge=MergeOptions(keys=["id"]) if mode == "merge" else None)
        assert lh.load("fid.append_only").current_snapshot().snapshot_id == snapshot and DeltaTable(root).version() == version
    # A merge on a branch touches neither main nor Delta; publishing it would remove files from main: refused the same way.
    lh.write(spark.createDataFrame([(0, "x", 1)], "id long, name string, v int"), "fid.append_only", mode="merge", merge=MergeOptions(keys=["id"]), branch="fix")
    with pytest.raises(MirrorRefused, match=r"fid\.append_only: its Delta table sets delta\.appendOnly=true, and publishing branch 'fix' would remove"):
        lh.publish("fid.append_only", "fix", spark=spark)
    assert lh.load("fid.append_only").current_snapshot().snapshot_id == snapshot and DeltaTable(root).version() == version
    lh.discard("fid.append_only", "fix")
    # Compaction removes files without changing data (dataChange=false), which an append-only table allows.
    compacted = lh.maintain("fid.append_only", "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert_all_readers_agree(lh, spark, duck, "fid.append_only", rows, columns=columns)
    assert_unchanged(duck, root, before, types)
    deep = lh.verify("fid.append_only", deep=True)
    assert deep["agree"], deep["differences"]


# ---------------------------------------------------------------- logs delta-rs cannot write


def write_log(root, protocol: dict, metadata: dict, files: list[tuple[str, pa.Table]], engine: str) -> None:
    """Version 0 of a Delta table as another engine writes it: `files` written with pyarrow, the log by hand."""
    os.makedirs(os.path.join(root, "_delta_log"))
    actions = [{"protocol": protocol}, {"metaData": metadata}]
    for name, rows in files:
        pq.write_table(rows, os.path.join(root, name))
        stats = {"numRecords": rows.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
        for column in rows.column_names:  # as Spark writes them: primitive columns' bounds, timestamps to the millisecond
            if pa.types.is_struct(rows.schema.field(column).type):
                continue
            values = [v for v in rows.column(column).to_pylist() if v is not None]
            stats["nullCount"][column] = rows.num_rows - len(values)
            for key, value in (("minValues", min(values)), ("maxValues", max(values))):
                stats[key][column] = value.isoformat(timespec="milliseconds") if isinstance(value, dt.datetime) else value
        add = {"path": name, "partitionValues": {}, "size": os.path.getsize(os.path.join(root, name)), "modificationTime": 1700000000000}
        actions.append({"add": {**add, "dataChange": True, "stats": json.dumps(stats)}})
    actions.append({"commitInfo": {"timestamp": 1700000000000, "operation": "CREATE TABLE AS SELECT", "engineInfo": engine}})
    with open(os.path.join(root, "_delta_log", "00000000000000000000.json"), "w") as f:
        f.write("\n".join(json.dumps(a) for a in actions) + "\n")


def field(name, delta_type, metadata=None):
    return {"name": name, "type": delta_type, "nullable": True, "metadata": metadata or {}}


def test_a_spark_written_table_keeps_its_protocol_timestamp_ntz_char_varchar_and_short(lh, spark, duck, tmp_path):
    root = str(tmp_path / "spark_table")
    schema = {"type": "struct", "fields": [
        field("id", "long"), field("code", "string", {"__CHAR_VARCHAR_TYPE_STRING": "char(2)"}),
        field("label", "string", {"__CHAR_VARCHAR_TYPE_STRING": "varchar(20)"}), field("qty", "short"), field("at", "timestamp_ntz"),
    ]}  # fmt: skip
    metadata = {
        "id": "0d8c7a52-5b1e-4c1e-9d7a-1f0e2b3c4d5e", "name": "orders", "description": "written by Spark",
        "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema), "partitionColumns": [],
        "configuration": {"delta.checkpointInterval": "20", "delta.enableChangeDataFeed": "false", "delta.enableDeletionVectors": "false"},
        "createdTime": 1700000000000,
    }  # fmt: skip
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz"], "writerFeatures": ["timestampNtz", "appendOnly", "invariants"]}
    at = [dt.datetime(2024, 1, d, 12, 30) for d in (1, 2, 3)]
    rows = pa.table({
        "id": pa.array([1, 2, 3], pa.int64()), "code": ["DE", "US", "FR"], "label": ["a", "b", "c"],
        "qty": pa.array([1, -300, 32000], pa.int16()), "at": pa.array(at, pa.timestamp("us")),
    })  # fmt: skip
    write_log(root, protocol, metadata, [("part-00000-a.snappy.parquet", rows)], "Apache-Spark/3.5.1 Delta-Lake/3.2.0")
    before, types = log_state(root), delta_types(duck, root)
    assert types["qty"] == ("int16", "int16", "SMALLINT") and types["at"][2] == "TIMESTAMP"
    columns = ["at", "code", "id", "label", "qty"]
    want = [(a.isoformat(), c, i, lbl, q) for i, c, lbl, q, a in zip(*(rows.column(n).to_pylist() for n in ["id", "code", "label", "qty", "at"]))]

    lh.import_table("fid.spark_table", root)

    assert sorted(set(actions_since(root, 0))) == ["commitInfo", "txn"]
    assert_unchanged(duck, root, before, types)
    assert "__CHAR_VARCHAR_TYPE_STRING" in DeltaTable(root).schema().to_json()
    assert_all_readers_agree(lh, spark, duck, "fid.spark_table", want, columns=columns)
    deep = lh.verify("fid.spark_table", deep=True)
    assert deep["agree"], deep["differences"]
    new = [(4, "IT", "d", 7, dt.datetime(2024, 2, 1)), (2, "US", "b2", -301, at[1])]
    lh.write(spark.createDataFrame(new[:1], "id long, code string, label string, qty int, at timestamp_ntz"), "fid.spark_table", mode="append")
    lh.write(spark.createDataFrame(new[1:], "id long, code string, label string, qty int, at timestamp_ntz"), "fid.spark_table", mode="merge", merge=MergeOptions(keys=["id"]))
    want = [r for r in want if r[2] != 2] + [(a.isoformat(), c, i, lbl, q) for i, c, lbl, q, a in new]
    assert_all_readers_agree(lh, spark, duck, "fid.spark_table", want, columns=columns)
    compacted = lh.maintain("fid.spark_table", "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert_all_readers_agree(lh, spark, duck, "fid.spark_table", want, columns=columns)
    assert_unchanged(duck, root, before, types)
    deep = lh.verify("fid.spark_table", deep=True)
    assert deep["agree"], deep["differences"]


def test_a_variant_column_is_refused_by_name_and_the_source_is_left_as_it_was(lh, tmp_path):
    root = str(tmp_path / "variant_table")
    schema = {"type": "struct", "fields": [field("id", "long"), field("payload", "variant")]}
    metadata = {
        "id": "5f1e0c2a-8d3b-4a6f-b1c2-0e9d8c7b6a54", "name": "events", "description": None, "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {}, "createdTime": 1700000000000,
    }  # fmt: skip
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["variantType"], "writerFeatures": ["variantType"]}
    # A variant is stored as a struct of its binary metadata and value (the Parquet variant encoding): {"a": 1} here.
    variant = pa.array([{"metadata": b"\x01\x01\x00\x01a", "value": b"\x02\x01\x00\x00\x02\x0c\x01"}], pa.struct([("metadata", pa.binary()), ("value", pa.binary())]))
    write_log(root, protocol, metadata, [("part-0.parquet", pa.table({"id": pa.array([1], pa.int64()), "payload": variant}))], "Apache-Spark/4.0.0 Delta-Lake/4.0.0")
    before = tree_digest(root)

    for apply_deletes in (False, True):
        with pytest.raises(ImportRefused, match=r"fid\.variant_table: column\(s\) \['payload'\] .* variant.*Nothing was imported.*to_json"):
            lh.import_table("fid.variant_table", root, apply_deletes=apply_deletes)

    assert tree_digest(root) == before
    assert "fid.variant_table" not in lh.table_names()


def mapped(name, delta_type, column_id, extra=None):
    return field(name, delta_type, {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": f"col-{column_id}-x", **(extra or {})})


def test_a_column_mapped_spark_table_keeps_its_short_column_and_char_varchar_metadata(lh, spark, duck, tmp_path):
    root = str(tmp_path / "mapped")
    schema = {"type": "struct", "fields": [
        mapped("id", "long", 1), mapped("code", "string", 2, {"__CHAR_VARCHAR_TYPE_STRING": "varchar(5)", "comment": "ISO code"}),
        mapped("qty", "short", 3),
    ]}  # fmt: skip
    metadata = {
        "id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "name": "stock", "description": "column-mapped by Spark",
        "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema), "partitionColumns": [],
        "configuration": {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3", "delta.checkpointInterval": "5"},
        "createdTime": 1700000000000,
    }  # fmt: skip
    # Delta Lake writes a column-mapped table's Parquet columns under their physical names, with the column ids as field ids.
    file_schema = pa.schema([
        pa.field(f"col-{i}-x", t, metadata={b"PARQUET:field_id": str(i).encode()}) for i, t in ((1, pa.int64()), (2, pa.string()), (3, pa.int16()))
    ])  # fmt: skip
    rows = pa.table({"col-1-x": [1, 2], "col-2-x": ["DE", "US"], "col-3-x": [5, -6]}, schema=file_schema)
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"], "writerFeatures": ["columnMapping"]}
    write_log(root, protocol, metadata, [("part-0.parquet", rows)], "Apache-Spark/3.5.1 Delta-Lake/3.2.0")
    before, types = log_state(root), delta_types(duck, root)
    assert types["qty"] == ("int16", "int16", "SMALLINT")
    columns = ["code", "id", "qty"]

    lh.import_table("fid.mapped", root)

    assert sorted(set(actions_since(root, 0))) == ["commitInfo", "txn"]
    assert_unchanged(duck, root, before, types)
    want = [("DE", 1, 5), ("US", 2, -6)]
    assert mapped_rows_everywhere(lh, spark, duck, "fid.mapped", columns) == sorted(want, key=repr)
    lh.write(spark.createDataFrame([(3, "FR", 300)], "id long, code string, qty int"), "fid.mapped", mode="append")
    lh.write(spark.createDataFrame([(1, "IT", -32768)], "id long, code string, qty int"), "fid.mapped", mode="merge", merge=MergeOptions(keys=["id"]))
    want = [("IT", 1, -32768), ("US", 2, -6), ("FR", 3, 300)]
    assert mapped_rows_everywhere(lh, spark, duck, "fid.mapped", columns) == sorted(want, key=repr)
    compacted = lh.maintain("fid.mapped", "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert mapped_rows_everywhere(lh, spark, duck, "fid.mapped", columns) == sorted(want, key=repr)
    assert_unchanged(duck, root, before, types)
    deep = lh.verify("fid.mapped", deep=True)
    assert deep["agree"], deep["differences"]


def test_a_parquet_datasets_int8_and_int16_columns_are_byte_and_short_in_its_new_delta_log(lh, spark, duck, tmp_path):
    root = tmp_path / "landing"
    root.mkdir()
    rows = narrow_rows([1, 2, 3])
    pq.write_table(pa.Table.from_pylist([dict(zip(NARROW.names, r)) for r in rows], schema=NARROW), root / "part-0.parquet")

    lh.import_table("fid.landing", str(root))

    types = delta_types(duck, root)
    assert types["b"] == ("int8", "int8", "TINYINT") and types["s"] == ("int16", "int16", "SMALLINT") and types["ls"][2] == "SMALLINT[]"
    assert_all_readers_agree(lh, spark, duck, "fid.landing", expected(rows), columns=NARROW_COLUMNS)
    lh.write(spark.createDataFrame(narrow_rows([4]), NARROW_SPARK), "fid.landing", mode="merge", merge=MergeOptions(keys=["id"]))
    assert_all_readers_agree(lh, spark, duck, "fid.landing", expected(rows + narrow_rows([4])), columns=NARROW_COLUMNS)
    assert delta_types(duck, root) == types
    deep = lh.verify("fid.landing", deep=True)
    assert deep["agree"], deep["differences"]


def test_the_change_data_files_of_a_merge_into_a_short_column_table_hold_the_delta_type(lh, spark, duck, tmp_path):
    root = str(tmp_path / "feed")
    write_deltalake(root, pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array([10, 20], pa.int16())}), configuration={"delta.enableChangeDataFeed": "true"})
    before, types = log_state(root), delta_types(duck, root)
    lh.import_table("fid.feed", root)
    version = DeltaTable(root).version()

    lh.write(spark.createDataFrame([(2, -20), (3, 30)], "id long, s int"), "fid.feed", mode="merge", merge=MergeOptions(keys=["id"]))

    feed = pa.table(DeltaTable(root).load_cdf(starting_version=version + 1).read_all())
    assert feed.schema.field("s").type == pa.int16()
    changes = sorted((r["_change_type"], r["id"], r["s"]) for r in feed.to_pylist())
    assert changes == [("insert", 3, 30), ("update_postimage", 2, -20), ("update_preimage", 2, 20)]
    assert_all_readers_agree(lh, spark, duck, "fid.feed", [(1, 10), (2, -20), (3, 30)], columns=["id", "s"])
    assert_unchanged(duck, root, before, types)
    deep = lh.verify("fid.feed", deep=True)
    assert deep["agree"], deep["differences"]

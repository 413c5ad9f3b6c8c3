"""`Lakehouse.import_table`: existing tables written by real engines (pyarrow, Spark, delta-rs, pyiceberg, Java Iceberg)
brought under management over their own files. After the import every reader of both formats agrees, `verify --deep`
passes, and a write, a merge and a compaction keep them agreeing; a refused import leaves the source byte-identical."""

from __future__ import annotations

import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import ImportRefused, MergeOptions

from . import java_iceberg
from .conftest import assert_all_readers_agree, rows_of

COLUMNS = "id long, name string, country string"


def tree_digest(root) -> dict[str, str]:
    """Every file under `root` -> its SHA-256: a refused or failed import must leave this unchanged."""
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            path = os.path.join(folder, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def source_rows(n=12):
    return [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(n)]


def still_agrees_after_writes(lh, spark, duck, name, rows, columns=("country", "id", "name")):
    """verify --deep, then an append, a merge and a compaction through the project: every reader agrees each time."""
    deep = lh.verify(name, deep=True)
    assert deep["agree"], deep["differences"]
    expected = [(c, i, n) for i, n, c in rows]
    assert_all_readers_agree(lh, spark, duck, name, expected, columns=list(columns))
    lh.write(spark.createDataFrame([(100, "new", "FR")], COLUMNS), name, mode="append")
    expected.append(("FR", 100, "new"))
    lh.write(spark.createDataFrame([(0, "changed", "DE"), (101, "merged", "US")], COLUMNS), name, mode="merge", merge=MergeOptions(keys=["id"]))
    expected = [r for r in expected if r[1] != 0] + [("DE", 0, "changed"), ("US", 101, "merged")]
    assert assert_all_readers_agree(lh, spark, duck, name, sorted(expected, key=repr), columns=list(columns))
    compacted = lh.maintain(name, "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    assert assert_all_readers_agree(lh, spark, duck, name, sorted(expected, key=repr), columns=list(columns))
    deep = lh.verify(name, deep=True)
    assert deep["agree"], deep["differences"]


# ---------------------------------------------------------------- Parquet datasets


@pytest.mark.smoke
def test_a_hive_partitioned_pyarrow_dataset_is_imported_in_both_formats_over_its_files(lh, spark, duck, tmp_path):
    root = tmp_path / "events"
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    pq.write_to_dataset(data, str(root), partition_cols=["country"])
    before = tree_digest(root)

    report = lh.import_table("imp.events", str(root))

    assert report["source_format"] == "parquet" and report["files"] == 2 and report["rows"] == 12
    table = lh.load("imp.events")
    assert table.location().rstrip("/").endswith("/events")
    assert [f.name for f in table.schema().fields] == ["id", "name", "country"]
    assert {r: d for r, d in tree_digest(root).items() if r in before} == before  # no data file rewritten
    # Every later load of the log reads a checkpoint, not the first commit's JSON listing every imported file.
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(root / "_delta_log")), os.listdir(root / "_delta_log")
    still_agrees_after_writes(lh, spark, duck, "imp.events", rows)


def test_a_merge_into_a_hive_style_import_reads_only_the_manifests_of_its_partitions(lh, spark, duck, tmp_path, monkeypatch):
    """The partition values the files lack come from the files the write reads: a merge into one country never
    lists the table's live files (which grow with the table); a compaction, which plans over the whole table,
    reads the files it rewrites with their values."""
    from lakehouse_assets.core.formats import deletes

    root = tmp_path / "events"
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    for part in range(3):  # three files per country
        pq.write_to_dataset(data.slice(part * 4, 4), str(root), partition_cols=["country"], basename_template=f"part-{part}-{{i}}.parquet")
    lh.import_table("imp.hive_merge", str(root))

    def every_live_file(*_a, **_k):
        raise AssertionError("the write listed every live file of the table")

    monkeypatch.setattr(deletes, "table_files", every_live_file)
    lh.write(spark.createDataFrame([(0, "changed", "DE"), (2, "also", "DE")], COLUMNS), "imp.hive_merge", mode="merge", merge=MergeOptions(keys=["id", "country"]))
    monkeypatch.undo()
    compacted = lh.maintain("imp.hive_merge", "compaction", spark=spark, compaction_min_input_files=2)
    assert compacted["committed"], compacted
    expected = sorted([(c, i, {0: "changed", 2: "also"}.get(i, n)) for i, n, c in rows], key=repr)
    assert_all_readers_agree(lh, spark, duck, "imp.hive_merge", expected, columns=["country", "id", "name"])
    assert lh.verify("imp.hive_merge", deep=True)["agree"]


def test_clustered_groups_cut_at_partition_ends_and_split_only_a_partition_larger_than_a_manifest():
    from pyiceberg.manifest import DataFile
    from pyiceberg.typedef import Record

    from lakehouse_assets.core.formats.iceberg.clustered_manifests import clustered

    def files(day, n):
        return [DataFile.from_args(file_path=f"{day}-{i}", partition=Record(day)) for i in range(n)]

    given = files("d3", 5) + files(None, 1) + files("d1", 2) + files("d2", 2)
    groups = [[(f.partition[0], f.file_path) for f in g] for g in clustered(given, 3)]
    assert [[p for p, _ in g] for g in groups] == [["d1", "d1"], ["d2", "d2"], ["d3"] * 3, ["d3", "d3", None]]
    assert sorted(path for g in groups for _, path in g) == sorted(f.file_path for f in given)


def test_an_import_of_more_files_than_a_manifest_holds_clusters_them_by_partition_and_a_merge_rewrites_one(lh, spark, duck, tmp_path, monkeypatch):
    """pyiceberg would write every imported file into one manifest spanning every partition, which the first change
    of any partition then reads and rewrites whole: here each manifest holds whole partitions, and a merge into one
    country rewrites only the manifest that holds it."""
    from lakehouse_assets.core.formats.iceberg import clustered_manifests

    monkeypatch.setattr(clustered_manifests, "MANIFEST_ENTRIES", 4)
    root = tmp_path / "events"
    countries = ["DE", "FR", "NL", "US"]
    rows = [(i, f"n{i}", countries[i % 4]) for i in range(24)]
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    for part in range(3):  # three files per country: 12 files, more than a manifest holds
        pq.write_to_dataset(data.slice(part * 8, 8), str(root), partition_cols=["country"], basename_template=f"part-{part}-{{i}}.parquet")
    lh.import_table("imp.clustered", str(root))

    def manifests():
        table = lh.load("imp.clustered")
        out = {}
        for m in table.current_snapshot().manifests(table.io):
            entries = m.fetch_manifest_entry(table.io, discard_deleted=False)  # the merge's removed files too
            out[m.manifest_path] = sorted({e.data_file.partition[0] for e in entries})
        return out

    imported = manifests()
    assert sorted(imported.values()) == [[c] for c in countries], imported  # four manifests, one country each
    lh.write(spark.createDataFrame([(0, "changed", "DE"), (4, "also", "DE")], COLUMNS), "imp.clustered", mode="merge", merge=MergeOptions(keys=["id", "country"]))
    merged = manifests()
    kept = {path for path, held in imported.items() if held != ["DE"]}
    assert kept <= set(merged), "a merge into DE rewrote the manifests of other countries"
    assert [held for path, held in merged.items() if path not in kept] == [["DE"]] * (len(merged) - len(kept))
    expected = sorted([(c, i, {0: "changed", 4: "also"}.get(i, n)) for i, n, c in rows], key=repr)
    assert_all_readers_agree(lh, spark, duck, "imp.clustered", expected, columns=["country", "id", "name"])
    assert lh.verify("imp.clustered", deep=True)["agree"]


def test_a_flat_spark_written_dataset_is_imported(lh, spark, duck, tmp_path):
    root = tmp_path / "flat"
    rows = source_rows(8)
    spark.createDataFrame(rows, COLUMNS).coalesce(2).write.parquet(str(root))  # Spark leaves _SUCCESS and .crc files

    report = lh.import_table("imp.flat", str(root))

    assert report["source_format"] == "parquet" and report["rows"] == 8
    still_agrees_after_writes(lh, spark, duck, "imp.flat", rows)


def test_a_spark_partitioned_dataset_is_imported(lh, spark, duck, tmp_path):
    root = tmp_path / "sparkparts"
    rows = source_rows(8)
    spark.createDataFrame(rows, COLUMNS).write.partitionBy("country").parquet(str(root))

    lh.import_table("imp.sparkparts", str(root))

    assert lh.load("imp.sparkparts").spec().fields[0].name == "country"
    still_agrees_after_writes(lh, spark, duck, "imp.sparkparts", rows)


def test_orphan_cleanup_keeps_the_foreign_files_of_imported_spark_and_delta_rs_tables(lh, spark, duck, tmp_path):
    """`_SUCCESS`, Spark's `.part-*.crc` and the Delta log of an imported source survive full maintenance with grace 0."""
    rows = source_rows(8)
    spark.createDataFrame(rows, COLUMNS).write.partitionBy("country").parquet(str(tmp_path / "sp"))
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    write_deltalake(str(tmp_path / "dl"), data, partition_by=["country"])
    expected = sorted(((c, i, n) for i, n, c in rows), key=repr)
    for name, folder in (("imp.orph_sp", "sp"), ("imp.orph_dl", "dl")):
        before = set(tree_digest(tmp_path / folder))
        lh.import_table(name, str(tmp_path / folder))
        lh.maintain(name, "full_maintenance", spark=spark, orphan_grace_hours=0, snapshot_retention_days=3650, min_snapshots_to_keep=100)
        assert before <= set(tree_digest(tmp_path / folder)), name
        assert assert_all_readers_agree(lh, spark, duck, name, expected, columns=["country", "id", "name"])
        deep = lh.verify(name, deep=True)
        assert deep["agree"], deep["differences"]
    assert any(p.endswith(".crc") for p in tree_digest(tmp_path / "sp")) and "_SUCCESS" in tree_digest(tmp_path / "sp")


def test_files_whose_types_disagree_are_refused_naming_file_and_column_and_nothing_changes(lh, tmp_path):
    root = tmp_path / "mixed"
    root.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}), root / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.int32()), "name": ["c"]}), root / "b.parquet")
    before = tree_digest(root)

    with pytest.raises(ImportRefused, match=r"imp\.mixed: column 'id' is int32 in b\.parquet but int64 in a\.parquet.*Nothing was imported"):
        lh.import_table("imp.mixed", str(root))

    assert tree_digest(root) == before
    assert "imp.mixed" not in lh.table_names()


# ---------------------------------------------------------------- Delta tables


def test_a_partitioned_delta_rs_table_gets_an_iceberg_side_over_the_same_files(lh, spark, duck, tmp_path):
    root = str(tmp_path / "delta_events")
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    write_deltalake(root, data.slice(0, 6), partition_by=["country"])
    write_deltalake(root, data.slice(6), mode="append", partition_by=["country"])
    files_before = set(DeltaTable(root).file_uris())

    report = lh.import_table("imp.delta_events", root)

    # The source's versions 0 and 1 stay; ours follows: 2 records the Iceberg snapshot as mirrored (the source's statistics
    # columns, Delta's default, are the table's policy: no version changes the configuration).
    assert report["source_format"] == "delta" and report["rows"] == 12 and report["delta_version"] == DeltaTable(root).version() == 2
    assert [h.get("lakehouse.operation") for h in sorted(DeltaTable(root).history(), key=lambda h: h["version"])] == [None, None, "adopt-delta"]
    table = lh.load("imp.delta_events")
    assert {f.file_path for f in table.scan().plan_files() for f in [f.file]} == {u if u.startswith("file:") else f"file://{u}" for u in files_before}
    assert lh.delta_lag("imp.delta_events") == 0
    still_agrees_after_writes(lh, spark, duck, "imp.delta_events", rows)


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def inline_deletion_vector(rows: list[int]) -> dict:
    """A Delta `deletionVector` descriptor stored inline, as the Delta protocol serialises it: the magic number, a
    64-bit RoaringBitmapArray of one portable 32-bit Roaring bitmap (one array container), Z85-encoded."""
    import struct

    portable = struct.pack("<II", 12346, 1) + struct.pack("<HH", 0, len(rows) - 1) + struct.pack("<I", 16) + b"".join(struct.pack("<H", r) for r in rows)
    raw = struct.pack("<i", 1681511377) + struct.pack("<q", 1) + struct.pack("<i", 0) + portable
    padded = raw + b"\0" * (-len(raw) % 4)
    text = []
    for i in range(0, len(padded), 4):
        v, chunk = int.from_bytes(padded[i : i + 4], "big"), []
        for _ in range(5):
            chunk.append(_Z85[v % 85])
            v //= 85
        text += reversed(chunk)
    return {"storageType": "i", "pathOrInlineDv": "".join(text), "sizeInBytes": len(raw), "cardinality": len(rows)}


def delete_ids_2_and_4_with_a_vector(root, data: pa.Table, configuration: dict | None = None) -> tuple[dict, dict]:
    """delta-rs writes `data` (ids 0.. with even ids in country DE) partitioned by country, with table properties
    `configuration`; then a commit as Delta Lake on Spark writes a DELETE, marking ids 2 and 4 of the DE file deleted with
    an inline deletion vector. Returns the DE and US adds of version 0."""
    write_deltalake(str(root), data, partition_by=["country"], configuration=configuration)
    adds = [a["add"] for a in map(json.loads, (root / "_delta_log" / "00000000000000000000.json").read_text().splitlines()) if "add" in a]
    (de,) = [a for a in adds if a["partitionValues"] == {"country": "DE"}]
    (us,) = [a for a in adds if a["partitionValues"] == {"country": "US"}]
    assert pq.read_table(root / de["path"]).column("id").to_pylist()[1:3] == [2, 4]
    commit = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}},
        {"remove": {"path": de["path"], "partitionValues": de["partitionValues"], "deletionTimestamp": 1, "dataChange": True}},
        {"add": {**de, "dataChange": True, "deletionVector": inline_deletion_vector([1, 2])}},  # deletes ids 2 and 4
        {"commitInfo": {"operation": "DELETE", "engineInfo": "Apache-Spark/3.5.0 Delta-Lake/3.2.0"}},
    ]
    (root / "_delta_log" / "00000000000000000001.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")
    return de, us


def test_a_delta_table_with_deletion_vectors_is_refused_and_left_as_it_was(lh, tmp_path):
    # No engine here writes deletion vectors (delta-rs 1.6.6 cannot; no Delta Lake jars for Spark): the commit a Delta
    # Lake DELETE makes (protocol feature, the file re-added with an inline deletion vector) is written by hand onto a
    # delta-rs table, and delta-rs's own kernel decodes it (row 1 deleted) before the import looks at it.
    root = tmp_path / "dv"
    write_deltalake(str(root), pa.table({"id": [1, 2, 3]}))
    log0 = [json.loads(line) for line in (root / "_delta_log" / "00000000000000000000.json").read_text().splitlines()]
    add = next(a["add"] for a in log0 if "add" in a)
    commit = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}},
        {"remove": {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}},
        {"add": {**add, "dataChange": True, "deletionVector": inline_deletion_vector([1])}},
        {"commitInfo": {"operation": "DELETE", "engineInfo": "Apache-Spark/3.5.0 Delta-Lake/3.2.0"}},
    ]
    (root / "_delta_log" / "00000000000000000001.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")
    assert pa.table(DeltaTable(str(root)).deletion_vectors()).column("selection_vector").to_pylist() == [[True, False, True]]
    before = tree_digest(root)

    with pytest.raises(ImportRefused, match=r"imp\.dv: 1 live file\(s\) of the Delta table .* carry deletion vectors.*REORG TABLE"):
        lh.import_table("imp.dv", str(root))

    assert tree_digest(root) == before
    assert "imp.dv" not in lh.table_names()


def test_deletion_vectors_are_purged_by_an_import_that_applies_deletes(lh, spark, duck, tmp_path):
    """With apply_deletes, delta-rs first rewrites the file that carries a vector (a Delta version that changes no row):
    Iceberg then holds that rewritten file and the untouched file of the other partition, and no deleted row."""
    root = tmp_path / "dv_partitioned"
    rows = source_rows()
    de, us = delete_ids_2_and_4_with_a_vector(root, pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]}))
    before = tree_digest(root)
    with pytest.raises(ImportRefused, match=r"imp\.dv_partitioned: 1 live file\(s\) .* carry deletion vectors.*apply_deletes=True.*--apply-deletes"):
        lh.import_table("imp.dv_partitioned", str(root))
    assert tree_digest(root) == before

    report = lh.import_table("imp.dv_partitioned", str(root), apply_deletes=True)

    assert report["deletion_vectors_purged"] == 1 and report["rows"] == 10
    optimize = [h for h in DeltaTable(str(root)).history() if h["version"] == 2][0]
    assert optimize["operation"] == "OPTIMIZE" and optimize["operationMetrics"]["numFilesRemoved"] == 1
    live = {os.path.relpath(t.file.file_path.removeprefix("file://"), root) for t in lh.load("imp.dv_partitioned").scan().plan_files()}
    assert us["path"] in live and de["path"] not in live and len(live) == 2
    assert pa.table(DeltaTable(str(root)).deletion_vectors()).num_rows == 0
    still_agrees_after_writes(lh, spark, duck, "imp.dv_partitioned", [r for r in rows if r[0] not in (2, 4)])


_SAIL_COLUMN_MAPPED = """
import sys
from pysail.spark import SparkConnectServer
server = SparkConnectServer(ip="127.0.0.1", port=0)
server.start(background=True)
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote("sc://127.0.0.1:%d" % server.listening_address[1]).getOrCreate()
df = spark.createDataFrame([(1, "a", "DE"), (2, "b", "US")], "id long, name string, country string")
df.write.format("delta").option("delta.columnMapping.mode", "name").save(sys.argv[1])
spark.stop()
server.stop()
"""


def test_a_column_mapped_delta_table_written_by_sail_is_imported_under_its_physical_names(lh, spark, duck, tmp_path):
    # Sail (pysail) creates column-mapped Delta tables (delta-rs 1.6.6 refuses to): files name columns `col-<uuid>`.
    # Unpartitioned: DuckDB's delta_scan (1.5.5) reads the partition column of a partitioned Sail-written column-mapped
    # table as NULL even before any import (its partitionValues are keyed by physical name, as the protocol says).
    import subprocess

    from . import sail_reader

    root = tmp_path / "mapped"
    done = subprocess.run([sail_reader.python(), "-c", _SAIL_COLUMN_MAPPED, str(root)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert DeltaTable(str(root)).metadata().configuration["delta.columnMapping.mode"] == "name"

    lh.import_table("imp.mapped", str(root))

    table = lh.load("imp.mapped")
    assert [f.name for f in table.schema().fields] == ["id", "name", "country"]
    expected = [("DE", 1, "a"), ("US", 2, "b")]
    assert mapped_rows_everywhere(lh, spark, duck, "imp.mapped") == sorted(expected, key=repr)
    lh.write(spark.createDataFrame([(3, "c", "FR")], COLUMNS), "imp.mapped", mode="append")
    lh.write(spark.createDataFrame([(1, "changed", "DE")], COLUMNS), "imp.mapped", mode="merge", merge=MergeOptions(keys=["id"]))
    lh.maintain("imp.mapped", "compaction", spark=spark, compaction_min_input_files=2)
    expected = [("DE", 1, "changed"), ("US", 2, "b"), ("FR", 3, "c")]
    assert mapped_rows_everywhere(lh, spark, duck, "imp.mapped") == sorted(expected, key=repr)


def mapped_rows_everywhere(lh, spark, duck, name, columns=("country", "id", "name")) -> list[tuple]:
    """A column-mapped table's rows through the readers that support Delta column mapping here (delta-rs's QueryBuilder,
    DuckDB's delta_scan; delta-rs's pyarrow reader refuses the reader feature) and every Iceberg reader; all agree."""
    from deltalake.query import QueryBuilder

    from lakehouse_assets.core.read import duckdb_readers

    table, cols = lh.load(name), list(columns)
    sql = ", ".join(f'"{c}"' for c in cols)
    found = {
        "pyiceberg": rows_of(table.scan().to_arrow().to_pylist(), cols),
        "spark_iceberg": rows_of(lh.read(spark, name).collect(), cols),
        "spark_delta": rows_of(lh.read(spark, name, delta_version=DeltaTable(table.location()).version()).collect(), cols),
        "delta_rs_sql": rows_of(pa.table(QueryBuilder().register("t", DeltaTable(table.location())).execute(f"SELECT {sql} FROM t").read_all()).to_pylist(), cols),
    }
    for fmt, scan in (("iceberg", duckdb_readers.iceberg_scan_sql(table.metadata_location)), ("delta", duckdb_readers.delta_scan_sql(table.location()))):
        res = duck.execute(f"SELECT {sql} FROM {scan}")
        found[f"duckdb_{fmt}"] = rows_of([dict(zip([d[0] for d in res.description], r)) for r in res.fetchall()], cols)
    reference = found["pyiceberg"]
    assert all(rows == reference for rows in found.values()), found
    deep = lh.verify(name, deep=True)
    assert deep["agree"], deep["differences"]
    return reference


# ---------------------------------------------------------------- Iceberg tables


def test_a_pyiceberg_table_in_the_catalog_is_managed_in_place(lh, spark, duck):
    lh.catalog.create_namespace("ext")
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    table = lh.catalog.create_table("ext.people", schema=data.schema)
    table.append(data.slice(0, 5))
    table.append(data.slice(5))
    metadata_before = table.refresh().metadata_location

    report = lh.import_table("ext.people")

    assert report["source_format"] == "iceberg" and report["registered"] is False and report["rows"] == 12
    assert lh.load("ext.people").metadata_location == metadata_before  # Iceberg untouched: only a Delta log was added
    assert DeltaTable(lh.load("ext.people").location()).version() == 1  # version 0 the schema, version 1 the live files
    still_agrees_after_writes(lh, spark, duck, "ext.people", rows)


def test_an_iceberg_table_with_equality_deletes_is_refused_then_imported_with_apply_deletes(lh, spark, duck):
    """Equality deletes (as Flink and Trino write them) delete every row whose columns match: refused by name, then
    applied (every row of id 3 and every row named n5 goes) and imported."""
    from . import foreign_writer as fw

    lh.catalog.create_namespace("eq")
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    table = lh.catalog.create_table("eq.people", schema=data.schema)
    table.append(data)
    fw.commit_deletes(table, [fw.equality_deletes(table, pa.table({"id": pa.array([3], pa.int64())})), fw.equality_deletes(table, pa.table({"name": ["n5"]}))])
    before = table.refresh().metadata_location
    with pytest.raises(ImportRefused, match=r"eq\.people cannot be imported: 2 equality-delete file\(s\) are live.*apply_deletes=True"):
        lh.import_table("eq.people")
    assert lh.load("eq.people").metadata_location == before

    report = lh.import_table("eq.people", apply_deletes=True, spark=spark)

    assert report["apply_deletes"]["delete_files"] == 2 and report["rows"] == 10
    assert fw.delete_files(lh.load("eq.people")) == []
    still_agrees_after_writes(lh, spark, duck, "eq.people", [r for r in rows if r[0] not in (3, 5)])


def test_an_iceberg_partition_transform_delta_cannot_express_is_refused_and_the_source_is_unchanged(lh, tmp_path):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import BinaryType, LongType, NestedField

    lh.catalog.create_namespace("ext")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "key", BinaryType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="key"))
    table = lh.catalog.create_table("ext.blobs", schema=schema, partition_spec=spec, location=str(tmp_path / "blobs"))
    table.append(pa.table({"id": pa.array([1], pa.int64()), "key": pa.array([b"k"], pa.binary())}))
    before = tree_digest(tmp_path / "blobs")

    with pytest.raises(ImportRefused, match=r"ext\.blobs cannot be imported: .*identity partition on binary column 'key'.*Nothing was changed"):
        lh.import_table("ext.blobs")

    assert tree_digest(tmp_path / "blobs") == before


@pytest.mark.java_iceberg
def test_a_java_iceberg_hadoop_table_with_position_deletes_is_refused_then_imported_with_apply_deletes(lh, spark, duck, tmp_path):
    name = f"{java_iceberg.CATALOG}.jimp.orders"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, name string, country string) USING iceberg PARTITIONED BY (country) "
        "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
    )
    rows = source_rows()
    spark.createDataFrame(rows, COLUMNS).writeTo(name).append()
    spark.sql(f"DELETE FROM {name} WHERE id IN (2, 3)")  # merge-on-read: position delete files
    warehouse = spark.conf.get(f"spark.sql.catalog.{java_iceberg.CATALOG}.warehouse")
    root = os.path.join(warehouse[len("file:"):] if warehouse.startswith("file:") else warehouse, "jimp", "orders")
    before = tree_digest(root)

    with pytest.raises(ImportRefused, match=r"jimp\.orders cannot be imported: .*position-delete file.*--apply-deletes.*Nothing was changed"):
        lh.import_table("jimp.orders", root)
    assert tree_digest(root) == before
    assert "jimp.orders" not in lh.table_names()

    report = lh.import_table("jimp.orders", root, apply_deletes=True, spark=spark)

    assert report["registered"] is True and report["apply_deletes"]["rows_deleted"] == 2
    kept = [r for r in rows if r[0] not in (2, 3)]
    still_agrees_after_writes(lh, spark, duck, "jimp.orders", kept)


@pytest.mark.java_iceberg
def test_java_iceberg_reads_imported_files_without_field_ids_or_partition_columns(lh, spark, tmp_path):
    """Hive-style Parquet files and delta-rs files carry no Iceberg field ids and leave the partition column out: Java
    Iceberg reads them through the name mapping and the identity partition values, like every other Iceberg reader."""
    rows = source_rows()
    data = pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]})
    pq.write_to_dataset(data, str(tmp_path / "hive"), partition_cols=["country"])
    write_deltalake(str(tmp_path / "delta"), data, partition_by=["country"])
    expected = sorted(((c, i, n) for i, n, c in rows), key=repr)
    for name, folder in (("imp.java_hive", "hive"), ("imp.java_delta", "delta")):
        lh.import_table(name, str(tmp_path / folder))
        java = java_iceberg.read_metadata(spark, lh.load(name).metadata_location).collect()
        assert rows_of(java, ["country", "id", "name"]) == expected, name


@pytest.mark.java_iceberg
def test_orphan_cleanup_after_an_import_keeps_the_pre_import_metadata_retained_snapshots_need(lh, spark, duck):
    """A Java Hadoop table keeps its manifests, manifest lists and `version-hint.text` under `metadata/`. Once our
    commits roll the imported metadata JSON out of the metadata log, orphan cleanup must still keep every manifest
    list and manifest a retained snapshot references: the pre-import snapshots stay readable."""
    name = f"{java_iceberg.CATALOG}.jimp.kept"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"CREATE TABLE {name} (id bigint, name string, country string) USING iceberg PARTITIONED BY (country)")
    rows = source_rows()
    spark.createDataFrame(rows[:6], COLUMNS).writeTo(name).append()
    spark.createDataFrame(rows[6:], COLUMNS).writeTo(name).append()
    warehouse = spark.conf.get(f"spark.sql.catalog.{java_iceberg.CATALOG}.warehouse")
    root = os.path.join(warehouse[len("file:"):] if warehouse.startswith("file:") else warehouse, "jimp", "kept")
    lh.import_table("jimp.kept", root)
    with lh.load("jimp.kept").transaction() as tx:  # roll the imported metadata JSON out of the log quickly
        tx.set_properties({"write.metadata.previous-versions-max": "1"})
    expected = [(c, i, n) for i, n, c in rows]
    for i in range(3):
        lh.write(spark.createDataFrame([(200 + i, f"w{i}", "FR")], COLUMNS), "jimp.kept", mode="append")
        expected.append(("FR", 200 + i, f"w{i}"))
    table = lh.load("jimp.kept")
    first = min(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    needed = {s.manifest_list for s in table.metadata.snapshots} | {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}
    assert any("/jimp/kept/metadata/" in u for u in needed)  # the pre-import metadata is referenced

    lh.maintain("jimp.kept", "full_maintenance", spark=spark, orphan_grace_hours=0, snapshot_retention_days=3650, min_snapshots_to_keep=100)

    table = lh.load("jimp.kept")
    assert first.snapshot_id in {s.snapshot_id for s in table.metadata.snapshots}
    missing = [u for u in needed if not os.path.exists(u[len("file:"):] if u.startswith("file:") else u)]
    assert missing == []
    assert sorted(table.scan(snapshot_id=first.snapshot_id).to_arrow().column("id").to_pylist()) == list(range(6))
    assert assert_all_readers_agree(lh, spark, duck, "jimp.kept", sorted(expected, key=repr), columns=["country", "id", "name"])
    deep = lh.verify("jimp.kept", deep=True)
    assert deep["agree"], deep["differences"]
    assert java_iceberg.read_metadata(spark, table.metadata_location).count() == len(expected)


# ---------------------------------------------------------------- the command line


def test_lakehouse_import_on_the_command_line_and_its_refusal(lh, tmp_path, warehouse):
    from .test_cli import run

    root = tmp_path / "cli_delta"
    write_deltalake(str(root), pa.table({"id": [1, 2], "country": ["DE", "US"]}), partition_by=["country"])

    out = run("import", "cli.imported", str(root), "--json", warehouse=warehouse)

    report = json.loads(out.stdout)
    assert report["source_format"] == "delta" and report["rows"] == 2 and report["files"] == 2
    assert "cli.imported" in lh.table_names() and lh.verify("cli.imported")["agree"]
    again = run("import", "cli.imported", str(root), warehouse=warehouse, check=False)
    assert again.returncode != 0 and "cli.imported already exists" in again.stderr

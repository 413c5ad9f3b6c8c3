"""Importing Delta tables with table features, one feature at a time.

A feature the import keeps (its promise holds through the lakehouse's later writes, delta-rs can commit to the table
and every reader reads it) is imported, read alike by every reader of both formats, verified, written, merged and
compacted. Any other is refused by name before any work, the source left byte for byte as it was. Tables come from
delta-rs where it writes the feature (change data feed, CHECK constraints); the others are logs written here from the
Delta protocol over Parquet files written by pyarrow, as Delta Lake on Spark or Databricks writes them.
"""

from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import ImportRefused, Lakehouse

from .conftest import assert_all_readers_agree
from .test_import import source_rows, still_agrees_after_writes, tree_digest

COLUMNS = (("id", "long"), ("name", "string"), ("country", "string"))


def _field(name: str, kind: str, metadata: dict | None = None) -> dict:
    return {"name": name, "type": kind, "nullable": True, "metadata": metadata or {}}


def hand_written_delta(
    root, *, protocol: dict, configuration: dict | None = None, field_metadata: dict | None = None, domains: tuple = (),
    add_fields: dict | None = None, partitioned: bool = True, change_type: bool = False, commit_info: dict | None = None,
) -> list[tuple]:
    """Version 0 of a Delta table as the engine that has the feature writes it: commitInfo, protocol, metaData, the
    feature's domainMetadata actions and one add per file (with `add_fields`, e.g. rowTracking's baseRowId), over
    Parquet files written by pyarrow. Partitioned by country (left out of the files, as Delta writers do) unless not
    `partitioned`. `change_type`: the files also carry their rows' `_change_type` and are listed as cdc files too, as
    the protocol allows for a file of inserted rows only. Returns the rows."""
    rows = source_rows()
    os.makedirs(root / "_delta_log")
    schema = {"type": "struct", "fields": [_field(n, k, (field_metadata or {}).get(n)) for n, k in COLUMNS]}
    info = {"timestamp": 1700000000000, "operation": "CREATE TABLE", "operationParameters": {}, "engineInfo": "Apache-Spark/3.5.0 Delta-Lake/3.2.0"}
    actions = [
        {"commitInfo": {**(commit_info or {}), **info}},
        {"protocol": protocol},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
                      "partitionColumns": ["country"] if partitioned else [], "configuration": configuration or {}, "createdTime": 1700000000000}},
        *({"domainMetadata": {"domain": d, "configuration": json.dumps(c), "removed": False}} for d, c in domains),
    ]  # fmt: skip
    groups = {c: [r for r in rows if r[2] == c] for c in ("DE", "US")} if partitioned else {None: rows}
    base_row_id = 0
    for country, part in groups.items():
        data = {"id": [r[0] for r in part], "name": [r[1] for r in part]}
        if not partitioned:
            data["country"] = [r[2] for r in part]
        if change_type:
            data["_change_type"] = ["insert"] * len(part)
        path = (f"country={country}/" if partitioned else "") + f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        os.makedirs((root / path).parent, exist_ok=True)
        pq.write_table(pa.table({c: pa.array(v, pa.int64() if c == "id" else pa.string()) for c, v in data.items()}), root / path)
        stats = {"numRecords": len(part), "minValues": {c: min(data[c]) for c in ("id", "name")}, "maxValues": {c: max(data[c]) for c in ("id", "name")},
                 "nullCount": {"id": 0, "name": 0}}  # fmt: skip
        add = {"path": path, "partitionValues": {"country": country} if partitioned else {}, "size": os.path.getsize(root / path),
               "modificationTime": 1700000000000, "dataChange": True, "stats": json.dumps(stats)}  # fmt: skip
        for key, value in (add_fields or {}).items():
            add[key] = base_row_id if key == "baseRowId" else value
        base_row_id += len(part)
        actions.append({"add": add})
        if change_type:
            actions.append({"cdc": {"path": path, "partitionValues": add["partitionValues"], "size": add["size"], "dataChange": False}})
    (root / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return rows


def v7(writer: list[str], reader: list[str] | None = None) -> dict:
    if reader is None:
        return {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": writer}
    return {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader, "writerFeatures": writer}


_IDENTITY = {"id": {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.highWaterMark": 12, "delta.identity.allowExplicitInsert": False}}

REFUSED = {
    "identityColumns": dict(protocol=v7(["identityColumns"]), field_metadata=_IDENTITY),
    "identityColumns (writer version 6)": dict(protocol={"minReaderVersion": 1, "minWriterVersion": 6}, field_metadata=_IDENTITY),
    "domainMetadata": dict(protocol=v7(["domainMetadata"]), domains=(("com.example.app", {"owner": "data-eng"}),)),
    "rowTracking": dict(
        protocol=v7(["domainMetadata", "rowTracking"]),
        configuration={"delta.enableRowTracking": "true", "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
                       "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-commit-version-col-1"},
        domains=(("delta.rowTracking", {"rowIdHighWaterMark": 11}),), add_fields={"baseRowId": 0, "defaultRowCommitVersion": 0},
    ),  # fmt: skip
    "clustering": dict(
        protocol=v7(["domainMetadata", "clustering"]), domains=(("delta.clustering", {"clusteringColumns": [["id"]]}),),
        add_fields={"clusteringProvider": "liquid"}, partitioned=False,
    ),
    "invariants": dict(protocol={"minReaderVersion": 1, "minWriterVersion": 2}, field_metadata={"id": {"delta.invariants": json.dumps({"expression": {"expression": "id >= 0"}})}}),
    "generatedColumns": dict(protocol={"minReaderVersion": 1, "minWriterVersion": 4}, field_metadata={"name": {"delta.generationExpression": "concat('n', id)"}}),
    "typeWidening": dict(protocol=v7(["typeWidening"], ["typeWidening"]), configuration={"delta.enableTypeWidening": "true"}),
    "v2Checkpoint": dict(protocol=v7(["v2Checkpoint"], ["v2Checkpoint"]), configuration={"delta.checkpointPolicy": "v2"}),
    "icebergCompatV2": dict(protocol=v7(["icebergCompatV2"]), configuration={"delta.enableIcebergCompatV2": "true"}),
    "vacuumProtocolCheck": dict(protocol=v7(["vacuumProtocolCheck"], ["vacuumProtocolCheck"])),
    "inCommitTimestamp": dict(protocol=v7(["inCommitTimestamp"]), configuration={"delta.enableInCommitTimestamps": "true"}, commit_info={"inCommitTimestamp": 1700000000000}),
    "catalogOwned": dict(protocol=v7(["catalogOwned"], ["catalogOwned"])),
    "someFutureFeature": dict(protocol=v7(["someFutureFeature"])),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_delta_table_feature_the_import_cannot_keep_is_refused_by_name_before_any_work(lh, tmp_path, case):
    root = tmp_path / "featured"
    hand_written_delta(root, **REFUSED[case])
    before = tree_digest(root)
    name = case.split(" ")[0]

    with pytest.raises(ImportRefused, match=rf"imp\.featured: the Delta table at .* feature '{name}' \(") as refused:
        lh.import_table("imp.featured", str(root))

    assert "Fix: " in str(refused.value) and "Nothing was imported" in str(refused.value)

    assert tree_digest(root) == before  # no _iceberg/, no Delta version: nothing was done
    assert "imp.featured" not in lh.table_names()


def test_portable_check_constraints_become_the_contract_and_the_others_are_refused(lh, spark, duck, tmp_path):
    """delta-rs writes CHECK constraints (`alter.add_constraint`). One in the portable rule subset becomes the imported
    table's contract rule (its rows checked first), which the lakehouse's writes then keep; one outside it is refused
    naming it, since Spark and delta-rs would not evaluate it alike."""
    from lakehouse_assets import Contract, ContractViolation

    root = str(tmp_path / "checked")
    rows = source_rows()
    write_deltalake(root, pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]}), partition_by=["country"])
    DeltaTable(root).alter.add_constraint({"half_positive": "id / 2 >= 0"})
    before = tree_digest(root)
    with pytest.raises(ImportRefused, match=r"CHECK constraint\(s\) outside the SQL subset .*'half_positive' \(id / 2 >= 0\), which uses the division operator.*drop_constraint"):
        lh.import_table("imp.checked", root)
    assert tree_digest(root) == before

    DeltaTable(root).alter.drop_constraint("half_positive")
    DeltaTable(root).alter.add_constraint({"id_not_negative": "id >= 0"})
    protocol = DeltaTable(root).protocol()
    assert protocol.min_writer_version == 3

    lh.import_table("imp.checked", root)
    assert Contract.from_json(lh.load("imp.checked").properties["lakehouse.contract"]) == Contract(rules={"id_not_negative": "id >= 0"})
    with pytest.raises(ContractViolation, match="id_not_negative: 1 row"):
        lh.write(spark.createDataFrame([(-1, "x", "NL")], "id bigint, name string, country string"), "imp.checked")

    still_agrees_after_writes(lh, spark, duck, "imp.checked", rows)
    assert DeltaTable(root).protocol() == protocol


def test_rows_that_break_an_adopted_constraint_refuse_the_import_naming_them(lh, tmp_path):
    """A writer that did not check the constraint (here: set as a bare table property) left rows that break it."""
    root = str(tmp_path / "unchecked")
    write_deltalake(root, pa.table({"id": [1, -2, -3], "name": ["a", "b", "c"]}))
    DeltaTable(root).alter.set_table_properties({"delta.constraints.id_not_negative": "id >= 0"}, raise_if_not_exists=False)
    with pytest.raises(ImportRefused, match=r"break its CHECK constraint\(s\).*id_not_negative \(id >= 0\): 2 row\(s\), e.g. .*-2.*Nothing was imported"):
        lh.import_table("imp.unchecked", root)
    assert "imp.unchecked" not in lh.table_names()


def test_features_a_table_declares_without_using_them_are_imported_and_the_protocol_is_kept(lh, spark, duck, tmp_path):
    """Table features (writer version 7) declared, none in use: imported, and the lakehouse's Delta versions (its
    statistics settings, a write, a merge, a compaction) leave the protocol as it was: no feature added."""
    root = tmp_path / "declared"
    protocol = v7(["appendOnly", "invariants", "checkConstraints", "generatedColumns", "changeDataFeed", "timestampNtz", "variantType"], ["timestampNtz", "variantType"])
    rows = hand_written_delta(root, protocol=protocol)

    lh.import_table("imp.declared", str(root))

    still_agrees_after_writes(lh, spark, duck, "imp.declared", rows)
    kept = DeltaTable(str(root)).protocol()
    assert (kept.min_reader_version, kept.min_writer_version) == (3, 7)
    assert sorted(kept.writer_features) == sorted(protocol["writerFeatures"]) and sorted(kept.reader_features) == sorted(protocol["readerFeatures"])


def _change_feed_table(root: str) -> list[tuple]:
    """delta-rs with the change data feed on: a DELETE and a MERGE write `_change_data/` files; an append and a compaction
    then rewrite the live files (delta-rs's DELETE and MERGE write view-typed strings, which pyiceberg cannot read beside
    plain ones). Returns the live rows."""
    rows = source_rows()
    write_deltalake(root, pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]}),
                    partition_by=["country"], configuration={"delta.enableChangeDataFeed": "true"})  # fmt: skip
    delta = DeltaTable(root)
    delta.delete("id = 2")
    source = pa.table({"id": [1, 40], "name": ["changed", "n40"], "country": ["US", "DE"]})
    delta.merge(source, "s.id = t.id", source_alias="s", target_alias="t").when_matched_update_all().when_not_matched_insert_all().execute()
    write_deltalake(root, pa.table({"id": [41, 42], "name": ["n41", "n42"], "country": ["DE", "US"]}), mode="append")
    DeltaTable(root).optimize.compact()
    live = [r for r in rows if r[0] not in (1, 2)] + [(1, "changed", "US"), (40, "n40", "DE"), (41, "n41", "DE"), (42, "n42", "US")]
    return sorted(live)


def test_a_change_feed_table_written_by_delta_rs_is_imported_without_its_change_data_files(lh, spark, duck, tmp_path):
    root = str(tmp_path / "feed")
    rows = _change_feed_table(root)
    change_files = [os.path.join(d, f) for d, _, names in os.walk(os.path.join(root, "_change_data")) for f in names]
    assert change_files and DeltaTable(root).protocol().min_writer_version == 4

    report = lh.import_table("imp.feed", root)

    imported = {t.file.file_path for t in lh.load("imp.feed").scan().plan_files()}
    assert not [p for p in imported if "/_change_data/" in p]  # change data is not live data
    assert all(os.path.exists(p) for p in change_files)
    still_agrees_after_writes(lh, spark, duck, "imp.feed", rows)
    assert DeltaTable(root).metadata().configuration["delta.enableChangeDataFeed"] == "true"
    # The feed's promise: the lakehouse's merge that replaced a row wrote change data with it.
    later = [os.path.join(root, "_delta_log", f"{v:020d}.json") for v in range(report["delta_version"] + 1, DeltaTable(root).version() + 1)]
    assert any('"cdc"' in open(p).read() for p in later)


def test_data_files_that_also_carry_their_change_type_are_imported_without_that_column(lh, spark, duck, tmp_path):
    """The protocol lets a file of inserted rows be both a data file (`add`) and a change data file (`cdc`), carrying
    `_change_type`; Delta readers drop that column, and so does every Iceberg reader (it is not in the table)."""
    root = tmp_path / "feed_in_data"
    rows = hand_written_delta(root, protocol={"minReaderVersion": 1, "minWriterVersion": 4}, configuration={"delta.enableChangeDataFeed": "true"}, change_type=True)
    assert "_change_type" in pq.read_schema(next(p for p in root.rglob("*.parquet"))).names

    lh.import_table("imp.feed_in_data", str(root))

    assert [f.name for f in lh.load("imp.feed_in_data").schema().fields] == ["id", "name", "country"]
    still_agrees_after_writes(lh, spark, duck, "imp.feed_in_data", rows)


def test_an_import_that_purges_deletion_vectors_keeps_the_protocol(lh, spark, duck, tmp_path):
    """delta-rs's SET TBLPROPERTIES adds `variantType`, `appendOnly` and `invariants` to any table with table features:
    the lakehouse's own Delta versions (its statistics settings among them) leave the protocol as the source had it."""
    from .test_import import inline_deletion_vector

    root = tmp_path / "dv"
    rows = source_rows()
    write_deltalake(str(root), pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]}), partition_by=["country"])
    adds = [a["add"] for a in map(json.loads, (root / "_delta_log" / f"{0:020d}.json").read_text().splitlines()) if "add" in a]
    (de,) = [a for a in adds if a["partitionValues"] == {"country": "DE"}]
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}
    commit = [
        {"protocol": protocol},
        {"remove": {"path": de["path"], "partitionValues": de["partitionValues"], "deletionTimestamp": 1, "dataChange": True}},
        {"add": {**de, "dataChange": True, "deletionVector": inline_deletion_vector([1, 2])}},  # deletes ids 2 and 4
        {"commitInfo": {"operation": "DELETE", "engineInfo": "Apache-Spark/3.5.0 Delta-Lake/3.2.0"}},
    ]
    (root / "_delta_log" / f"{1:020d}.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")

    lh.import_table("imp.dv", str(root), apply_deletes=True)

    still_agrees_after_writes(lh, spark, duck, "imp.dv", [r for r in rows if r[0] not in (2, 4)])
    kept = DeltaTable(str(root)).protocol()
    assert (kept.reader_features, kept.writer_features) == (["deletionVectors"], ["deletionVectors"])


def test_a_delta_table_partitioned_by_a_double_is_refused_naming_the_column(lh, tmp_path):
    root = str(tmp_path / "by_double")
    values = [-0.0, 0.0, float("nan"), 1e-7, 123456789.123]
    write_deltalake(root, pa.table({"id": list(range(len(values))), "x": pa.array(values, pa.float64())}), partition_by=["x"])
    before = tree_digest(root)

    with pytest.raises(ImportRefused, match=r"imp\.by_double: .* partitioned by floating-point column\(s\) \['x'\].*pyiceberg 0\.12.*Nothing was imported"):
        lh.import_table("imp.by_double", root)

    assert tree_digest(root) == before
    assert "imp.by_double" not in lh.table_names()


def test_a_warehouse_whose_path_holds_a_plus_sign_writes_reads_and_imports(spark, duck, tmp_path, monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    lh = Lakehouse(warehouse=str(tmp_path / "a+b" / "wh"))
    assert os.path.isfile(tmp_path / "a+b" / "wh" / "catalog.db")  # the folder as named, not `a%2Bb`
    lh.write(spark.createDataFrame([(1, "a", "DE")], "id long, name string, country string"), "web.plus")
    assert_all_readers_agree(lh, spark, duck, "web.plus", [("DE", 1, "a")])

    root = str(tmp_path / "a+b" / "landing" / "events")
    rows = source_rows()
    write_deltalake(root, pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "country": [r[2] for r in rows]}), partition_by=["country"])
    lh.import_table("web.events", root)
    still_agrees_after_writes(lh, spark, duck, "web.events", rows)

"""Other engines write the Delta side (delta-rs here): every foreign Delta version is detected and named, and
under the default policy `refuse` no project write, mirror step or repair builds on top of it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import ForeignDeltaCommits, LocationInUse, MergeOptions
from lakehouse_assets.core.formats.delta import foreign_versions as foreign_delta

from . import java_iceberg
from .conftest import assert_all_readers_agree, read_everywhere


def start(lh, spark, name, n=10, partitioned=True):
    """A project table: ids 0..n-1, country US for odd ids, DE for even ids."""
    rows = [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(n)]
    lh.write(spark.createDataFrame(rows, "id long, name string, country string").coalesce(1), name, partition_by=["country"] if partitioned else None)
    return sorted((c, i, nm) for i, nm, c in rows)


def foreign_append(location, ids):
    """delta-rs appends rows to the table's Delta log, as another team's script would."""
    delta = DeltaTable(location)
    schema = delta.to_pyarrow_table().schema
    data = pa.table({"id": list(ids), "name": [f"f{i}" for i in ids], "country": ["FR"] * len(ids)}).select(schema.names).cast(schema)
    write_deltalake(location, data, mode="append", partition_by=delta.metadata().partition_columns or None)


def test_a_foreign_append_is_named_by_verify_refused_by_the_next_write_and_explained_by_repair(lh, spark, duck):
    expected = start(lh, spark, "fd.append")
    location = lh.load("fd.append").location()
    mirrored = DeltaTable(location).version()
    assert foreign_delta.foreign_versions(DeltaTable(location)) == []
    foreign_append(location, range(100, 110))
    foreign_append(location, range(200, 203))

    found = foreign_delta.foreign_versions(DeltaTable(location))
    assert [v.version for v in found] == [mirrored + 1, mirrored + 2]
    assert all(v.operation == "WRITE" and v.engine.startswith("delta-rs") and v.files_added == 1 and v.files_removed == 0 for v in found)

    report = lh.verify("fd.append")
    assert not report["agree"]
    assert [v["version"] for v in report["delta_foreign_versions"]] == [mirrored + 1, mirrored + 2]
    explanation = next(d for d in report["differences"] if "did not write" in d)
    assert f"version {mirrored + 1} (WRITE by delta-rs" in explanation and "--revert-delta" in explanation and "--adopt-delta" in explanation

    snapshot_before = lh.load("fd.append").current_snapshot().snapshot_id
    with pytest.raises(ForeignDeltaCommits, match=rf"fd\.append: the Delta log holds 2 version\(s\).*version {mirrored + 1}.*Nothing was written") as e:
        lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), "fd.append", mode="append")
    assert [v.version for v in e.value.versions] == [mirrored + 1, mirrored + 2]
    # Nothing changed on either side, and no data file of the refused write was left behind.
    assert lh.load("fd.append").current_snapshot().snapshot_id == snapshot_before
    assert DeltaTable(location).version() == mirrored + 2

    repaired = lh.repair("fd.append")
    assert repaired["repaired"] is False and "did not write" in repaired["reason"]
    assert DeltaTable(location).version() == mirrored + 2

    # Time travel to the last mirrored version still reads the project's rows in every reader.
    # Time travel to the last mirrored Delta version (and Iceberg's current snapshot) reads the project's rows in every reader.
    for reader, rows in read_everywhere(lh, spark, duck, "fd.append", delta_version=mirrored).items():
        assert rows == sorted(expected, key=repr), reader
    before = DeltaTable(location, version=mirrored).to_pyarrow_table()
    assert sorted(zip(before["country"].to_pylist(), before["id"].to_pylist(), before["name"].to_pylist())) == expected
    assert DeltaTable(location).to_pyarrow_table().num_rows == 23


def test_the_mirrors_own_versions_are_never_foreign_across_schema_changes_and_checkpoints(lh, spark, duck):
    expected = start(lh, spark, "fd.own")
    for i in range(12):  # a checkpoint (maintenance's: no write writes one) amid the mirror's versions
        lh.write(spark.createDataFrame([(1000 + i, f"w{i}", "DE")], "id long, name string, country string"), "fd.own", mode="append")
        expected.append(("DE", 1000 + i, f"w{i}"))
        if i == 9:
            assert lh.maintain("fd.own", "delta_checkpoint")["checkpoint_written"]
    lh.write(spark.createDataFrame([(2000, "s", "US", 7)], "id long, name string, country string, extra int"), "fd.own", mode="append")
    assert foreign_delta.foreign_versions(DeltaTable(lh.load("fd.own").location())) == []
    report = lh.verify("fd.own")
    assert report["agree"], report["differences"]
    assert "delta_foreign_versions" not in report


def test_an_unknown_policy_is_refused_with_the_accepted_values():
    with pytest.raises(Exception, match=r"lakehouse.delta.foreign-commits='ignore' is not a policy: expected one of refuse, adopt"):
        foreign_delta.policy_of({"lakehouse.delta.foreign-commits": "ignore"})


def set_policy(lh, name, policy):
    with lh.load(name).transaction() as tx:
        tx.set_properties({"lakehouse.delta.foreign-commits": policy})


def rows_now(lh, spark, duck, name):
    """Every reader of both formats agrees (and verify does); returns the rows."""
    results = read_everywhere(lh, spark, duck, name)
    reference = next(iter(results.values()))
    for reader, rows in results.items():
        assert rows == reference, f"{reader} differs"
    report = lh.verify(name)
    assert report["agree"], report["differences"]
    return reference


def test_policy_adopt_brings_a_foreign_append_into_iceberg_and_the_write_proceeds(lh, spark, duck):
    expected = start(lh, spark, "fd.adopt", partitioned=False)
    set_policy(lh, "fd.adopt", "adopt")
    location = lh.load("fd.adopt").location()
    mirrored = DeltaTable(location).version()
    first_snapshot = lh.load("fd.adopt").current_snapshot().snapshot_id
    foreign_append(location, range(100, 110))
    result = lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), "fd.adopt", mode="append")
    assert not result.delta_lagging
    expected += [("FR", i, f"f{i}") for i in range(100, 110)] + [("US", 50, "x")]
    assert rows_now(lh, spark, duck, "fd.adopt") == sorted(expected, key=repr)
    # Time travel to before the foreign commit still reads the project's rows in both formats.
    for reader, rows in read_everywhere(lh, spark, duck, "fd.adopt", snapshot_id=first_snapshot, delta_version=mirrored).items():
        assert len(rows) == 10, reader


def test_repair_adopt_delta_takes_two_foreign_appends_and_an_added_column(lh, spark, duck):
    start(lh, spark, "fd.rewrite", partitioned=False)
    location = lh.load("fd.rewrite").location()
    foreign_append(location, range(100, 104))
    foreign_append(location, range(104, 106))
    extra = pa.table({"id": [300], "name": ["m"], "country": ["IT"], "score": [1.5]})
    write_deltalake(location, extra, mode="append", schema_mode="merge")
    assert len(foreign_delta.foreign_versions(DeltaTable(location))) == 3
    with pytest.raises(ForeignDeltaCommits):
        lh.write(spark.createDataFrame([(51, "y", "DE")], "id long, name string, country string"), "fd.rewrite", mode="append")
    report = lh.repair("fd.rewrite", adopt_delta=True)
    assert report["repaired"] and len(report["adopt_delta"]["adopted_versions"]) == 3 and report["adopt_delta"]["columns_added"] == ["score"]
    rows = rows_now(lh, spark, duck, "fd.rewrite")
    ids = {r[1] for r in rows}
    assert {100, 101, 102, 103, 104, 105, 300} <= ids and len(rows) == 17
    lh.write(spark.createDataFrame([(51, "y", "DE", 2.0)], "id long, name string, country string, score double"), "fd.rewrite", mode="append")
    assert len(rows_now(lh, spark, duck, "fd.rewrite")) == 18


def test_repair_revert_delta_undoes_a_foreign_overwrite_and_the_formats_agree(lh, spark, duck):
    expected = start(lh, spark, "fd.revert")
    location = lh.load("fd.revert").location()
    schema = DeltaTable(location).to_pyarrow_table().schema
    write_deltalake(location, pa.table({"id": [1], "name": ["o"], "country": ["US"]}).select(schema.names).cast(schema), mode="overwrite", partition_by=["country"])
    report = lh.repair("fd.revert", revert_delta=True)
    assert [v["version"] for v in report["revert_delta"]["reverted_versions"]] == [report["delta_version_before"]]
    assert foreign_delta.foreign_versions(DeltaTable(location)) == []
    assert rows_now(lh, spark, duck, "fd.revert") == sorted(expected, key=repr)
    lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), "fd.revert", mode="append")
    assert len(rows_now(lh, spark, duck, "fd.revert")) == 11


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_a_foreign_commit_racing_a_write_is_never_mirrored_over(lh, spark, duck, monkeypatch, partitioned):
    """A foreign version landing between our Iceberg commit and its Delta mirror step: the mirror refuses to build on
    it (the write stands in Iceberg, Delta lags with the explanation), the policy `adopt` refuses too (Delta lags),
    and revert undoes it and mirrors what Delta lagged behind; time travel to before it still works."""
    original = start(lh, spark, "fd.race", partitioned=partitioned)
    set_policy(lh, "fd.race", "adopt")
    location = lh.load("fd.race").location()
    mirrored, snapshot = DeltaTable(location).version(), lh.load("fd.race").current_snapshot().snapshot_id
    from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer

    commit_files = iceberg_committer.commit_files

    def racing(*args, **kw):
        snapshot = commit_files(*args, **kw)
        foreign_append(location, [900])  # lands between our Iceberg commit and its Delta mirror
        return snapshot

    monkeypatch.setattr(iceberg_committer, "commit_files", racing)
    result = lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), "fd.race", mode="append")
    monkeypatch.undo()
    assert result.delta_lagging and "did not write" in result.delta_error
    found = foreign_delta.foreign_versions(DeltaTable(location))
    assert len(found) == 1
    with pytest.raises(ForeignDeltaCommits, match=r"cannot be adopted into Iceberg: Delta also lags Iceberg.*Nothing was changed.*--revert-delta"):
        lh.write(spark.createDataFrame([(51, "y", "US")], "id long, name string, country string"), "fd.race", mode="append")
    with pytest.raises(ForeignDeltaCommits, match="Delta also lags Iceberg"):
        lh.repair("fd.race", adopt_delta=True)
    report = lh.repair("fd.race", revert_delta=True)
    assert report["repaired"] and len(report["revert_delta"]["reverted_versions"]) == 1
    assert rows_now(lh, spark, duck, "fd.race") == sorted([*original, ("US", 50, "x")], key=repr)
    assert_time_travel_before(lh, spark, duck, "fd.race", snapshot, mirrored, original)


def test_adopting_a_foreign_overwrite_replaces_the_files_in_iceberg(lh, spark, duck):
    """delta-rs replaces every file: adoption takes the same removes and adds into Iceberg, every reader of both formats
    agrees, the write after it proceeds, and time travel to before the foreign version still works."""
    name = "fd.overwrite"
    start(lh, spark, name, partitioned=False)
    location = lh.load(name).location()
    mirrored, first_snapshot = DeltaTable(location).version(), lh.load(name).current_snapshot().snapshot_id
    schema = DeltaTable(location).to_pyarrow_table().schema
    write_deltalake(location, pa.table({"id": [7, 8], "name": ["o7", "o8"], "country": ["NL", "NL"]}).select(schema.names).cast(schema), mode="overwrite")
    report = lh.repair(name, adopt_delta=True)
    assert report["repaired"] and report["adopt_delta"]["files_removed"] >= 1 and report["adopt_delta"]["files_added"] == 1
    want = [("NL", 7, "o7"), ("NL", 8, "o8")]
    assert rows_now(lh, spark, duck, name) == sorted(want, key=repr)
    lh.write(spark.createDataFrame([(60, "w", "US")], "id long, name string, country string"), name, mode="append")
    assert rows_now(lh, spark, duck, name) == sorted([*want, ("US", 60, "w")], key=repr)
    for reader, rows in read_everywhere(lh, spark, duck, name, snapshot_id=first_snapshot, delta_version=mirrored).items():
        assert len(rows) == 10, reader


# ---------------------------------------------------------------- every kind of foreign change, both ways out

# Each foreign change as delta-rs makes it, and the rows (country, id, name[, score]) it leaves.
# delete and update rewrite files through DataFusion (their Parquet files declare Arrow view types);
# on a partitioned table every file delta-rs writes lacks the partition column (its value is in the log).
CHANGES = ["append", "overwrite", "delete", "update", "add_column", "two_in_a_row"]


def foreign_change(location, change, rows, partitioned):
    """Make `change` on the Delta side with delta-rs; return the rows Delta then holds."""
    parts = ["country"] if partitioned else None
    schema = DeltaTable(location).to_pyarrow_table().schema
    if change == "append":
        foreign_append(location, [100, 101, 102])
        return rows + [("FR", i, f"f{i}") for i in (100, 101, 102)]
    if change == "overwrite":
        data = pa.table({"id": [7, 8], "name": ["o7", "o8"], "country": ["NL", "NL"]}).select(schema.names).cast(schema)
        write_deltalake(location, data, mode="overwrite", partition_by=parts)
        return [("NL", 7, "o7"), ("NL", 8, "o8")]
    if change == "delete":
        DeltaTable(location).delete("id < 3")
        return [r for r in rows if r[1] >= 3]
    if change == "update":
        DeltaTable(location).update(updates={"name": "'changed'"}, predicate="id >= 8")
        return [(c, i, "changed" if i >= 8 else n) for c, i, n in rows]
    if change == "add_column":
        extra = pa.table({"id": [300], "name": ["m"], "country": ["IT"], "score": [1.5]})
        write_deltalake(location, extra, mode="append", schema_mode="merge", partition_by=parts)
        return [(*r, None) for r in rows] + [("IT", 300, "m", 1.5)]
    if change == "two_in_a_row":
        foreign_append(location, [100, 101])
        DeltaTable(location).delete("id = 0")
        return [r for r in rows if r[1] != 0] + [("FR", 100, "f100"), ("FR", 101, "f101")]
    raise AssertionError(change)


def our_row(change):
    """The project's own write after the foreign change (with the column the foreign change added, if any)."""
    return ((50, "x", "US", 2.5), "id long, name string, country string, score double") if change == "add_column" else ((50, "x", "US"), "id long, name string, country string")


def assert_time_travel_before(lh, spark, duck, name, snapshot_id, delta_version, expected):
    """The snapshot and Delta version before the foreign change read the project's rows in every reader."""
    columns = ["country", "id", "name"]  # the columns at that point (a foreign change may have added one since)
    for reader, rows in read_everywhere(lh, spark, duck, name, snapshot_id=snapshot_id, delta_version=delta_version, columns=columns).items():
        assert rows == sorted(expected, key=repr), reader


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
@pytest.mark.parametrize("change", CHANGES)
def test_policy_adopt_takes_each_foreign_change_and_the_write_proceeds(lh, spark, duck, change, partitioned):
    """Under `adopt` the next write brings the foreign versions into Iceberg (files rewritten only where pyiceberg
    could not read them beside others), then writes; every reader of both formats agrees, verify agrees, and time
    travel to before the foreign change still reads the project's rows."""
    name = f"fd.adopt_{change}_{int(partitioned)}"
    original = start(lh, spark, name, partitioned=partitioned)
    set_policy(lh, name, "adopt")
    location = lh.load(name).location()
    mirrored, first_snapshot = DeltaTable(location).version(), lh.load(name).current_snapshot().snapshot_id
    expected = foreign_change(location, change, original, partitioned)
    foreign = foreign_delta.foreign_versions(DeltaTable(location))
    assert len(foreign) == (2 if change == "two_in_a_row" else 1) and all(v.engine.startswith("delta-rs") for v in foreign)

    row, ddl = our_row(change)
    result = lh.write(spark.createDataFrame([row], ddl), name, mode="append")
    assert not result.delta_lagging, result.delta_error
    adopted = [s for s in lh.load(name).snapshots() if (s.summary or {}).get("lakehouse.operation") == "adopt-delta"]
    assert len(adopted) == 1 and adopted[0].summary["lakehouse.delta.adopted-versions"] == ",".join(str(v.version) for v in foreign)
    want = expected + [(row[2], row[0], row[1], *row[3:])]
    assert rows_now(lh, spark, duck, name) == sorted(want, key=repr)
    assert foreign_delta.foreign_versions(DeltaTable(location)) == []
    assert_time_travel_before(lh, spark, duck, name, first_snapshot, mirrored, original)


@pytest.mark.parametrize("change", CHANGES)
def test_policy_refuse_then_revert_undoes_each_foreign_change(lh, spark, duck, change):
    """Under `refuse` (the default) the next write fails before writing, naming the foreign versions and both ways
    out; revert undoes them with one Delta version, every reader agrees on the project's rows, the write proceeds,
    and time travel to before the foreign change still works."""
    name = f"fd.revert_{change}"
    original = start(lh, spark, name, partitioned=True)
    location = lh.load(name).location()
    mirrored, snapshot = DeltaTable(location).version(), lh.load(name).current_snapshot().snapshot_id
    foreign_change(location, change, original, True)
    foreign = [v.version for v in foreign_delta.foreign_versions(DeltaTable(location))]
    row, _ = our_row("append")
    with pytest.raises(ForeignDeltaCommits, match=rf"version {foreign[0]} \(.* by delta-rs.*--revert-delta.*--adopt-delta.*Nothing was written"):
        lh.write(spark.createDataFrame([row], "id long, name string, country string"), name, mode="append")
    assert lh.load(name).current_snapshot().snapshot_id == snapshot
    report = lh.repair(name, revert_delta=True)
    assert report["repaired"] and [v["version"] for v in report["revert_delta"]["reverted_versions"]] == foreign
    current = rows_now(lh, spark, duck, name)
    if change == "add_column":  # the column stays in Delta's schema (restore keeps metadata); its values left with the rows
        current = [r[:3] for r in current]
    assert current == sorted(original, key=repr)
    lh.write(spark.createDataFrame([row], "id long, name string, country string"), name, mode="append")
    assert len(rows_now(lh, spark, duck, name)) == len(original) + 1
    assert_time_travel_before(lh, spark, duck, name, snapshot, mirrored, original)


@pytest.mark.smoke
def test_adopting_a_partitioned_foreign_delete_rewrites_only_the_files_pyiceberg_cannot_read(lh, spark, duck):
    """delta-rs's DELETE rewrites the files holding matches (view types declared, partition column left out): adopt
    rewrites exactly those, with their partition values, and swaps them in on the Delta side too (rows unchanged);
    a merge and a compaction over the adopted files keep every partition value."""
    name = "fd.partitioned_delete"
    original = start(lh, spark, name, partitioned=True)
    location = lh.load(name).location()
    foreign_append(location, [100, 101])  # a plain foreign file without its partition column: adopted as it is
    DeltaTable(location).delete("id = 1")  # rewrites the US file only
    report = lh.repair(name, adopt_delta=True)["adopt_delta"]
    assert report["files_added"] == 2 and report["files_removed"] == 1 and report["files_rewritten"] == 1
    expected = [r for r in original if r[1] != 1] + [("FR", 100, "f100"), ("FR", 101, "f101")]
    assert rows_now(lh, spark, duck, name) == sorted(expected, key=repr)
    assert lh.load(name).properties["lakehouse.files-without-partition-columns"] == "true"
    # The adopted FR file holds no country column; readers take FR from its partition.
    fr = [t.file for t in lh.load(name).scan(row_filter="country == 'FR'").plan_files()]
    assert len(fr) == 1 and "country" not in pa.parquet.read_schema(fr[0].file_path[len("file://"):]).names
    assert sorted(r.id for r in lh.read(spark, name, row_filter="country = 'FR'").collect()) == [100, 101]  # pruned and filtered
    deep = lh.verify(name, deep=True)  # content compared through DuckDB's readers of both formats
    assert deep["agree"], deep["differences"]
    if java_iceberg.available():  # the reference implementation fills the column from the partition too
        java = java_iceberg.read_metadata(spark, lh.load(name).metadata_location)
        assert sorted((r.country, r.id, r.name) for r in java.collect()) == sorted(expected)

    # A merge rewrites the adopted FR file (its rows read with their partition value) and one of ours.
    lh.write(spark.createDataFrame([(100, "merged", "FR"), (2, "merged", "DE")], "id long, name string, country string"), name, mode="merge", merge=MergeOptions(keys=["id"]))
    expected = [r for r in expected if r[1] not in (100, 2)] + [("FR", 100, "merged"), ("DE", 2, "merged")]
    assert rows_now(lh, spark, duck, name) == sorted(expected, key=repr)
    # A compaction bin-packs another adopted FR file (no country column inside) with the merged one.
    foreign_append(location, [200])
    lh.repair(name, adopt_delta=True)
    expected.append(("FR", 200, "f200"))
    report = lh.maintain(name, "compaction", compaction_min_input_files=1)
    assert report["files_rewritten"] >= 2, report
    assert rows_now(lh, spark, duck, name) == sorted(expected, key=repr)


def test_a_foreign_commit_landing_while_an_adoption_records_itself_is_reported_and_revert_recovers(lh, spark, duck, monkeypatch):
    """The Delta version recording an adoption is committed without retries: a foreign commit landing just before it
    fails the adoption, saying what happened (Iceberg holds the adopted snapshot, Delta lags); revert undoes the
    foreign versions and mirrors the adopted snapshot on top, and both formats agree on the adopted rows."""
    from lakehouse_assets.core.formats.delta.committer import DeltaMirror

    name = "fd.record_race"
    original = start(lh, spark, name, partitioned=True)
    location = lh.load(name).location()
    foreign_append(location, [100])
    record = DeltaMirror.record_adoption

    def raced(self, *args, **kw):
        foreign_append(location, [200])  # lands after the adoption read the log
        return record(self, *args, **kw)

    monkeypatch.setattr(DeltaMirror, "record_adoption", raced)
    with pytest.raises(Exception, match=r"were adopted as Iceberg snapshot \d+, but recording that in Delta failed.*--revert-delta"):
        lh.repair(name, adopt_delta=True)
    monkeypatch.undo()
    assert not lh.verify(name)["agree"]
    report = lh.repair(name, revert_delta=True)
    assert report["repaired"] and len(report["revert_delta"]["reverted_versions"]) == 2
    assert rows_now(lh, spark, duck, name) == sorted([*original, ("FR", 100, "f100")], key=repr)


def write_deletion_vector_version(location: str, delete_ids: set[int]):
    """A foreign DELETE as Delta Lake on Spark or Databricks writes it: the file stays, a deletion vector marks rows.

    No engine installed here writes deletion vectors (delta-rs 1.6.6 enables the table feature but its DELETE rewrites
    files; the Delta Spark jars are out of reach), so this writes what the Delta protocol specifies: a deletion vector
    file (version byte, then a big-endian size, the 64-bit RoaringBitmapArray in its portable form with one 32-bit
    bitmap serialized by pyroaring, and a big-endian CRC-32) and a commit whose `add` re-adds the file with its
    `deletionVector` descriptor. delta-rs and DuckDB's delta-kernel reader both honour it (asserted by the test)."""
    import json
    import os
    import struct
    import time
    import uuid
    import zlib

    from deltalake import TableFeatures
    from pyroaring import BitMap

    root = location[len("file://"):]
    DeltaTable(location).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    delta = DeltaTable(location)
    (add,) = [a for a in pa.table(delta.get_add_actions(flatten=False)).to_pylist()]
    ids = pa.parquet.read_table(os.path.join(root, add["path"]), columns=["id"]).column("id").to_pylist()
    positions = [pos for pos, i in enumerate(ids) if i in delete_ids]
    bitmap = struct.pack("<i", 1681511377) + struct.pack("<q", 1) + struct.pack("<i", 0) + BitMap(positions).serialize()
    dv_file = os.path.join(root, f"deletion_vector_{uuid.uuid4()}.bin")
    with open(dv_file, "wb") as f:
        f.write(b"\x01" + struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap)))
    now = int(time.time() * 1000)
    descriptor = {"storageType": "p", "pathOrInlineDv": "file://" + dv_file, "offset": 1, "sizeInBytes": len(bitmap), "cardinality": len(positions)}
    file = {"path": add["path"], "partitionValues": {}, "size": add["size_bytes"]}
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "engineInfo": "Apache-Spark/3.5.3 Delta-Lake/3.3.0", "operationMetrics": {"numRemovedFiles": "0", "numAddedFiles": "0", "numDeletionVectorsAdded": "1"}}},
        {"remove": {**file, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True}},
        {"add": {**file, "modificationTime": add["modification_time"], "dataChange": True, "stats": json.dumps({"numRecords": len(ids)}), "deletionVector": descriptor}},
    ]
    with open(os.path.join(root, "_delta_log", f"{delta.version() + 1:020d}.json"), "x") as f:
        f.write("".join(json.dumps(a) + "\n" for a in actions))
    return delta.version() + 1


def delta_readers_ids(duck, location):
    """ids as delta-rs (QueryBuilder; its pyarrow reader refuses the deletion-vectors feature) and DuckDB read the
    latest Delta version; both must agree."""
    from deltalake import QueryBuilder

    from lakehouse_assets.core.read import duckdb_readers

    via_delta_rs = sorted(r["id"] for r in pa.table(QueryBuilder().register("t", DeltaTable(location)).execute("SELECT id FROM t").read_all()).to_pylist())
    via_duckdb = sorted(r[0] for r in duck.execute(f"SELECT id FROM {duckdb_readers.delta_scan_sql(location)}").fetchall())
    assert via_delta_rs == via_duckdb
    return via_delta_rs


def test_the_deletion_vectors_feature_without_vectors_is_adopted(lh, spark, duck):
    """Databricks enables deletion vectors on new tables; a foreign version that only enables the feature, and a
    foreign append after it, carry no vector: both are adopted, and the write proceeds."""
    from deltalake import TableFeatures

    name = "fd.dv_feature"
    start(lh, spark, name, partitioned=True)
    set_policy(lh, name, "adopt")
    location = lh.load(name).location()
    DeltaTable(location).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    write_deltalake(location, pa.table({"id": [100], "name": ["f"], "country": ["FR"]}), mode="append", partition_by=["country"])
    assert [v.operation for v in foreign_delta.foreign_versions(DeltaTable(location))] == ["ADD FEATURE", "WRITE"]
    lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), name, mode="append")
    want = sorted([*range(10), 50, 100])
    assert delta_readers_ids(duck, location) == want and lh.verify(name)["agree"]
    assert sorted(r["id"] for r in lh.load(name).scan().to_arrow().to_pylist()) == want
    assert sorted((r.country, r.id) for r in lh.read(spark, name).collect() if r.id >= 50) == [("FR", 100), ("US", 50)]


def test_a_foreign_delete_with_deletion_vectors_is_refused_loudly_and_reverted(lh, spark, duck):
    """A delete that marks rows with a deletion vector: even under `adopt` the write fails naming the versions, why
    (delta-rs cannot remove the marked file in the same commit) and the ways out, with nothing changed; the project's
    Delta-version reader applies its vector; revert (delta-rs restore) undoes it, and the write proceeds."""
    name = "fd.dv"
    start(lh, spark, name, partitioned=False)
    set_policy(lh, name, "adopt")
    location = lh.load(name).location()
    snapshot = lh.load(name).current_snapshot().snapshot_id
    version = write_deletion_vector_version(location, {1, 4})
    delta = DeltaTable(location)

    def delta_ids():
        return delta_readers_ids(duck, location)

    assert delta_ids() == [0, 2, 3, 5, 6, 7, 8, 9]  # both Delta readers honour the deletion vector
    assert [v.operation for v in foreign_delta.foreign_versions(delta)] == ["ADD FEATURE", "DELETE"]
    with pytest.raises(ForeignDeltaCommits, match=rf"\[{version - 1}, {version}\] cannot be adopted.*1 file\(s\) carry deletion vectors.*APPLY \(PURGE\).*Nothing was changed.*--revert-delta"):
        lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), name, mode="append")
    assert lh.load(name).current_snapshot().snapshot_id == snapshot and DeltaTable(location).version() == version
    # The project's Delta-version reader applies the vector (time travel to that version reads what Delta readers read).
    assert sorted(r.id for r in lh.read(spark, name, delta_version=version).collect()) == [0, 2, 3, 5, 6, 7, 8, 9]

    report = lh.repair(name, revert_delta=True)
    assert report["repaired"] and [v["version"] for v in report["revert_delta"]["reverted_versions"]] == [version - 1, version]
    assert delta_ids() == list(range(10))
    lh.write(spark.createDataFrame([(50, "x", "US")], "id long, name string, country string"), name, mode="append")
    assert delta_ids() == sorted([*range(10), 50]) and lh.verify(name)["agree"]
    assert sorted(r["id"] for r in lh.load(name).scan().to_arrow().to_pylist()) == sorted([*range(10), 50])
    assert sorted(r.id for r in lh.read(spark, name).collect()) == sorted([*range(10), 50])


def test_the_blocking_check_fails_on_a_foreign_version_with_the_explanation(dagster_resources, warehouse, spark):
    from dagster import AssetSelection, asset, materialize

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.dagster.checks import build_formats_agree_checks

    @asset(key_prefix=["fdc"])
    def people(pyspark: PySparkResource):
        return pyspark.spark_session.createDataFrame([(i, f"n{i}", "DE") for i in range(4)], "id long, name string, country string")

    checks = build_formats_agree_checks([people.key])
    assert materialize([people, *checks], resources=dagster_resources).success
    foreign_append(Lakehouse(warehouse).load("fdc.people").location(), [100])
    result = materialize([people, *checks], resources=dagster_resources, selection=AssetSelection.checks(*checks), raise_on_error=False)
    (evaluation,) = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert not evaluation.passed
    assert "did not write" in evaluation.description and "--adopt-delta" in evaluation.description and "--revert-delta" in evaluation.description


def test_cli_verify_names_the_foreign_versions_and_repair_adopts_or_reverts_them(lh, spark, warehouse):
    """The `lakehouse` console script, as a user runs it: verify exits 1 naming the foreign version and both ways
    out; `repair --adopt-delta` and `repair --revert-delta` fix the table; a refused adoption exits non-zero with
    the reason; both flags at once are refused."""
    import json

    from .test_cli import run

    name = "fd.cli"
    start(lh, spark, name, partitioned=True)
    location = lh.load(name).location()
    foreign_append(location, [100, 101])
    version = DeltaTable(location).version()
    out = run("verify", name, warehouse=warehouse, check=False)
    assert out.returncode == 1 and f"version {version} (WRITE by delta-rs" in out.stdout and "--adopt-delta" in out.stdout and "--revert-delta" in out.stdout
    adopted = json.loads(run("repair", name, "--adopt-delta", "--json", warehouse=warehouse).stdout)
    assert adopted["repaired"] and [v["version"] for v in adopted["adopt_delta"]["adopted_versions"]] == [version]
    assert run("verify", name, warehouse=warehouse).returncode == 0 and DeltaTable(location).to_pyarrow_table().num_rows == 12

    foreign_append(location, [200])
    text = run("repair", name, "--revert-delta", warehouse=warehouse).stdout
    assert "revert delta: Delta version(s)" in text
    assert run("verify", name, warehouse=warehouse).returncode == 0 and DeltaTable(location).to_pyarrow_table().num_rows == 12

    both = run("repair", name, "--adopt-delta", "--revert-delta", warehouse=warehouse, check=False)
    assert both.returncode == 2 and "Give --adopt-delta or --revert-delta, not both" in both.stderr and "Traceback" not in both.stderr


def test_cli_repair_adopt_delta_refused_exits_non_zero_with_the_reason(lh, spark, warehouse):
    from .test_cli import run

    name = "fd.cli_dv"
    start(lh, spark, name, partitioned=False)
    version = write_deletion_vector_version(lh.load(name).location(), {3})
    refused = run("repair", name, "--adopt-delta", warehouse=warehouse, check=False)
    assert refused.returncode != 0
    assert f"[{version - 1}, {version}] cannot be adopted" in refused.stderr and "deletion vectors" in refused.stderr and "--revert-delta" in refused.stderr


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_a_foreign_append_and_delete_on_s3_are_refused_then_adopted(backend, spark):
    """On S3 (SeaweedFS): a delta-rs append and a delta-rs DELETE on a partitioned table. The write is refused, adopt
    takes both (the DELETE's file rewritten on the executors through S3), and every reader of both formats agrees."""
    from lakehouse_assets.core.read import duckdb_readers

    lh = backend.lakehouse()
    name = f"{backend.namespace()}.people"
    lh.write(spark.createDataFrame([(i, f"n{i}", "DE" if i % 2 else "US") for i in range(4)], "id long, name string, country string"), name, partition_by=["country"])
    location = lh.load(name).location()
    options = lh.storage.delta_options(location)
    mirrored, snapshot = DeltaTable(location, storage_options=options).version(), lh.load(name).current_snapshot().snapshot_id
    schema = DeltaTable(location, storage_options=options).to_pyarrow_table().schema
    data = pa.table({"id": [100], "name": ["f"], "country": ["FR"]}).select(schema.names).cast(schema)
    write_deltalake(location, data, mode="append", partition_by=["country"], storage_options=options)
    DeltaTable(location, storage_options=options).delete("id = 1")
    with pytest.raises(ForeignDeltaCommits, match="Nothing was written"):
        lh.write(spark.createDataFrame([(5, "x", "DE")], "id long, name string, country string"), name)
    report = lh.repair(name, adopt_delta=True)
    assert report["repaired"] and report["adopt_delta"]["files_added"] == 2 and report["adopt_delta"]["files_rewritten"] == 1
    lh.write(spark.createDataFrame([(5, "x", "DE")], "id long, name string, country string"), name)
    duck = duckdb_readers.connect(lh.storage)
    want = sorted([("US", 0, "n0"), ("US", 2, "n2"), ("DE", 3, "n3"), ("FR", 100, "f"), ("DE", 5, "x")], key=repr)
    for reader, rows in read_everywhere(lh, spark, duck, name).items():
        assert rows == want, reader
    assert lh.verify(name)["agree"]
    before = sorted([("US", 0, "n0"), ("DE", 1, "n1"), ("US", 2, "n2"), ("DE", 3, "n3")], key=repr)
    for reader, rows in read_everywhere(lh, spark, duck, name, snapshot_id=snapshot, delta_version=mirrored).items():
        assert rows == before, reader


def _files_under(location: str) -> dict[str, int]:
    import os

    root = location.removeprefix("file://")
    return {os.path.relpath(os.path.join(d, f), root): os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs}


def test_a_table_dropped_from_the_catalog_with_its_files_kept_is_not_written_over_and_comes_back_registered(lh, spark, duck):
    """A DROP TABLE that keeps the files (Spark's, pyiceberg's) leaves the Delta log at the location. A new table
    there would take that log's versions for its own: its mirror wrote nothing and Delta readers kept the old rows."""
    rows = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    lh.write(rows, "fd.dropped")
    lh.write(pa.table({"id": [4], "name": ["d"]}), "fd.dropped")
    table = lh.load("fd.dropped")
    location, last_metadata = table.location(), table.metadata_location
    lh.catalog.drop_table("fd.dropped")
    before = _files_under(location)

    with pytest.raises(LocationInUse) as refused:
        lh.write(pa.table({"id": [10], "name": ["x"]}), "fd.dropped")
    message = str(refused.value)
    assert "Table fd.dropped does not exist in the catalog" in message and location in message and "Delta table (version 2)" in message, message
    assert _files_under(location) == before, "the refused write changed the files at the location"
    assert "fd.dropped" not in lh.context.table_names()

    # The error's way back: register the newest Iceberg metadata it names; history and the mirror carry on.
    assert refused.value.location == location and refused.value.metadata_location == last_metadata
    assert f"register_table('fd.dropped', {last_metadata!r})" in message, message
    lh.catalog.register_table("fd.dropped", refused.value.metadata_location)
    assert lh.verify("fd.dropped", deep=True)["agree"]
    lh.write(pa.table({"id": [5], "name": ["e"]}), "fd.dropped")
    assert DeltaTable(location).version() == 3
    assert_all_readers_agree(lh, spark, duck, "fd.dropped", [(i, n) for i, n in zip(range(1, 6), "abcde")])

    # A Delta table another tool wrote where a new table would go: refused, and importing it is the way in.
    other = lh.table_location("fd.theirs")
    write_deltalake(other, pa.table({"id": [7, 8], "name": ["g", "h"]}))
    with pytest.raises(LocationInUse, match=r"lakehouse import fd\.theirs ") as refused:
        lh.write(pa.table({"id": [9], "name": ["i"]}), "fd.theirs")
    assert refused.value.metadata_location is None and DeltaTable(other).version() == 0 and "fd.theirs" not in lh.context.table_names()
    lh.import_table("fd.theirs", other)
    assert_all_readers_agree(lh, spark, duck, "fd.theirs", [(7, "g"), (8, "h")])


def test_a_first_write_that_finds_the_delta_log_of_a_concurrent_first_write_takes_that_table(lh):
    """Two first writes of one table: the one whose catalog lookup came just before the other's table landed finds
    its Delta log, and then its catalog entry. It writes into that table; only a log without an entry is refused."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakehouse_assets.core.schema.spec import TableSpec
    from lakehouse_assets.core.table.tables import create_or_load

    class OneLookupBehind:
        """The suite's catalog, whose first lookup misses the table: it ran before the other writer's landed."""

        def __init__(self, catalog):
            self.catalog, self.missed = catalog, False

        def __getattr__(self, name):
            return getattr(self.catalog, name)

        def load_table(self, identifier):
            if not self.missed:
                self.missed = True
                raise NoSuchTableError(identifier)
            return self.catalog.load_table(identifier)

    lh.write(pa.table({"id": [1], "name": ["a"]}), "fd.raced")  # the other writer's first write, Delta log and all
    landed = lh.load("fd.raced")
    catalog = OneLookupBehind(lh.catalog)
    table, plan, created = create_or_load(catalog, lh.storage, lh.warehouse, TableSpec("fd.raced"), landed.schema())
    assert catalog.missed and not created and plan.empty
    assert table.metadata.table_uuid == landed.metadata.table_uuid and table.metadata_location == landed.metadata_location


"""Other engines write the Delta side (delta-rs here): every foreign Delta version is detected and named, and
under the default policy `refuse` no project write, mirror step or repair builds on top of it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import ForeignDeltaCommits
from lakehouse_assets.core import foreign_delta

from .conftest import read_everywhere


def start(lh, spark, name, n=10):
    """A project table: ids 0..n-1, country US for odd ids, DE for even ids."""
    rows = [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(n)]
    lh.write(spark.createDataFrame(rows, "id long, name string, country string").coalesce(1), name, partition_by=["country"])
    return sorted((c, i, nm) for i, nm, c in rows)


def foreign_append(location, ids):
    """delta-rs appends rows to the table's Delta log, as another team's script would."""
    schema = DeltaTable(location).to_pyarrow_table().schema
    data = pa.table({"id": list(ids), "name": [f"f{i}" for i in ids], "country": ["FR"] * len(ids)}).select(schema.names).cast(schema)
    write_deltalake(location, data, mode="append", partition_by=["country"])


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
    for i in range(12):  # past delta.checkpointInterval=10
        lh.write(spark.createDataFrame([(1000 + i, f"w{i}", "DE")], "id long, name string, country string"), "fd.own", mode="append")
        expected.append(("DE", 1000 + i, f"w{i}"))
    lh.write(spark.createDataFrame([(2000, "s", "US", 7)], "id long, name string, country string, extra int"), "fd.own", mode="append")
    assert foreign_delta.foreign_versions(DeltaTable(lh.load("fd.own").location())) == []
    report = lh.verify("fd.own")
    assert report["agree"], report["differences"]
    assert "delta_foreign_versions" not in report


def test_an_unknown_policy_is_refused_with_the_accepted_values():
    with pytest.raises(Exception, match=r"lakehouse.delta.foreign-commits='ignore' is not a policy: expected one of refuse, adopt"):
        foreign_delta.policy_of({"lakehouse.delta.foreign-commits": "ignore"})

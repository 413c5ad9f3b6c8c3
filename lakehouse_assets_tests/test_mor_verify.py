"""verify and the blocking formats_agree check on merge-on-read tables: both formats must delete the same rows of
every data file. A correct table agrees; each planted divergence (a vector holding other positions, a wrong
cardinality, a position past the file's rows, a CRC mismatch) is reported, naming the data file."""

from __future__ import annotations

import json
import os

import pytest
from dagster import AssetKey, build_asset_check_context

from lakehouse_assets import TableOptions
from lakehouse_assets.core.formats.delta import deletion_vectors as dv
from lakehouse_assets.core.formats.delta.logged_vectors import live_vectors
from lakehouse_assets.dagster.checks import build_formats_agree_check
from lakehouse_assets.dagster.resources import LakehouseResource

from .conftest import assert_all_readers_agree
from .mor_tables import MERGE_ON_READ, data_files, delete_positions


def _table(lh, spark, t: str) -> tuple[str, str]:
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name FROM range(10)"), t, table=TableOptions(properties=MERGE_ON_READ))
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name FROM range(10, 15)"), t)
    ten, five = data_files(lh, t)
    delete_positions(lh, t, {ten: [1], five: [0]})
    delete_positions(lh, t, {ten: [2]})  # the union: 1 and 2
    return ten, five


def _vector(lh, t: str, data_file: str):
    """(the vector's file, its descriptor) of a data file, as the current Delta version holds it."""
    mirror = lh.mirror(lh.load(t))
    root = lh.load(t).location()
    rel = os.path.relpath(data_file.removeprefix("file://"), root.removeprefix("file://"))
    descriptor = live_vectors(lh.storage, mirror.root_uri, mirror.load())[rel]
    return descriptor.file_uri(mirror.root_uri).removeprefix("file://"), descriptor, rel


def test_a_merge_on_read_table_agrees_and_every_reader_skips_the_deleted_rows(lh, spark, duck):
    t = "mv.correct"
    ten, _ = _table(lh, spark, t)
    report = lh.verify(t, deep=True)  # DuckDB reads both formats with their deletes applied
    assert report["agree"], report["differences"]
    assert report["content"]["row_hash"] and report["content"]["change_data"]
    assert (report["iceberg_deleted_rows"], report["delta_deleted_rows"], report["delta_deletion_vectors"]) == (3, 3, 2)
    expected = [(i, f"n{i}") for i in range(15) if i not in (1, 2, 10)]
    assert_all_readers_agree(lh, spark, duck, t, expected)
    # Every Delta version reads as the Iceberg snapshot it mirrors.
    for version, snapshot in ((3, -1), (4, None)):
        snap = lh.load(t).current_snapshot() if snapshot is None else lh.load(t).snapshot_by_id(lh.load(t).current_snapshot().parent_snapshot_id)
        assert sorted(r["id"] for r in lh.read(spark, t, delta_version=version).collect()) == sorted(
            r["id"] for r in lh.read(spark, t, snapshot_id=snap.snapshot_id).collect())


@pytest.mark.parametrize("plant,kind", [
    ("other_positions", "deleted rows"),
    ("cardinality", "unreadable deletion vector"),
    ("past_the_rows", "position past the file's rows"),
    ("crc", "unreadable deletion vector"),
    ("iceberg_file", "deleted rows"),
])
def test_a_planted_divergence_is_reported_naming_the_file(lh, spark, warehouse, plant, kind):
    t = f"mv.{plant}"
    ten, _ = _table(lh, spark, t)
    path, descriptor, rel = _vector(lh, t, ten)
    body = open(path, "rb").read()
    if plant == "iceberg_file":
        # The Iceberg side changed under its name after this process wrote it: the check reads the file, not memory.
        import pyarrow as pa
        import pyarrow.parquet as pq

        from lakehouse_assets.core.formats.deletes import table_files
        from lakehouse_assets.core.formats.position_deletes import FILE_SCHEMA, referenced_data_file

        (delete_file,) = [e.data_file for e in table_files(lh.load(t)).position_deletes if referenced_data_file(e.data_file) == ten]
        pq.write_table(pa.table([pa.array([ten, ten]), pa.array([1, 3], pa.int64())], schema=FILE_SCHEMA), delete_file.file_path.removeprefix("file://"))
        fragment = "positions only Iceberg deletes [3], only Delta [2]"
    elif plant == "other_positions":
        open(path, "wb").write(dv.file_bytes([1, 3]))  # same size and cardinality, position 3 instead of 2
        fragment = "positions only Iceberg deletes [2], only Delta [3]"
    elif plant == "past_the_rows":
        open(path, "wb").write(dv.file_bytes([1, 12]))
        fragment = "Delta deletes position 12, past the file's 10 rows"
    elif plant == "crc":
        open(path, "wb").write(body[:-1] + bytes([body[-1] ^ 0xFF]))
        fragment = "CRC-32 mismatch"
    else:
        log = sorted(os.listdir(os.path.join(os.path.dirname(os.path.dirname(path)), "_delta_log")))
        last = os.path.join(os.path.dirname(os.path.dirname(path)), "_delta_log", [n for n in log if n.endswith(".json")][-1])
        text = open(last).read()
        wrong = json.dumps(descriptor.to_json()).replace('"cardinality": 2', '"cardinality": 5')
        lines = [json.dumps({"add": {**a["add"], "deletionVector": json.loads(wrong)}}) if "add" in (a := json.loads(line)) and a["add"].get("deletionVector") == descriptor.to_json() else line
                 for line in text.splitlines()]
        assert lines != text.splitlines()
        open(last, "w").write("\n".join(lines) + "\n")
        fragment = "its descriptor says cardinality 5"
    report = lh.verify(t)
    assert not report["agree"]
    (difference,) = [d for d in report["differences"] if kind in d]
    assert rel in difference and fragment in difference, difference

    # The blocking check fails with the same words.
    check = build_formats_agree_check(AssetKey(["mv", plant]))
    evaluation = check(build_asset_check_context(), lakehouse=LakehouseResource(warehouse=warehouse))
    assert not evaluation.passed and rel in evaluation.description and fragment in evaluation.description

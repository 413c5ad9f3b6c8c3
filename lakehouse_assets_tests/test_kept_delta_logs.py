"""A process's writes to one table read its Delta log once and then follow it (core/formats/delta/kept_logs.py):
the log the last write read is brought up to date instead of loaded again, and is never trusted once it is no
longer a read of the table's log. Arrow frames: these writes start no Spark job."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import ForeignDeltaCommits, VerifiedPair
from lakehouse_assets.core.formats.delta.committer import DeltaMirror
from lakehouse_assets.core.formats.delta.kept_logs import KEPT

from .conftest import rows_of


def _rows(ids) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"n{i}" for i in ids]})


def _delta_rows(location: str) -> list[tuple]:
    return rows_of(DeltaTable(location).to_pyarrow_table().to_pylist())


def _iceberg_rows(lh, identifier: str) -> list[tuple]:
    return rows_of(lh.load(identifier).scan().to_arrow().to_pylist())


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """The Delta logs loaded from scratch while the test runs (root URIs), starting with nothing kept."""
    KEPT.clear()
    seen: list[str] = []
    original = DeltaMirror.load

    def counting(self, version=None):
        seen.append(self.root_uri)
        return original(self, version)

    monkeypatch.setattr(DeltaMirror, "load", counting)
    yield seen
    KEPT.clear()


def test_the_writes_after_the_first_follow_the_log_the_first_read(lh, loads):
    lh.write(_rows(range(0, 10)), "kept.t")
    location = lh.table_location("kept.t")
    loads.clear()
    for start in (10, 20, 30):
        lh.write(_rows(range(start, start + 10)), "kept.t")
    assert loads == [], "every write follows the log the table's creation wrote"
    assert _delta_rows(location) == _iceberg_rows(lh, "kept.t") == rows_of(_rows(range(40)).to_pylist())
    assert lh.verify("kept.t")["agree"]


def test_the_check_after_a_write_follows_the_writes_log_and_sees_what_lands_after_it(lh, loads):
    lh.write(_rows(range(0, 10)), "kept.t")
    full = lh.verify("kept.t")
    since = VerifiedPair(full["iceberg_snapshot_id"], full["delta_version"])
    lh.write(_rows(range(10, 20)), "kept.t")
    loads.clear()
    report = lh.verify("kept.t", since=since)
    assert report["agree"] and report["compared"].startswith("what changed since"), report
    write_deltalake(lh.table_location("kept.t"), _rows([99]), mode="append")  # another engine, after the check's read
    report = lh.verify("kept.t", since=since)
    assert not report["agree"] and "version 3" in " ".join(report["differences"]), report
    assert loads == [], "the checks followed the log the write read"


def test_a_foreign_version_after_the_kept_read_is_refused_as_before(lh, loads):
    lh.write(_rows(range(0, 10)), "kept.t")
    lh.write(_rows(range(10, 20)), "kept.t")
    location = lh.table_location("kept.t")
    write_deltalake(location, _rows([99]), mode="append")
    with pytest.raises(ForeignDeltaCommits, match="version 3"):
        lh.write(_rows(range(20, 30)), "kept.t")
    assert _iceberg_rows(lh, "kept.t") == rows_of(_rows(range(20)).to_pylist()), "nothing was written"


def test_a_delta_log_deleted_under_the_table_is_loaded_afresh_and_written_whole(lh, loads):
    lh.write(_rows(range(0, 10)), "kept.t")
    lh.write(_rows(range(10, 20)), "kept.t")
    location = lh.table_location("kept.t")
    shutil.rmtree(location.removeprefix("file://") + "/_delta_log")
    loads.clear()
    lh.write(_rows(range(20, 30)), "kept.t")
    assert location in loads, "the kept log of a deleted Delta log is not used"
    assert _delta_rows(location) == _iceberg_rows(lh, "kept.t") == rows_of(_rows(range(30)).to_pylist())
    assert lh.verify("kept.t")["agree"]


def test_a_table_dropped_and_created_again_at_its_location_is_loaded_afresh(lh, loads):
    lh.write(_rows(range(0, 10)), "kept.t")
    lh.write(_rows(range(10, 20)), "kept.t")
    location = lh.table_location("kept.t")
    lh.catalog.drop_table("kept.t")
    shutil.rmtree(location.removeprefix("file://"))
    lh.write(_rows(range(100, 105)), "kept.t")
    loads.clear()
    lh.write(_rows(range(105, 110)), "kept.t")
    assert loads == [], "the new table's own first write read the log the second write follows"
    assert _delta_rows(location) == _iceberg_rows(lh, "kept.t") == rows_of(_rows(range(100, 110)).to_pylist())
    assert lh.verify("kept.t")["agree"]


def test_a_table_created_again_by_another_process_is_loaded_afresh(lh, loads, warehouse):
    """Another process drops the table and creates it again at the same location, past the version this process
    kept: brought up to date, the kept log would lay the new log's commits over the dropped table's files."""
    lh.write(_rows(range(0, 10)), "kept.t")
    lh.write(_rows(range(10, 20)), "kept.t")
    location = lh.table_location("kept.t")
    script = textwrap.dedent(
        f"""
        import shutil
        import pyarrow as pa
        from lakehouse_assets import Lakehouse
        lh = Lakehouse({warehouse!r})
        lh.catalog.drop_table("kept.t")
        shutil.rmtree({location.removeprefix("file://")!r})
        for start in range(100, 150, 10):
            lh.write(pa.table({{"id": pa.array(range(start, start + 10), pa.int64()), "name": [f"n{{i}}" for i in range(start, start + 10)]}}), "kept.t")
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120)
    loads.clear()
    lh.write(_rows(range(150, 160)), "kept.t")
    assert loads == [location], "the log kept for the dropped table is not followed"
    assert _delta_rows(location) == _iceberg_rows(lh, "kept.t") == rows_of(_rows(range(100, 160)).to_pylist())
    assert lh.verify("kept.t")["agree"]


def test_deletes_by_condition_follow_the_log_too_and_one_that_matches_nothing_keeps_it(lh, loads, spark):
    lh.write(_rows(range(0, 10)), "kept.del")
    location = lh.table_location("kept.del")
    loads.clear()
    assert lh.delete("kept.del", "id = 3", spark=spark).rows_removed == 1
    assert lh.delete("kept.del", "id = 3", spark=spark).rows_removed == 0  # nothing matched: nothing committed
    assert lh.delete("kept.del", "id IN (4, 5)", spark=spark).rows_removed == 2
    assert loads == [], "each delete reads the Delta log the last write or delete followed (its append-only check too)"
    assert _delta_rows(location) == _iceberg_rows(lh, "kept.del") == rows_of(_rows([0, 1, 2, 6, 7, 8, 9]).to_pylist())
    assert lh.verify("kept.del")["agree"]

"""A snapshot names the partitions it changed in its summary (Iceberg's `write.summary.partition-limit`, set on new
tables), and a writer that lost a race re-validates by those names instead of reading the snapshot's manifests
(core/formats/iceberg/partition_summaries.py, core/write/conflicts.py). Where a summary does not say for certain,
the manifests are read as before."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.transforms import DayTransform
from pyiceberg.typedef import Record

from lakehouse_assets import Window
from lakehouse_assets.core.formats.iceberg.partition_summaries import LIMIT_PROPERTY, changed_partitions
from lakehouse_assets.core.write import conflicts

from . import concurrent_writers as cw
from .conftest import assert_all_readers_agree, rows_of

T = "ps.events"
ROWS = 100


def _days(n: int) -> pa.Table:
    return pa.concat_tables([cw.rows(i, ROWS) for i in range(n)])


def _days_since_epoch(i: int) -> int:
    return (cw.day(i) - dt.date(1970, 1, 1)).days


def test_a_write_names_the_partitions_it_changed_and_they_read_back_as_values(lh):
    lh.write(_days(3), T, partition_by=["day"])
    table = lh.load(T)
    assert table.properties[LIMIT_PROPERTY] == "10"
    first = table.current_snapshot()
    assert sorted(changed_partitions(table, first), key=lambda r: r[0]) == [Record(_days_since_epoch(i)) for i in range(3)]
    lh.write(cw.rows(1, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
    table = lh.load(T)
    summary = table.current_snapshot().summary.additional_properties
    assert "added-data-files=1,deleted-data-files=1," in summary["partitions.day=2024-01-02"]
    assert changed_partitions(table, table.current_snapshot()) == [Record(_days_since_epoch(1))]


def test_a_day_transform_reads_back_and_a_month_one_is_left_to_the_manifests(lh):
    ts = pa.array([dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 2, 3, 11)], pa.timestamp("us"))
    frame = pa.table({"id": pa.array([1, 2], pa.int64()), "ts": ts})
    lh.write(frame, "ps.by_day", partition_by=["day(ts)"])
    lh.write(frame, "ps.by_month", partition_by=["month(ts)"])
    by_day, by_month = lh.load("ps.by_day"), lh.load("ps.by_month")
    days = sorted(r[0] for r in changed_partitions(by_day, by_day.current_snapshot()))
    assert [DayTransform().to_human_string(by_day.spec().partition_type(by_day.schema()).fields[0].field_type, d) for d in days] == ["2024-01-01", "2024-02-03"]
    assert "partitions.ts_month=2024-01" in by_month.current_snapshot().summary.additional_properties
    assert changed_partitions(by_month, by_month.current_snapshot()) is None  # "2024-01" is not a value of its int type


def test_summaries_that_do_not_say_for_certain_are_left_to_the_manifests(lh, spark):
    lh.write(_days(12), T, partition_by=["day"])
    table = lh.load(T)
    assert "partition-summaries-included" not in table.current_snapshot().summary.additional_properties  # 12 > the limit
    assert changed_partitions(table, table.current_snapshot()) is None
    lh.alter(T, write_mode="merge-on-read")
    lh.delete(T, f"id = {cw.rows(0, 1)['id'][0].as_py()}", spark=spark)  # a position delete file: not in the partition counts
    table = lh.load(T)
    assert int(table.current_snapshot().summary.additional_properties["added-position-delete-files"]) == 1
    assert changed_partitions(table, table.current_snapshot()) is None
    lh.write(cw.rows(2, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(2), cw.day(3)))
    table = lh.load(T)
    with table.update_spec() as spec:  # a path no longer says which spec its values belong to
        spec.add_identity("id")
    assert changed_partitions(lh.load(T), table.current_snapshot()) is None


def _spy_on_manifest_reads(monkeypatch) -> list[int]:
    """The snapshots whose manifests a re-validation reads from now on."""
    opened, real = [], conflicts.snapshot_change
    monkeypatch.setattr(conflicts, "snapshot_change", lambda table, s, *a: opened.append(s.snapshot_id) or real(table, s, *a))
    return opened


def test_a_revalidation_reads_no_manifest_of_a_snapshot_that_changed_other_partitions_only(lh, spark, duck, monkeypatch):
    from .test_concurrent_writers import _with_a_concurrent_write

    lh.write(_days(3), T, partition_by=["day"])
    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(1, ROWS, 2), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2))))
    opened = _spy_on_manifest_reads(monkeypatch)
    landed = lh.write(cw.rows(0, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
    monkeypatch.undo()
    assert landed.commit_attempts == 2 and opened == []
    assert_all_readers_agree(lh, spark, duck, T, rows_of([*cw.rows(0, ROWS, 1).to_pylist(), *cw.rows(1, ROWS, 2).to_pylist(), *cw.rows(2, ROWS).to_pylist()]))


@pytest.mark.parametrize("racing_day", [1, 0], ids=["other-partition", "same-partition"])
def test_a_snapshot_is_opened_only_when_its_summary_names_a_partition_inside_the_slice(lh, monkeypatch, racing_day):
    """An append into another day is passed by its summary; one into the overwritten day is read, and refused."""
    from lakehouse_assets import CommitConflict

    from .test_concurrent_writers import _with_a_concurrent_write

    lh.write(_days(2), T, partition_by=["day"])
    extra = cw.rows(racing_day, 5, 7).set_column(0, "id", pa.array(range(-5, 0), pa.int64()))
    _with_a_concurrent_write(monkeypatch, lambda: lh.write(extra, T))
    opened = _spy_on_manifest_reads(monkeypatch)
    overwrite = lambda: lh.write(cw.rows(0, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))  # noqa: E731
    if racing_day == 1:
        assert overwrite().commit_attempts == 2 and opened == []
    else:
        with pytest.raises(CommitConflict, match=r"snapshot \d+ \(append\) added 1 file\(s\) inside day in \[2024-01-01, 2024-01-02\)"):
            overwrite()
        assert opened == [lh.load(T).current_snapshot().snapshot_id]  # the append's manifests decided
    monkeypatch.undo()
    assert lh.verify(T)["agree"]

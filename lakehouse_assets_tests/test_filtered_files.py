"""The data files a row filter may match (merges' candidates, overwrites' windows, deletes' and updates' files):
planned in the caller's thread with pyiceberg's own evaluators, they are exactly the data files pyiceberg's scan
planning keeps, on a local disk and on an object store (where the manifests are fetched ahead)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan, Or

from lakehouse_assets.core.formats.iceberg import filtered_files
from lakehouse_assets.core.formats.iceberg.committer import live_data_files

FILTERS = {
    "keys in a set": In("id", {3, 250, 777}),
    "a partition": EqualTo("day", "2024-01-02"),
    "a key range in a partition": And(EqualTo("day", "2024-01-03"), And(GreaterThanOrEqual("id", 200), LessThan("id", 320))),
    "keys or a partition": Or(In("id", {5}), EqualTo("day", "2024-01-04")),
    "nothing": In("id", {10_000_000}),
}


def _table_of_many_manifests(lh, identifier: str):
    """Four days, ten appends (one manifest each), each append a file per day holding its own 25 ids."""
    for batch in range(10):
        ids = list(range(batch * 100, batch * 100 + 100))
        days = [f"2024-01-0{1 + i % 100 // 25}" for i in ids]
        lh.write(pa.table({"id": pa.array(ids, pa.int64()), "day": days}), identifier, partition_by=["day"])
    return lh.load(identifier)


def _planned_by_pyiceberg(table, row_filter) -> set[str]:
    return {task.file.file_path for task in table.scan(row_filter=row_filter).plan_files()}


def _assert_as_pyiceberg_plans(table) -> None:
    every = {f.file_path for f in live_data_files(table)}
    assert len(table.current_snapshot().manifests(table.io)) >= 10 and len(every) == 40
    for name, row_filter in FILTERS.items():
        ours = {f.file_path for f in live_data_files(table, row_filter=row_filter)}
        assert ours == _planned_by_pyiceberg(table, row_filter), name
        assert ours < every, f"{name}: nothing pruned"
    assert not live_data_files(table, row_filter=FILTERS["nothing"])
    assert len(live_data_files(table, row_filter=FILTERS["keys in a set"])) == 3  # the bounds of one file each hold an id


def test_the_filtered_files_are_those_pyiceberg_plans_decoded_in_the_callers_thread(lh, monkeypatch):
    table = _table_of_many_manifests(lh, "plan.local")
    # On a local disk no thread fetches ahead: the manifests are read and decoded where the caller runs.
    monkeypatch.setattr(filtered_files, "ThreadPoolExecutor", None)
    _assert_as_pyiceberg_plans(table)


@pytest.mark.parametrize("backend", ["postgres-s3"], indirect=True)
def test_on_an_object_store_the_manifests_are_fetched_ahead_and_plan_the_same(backend, monkeypatch):
    lh = backend.lakehouse()
    table = _table_of_many_manifests(lh, f"{backend.namespace()}.plan")
    fetched = []
    real_read = filtered_files._read
    monkeypatch.setattr(filtered_files, "_read", lambda io, path: fetched.append(path) or real_read(io, path))
    _assert_as_pyiceberg_plans(table)
    assert fetched and all(p.startswith("s3://") for p in fetched)

"""The Delta change data feed: every mirrored version that replaces or deletes rows carries `cdc` files with exactly
the rows `Lakehouse.changes` returns for its Iceberg snapshot, so `DeltaTable.load_cdf` and `Lakehouse.changes` agree
row for row."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from lakehouse_assets import MergeOptions, Slice

COLUMNS = ["id", "name", "country"]


def people(spark, rows):
    return spark.createDataFrame(rows, "id long, name string, country string").coalesce(1)


def delta_feed(lh, t, starting_version: int) -> list[tuple]:
    """`load_cdf` from `starting_version` on: (columns..., _change_type, _commit_version), sorted."""
    table = pa.table(DeltaTable(lh.load(t).location()).load_cdf(starting_version=starting_version).read_all())
    return sorted(tuple(r[c] for c in [*COLUMNS, "_change_type", "_commit_version"]) for r in table.to_pylist())


def lakehouse_changes(lh, t, since_snapshot: int | None) -> list[tuple]:
    return sorted(tuple(r[c] for c in [*COLUMNS, "_change_type", "_commit_version"]) for r in lh.changes(t, since_snapshot).collect())


def assert_feed_equals_changes(lh, t, since) -> list[tuple]:
    """`since`: the WriteResult after which both feeds are read."""
    expected = lakehouse_changes(lh, t, since.iceberg_snapshot_id)
    assert delta_feed(lh, t, since.delta_version + 1) == expected
    return expected


def test_merge_feed_is_exact(lh, spark):
    for t, partition_by in (("cdf.flat", None), ("cdf.parts", ["country"])):
        first = lh.write(people(spark, [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(100)]), t, partition_by=partition_by)
        batch = spark.createDataFrame([(1, "new1", "US", "u"), (3, None, "US", "D"), (200, "n200", "DE", "i")], "id long, name string, country string, op string")
        lh.write(batch, t, mode="merge", merge=MergeOptions(keys=["id"], operation_column="op"))
        assert assert_feed_equals_changes(lh, t, first) == [
            (1, "n1", "US", "update_preimage", first.delta_version + 1), (1, "new1", "US", "update_postimage", first.delta_version + 1),
            (3, "n3", "US", "delete", first.delta_version + 1), (200, "n200", "DE", "insert", first.delta_version + 1),
        ]

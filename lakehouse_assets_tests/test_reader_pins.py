"""Pinned behaviour of third-party readers that our tests work around (remove the workaround when a pin fails)."""

from __future__ import annotations

import decimal
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions


def test_delta_rs_dataset_drops_files_without_min_max(tmp_path):
    """delta-rs 1.6.6 `to_pyarrow_dataset()` turns a file's missing min/max of a column into the guarantee
    `col >= null`, so a filter on that column drops the file. The protocol allows any column to lack
    min/max (Delta Spark omits them for all-null columns); delta-rs's SQL engine (QueryBuilder) is right."""
    t = pa.table({"a": [1, 2], "dec": pa.array([decimal.Decimal("1E-10"), decimal.Decimal("2")], pa.decimal128(38, 10))})
    root = str(tmp_path / "t")
    os.makedirs(root + "/data")
    pq.write_table(t, root + "/data/f.parquet")
    stats = {"numRecords": 2, "minValues": {"a": 1}, "maxValues": {"a": 2}, "nullCount": {"a": 0, "dec": 0}}
    add = AddAction("data/f.parquet", os.path.getsize(root + "/data/f.parquet"), {}, 0, True, json.dumps(stats))
    create_table_with_add_actions(root, Schema.from_arrow(t.schema), [add], mode="error")
    table = DeltaTable(root)
    value = pa.scalar(decimal.Decimal("1E-10"), type=pa.decimal128(38, 10))
    assert table.to_pyarrow_dataset().to_table(filter=pc.field("dec") == value).num_rows == 0  # the bug
    sql = QueryBuilder().register("t", table).execute("SELECT * FROM t WHERE dec = CAST('0.0000000001' AS DECIMAL(38,10))")
    assert pa.table(sql.read_all()).num_rows == 1

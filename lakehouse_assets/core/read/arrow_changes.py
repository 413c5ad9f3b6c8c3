"""The rows a small snapshot changed, computed in this process with pyarrow: the Delta change data of a write that
runs without Spark (a pyarrow, pandas or Polars frame), so replacing a partition does not start a JVM for its feed.

The rows are those `Lakehouse.changes` returns for the snapshot (core/read/changes.py, `snapshot_changed_rows`): the
removed files' rows that are not in the added files (deletes) and the other way round (inserts), compared as
multisets of whole rows. Only a change this module can compute exactly, and cheaply, is taken: no Spark session is
running, the files read hold at most `MAX_BYTES`, no delete file is involved, the snapshot is not a keyed merge
(whose updates pair pre- and post-images by key), and every column is of a type pyarrow groups by. Anything else
returns None, and the Spark job computes it as before.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from ..formats import history
from ..formats.deletes import has_delete_files
from ..formats.snapshot_changes import SnapshotChange
from ..io.storage import StorageConfig
from ..properties import SummaryKeys
from .change_types import CHANGE_TYPE, DELETE, INSERT

MAX_BYTES = 64 * 1024 * 1024  # of removed and added files together: what one process reads for the feed
_SIGN = "_lakehouse_sign"


def small_change_rows(table: Table, change: SnapshotChange, parent, spark_schema, storage: StorageConfig) -> pa.Table | None:
    """The rows `change` changed (columns of `spark_schema` and the change type; empty: none), or None when this
    change is not one to compute here (see the module docstring). `parent`: the snapshot before it."""
    if _spark_running() or _paired(change.snapshot) or _bytes(change.adds, change.removes) > MAX_BYTES:
        return None
    if has_delete_files(table, change.snapshot) or (parent is not None and has_delete_files(table, parent)):
        return None
    return planned_change_rows(change.adds, change.removes, spark_schema, storage)


def planned_change_rows(adds, removes, spark_schema, storage: StorageConfig) -> pa.Table | None:
    """The rows a change that replaces the data files `removes` with `adds` makes (as `small_change_rows`), before it is
    committed: the caller knows that no delete file is involved and that its rows do not pair by key. None when not
    computed here: a Spark session is running, the files are too large, or a column's type is not one pyarrow groups by."""
    if _spark_running() or _bytes(adds, removes) > MAX_BYTES:
        return None
    from ..spark.compat import arrow_schema

    schema = arrow_schema(spark_schema)
    if not all(_groupable(f.type) for f in schema):
        return None
    removed = _read(removes, spark_schema, schema, storage)
    added = _read(adds, spark_schema, schema, storage)
    return net_changes(removed, added)


def _bytes(adds, removes) -> int:
    return sum(f.file_size_in_bytes for f in (*adds, *removes))


def net_changes(removed: pa.Table, added: pa.Table) -> pa.Table:
    """Rows of `removed` not in `added` (deletes) and of `added` not in `removed` (inserts), as multisets of whole
    rows: a row removed twice and added once is one delete. The same rows as changes.py's `_net_changes` without keys."""
    columns = removed.column_names
    both = pa.concat_tables([
        _normalized(removed).append_column(_SIGN, pa.array(np.full(removed.num_rows, -1, np.int64))),
        _normalized(added.select(columns)).append_column(_SIGN, pa.array(np.ones(added.num_rows, np.int64))),
    ])
    net = both.group_by(columns, use_threads=False).aggregate([(_SIGN, "sum")])
    counts = net[f"{_SIGN}_sum"]
    net = net.filter(pc.not_equal(counts, 0))
    counts = net[f"{_SIGN}_sum"].to_numpy()
    copies = net.select(columns).take(pa.array(np.repeat(np.arange(net.num_rows), np.abs(counts))))
    kinds = np.repeat(np.where(counts < 0, DELETE, INSERT), np.abs(counts))
    return copies.append_column(CHANGE_TYPE, pa.array(kinds, pa.string()))


def _spark_running() -> bool:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


def _groupable(t: pa.DataType) -> bool:
    return not pa.types.is_nested(t)


def _normalized(rows: pa.Table) -> pa.Table:
    """Floats as Spark groups them: -0.0 as 0.0, every NaN as one NaN (the group's value is the normalized one there too)."""
    for i, f in enumerate(rows.schema):
        if pa.types.is_floating(f.type):
            c = rows.column(i)
            zero, nan = pa.scalar(0.0, f.type), pa.scalar(float("nan"), f.type)
            c = pc.if_else(pc.is_nan(c), nan, pc.if_else(pc.equal(c, zero), zero, c))
            rows = rows.set_column(i, f, c)
    return rows


def _read(files, spark_schema, schema: pa.Schema, storage: StorageConfig) -> pa.Table:
    """The files' rows in the table's columns, read by the executors' own reader (field ids, renames, casts)."""
    from ..schema.type_mapping import SPARK_FIELD_ID_KEY
    from .reader import ParquetFileReader

    if not files:
        return schema.empty_table()
    field_ids = {f.name: f.metadata[SPARK_FIELD_ID_KEY] for f in spark_schema.fields if SPARK_FIELD_ID_KEY in (f.metadata or {})}
    reader = ParquetFileReader(storage, schema, field_ids=field_ids or None)
    paths = pa.record_batch([pa.array([f.file_path for f in files], pa.string())], names=["path"])
    return pa.Table.from_batches(list(reader(iter([paths]))), schema=schema)


def _paired(snapshot) -> bool:
    """A merge's or an update's rows pair into pre- and post-images, which this module does not compute."""
    summary = history.summary(snapshot)
    return bool(summary.get(SummaryKeys.MERGE_KEYS) or summary.get(SummaryKeys.UPDATE_KEYS))

"""Reads of merge-on-read tables: every reader leaves the rows of position-delete files out, at every snapshot.

Tables are built through the position-delete seam (`mor_tables.delete_positions`): rows written with `lh`, then
position-delete files committed by the commit pipeline. Spark reads open the files with deletes through the pyarrow
reader, which leaves their deleted positions out (no join, no rows on the driver); other files read as before.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from dagster import AssetIn, asset, materialize
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame as SparkDataFrame

from lakehouse_assets import TableOptions
from lakehouse_assets.core.errors import DeleteFilesError

from . import foreign_writer as fw
from .mor_tables import MERGE_ON_READ, data_files, delete_positions


def ids(df) -> list[int]:
    return sorted(r["id"] for r in df.collect()) if isinstance(df, SparkDataFrame) else sorted(df.column("id").to_pylist())


def _table(lh, spark, t: str, **kw):
    opts = TableOptions(properties=MERGE_ON_READ)
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, IF(id % 2 = 0, 'DE', 'US') AS country FROM range(10)"), t, table=opts, **kw)
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name, IF(id % 2 = 0, 'DE', 'US') AS country FROM range(10, 15)"), t, **kw)
    return list(data_files(lh, t))


def test_reads_leave_deleted_rows_out_at_every_snapshot(lh, spark):
    t = "mor.reads"
    first, second = _table(lh, spark, t)
    written = lh.load(t).current_snapshot().snapshot_id
    one = delete_positions(lh, t, {first: [0, 2]}).iceberg_snapshot_id
    two = delete_positions(lh, t, {first: [5], second: [1]}).iceberg_snapshot_id  # the union of file 1's positions

    at = {written: list(range(15)), one: [1, *range(3, 15)], two: [1, 3, 4, *range(6, 11), *range(12, 15)]}
    assert ids(lh.read(spark, t)) == at[two] == ids(lh.read_arrow(t))
    for snap, expected in at.items():
        assert ids(lh.read(spark, t, snapshot_id=snap)) == expected, snap
        assert ids(lh.read_arrow(t, snapshot_id=snap)) == expected, snap
    assert ids(lh.read(spark, t, row_filter="id >= 4 AND id < 12")) == [4, 6, 7, 8, 9, 10]
    assert ids(lh.read(spark, t, row_filter="id >= 4 AND id < 12")) == ids(lh.read_arrow(t, row_filter="id >= 4 AND id < 12"))
    assert lh.read(spark, t).count() == 11 and lh.read(spark, t).filter("country = 'US'").count() == 5


def test_a_partitioned_table_reads_each_files_own_deletes(lh, spark):
    t = "mor.parts"
    files = _table(lh, spark, t, partition_by=["country"])
    assert len(files) == 4
    by_country = {p: [f for f in files if f"country={p}" in f] for p in ("DE", "US")}
    delete_positions(lh, t, {by_country["DE"][0]: [0], by_country["US"][1]: [0, 1]})  # ids 0, 11 and 13

    expected = [i for i in range(15) if i not in (0, 11, 13)]
    assert ids(lh.read(spark, t)) == expected == ids(lh.read_arrow(t))
    assert ids(lh.read(spark, t, row_filter="country = 'US'")) == [i for i in expected if i % 2]
    assert ids(lh.read(spark, t, row_filter="country = 'DE'")) == [i for i in expected if i % 2 == 0]


def test_changes_show_the_deleted_rows(lh, spark):
    t = "mor.changes"
    first, _ = _table(lh, spark, t)
    start = lh.load(t).current_snapshot().snapshot_id
    delete_positions(lh, t, {first: [3]})
    delete_positions(lh, t, {first: [4]})  # the replacement file carries 3 and 4: only 4 is new

    rows = sorted((r["id"], r["_change_type"]) for r in lh.changes(t, start).collect())
    assert rows == [(3, "delete"), (4, "delete")]
    between = lh.load(t).current_snapshot().parent_snapshot_id
    assert [(r["id"], r["_change_type"]) for r in lh.changes(t, between).collect()] == [(4, "delete")]


SEEN: dict[str, list[int]] = {}


@asset(key_prefix=["mor"])
def typed(pyspark: PySparkResource):
    return pyspark.spark_session.sql("SELECT id, CONCAT('n', id) AS name FROM range(6)")


@asset(key_prefix=["mor"], ins={"typed": AssetIn(key=["mor", "typed"])})
def as_pandas(typed: pd.DataFrame) -> None:
    SEEN["pandas"] = sorted(typed["id"])


@asset(key_prefix=["mor"], ins={"typed": AssetIn(key=["mor", "typed"])})
def as_spark(typed: SparkDataFrame) -> None:
    SEEN["spark"] = ids(typed)


def test_typed_inputs_read_without_the_deleted_rows(lh, spark, dagster_resources):
    assert materialize([typed], resources=dagster_resources).success
    (only,) = data_files(lh, "mor.typed")
    delete_positions(lh, "mor.typed", {only: [1, 4]})
    assert materialize([typed, as_pandas, as_spark], selection=[as_pandas, as_spark], resources=dagster_resources).success
    assert SEEN == {"pandas": [0, 2, 3, 5], "spark": [0, 2, 3, 5]}


def test_equality_deletes_are_still_refused_by_the_spark_reader(lh, spark):
    t = "mor.equality"
    _table(lh, spark, t)
    table = lh.load(t)
    fw.commit_deletes(table, [fw.equality_deletes(table, pa.table({"id": pa.array([2], pa.int64())}))])
    with pytest.raises(DeleteFilesError, match=r"mor\.equality: snapshot \d+ has 1 equality-delete file\(s\) \(row-level deletes.*"
                       r"Lakehouse\.read does not apply equality-delete files.*--apply-deletes"):
        lh.read(spark, t)

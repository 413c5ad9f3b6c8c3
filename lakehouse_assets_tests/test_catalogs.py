"""Conformance suite: every catalog x storage combination behaves like the local default.

Combinations (servers start once per session, see servers.py): SeaweedFS S3 + its Iceberg REST
catalog (OAuth2 client credentials), PostgreSQL SQL catalog on SeaweedFS S3 and on a local
warehouse, AWS Glue (moto) on moto's S3.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from lakehouse_assets.core import duckdb_readers

from .conftest import assert_all_readers_agree, rows_of
from .servers import backend, moto, postgres, seaweedfs, servers_dir  # noqa: F401 - fixtures


def events(spark, start: int, n: int):
    return spark.range(start, start + n).select(
        F.col("id"),
        (F.col("id") % 3).cast("string").alias("country"),
        (F.lit("2024-01-01").cast("timestamp") + F.expr("make_interval(0, 0, 0, 0, id % 48, 0, 0)")).alias("event_time"),
        (F.col("id") * 1.5).alias("amount"),
    )


def expected(start: int, n: int):
    import datetime as dt

    return [(i * 1.5, str(i % 3), (dt.datetime(2024, 1, 1) + dt.timedelta(hours=i % 48)).isoformat(), i) for i in range(start, start + n)]


def test_create_append_overwrite_time_travel(backend, spark):
    lh = backend.lakehouse()
    duck = duckdb_readers.connect(lh.storage)
    ident = f"{backend.namespace()}.events"
    created = lh.write(events(spark, 0, 30), ident, partition_by=["country", "day(event_time)"])
    assert created.location.startswith(backend.warehouse if "://" in backend.warehouse else "file://")
    assert created.delta_version == 0 or created.delta_version is not None
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 30))
    appended = lh.write(events(spark, 30, 20), ident)
    assert appended.delta_version == created.delta_version + 1
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 50))
    replaced = lh.write(events(spark, 100, 10), ident, mode="overwrite")
    assert replaced.rows_removed == 50 and replaced.delta_version == appended.delta_version + 1
    assert_all_readers_agree(lh, spark, duck, ident, expected(100, 10))
    # Time travel by Iceberg snapshot and by Delta version land on the same rows.
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 50), snapshot_id=appended.iceberg_snapshot_id, delta_version=appended.delta_version)
    assert_all_readers_agree(lh, spark, duck, ident, expected(0, 30), snapshot_id=created.iceberg_snapshot_id, delta_version=created.delta_version)
    history = lh.history(ident)
    assert [h["delta_version"] for h in history] == [replaced.delta_version, appended.delta_version, created.delta_version]
    assert ident in lh.table_names()

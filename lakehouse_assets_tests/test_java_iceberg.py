"""Java Iceberg (the reference implementation, jars built from PyPI packages) reads what this project writes."""

from __future__ import annotations

import zipfile

import pytest
from pyspark.sql import functions as F

from lakehouse_assets import MergeOptions
from lakehouse_assets.core.read import duckdb_readers

from . import java_iceberg
from .conftest import rows_of
from .test_write_modes import events

# The Java Iceberg runtime exists here for Spark 3.5 only (java_iceberg.available).
pytestmark = pytest.mark.java_iceberg

COLUMNS = ["amount", "event_id", "event_time", "kind", "user_id"]


def _duck_rows(duck, metadata_location: str, snapshot_id: int) -> list[tuple]:
    scan = duckdb_readers.iceberg_scan_sql(metadata_location)[:-1] + f", snapshot_from_id={snapshot_id})"
    res = duck.execute(f"SELECT {', '.join(COLUMNS)} FROM {scan}")
    names = [d[0] for d in res.description]
    return rows_of([dict(zip(names, r)) for r in res.fetchall()], COLUMNS)


def test_java_iceberg_reads_our_table_like_duckdb(lh, spark, duck):
    r1 = lh.write(events(spark, 0, 600), "j.events", partition_by=["day(event_time)", "bucket(16, user_id)"])
    lh.write(events(spark, 600, 200), "j.events")
    # A merge replaces files (an overwrite snapshot with deletes), the case a reader is most likely to get wrong.
    changes = events(spark, 100, 50).withColumn("kind", F.lit("changed"))
    lh.write(changes, "j.events", mode="merge", merge=MergeOptions(keys=["event_id"]))
    table = lh.load("j.events")
    snapshot = table.current_snapshot().snapshot_id

    java_rows = rows_of(java_iceberg.read_metadata(spark, table.metadata_location).collect(), COLUMNS)
    duck_rows = _duck_rows(duck, table.metadata_location, snapshot)
    assert len(java_rows) == 800
    assert java_rows == duck_rows
    assert sum(r[3] == "changed" for r in java_rows) == 50

    # Time travel: Java Iceberg at the first snapshot sees what DuckDB sees there.
    old = rows_of(java_iceberg.read_metadata(spark, table.metadata_location, snapshot_id=r1.iceberg_snapshot_id).collect(), COLUMNS)
    assert old == _duck_rows(duck, table.metadata_location, r1.iceberg_snapshot_id)
    assert len(old) == 600

    # Java Iceberg plans with our partition values: a day + bucket predicate prunes to matching files only.
    day = java_iceberg.read_metadata(spark, table.metadata_location).filter("event_time >= '2024-01-02' AND event_time < '2024-01-03'")
    expected = [r for r in java_rows if r[2].startswith("2024-01-02")]
    assert rows_of(day.collect(), COLUMNS) == expected and expected


def test_shaded_jackson_is_fully_relocated():
    """The JVM loading these classes is proven by the read test above; here: nothing left unrelocated."""
    shaded = [j for j in java_iceberg.jars() if j.endswith(java_iceberg.SHADED_JACKSON_JAR)][0]
    with zipfile.ZipFile(shaded) as jar:
        names = jar.namelist()
        classes = [n for n in names if n.endswith(".class")]
        assert len(classes) > 500
        assert all(n.startswith("org/apache/iceberg/shaded/com/fasterxml/jackson/") for n in classes)
        assert "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory" in names
        for name in classes[:200] + [n for n in classes if n.endswith("/ObjectMapper.class")]:
            data = jar.read(name)
            # No reference to the unrelocated package survives (the shaded prefix contains it, so strip that first).
            stripped = data.replace(b"org/apache/iceberg/shaded/com/fasterxml/jackson/", b"").replace(b"org.apache.iceberg.shaded.com.fasterxml.jackson.", b"")
            assert b"com/fasterxml/jackson/" not in stripped and b"com.fasterxml.jackson." not in stripped, name

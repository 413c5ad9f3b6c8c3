"""Compaction's one-job rewrite (core/write/compaction_tasks.py) against Spark's shuffled rewrite it replaced:
the same rows, the same partitions and files, both formats agreeing, per partition transform."""

from __future__ import annotations

import importlib
import os
from collections import Counter
from types import SimpleNamespace

import pytest

from lakehouse_assets.core.write import compaction_tasks

from .conftest import _norm, assert_all_readers_agree

compaction_module = importlib.import_module("lakehouse_assets.core.maintenance.compaction")  # the package exports a function of that name

# Null partition sources, sentinel dates, nested columns, decimals and strings beside every transform.
SOURCE = """
SELECT id,
       CASE WHEN id % 5 = 0 THEN NULL ELSE CAST(id % 3 AS STRING) END AS cat,
       CASE WHEN id = 7 THEN DATE'0001-01-01' WHEN id = 8 THEN DATE'9999-12-31' ELSE DATE_ADD(DATE'2023-03-19', CAST(id % 4 AS INT)) END AS d,
       TIMESTAMP'2024-01-01 05:00:00' + make_interval(0, 0, 0, 0, CAST(id * 7 AS INT), 0, 0) AS ts,
       CAST(id * 3.5 AS DECIMAL(10, 2)) AS dec, CAST(id * 3 AS INT) AS i, CONCAT(CHR(97 + id % 4), 'x', id) AS s,
       named_struct('a', id, 'b', array(CAST(id AS STRING), 'z')) AS nested
FROM range({lo}, {hi})
"""
TERMS = [["cat"], ["d"], ["day(ts)"], ["month(d)"], ["bucket(4, id)"], ["bucket(4, s)"], ["truncate(10, i)"], ["truncate(1, s)"],
         ["truncate(1000, dec)"], ["cat", "month(ts)"], []]


def _shape(lh, spark, name):
    table = lh.load(name)
    files = [t.file for t in table.scan().plan_files()]
    per_partition = sorted(Counter(str(f.partition) for f in files).items())
    rows = sorted((tuple(_norm(v) for _, v in sorted(r.asDict(recursive=True).items())) for r in lh.read(spark, name).collect()), key=repr)
    return per_partition, sum(f.record_count for f in files), rows


@pytest.mark.smoke
@pytest.mark.parametrize("terms", TERMS, ids=["+".join(t) or "unpartitioned" for t in TERMS])
def test_the_one_job_compaction_writes_what_the_shuffled_compaction_writes(lh, spark, duck, monkeypatch, terms):
    one_job = []
    real = compaction_tasks.compact_in_one_job
    monkeypatch.setattr(compaction_module, "compact_in_one_job", lambda *a, **k: (lambda out: one_job.append(out is not None) or out)(real(*a, **k)))
    results = {}
    for road in ("one job", "shuffled"):
        name = f"ct.c_{'_'.join(''.join(ch for ch in t if ch.isalnum()) for t in terms) or 'none'}_{road.replace(' ', '_')}"
        for lo in (0, 12, 24):  # three appends: up to three small files per partition
            lh.write(spark.sql(SOURCE.format(lo=lo, hi=lo + 12)), name, partition_by=terms)
        before = _shape(lh, spark, name)
        with monkeypatch.context() as m:
            if road == "shuffled":
                m.setattr(compaction_module, "compact_in_one_job", lambda *a, **k: None)
            r = lh.maintain(name, "compaction", spark=spark, compaction_min_input_files=2)
        assert r["committed"] and r["files_rewritten"] > r["files_added"], r
        after = _shape(lh, spark, name)
        # Rows unchanged; each compacted partition now one file; partitions (records) as before.
        assert after[1:] == before[1:] and [p for p, _ in after[0]] == [p for p, _ in before[0]]
        assert all(n == 1 for _, n in after[0]), after[0]
        results[road] = after
        if road == "one job":
            assert_all_readers_agree(lh, spark, duck, name, after[2])
    assert one_job == [True]
    assert results["one job"] == results["shuffled"]


def test_a_failing_compaction_task_leaves_the_table_and_its_files_as_they_were(lh, spark):
    name = "ct.failing"
    for lo in (0, 12, 24):
        lh.write(spark.sql(SOURCE.format(lo=lo, hi=lo + 12)), name, partition_by=["cat"])
    table = lh.load(name)
    snapshot = table.current_snapshot().snapshot_id
    root = table.location().removeprefix("file://")
    on_disk = {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs}
    # One input file gone from storage (as after a bad manual cleanup): its task fails mid-job.
    victim = next(t.file.file_path for t in table.scan().plan_files() if t.file.partition[0] == "1")
    os.remove(victim.removeprefix("file://"))
    with pytest.raises(Exception) as err:
        lh.maintain(name, "compaction", spark=spark, compaction_min_input_files=2)
    assert "ct.failing" in str(err.value)
    assert lh.load(name).current_snapshot().snapshot_id == snapshot
    left = {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs}
    assert left == on_disk - {victim.removeprefix("file://")}  # every file the job wrote was removed again


def test_bins_are_about_the_target_size_and_none_is_small():
    def files(*sizes):
        return [SimpleNamespace(file_size_in_bytes=s, file_path=f"f{i}") for i, s in enumerate(sizes)]

    def sizes(bins):
        return sorted(sum(f.file_size_in_bytes for f in b) for b in bins)

    assert [[f.file_size_in_bytes for f in b] for b in compaction_tasks._bin_pack(files(10, 20, 30), 100)] == [[30, 20, 10]]
    # 130 bytes for a target of 100: one file of 130, not two small ones of 70 and 60 (the next run would redo them).
    assert sizes(compaction_tasks._bin_pack(files(*[10] * 13), 100)) == [130]
    bins = compaction_tasks._bin_pack(files(*[10] * 17), 100)  # 170: two of 90 and 80
    assert sizes(bins) == [80, 90] and sorted(f.file_path for b in bins for f in b) == sorted(f"f{i}" for i in range(17))
    # 350 in files of 70: three bins, and the odd file alone; it stays the partition's one small file, which
    # a compaction (2 small files at least) leaves be.
    assert sizes(compaction_tasks._bin_pack(files(70, 70, 70, 70, 70), 100)) == [70, 140, 140]
    for total in range(1, 1000):  # every output at least 0.82 of the target once there is a target's worth
        out = sizes(compaction_tasks._bin_pack(files(*[1] * total), 100))
        assert sum(out) == total and (total < 100 or min(out) >= 82) and max(out) <= 165, (total, out)


@pytest.mark.smoke
def test_a_compacted_partition_is_not_compacted_again(lh, spark):
    """1.2 targets of small files become one file, not two small ones that every later run would rewrite."""
    name = "ct.settles"
    rows = 5_800  # ~0.4 MB of hex text per append
    for i in range(3):
        lh.write(spark.range(i * rows, (i + 1) * rows, numPartitions=1).selectExpr("id", "sha2(CAST(id AS STRING), 512) AS h", "'a' AS p"), name, partition_by=["p"])
    sizes = [t.file.file_size_in_bytes for t in lh.load(name).scan().plan_files()]
    assert len(sizes) == 3 and 1.05 * 2**20 < sum(sizes) < 1.5 * 2**20, sizes
    first = lh.maintain(name, "compaction", spark=spark, compaction_target_mb=1)
    assert first["committed"] and first["files_rewritten"] == 3 and first["files_added"] == 1, first
    again = lh.maintain(name, "compaction", spark=spark, compaction_target_mb=1)
    assert not again["committed"] and again["files_rewritten"] == 0, again


def test_int96_timestamps_of_other_engines_read_as_written(tmp_path):
    """Spark and Hive wrote INT96 timestamps; read as nanoseconds they wrap outside 1677-2262."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    from lakehouse_assets.core.io.storage import StorageConfig
    from lakehouse_assets.core.read.reader import ParquetFileReader, path_batches
    from lakehouse_assets.core.spark.compat import arrow_schema as to_arrow_schema

    values = [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59), dt.datetime(2024, 5, 1, 12, 0, 0, 123456)]
    path = tmp_path / "int96.parquet"
    # Written as INT96 from microseconds (the file holds Julian day + nanoseconds of day, as Spark writes them).
    pq.write_table(pa.table({"id": [1, 2, 3], "ts": pa.array(values, pa.timestamp("us"))}), path, use_deprecated_int96_timestamps=True)
    assert str(pq.ParquetFile(path).schema.column(1).physical_type) == "INT96"
    schema = to_arrow_schema(StructType([StructField("id", LongType()), StructField("ts", TimestampType())]))
    reader = ParquetFileReader(StorageConfig(), schema)
    out = pa.Table.from_batches(list(reader(path_batches(f"file://{path}"))))
    assert [v.replace(tzinfo=None) for v in out.column("ts").to_pylist()] == values


def test_a_wrong_partition_key_in_the_one_job_compaction_fails_the_formats_agree_check(lh, spark, monkeypatch):
    """Planted: the one-job road takes each file's key from its partition record; were that key off by one,
    both formats would agree with each other but not with the rows, and verify must say so."""
    from lakehouse_assets.core.write.partition_keys import PartitionKeyer

    name = "ct.planted"
    for lo in (0, 12, 24):
        lh.write(spark.sql(SOURCE.format(lo=lo, hi=lo + 12)), name, partition_by=["truncate(10, i)"])
    assert lh.verify(name)["agree"]
    real = PartitionKeyer.key_of_partition
    monkeypatch.setattr(PartitionKeyer, "key_of_partition", lambda self, values: real(self, tuple(v + 10 for v in values)))
    r = lh.maintain(name, "compaction", spark=spark, compaction_min_input_files=2)
    assert r["committed"], r
    report = lh.verify(name)
    assert not report["agree"] and report["differences"], report

"""The write task's fanout: rows arrive clustered by partition key but unsorted (no Spark sort); one file per key."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

from lakehouse_assets.core.io.storage import StorageConfig
from lakehouse_assets.core.schema.type_mapping import arrow_file_schema
from lakehouse_assets.core.write import parquet_files, partition_keys

SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "region", IntegerType()), NestedField(3, "score", DoubleType()), NestedField(4, "name", StringType()))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"), PartitionField(3, 1001, IdentityTransform(), "score"))
KEYS = (f"{partition_keys.PARTITION_VALUE_PREFIX}0", f"{partition_keys.PARTITION_VALUE_PREFIX}1")


def _batches(rows: list[tuple], size: int) -> list[pa.RecordBatch]:
    """Rows (id, region, score, name) as the write task receives them: the table's columns plus the value columns."""
    ids, regions, scores, names = zip(*rows)
    table = pa.table({
        "id": pa.array(ids, pa.int64()), "region": pa.array(regions, pa.int32()), "score": pa.array(scores, pa.float64()),
        "name": pa.array(names, pa.string()), KEYS[0]: pa.array(regions, pa.int32()), KEYS[1]: pa.array(scores, pa.float64()),
    })
    return table.to_batches(max_chunksize=size)


def _write(tmp_path, batches) -> list[dict]:
    keyer = partition_keys.PartitionKeyer(SCHEMA.model_dump_json(), SPEC.model_dump_json(), ())
    w = parquet_files.FileWriter(f"file://{tmp_path}", "w1", arrow_file_schema(SCHEMA), StorageConfig(), 1 << 30, key_columns=KEYS, keyer=keyer)
    return [r for b in w(iter(batches)) for r in b.to_pylist()]


def _rows_of(tmp_path, written) -> dict[tuple, list[int]]:
    out = {}
    for f in written:
        table = pq.read_table(tmp_path / f["path"])
        key = tuple(partition_keys.decode_partition_value(v) for v in json.loads(f["partition_key"])["values"])
        assert key not in out, f"two files for partition {key}"
        assert f["record_count"] == table.num_rows
        out[key] = sorted(table.column("id").to_pylist())
        assert set(table.column("region").to_pylist()) <= {key[0]}
    return out


def test_interleaved_keys_give_one_file_per_key_with_every_row(tmp_path):
    nan = float("nan")
    keys = [(0, 1.5), (1, 1.5), (None, 1.5), (0, None), (2, nan), (1, 1.5)]  # nulls and NaN are keys like others
    rows = [(i, *keys[i % len(keys)], f"n{i}") for i in range(1000)]
    written = _write(tmp_path, _batches(rows, 64))  # every batch mixes keys
    got = _rows_of(tmp_path, written)
    assert len(written) == 5
    want: dict = {}
    for i, region, score, _ in rows:
        want.setdefault((region, "nan" if score != score else score), []).append(i)
    assert {(k[0], "nan" if isinstance(k[1], float) and k[1] != k[1] else k[1]): v for k, v in got.items()} == want


def test_sorted_input_still_gives_one_file_per_key(tmp_path):
    rows = sorted([(i, i % 3, 0.5, "x") for i in range(300)], key=lambda r: r[1])
    got = _rows_of(tmp_path, _write(tmp_path, _batches(rows, 50)))
    assert got == {(r, 0.5): [i for i in range(300) if i % 3 == r] for r in range(3)}


def test_open_files_are_bounded(tmp_path, monkeypatch):
    """Beyond MAX_OPEN_FILES keys in one task the oldest file is closed: more files, every row kept once."""
    monkeypatch.setattr(parquet_files, "MAX_OPEN_FILES", 4)
    monkeypatch.setattr(parquet_files, "STAGE_BYTES", 1)  # every batch grouped alone, so keys come back after their file closed
    rows = [(i, i % 10, 0.0, "x") for i in range(200)]
    written = _write(tmp_path, _batches(rows, 20))
    assert len(written) > 10
    ids = sorted(i for f in written for i in pq.read_table(tmp_path / f["path"]).column("id").to_pylist())
    assert ids == list(range(200))


def test_buffered_bytes_are_bounded(tmp_path, monkeypatch):
    """Above FANOUT_PENDING_BYTES buffered over all open files, the largest buffers become row groups."""
    monkeypatch.setattr(parquet_files, "FANOUT_PENDING_BYTES", 4096)
    monkeypatch.setattr(parquet_files, "STAGE_BYTES", 1)
    rows = [(i, i % 2, 0.0, "y" * 50) for i in range(2000)]
    written = _write(tmp_path, _batches(rows, 100))
    assert len(written) == 2
    for f in written:
        meta = pq.ParquetFile(tmp_path / f["path"]).metadata
        assert meta.num_row_groups > 1 and meta.num_rows == 1000


def test_interleaved_batches_are_grouped_a_stage_at_a_time(tmp_path, monkeypatch):
    """Batches are grouped a stage (STAGE_BYTES) at a time, not one by one: one sort for many batches, and each
    key's rows of a stage reach its file as one run."""
    calls = []
    group = parquet_files.group_by_columns
    monkeypatch.setattr(parquet_files, "group_by_columns", lambda batch, *a: calls.append(batch.num_rows) or group(batch, *a))
    rows = [(i, i % 3, 0.0, "x") for i in range(600)]
    want = {(r, 0.0): list(range(r, 600, 3)) for r in range(3)}
    assert _rows_of(tmp_path, _write(tmp_path, _batches(rows, 30))) == want
    assert calls == [600]  # 20 batches, one stage
    calls.clear()
    monkeypatch.setattr(parquet_files, "STAGE_BYTES", 1)  # a batch per stage: the same files
    assert _rows_of(tmp_path / "one", _write(tmp_path / "one", _batches(rows, 30))) == want
    assert calls == [30] * 20


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_batch_sizes(tmp_path, size):
    rows = [(i, (i * 7) % 5, 2.0, "z") for i in range(100)]
    got = _rows_of(tmp_path, _write(tmp_path, _batches(rows, size)))
    assert got == {(r, 2.0): [i for i in range(100) if (i * 7) % 5 == r] for r in range(5)}


def test_the_keyer_path_splits_a_sorted_batch_into_runs_of_one_key():
    """The fallback path (partition keys computed by pyiceberg in Python, input sorted by Spark): runs of one key,
    the key column dropped, rows in order."""
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3, 4, 5, 6], pa.int64()), pa.array(["a", "a", "b", "c", "c", "c"])], names=["id", partition_keys.PARTITION_KEY_COLUMN]
    )
    runs = parquet_files.split_by_key(batch, 1)
    assert [(key, part.column(0).to_pylist(), part.schema.names) for key, part in runs] == [
        ("a", [1, 2], ["id"]), ("b", [3], ["id"]), ("c", [4, 5, 6], ["id"]),
    ]
    assert parquet_files.split_by_key(batch.slice(0, 0), 1) == []
    assert [(k, p.num_rows) for k, p in parquet_files.split_by_key(batch.slice(2, 1), 1)] == [("b", 1)]


def test_a_write_task_imports_no_pyiceberg_or_deltalake():
    """Each fresh Python worker imports the writer's module before its first batch: pyarrow only (pyiceberg's
    partitioning and schema modules would add a tenth of a second to every Dagster step's write)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import lakehouse_assets.core.write.parquet_files\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('pyiceberg', 'deltalake', 'pyspark'))}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"

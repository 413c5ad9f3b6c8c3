"""The Delta deletion-vector codec (core/formats/delta/deletion_vectors.py), checked against independent readers.

The reference bytes are a vector file Delta Lake on Spark wrote (delta-kernel-rs's test table `table-with-dv-small`:
rows 0 and 9 deleted); the readers are delta-kernel-rs inside DuckDB's delta extension and delta-rs's kernel.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaProtocolError

from lakehouse_assets.core.errors import DeletionVectorError
from lakehouse_assets.core.formats.delta import deletion_vectors as dv
from lakehouse_assets.core.io.storage import StorageConfig

from .test_import import inline_deletion_vector

SPARK_FILE = bytes.fromhex("0100000024d1d339640100000000000000000000003a300000010000000000010010000000000009002a671846")
SPARK_DESCRIPTOR = {"storageType": "u", "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA", "offset": 1, "sizeInBytes": 36, "cardinality": 2}
STORAGE = StorageConfig()


def test_the_file_of_a_vector_is_byte_for_byte_what_delta_lake_on_spark_writes(tmp_path):
    assert dv.file_bytes([0, 9]) == SPARK_FILE
    d = dv.Descriptor.from_json(SPARK_DESCRIPTOR)
    assert d.file_uri(f"file://{tmp_path}") == f"file://{tmp_path}/deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    (tmp_path / "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin").write_bytes(SPARK_FILE)
    assert dv.read_vector(STORAGE, f"file://{tmp_path}", SPARK_DESCRIPTOR).to_pylist() == [0, 9]
    assert dv.Descriptor.from_json(SPARK_DESCRIPTOR).to_json() == SPARK_DESCRIPTOR


def test_positions_round_trip_through_files_and_inline_vectors_across_32_bit_buckets(tmp_path):
    positions = pa.array(sorted({0, 1, 2, 65535, 65536, 70000, *range(100_000, 180_000), 2**32 - 1, 2**32, 2**33 + 7}), pa.int64())
    d, uri = dv.write_vector(STORAGE, f"file://{tmp_path}", positions, "file:///wh/t/_deletes/a-deletes.parquet")
    assert uri == f"file://{tmp_path}/_deletes/deletion_vector_{dv.vector_uuid('file:///wh/t/_deletes/a-deletes.parquet')}.bin"
    assert (d.storage_type, d.offset, d.cardinality, d.path_or_inline_dv[: len(dv.PREFIX)]) == ("u", 1, len(positions), "_deletes")
    assert dv.read_vector(STORAGE, f"file://{tmp_path}", d.to_json()).equals(positions)
    absolute = dv.Descriptor("p", uri, d.size_in_bytes, d.cardinality, 1)
    assert dv.read_vector(STORAGE, "file:///elsewhere", absolute).equals(positions)
    data = dv.serialize(positions)
    inline = dv.Descriptor("i", dv.z85encode(data), len(data), len(positions))
    assert dv.read_vector(STORAGE, "file:///unused", inline).equals(positions)
    assert dv.read_vector(STORAGE, "file:///unused", inline_deletion_vector([1, 2])).to_pylist() == [1, 2]  # hand-encoded, as Spark inlines
    assert dv.z85encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"  # the Z85 spec's test vector


def test_a_vector_that_does_not_match_its_descriptor_is_refused_naming_its_file(tmp_path):
    root = f"file://{tmp_path}"
    d, uri = dv.write_vector(STORAGE, root, pa.array([3, 4], pa.int64()), "k")
    path = tmp_path / "_deletes" / uri.rsplit("/", 1)[1]
    with pytest.raises(DeletionVectorError, match=r"deletion_vector_.*\.bin: holds 2 position\(s\), its descriptor says cardinality 3"):
        dv.read_vector(STORAGE, root, {**d.to_json(), "cardinality": 3})
    with pytest.raises(DeletionVectorError, match=r"deletion_vector_.*\.bin: size 36 at offset 1, its descriptor says sizeInBytes 37"):
        dv.read_vector(STORAGE, root, {**d.to_json(), "sizeInBytes": 37})
    body = bytearray(path.read_bytes())
    body[-6] ^= 0xFF  # a bit of the bitmap flipped, its checksum left
    path.write_bytes(bytes(body))
    with pytest.raises(DeletionVectorError, match=rf"{uri}: CRC-32 mismatch"):
        dv.read_vector(STORAGE, root, d)
    path.unlink()
    with pytest.raises(DeletionVectorError, match=rf"Deletion vector file {uri} is missing"):
        dv.read_vector(STORAGE, root, d)


def _table_with_a_vector(root, deleted: list[int]) -> dv.Descriptor:
    """delta-rs writes ids 0..9 in one file; then a commit (written as Delta Lake writes a DELETE) re-adds it with a vector."""
    write_deltalake(str(root), pa.table({"id": list(range(10))}))
    (add,) = [json.loads(line)["add"] for line in (root / "_delta_log" / "00000000000000000000.json").read_text().splitlines() if '"add"' in line]
    d, _ = dv.write_vector(STORAGE, f"file://{root}", pa.array(deleted, pa.int64()), "key")
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [dv.FEATURE], "writerFeatures": [dv.FEATURE]}
    lines = [{"protocol": protocol}, {"remove": {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}},
             {"add": {**add, "dataChange": True, "deletionVector": d.to_json()}}, {"commitInfo": {"operation": "DELETE"}}]
    (root / "_delta_log" / "00000000000000000001.json").write_text("".join(json.dumps(a) + "\n" for a in lines))
    return d


def test_delta_readers_skip_the_rows_of_a_vector_written_here(tmp_path, duck):
    root = tmp_path / "t"
    _table_with_a_vector(root, [1, 3, 5])
    assert sorted(r[0] for r in duck.execute(f"SELECT id FROM delta_scan('{root}')").fetchall()) == [0, 2, 4, 6, 7, 8, 9]
    delta = DeltaTable(str(root))
    assert pa.table(delta.deletion_vectors()).column("selection_vector").to_pylist() == [[i not in (1, 3, 5) for i in range(10)]]
    assert sorted(pa.table(delta.scan()).column("id").to_pylist()) == [0, 2, 4, 6, 7, 8, 9]
    # delta-rs's pyarrow reader cannot apply vectors: it refuses the table, loudly, rather than return deleted rows
    with pytest.raises(DeltaProtocolError, match=r"reader features.*deletionVectors.*not yet supported"):
        delta.to_pyarrow_table()

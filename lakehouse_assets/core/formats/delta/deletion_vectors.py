"""Delta deletion vectors: their bytes, their files, their descriptors and the add/remove actions that carry them.

delta-rs (1.6.6) reads deletion vectors but writes none, and its `AddAction`/`RemoveAction` have no field for
one, so this module is the third place the project writes Delta log JSON itself (beside column mapping and
the change-data commits), following the Delta protocol's "Deletion Vectors" and "Deletion Vector Format":

* the bitmap: the magic number 1681511377 (little-endian), then a 64-bit Roaring bitmap in the portable
  serialization, which pyroaring's `BitMap64.serialize()` writes (8-byte bucket count, then per bucket a
  4-byte key and a portable 32-bit bitmap) and delta-kernel-rs's `RoaringTreemap` reads;
* the file (storageType `u` / `p`): format byte 1, then per vector [size of magic+bitmap, 4 B big-endian]
  [magic + bitmap][CRC-32 of magic + bitmap, 4 B big-endian]; the descriptor's offset (1) points at the size;
* inline (storageType `i`): the magic + bitmap, Z85-encoded in the log (zero-padded to 4 bytes; sizeInBytes
  is the unpadded length).

Vector files live in the table's `_deletes/` folder (the `u` path prefix), beside Iceberg's position-delete
files; a vector's uuid is derived from the Iceberg delete file it mirrors, so a retried mirror writes the
same file under the same name.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
from pyroaring import BitMap64

from ...errors import DeletionVectorError
from ...io.storage import StorageConfig, delta_uri_path, join_uri
from .checkpoint_state import read_adds_of

MAGIC = 1681511377  # the Delta protocol's RoaringBitmapArray (portable) magic number
FORMAT_VERSION = 1
PREFIX = "_deletes"  # the `u` path prefix: vector files sit in <root>/_deletes/, hidden from VACUUM and orphan cleanup
FEATURE = "deletionVectors"
ENABLE_PROPERTY = "delta.enableDeletionVectors"
_UUID_NAMESPACE = uuid.UUID("5b1d6a8e-3c1f-4f57-9d0e-6f1c2a9b7e41")
_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_TO_Z85, _FROM_Z85 = bytes.maketrans(_B85, _Z85), bytes.maketrans(_Z85, _B85)


def z85encode(data: bytes) -> str:
    """Z85 (the Delta protocol's base85 variant): the stdlib's base85 in ZeroMQ's alphabet; zero-padded to 4 bytes."""
    return base64.b85encode(data + b"\0" * (-len(data) % 4)).translate(_TO_Z85).decode("ascii")


def z85decode(text: str) -> bytes:
    return base64.b85decode(text.encode("ascii").translate(_FROM_Z85))


def serialize(positions: pa.Array | list[int]) -> bytes:
    """The magic number and the portable 64-bit Roaring bitmap of `positions` (row indexes in a data file)."""
    values = np.asarray(positions.cast(pa.int64()) if isinstance(positions, pa.Array) else positions, dtype=np.int64)
    if len(values) and values.min() < 0:
        raise ValueError("a deletion vector holds row positions, which are never negative")
    bitmap = BitMap64(values.astype(np.uint64))
    bitmap.run_optimize()
    return struct.pack("<I", MAGIC) + bitmap.serialize()


def deserialize(data: bytes, where: str) -> pa.Array:
    """The sorted int64 positions of a magic-number-prefixed bitmap (`where` names it in errors)."""
    if len(data) < 4 or struct.unpack("<I", data[:4])[0] != MAGIC:
        found = struct.unpack("<I", data[:4])[0] if len(data) >= 4 else None
        raise DeletionVectorError(f"Deletion vector {where}: magic number {found} where the Delta protocol's {MAGIC} was expected (not a portable RoaringBitmapArray)")
    try:
        bitmap = BitMap64.deserialize(data[4:])
    except (ValueError, OverflowError) as e:
        raise DeletionVectorError(f"Deletion vector {where}: its bitmap cannot be decoded ({e})") from e
    return pa.array(np.frombuffer(bitmap.to_array(), dtype=np.uint64).astype(np.int64), pa.int64())


def file_bytes(positions: pa.Array | list[int]) -> bytes:
    """A deletion-vector file holding one vector: format byte, [size BE][magic + bitmap][CRC-32 BE]."""
    data = serialize(positions)
    return bytes([FORMAT_VERSION]) + struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))


@dataclass(frozen=True)
class Descriptor:
    """The protocol's `DeletionVectorDescriptor`."""

    storage_type: str  # u: relative to the table root, derived from a uuid; p: absolute path; i: inline
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Descriptor:
        return cls(d["storageType"], d["pathOrInlineDv"], int(d["sizeInBytes"]), int(d["cardinality"]), d.get("offset"))

    def to_json(self) -> dict[str, Any]:
        out = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            out["offset"] = self.offset
        return {**out, "sizeInBytes": self.size_in_bytes, "cardinality": self.cardinality}

    @property
    def unique_id(self) -> str:
        """What Delta readers key a logical file by, with its path."""
        return f"{self.storage_type}{self.path_or_inline_dv}" + (f"@{self.offset}" if self.offset is not None else "")

    def file_uri(self, root_uri: str) -> str | None:
        """The URI of the vector's file (None for an inline vector)."""
        if self.storage_type == "p":
            return self.path_or_inline_dv
        if self.storage_type == "u":
            prefix, encoded = self.path_or_inline_dv[:-20], self.path_or_inline_dv[-20:]
            name = f"deletion_vector_{uuid.UUID(bytes=z85decode(encoded))}.bin"
            return join_uri(root_uri, prefix, name) if prefix else join_uri(root_uri, name)
        if self.storage_type == "i":
            return None
        raise DeletionVectorError(f"Deletion vector {self.path_or_inline_dv!r}: storage type {self.storage_type!r} is none of the Delta protocol's u, p, i")


def vector_uuid(key: str) -> uuid.UUID:
    """The uuid of the vector mirroring the Iceberg delete file at `key` (its path): the same on every retry."""
    return uuid.uuid5(_UUID_NAMESPACE, key)


def relative_descriptor(vector: uuid.UUID, size_in_bytes: int, cardinality: int) -> Descriptor:
    return Descriptor("u", PREFIX + z85encode(vector.bytes), size_in_bytes, cardinality, offset=1)


def write_vector(storage: StorageConfig, root_uri: str, positions: pa.Array, key: str) -> tuple[Descriptor, str]:
    """Write the vector file of `positions` under `<root>/_deletes/`, named after `key`; its descriptor and URI."""
    body = file_bytes(positions)
    descriptor = relative_descriptor(vector_uuid(key), len(body) - 9, len(positions))
    uri = descriptor.file_uri(root_uri)
    fs, path = storage.filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(body)
    return descriptor, uri


def read_vector(storage: StorageConfig, root_uri: str, descriptor: Descriptor | dict) -> pa.Array:
    """The positions a vector deletes (sorted, distinct, int64), from its file or the log; checks size, magic, CRC
    and cardinality, raising DeletionVectorError naming the vector's file on any mismatch."""
    d = descriptor if isinstance(descriptor, Descriptor) else Descriptor.from_json(descriptor)
    uri = d.file_uri(root_uri)
    if uri is None:
        data = z85decode(d.path_or_inline_dv)[: d.size_in_bytes]
        where = f"inline {d.path_or_inline_dv[:24]}..."
    else:
        data, where = _from_file(storage, uri, d), uri
    positions = deserialize(data, where)
    if len(positions) != d.cardinality:
        raise DeletionVectorError(f"Deletion vector {where}: holds {len(positions)} position(s), its descriptor says cardinality {d.cardinality}")
    return positions


def _from_file(storage: StorageConfig, uri: str, d: Descriptor) -> bytes:
    fs, path = storage.filesystem(uri)
    try:
        with fs.open_input_file(path) as f:
            head = f.read(1)
            start = d.offset if d.offset is not None else 1
            f.seek(start)
            block = f.read(4 + d.size_in_bytes + 4)
    except FileNotFoundError as e:
        raise DeletionVectorError(f"Deletion vector file {uri} is missing") from e
    if head != bytes([FORMAT_VERSION]):
        raise DeletionVectorError(f"Deletion vector file {uri}: format version {head!r} where 1 was expected")
    if len(block) < 8 + d.size_in_bytes or struct.unpack(">I", block[:4])[0] != d.size_in_bytes:
        found = struct.unpack(">I", block[:4])[0] if len(block) >= 4 else None
        raise DeletionVectorError(f"Deletion vector file {uri}: size {found} at offset {start}, its descriptor says sizeInBytes {d.size_in_bytes}")
    data, (crc,) = block[4 : 4 + d.size_in_bytes], struct.unpack(">I", block[4 + d.size_in_bytes :])
    if zlib.crc32(data) != crc:
        raise DeletionVectorError(f"Deletion vector file {uri}: CRC-32 mismatch (stored {crc}, computed {zlib.crc32(data)})")
    return data


def add_json(add: Any, descriptor: Descriptor | None) -> dict:
    """The `add` action of a delta-rs `AddAction`, carrying `descriptor` (None: no rows deleted)."""
    out = {"path": delta_uri_path(add.path), "partitionValues": dict(add.partition_values), "size": add.size,
           "modificationTime": add.modification_time, "dataChange": add.data_change, "stats": add.stats}
    if descriptor is not None:
        out["deletionVector"] = descriptor.to_json()
    return {"add": out}


def remove_json(remove: Any, descriptor: Descriptor | None) -> dict:
    """The `remove` action of a delta-rs `RemoveAction` for the logical file (path, `descriptor`): readers key
    files by path and vector, so a remove must name the vector its add carried."""
    out = {"path": delta_uri_path(remove.path), "dataChange": remove.data_change, "deletionTimestamp": remove.deletion_timestamp,
           "extendedFileMetadata": True, "partitionValues": dict(remove.partition_values or {})}
    if remove.size is not None:
        out["size"] = remove.size
    if descriptor is not None:
        out["deletionVector"] = descriptor.to_json()
    return {"remove": out}


# Legacy protocol versions imply these writer features (the Delta protocol's table of them); delta-rs can write each.
_IMPLIED_WRITER = ((2, "appendOnly"), (2, "invariants"), (3, "checkConstraints"), (4, "changeDataFeed"), (5, "columnMapping"))


def protocol_with_vectors(protocol: Any) -> dict | None:
    """The `protocol` action that adds the `deletionVectors` reader and writer features to `protocol` (delta-rs's
    ProtocolVersions), keeping every feature it has or implies; None when it has them already.

    Written into the commit that carries the first vector: delta-rs's `alter.add_feature` would add a Delta version no
    Iceberg snapshot maps to, and drops the legacy features (changeDataFeed) of a table it moves to writer version 7."""
    readers, writers = list(protocol.reader_features or []), list(protocol.writer_features or [])
    if FEATURE in readers and FEATURE in writers:
        return None
    if protocol.min_writer_version < 7:
        writers = [name for version, name in _IMPLIED_WRITER if protocol.min_writer_version >= version]
    if protocol.min_reader_version < 3 and protocol.min_reader_version >= 2:
        readers = ["columnMapping"]
    return {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                         "readerFeatures": [*dict.fromkeys([*readers, FEATURE])], "writerFeatures": [*dict.fromkeys([*writers, FEATURE])]}}


def live_adds(storage: StorageConfig, root_uri: str, version: int, paths: set[str], vectors_only: bool = False) -> dict[str, dict]:
    """The `add` action that makes each of `paths` (relative, decoded) live at Delta `version`, with its
    `deletionVector`: delta-rs's API exposes no vector descriptors, so the log is replayed here for these paths only
    (the newest checkpoint at or before `version`, then the commit files after it). `vectors_only`: of the
    checkpoint, only the adds that carry a vector (the commits after it are read whole)."""
    fs, log = storage.filesystem(join_uri(root_uri, "_delta_log"))
    names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(log))]
    checkpoints = [n for n in names if ".checkpoint." in n and n.endswith(".parquet") and int(n[:20]) <= version]
    start, state = 0, {}
    if checkpoints:
        start = max(int(n[:20]) for n in checkpoints)
        for part in sorted(n for n in checkpoints if int(n[:20]) == start):
            state.update(read_adds_of(storage, join_uri(root_uri, f"_delta_log/{part}"), paths, vectors_only))
        start += 1
    for v in range(start, version + 1):
        with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
            actions = [json.loads(line) for line in f.read().decode().split("\n") if line]  # JSON lines end at "\n" only: splitlines() also breaks at U+2028, U+0085... inside a string value
        # A commit's actions are a set, not a sequence: its removes apply before its adds (a file re-added with a new vector).
        for a in actions:
            if "remove" in a:
                state.pop(unquote(a["remove"]["path"]), None)
        state.update({unquote(a["add"]["path"]): a["add"] for a in actions if "add" in a and unquote(a["add"]["path"]) in paths})
    return state


def added_paths(storage: StorageConfig, root_uri: str, versions: list[int]) -> set[str]:
    """The paths (relative, decoded) the `add` actions of the given Delta versions name: the files a version added or
    re-added with a new vector. Reads those commit files only."""
    fs, log = storage.filesystem(join_uri(root_uri, "_delta_log"))
    out: set[str] = set()
    for v in versions:
        with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
            out |= {unquote(a["add"]["path"]) for a in map(json.loads, filter(None, f.read().decode().split("\n"))) if "add" in a}  # JSON lines end at "\n" only: splitlines() also breaks at U+2028, U+0085... inside a string value
    return out


def descriptor_of(add: dict) -> Descriptor | None:
    return Descriptor.from_json(add["deletionVector"]) if add.get("deletionVector") else None


def add_from_log(add: dict, descriptor: Descriptor | None, now: int) -> dict:
    """The `add` action that re-adds a logged file (same path, size, partition values and statistics) with `descriptor`.
    Its statistics describe every row of the file, deleted ones too: no longer tight bounds (the protocol's `tightBounds`)."""
    stats = add.get("stats")
    if descriptor is not None and stats:
        stats = json.dumps({**json.loads(stats), "tightBounds": False}, ensure_ascii=False)
    out = {"path": add["path"], "partitionValues": dict(add.get("partitionValues") or {}), "size": add["size"], "modificationTime": now,
           "dataChange": True, "stats": stats}
    if descriptor is not None:
        out["deletionVector"] = descriptor.to_json()
    return {"add": {k: v for k, v in out.items() if v is not None}}


def remove_from_log(add: dict, now: int, data_change: bool = True) -> dict:
    """The `remove` action of the logical file a logged `add` made live: its path and its vector."""
    out = {"path": add["path"], "dataChange": data_change, "deletionTimestamp": now, "extendedFileMetadata": True,
           "partitionValues": dict(add.get("partitionValues") or {}), "size": add.get("size")}
    if (d := descriptor_of(add)) is not None:
        out["deletionVector"] = d.to_json()
    return {"remove": {k: v for k, v in out.items() if v is not None}}

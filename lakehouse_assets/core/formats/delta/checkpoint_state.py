"""What a write and the formats-agree check need of a Delta log, read from its newest checkpoint without delta-rs.

delta-rs 1.6.6 loads a log by materialising every live file's entry with its statistics (its options to skip them
are deprecated and ignored): 550 MB at 1,000,000 files, held for as long as the table object lives. A write and
the check follow the log from a base (followed_log.py) and need of that base only its version, metadata, protocol
and schema, the transaction versions, and each live file's path and row count. Those are read here from the
checkpoint's Parquet with pyarrow, a batch at a time: the few rows holding metadata, protocol and transactions at
once (a write needs no more: their columns, 0.09 s over a checkpoint of 1,000,000 files), and of the adds, when the
check first asks for the live totals, only their row counts (the statistics struct's numRecords, 8 bytes a file,
where the table keeps one: `delta.checkpoint.writeStatsAsStruct`, set on the tables the lakehouse creates; else
parsed from the statistics JSON), and their paths only when a removed file must be looked up among them (about 50
bytes a live file).

Only a log whose newest checkpoint is a classic single-file one (`<version>.checkpoint.parquet`, as delta-rs and
Spark write by default) is read here; a multi-part or V2 checkpoint, sidecar files, or a log without a checkpoint
give None, and the caller loads the log with delta-rs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import Schema
from deltalake.table import ProtocolVersions

from ...io.storage import StorageConfig, join_uri

_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_OTHER_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")  # multi-part (`.checkpoint.<part>.<parts>.parquet`) or V2 (`.checkpoint.<uuid>.<ext>`)
_COMMIT = re.compile(r"^(\d{20})\.json$")
# The statistics' own numRecords: writers put it first; any other shape is parsed whole (a column may be named numRecords).
_LEADING_NUM_RECORDS = r'^\{\s*"numRecords"\s*:\s*(?P<n>\d+)\s*[,}]'
_BATCH = 8192  # rows a batch: what reading the checkpoint holds at once
_COUNT_BATCH = 1 << 17  # of row counts alone (16 bytes a row read): fewer batches, 2 MB at once
_BUFFER = 1 << 20


@dataclass(frozen=True)
class LogMetadata:
    """A metaData action's fields, named as delta-rs's `Metadata` names them."""

    id: str
    name: str | None
    description: str | None
    partition_columns: list[str]
    created_time: int | None
    configuration: dict[str, str]
    schema_string: str

    @classmethod
    def of(cls, action: dict[str, Any]) -> LogMetadata:
        """From a metaData action as JSON decodes it (maps as objects) or as pyarrow gives it (maps as pairs)."""
        configuration = action.get("configuration") or {}
        return cls(
            id=action["id"], name=action.get("name"), description=action.get("description"),
            partition_columns=list(action.get("partitionColumns") or []), created_time=action.get("createdTime"),
            configuration=dict(configuration.items() if isinstance(configuration, dict) else configuration),
            schema_string=action["schemaString"],
        )


def protocol_of(action: dict[str, Any]) -> ProtocolVersions:
    return ProtocolVersions(
        int(action["minReaderVersion"]), int(action["minWriterVersion"]),
        list(action["writerFeatures"]) if action.get("writerFeatures") is not None else None,
        list(action["readerFeatures"]) if action.get("readerFeatures") is not None else None,
    )


@dataclass
class CheckpointState:
    """The log at one version: its metadata, protocol and transaction versions, read at once, and its live files
    (raw path, row count), read from the checkpoint when first asked for (`adds`), or only their totals (`totals`):
    a write needs none of them, the formats-agree check their totals."""

    at_version: int
    log_metadata: LogMetadata
    log_protocol: ProtocolVersions
    transactions: dict[str, int]
    storage: StorageConfig = field(repr=False)
    checkpoint_uri: str = field(repr=False)
    # The commits applied since the checkpoint, in order, while its adds are not read yet: (added, gone).
    pending: tuple[tuple[dict[str, int | None], frozenset[str]], ...] = ()
    _adds: pa.Table | None = field(default=None, repr=False)
    _schema: Schema | None = field(default=None, repr=False)
    _totals: tuple[int, int, int] | None = field(default=None, repr=False)

    # The read side of delta-rs's DeltaTable that followed_log.py uses of its base.
    def version(self) -> int:
        return self.at_version

    def metadata(self) -> LogMetadata:
        return self.log_metadata

    def protocol(self) -> ProtocolVersions:
        return self.log_protocol

    def schema(self) -> Schema:
        if self._schema is None:
            self._schema = Schema.from_json(self.log_metadata.schema_string)
        return self._schema

    def transaction_version(self, app_id: str) -> int | None:
        return self.transactions.get(app_id)

    @property
    def adds(self) -> pa.Table:
        """path (as logged), num_records (None: the add carries no row count) of every live file at `version()`."""
        if self._adds is None:
            adds = read_adds(self.storage, self.checkpoint_uri)
            for added, gone in self.pending:
                adds = _applied(adds, added, gone)
            self._adds, self.pending = adds, ()
        return self._adds

    def totals(self) -> tuple[int, int, int]:
        """Live files, their rows, and files without a row count at `version()`: from the checkpoint's row counts alone
        while no commit is applied to it and its adds are not read (the path of every file is read only when asked)."""
        if self._adds is None and not self.pending:
            if self._totals is None:
                self._totals = read_totals(self.storage, self.checkpoint_uri)
            return self._totals
        return totals_of(self.adds.column("num_records"))

    def advanced(self, version: int, added: dict[str, int | None], gone: set[str], transactions: dict[str, int],
                 metadata: dict | None, protocol: dict | None) -> CheckpointState:
        """This state with the commits up to `version` applied: `gone` the paths removed or added again since, `added`
        the live paths they added, and the newest metaData and protocol among them."""
        loaded = self._adds is not None
        return CheckpointState(
            version, LogMetadata.of(metadata) if metadata else self.log_metadata,
            protocol_of(protocol) if protocol else self.log_protocol, {**self.transactions, **transactions},
            self.storage, self.checkpoint_uri, () if loaded else (*self.pending, (dict(added), frozenset(gone))),
            _applied(self._adds, added, gone) if loaded else None, None if metadata else self._schema,
        )


def _applied(adds: pa.Table, added: dict[str, int | None], gone: set[str] | frozenset[str]) -> pa.Table:
    if gone:
        adds = adds.filter(pc.invert(pc.is_in(adds.column("path"), value_set=pa.array(sorted(gone), pa.string()))))
    if added:
        adds = pa.concat_tables([adds, pa.table({"path": pa.array(list(added), pa.string()),
                                                 "num_records": pa.array(list(added.values()), pa.int64())})])
    return adds.combine_chunks()


def read_newest_checkpoint(storage: StorageConfig, root_uri: str) -> tuple[CheckpointState, int] | None:
    """The state at the log's newest checkpoint and the newest commit version listed in `_delta_log/`; None when the
    log has no checkpoint this module reads, or it cannot be read (the caller loads the log with delta-rs)."""
    try:
        return _read_newest(storage, root_uri)
    except Exception:  # noqa: BLE001 - this read saves memory and time; any doubt (a checkpoint being written, a shape not known here) leaves the log to delta-rs
        return None


def _read_newest(storage: StorageConfig, root_uri: str) -> tuple[CheckpointState, int] | None:
    fs, log_dir = storage.filesystem(join_uri(root_uri, "_delta_log"))
    from pyarrow import fs as pafs

    try:
        names = [info.base_name for info in fs.get_file_info(pafs.FileSelector(log_dir))]
    except FileNotFoundError:
        return None
    classic = [int(m.group(1)) for n in names if (m := _CLASSIC.match(n))]
    others = [int(m.group(1)) for n in names if not _CLASSIC.match(n) and (m := _OTHER_CHECKPOINT.match(n))]
    commits = [int(m.group(1)) for n in names if (m := _COMMIT.match(n))]
    if not classic or (others and max(others) >= max(classic)):
        return None
    version = max(classic)
    state = read_checkpoint(storage, join_uri(root_uri, f"_delta_log/{version:020d}.checkpoint.parquet"), version)
    return None if state is None else (state, max(commits, default=version))


@contextmanager
def _parquet(storage: StorageConfig, uri: str) -> Iterator[pq.ParquetFile]:
    # A page at a time (`buffer_size`): delta-rs writes a checkpoint as one uncompressed row group, and a column of a
    # million files' statistics read whole is 140 MB.
    fs, path = storage.filesystem(uri)
    with fs.open_input_file(path) as f:
        yield pq.ParquetFile(f, pre_buffer=False, buffer_size=_BUFFER)


def read_checkpoint(storage: StorageConfig, uri: str, version: int) -> CheckpointState | None:
    """The checkpoint's metadata, protocol and transaction rows (their columns only: a few MB to read at a million
    files); None for a V2 checkpoint (its files live in sidecars) or one that is not one table's state."""
    with _parquet(storage, uri) as parquet:
        columns = set(parquet.schema_arrow.names)
        if not {"add", "metaData", "protocol"} <= columns:
            return None
        small = [c for c in ("metaData", "protocol", "txn", "sidecar", "checkpointMetadata") if c in columns]
        found: dict[str, list] = {c: [] for c in small}
        for batch in parquet.iter_batches(batch_size=_BATCH, columns=small, use_threads=False):
            for name in small:
                column = batch.column(name)
                if column.null_count < len(column):
                    found[name].extend(column.filter(column.is_valid()).to_pylist())
    if found.get("sidecar") or found.get("checkpointMetadata") or len(found["metaData"]) != 1 or len(found["protocol"]) != 1:
        return None
    transactions = {t["appId"]: int(t["version"]) for t in found.get("txn", [])}
    return CheckpointState(version, LogMetadata.of(found["metaData"][0]), protocol_of(found["protocol"][0]), transactions, storage, uri)


def read_adds(storage: StorageConfig, uri: str) -> pa.Table:
    """Each add's path and row count, a batch at a time."""
    with _parquet(storage, uri) as parquet:
        paths, counts = _adds_read(parquet, with_paths=True)
    return pa.table({"path": paths, "num_records": counts})


def read_totals(storage: StorageConfig, uri: str) -> tuple[int, int, int]:
    """The checkpoint's live files, their rows, and files without a row count, reading the adds' row counts only (no path)."""
    with _parquet(storage, uri) as parquet:
        _, counts = _adds_read(parquet, with_paths=False)
    return totals_of(counts)


def totals_of(counts: pa.Array | pa.ChunkedArray) -> tuple[int, int, int]:
    """Files, rows, and files without a row count, of the live files' row counts (null: none known)."""
    return len(counts), pc.sum(counts).as_py() or 0, counts.null_count


def _adds_read(parquet: pq.ParquetFile, with_paths: bool) -> tuple[pa.Array | None, pa.Array]:
    """The adds' paths (when asked for) and row counts: the statistics struct's numRecords where the checkpoint has it
    (`delta.checkpoint.writeStatsAsStruct`, set on the tables the lakehouse creates: 8 bytes a file), and the statistics
    JSON (150 bytes a file, parsed) read in a second pass only when some add has no parsed count."""
    add_type = parquet.schema_arrow.field("add").type
    with_stats = "stats" in {f.name for f in add_type}
    parsed = "stats_parsed" in {f.name for f in add_type} and "numRecords" in {f.name for f in add_type.field("stats_parsed").type}
    # Which rows are adds, when no path is read: a required 8-byte field, or the counts themselves.
    marker = "add.size" if "size" in {f.name for f in add_type} else "add.path"
    wanted = ["add.path" if with_paths else marker] + (["add.stats_parsed.numRecords"] if parsed else [])
    paths, counts = [], []
    for adds in _add_batches(parquet, wanted, _BATCH if with_paths else _COUNT_BATCH):
        if with_paths:
            paths.append(pc.struct_field(adds, "path"))
        counts.append(pc.cast(pc.struct_field(adds, ["stats_parsed", "numRecords"]), pa.int64()) if parsed else pa.nulls(len(adds), pa.int64()))
    count = pa.concat_arrays(counts) if counts else pa.array([], pa.int64())
    if with_stats and count.null_count:
        from_json = [_num_records(pc.struct_field(adds, "stats")) for adds in _add_batches(parquet, ["add.stats"])]
        count = pc.coalesce(count, pa.concat_arrays(from_json)) if from_json else count
    return (pa.concat_arrays(paths) if paths else pa.array([], pa.string())) if with_paths else None, count


def _add_batches(parquet: pq.ParquetFile, columns: list[str], batch_size: int = _BATCH) -> Iterator[pa.StructArray]:
    for batch in parquet.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
        adds = batch.column("add")
        yield adds.filter(adds.is_valid())


def read_adds_of(storage: StorageConfig, uri: str, paths: set[str], vectors_only: bool = False) -> dict[str, dict[str, Any]]:
    """The whole add actions of `paths` (relative, decoded) in one checkpoint file, by path, as JSON-like dicts; with
    `vectors_only`, those carrying a deletion vector. Only those become Python objects: the rows are picked in Arrow a
    batch at a time (a path is stored URL-encoded, and one without a `%` is its own decoding), where a checkpoint of a
    million files would make a million dicts."""
    wanted = pa.array(sorted(paths), pa.string())
    out: dict[str, dict[str, Any]] = {}
    with _parquet(storage, uri) as parquet:
        for batch in parquet.iter_batches(batch_size=_BATCH, columns=["add"], use_threads=False):
            adds = batch.column("add")
            adds = adds.filter(adds.is_valid())
            if vectors_only:
                adds = adds.filter(pc.is_valid(pc.struct_field(adds, "deletionVector"))) if "deletionVector" in {f.name for f in adds.type} else adds.slice(0, 0)
            raw = pc.struct_field(adds, "path")
            for add in adds.filter(pc.or_(pc.is_in(raw, value_set=wanted), pc.match_substring(raw, "%"))).to_pylist():
                if (path := unquote(add["path"])) in paths:
                    out[path] = {**add, "partitionValues": dict(add["partitionValues"] or [])}
    return out


def _num_records(stats: pa.Array) -> pa.Array:
    """Each add's numRecords from its statistics JSON; null where it has none."""
    if not len(stats):
        return pa.array([], pa.int64())
    counts = pc.cast(pc.struct_field(pc.extract_regex(stats, _LEADING_NUM_RECORDS), [0]), pa.int64())
    missing = pc.and_(pc.is_null(counts), pc.is_valid(stats))
    if missing.true_count:  # statistics that do not start with numRecords: decoded whole
        counts = pa.array([num_records(s) if m else n for s, m, n in zip(stats.to_pylist(), missing.to_pylist(), counts.to_pylist())], pa.int64())
    return counts


def num_records(stats: str | None) -> int | None:
    """An add's numRecords from its statistics JSON; None when it has none or they are not JSON."""
    try:
        n = json.loads(stats or "{}").get("numRecords")
    except ValueError:
        return None
    return int(n) if n is not None else None

"""The Delta log as a mirror of Iceberg's snapshot history (delta-rs writes the log).

Iceberg is the source of truth. Each Iceberg snapshot becomes exactly one Delta commit holding the
same file changes (add / remove), tagged with a Delta application transaction whose version is the
snapshot's Iceberg sequence number. That tag makes mirroring idempotent and resumable:

* a normal write mirrors the snapshot it just committed;
* if the Delta commit failed, the next write (or `repair`) mirrors every snapshot Delta has not
  seen yet, in Iceberg order;
* two processes racing to mirror the same snapshot cannot both land it: Delta commits are
  conditional PUTs, and the loser re-reads the log, sees the tag, and has nothing left to do.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import time
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from . import history
from .iceberg_committer import live_data_files
from .properties import DELTA_APP_ID, DeltaCommitKeys, Operation, SummaryKeys
from .spec import delta_partition_columns
from .storage import StorageConfig, relative_to
from .type_mapping import delta_schema

log = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1)


@dataclass
class SnapshotChange:
    """The file changes of one Iceberg snapshot."""

    snapshot: Snapshot
    adds: list[DataFile]
    removes: list[DataFile]
    summary: dict[str, str] = field(default_factory=dict)

    @property
    def data_change(self) -> bool:
        # Compaction rewrites files without changing rows: Delta readers of the change feed skip it.
        return self.summary.get(SummaryKeys.OPERATION) != Operation.COMPACTION


def snapshot_change(table: Table, snapshot: Snapshot) -> SnapshotChange:
    """Files added and removed by `snapshot`, read from the manifests that snapshot wrote."""
    adds, removes = [], []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id or entry.data_file.content != DataFileContent.DATA:
                continue
            if entry.status == ManifestEntryStatus.ADDED:
                adds.append(entry.data_file)
            elif entry.status == ManifestEntryStatus.DELETED:
                removes.append(entry.data_file)
    summary = history.summary(snapshot)
    return SnapshotChange(snapshot, adds, removes, summary)


# ---------------------------------------------------------------- per-file Delta metadata


def _delta_partition_values(spec: PartitionSpec, schema: Schema, data_file: DataFile) -> dict[str, str | None]:
    columns = set(delta_partition_columns(spec, schema))
    out = {}
    for pos, pf in enumerate(spec.fields):
        if not isinstance(pf.transform, IdentityTransform):
            continue
        name = schema.find_column_name(pf.source_id)
        if name not in columns:
            continue
        source_type = schema.find_type(pf.source_id)
        out[name] = _delta_partition_string(source_type, _from_internal(source_type, data_file.partition[pos]))
    return out


def _delta_partition_string(source_type, value) -> str | None:
    """Delta's partitionValues serialization (protocol: 'Partition Value Serialization')."""
    if value is None:
        return None
    if isinstance(source_type, BooleanType):
        return "true" if value else "false"
    if isinstance(source_type, DateType):
        return value.isoformat()
    if isinstance(source_type, TimestamptzType):
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(source_type, TimestampType):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)



def _from_internal(t, v):
    if v is None:
        return None
    if isinstance(t, DateType):
        return dt.date(1970, 1, 1) + dt.timedelta(days=v)
    if isinstance(t, TimestamptzType):
        return (_EPOCH + dt.timedelta(microseconds=v)).replace(tzinfo=dt.timezone.utc)
    if isinstance(t, TimestampType):
        return _EPOCH + dt.timedelta(microseconds=v)
    return v


def _stat_value(t, raw: bytes, upper: bool):
    """An Iceberg bound as a Delta stats JSON value, widened where Delta's precision is coarser."""
    v = from_bytes(t, raw)
    if isinstance(t, (IntegerType, LongType, StringType, BooleanType)):
        return v
    if isinstance(t, (FloatType, DoubleType)):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(t, DateType):
        return _from_internal(t, v).isoformat()
    if isinstance(t, (TimestampType, TimestamptzType)):
        # Delta stats have millisecond precision: round the bound outwards so it stays a bound.
        ms = math.ceil(v / 1000) if upper else math.floor(v / 1000)
        ts = _EPOCH + dt.timedelta(milliseconds=ms)
        suffix = "Z" if isinstance(t, TimestamptzType) else ""
        return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}" + suffix
    return None  # decimals, binary: no stats rather than imprecise ones


def _delta_stats(schema: Schema, data_file: DataFile) -> str:
    mins, maxs, nulls = {}, {}, {}
    lower, upper, null_counts = data_file.lower_bounds or {}, data_file.upper_bounds or {}, data_file.null_value_counts or {}
    for f in schema.fields:
        if not f.field_type.is_primitive:
            continue
        if f.field_id in null_counts:
            nulls[f.name] = null_counts[f.field_id]
        if f.field_id in lower and f.field_id in upper:
            lo, hi = _stat_value(f.field_type, lower[f.field_id], False), _stat_value(f.field_type, upper[f.field_id], True)
            if lo is not None and hi is not None:
                mins[f.name], maxs[f.name] = lo, hi
    return json.dumps({"numRecords": data_file.record_count, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


# ---------------------------------------------------------------- the mirror


class DeltaMirror:
    """Brings the Delta log at the table root up to an Iceberg snapshot."""

    def __init__(self, root_uri: str, storage: StorageConfig, configuration: dict[str, str] | None = None):
        self.root_uri = root_uri
        self.storage = storage
        self.configuration = configuration or {}

    def load(self, version: int | None = None) -> DeltaTable | None:
        try:
            return DeltaTable(self.root_uri, version=version, storage_options=self.storage.delta_options(self.root_uri))
        except TableNotFoundError:
            return None

    def mirrored_sequence_number(self, delta: DeltaTable | None = None) -> int | None:
        delta = delta if delta is not None else self.load()
        return None if delta is None else delta.transaction_version(DELTA_APP_ID)

    def next_version(self, table: Table) -> int | None:
        """The Delta version the next Iceberg snapshot will be mirrored as (best effort: None if unknown).

        Recorded in the Iceberg snapshot summary so that both logs carry the mapping; the Delta
        commit records the authoritative snapshot id in its commitInfo.
        """
        try:
            delta = self.load()
            if delta is None:
                return None
            pending = self.pending_snapshots(table, table.current_snapshot(), self.mirrored_sequence_number(delta))
            return delta.version() + len(pending or []) + 1
        except Exception as e:  # noqa: BLE001 - Delta trouble must never fail the Iceberg commit
            log.debug("cannot predict the next Delta version: %s", e)
            return None

    def pending_snapshots(self, table: Table, target: Snapshot | None, mirrored_seq: int | None) -> list[Snapshot] | None:
        """Snapshots after the mirrored one, oldest first; None if history was expired past it."""
        return history.snapshots_after(table, target, mirrored_seq)

    def sync(self, table: Table, known: dict[int, SnapshotChange] | None = None, target: Snapshot | None = None) -> int:
        """Mirror every Iceberg snapshot up to `target` (default: current), one attempt. Returns the Delta version.

        A concurrent Delta writer makes this raise deltalake's CommitFailedError: the caller's retry
        policy (transaction.sync_delta) re-reads the log, and the txn tag tells what is left.
        """
        known = known or {}
        target = target if target is not None else table.current_snapshot()
        delta = self.load()
        if delta is None:
            delta = self._create(table)
        chain = self.pending_snapshots(table, target, self.mirrored_sequence_number(delta))
        if chain is None:
            self._commit_full_diff(table, delta, target)
        else:
            for snap in chain:
                self._commit_change(table, delta, known.get(snap.snapshot_id) or snapshot_change(table, snap))
        delta.update_incremental()
        return delta.version()

    # ---- internals

    def _create(self, table: Table) -> DeltaTable:
        schema, spec = table.schema(), table.spec()
        try:
            create_table_with_add_actions(
                self.root_uri,
                delta_schema(schema),
                [],
                mode="error",
                partition_by=delta_partition_columns(spec, schema) or None,
                name=table.name()[-1],
                configuration=self.configuration or None,
                storage_options=self.storage.delta_options(self.root_uri),
            )
        except Exception as e:  # a concurrent creator won: use its table
            if self.load() is None:
                raise
            log.debug("Delta table created concurrently: %s", e)
        return self.load()

    def _commit_change(self, table: Table, delta: DeltaTable, change: SnapshotChange, raw_removes: list | None = None) -> None:
        """One Delta commit with the snapshot's adds and removes, tagged with its sequence number."""
        snap = change.snapshot
        schema = table.schemas().get(snap.schema_id, table.schema()) if snap.schema_id is not None else table.schema()
        now = int(time.time() * 1000)
        add_paths = {relative_to(self.root_uri, f.file_path) for f in change.adds}
        actions: list = [
            RemoveAction(
                path=relative_to(self.root_uri, f.file_path),
                data_change=change.data_change,
                deletion_timestamp=now,
                size=f.file_size_in_bytes,
                partition_values=_delta_partition_values(table.specs()[f.spec_id], schema, f),
            )
            for f in change.removes
            if relative_to(self.root_uri, f.file_path) not in add_paths
        ]
        # Removes known only from the Delta log (their Iceberg snapshot was expired): see _commit_full_diff.
        actions += [
            RemoveAction(path=r.path, data_change=True, deletion_timestamp=now, size=r.size, partition_values=_stringify(r.partition_values))
            for r in raw_removes or []
        ]
        actions += [self._add_action(table, schema, f, change.data_change, now) for f in change.adds]
        metadata = {k: v for k, v in change.summary.items() if k.startswith(SummaryKeys.PREFIX)}
        metadata.update({DeltaCommitKeys.ICEBERG_SNAPSHOT_ID: str(snap.snapshot_id), DeltaCommitKeys.ICEBERG_SEQUENCE_NUMBER: str(snap.sequence_number)})
        if _changed_types(delta, schema):
            self._replace_with_wider_types(table, delta, snap, schema, metadata, now)
            return
        self._evolve_schema(delta, table, schema, snap)
        delta.create_write_transaction(
            actions,
            mode="append",
            schema=delta_schema(schema),
            partition_by=delta_partition_columns(table.spec(), schema) or None,
            commit_properties=CommitProperties(
                custom_metadata=metadata,
                max_commit_retries=0,
                app_transactions=[Transaction(DELTA_APP_ID, snap.sequence_number)],
            ),
            post_commithook_properties=PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False),
        )
        delta.update_incremental()

    def _add_action(self, table: Table, schema: Schema, f: DataFile, data_change: bool, now: int) -> AddAction:
        return AddAction(
            path=relative_to(self.root_uri, f.file_path),
            size=f.file_size_in_bytes,
            partition_values=_delta_partition_values(table.specs()[f.spec_id], schema, f),
            modification_time=now,
            data_change=data_change,
            stats=_delta_stats(schema, f),
        )

    def _replace_with_wider_types(self, table: Table, delta: DeltaTable, snap: Snapshot, schema: Schema, metadata: dict, now: int) -> None:
        """Mirror a snapshot that widened column types as one CREATE OR REPLACE commit.

        Delta cannot change a column's type in place without its typeWidening feature, which delta-rs
        cannot write. The widening snapshot rewrote every live file in the new types (Lakehouse._write),
        so the replace carries the new schema and the snapshot's complete file list; earlier Delta
        versions keep their own schema and files and stay readable.
        """
        adds = [self._add_action(table, schema, f, True, now) for f in live_data_files(table, snap.snapshot_id)]
        create_table_with_add_actions(
            self.root_uri,
            delta_schema(schema),
            adds,
            mode="overwrite",
            partition_by=delta_partition_columns(table.spec(), schema) or None,
            name=table.name()[-1],
            configuration={**(delta.metadata().configuration or {}), **self.configuration} or None,
            storage_options=self.storage.delta_options(self.root_uri),
            commit_properties=CommitProperties(
                custom_metadata={**metadata, DeltaCommitKeys.REPLACED_FOR: "type-widening"},
                max_commit_retries=0,
                app_transactions=[Transaction(DELTA_APP_ID, snap.sequence_number)],
            ),
            post_commithook_properties=PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False),
        )
        delta.update_incremental()

    def _evolve_schema(self, delta: DeltaTable, table: Table, schema: Schema, snap: Snapshot) -> None:
        """Bring Delta's schema up to the snapshot's Iceberg schema before its files are added.

        delta-rs's create_write_transaction ignores its `schema` argument (it writes no metaData
        action), so new columns and relaxed NOT NULLs are committed first with delta-rs's
        ALTER TABLE operations: one metadata-only Delta version, tagged, right before the data version.
        Idempotent: a retry finds the columns already there.
        """
        target = {f.name: f for f in delta_schema(schema).fields}
        current = {f.name: f for f in delta.schema().fields}
        props = CommitProperties(
            custom_metadata={SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)},
            max_commit_retries=0,
        )
        hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
        new = [f for n, f in target.items() if n not in current]
        if new:
            delta.alter.add_columns(new, commit_properties=props, post_commithook_properties=hooks)
        for name in [n for n in target if n in current and target[n].nullable and not current[n].nullable]:
            delta.alter.drop_column_not_null(name, commit_properties=props, post_commithook_properties=hooks)
        if new:
            delta.update_incremental()

    def _commit_full_diff(self, table: Table, delta: DeltaTable, target: Snapshot) -> None:
        """Delta is older than the retained Iceberg history: one commit that makes the file sets equal."""
        iceberg_files = {relative_to(self.root_uri, f.file_path): f for f in live_data_files(table, target.snapshot_id)}
        delta_files = {a["path"]: a for a in pa.table(delta.get_add_actions(flatten=True)).to_pylist()}
        adds = [f for p, f in iceberg_files.items() if p not in delta_files]
        removes = [
            _RemovedFile(p, a.get("size_bytes"), {k[len("partition."):]: v for k, v in a.items() if k.startswith("partition.")})
            for p, a in delta_files.items()
            if p not in iceberg_files
        ]
        summary = history.summary(target)
        summary[SummaryKeys.OPERATION] = Operation.REPAIR
        self._commit_change(table, delta, SnapshotChange(target, adds, [], summary), raw_removes=removes)


def _changed_types(delta: DeltaTable, schema: Schema) -> list[str]:
    """Columns whose type in the Iceberg schema differs from Delta's (a widening to mirror)."""
    target = {f.name: str(f.type) for f in delta_schema(schema).fields}
    current = {f.name: str(f.type) for f in delta.schema().fields}
    return [n for n in target if n in current and target[n] != current[n]]


@dataclass
class _RemovedFile:
    path: str
    size: int | None
    partition_values: dict


def _stringify(values: dict) -> dict[str, str | None]:
    out = {}
    for k, v in values.items():
        if v is None:
            out[k] = None
        elif isinstance(v, dt.datetime):
            out[k] = v.strftime("%Y-%m-%d %H:%M:%S.%f")
        elif isinstance(v, dt.date):
            out[k] = v.isoformat()
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out

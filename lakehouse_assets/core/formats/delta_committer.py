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

import json
import logging
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
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import IdentityTransform

from ..errors import MirrorRefused
from ..io.storage import StorageConfig, delta_path, relative_to
from ..properties import DELTA_APP_ID, DeltaCommitKeys, Operation, SummaryKeys
from ..schema.spec import delta_partition_columns, statistics_policy
from ..schema.statistics import StatisticsPolicy
from ..schema.type_mapping import delta_schema
from . import delta_column_mapping, foreign_delta, history
from .delta_values import partition_value, stat_value
from .iceberg_committer import live_data_files

log = logging.getLogger(__name__)



@dataclass
class SnapshotChange:
    """The file changes of one Iceberg snapshot."""

    snapshot: Snapshot
    adds: list[DataFile]
    removes: list[DataFile]
    summary: dict[str, str] = field(default_factory=dict)
    delete_files_added: list[DataFile] = field(default_factory=list)  # row-level deletes (other engines)
    delete_files_removed: list[DataFile] = field(default_factory=list)

    @property
    def data_change(self) -> bool:
        # Compaction rewrites files without changing rows: Delta readers of the change feed skip it.
        return self.summary.get(SummaryKeys.OPERATION) != Operation.COMPACTION


def snapshot_change(table: Table, snapshot: Snapshot) -> SnapshotChange:
    """Files added and removed by `snapshot`, read from the manifests that snapshot wrote."""
    adds, removes, delete_adds, delete_removes = [], [], [], []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id:
                continue
            is_data = manifest.content == ManifestContent.DATA and entry.data_file.content == DataFileContent.DATA
            if entry.status == ManifestEntryStatus.ADDED:
                (adds if is_data else delete_adds).append(entry.data_file)
            elif entry.status == ManifestEntryStatus.DELETED:
                (removes if is_data else delete_removes).append(entry.data_file)
    summary = history.summary(snapshot)
    return SnapshotChange(snapshot, adds, removes, summary, delete_adds, delete_removes)


# ---------------------------------------------------------------- what Delta cannot express

_FIX_DELETES = "run `lakehouse repair {t} --apply-deletes` (rewrites the affected data files with the deletes applied in one Iceberg snapshot; Delta then mirrors the result)"
_FIX_RENAME = "Delta cannot rename or drop a column without column mapping: run `lakehouse upgrade {t}` (turns column mapping on, metadata only) and Delta follows the rename, or rename it back in Iceberg"
_FIX_WIDEN_MAPPED = "Delta cannot widen a column's type in a column-mapped table (delta-rs cannot replace its schema); restore the old type in Iceberg"
_FIX_NAMES = "run `lakehouse repair {t} --rewrite-files` (rewrites those files under the physical names, rows unchanged, as one Iceberg snapshot; Delta then mirrors the table)"
_FIX_SPEC = "partition evolution is not supported: Delta's partition columns are fixed. Restore the original spec in Iceberg (and rewrite files written under the new one), or keep the table Iceberg-only"


def _schema_refusals(table: Table, delta: DeltaTable, schema: Schema, summary: dict[str, str]) -> list[str]:
    if delta_column_mapping.enabled(table.properties):
        # Renames and drops are metadata-only Delta commits (`_evolve_schema`); a type change still is not.
        changed = delta_column_mapping.changed_types(delta, schema)
        return [f"the type of column(s) {changed} changed; {_FIX_WIDEN_MAPPED}"] if changed else []
    target = {f.name: f for f in delta_schema(schema).fields}
    current = {f.name: f for f in delta.schema().fields}
    out = []
    gone = [n for n in current if n not in target]
    if gone:
        # Name the new name when the field id survived (a rename), else it was dropped.
        renamed = {}
        for old in gone:
            for s in table.schemas().values():
                try:
                    fid = s.find_field(old).field_id
                except ValueError:
                    continue
                new = schema.find_column_name(fid)
                if new is not None:
                    renamed[old] = new
                    break
        desc = ", ".join(f"{o!r} renamed to {renamed[o]!r}" if o in renamed else f"{o!r} dropped" for o in gone)
        out.append(f"the Iceberg schema no longer has Delta's column(s): {desc}. {_FIX_RENAME.format(t='.'.join(table.name()))}")
    changed = [n for n in target if n in current and str(target[n].type) != str(current[n].type)]
    if changed and SummaryKeys.OPERATION not in summary:
        out.append(
            f"another engine changed the type of column(s) {changed} in the Iceberg metadata only; the live data files keep the "
            f"old type, which Delta would then declare wrongly. Delta cannot follow a type change without a rewrite of every file"
        )
    return out


def unfollowed_renames(table: Table, delta: DeltaTable) -> list[str]:
    """Why Delta cannot follow the current Iceberg schema without column mapping (a rename or drop another engine
    made in Iceberg): checked before a write, whose files would otherwise hold names Delta's log does not know."""
    if delta_column_mapping.enabled(table.properties) or delta_column_mapping.is_mapped(delta):
        return []
    names = {f.name for f in table.schema().fields}
    if all(f.name in names for f in delta.schema().fields):
        return []
    return [r for r in _schema_refusals(table, delta, table.schema(), {}) if "no longer has Delta's column" in r]


def change_refusals(table: Table, delta: DeltaTable, change: SnapshotChange, root_uri: str) -> list[str]:
    """Why this snapshot's change has no exact Delta commit (empty when it has one)."""
    t = ".".join(table.name())
    out = []
    if change.delete_files_added or change.delete_files_removed:
        kinds = sorted({f.content.name.lower().replace("_", "-") for f in change.delete_files_added + change.delete_files_removed})
        out.append(
            f"it adds or removes {len(change.delete_files_added) + len(change.delete_files_removed)} delete file(s) ({', '.join(kinds)}): "
            f"row-level deletes that Delta cannot express (delta-rs writes no deletion vectors); {_FIX_DELETES.format(t=t)}"
        )
    out += _file_refusals(table, change.adds, root_uri)
    snap = change.snapshot
    schema = table.schemas().get(snap.schema_id, table.schema()) if snap.schema_id is not None else table.schema()
    if SummaryKeys.OPERATION not in change.summary:  # another engine's files: are the columns where Delta looks?
        out += misnamed_refusals(table, schema, [f.file_path for f in change.adds])
    out += _schema_refusals(table, delta, schema, change.summary)
    return out


def misnamed_refusals(table: Table, schema: Schema, uris: list[str]) -> list[str]:
    """Files of a column-mapped table whose columns are not under their physical names (Delta would read NULL)."""
    renamed = delta_column_mapping.renamed_in_files(table, schema)
    misnamed = delta_column_mapping.misnamed_files(table, uris, renamed)
    if not misnamed:
        return []
    expected = ", ".join(f"{schema.find_column_name(i)!r} as {p!r}" for i, p in renamed.items())
    return [
        f"{len(misnamed)} data file(s) written by another engine (e.g. {misnamed[0]}) name columns by their current names, while "
        f"Delta readers look for their physical names under column mapping ({expected}) and would read NULL; "
        f"{_FIX_NAMES.format(t='.'.join(table.name()))}"
    ]


def state_refusals(table: Table, delta: DeltaTable, snapshot: Snapshot, root_uri: str) -> list[str]:
    """Why the table at `snapshot` cannot be mirrored as a whole (a full file-set diff)."""
    from .deletes import describe_delete_files, table_files

    t = ".".join(table.name())
    files = table_files(table, snapshot)
    out = []
    if files.deletes:
        out.append(f"{describe_delete_files(files)} are live: row-level deletes that Delta cannot express; {_FIX_DELETES.format(t=t)}")
    out += _file_refusals(table, [e.data_file for e in files.data], root_uri)
    schema = table.schema() if snapshot.snapshot_id == getattr(table.current_snapshot(), "snapshot_id", None) else table.schemas().get(snapshot.schema_id, table.schema())
    out += _schema_refusals(table, delta, schema, {})
    return out


def _file_refusals(table: Table, files: list[DataFile], root_uri: str) -> list[str]:
    specs = table.specs()
    first = specs[min(specs)]
    other_spec = sorted({f.spec_id for f in files if specs[f.spec_id].fields != first.fields})
    out = []
    if other_spec:
        out.append(f"data files were written under partition spec(s) {other_spec}, not the table's original spec {min(specs)}: {_FIX_SPEC}")
    outside = []
    for f in files:
        try:
            relative_to(root_uri, f.file_path)
        except ValueError:
            outside.append(f.file_path)
    if outside:
        out.append(f"{len(outside)} data file(s) lie outside the table root {root_uri} (e.g. {outside[0]}); the Delta log only references files under its root. Rewrite them into the table (e.g. compaction by the writing engine)")
    return out


# ---------------------------------------------------------------- per-file Delta metadata


def _delta_partition_values(spec: PartitionSpec, schema: Schema, data_file: DataFile, names: dict[int, str] | None = None) -> dict[str, str | None]:
    """Keyed by physical name under column mapping (`names`), as the Delta protocol asks."""
    columns = set(delta_partition_columns(spec, schema))
    out = {}
    for pos, pf in enumerate(spec.fields):
        if not isinstance(pf.transform, IdentityTransform):
            continue
        name = schema.find_column_name(pf.source_id)
        if name in columns:
            out[(names or {}).get(pf.source_id, name)] = partition_value(name, schema.find_type(pf.source_id), data_file.partition[pos])
    return out


def _delta_stats(schema: Schema, data_file: DataFile, policy: StatisticsPolicy, names: dict[int, str] | None = None) -> str:
    """The add action's stats: the policy's Delta columns, derived from the file's Iceberg statistics (keyed by
    physical name under column mapping)."""
    mins, maxs, nulls = {}, {}, {}
    lower, upper, null_counts = data_file.lower_bounds or {}, data_file.upper_bounds or {}, data_file.null_value_counts or {}
    for name in policy.delta_columns():
        f = schema.find_field(name)
        key = (names or {}).get(f.field_id, f.name)
        if f.field_id in null_counts:
            nulls[key] = null_counts[f.field_id]
        if policy.has_bounds(f.field_id) and f.field_id in lower and f.field_id in upper:
            lo, hi = stat_value(f.field_type, lower[f.field_id], False), stat_value(f.field_type, upper[f.field_id], True)
            if lo is not None and hi is not None:
                mins[key], maxs[key] = lo, hi
    # Raw UTF-8, not \u escapes: delta-rs 1.6.6 decodes a surrogate pair (U+10000 and up) 0x10000 too low, so
    # an escaped max of a string column would be below the values it bounds and readers would skip the file.
    return json.dumps({"numRecords": data_file.record_count, "minValues": mins, "maxValues": maxs, "nullCount": nulls}, ensure_ascii=False)


# ---------------------------------------------------------------- the mirror


class DeltaMirror:
    """Brings the Delta log at the table root up to an Iceberg snapshot."""

    def __init__(self, root_uri: str, storage: StorageConfig, configuration: dict[str, str] | None = None):
        self.root_uri = root_uri
        self.storage = storage
        self.configuration = configuration or {}
        # The log `next_version` read, handed to the `sync` that follows it in the same commit: loading the
        # log replays its last checkpoint (every live file), so one load per write instead of two.
        self._loaded: DeltaTable | None = None

    def load(self, version: int | None = None) -> DeltaTable | None:
        try:
            return DeltaTable(self.root_uri, version=version, storage_options=self.storage.delta_options(self.root_uri))
        except TableNotFoundError:
            return None

    def hand_over(self, delta: DeltaTable) -> None:
        """A log this process read moments ago (the write's foreign-version check): `next_version` updates it instead of loading."""
        self._loaded = delta

    def mirrored_sequence_number(self, delta: DeltaTable | None = None) -> int | None:
        delta = delta if delta is not None else self.load()
        return None if delta is None else delta.transaction_version(DELTA_APP_ID)

    def next_version(self, table: Table) -> int | None:
        """The Delta version the next Iceberg snapshot will be mirrored as (best effort: None if unknown).

        Recorded in the Iceberg snapshot summary so that both logs carry the mapping; the Delta
        commit records the authoritative snapshot id in its commitInfo.
        """
        try:
            if self._loaded is not None:
                delta = self._loaded
                delta.update_incremental()  # what landed since it was read (another engine's version is refused before the commit)
            else:
                delta = self._loaded = self.load()
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
        delta, self._loaded = self._loaded, None
        if delta is not None:
            delta.update_incremental()  # commits since `next_version` read it (another writer's, or none)
        else:
            delta = self.load()
        if delta is None:
            delta = self._create(table)
        foreign_delta.refuse_to_mirror_over(".".join(table.name()), delta)  # never mirror over another engine's versions
        chain = self.pending_snapshots(table, target, self.mirrored_sequence_number(delta))
        landed = None  # the Delta version of the last commit made here, when the loaded log does not include it yet
        if chain is None:
            self._refuse_unless_whole(table, delta, target, "the snapshots Delta lags behind were expired")
            self._commit_full_diff(table, delta, target)
        else:
            for i, snap in enumerate(chain):
                change = known.get(snap.snapshot_id) or snapshot_change(table, snap)
                if refusals := change_refusals(table, delta, change, self.root_uri):
                    # No exact Delta commit for this snapshot (another engine wrote it). If the table is whole
                    # again at the target (deletes applied, ...), one commit jumps there; else refuse, loudly.
                    self._refuse_unless_whole(table, delta, target, f"snapshot {snap.snapshot_id}: " + "; ".join(refusals))
                    self._commit_full_diff(table, delta, target)
                    break
                landed = self._commit_change(table, delta, change, reload=i < len(chain) - 1)
        current = table.current_snapshot()
        at_current = target is not None and current is not None and target.snapshot_id == current.snapshot_id
        if landed is not None:
            # The last snapshot landed as exactly this version (no commit retries: nobody committed between our read of
            # the log and it) and wrote no schema, so the log as read before it still has the current schema.
            # Reading our own commit back would merge it into the state of every live file: skip it when the
            # current Iceberg schema needs nothing from Delta.
            if not (at_current and _schema_differs(delta, table.schema(), delta_column_mapping.file_names(table, table.schema()))):
                return landed
            delta.update_incremental()
        if at_current:
            # A schema change without a snapshot (another engine's add_column): Delta follows it too.
            delta.update_incremental()
            if refusals := _schema_refusals(table, delta, table.schema(), {}):
                raise MirrorRefused(self._refusal(table, delta, "the current Iceberg schema: " + "; ".join(refusals)))
            self._evolve_schema(delta, table, table.schema(), target)
        delta.update_incremental()
        # Not simply the latest version: a concurrent writer may have mirrored `target` for us, or committed after it.
        mirrored = self._version_of(delta, target.snapshot_id) if target is not None else None
        return mirrored if mirrored is not None else delta.version()

    @staticmethod
    def _version_of(delta: DeltaTable, snapshot_id: int) -> int | None:
        """The Delta version whose commitInfo names `snapshot_id`, searching the newest commits first."""
        limit = 8
        while True:
            commits = delta.history(limit)
            found = [c["version"] for c in commits if c.get(DeltaCommitKeys.ICEBERG_SNAPSHOT_ID) == str(snapshot_id)]
            if found:
                return min(found)
            if len(commits) < limit:
                return None
            limit *= 4

    # ---- internals

    def _refuse_unless_whole(self, table: Table, delta: DeltaTable, target: Snapshot, why: str) -> None:
        if refusals := state_refusals(table, delta, target, self.root_uri):
            raise MirrorRefused(self._refusal(table, delta, f"{why}; at snapshot {target.snapshot_id}: " + "; ".join(refusals)))

    def _refusal(self, table: Table, delta: DeltaTable, why: str) -> str:
        t = ".".join(table.name())
        return (
            f"Table {t}: Delta cannot mirror Iceberg ({why}). Delta was left at version {delta.version()} (nothing "
            f"half-mirrored); Iceberg readers see the current table, Delta readers the table as of that version, and "
            f"`lakehouse verify {t}` reports the lag until the table is whole again."
        )

    def _create(self, table: Table) -> DeltaTable:
        schema, spec = table.schema(), table.spec()
        configuration = delta_column_mapping.without_mapping_keys(
            {**self.configuration, **statistics_policy(table, schema).delta_configuration(self.configuration)}
        )
        partition_by = delta_partition_columns(spec, schema)
        try:
            if (physical := delta_column_mapping.file_names(table, schema)) is not None:
                # A column-mapped table starts mapped: version 0 declares the mapping, as delta-rs's version 0 of any other table.
                delta_column_mapping.create_table(
                    self.root_uri, self.storage, name=table.name()[-1], schema=schema, physical=physical,
                    partition_columns=partition_by, configuration=configuration,
                )
            else:
                create_table_with_add_actions(
                    self.root_uri,
                    delta_schema(schema),
                    [],
                    mode="error",
                    partition_by=partition_by or None,
                    name=table.name()[-1],
                    configuration=configuration,
                    storage_options=self.storage.delta_options(self.root_uri),
                )
        except Exception as e:  # a concurrent creator won: use its table
            if self.load() is None:
                raise
            log.debug("Delta table created concurrently: %s", e)
        return self.load()

    def _commit_change(self, table: Table, delta: DeltaTable, change: SnapshotChange, raw_removes: list | None = None, reload: bool = True) -> int | None:
        """One Delta commit with the snapshot's adds and removes, tagged with its sequence number.

        Returns the version it landed as when `reload` is False and `delta` was therefore not brought up to it
        (None when `delta` includes the commit)."""
        snap = change.snapshot
        schema = table.schemas().get(snap.schema_id, table.schema()) if snap.schema_id is not None else table.schema()
        names = delta_column_mapping.file_names(table, schema)
        now = int(time.time() * 1000)
        add_paths = {relative_to(self.root_uri, f.file_path) for f in change.adds}
        actions: list = [
            RemoveAction(
                path=relative_to(self.root_uri, f.file_path),
                data_change=change.data_change,
                deletion_timestamp=now,
                size=f.file_size_in_bytes,
                partition_values=_delta_partition_values(table.specs()[f.spec_id], schema, f, names),
            )
            for f in change.removes
            if relative_to(self.root_uri, f.file_path) not in add_paths
        ]
        # Removes known only from the Delta log (their Iceberg snapshot was expired): see _commit_full_diff.
        actions += [
            RemoveAction(path=r.path, data_change=True, deletion_timestamp=now, size=r.size, partition_values=_stringify(schema, r.partition_values, names))
            for r in raw_removes or []
        ]
        policy = statistics_policy(table, schema)
        actions += [self._add_action(table, schema, f, change.data_change, now, policy, names) for f in change.adds]
        metadata = {k: v for k, v in change.summary.items() if k.startswith(SummaryKeys.PREFIX)}
        metadata.update({DeltaCommitKeys.ICEBERG_SNAPSHOT_ID: str(snap.snapshot_id), DeltaCommitKeys.ICEBERG_SEQUENCE_NUMBER: str(snap.sequence_number)})
        if names is None and _changed_types(delta, schema):
            self._replace_with_wider_types(table, delta, snap, schema, metadata, now, policy)
            return None
        self._evolve_schema(delta, table, schema, snap)
        self._declare_statistics(delta, snap, policy)
        version = delta.version() + 1  # max_commit_retries=0: this version, or a CommitFailedError
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
        if not reload:
            return version
        delta.update_incremental()
        return None

    def record_adoption(self, table: Table, delta: DeltaTable, snapshot: Snapshot, adds: list[DataFile], removes: list[DataFile]) -> None:
        """Record an adopted snapshot (core/formats/delta_adoption.py) as mirrored: one version of ours right after the foreign
        versions it adopted, tagged with its id and sequence number. Its Delta side is those versions themselves, except
        for files the adoption rewrote: `removes` (the foreign files) leave and `adds` (their rewrites) come in, rows
        unchanged. No retry: a version landing in between would be a foreign one left behind unadopted."""
        change = SnapshotChange(snapshot, adds, removes, {**history.summary(snapshot), SummaryKeys.OPERATION: Operation.ADOPT_DELTA})
        self._commit_change(table, delta, change)

    def _add_action(self, table: Table, schema: Schema, f: DataFile, data_change: bool, now: int, policy: StatisticsPolicy, names: dict[int, str] | None = None) -> AddAction:
        return AddAction(
            path=relative_to(self.root_uri, f.file_path),
            size=f.file_size_in_bytes,
            partition_values=_delta_partition_values(table.specs()[f.spec_id], schema, f, names),
            modification_time=now,
            data_change=data_change,
            stats=_delta_stats(schema, f, policy, names),
        )

    def _replace_with_wider_types(self, table: Table, delta: DeltaTable, snap: Snapshot, schema: Schema, metadata: dict, now: int, policy: StatisticsPolicy) -> None:
        """Mirror a snapshot that widened column types as one CREATE OR REPLACE commit.

        Delta cannot change a column's type in place without its typeWidening feature, which delta-rs
        cannot write. The widening snapshot rewrote every live file in the new types (Lakehouse._write),
        so the replace carries the new schema and the snapshot's complete file list; earlier Delta
        versions keep their own schema and files and stay readable.
        """
        adds = [self._add_action(table, schema, f, True, now, policy) for f in live_data_files(table, snap.snapshot_id)]
        configuration = {**(delta.metadata().configuration or {}), **self.configuration}
        create_table_with_add_actions(
            self.root_uri,
            delta_schema(schema),
            adds,
            mode="overwrite",
            partition_by=delta_partition_columns(table.spec(), schema) or None,
            name=table.name()[-1],
            configuration={**configuration, **policy.delta_configuration(configuration)},
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
        names = delta_column_mapping.file_names(table, schema)
        if names is None and delta_column_mapping.is_mapped(delta):
            # Mapped in Delta only (an upgrade stopped before its Iceberg property): the files hold the columns' names.
            names = {f.field_id: f.name for f in schema.fields} | {i: p for i, p in delta_column_mapping.physical_names(delta).items() if schema.find_column_name(i) in {f.name for f in schema.fields}}
        if names is not None:
            # delta-rs refuses schema changes of a column-mapped table: the metaData is written here, one version for
            # any mix of new, renamed and dropped columns (ids and physical names as the table's files hold them).
            if not delta_column_mapping.schema_matches(delta, schema, names):
                delta_column_mapping.commit_schema(
                    self.root_uri, self.storage, delta, schema, names, operation="CHANGE COLUMNS", commit_info=props.custom_metadata,
                    configuration=statistics_policy(table, schema).delta_configuration(delta.metadata().configuration or {}),
                )
                delta.update_incremental()
            return
        new = [f for n, f in target.items() if n not in current]
        relaxed = [n for n in target if n in current and target[n].nullable and not current[n].nullable]
        if new:
            delta.alter.add_columns(new, commit_properties=props, post_commithook_properties=hooks)
        for name in relaxed:
            delta.alter.drop_column_not_null(name, commit_properties=props, post_commithook_properties=hooks)
        if new:
            delta.update_incremental()

    def _declare_statistics(self, delta: DeltaTable, snap: Snapshot, policy: StatisticsPolicy) -> None:
        """Make Delta readers parse the statistics of exactly the policy's columns (a metadata-only version, tagged,
        when the columns changed: a new table, new columns, changed statistics properties). Idempotent."""
        current = delta.metadata().configuration or {}
        wanted = policy.delta_configuration(current)
        if all(current.get(k) == v for k, v in wanted.items()):
            return
        if delta_column_mapping.is_mapped(delta):  # delta-rs refuses SET TBLPROPERTIES on a column-mapped table
            delta_column_mapping.commit_schema(
                self.root_uri, self.storage, delta, policy.schema, delta_column_mapping.physical_names(delta), operation="SET TBLPROPERTIES",
                commit_info={DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)}, configuration=wanted,
            )
            delta.update_incremental()
            return
        delta.alter.set_table_properties(
            wanted,
            raise_if_not_exists=False,
            commit_properties=CommitProperties(
                custom_metadata={SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)},
                max_commit_retries=0,
            ),
            post_commithook_properties=PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False),
        )
        delta.update_incremental()

    def _commit_full_diff(self, table: Table, delta: DeltaTable, target: Snapshot) -> None:
        """Delta is older than the retained Iceberg history: one commit that makes the file sets equal."""
        iceberg_files = {relative_to(self.root_uri, f.file_path): f for f in live_data_files(table, target.snapshot_id)}
        delta_files = {delta_path(a["path"]): a for a in pa.table(delta.get_add_actions(flatten=True)).to_pylist()}
        adds = [f for p, f in iceberg_files.items() if p not in delta_files]
        if refusals := misnamed_refusals(table, table.schemas().get(target.schema_id, table.schema()), [f.file_path for f in adds]):
            raise MirrorRefused(self._refusal(table, delta, f"at snapshot {target.snapshot_id}: " + "; ".join(refusals)))
        removes = [
            _RemovedFile(p, a.get("size_bytes"), {k[len("partition."):]: v for k, v in a.items() if k.startswith("partition.")})
            for p, a in delta_files.items()
            if p not in iceberg_files
        ]
        summary = history.summary(target)
        summary[SummaryKeys.OPERATION] = Operation.REPAIR
        self._commit_change(table, delta, SnapshotChange(target, adds, [], summary), raw_removes=removes)


def _schema_differs(delta: DeltaTable, schema: Schema, names: dict[int, str] | None = None) -> bool:
    """Whether the Iceberg schema asks anything of Delta's: other columns or types (refused or evolved by
    `sync`), or a column Iceberg made optional that Delta still declares NOT NULL (relaxed by `_evolve_schema`)."""
    target = {f.name: f for f in delta_schema(schema).fields}
    current = {f.name: f for f in delta.schema().fields}
    if names is not None:
        return not delta_column_mapping.schema_matches(delta, schema, names)
    if target.keys() != current.keys():
        return True
    return any(str(target[n].type) != str(current[n].type) or (target[n].nullable and not current[n].nullable) for n in target)


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


def _stringify(schema: Schema, values: dict, names: dict[int, str] | None = None) -> dict[str, str | None]:
    """Typed partition values read back from the Delta log (keyed as the log keys them), spelled again for a remove action."""
    logical = {p: schema.find_column_name(i) for i, p in (names or {}).items()}
    return {k: partition_value(k, schema.find_type(logical.get(k, k)), v) if v is not None else None for k, v in values.items()}

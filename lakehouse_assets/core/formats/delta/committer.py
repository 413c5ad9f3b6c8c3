"""The Delta log as a mirror of Iceberg's snapshot history.

Iceberg is the source of truth. Each Iceberg snapshot becomes exactly one Delta commit holding the
same file changes (add / remove), tagged with a Delta application transaction whose version is the
snapshot's Iceberg sequence number. That tag makes mirroring idempotent and resumable:

* a normal write mirrors the snapshot it just committed;
* if the Delta commit failed, the next write (or `repair`) mirrors every snapshot Delta has not
  seen yet, in Iceberg order;
* two processes racing to mirror the same snapshot cannot both land it: Delta commits are
  conditional PUTs, and the loser re-reads the log, sees the tag, and has nothing left to do.

This module decides what to mirror and when (`DeltaMirror.sync`, the predicted next version), on the log as
followed since the process read it (followed_log.py); the commit itself is `delta_snapshot_commit`, what Delta cannot express is `delta_refusals`, the metadata-only schema
steps are `delta_schema_evolution`, and the per-file actions are `delta_actions`.
"""

from __future__ import annotations

import logging

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.transaction import create_table_with_add_actions
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ...errors import MirrorRefused
from ...io.storage import StorageConfig
from ...properties import DELTA_APP_ID, Operation, SummaryKeys
from ...schema.spec import delta_partition_columns, statistics_policy
from ...schema.type_mapping import delta_schema, narrow_integers
from .. import file_columns, history
from ..snapshot_changes import SnapshotChange, snapshot_change
from . import column_mapping, foreign_versions
from .checkpoint_state import read_newest_checkpoint
from .followed_log import FollowedLog, LoadedDeltaTable
from .glue import GlueEntry
from .kept_logs import KEPT
from .refusals import change_refusals, refusal_message, refuse_unless_whole, schema_refusals
from .schema_evolution import evolve_schema
from .snapshot_commit import ChangeData, commit_change, commit_full_diff

log = logging.getLogger(__name__)
APPEND_ONLY = "delta.appendOnly"  # the Delta protocol's table property: files are never removed with a data change


class DeltaMirror:
    """Brings the Delta log at the table root up to an Iceberg snapshot."""

    def __init__(
        self,
        root_uri: str,
        storage: StorageConfig,
        configuration: dict[str, str] | None = None,
        glue: GlueEntry | None = None,
        change_data: ChangeData | None = None,
    ):
        self.root_uri = root_uri
        self.storage = storage
        self.configuration = configuration or {}
        # The Glue table the Delta side is registered as (formats/delta/glue.py), kept in sync after each sync; and why it is not, if not.
        self.glue = glue
        self.glue_action: str | None = None  # what the last sync did to it: created, updated, unchanged, failed
        self.glue_warning: str | None = None
        self.change_data = change_data  # writes a rewrite's change data files (None: commits carry none)
        # The log `next_version` read, handed to the `sync` that follows it in the same commit: loading the
        # log replays its last checkpoint (every live file), so one load per write instead of two; following it
        # afterwards reads only the commit files since.
        self._loaded: FollowedLog | None = None
        # Whether `next_version` brought `_loaded` up to date just before the Iceberg commit: `sync` then commits on
        # it without listing the log again. A version landing in between fails that commit (Delta commits are
        # put-if-absent) and the retry policy reads the log afresh.
        self._updated = False
        self._mirrored_seq: int | None = None  # its `mirrored_sequence_number`, as `next_version` read it

    def load(self, version: int | None = None) -> DeltaTable | None:
        try:
            return LoadedDeltaTable(self.root_uri, self.storage, version)
        except TableNotFoundError:
            return None

    def follow(self, version: int | None = None) -> FollowedLog | None:
        """The log read once, to be followed from there commit by commit (core/formats/delta/followed_log.py): the
        current log from its newest checkpoint (checkpoint_state.py, without delta-rs's state of every live file),
        else, and at an older `version`, loaded by delta-rs."""
        if version is None and (read := read_newest_checkpoint(self.storage, self.root_uri)) is not None:
            state, newest_listed = read
            followed = FollowedLog(state, self.root_uri, self.storage)
            followed.update_incremental()
            if followed.version() >= newest_listed:
                return followed
            # A commit file after the checkpoint is missing (log cleanup racing the read): delta-rs reads the log.
        delta = self.load(version)
        return None if delta is None else FollowedLog(delta, self.root_uri, self.storage)

    def load_current(self, table: Table) -> FollowedLog | None:
        """The current log: the one this process last read of the table (a write's, a check's), brought up to date
        (core/formats/delta/kept_logs.py), else loaded. Give it back with `keep` when done with it."""
        kept = KEPT.take(self.root_uri, str(table.metadata.table_uuid), self.storage)
        return kept if kept is not None else self.follow()

    def keep(self, table: Table, delta: FollowedLog) -> None:
        """Keep a log read of this table for the process's next `load_current` of it."""
        KEPT.give_back(self.root_uri, str(table.metadata.table_uuid), self.storage, delta)

    def hand_over(self, delta: FollowedLog) -> None:
        """A log this process read moments ago (the write's foreign-version check): `next_version` updates it instead of loading."""
        self._loaded, self._updated = delta, False

    def log_may_have_moved(self) -> None:
        """Another writer may have written Delta versions since `next_version` read the log (the writer ahead in the
        commit lock's queue writes its version while this one commits its snapshot): `sync` reads what landed first."""
        self._updated = False

    def append_only(self) -> bool:
        """Whether the Delta table sets `delta.appendOnly=true` (the log `next_version` read, else loaded). A log that
        cannot be read says no: Delta trouble never fails the Iceberg commit, and the mirror step reports it."""
        try:
            delta = self._loaded if self._loaded is not None else self.load()
            return delta is not None and appends_only(delta)
        except Exception as e:  # noqa: BLE001 - Delta trouble must never fail the Iceberg commit
            log.debug("cannot read the Delta table's configuration: %s", e)
            return False

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
                delta = self._loaded = self.follow()
            self._updated = delta is not None
            if delta is None:
                return None
            self._mirrored_seq = self.mirrored_sequence_number(delta)
            pending = self.pending_snapshots(table, table.current_snapshot(), self._mirrored_seq)
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
        updated, self._updated = self._updated, False
        if delta is not None:
            if not updated:
                delta.update_incremental()  # commits since it was read (another writer's, or none)
        else:
            delta = self.follow()
        if delta is None:
            delta = self._create(table)
        try:
            return self._sync_on(delta, table, known, target, self._mirrored_seq if updated else None)
        except CommitFailedError:
            self._loaded = delta  # a lost race: the retry follows this log from where it is, not loading it again
            raise

    def _sync_on(self, delta: FollowedLog, table: Table, known: dict[int, SnapshotChange], target: Snapshot | None, mirrored_seq: int | None) -> int:
        foreign_versions.refuse_to_mirror_over(".".join(table.name()), delta)  # never mirror over another engine's versions
        chain = self.pending_snapshots(table, target, mirrored_seq if mirrored_seq is not None else self.mirrored_sequence_number(delta))
        if chain is None:
            refuse_unless_whole(table, delta, target, self.root_uri, "the snapshots Delta lags behind were expired")
            commit_full_diff(self.root_uri, self.storage, self.configuration, table, delta, target, self.change_data)
        else:
            for snap in chain:
                change = known.get(snap.snapshot_id) or snapshot_change(table, snap)
                if refusals := change_refusals(table, delta, change, self.root_uri):
                    # No exact Delta commit for this snapshot (another engine wrote it). If the table is whole
                    # again at the target (deletes applied, ...), one commit jumps there; else refuse, loudly.
                    refuse_unless_whole(table, delta, target, self.root_uri, f"snapshot {snap.snapshot_id}: " + "; ".join(refusals))
                    commit_full_diff(self.root_uri, self.storage, self.configuration, table, delta, target, self.change_data)
                    break
                commit_change(self.root_uri, self.storage, self.configuration, table, delta, change, change_data=self.change_data)
        current = table.current_snapshot()
        if target is not None and current is not None and target.snapshot_id == current.snapshot_id:
            # A schema change without a snapshot (another engine's add_column): Delta follows it too.
            delta.update_incremental()
            if refusals := schema_refusals(table, delta, table.schema(), {}):
                raise MirrorRefused(refusal_message(table, delta, "the current Iceberg schema: " + "; ".join(refusals)))
            evolve_schema(self.root_uri, self.storage, delta, table, table.schema(), target)
        delta.update_incremental()
        # Not simply the latest version: a concurrent writer may have mirrored `target` for us, or committed after it.
        mirrored = history.delta_version_of(delta, target.snapshot_id) if target is not None else None
        self.keep(table, delta)  # the next write and check follow the log from here
        return mirrored if mirrored is not None else delta.version()

    def record_adoption(self, table: Table, delta: DeltaTable | FollowedLog, snapshot: Snapshot, adds: list[DataFile], removes: list[DataFile]) -> None:
        """Record an adopted snapshot (core/formats/delta/adoption.py) as mirrored: one version of ours right after the foreign
        versions it adopted, tagged with its id and sequence number. Its Delta side is those versions themselves, except
        for files the adoption rewrote: `removes` (the foreign files) leave and `adds` (their rewrites) come in, rows
        unchanged. No retry: a version landing in between would be a foreign one left behind unadopted."""
        change = SnapshotChange(snapshot, adds, removes, {**history.summary(snapshot), SummaryKeys.OPERATION: Operation.ADOPT_DELTA})
        followed = delta if isinstance(delta, FollowedLog) else FollowedLog(delta, self.root_uri, self.storage)
        commit_change(self.root_uri, self.storage, self.configuration, table, followed, change)

    def start_at(self, table: Table) -> int:
        """A Delta log for a table that has none (an imported Iceberg table): created with its current schema, then
        one version holding its live files, tagged with its current snapshot (its earlier history is not replayed).
        Raises MirrorRefused when Delta cannot hold the table as it is (the caller removes the log it started)."""
        snap = table.current_snapshot()
        delta = self._create(table)
        if snap is not None:
            refuse_unless_whole(table, delta, snap, self.root_uri, f"table {'.'.join(table.name())} as imported")
            commit_full_diff(self.root_uri, self.storage, self.configuration, table, delta, snap)
        return delta.version()

    # ---- internals

    def _create(self, table: Table) -> FollowedLog:
        schema, spec = table.schema(), table.spec()
        configuration = column_mapping.without_mapping_keys(
            {**self.configuration, **statistics_policy(table, schema).delta_configuration(self.configuration)}
        )
        partition_by = delta_partition_columns(spec, schema)
        try:
            if (physical := file_columns.file_names(table, schema)) is not None:
                # A column-mapped table starts mapped: version 0 declares the mapping, as delta-rs's version 0 of any other table.
                column_mapping.create_table(
                    self.root_uri, self.storage, name=table.name()[-1], schema=schema, physical=physical,
                    partition_columns=partition_by, configuration=configuration,
                )
            else:
                create_table_with_add_actions(
                    self.root_uri,
                    delta_schema(schema, narrow_integers(table.properties)),
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
        return self.follow()


def appends_only(delta: DeltaTable | FollowedLog) -> bool:
    """Whether a Delta log, as read, sets `delta.appendOnly=true`."""
    return str((delta.metadata().configuration or {}).get(APPEND_ONLY, "false")).lower() == "true"

"""One Delta commit per Iceberg snapshot: the mirror's write to the Delta log.

Each commit holds the snapshot's file changes as add and remove actions and is tagged with a Delta application
transaction whose version is the snapshot's Iceberg sequence number (what makes mirroring idempotent), with the
snapshot id in its commitInfo. Two commits are not plain appends: a type widening replaces the table (Delta
cannot change a column's type in place), and a Delta log older than the retained Iceberg history gets one
commit that makes the file sets equal.
"""

from __future__ import annotations

import time
from typing import Callable

import pyarrow as pa
from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction, create_table_with_add_actions
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ...errors import MirrorRefused
from ...io.storage import StorageConfig, delta_path, join_uri, relative_to
from ...properties import DELTA_APP_ID, DeltaCommitKeys, Operation, SummaryKeys
from ...schema.spec import delta_partition_columns, statistics_policy
from ...schema.statistics import StatisticsPolicy
from ...schema.type_mapping import delta_schema, narrow_integers
from .. import file_columns, history
from ..iceberg.committer import live_data_files
from ..snapshot_changes import SnapshotChange
from . import log_commit, vector_mirror
from .actions import RemovedFile, add_action, remove_action
from .followed_log import FollowedLog
from .refusals import misnamed_refusals, refusal_message
from .schema_evolution import changed_types, declare_statistics, evolve_schema

# Writes the rows a snapshot changed as Delta change data files; returns their `cdc` actions (core/write/change_data.py).
# The last argument: the URIs of files known only from the Delta log that the commit removes (commit_full_diff).
ChangeData = Callable[[Table, SnapshotChange, str, StorageConfig, list[str]], list[dict]]


def commit_change(
    root_uri: str, storage: StorageConfig, configuration: dict[str, str], table: Table, delta: FollowedLog, change: SnapshotChange,
    raw_removes: list[RemovedFile] | None = None, change_data: ChangeData | None = None,
) -> int:
    """One Delta commit with the snapshot's adds and removes, tagged with its sequence number.

    When the table's change data feed is on and the snapshot replaced or deleted rows, `change_data` writes the
    rows it changed and the commit carries them as `cdc` files (log_commit.py); position deletes become deletion
    vectors (vector_mirror.py). The commit is written here (log_commit.py) and `delta` follows it. Returns the version."""
    snap = change.snapshot
    schema = table.schemas().get(snap.schema_id, table.schema()) if snap.schema_id is not None else table.schema()
    names = file_columns.file_names(table, schema)
    now = int(time.time() * 1000)
    add_paths = {relative_to(root_uri, f.file_path) for f in change.adds}
    actions: list = [
        remove_action(root_uri, table, schema, f, change.data_change, now, names)
        for f in change.removes
        if relative_to(root_uri, f.file_path) not in add_paths
    ]
    # Removes known only from the Delta log (their Iceberg snapshot was expired): see commit_full_diff.
    actions += [r.remove_action(schema, now, names) for r in raw_removes or []]
    policy, narrow = statistics_policy(table, schema), narrow_integers(table.properties)
    actions += [add_action(root_uri, table, schema, f, change.data_change, now, policy, names) for f in change.adds]
    metadata = {k: v for k, v in change.summary.items() if k.startswith(SummaryKeys.PREFIX)}
    metadata.update({DeltaCommitKeys.ICEBERG_SNAPSHOT_ID: str(snap.snapshot_id), DeltaCommitKeys.ICEBERG_SEQUENCE_NUMBER: str(snap.sequence_number)})
    if names is None and changed_types(delta, schema, narrow):
        _replace_with_wider_types(root_uri, storage, configuration, table, delta, snap, schema, metadata, now, policy)
        return delta.version()
    evolve_schema(root_uri, storage, delta, table, schema, snap)
    declare_statistics(root_uri, storage, delta, snap, policy, narrow)
    # Position deletes become deletion vectors; a log with vectors needs them named by every remove (delta-rs's cannot).
    vectors = vector_mirror.plan(root_uri, storage, table, delta, change, actions, now)
    rewrites = change.removes or raw_removes or (vectors is not None and vectors.vectors)
    feed = change_data is not None and change.data_change and rewrites and log_commit.feed_enabled(delta)
    return _commit_written_here(root_uri, storage, table, delta, change, actions, vectors, raw_removes, change_data if feed else None, metadata)


def _commit_written_here(
    root_uri: str, storage: StorageConfig, table: Table, delta: FollowedLog, change: SnapshotChange, actions: list,
    vectors: vector_mirror.VectorCommit | None, raw_removes: list[RemovedFile] | None, change_data: ChangeData | None, metadata: dict,
) -> int:
    """The version as this project writes it (log_commit.py), with change data files (`change_data` given), deletion
    vectors (`vectors`), or neither. Returns the version."""
    cdc = []
    if change_data is not None:
        if change.change_data is not None and not raw_removes:
            cdc = change.change_data  # written by the write itself, with its data files
        else:
            cdc = change_data(table, change, root_uri, storage, [join_uri(root_uri, r.path) for r in raw_removes or []])
    rendered, protocol = (vectors.actions, vectors.protocol) if vectors is not None else (actions, None)
    removed_rows = {relative_to(root_uri, f.file_path): f.record_count for f in change.removes}
    return log_commit.commit(root_uri, storage, delta, rendered, cdc, app_transactions(change.snapshot, change.summary), metadata, protocol, removed_rows)


def _replace_with_wider_types(
    root_uri: str, storage: StorageConfig, configuration: dict[str, str], table: Table, delta: FollowedLog,
    snap: Snapshot, schema: Schema, metadata: dict, now: int, policy: StatisticsPolicy,
) -> None:
    """Mirror a snapshot that widened column types as one CREATE OR REPLACE commit.

    Delta cannot change a column's type in place without its typeWidening feature, which delta-rs
    cannot write. The widening snapshot rewrote every live file in the new types (Lakehouse._write),
    so the replace carries the new schema and the snapshot's complete file list; earlier Delta
    versions keep their own schema and files and stay readable.
    """
    adds = [add_action(root_uri, table, schema, f, True, now, policy) for f in live_data_files(table, snap.snapshot_id)]
    configuration = {**(delta.metadata().configuration or {}), **configuration}
    create_table_with_add_actions(
        root_uri,
        delta_schema(schema),
        adds,
        mode="overwrite",
        partition_by=delta_partition_columns(table.spec(), schema) or None,
        name=table.name()[-1],
        configuration={**configuration, **policy.delta_configuration(configuration)},
        storage_options=storage.delta_options(root_uri),
        commit_properties=CommitProperties(
            custom_metadata={**metadata, DeltaCommitKeys.REPLACED_FOR: "type-widening"},
            max_commit_retries=0,
            app_transactions=app_transactions(snap, metadata),
        ),
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False),
    )
    delta.update_incremental()


def app_transactions(snap: Snapshot, summary: dict[str, str]) -> list[Transaction]:
    """The commit's Delta `txn` actions: the mirror's own (version = the snapshot's sequence number) and, for a
    streaming micro-batch, the query's (appId = the query id, version = the batch id), as Spark's Delta sink writes it."""
    out = [Transaction(DELTA_APP_ID, snap.sequence_number)]
    query_id, batch_id = summary.get(SummaryKeys.STREAM_QUERY_ID), summary.get(SummaryKeys.STREAM_BATCH_ID)
    if query_id and batch_id is not None:
        out.append(Transaction(query_id, int(batch_id)))
    return out


def commit_full_diff(
    root_uri: str, storage: StorageConfig, configuration: dict[str, str], table: Table, delta: FollowedLog, target: Snapshot,
    change_data: ChangeData | None = None,
) -> None:
    """Delta is older than the retained Iceberg history: one commit that makes the file sets equal."""
    iceberg_files = {relative_to(root_uri, f.file_path): f for f in live_data_files(table, target.snapshot_id)}
    delta_files = {delta_path(a["path"]): a for a in pa.table(delta.get_add_actions(flatten=True)).to_pylist()}
    adds = [f for p, f in iceberg_files.items() if p not in delta_files]
    if refusals := misnamed_refusals(table, table.schemas().get(target.schema_id, table.schema()), [f.file_path for f in adds]):
        raise MirrorRefused(refusal_message(table, delta, f"at snapshot {target.snapshot_id}: " + "; ".join(refusals)))
    # Merge-on-read: every live position-delete file becomes its file's vector; a vector Iceberg has no deletes for goes.
    deletes, stale = vector_mirror.full_diff(root_uri, table, delta, target, iceberg_files) if vector_mirror.enabled(table.properties) else ([], set())
    adds += [iceberg_files[p] for p in sorted(stale)]
    removes = [
        RemovedFile(p, a.get("size_bytes"), {k[len("partition."):]: v for k, v in a.items() if k.startswith("partition.")})
        for p, a in delta_files.items()
        if p not in iceberg_files or p in stale
    ]
    summary = history.summary(target)
    summary[SummaryKeys.OPERATION] = Operation.REPAIR
    change = SnapshotChange(target, adds, [], summary, delete_files_added=deletes)
    commit_change(root_uri, storage, configuration, table, delta, change, raw_removes=removes, change_data=change_data)

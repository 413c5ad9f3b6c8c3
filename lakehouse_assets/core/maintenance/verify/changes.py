"""The formats-agree check of what changed since a pair of versions that agreed.

The blocking `formats_agree` check runs after every materialization. Comparing every live file costs what the
table holds (seconds at 100,000 files); what a write can break is what it changed. Given a pair a previous check
found agreeing (an Iceberg snapshot, the Delta version that mirrored it), both formats agree now if and only if
they agreed then and changed the same way since: the snapshots after it added and removed the same files as the
Delta versions after it, and each added file carries the same rows, partition values and statistics in both
logs. So the check reads the manifests those snapshots wrote (not every live manifest), the commits those
versions wrote, and compares the added files one by one.

The pair is trusted only as far as the logs confirm it: the snapshot must be an ancestor of the current one, the
Delta version's commitInfo must name that snapshot, and every commit since must be readable; otherwise, and on a
table with live row-level deletes (whose deleted positions are compared file by file), the check compares
everything (`verify_table` without a pair). `lakehouse verify` and maintenance's `verify_deep` always do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ...formats import file_columns, manifest_lists
from ...formats.delta.actions import add_action
from ...formats.delta.logged_stats import LoggedChanges, logged_changes, net_changes
from ...io.storage import relative_to
from ...properties import DeltaCommitKeys
from ...schema.spec import statistics_policy


@dataclass(frozen=True)
class VerifiedPair:
    """An Iceberg snapshot and the Delta version that mirrored it, which a check found agreeing."""

    snapshot_id: int
    delta_version: int


@dataclass
class Changes:
    """What both logs changed since a verified pair (decoded paths relative to the table root)."""

    since: VerifiedPair
    iceberg_added: dict[str, DataFile]  # path -> its data file
    iceberg_removed: set[str]
    iceberg_added_twice: list[str]  # paths added again while live: Iceberg readers read their rows twice
    delta: LoggedChanges
    mirrored_sequence_number: int | None = None  # the Iceberg sequence number the Delta log says it mirrored

    def set_differences(self) -> list[str]:
        """Files one log added or removed since the pair and the other did not."""
        out = []
        since = f"since Iceberg snapshot {self.since.snapshot_id} and Delta version {self.since.delta_version}"
        for what, iceberg, delta in (("added", set(self.iceberg_added), set(self.delta.added)), ("removed", self.iceberg_removed, self.delta.removed)):
            if only := sorted(iceberg - delta):
                out.append(f"{len(only)} file(s) {what} {since} only in Iceberg, e.g. {only[:3]}")
            if only := sorted(delta - iceberg):
                out.append(f"{len(only)} file(s) {what} {since} only in Delta, e.g. {only[:3]}")
        out += [f"Iceberg lists data file {p} twice (its readers read its rows twice; Delta lists it once)" for p in self.iceberg_added_twice]
        return out


def changes_since(table: Table, snap: Snapshot | None, mirror, delta, since: VerifiedPair, root: str) -> Changes | None:
    """What Iceberg's snapshots after `since` and Delta's versions after it changed, or None when the pair cannot
    be trusted or the logs since cannot be read (the caller then compares everything)."""
    if snap is None or delta is None or delta.version() < since.delta_version:
        return None
    chain = _snapshots_after(table, snap, since.snapshot_id)
    if chain is None:
        return None
    logged = logged_changes(mirror.storage, mirror.root_uri, since.delta_version, delta.version())
    if logged is None or str(logged.commits[since.delta_version].get(DeltaCommitKeys.ICEBERG_SNAPSHOT_ID)) != str(since.snapshot_id):
        return None
    events = _iceberg_events(table, chain, root)
    if events is None:
        return None
    added, removed = net_changes(events)
    return Changes(since, added, removed, _added_twice(events), logged)


def as_mirrored(table: Table, root_uri: str, changed: Changes) -> set[str]:
    """The added files whose logged Delta add is exactly the one the mirror derives from their Iceberg data file
    (formats/delta/actions.py: size, partition values, statistics with the row count), under the current schema.
    Those agree by construction; a file another engine added, or one added under an older schema or statistics
    policy, is left to the comparison of what Delta readers parse."""
    schema = table.schema()
    names, policy = file_columns.file_names(table, schema), statistics_policy(table, schema)
    out = set()
    for path, logged in changed.delta.added.items():
        data_file = changed.iceberg_added.get(path)
        if data_file is None or logged.get("deletionVector") is not None:
            continue
        try:
            derived = add_action(root_uri, table, schema, data_file, True, 0, policy, names)
            same = (logged.get("size") == derived.size and (logged.get("partitionValues") or {}) == dict(derived.partition_values)
                    and json.loads(logged.get("stats") or "null") == json.loads(derived.stats))
        except (ValueError, KeyError):  # not derivable here (a value Delta cannot hold...): compared as parsed
            same = False
        if same:
            out.add(path)
    return out


def listed_count_differences(table: Table, snap: Snapshot) -> list[str]:
    """Iceberg's snapshot summary against what its manifest list says the manifests hold (each manifest's added and
    existing files and rows, counted as it was written): a manifest rewritten without an entry it had to keep, or
    with one twice (a merge of manifests, an overwrite's rewrite), changes what Iceberg readers read, not the summary
    (counted from the files the commit added and removed), nor the files the commits changed, which the check compares.
    The list is the one the commits or the check already hold (manifest_lists.py): no manifest is read."""
    summary = snap.summary.additional_properties if snap.summary else {}
    manifests = [m for m in manifest_lists.manifests(table.io, snap) if m.content == ManifestContent.DATA]
    out = []
    for what, total, counts in (
        ("data files", summary.get("total-data-files"), [(m.added_files_count, m.existing_files_count) for m in manifests]),
        ("rows", summary.get("total-records"), [(m.added_rows_count, m.existing_rows_count) for m in manifests]),
    ):
        if total is None or any(n is None for pair in counts for n in pair):
            continue  # a writer that does not record them
        if (listed := sum(a + e for a, e in counts)) != int(total):
            out.append(f"Iceberg's manifests list {listed} live {what}, its snapshot summary {total}: a manifest was "
                       "rewritten without an entry it had to keep, or with one twice; Iceberg readers read what the manifests list")
    return out


def _snapshots_after(table: Table, snap: Snapshot, since_id: int) -> list[Snapshot] | None:
    """The ancestors of `snap` after the snapshot `since_id`, oldest first; None when it is no ancestor (a rollback
    to an older snapshot, a table made again under the same name) or history was expired past it."""
    chain = []
    while snap.snapshot_id != since_id:
        chain.append(snap)
        if snap.parent_snapshot_id is None or (snap := table.metadata.snapshot_by_id(snap.parent_snapshot_id)) is None:
            return None
    return list(reversed(chain))


def _iceberg_events(table: Table, chain: list[Snapshot], root: str) -> list[tuple[str, str, Any]] | None:
    """The data files `chain`'s snapshots removed and added, in order, from the manifests each of them wrote; None
    when one of them touched delete files (their positions are compared by the full check)."""
    events: list[tuple[str, str, Any]] = []
    for snap in chain:
        for manifest in manifest_lists.manifests(table.io, snap):  # (read once: the check asks for them again)
            if manifest.added_snapshot_id != snap.snapshot_id or not ((manifest.added_files_count or 0) + (manifest.deleted_files_count or 0)):
                continue  # written earlier, or merged from entries that existed before: no change of this snapshot
            if manifest.content != ManifestContent.DATA:
                return None
            entries = [e for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False) if e.snapshot_id == snap.snapshot_id]
            events += [("remove", _relative(root, e.data_file.file_path), None) for e in entries if e.status == ManifestEntryStatus.DELETED]
            events += [("add", _relative(root, e.data_file.file_path), e.data_file) for e in entries if e.status == ManifestEntryStatus.ADDED]
    return events


def _added_twice(events: list[tuple[str, str, Any]]) -> list[str]:
    """Paths added while an earlier add of theirs in `events` was still live."""
    live: set[str] = set()
    twice = []
    for kind, path, _ in events:
        if kind == "add" and path in live:
            twice.append(path)
        (live.add if kind == "add" else live.discard)(path)
    return sorted(set(twice))


def _relative(root: str, uri: str) -> str:
    try:
        return relative_to(root, uri)
    except ValueError:
        return uri  # outside the table root: never in the Delta log, reported as Iceberg-only

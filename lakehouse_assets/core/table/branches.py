"""Iceberg branches of a table: where a write goes instead of main, and what a read or a publish sees.

A branch is an Iceberg ref to a snapshot whose ancestry forks from main. Only main is mirrored to Delta
(Delta has no branches), so the rows written to a branch are visible to Iceberg readers that ask for the
branch and to nobody else until they are published (core/write/publish.py).

Every write mode plans against "the table's current snapshot" (`Table.current_snapshot()`): `on_branch`
gives the planning code a view of the table whose current snapshot is the branch's head, so a merge or
an overwrite on a branch plans against the branch's files without each plan taking a snapshot argument.
The view is for planning and for the snapshot producer's base only: a commit sends the catalog updates and
requirements (the branch's ref), never the view's metadata, and reloads the real table afterwards.
"""

from __future__ import annotations

import re

from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from ..errors import SpecError, TableNotFound
from ..properties import SummaryKeys

MAIN = MAIN_BRANCH
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def target_branch(identifier: str, branch: str | None) -> str | None:
    """The branch a write or read names, checked: None for main (None or "main")."""
    if branch is None or branch == MAIN:
        return None
    if not isinstance(branch, str) or not _NAME.match(branch):
        raise SpecError(
            f"Table {identifier}: {branch!r} is not a usable branch name: use letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (at most 128 characters)."
        )
    return branch


def head(table: Table, branch: str) -> Snapshot | None:
    """The snapshot `branch` points to (None: no such branch, or a tag of that name)."""
    ref = table.metadata.refs.get(branch)
    if ref is None or ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        return None
    return table.metadata.snapshot_by_id(ref.snapshot_id)


def branches(table: Table) -> dict[str, int]:
    """The table's branches other than main: name -> head snapshot id."""
    return {name: ref.snapshot_id for name, ref in sorted(table.metadata.refs.items()) if name != MAIN and ref.snapshot_ref_type == SnapshotRefType.BRANCH}


def require_head(identifier: str, table: Table, branch: str) -> Snapshot:
    """`head`, or a clear error naming the branches the table has."""
    snap = head(table, branch)
    if snap is None:
        have = ", ".join(branches(table)) or "none besides main"
        raise TableNotFound(f"Table {identifier} has no Iceberg branch {branch!r} (its branches: {have}).")
    return snap


def read_view(identifier: str, table: Table, branch: str | None, *points_in_time) -> Table:
    """The table as a read of `branch` sees it (its head as the current snapshot); the table itself for main.
    A read names a branch or a point in time (`points_in_time`: snapshot id, Delta version, time), not both."""
    branch = target_branch(identifier, branch)
    if branch is None:
        return table
    if any(x is not None for x in points_in_time):
        raise SpecError(f"Table {identifier}: give a branch or a point in time (snapshot_id, delta_version, as_of), not both.")
    require_head(identifier, table, branch)
    return on_branch(table, branch)


def on_branch(table: Table, branch: str | None) -> Table:
    """`table` as a write to `branch` plans against it: its current snapshot is the branch's head. A branch
    that does not exist yet starts at main's head (the write creates it there), so the view is the table."""
    if branch is None or (snap := head(table, branch)) is None:
        return table
    metadata = table.metadata.model_copy(update={"current_snapshot_id": snap.snapshot_id})
    return Table(table._identifier, metadata, table.metadata_location, table.io, table.catalog, getattr(table, "config", {}))


def fork_point(table: Table, branch_head: Snapshot) -> Snapshot | None:
    """The snapshot the branch's own snapshots start from: the newest ancestor of its head that main's ancestry
    holds too, or that was not written to this branch (`SummaryKeys.BRANCH`) when main's ancestry no longer
    reaches it (expired). None: the branch started on an empty table, or its fork point was expired."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    on_main = set()
    snap = table.current_snapshot()
    while snap is not None:
        on_main.add(snap.snapshot_id)
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    name = _branch_of(branch_head)
    snap = branch_head
    while snap is not None:
        if snap.snapshot_id in on_main or _branch_of(snap) != name:
            return snap
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return None


def _branch_of(snapshot: Snapshot) -> str | None:
    return snapshot.summary.additional_properties.get(SummaryKeys.BRANCH) if snapshot.summary else None


def staged(table: Table, branch_head: Snapshot, fork: Snapshot | None) -> list[Snapshot]:
    """The branch's own snapshots after `fork`, oldest first."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    chain, snap = [], branch_head
    while snap is not None and (fork is None or snap.snapshot_id != fork.snapshot_id):
        chain.append(snap)
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return list(reversed(chain))

"""Publishing a branch: main (and with it the Delta log) takes the rows a branch staged; discarding one.

Writes to a branch (core/table/branches.py) change neither main nor Delta. Publishing makes them main's:

- when main has not moved since the branch forked, main fast-forwards to the branch's head (no file is
  written or copied), and the Delta mirror commits each staged snapshot as one Delta version, as it does
  after any write to main;
- when another writer committed to main meanwhile, the branch's net change (the files its head has and
  the fork had not, and the reverse) is committed on top of main as one new snapshot, when that is safe:
  always for appends; for a merge or an overwrite only if every file it replaces is still live on main
  and main gained no data since the fork (the merge or overwrite was planned without those rows), and
  never when main's partition spec changed since the files were written (they carry the old one).
  Otherwise nothing changes and the error says which case it is: never a lost commit.

A re-applied snapshot names the branch head it published (`SummaryKeys.PUBLISHED_SNAPSHOT`): publishing the
branch again takes only what it staged since, so a publish run twice never commits the same files twice.

Delta versions another engine wrote are met first, as a write to main meets them (the table's
foreign-Delta policy: refused or adopted).
"""

from __future__ import annotations

import logging

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ..contracts.model import QUARANTINE_SUFFIX
from ..errors import CommitConflict, DeleteFilesError, SpecError
from ..formats import history
from ..formats.deletes import table_files
from ..formats.iceberg import committer as ic
from ..model import PublishResult
from ..properties import Operation, SummaryKeys
from ..table import branches
from ..table.context import TableContext
from . import transaction
from .table_write import foreign_delta_gate

log = logging.getLogger("lakehouse")

FAST_FORWARD = "fast-forward"
REAPPLIED = "re-applied"
NOTHING = "nothing to publish"
FAST_FORWARD_ATTEMPTS = 3  # main moving between reading it and fast-forwarding it sends the publish to re-apply


def publish(ctx: TableContext, identifier: str, branch: str, *, foreign_default: str, spark=None) -> PublishResult:
    """Make `branch`'s staged snapshots main's, then mirror main to Delta. The branch is kept (now at main's head
    or behind it); `discard` removes it. Rows a data contract quarantined on the same branch (`<table>_quarantine`)
    are published first, so a publish that stops half-way loses none of them."""
    branch = branches.target_branch(identifier, branch)
    if branch is None:
        raise SpecError(f"Table {identifier}: name the branch to publish; main is what a publish goes to.")
    quarantine = _quarantine_on(ctx, identifier, branch)
    staged_quarantine = _publish(ctx, quarantine, branch, foreign_default, spark) if quarantine is not None else None
    table = ctx.load(identifier)
    if staged_quarantine is not None and branches.head(table, branch) is None:  # the contract quarantined every row written
        result = _result(ctx, identifier, table, branch, NOTHING, table.current_snapshot(), 0)
    else:
        result = _publish(ctx, identifier, branch, foreign_default, spark)
    if staged_quarantine is not None:
        result.contract = {"quarantine_table": quarantine, "quarantine_published": staged_quarantine.published,
                           "quarantine_snapshot_id": staged_quarantine.iceberg_snapshot_id}
    return result


def _quarantine_on(ctx: TableContext, identifier: str, branch: str) -> str | None:
    """`<table>_quarantine` when it holds `branch` (a contract quarantined rows of a write to that branch)."""
    quarantine = identifier + QUARANTINE_SUFFIX
    if not ctx.catalog.table_exists(quarantine):
        return None
    return quarantine if branches.head(ctx.load(quarantine), branch) is not None else None


def _publish(ctx: TableContext, identifier: str, branch: str, foreign_default: str, spark) -> PublishResult:
    table = ctx.load(identifier)
    head = branches.require_head(identifier, table, branch)
    fork = branches.fork_point(table, head)
    staged = branches.staged(table, head, fork)
    main = table.current_snapshot()
    main_fork = fork  # where main's own history since the branch forked starts
    if (done := _already_reapplied(table, main, fork, staged)) is not None:
        # An earlier publish re-applied the branch up to `done`: only what it staged since is left to publish, so
        # a publish run again (a retried step) commits nothing twice.
        fork, staged = done, staged[staged.index(done) + 1:]
    if not staged:
        result = _result(ctx, identifier, table, branch, NOTHING, main, 0)
        if done is not None and ctx.delta_enabled(table):
            transaction.mirror_to_delta(ctx.mirror(table), table, result)  # that publish may have stopped before Delta
        return result
    if ctx.delta_enabled(table):
        removes = sum(int(history.summary(s).get("deleted-data-files", 0)) for s in staged if history.summary(s).get(SummaryKeys.OPERATION) != Operation.COMPACTION)
        transaction.refuse_removes_if_append_only(identifier, ctx.mirror(table), removes, f"publishing branch {branch!r}")
    if ctx.delta_enabled(table) and foreign_delta_gate(ctx, identifier, table, foreign_default, spark) is False:
        table = ctx.load(identifier)  # foreign Delta versions were adopted: main moved
        main = table.current_snapshot()
    for attempt in range(1, FAST_FORWARD_ATTEMPTS + 1):
        if main is None or (fork is not None and main.snapshot_id == fork.snapshot_id):
            try:
                with table.manage_snapshots() as refs:  # asserts main is still where it was read
                    refs.set_current_snapshot(snapshot_id=head.snapshot_id)
            except CommitFailedException as e:  # another writer moved main meanwhile: decide again
                if attempt == FAST_FORWARD_ATTEMPTS:
                    raise CommitConflict(f"Table {identifier}: publishing branch {branch!r} lost {attempt} races with writers of main "
                                         f"(pyiceberg: {e}). Nothing was published: run the publish again.") from e
                table = ctx.load(identifier)
                main = table.current_snapshot()
                continue
            how, published = FAST_FORWARD, head
        else:
            published = _reapply(identifier, table, branch, head, fork, staged, main, main_fork)
            how = REAPPLIED
        break
    table = ctx.load(identifier)
    result = _result(ctx, identifier, table, branch, how, published, len(staged))
    if ctx.delta_enabled(table):
        transaction.mirror_to_delta(ctx.mirror(table), table, result)
    log.info("Table %s: published branch %s (%s, %d snapshot(s)) as snapshot %s", identifier, branch, how, len(staged), published.snapshot_id)
    return result


def discard(ctx: TableContext, identifier: str, branch: str) -> dict:
    """Remove `branch` (its ref only). Its snapshots are no branch's head any more: snapshot expiry removes them,
    and orphan cleanup then the files only they referenced. Main and Delta are not touched. The rows a contract
    quarantined on the same branch are discarded with it."""
    branch = branches.target_branch(identifier, branch)
    if branch is None:
        raise SpecError(f"Table {identifier}: main cannot be discarded; name a branch (see lakehouse tables).")
    quarantine = _quarantine_on(ctx, identifier, branch)
    if quarantine is not None and branches.head(ctx.load(identifier), branch) is None:  # the contract quarantined every row written
        result = {"table": identifier, "branch": branch, "head_snapshot_id": None, "unpublished_snapshots": 0}
    else:
        result = _discard(ctx, identifier, branch)
    if quarantine is not None:
        result["quarantine"] = _discard(ctx, quarantine, branch)
    return result


def _discard(ctx: TableContext, identifier: str, branch: str) -> dict:
    table = ctx.load(identifier)
    head = branches.require_head(identifier, table, branch)
    fork = branches.fork_point(table, head)
    unpublished = len(branches.staged(table, head, fork))
    with table.manage_snapshots() as refs:
        refs.remove_branch(branch)
    log.info("Table %s: discarded branch %s (%d unpublished snapshot(s))", identifier, branch, unpublished)
    return {"table": identifier, "branch": branch, "head_snapshot_id": head.snapshot_id, "unpublished_snapshots": unpublished}


def _reapply(
    identifier: str, table: Table, branch: str, head: Snapshot, fork: Snapshot | None, staged: list[Snapshot], main: Snapshot, main_fork: Snapshot | None
) -> Snapshot:
    """The branch's net change committed on top of main (which moved since the fork), or a refusal. `main_fork`: where
    the branch left main (`fork` itself, unless an earlier publish re-applied part of the branch)."""
    if fork is None and staged[0].parent_snapshot_id is not None:
        raise CommitConflict(
            f"Table {identifier}: the snapshot branch {branch!r} forked from (snapshot {staged[0].parent_snapshot_id}) was expired, "
            "and main moved since, so the branch's own change cannot be told apart from main's rows. Nothing was published. "
            "Write the change again on a new branch (or to main); snapshot expiry keeps the fork point of branches written "
            "since, so this does not recur."
        )
    at_head, at_fork, on_main = table_files(table, head), table_files(table, fork) if fork is not None else None, table_files(table, main)
    if at_head.deletes:
        raise DeleteFilesError(
            f"Table {identifier}: branch {branch!r} holds delete files another engine wrote, and main moved since the branch "
            "forked, so its change cannot be re-applied file by file. Nothing was published. Apply the deletes on the "
            "branch first, or publish before main moves."
        )
    fork_paths = {e.data_file.file_path for e in at_fork.data} if at_fork is not None else set()
    head_paths = {e.data_file.file_path for e in at_head.data}
    main_live = {e.data_file.file_path: e.data_file for e in on_main.data}
    adds = [e.data_file for e in at_head.data if e.data_file.file_path not in fork_paths]
    removed = sorted(fork_paths - head_paths)
    moved = [s.snapshot_id for s in _main_since(table, main, main_fork)]
    if gone := [p for p in removed if p not in main_live]:
        raise CommitConflict(
            f"Table {identifier}: branch {branch!r} replaces {len(gone)} file(s) that main no longer has (snapshot(s) {moved} "
            f"committed to main since the branch forked changed them, e.g. {gone[0]}). Nothing was published: re-applying would "
            "bring back rows main removed. Write the change again on a branch from main's current snapshot, or directly to main."
        )
    if stale := [f for f in adds if f.spec_id != table.metadata.default_spec_id]:
        raise CommitConflict(
            f"Table {identifier}: main's partition spec changed since branch {branch!r} was written (its files use spec "
            f"{stale[0].spec_id}, main's is {table.metadata.default_spec_id}), and main moved since the branch forked, so its "
            "files cannot be re-applied as they are. Nothing was published. Write the change again on a branch from main's "
            "current snapshot, or directly to main."
        )
    gained = {e.data_file.file_path for e in on_main.data} - fork_paths
    merged = any(SummaryKeys.MERGE_KEYS in history.summary(s) for s in staged)
    if gained and (removed or merged):
        what = "merges" if merged else "replaces files"
        raise CommitConflict(
            f"Table {identifier}: branch {branch!r} {what}, and main gained {len(gained)} data file(s) since the branch forked "
            f"(snapshot(s) {moved}), which that change was planned without. Nothing was published: re-applying could duplicate "
            "merge keys or keep rows an overwrite replaces. Write the change again on a branch from main's current snapshot, "
            "or directly to main."
        )
    summary = {k: v for k, v in history.summary(staged[-1]).items() if k.startswith("lakehouse.") and k != SummaryKeys.COMMIT_ID}
    summary |= {SummaryKeys.PUBLISHED_BRANCH: branch, SummaryKeys.PUBLISHED_SNAPSHOT: str(head.snapshot_id)}
    snapshot = ic.commit_files(table, adds, [main_live[p] for p in removed], summary)
    if snapshot is None:  # the branch's snapshots add and remove nothing (e.g. a merge that matched no change)
        return main
    return snapshot


def _already_reapplied(table: Table, main: Snapshot | None, fork: Snapshot | None, staged: list[Snapshot]) -> Snapshot | None:
    """The newest of the branch's `staged` snapshots that a snapshot of main since the fork re-applied (its summary
    names the branch head it published), or None. A fast-forward needs no such mark: main's ancestry then holds
    the branch's snapshots, and the fork point is past them."""
    if main is None:
        return None
    published = {history.summary(s).get(SummaryKeys.PUBLISHED_SNAPSHOT) for s in _main_since(table, main, fork)}
    done = [s for s in staged if str(s.snapshot_id) in published]
    return done[-1] if done else None


def _main_since(table: Table, main: Snapshot, fork: Snapshot | None) -> list[Snapshot]:
    """Main's snapshots after the fork, oldest first."""
    return branches.staged(table, main, fork)


def _result(ctx: TableContext, identifier: str, table: Table, branch: str, how: str, snapshot: Snapshot | None, count: int) -> PublishResult:
    result = PublishResult.for_table(identifier, table, "publish", snapshot.snapshot_id if snapshot is not None else None)
    result.branch, result.published, result.snapshots_published = branch, how, count
    return result

"""The commit pipeline: the one place where a table's files change, for every write mode and for compaction.

Given the files an operation wrote and the files it replaces (a `FileChanges`, planned without
committing), `commit`:

1. commits them as one Iceberg snapshot (the source of truth), together with any schema change; the manifests that
   list the added files are written before the commit queues for the table's commit lock, and kept for every attempt
   (core/formats/iceberg/clustered_manifests.py). A race lost to
   another writer (the catalog's compare-and-swap failed) is re-validated against the snapshots that landed
   (core/write/conflicts.py): when they leave the plan valid, the same files are committed again on top, after a
   short jittered wait, at most COMMIT_ATTEMPTS times (or as the table's `commit.retry.*` properties say);
2. if that fails, deletes every file the operation wrote (nothing became visible) and raises a
   `CommitError` (a `CommitConflict` naming the other write when it invalidated the plan). When the
   catalog cannot say whether the commit landed (pyiceberg's `CommitStateUnknownException`: a REST catalog
   answered 500, 502 or 504), the table is read again: a new snapshot carrying the commit's own id
   (`SummaryKeys.COMMIT_ID`) is its commit, and the write goes on; otherwise the files are kept (the commit
   may still land) and `CommitOutcomeUnknown` is raised;
3. mirrors the snapshot to Delta with one retry policy (`sync_delta`). Iceberg-primary: if Delta
   still fails, the write succeeds with a warning and `WriteResult.delta_lagging` set, and the next
   write or `repair` catches up.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass

from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, ValidationException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ..errors import CommitConflict, CommitError, CommitOutcomeUnknown, LakehouseError, MirrorRefused
from ..formats import history
from ..formats.delta import foreign_versions as foreign_delta
from ..formats.delta import glue as delta_glue
from ..formats.delta.committer import APPEND_ONLY, DeltaMirror
from ..formats.iceberg import committer as ic
from ..formats.iceberg.clustered_manifests import PreparedAdds, prepare_adds
from ..formats.snapshot_changes import SnapshotChange
from ..io.storage import delete_files
from ..model import FileChanges, WriteResult
from ..properties import Operation, SummaryKeys
from ..table import commit_lock
from ..table.context import TableContext
from ..table.evolution import SchemaPlan, apply_schema_change
from . import conflicts

log = logging.getLogger("lakehouse")

# The Delta retry policy. A conflict (another process committed to the log first) is retried after
# re-reading the log: the txn tag tells what is left. Any other failure (storage) is retried once.
DELTA_CONFLICT_ATTEMPTS = 8
DELTA_FAILURE_ATTEMPTS = 2
# The Iceberg commit's races: attempts and time are bounded; the wait before each new attempt is drawn at random up to
# a bound that starts at COMMIT_WAIT_SECONDS and doubles to COMMIT_WAIT_MAX_SECONDS ("full jitter"), so writers that
# lost together do not collide again together. A table that sets Iceberg's own commit.retry.* properties gets those.
COMMIT_ATTEMPTS = 50
COMMIT_SECONDS = 300.0
COMMIT_WAIT_SECONDS = 0.02
COMMIT_WAIT_MAX_SECONDS = 1.0
# SQLite answers "database is locked" only after its busy timeout (5 s): another connection held the lock that long,
# which a commit (milliseconds) does not; so such a lock is tried once more, not COMMIT_ATTEMPTS times.
LOCKED_ATTEMPTS = 2


def commit(
    ctx: TableContext,
    identifier: str,
    table: Table,
    changes: FileChanges,
    summary: dict[str, str],
    *,
    mode: str,
    schema_plan: SchemaPlan | None = None,
    revalidate: conflicts.Check | None = None,
    delta=None,
    branch: str | None = None,
) -> WriteResult:
    """Commit `changes` to Iceberg, then mirror to Delta. See the module docstring for the failure rules.

    `revalidate(fresh_table, base_snapshot_id)`: after a lost race, why the snapshots committed since `base` invalidate
    the plan (a reason), or None when it still holds (conflicts.py has one per write mode). None: any concurrent change
    of the table's files invalidates it (`conflicts.any_change`, compaction's).

    `branch`: commit to that Iceberg branch (`table` is the branch's view, core/table/branches.py). Delta
    mirrors main only, so nothing reaches the Delta log until the branch is published.

    The commit queues on the table's commit lock (core/table/commit_lock.py): its Iceberg stage for the Iceberg commit,
    its Delta stage for the Delta version. The project's writers sharing a SQL catalog commit in turn instead of
    racing, the next one's Iceberg commit while this one writes its Delta version.
    """
    # Not while the writers behind this one wait on the lock: the pool's threads (a write started them as it began), the
    # added files' manifests.
    ic.start_manifest_threads()
    prepared = _prepared_adds(identifier, table, changes, schema_plan, branch)
    with commit_lock.committing(ctx.catalog, identifier) as turn:
        return _commit(ctx, identifier, table, changes, summary, mode, schema_plan, revalidate, delta, branch, turn, prepared)


def _prepared_adds(identifier: str, table: Table, changes: FileChanges, schema_plan: SchemaPlan | None, branch: str | None) -> PreparedAdds | None:
    """The manifests of the added files, written before the commit queues (clustered_manifests.prepare_adds). None for a
    branch or a schema change (the commit's own transaction writes them, against its staged schema), or when writing
    them failed: the commit then writes them itself, and says what failed if that fails too."""
    if branch is not None or (schema_plan is not None and not schema_plan.empty):
        return None
    try:
        return prepare_adds(table, changes.adds)
    except Exception as e:  # noqa: BLE001 - an early start only; the commit writes the manifests itself
        log.info("Table %s: the added files' manifests were not written before the commit (%s: %s); the commit writes them", identifier, type(e).__name__, e)
        return None


def _commit(ctx: TableContext, identifier: str, table: Table, changes: FileChanges, summary: dict[str, str], mode: str,
            schema_plan: SchemaPlan | None, revalidate: conflicts.Check | None, delta, branch: str | None, turn: commit_lock.Turn,
            prepared: PreparedAdds | None = None) -> WriteResult:
    """`commit`'s work; `turn.locked`: it holds the lock's Iceberg stage, so the writers ahead of it have committed
    their snapshots: it reads the table again first and re-validates against what they committed, instead of losing
    the race to them. `prepared`: the added files' manifests, removed with the files if nothing lands."""
    started = time.monotonic()
    mirror = ctx.mirror(table) if ctx.delta_enabled(table) and branch is None else None
    if mirror is not None and delta is not None:
        mirror.hand_over(delta)  # the log the write's foreign-version check read: brought up to date, not loaded again
    before_commit = {s.snapshot_id for s in table.metadata.snapshots}  # read now: a commit that lands updates `table` in place
    summary = {**summary, SummaryKeys.COMMIT_ID: uuid.uuid4().hex}
    try:
        if turn.locked and branch is None:
            table = _revalidated(identifier, table, _current_id(table), revalidate or conflicts.any_change, schema_plan, mode)
        summary = _with_expected_delta_version(identifier, table, mirror, summary, schema_plan)
        if summary.get(SummaryKeys.OPERATION) != Operation.COMPACTION:
            refuse_removes_if_append_only(identifier, mirror, len(changes.removes), "this write")
        table, snapshot, attempts = _commit_iceberg(identifier, table, changes, summary, mode, schema_plan, revalidate, branch, prepared, turn.locked)
    except CommitStateUnknownException as e:
        _drop_pooled_connections(table)
        table, snapshot = _landed(ctx, identifier, before_commit, summary[SummaryKeys.COMMIT_ID], e)
        attempts = None
    except BaseException as e:
        _drop_pooled_connections(table)
        # Nothing became visible: remove every file this operation created, the added files' manifests too.
        left = delete_files(ctx.storage, changes.created + ([m.manifest_path for m in prepared.manifests] if prepared else []))
        error = _commit_error(identifier, e, left)
        if error is None:
            raise
        raise error from e
    iceberg_done = time.monotonic()
    try:
        turn.to_delta()  # the writer behind may commit its snapshot while this one writes its Delta version
    except Exception as e:  # noqa: BLE001 - the snapshot has landed; a Delta commit is put-if-absent and retried without the stage too
        log.warning("Table %s: could not take the Delta stage of the commit lock (%s: %s); writing the Delta version without it", identifier, type(e).__name__, e)
    if mirror is not None:
        mirror.log_may_have_moved()  # the writer ahead wrote its Delta version while this one committed its snapshot
    result = WriteResult.for_table(identifier, table, mode, snapshot.snapshot_id if snapshot else _current_id(table))
    result.branch = branch
    result.files_added = len(changes.adds)
    result.files_removed = len(changes.removes)
    result.rows_written = changes.rows_written
    result.bytes_written = sum(f.file_size_in_bytes for f in changes.adds)
    result.rows_removed = sum(f.record_count for f in changes.removes) + changes.rows_deleted
    result.iceberg_commit_seconds = iceberg_done - started
    result.commit_attempts = attempts
    if mirror is not None:
        known = {
            snapshot.snapshot_id: SnapshotChange(snapshot, changes.adds, changes.removes, summary, changes.added_delete_files, changes.removed_delete_files, changes.change_data)
        } if snapshot else {}
        mirror_to_delta(mirror, table, result, known)
        result.delta_commit_seconds = time.monotonic() - iceberg_done
    return result


def _with_expected_delta_version(identifier: str, table: Table, mirror: DeltaMirror | None, summary: dict[str, str], schema_plan: SchemaPlan | None) -> dict[str, str]:
    """The snapshot summary, with the Delta version this snapshot will become; refuses before the Iceberg commit
    when the Delta log holds versions another engine wrote."""
    summary = dict(summary)
    if mirror is None:
        return summary
    if (expected := mirror.next_version(table)) is not None:
        # A schema change reaches Delta as metadata-only versions just before the data version.
        if schema_plan is not None:
            expected += (1 if schema_plan.add else 0) + len(schema_plan.make_optional)
        summary[SummaryKeys.DELTA_EXPECTED_VERSION] = str(expected)
    # Never build on Delta versions another engine wrote (policy `refuse`): fail before the Iceberg commit.
    # Under `adopt` they were adopted before the write was planned: one landing since then raced this write.
    foreign_delta.refuse_if_foreign(identifier, mirror._loaded, foreign_delta.REFUSE)
    return summary


def refuse_removes_if_append_only(identifier: str, mirror: DeltaMirror | None, removes: int, what: str) -> None:
    """A Delta table with `delta.appendOnly=true` takes no remove that changes data (the Delta protocol): a merge,
    overwrite, delete or rollback of such a table (`removes` data files removed, compaction's aside: its removes carry
    dataChange=false) is refused before the Iceberg commit, not left half-mirrored after it."""
    if mirror is None or not removes or not mirror.append_only():
        return
    raise MirrorRefused(
        f"Table {identifier}: its Delta table sets {APPEND_ONLY}=true, and {what} would remove {removes} data "
        "file(s) (a merge, overwrite or delete rewrites or drops rows), which the Delta protocol forbids on an append-only "
        f"table. Nothing was committed. Append instead, or, if the table may change rows, unset the property with the engine "
        f"that owns it (`ALTER TABLE ... SET TBLPROPERTIES ('{APPEND_ONLY}' = 'false')`) and write again."
    )



def _commit_iceberg(identifier: str, table: Table, changes: FileChanges, summary: dict[str, str], mode: str, schema_plan, revalidate, branch=None,
                    prepared: PreparedAdds | None = None, fresh: bool = False):
    """(the table as committed to, the new snapshot, the attempts it took): one Iceberg snapshot of `changes`, committed
    again on top of concurrent writes while `revalidate` says the plan still holds (see the module docstring).
    `fresh`: `table` was read just now, holding the commit lock; so is it after each re-validation."""
    stage = None if schema_plan is None or schema_plan.empty else (lambda tx: apply_schema_change(tx, schema_plan))
    base_id = _current_id(table)
    if branch is not None:
        # pyiceberg retries a branch commit itself and validates it against the branch's own history; re-validation
        # here reads main, so a branch write's lost race is refused as before.
        extra = _delete_file_changes(changes) | {"branch": branch, "branch_base_id": base_id}
        return table, ic.commit_files(table, changes.adds, changes.removes, summary, stage, **extra), 1
    check = revalidate or conflicts.any_change
    policy = _RetryPolicy.of(table.properties)
    started, locked = time.monotonic(), 0
    for attempt in range(1, policy.attempts + 1):
        try:
            # The delete files and prepared manifests are passed only when there are some: tests wrap commit_files as a seam.
            extra = _delete_file_changes(changes) | ({"prepared": prepared} if prepared is not None else {})
            with _handed_over(table, fresh or attempt > 1):
                return table, ic.commit_files(table, changes.adds, changes.removes, summary, stage, single_attempt=True, **extra), attempt
        except Exception as e:
            if not ic.lost_race(e):
                raise
            _drop_pooled_connections(table)
            locked += "database is locked" in str(e)
            if attempt == policy.attempts or time.monotonic() - started > policy.seconds or locked == LOCKED_ATTEMPTS:
                raise  # the commit pipeline's error names what failed and the way out
            time.sleep(policy.wait(attempt))
            table = _revalidated(identifier, table, base_id, check, schema_plan, mode, e)
            log.info("Table %s: %s re-validated after a concurrent commit (attempt %d): %s", identifier, mode, attempt, e)
            base_id = _current_id(table)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _handed_over(table: Table, fresh: bool):
    """A table just read stands in for the SQL catalog's own read of its row in the commit (catalog.fresh_for_commit):
    a snapshot commit of main, whose requirement fails the row's swap if anyone has committed since."""
    hand_over = getattr(table.catalog, "fresh_for_commit", None) if fresh else None
    return hand_over(table) if hand_over is not None else nullcontext()


def _revalidated(identifier: str, table: Table, base_id: int | None, check: conflicts.Check, schema_plan, mode: str, cause=None) -> Table:
    """`table`, read again in place (the caller's object then shows what it commits on), when the snapshots committed
    since `base_id` leave the plan valid; else `CommitConflict` naming the write that invalidated it."""
    schema_id = table.metadata.current_schema_id
    fresh = table.catalog.load_table(table.name())  # a SQL catalog: one query of the row; each metadata file parsed once
    if cause is None and fresh.metadata_location == table.metadata_location:
        return table  # nothing committed since the table was read
    _refresh_from(table, fresh)
    if _current_id(table) == base_id:
        return table
    conflict = check(table, base_id)
    if conflict is None and schema_plan is not None and not schema_plan.empty and table.metadata.current_schema_id != schema_id:
        conflict = "another write changed the table's schema since this write planned its own schema change"
    if conflict is not None:
        raise CommitConflict(
            f"Table {identifier}: the {mode} conflicts with a concurrent write: {conflict}. Nothing was committed and "
            f"the written files were removed. Run the {mode} again: it re-plans against the table as it is now."
        ) from cause
    return table


def _refresh_from(table: Table, fresh: Table) -> None:
    """pyiceberg's `Table.refresh`, from the table as the catalog has just returned it."""
    Table._check_uuid(table.metadata, fresh.metadata)  # a table dropped and created again under the name is refused
    table.metadata, table.io, table.metadata_location, table.config = fresh.metadata, fresh.io, fresh.metadata_location, fresh.config


@dataclass(frozen=True)
class _RetryPolicy:
    attempts: int
    seconds: float
    wait_min: float
    wait_max: float

    @classmethod
    def of(cls, properties: dict[str, str]) -> "_RetryPolicy":
        """The table's commit.retry.* properties where set (Iceberg's names: retries after the first attempt,
        milliseconds), this module's defaults otherwise."""
        def number(key: str, default: float) -> float:
            try:
                return max(0.0, float(properties[key]))
            except (KeyError, ValueError):
                return default

        return cls(
            attempts=int(number("commit.retry.num-retries", COMMIT_ATTEMPTS - 1)) + 1,
            seconds=number("commit.retry.total-timeout-ms", COMMIT_SECONDS * 1000) / 1000,
            wait_min=number("commit.retry.min-wait-ms", COMMIT_WAIT_SECONDS * 1000) / 1000,
            wait_max=number("commit.retry.max-wait-ms", COMMIT_WAIT_MAX_SECONDS * 1000) / 1000,
        )

    def wait(self, attempt: int) -> float:
        """Seconds before attempt `attempt + 1`: at random below a bound that doubles from wait_min to wait_max."""
        return random.uniform(0, min(self.wait_max, self.wait_min * 2 ** (attempt - 1)))


def _delete_file_changes(changes: FileChanges) -> dict:
    extra = {"removed_delete_files": changes.removed_delete_files} if changes.removed_delete_files else {}
    return extra | ({"added_delete_files": changes.added_delete_files} if changes.added_delete_files else {})


def _landed(ctx: TableContext, identifier: str, before_commit: set[int], commit_id: str, error: Exception) -> tuple[Table, Snapshot]:
    """(the table, the snapshot) of a commit whose outcome the catalog could not tell, when a snapshot made since
    (not in `before_commit`) carries its `commit_id`; else `CommitOutcomeUnknown`, keeping the files: deleting them
    could break a commit that lands later. The id, not the files, tells it: another writer's snapshot may remove
    the same files."""
    try:
        table = ctx.load(identifier)
        for snapshot in table.metadata.snapshots:
            if snapshot.snapshot_id not in before_commit and history.summary(snapshot).get(SummaryKeys.COMMIT_ID) == commit_id:
                log.warning("Table %s: the catalog could not confirm the commit (%s), and it landed as snapshot %s", identifier, error, snapshot.snapshot_id)
                return table, snapshot
        seen = "no new snapshot is this commit"
    except Exception as e:  # noqa: BLE001 - the catalog is still unreachable: the outcome stays unknown
        seen = f"reading the table again failed too: {type(e).__name__}: {e}"
    raise CommitOutcomeUnknown(
        f"Table {identifier}: the catalog could not confirm the Iceberg commit ({type(error).__name__}: {error}), and {seen}. "
        "The written files are kept, since the commit may still land. Look at `lakehouse history` before writing again: a "
        "snapshot with this write means it landed; if none appears after a while, write again. Orphan cleanup removes the "
        "unused files after its grace period."
    ) from error


def _commit_error(identifier: str, e: BaseException, left: list[str]) -> LakehouseError | None:
    """The error a failed Iceberg commit raises (None: raise `e` itself, e.g. already a LakehouseError). `left`: the
    written files the cleanup could not remove."""
    if isinstance(e, LakehouseError) or not isinstance(e, Exception):
        return None
    if isinstance(e, (CommitFailedException, ValidationException)):
        # Lost a race with other writers after pyiceberg's own retries: say how to get through.
        hint = " Other writers committed first: retry the write, or raise the table property commit.retry.num-retries."
        return CommitConflict(_failed(identifier, e, left) + (hint if isinstance(e, CommitFailedException) else ""))
    return CommitError(_failed(identifier, e, left))


def _drop_pooled_connections(table: Table) -> None:
    """After a failed commit, close a SQL catalog's pooled connections.

    A SQLite COMMIT that fails with "database is locked" leaves its transaction open, and SQLAlchemy returns
    that connection to the pool as it is: the next checkout reads the failed commit's metadata location as
    current (files this write just removed), and the next commit on it would make it permanent. Closing the
    connections discards the transaction."""
    engine = getattr(table.catalog, "engine", None)
    if engine is not None and hasattr(engine, "dispose"):
        engine.dispose()


def _failed(identifier: str, e: BaseException, left: list[str]) -> str:
    removed = "the written files were removed" if not left else (
        f"{len(left)} written file(s) could not be removed (e.g. {left[0]}): orphan cleanup removes them after its grace period")
    message = f"Table {identifier}: the Iceberg commit failed ({type(e).__name__}: {e}); nothing was committed and {removed}."
    if "database is locked" in str(e):
        # SQLite catalog: another connection keeps a read transaction open, so no commit can ever get through.
        message += (
            " Another process holds a lock on the SQLite catalog (catalog.db), e.g. Java Iceberg's JdbcCatalog, whose table check "
            "leaves a read open: set jdbc.init-catalog-tables=false on it (README, \"Reading from other engines\"), or stop that "
            "process, then retry."
        )
    return message


def _current_id(table: Table) -> int | None:
    snap = table.current_snapshot()
    return snap.snapshot_id if snap else None


def sync_delta(mirror: DeltaMirror, table: Table, known: dict[int, SnapshotChange] | None = None) -> int:
    """Bring the Delta log up to the table's current snapshot under the retry policy, then its Glue entry (when the
    Delta side is registered: a Glue failure is `mirror.glue_warning`, never a failure); returns the Delta version."""
    version = _sync_delta_log(mirror, table, known)
    if mirror.glue is not None:
        try:
            mirror.glue_action, mirror.glue_warning = delta_glue.keep_in_sync(mirror.glue, table, mirror.root_uri), None
        except Exception as e:  # noqa: BLE001 - Iceberg first: the commit stands, verify reports the entry, repair re-syncs
            mirror.glue_action, mirror.glue_warning = "failed", delta_glue.sync_warning(mirror.glue, e)
            log.warning(mirror.glue_warning)
    return version


def _sync_delta_log(mirror: DeltaMirror, table: Table, known: dict[int, SnapshotChange] | None) -> int:
    conflicts = failures = 0
    while True:
        try:
            return mirror.sync(table, known)
        except MirrorRefused:
            raise  # not a failure to retry: Delta cannot express the change
        except DeltaCommitFailedError:
            conflicts += 1
            if conflicts >= DELTA_CONFLICT_ATTEMPTS:
                raise
            time.sleep(min(0.05 * 2**conflicts, 1.0))
        except Exception as e:  # noqa: BLE001 - any storage error: one more try, then give up
            failures += 1
            log.warning("Table %s: Delta commit attempt %d of %d failed: %s: %s", ".".join(table.name()), failures, DELTA_FAILURE_ATTEMPTS, type(e).__name__, e)
            if failures >= DELTA_FAILURE_ATTEMPTS:
                raise


def mirror_to_delta(mirror: DeltaMirror, table: Table, result: WriteResult, known: dict[int, SnapshotChange] | None = None) -> None:
    """Iceberg-primary: a Delta failure after the retry policy is a warning and a recorded lag, not a failed write."""
    try:
        result.delta_version = sync_delta(mirror, table, known)
        if mirror.glue_warning:
            result.warnings.append(mirror.glue_warning)
        return
    except MirrorRefused as e:
        # Another engine's snapshot that Delta cannot express: the reason says how to make the table whole.
        error = f"{type(e).__name__}: {e}"
        message = f"Table {result.table}: Iceberg snapshot {result.iceberg_snapshot_id} committed; Delta lags: {e}"
    except Exception as e:  # noqa: BLE001 - the write itself has landed
        error = f"{type(e).__name__}: {e}"
        how = f"lost {DELTA_CONFLICT_ATTEMPTS} races to other Delta writers" if isinstance(e, DeltaCommitFailedError) else "failed twice"
        message = (
            f"Table {result.table}: Iceberg snapshot {result.iceberg_snapshot_id} committed but the Delta commit {how} "
            f"({error}). Delta lags Iceberg until the next write or `lakehouse repair {result.table}`."
        )
    result.delta_lagging = True
    result.delta_error = error
    result.warnings.append(message)
    log.warning(message)

"""The commit pipeline: the one place where a table's files change, for every write mode and for compaction.

Given the files an operation wrote and the files it replaces (a `FileChanges`, planned without
committing), `commit`:

1. commits them as one Iceberg snapshot (the source of truth), together with any schema change;
2. if that fails, deletes every file the operation wrote (nothing became visible) and raises a
   `CommitError` (a `CommitConflict` when another writer won the race: the caller may re-plan);
3. mirrors the snapshot to Delta with one retry policy (`sync_delta`). Iceberg-primary: if Delta
   still fails, the write succeeds with a warning and `WriteResult.delta_lagging` set, and the next
   write or `repair` catches up.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from . import iceberg_committer as ic
from .delta_committer import DeltaMirror, SnapshotChange
from .errors import CommitConflict, CommitError, LakehouseError
from .evolution import SchemaPlan, apply_schema_change
from .properties import SummaryKeys
from .storage import delete_files, normalize_uri

if TYPE_CHECKING:
    from .lakehouse import Lakehouse

log = logging.getLogger("lakehouse")

# The Delta retry policy. A conflict (another process committed to the log first) is retried after
# re-reading the log: the txn tag tells what is left. Any other failure (storage) is retried once.
DELTA_CONFLICT_ATTEMPTS = 8
DELTA_FAILURE_ATTEMPTS = 2


@dataclass
class FileChanges:
    """What an operation plans to commit. Nothing is visible until `commit`."""

    adds: list[DataFile] = field(default_factory=list)
    removes: list[DataFile] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # URIs this operation wrote: deleted if the commit does not land
    rows_written: int = 0  # rows of the caller's data (files rewritten to keep rows are not counted)

    def include(self, other: "FileChanges") -> "FileChanges":
        """Add another plan's files (e.g. the rewrite of files a window only partly covers)."""
        self.adds += other.adds
        self.removes += other.removes
        self.created += other.created
        return self


@dataclass
class WriteResult:
    table: str
    location: str
    iceberg_metadata_location: str
    iceberg_snapshot_id: int | None
    delta_version: int | None
    mode: str
    files_added: int = 0
    files_removed: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    rows_removed: int = 0
    write_seconds: float = 0.0
    iceberg_commit_seconds: float = 0.0
    delta_commit_seconds: float = 0.0
    delta_lagging: bool = False
    delta_error: str | None = None
    duplicate_of_earlier_write: bool = False
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def for_table(cls, identifier: str, table: Table, mode: str, snapshot_id: int | None) -> "WriteResult":
        return cls(identifier, normalize_uri(table.location()), table.metadata_location, snapshot_id, None, mode)

    def to_dict(self) -> dict:
        return asdict(self)


def commit(
    lh: "Lakehouse",
    identifier: str,
    table: Table,
    changes: FileChanges,
    summary: dict[str, str],
    *,
    mode: str,
    schema_plan: SchemaPlan | None = None,
) -> WriteResult:
    """Commit `changes` to Iceberg, then mirror to Delta. See the module docstring for the failure rules."""
    started = time.monotonic()
    delta_on = lh.delta_enabled(table)
    mirror = lh.mirror(table) if delta_on else None
    summary = dict(summary)
    try:
        if mirror is not None and (expected := mirror.next_version(table)) is not None:
            # A schema change reaches Delta as metadata-only versions just before the data version.
            if schema_plan is not None:
                expected += (1 if schema_plan.add else 0) + len(schema_plan.make_optional)
            summary[SummaryKeys.DELTA_EXPECTED_VERSION] = str(expected)
        stage = None if schema_plan is None or schema_plan.empty else (lambda tx: apply_schema_change(tx, schema_plan))
        snapshot = ic.commit_files(table, changes.adds, changes.removes, summary, stage)
    except BaseException as e:
        # Nothing became visible: remove every file this operation created.
        delete_files(lh.storage, changes.created)
        if isinstance(e, LakehouseError):
            raise
        if isinstance(e, (CommitFailedException, ValidationException)):
            # Lost a race with other writers after pyiceberg's own retries: say how to get through.
            hint = " Other writers committed first: retry the write, or raise the table property commit.retry.num-retries."
            raise CommitConflict(_failed(identifier, e) + (hint if isinstance(e, CommitFailedException) else "")) from e
        if isinstance(e, Exception):
            raise CommitError(_failed(identifier, e)) from e
        raise
    iceberg_done = time.monotonic()
    result = WriteResult.for_table(identifier, table, mode, snapshot.snapshot_id if snapshot else _current_id(table))
    result.files_added = len(changes.adds)
    result.files_removed = len(changes.removes)
    result.rows_written = changes.rows_written
    result.bytes_written = sum(f.file_size_in_bytes for f in changes.adds)
    result.rows_removed = sum(f.record_count for f in changes.removes)
    result.iceberg_commit_seconds = iceberg_done - started
    if mirror is not None:
        known = {snapshot.snapshot_id: SnapshotChange(snapshot, changes.adds, changes.removes, summary)} if snapshot else {}
        mirror_to_delta(mirror, table, result, known)
        result.delta_commit_seconds = time.monotonic() - iceberg_done
    return result


def _failed(identifier: str, e: BaseException) -> str:
    return f"Table {identifier}: the Iceberg commit failed ({type(e).__name__}: {e}); nothing was committed and the written files were removed."


def _current_id(table: Table) -> int | None:
    snap = table.current_snapshot()
    return snap.snapshot_id if snap else None


def sync_delta(mirror: DeltaMirror, table: Table, known: dict[int, SnapshotChange] | None = None) -> int:
    """Bring the Delta log up to the table's current snapshot under the retry policy; returns the Delta version."""
    conflicts = failures = 0
    while True:
        try:
            return mirror.sync(table, known)
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
        return
    except Exception as e:  # noqa: BLE001 - the write itself has landed
        error = f"{type(e).__name__}: {e}"
        how = f"lost {DELTA_CONFLICT_ATTEMPTS} races to other Delta writers" if isinstance(e, DeltaCommitFailedError) else "failed twice"
    result.delta_lagging = True
    result.delta_error = error
    message = (
        f"Table {result.table}: Iceberg snapshot {result.iceberg_snapshot_id} committed but the Delta commit {how} "
        f"({error}). Delta lags Iceberg until the next write or `lakehouse repair {result.table}`."
    )
    result.warnings.append(message)
    log.warning(message)

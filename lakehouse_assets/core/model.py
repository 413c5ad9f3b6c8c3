"""The value objects of a write: what the caller asked for (`WriteRequest`, `MergeOptions`, `TableOptions`), what the
executors wrote (`WrittenFile`), what an operation plans to commit (`FileChanges`) and what it did
(`WriteResult`).

They hold data and check it, and do nothing else: the write path (core/write/), the committers
(core/formats/), maintenance and the facade all pass them around, so they live below all of them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import SpecError
from .io.storage import normalize_uri
from .properties import Operation, SummaryKeys
from .schema.spec import TableSpec
from .schema.window import Slice

if TYPE_CHECKING:  # (pyiceberg's table and manifest modules: imported where a table is loaded, not where a code location loads)
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table


@dataclass(frozen=True)
class WrittenFile:
    """Metadata of one Parquet file written by an executor (no rows)."""

    path: str  # relative to the table root
    size: int
    record_count: int
    partition_values: tuple  # Iceberg internal representation, in partition spec order
    footer: bytes

    def parquet_metadata(self) -> pq.FileMetaData:
        return pq.read_metadata(pa.BufferReader(self.footer))


@dataclass
class FileChanges:
    """What an operation plans to commit. Nothing is visible until `commit`."""

    adds: list[DataFile] = field(default_factory=list)
    removes: list[DataFile] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # URIs this operation wrote: deleted if the commit does not land
    removed_delete_files: list[DataFile] = field(default_factory=list)  # delete files this commit drops (deletes.py)
    # Position-delete files a merge-on-read write wrote (position_deletes.py): each replaces its data file's earlier
    # one, which the write lists in `removed_delete_files`.
    added_delete_files: list[DataFile] = field(default_factory=list)
    rows_written: int = 0  # rows of the caller's data (files rewritten to keep rows are not counted)
    rows_deleted: int = 0  # rows the added position-delete files remove (merge-on-read)
    # The Delta `cdc` actions of the rows this operation changes, when it wrote them itself (a merge's rewrite,
    # core/write/merge/changes.py); None: the Delta mirror computes them from the files (core/write/change_data.py).
    change_data: list[dict] | None = None

    def include(self, other: "FileChanges") -> "FileChanges":
        """Add another plan's files (e.g. the rewrite of files a window only partly covers)."""
        if other.adds or other.removes or other.added_delete_files:
            self.change_data = None  # no longer this plan's rows alone: the mirror compares the files
        self.adds += other.adds
        self.removes += other.removes
        self.created += other.created
        self.removed_delete_files += other.removed_delete_files
        self.added_delete_files += other.added_delete_files
        self.rows_deleted += other.rows_deleted
        return self


@dataclass
class WriteResult:
    """What one write, compaction or rollback did: the Iceberg snapshot and Delta version it committed, files
    and rows added and removed, where the time went, and whether Delta lags (then `repair` catches it up)."""

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
    # Iceberg commit attempts: 1 when no concurrent write got in first; more when the write re-validated its plan and
    # committed again (core/write/conflicts.py). None: nothing was committed, or the catalog could not confirm the commit.
    commit_attempts: int | None = None
    delta_lagging: bool = False
    delta_error: str | None = None
    duplicate_of_earlier_write: bool = False
    warnings: list[str] = field(default_factory=list)
    branch: str | None = None  # the Iceberg branch committed to (None: main, mirrored to Delta)
    # Under a data contract: rows per check, rows dropped or quarantined, sample rows (core/contracts/guard.py).
    contract: dict | None = None

    @classmethod
    def for_table(cls, identifier: str, table: Table, mode: str, snapshot_id: int | None) -> "WriteResult":
        return cls(identifier, normalize_uri(table.location()), table.metadata_location, snapshot_id, None, mode)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PublishResult(WriteResult):
    """What a publish did: main's new snapshot and Delta version, and how the branch's change got there
    ("fast-forward", "re-applied" or "nothing to publish")."""

    published: str = ""
    snapshots_published: int = 0


DEFAULT_DELETE_VALUES = ("delete", "d", "D", "DELETE")


def _names(value) -> tuple:
    """A column name or a sequence of them, as a tuple (a repeated name counts once)."""
    return (value,) if isinstance(value, str) else tuple(dict.fromkeys(value or ()))


@dataclass
class MergeOptions:
    """How `mode="merge"` matches rows: by `keys`, the columns that identify a row.

    A row whose `operation_column` holds one of `delete_values`, or whose `deleted_at_column` is set,
    deletes its key; of several rows with the same key the last by `order_by` wins (without `order_by`,
    duplicate keys are refused). Column arguments take a name or a list of names."""

    keys: Sequence[str] | str = ()
    operation_column: str | None = None
    delete_values: Sequence[str] | str = DEFAULT_DELETE_VALUES
    deleted_at_column: str | None = None
    order_by: Sequence[str] | str = ()

    def __post_init__(self) -> None:
        self.keys = _names(self.keys)
        self.order_by = _names(self.order_by)
        self.delete_values = (self.delete_values,) if isinstance(self.delete_values, str) else tuple(self.delete_values or DEFAULT_DELETE_VALUES)

    def check(self, identifier: str) -> "MergeOptions":
        if not self.keys:
            raise SpecError(
                f"Table {identifier}: mode='merge' needs merge keys, the columns that identify a row, "
                "e.g. merge=MergeOptions(keys=['customer_id']) (asset metadata 'merge_keys')."
            )
        return self

    @property
    def control_columns(self) -> list[str]:
        return [c for c in (self.operation_column, self.deleted_at_column) if c]


@dataclass(frozen=True)
class TableOptions:
    """Settings of the table a write creates; `target_file_size` and `schema_evolution` also apply to this write.

    `formats`: ("iceberg", "delta") by default, ("iceberg",) for Iceberg only. `properties`: table
    properties of a new table (Iceberg's and the `delta.*` ones the mirror honours, see the docs).
    `schema_evolution=False` refuses any schema change this write would make. `contract`: the table's data contract
    (a `lakehouse_assets.core.contracts.Contract` or a dict of its fields), recorded on the table and enforced by this
    and every later write (docs/contracts.md)."""

    formats: Sequence[str] | None = None
    properties: Mapping[str, str] | None = None
    target_file_size: int | None = None
    schema_evolution: bool = True
    contract: object | None = None


MODES = (Operation.APPEND, Operation.OVERWRITE, Operation.MERGE)


@dataclass(frozen=True)
class WriteRequest:
    """What the caller asked for: the table spec, the mode and the mode's options."""

    spec: TableSpec
    mode: str = Operation.APPEND
    window: Slice | None = None  # overwrite only this slice (a time range and/or column values)
    write_id: str | None = None  # idempotency key: a second write with the same id commits nothing
    writer: dict[str, str] | None = None  # who wrote it (recorded in both logs)
    target_file_size: int | None = None
    merge: MergeOptions | None = None
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)  # recorded in the snapshot and the Delta commit
    branch: str | None = None  # an Iceberg branch to commit to instead of main (core/table/branches.py)
    contract: object | None = None  # the caller's data contract (core/contracts/); None: the table's own, if any

    def __post_init__(self) -> None:
        identifier = self.spec.identifier
        if self.mode not in MODES:
            raise SpecError(f"Table {identifier}: unknown write mode {self.mode!r}; use 'append', 'overwrite' or 'merge'.")
        if self.window is not None and self.mode not in (Operation.OVERWRITE, Operation.MERGE):
            raise SpecError(f"Table {identifier}: a partition window or slice is overwritten (mode='overwrite') or merged into (mode='merge'), not appended to.")

    def summary(self) -> dict[str, str]:
        """The snapshot-summary keys every write records (copied into the Delta commitInfo)."""
        out = {
            SummaryKeys.OPERATION: Operation.OVERWRITE_WINDOW if self.window is not None and self.merge is None else self.mode,
            SummaryKeys.WRITER: json.dumps(self.writer or {}, sort_keys=True),
        }
        if self.write_id is not None:
            out[SummaryKeys.WRITE_ID] = self.write_id
        if self.branch is not None:
            out[SummaryKeys.BRANCH] = self.branch
        return {**{k: str(v) for k, v in self.snapshot_properties.items()}, **out}

"""Commit externally written Parquet files as one Iceberg snapshot (pyiceberg does the metadata).

DataFiles are built from the Parquet footers the executors sent back: column sizes, value and null
counts and min/max bounds come from pyiceberg's own footer-statistics code, so they are exactly what
pyiceberg would have computed had it written the files itself.
"""

from __future__ import annotations

from typing import Iterable

from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record

from ...collector import collector_paused
from ...io.storage import join_uri
from ...model import WrittenFile
from ...schema.spec import statistics_policy
from ..file_columns import file_names, with_file_names
from .clustered_manifests import PreparedAdds, clustered_append, clustered_overwrite
from .filtered_files import filtered_data_files
from .metadata import staged_metadata


def data_files_from_written(table: Table, root_uri: str, written: Iterable[WrittenFile], schema=None) -> list[DataFile]:
    """`schema`: the schema the files were written with, when it is not yet the table's (evolution pending)."""
    metadata = table.metadata
    schema = schema if schema is not None else metadata.schema()
    # The columns both formats keep statistics for (statistics.py), in the form pyiceberg's collector reads.
    stats_plan = compute_statistics_plan(schema, statistics_policy(table, schema).iceberg_properties())
    # The files' column paths: physical names under Delta column mapping.
    column_mapping = parquet_path_to_id_mapping(with_file_names(schema, file_names(table, schema)))
    out = []
    for f in written:
        stats = data_file_statistics_from_parquet_metadata(f.parquet_metadata(), stats_plan, column_mapping)
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=join_uri(root_uri, f.path),
            file_format=FileFormat.PARQUET,
            partition=Record(*f.partition_values),
            file_size_in_bytes=f.size,
            sort_order_id=None,
            equality_ids=None,
            key_metadata=None,
            **stats.to_serialized_dict(),
        )
        data_file.spec_id = metadata.default_spec_id  # not a from_args field in pyiceberg 0.12
        out.append(data_file)
    return out


_pool_started_in: int | None = None  # the process whose pyiceberg thread pool has its threads started


def start_manifest_threads(threads: int = 4) -> None:
    """Start the threads of pyiceberg's thread pool, on which a snapshot commit writes its manifests, once per process,
    without waiting for them.

    A ThreadPoolExecutor starts a thread per task submitted while none is idle, so a process's first commit started
    them (2 or 3) itself: a few milliseconds each on a busy machine, spent while the table's commit lock holds the
    writers behind it (a backfill's run commits once, so always its first). A write calls this as it begins: tasks that
    stay busy a moment make the pool start `threads` of them (at most its max-workers) while the write goes on."""
    import os
    import time

    from pyiceberg.utils.concurrent import ExecutorFactory

    global _pool_started_in
    if _pool_started_in != os.getpid():
        executor = ExecutorFactory.get_or_create()
        for _ in range(threads):
            executor.submit(time.sleep, 0.002)
        _pool_started_in = os.getpid()


class MetadataCachingTransaction(Transaction):
    """pyiceberg's Transaction, computing its staged metadata once per staged change, without copying history.

    pyiceberg 0.12 rebuilds `table_metadata` (the table's metadata with the staged updates applied,
    deep-copied) on every access, and a snapshot commit reads it about twenty times; the copy holds every
    snapshot of the table, so the commit's cost grew with history. The models are frozen (pyiceberg
    derives new metadata with `model_copy(update=...)`), so one result serves every read until the
    transaction stages another update, and it needs no deep copy (`iceberg_metadata.staged_metadata`).
    """

    def __init__(self, table: Table, autocommit: bool = False, single_attempt: bool = False):
        super().__init__(table, autocommit)
        # `single_attempt`: pyiceberg's own retry loop is off, so a lost race reaches the caller, which re-validates its
        # plan against the snapshots that landed (core/write/conflicts.py) and commits again. The producers of the failed
        # attempt are kept here to remove the manifests they wrote.
        self._single_attempt = single_attempt
        self._attempt_producers: list = []

    def _register_snapshot_producer(self, producer) -> None:
        if self._single_attempt:
            self._attempt_producers.append(producer)
        else:
            super()._register_snapshot_producer(producer)

    def commit_transaction(self) -> Table:
        try:
            return super().commit_transaction()
        except Exception as e:
            if lost_race(e):  # nothing landed: the attempt's manifests and manifest lists go
                for producer in self._attempt_producers:
                    producer._clean_all_uncommitted()
            raise

    @property
    def table_metadata(self) -> TableMetadata:
        key = (self._table.metadata, self._updates)
        cached = getattr(self, "_metadata_cache", None)
        if cached is None or cached[0][0] is not key[0] or cached[0][1] is not key[1]:
            cached = (key, staged_metadata(self._table.metadata, self._updates))
            self._metadata_cache = cached
        return cached[1]


def commit_files(
    table: Table,
    adds: list[DataFile],
    removes: list[DataFile],
    summary: dict[str, str],
    stage=None,
    removed_delete_files: list[DataFile] = (),
    added_delete_files: list[DataFile] = (),
    branch: str | None = None,
    branch_base_id: int | None = None,
    single_attempt: bool = False,
    prepared: PreparedAdds | None = None,
) -> Snapshot | None:
    """One snapshot: an append (merging manifests) when nothing is removed, else an overwrite. None when there is nothing to do.

    pyiceberg retries on a concurrent commit and validates that files it removes still exist.
    `stage(tx)` adds other metadata changes (a schema change) to the same transaction.
    `removed_delete_files`: delete files (written by other engines) this snapshot removes too
    (core/formats/deletes.py), e.g. after applying them or when a full overwrite replaces every data file.
    `added_delete_files`: position-delete files of a merge-on-read write (core/formats/position_deletes.py).
    On a table with delete files, every overwrite goes through `deletes.RowDelta`, which also removes the
    file-scoped delete files of the data files it removes.
    `branch`: commit to that Iceberg branch instead of main; a branch that does not exist yet is created at
    `branch_base_id` (the snapshot the write planned against) in the same commit.
    `single_attempt`: a lost race (`lost_race`) is raised at once, the attempt's metadata files removed, for the caller
    to re-validate and commit again; otherwise pyiceberg retries with its own validation.
    `prepared`: the manifests of `adds`, written before the commit (clustered_manifests.prepare_adds), and its snapshot id;
    the caller removes them if the commit does not land.
    """
    if not adds and not removes and not removed_delete_files and not added_delete_files:
        return None
    # (an overwrite's producer reads every manifest its removed files' partitions may be in, once: one_read_overwrite.py)
    with collector_paused(), MetadataCachingTransaction(table, single_attempt=single_attempt) as tx:
        if stage is not None:
            stage(tx)  # e.g. the schema change these files need: same transaction, one atomic commit
        _create_branch(tx, table, branch, branch_base_id)
        if removed_delete_files or added_delete_files or (removes and _has_deletes(table, branch)):
            from ..deletes import RowDelta

            overwrite = clustered_overwrite(tx, summary, branch, RowDelta, removed_delete_files=removed_delete_files, added_delete_files=added_delete_files)
        else:
            overwrite = clustered_overwrite(tx, summary, branch) if removes else None
        if overwrite is not None:
            with overwrite as producer:
                _use(producer, prepared)
                for f in removes:
                    producer.delete_data_file(f)
                for f in adds:
                    producer.append_data_file(f)
        else:
            # Merge-append unless the table turns it off: Java Iceberg's default, and older tables created
            # before this project set `commit.manifest-merge.enabled` get bounded manifest lists too.
            merge = table.properties.get("commit.manifest-merge.enabled", "true").lower() != "false"
            with clustered_append(tx, summary, merge, branch) as producer:
                _use(producer, prepared)
                for f in adds:
                    producer.append_data_file(f)
    return table.snapshot_by_name(branch) if branch is not None else table.current_snapshot()


def _use(producer, prepared: PreparedAdds | None) -> None:
    if prepared is not None:
        producer.use_prepared(prepared)


def lost_race(e: BaseException) -> bool:
    """Whether a failed commit lost a race with another writer, so nothing of it landed: the catalog's compare-and-swap
    failed (a REST catalog's 409 too), pyiceberg found the files it removes gone, or the SQL catalog's database was
    busy with other commits (SQLite's "database is locked" after its busy timeout, PostgreSQL's serialization failure
    or deadlock, which roll the transaction back)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    if isinstance(e, (CommitFailedException, ValidationException)):
        return True
    message = str(e)
    return type(e).__name__ == "OperationalError" and any(
        m in message for m in ("database is locked", "could not serialize access", "deadlock detected")
    )


def _create_branch(tx, table: Table, branch: str | None, base_id: int | None) -> None:
    """A branch that does not exist yet, created at `base_id` in the commit's own transaction."""
    if branch is not None and branch not in table.metadata.refs and base_id is not None:
        from pyiceberg.table.update.snapshot import ManageSnapshots

        with ManageSnapshots(tx) as refs:
            refs.create_branch(base_id, branch)


def _has_deletes(table: Table, branch: str | None) -> bool:
    from ..deletes import has_delete_files

    snapshot = table.snapshot_by_name(branch) if branch is not None else table.current_snapshot()
    return snapshot is not None and has_delete_files(table, snapshot)


def commit_empty(table: Table, summary: dict[str, str]) -> Snapshot:
    """A snapshot with no data file on main: Iceberg refuses a branch of a table that has no snapshot yet."""
    with MetadataCachingTransaction(table) as tx:
        with tx.update_snapshot(snapshot_properties=summary).fast_append():
            pass
    return table.current_snapshot()


def live_data_files(table: Table, snapshot_id: int | None = None, row_filter=None) -> list[DataFile]:
    """Data files of a snapshot (optionally pruned by a row filter through partitions and min/max)."""
    snap = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else table.current_snapshot()
    if snap is None:
        return []
    if row_filter is None:
        # Every live data file, from the manifests (scan planning would also match delete files to data
        # files, and pyiceberg's raises on another engine's equality deletes).
        from ..deletes import table_files

        return [e.data_file for e in table_files(table, snap).data]
    return filtered_data_files(table, snap, row_filter)

"""Rolling a table back to an earlier point, in both formats, as one forward commit.

The target is a retained Iceberg snapshot (named directly, or by a Delta version, a time or a Dagster
run). The rollback commits one ordinary overwrite snapshot whose live files are exactly the target's:
the files live now but not then are removed, the files live then but not now are added back as they
are (no data file is written). The Delta mirror then commits the same removes and adds as one version.
History is kept in both formats, other engines see an ordinary commit, and later writes, merges and
compactions go on from it as from any other snapshot.

Refused, with nothing changed, when the rollback cannot give back exactly the target's rows:
* a file the target needs is gone (a retention cleanup or another engine removed it);
* the target or the current table holds delete files of another engine (apply them first); on a merge-on-read
  table, position-delete files are carried like data files (the target's come back, the others go);
* a column of the target was dropped since, or changed type (the current schema cannot read it back as
  it was). Columns added since stay, holding nulls for the rolled-back rows.
"""

from __future__ import annotations

import datetime as dt
import logging

from pyarrow.fs import FileType
from pyiceberg.table import Table

from ..errors import DeleteFilesError, RetentionError, SchemaError, SpecError
from ..formats.deletes import table_files
from ..formats.delta import vector_mirror as delta_vector_mirror
from ..io.storage import StorageConfig, relative_to
from ..model import FileChanges, WriteResult
from ..properties import Operation, SummaryKeys
from ..read import time_travel
from ..read.inspection import snapshot_of_run
from ..table.context import TableContext
from ..write import transaction

log = logging.getLogger("lakehouse")


def rollback_table(
    ctx: TableContext,
    identifier: str,
    *,
    snapshot_id: int | None = None,
    delta_version: int | None = None,
    as_of: dt.datetime | None = None,
    run_id: str | None = None,
) -> WriteResult:
    """Commit the files of the point given (exactly one of the four) as one new snapshot and Delta version."""
    if sum(x is not None for x in (snapshot_id, delta_version, as_of, run_id)) != 1:
        raise SpecError(f"Table {identifier}: give exactly one of snapshot_id, delta_version, as_of, run_id to roll back to.")
    table = ctx.load(identifier)
    time_travel.check_retention(table, identifier, snapshot_id, delta_version, as_of)
    if run_id is not None:
        target = snapshot_of_run(ctx, identifier, run_id)
    else:
        mirror = ctx.mirror(table) if ctx.delta_enabled(table) else None
        target = time_travel.resolve(table, mirror, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of).iceberg_snapshot_id
    if target is None:
        raise RetentionError(f"Table {identifier}: no retained snapshot at that point to roll back to. See `lakehouse history {identifier}`.")
    adds, removes, deletes_back, deletes_gone = plan(identifier, table, target, ctx.storage)
    summary = {SummaryKeys.OPERATION: Operation.ROLLBACK, SummaryKeys.ROLLBACK_TARGET: str(target)}
    changes = FileChanges(adds=adds, removes=removes, rows_written=sum(f.record_count for f in adds), added_delete_files=deletes_back, removed_delete_files=deletes_gone)
    result = transaction.commit(ctx, identifier, table, changes, summary, mode=Operation.ROLLBACK)
    log.info("Table %s: rolled back to snapshot %s (%d file(s) back, %d removed)", identifier, target, len(adds), len(removes))
    return result


def plan(identifier: str, table: Table, target_snapshot_id: int, storage: StorageConfig):
    """(data files to add back, data files to remove, delete files to add back, delete files to remove) that make the
    current snapshot's files the target's. Position-delete files take part on a merge-on-read table (the Delta mirror
    turns them into deletion vectors); other delete files are refused."""
    target = table.snapshot_by_id(target_snapshot_id)
    if target is None:
        raise RetentionError(f"Table {identifier} has no snapshot {target_snapshot_id} to roll back to (it may have been expired). See `lakehouse history {identifier}`.")
    current = table.current_snapshot()
    _check_schema(identifier, table, target)
    then, now = table_files(table, target), table_files(table, current) if current is not None else None
    carried = delta_vector_mirror.enabled(table.properties)
    for files, which in ((then, f"the target snapshot {target_snapshot_id}"), (now, "the current table")):
        if files is not None and (files.equality_deletes if carried else files.deletes):
            raise DeleteFilesError(
                f"Table {identifier}: {which} holds {len(files.deletes)} delete file(s) written by another engine, which a rollback cannot "
                f"carry to Delta. Run `lakehouse repair {identifier} --apply-deletes` first, or roll back to a snapshot without them."
            )
    then_files = {e.data_file.file_path: e.data_file for e in then.data}
    now_files = {e.data_file.file_path: e.data_file for e in now.data} if now is not None else {}
    adds = [f for p, f in then_files.items() if p not in now_files]
    removes = [f for p, f in now_files.items() if p not in then_files]
    then_deletes = {e.data_file.file_path: e.data_file for e in then.position_deletes}
    now_deletes = {e.data_file.file_path: e.data_file for e in now.position_deletes} if now is not None else {}
    deletes_back = [f for p, f in then_deletes.items() if p not in now_deletes]
    deletes_gone = [f for p, f in now_deletes.items() if p not in then_deletes]
    _check_files_exist(identifier, table, storage, adds + deletes_back, target_snapshot_id)
    return adds, removes, deletes_back, deletes_gone


def _check_schema(identifier: str, table: Table, target) -> None:
    then = table.schemas().get(target.schema_id, table.schema()) if target.schema_id is not None else table.schema()
    now = table.schema()
    for field in then.fields:
        try:
            current = now.find_field(field.field_id)
        except ValueError:
            raise SchemaError(
                f"Table {identifier}: column {field.name!r} of the target snapshot {target.snapshot_id} was dropped since; a rollback would not "
                "give its values back. Roll back to a snapshot after the drop, or re-create the column's data with a write."
            ) from None
        if current.field_type != field.field_type:
            raise SchemaError(
                f"Table {identifier}: column {field.name!r} was {field.field_type} at the target snapshot {target.snapshot_id} and is "
                f"{current.field_type} now (a type change since rewrote the table); roll back to a snapshot after that change."
            )


def _check_files_exist(identifier: str, table: Table, storage: StorageConfig, files, target_snapshot_id: int) -> None:
    missing = []
    for f in files:
        fs, path = storage.filesystem(f.file_path)
        if fs.get_file_info(path).type == FileType.NotFound:
            missing.append(f.file_path)
    if missing:
        root = table.location()
        examples = []
        for p in missing[:3]:
            try:
                examples.append(relative_to(root, p))
            except ValueError:
                examples.append(p)
        raise RetentionError(
            f"Table {identifier}: {len(missing)} data file(s) of the target snapshot {target_snapshot_id} no longer exist (e.g. {examples}): a "
            "retention cleanup or another engine removed them. Nothing was changed; roll back to a newer snapshot."
        )

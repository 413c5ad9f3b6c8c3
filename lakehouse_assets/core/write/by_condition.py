"""DELETE and UPDATE by condition: the rows a SQL condition matches leave the table, or change, in both formats.

1. The condition (core/write/condition.py) and an update's assignments are checked against the table's columns and
   types before any file is read; a table whose Delta side is append-only, or holds other engines' delete files the
   operation cannot fold in, is refused.
2. Files are planned from metadata: those the condition cannot match are never read; for a delete, files whose
   statistics say every row matches are dropped without being read (metadata only).
3. One Spark job finds the matching rows' positions in the other candidates (positions only reach the driver).
   Files without a match are left as they are. A copy-on-write update with nothing to check first (no contract, no
   required column set) of at most MAX_POSITIONS candidate rows skips that: its scan feeds the rewrite's tasks.
4. The table's row-level mode (`write.delete.mode` / `write.update.mode`) decides how rows leave: copy-on-write
   rewrites each file that holds a match without it or with its new values (by pyarrow tasks that read each file
   once and write its change data, core/write/position_rewrite.py; through Spark above a bound); merge-on-read writes one
   position-delete file per such file (Delta: a deletion vector), and an update adds its new rows as a new file.
5. The commit pipeline (core/write/transaction.py) commits one Iceberg snapshot and one Delta version; a race lost
   to another writer is re-validated against what it changed inside the condition's files.

The change feed follows: a delete's rows are `delete` events; an update's are pre- and post-images, paired on the
columns the update leaves alone (recorded in the snapshot as `lakehouse.update.keys`). An update's new rows are
checked against the table's data contract (rules and NOT NULL columns) before anything is written: a row that
breaks it refuses the whole update, whatever the contract's policy, since part of an update cannot be quarantined.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Mapping

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.visitors import ROWS_MUST_MATCH, _StrictMetricsEvaluator
from pyiceberg.table import Table

from ..contracts import table_contract
from ..contracts.model import ContractViolation
from ..errors import MirrorRefused
from ..formats import history
from ..formats.deletes import refuse_delete_files
from ..formats.delta import log_commit as delta_log_commit
from ..formats.delta.committer import APPEND_ONLY, appends_only
from ..formats.iceberg import committer as ic
from ..io.storage import check_access, delete_files, normalize_uri
from ..model import FileChanges, WriteResult
from ..properties import Operation, SummaryKeys, TableProperties
from ..read.deleted_positions import IcebergPositionDeletes
from ..spark.compat import default_parallelism
from ..spark.session import active_session
from ..table import branches
from ..table.context import TableContext
from ..table.evolution import types_were_widened
from . import conflicts, delete_scan, position_rewrite, position_updates, transaction
from .assignments import checked_assignments
from .condition import Condition, condition_of
from .merge import on_read
from .merge.batch import PATH
from .merge.on_read import POSITION
from .target import WriteTarget

log = logging.getLogger("lakehouse")

FEED_ROWS_PER_TASK = 2_000_000  # changed rows per task writing the change data: a task's fixed cost against its share


@dataclass(frozen=True)
class RowOperation:
    """What the caller asked for: `assignments` None for a delete, {column: Spark SQL expression} for an update."""

    identifier: str
    where: str
    assignments: Mapping[str, str] | None = None
    write_id: str | None = None
    writer: Mapping[str, str] | None = None
    snapshot_properties: Mapping[str, str] | None = None
    branch: str | None = None
    erase: bool = False  # a delete that rewrites every file whose bytes hold a match (core/maintenance/erase.py)
    erasure_id: str | None = None  # what an erasure records instead of its condition

    @property
    def name(self) -> str:
        if self.erase:
            return Operation.ERASE
        return Operation.DELETE if self.assignments is None else Operation.UPDATE


def run(ctx: TableContext, op: RowOperation, *, foreign_default: str, spark=None) -> WriteResult:
    """Delete or update the rows `op.where` matches (see the module docstring). Nothing matched: nothing is committed."""
    from .table_write import foreign_delta_gate

    started = time.monotonic()
    check_access(ctx.storage, ctx.warehouse)
    identifier, branch = op.identifier, branches.target_branch(op.identifier, op.branch)
    spark = active_session(spark)
    table = ctx.load(identifier)
    delta = None
    if branch is None:
        delta = foreign_delta_gate(ctx, identifier, table, foreign_default, spark)
        if delta is False:  # foreign versions were adopted: a new snapshot to plan on
            table, delta = ctx.load(identifier), None
    else:
        table = branches.on_branch(table, branch)
    if op.write_id is not None and (earlier := history.find_snapshot_by_write_id(table, op.write_id)) is not None:
        log.info("Table %s: %s %s already committed as snapshot %s; not committing again", identifier, op.name, op.write_id, earlier.snapshot_id)
        result = WriteResult.for_table(identifier, table, op.name, earlier.snapshot_id)
        result.duplicate_of_earlier_write, result.branch = True, branch
        return result
    delta_on = ctx.delta_enabled(table) and branch is None
    target = WriteTarget(
        identifier, table, table.schema(), ctx.storage, cast_files=types_were_widened(table),
        change_feed=delta_on and delta is not None and delta_log_commit.feed_enabled(delta),
    )
    condition = condition_of(identifier, op.where, table.schema(), target.spark_schema(), spark, what="erasure condition" if op.erase else "condition", secret=op.erase)
    values = checked_assignments(identifier, op.assignments, target, spark) if op.assignments is not None else None
    _refuse_unless_possible(ctx, identifier, table, op, delta_on, delta)
    changes = FileChanges()
    try:
        if op.erase:  # no event carries an erased row: the version's change data is one empty file
            matched = _plan(spark, dataclasses.replace(target, change_feed=False), condition, values, changes, physical=True)
            changes.change_data = _feed(target, None, None, changes) if target.change_feed and changes.removes else None
        else:
            matched = _plan(spark, target, condition, values, changes)
    except BaseException:
        delete_files(ctx.storage, changes.created)  # nothing was committed
        raise
    if not changes.removes and not changes.added_delete_files:
        if delta:
            ctx.mirror(table).keep(table, delta)  # the next write follows the log from here
        result = WriteResult.for_table(identifier, table, op.name, _current_id(table))
        result.branch, result.write_seconds = branch, time.monotonic() - started
        return result
    summary = _summary(op, condition, values, table)
    revalidate = conflicts.any_change if condition.prune == AlwaysTrue() else conflicts.inside(lambda t: condition.prune, "the rows the erasure matches" if op.erase else f"the rows where {condition.sql}")
    write_seconds = time.monotonic() - started
    result = transaction.commit(ctx, identifier, table, changes, summary, mode=op.name, revalidate=revalidate, delta=delta, branch=branch)
    result.write_seconds = write_seconds
    result.rows_removed = matched if op.assignments is None else 0
    result.rows_written = matched if op.assignments is not None else 0
    return result


def _refuse_unless_possible(ctx: TableContext, identifier: str, table: Table, op: RowOperation, delta_on: bool, delta) -> None:
    """Refusals before any file is read: an append-only Delta side (in `delta`, the log the foreign-version check
    read, when there is one: loading it again reads every live file's entry); delete files the operation cannot fold in."""
    if delta_on and (appends_only(delta) if delta else ctx.mirror(table).append_only()):
        raise MirrorRefused(
            f"Table {identifier}: its Delta table sets {APPEND_ONLY}=true, which the Delta protocol gives no {op.name} of rows. "
            f"Nothing was changed. If the table may change rows, unset the property with the engine that owns it "
            f"(`ALTER TABLE ... SET TBLPROPERTIES ('{APPEND_ONLY}' = 'false')`), then run the {op.name} again."
        )
    what = f"A {op.name} by condition"
    if op.erase or on_read.chosen(table, _mode_property(op)):
        on_read.check_deletes(table, what)
    else:
        refuse_delete_files(table, what)


def _mode_property(op: RowOperation) -> str:
    return TableProperties.DELETE_MODE if op.assignments is None else TableProperties.UPDATE_MODE


def _plan(spark, target: WriteTarget, condition: Condition, values: dict | None, changes: FileChanges, physical: bool = False) -> int:
    """Write the operation into `changes`; returns the rows it deletes or updates. `physical` (an erasure): copy-on-write
    whatever the table's mode, of every file whose bytes hold a match, also rows a delete file already hides (their
    file-scoped delete files go with the file, core/formats/deletes.py RowDelta)."""
    from pyspark.sql import functions as F

    table = target.table
    by_position = not physical and on_read.chosen(table, TableProperties.DELETE_MODE if values is None else TableProperties.UPDATE_MODE)
    candidates = ic.live_data_files(table, row_filter=condition.prune)
    earlier = on_read.live_delete_files(table) if by_position or physical else {}
    strict = _StrictMetricsEvaluator(table.schema(), condition.prune).eval if values is None and condition.strict else None
    whole = [f for f in candidates if strict(f) == ROWS_MUST_MATCH] if strict else []  # every row matches: dropped unread
    read = [f for f in candidates if f not in whole]
    deleted = {f.file_path: IcebergPositionDeletes(f.file_path, tuple(d.file_path for d in earlier[f.file_path])) for f in read + whole if f.file_path in earlier}
    scan, positions = None, None
    rewrite = not by_position and not physical and position_rewrite.takes(target, read + whole, values or ())  # copy-on-write by position
    if rewrite and values is not None and not _checked(target, values) and sum(f.record_count for f in read) <= position_rewrite.MAX_POSITIONS:
        # One job: the scan feeds the rewrite's tasks, which hold their files' new values (bounded as the positions are).
        if not read:  # the condition's statistics excluded every file: nothing to scan
            return 0
        updated = _matched_rows(spark, target, read, condition, values)
        return position_rewrite.rewrite_with_updates(spark, target, read, None, updated, list(values), changes, target.change_feed)
    if by_position and (done := _by_position(spark, target, read, whole, condition, values, _of(deleted, read), earlier, changes)) is not None:
        return done
    if rewrite:  # the rewrite's tasks read the files and write the change data: the scan reads what the condition and values need
        scan, positions = _positions(spark, target, read, condition, values, position_rewrite.MAX_POSITIONS)
    elif by_position:
        scan, positions = _matched_positions(spark, target, read, condition, _of(deleted, read))
    if positions is not None:
        counts = {uri: len(p) for uri, p in positions.items()}
    else:
        counts = _matches_per_file(spark, target, read, condition)  # deleted rows count too: an erasure rewrites their bytes
    hit = [f for f in read if f.file_path in counts]
    changes.removes += whole
    try:
        if rewrite and positions is not None and hit:
            if values is None:
                position_rewrite.rewrite_without(spark, target, hit, positions, deleted, changes, whole, target.change_feed)
            else:
                _check_new_rows(target.identifier, target, scan.drop(PATH, POSITION), values)
                position_rewrite.rewrite_with_updates(spark, target, hit, positions, scan, list(values), changes, target.change_feed)
            return sum(counts.values()) + sum(f.record_count for f in whole)
        if not hit:
            if whole and target.change_feed:
                changes.change_data = _feed(target, target.read(spark, whole, deleted=_of(deleted, whole) or None), None, changes, sum(f.record_count for f in whole))
            return sum(f.record_count for f in whole)
        if scan is not None:  # by position, no row deleted before matched: the scan's rows are the matched rows
            rows, old = None, scan.drop(PATH, POSITION)
        else:
            rows = target.read(spark, hit, deleted=_of(deleted, hit) or None)
            old = rows.filter(F.expr(condition.matches))
        reused = scan is None and values is not None and (by_position or target.change_feed)
        if reused:  # the matched rows feed the contract check, the new rows and the change data: read them once
            old = old.persist()
        try:
            return _write_rows(spark, target, condition, values, changes, rows, old, hit, whole, positions, by_position, earlier, deleted, counts)
        finally:
            if reused:
                old.unpersist()
    finally:
        if scan is not None:
            scan.unpersist()


def _by_position(spark, target: WriteTarget, files: list, whole: list, condition: Condition, values: dict | None, deleted: dict, earlier: dict,
                 changes: FileChanges) -> int | None:
    """A merge-on-read delete or update in the jobs that read only what it needs: a delete's scan finds the positions
    and pyarrow tasks write the change data (delete_scan.py); an update's scan feeds the tasks that write the new rows
    and their change data (one job, when there is nothing to check first: position_updates.py); then a position-delete
    file per file holding a match. Returns the rows deleted or updated; None where the general road goes (files dropped whole, an update of
    rows that change partition or are checked first, or too many)."""
    if whole:
        return None
    if values is None:
        positions = delete_scan.matched_positions(spark, target, files, condition, deleted, changes)
    elif position_rewrite.takes(target, files, values) and not _checked(target, values) and sum(f.record_count for f in files) <= position_rewrite.MAX_POSITIONS:
        positions = position_updates.write_new_rows(spark, target, files, _matched_rows(spark, target, files, condition, values), list(values), deleted, changes) if files else {}
    else:
        return None
    on_read.delete_positions(target, {f: positions[f.file_path] for f in files if f.file_path in positions}, changes, earlier)
    return sum(len(p) for p in positions.values())


def _positions(spark, target: WriteTarget, files: list, condition: Condition, values: dict | None, limit: int):
    """(`_matched_rows`, persisted, or None: a delete within `limit` rows), {file URI: their positions}; (None, None)
    above `limit` matches."""
    if not files:  # every candidate was dropped whole by its statistics: no scan
        return None, {}
    hits = _matched_rows(spark, target, files, condition, values)
    if values is None and sum(f.record_count for f in files) <= limit:
        # A delete needs the positions only, and the files hold no more rows than `limit`: one scan, nothing cached
        # or counted first (caching and counting the matched rows first took about 0.15 s of a 1.2 s delete of 2,000,000 rows).
        return None, on_read.collect_positions(hits, [f.file_path for f in files])
    hits = hits.persist()
    if hits.count() > limit:
        hits.unpersist()
        return None, None
    try:
        return hits, on_read.collect_positions(hits, [f.file_path for f in files])
    except BaseException:
        hits.unpersist()
        raise


def _matched_rows(spark, target: WriteTarget, files: list, condition: Condition, values: dict | None):
    """The rows of `files` the condition matches: their file (PATH) and position (POSITION); an update's with the new
    values of the columns it sets, read from the columns they need (every column under a contract, whose rules check
    the whole new row)."""
    from pyspark.sql import functions as F

    hits = target.read(spark, files, path_column=PATH, position_column=POSITION).filter(F.expr(condition.matches))
    columns = [PATH, POSITION]
    if values is not None:
        hits = _updated(hits, values)
        columns = hits.columns if table_contract.stored(target.table) is not None else [*columns, *values]
    return hits.select(*[F.col(f"`{c}`") for c in columns])


def _checked(target: WriteTarget, values: dict) -> bool:
    """Whether an update's new rows are checked before any file is written: the table has a contract, or the update
    sets a required column (`_check_new_rows`)."""
    return table_contract.stored(target.table) is not None or any(not target.schema.find_field(c).optional for c in values)


def _matched_positions(spark, target: WriteTarget, files: list, condition: Condition, deleted: dict):
    """(the matched rows with their file and position, cached; or None), {file URI: positions of its matched rows}.
    One scan by Spark's own reader of every row as the files hold it: positions from its row index, the rows deleted
    before taken out on the driver. When none of those matches, the cached rows are the operation's matched rows (the
    change data and an update's new rows come from them); else None, and they are read again with the deletes."""
    from pyspark.sql import functions as F

    scan = target.read(spark, files, path_column=PATH, position_column=POSITION).filter(F.expr(condition.matches)).persist()
    found = on_read.collect_positions(scan, [f.file_path for f in files])
    positions = on_read.without_deleted(found, deleted, target.storage)
    if any(len(positions.get(uri, ())) != len(p) for uri, p in found.items()):
        scan.unpersist()
        return None, positions
    return scan, positions


def _write_rows(spark, target: WriteTarget, condition: Condition, values, changes: FileChanges, rows, old, hit, whole, positions, by_position,
                earlier, deleted, counts) -> int:
    """`_plan`'s writing half: the rewrite or the position deletes, the new rows, the change data. `positions` without
    `by_position`: the files were rewritten by position already (position_rewrite.py)."""
    from pyspark.sql import functions as F

    if values is not None and (by_position or positions is None):  # (rewritten by position: checked before)
        _check_new_rows(target.identifier, target, _updated(old, values), values)
    if by_position:
        on_read.delete_positions(target, {f: positions[f.file_path] for f in hit}, changes, earlier)
        if values is not None:
            target.write(_updated(old, values), changes)
    elif positions is None:
        changes.removes += hit
        kept = rows.filter(~F.expr(condition.matches)) if values is None else _updated(rows, values, condition)
        target.write(kept, changes, counts_as_written=False)
    if target.change_feed:
        # The matched rows again (cached when the new rows came from them too), never every row of the hit files.
        if whole:
            old = old.unionByName(target.read(spark, whole, deleted=_of(deleted, whole) or None))
        changes.change_data = _feed(target, old, values, changes, sum(counts.values()) + sum(f.record_count for f in whole))
    return sum(counts.values()) + sum(f.record_count for f in whole)


def _of(deleted: dict, files: list) -> dict:
    return {f.file_path: deleted[f.file_path] for f in files if f.file_path in deleted}


def _matches_per_file(spark, target: WriteTarget, files: list, condition: Condition) -> dict[str, int]:
    """{file URI: rows matching} of the files holding a match (Spark's own Parquet scan; counts reach the driver)."""
    from pyspark.sql import functions as F

    from ..read.reader import file_uris

    if not files:
        return {}
    rows = target.read(spark, files, path_column=PATH).filter(F.expr(condition.matches)).groupBy(PATH).count().collect()
    uris = file_uris([r[PATH] for r in rows], [f.file_path for f in files])
    return {uri: r["count"] for uri, r in zip(uris, rows)}


def _feed(target: WriteTarget, old, values: dict | None, changes: FileChanges, rows_changed: int = 0) -> list[dict]:
    """The version's Delta change data, written from the rows the operation changes (it knows them): a delete's rows
    as `delete`; an update's as pre- and post-images, rows it leaves equal (NULL equal to NULL) left out, as
    `Lakehouse.changes` leaves them; `old` None: no rows (one empty file). Returns the `cdc` actions; every file
    written is recorded in `changes.created`."""
    import uuid

    from pyspark.sql import functions as F

    from ..io.storage import join_uri
    from ..read.change_types import CHANGE_TYPE, DELETE, UPDATE_POSTIMAGE, UPDATE_PREIMAGE
    from .change_data import change_data_writer, file_actions

    root = normalize_uri(target.table.location())
    writer = change_data_writer(target.table, target.schema, root, target.storage, uuid.uuid4().hex)
    if old is None:
        actions = file_actions([], writer)
        changes.created += [join_uri(root, a["path"]) for a in actions]
        return actions
    if values is None:
        rows = old.withColumn(CHANGE_TYPE, F.lit(DELETE))
    else:
        same = None
        for column, (expression, data_type) in values.items():
            equal = F.col(f"`{column}`").eqNullSafe(F.expr(expression).cast(data_type))
            same = equal if same is None else same & equal
        changed = old.filter(~same)
        rows = changed.withColumn(CHANGE_TYPE, F.lit(UPDATE_PREIMAGE)).unionByName(_updated(changed, values).withColumn(CHANGE_TYPE, F.lit(UPDATE_POSTIMAGE)))
    tasks = max(1, min(default_parallelism(old.sparkSession), rows_changed // FEED_ROWS_PER_TASK + 1))
    files = [r.asDict() for r in rows.coalesce(tasks).mapInArrow(writer, "path string, size long, partition_values string").collect()]
    changes.created += [join_uri(root, f["path"]) for f in files]
    return file_actions(files, writer)


def _updated(rows, values: dict, condition: Condition | None = None):
    """`rows` with the assigned columns replaced (only on matching rows, when `condition` is given)."""
    from pyspark.sql import functions as F

    out = []
    for name in rows.columns:
        column = F.col(f"`{name}`")
        if name in values:
            expression, data_type = values[name]
            new = F.expr(expression).cast(data_type)
            column = F.when(F.expr(condition.matches), new).otherwise(column) if condition is not None else new
        out.append(column.alias(name))
    return rows.select(*out)


def _summary(op: RowOperation, condition: Condition, values: dict | None, table: Table) -> dict[str, str]:
    out = {str(k): str(v) for k, v in (op.snapshot_properties or {}).items()}
    out |= {SummaryKeys.OPERATION: op.name, SummaryKeys.WRITER: _json(op.writer)}
    if op.erase:  # the text holds the erased values: only the erasure's id
        out[SummaryKeys.ERASURE_ID] = op.erasure_id or ""
    else:
        out[SummaryKeys.CONDITION] = condition.sql
    if op.write_id is not None:
        out[SummaryKeys.WRITE_ID] = op.write_id
    if op.branch is not None:
        out[SummaryKeys.BRANCH] = op.branch
    if values is not None:
        # Pre- and post-images pair on the columns the update leaves alone (map columns cannot be compared by Spark).
        kept = [f.name for f in table.schema().fields if f.name not in values and "map<" not in str(f.field_type)]
        out[SummaryKeys.UPDATE_KEYS] = ",".join(kept)
        out[SummaryKeys.UPDATE_SET] = _json({c: e for c, (e, _) in values.items()})
    return out


def _json(value) -> str:
    import json

    return json.dumps(dict(value or {}), sort_keys=True)


def _current_id(table: Table) -> int | None:
    snap = table.current_snapshot()
    return snap.snapshot_id if snap else None


def _check_new_rows(identifier: str, target: WriteTarget, new_rows, values: dict) -> None:
    """Refuse the update, naming the check and the count, when its new rows break the table's contract (its rules, its
    NOT NULL columns) or hold NULL in a required column. One aggregate over the matched rows only."""
    contract = table_contract.stored(target.table)
    checks = {f"column {c!r} is required": f"`{c}` IS NULL" for c in values if not target.schema.find_field(c).optional}
    if contract is not None:
        if taken := [c for c in contract.unique if c in values]:
            raise ContractViolation(
                f"Table {identifier}: the update sets {', '.join(map(repr, taken))}, part of the contract's unique key "
                f"({', '.join(contract.unique)}), and a new value could repeat another row's. Nothing was changed. Change key "
                "values with a merge (mode='merge'), which checks the key."
            )
        rules = contract.checked_rules(identifier, {f.name: f.dataType.simpleString() for f in new_rows.schema.fields})
        checks |= {f"rule {name!r} ({text})": f"NOT coalesce(({text}), false)" for name, text in rules.items()}
        checks |= {f"NOT NULL column {c!r}": f"`{c}` IS NULL" for c in contract.not_null}
    if not checks:
        return
    names = list(checks)
    counts = new_rows.selectExpr(*[f"sum(CASE WHEN {sql} THEN 1 ELSE 0 END) AS c{i}" for i, sql in enumerate(checks.values())]).first()
    broken = [f"{name}: {counts[f'c{i}']} row(s)" for i, name in enumerate(names) if counts[f"c{i}"]]
    if broken:
        raise ContractViolation(
            f"Table {identifier}: the update's new rows break {'; '.join(broken)}. Nothing was changed. An update is "
            "refused whole (part of it cannot be quarantined): change the values or the condition."
        )


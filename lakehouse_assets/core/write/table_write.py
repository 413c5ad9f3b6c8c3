"""One write of a DataFrame into a table, from input to commit, in an order that leaves both formats as they
were if any step fails:

1. the request is checked and the storage reached (nothing written yet); a data contract is checked and its checks
   added to the rows (core/contracts/guard.py, which calls back for the rest); a merge's batch is validated
   (null and duplicate keys) and cached, so every later step sees the same rows;
2. the table is created or loaded with the schema change the data needs; Delta versions another engine
   wrote are refused or adopted first (the table's policy, core/formats/delta/foreign_versions.py);
3. the mode's plan (core/write/write_modes.py) writes the Parquet files on the executors (the driver gets
   file metadata only);
4. the commit pipeline (core/write/transaction.py) commits them to Iceberg (the source of truth; if this
   fails the files are deleted), then mirrors the snapshot to Delta. If Delta fails it is retried, then
   the write still succeeds with a warning: Delta lags, which `verify` reports and `repair` fixes.
A first write that fails drops the table it created.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import pyarrow as pa
from pyiceberg.table import Table

from ..contracts.guard import enforced as enforce_contract
from ..errors import CommitOutcomeUnknown, SchemaError, SpecError
from ..formats import history
from ..formats.delta import adoption as delta_adoption
from ..formats.delta import foreign_versions as foreign_delta
from ..formats.delta import log_commit as delta_log_commit
from ..formats.delta.column_mapping import mapping_keys
from ..formats.delta.refusals import unfollowed_renames
from ..formats.file_columns import enabled as mapping_enabled
from ..formats.iceberg import committer as ic
from ..io.storage import check_access, delete_files
from ..model import FileChanges, MergeOptions, TableOptions, WriteRequest, WriteResult
from ..properties import Operation, SummaryKeys
from ..schema.spec import ALL_FORMATS, DEFAULT_TARGET_FILE_SIZE, TableSpec
from ..schema.statistics import policy_keys
from ..schema.type_mapping import spark_schema_to_iceberg
from ..schema.window import Slice
from ..spark.compat import is_cached
from ..spark.session import active_session
from ..table import branches, tables
from ..table.context import TableContext
from ..table.evolution import evolved_schema, types_were_widened
from . import arrow_frames, change_data, conflicts, transaction, write_modes
from .adoption import adoption_rewrite
from .merge import batch as merge_batch
from .merge import merge as merge_
from .small_writes import SmallWritesRule
from .target import WriteTarget

log = logging.getLogger("lakehouse")


def request_of(
    ctx: TableContext, identifier: str, mode: str, *, partition_by=None, merge: MergeOptions | None = None, window=None, write_id: str | None = None,
    table: TableOptions | None = None, writer=None, snapshot_properties=None, branch: str | None = None,
) -> WriteRequest:
    """The checked request of one `Lakehouse.write` call: the new table's spec and what this write does."""
    if mode == "merge" and merge is None:
        raise SpecError(f"Table {identifier}: mode='merge' needs merge=MergeOptions(keys=[...]), the columns that identify a row.")
    if merge is not None and mode != "merge":
        raise SpecError(f"Table {identifier}: merge options were given but mode is {mode!r}; use mode='merge'.")
    table = table or TableOptions()
    spec = TableSpec(
        identifier,
        partition_by=tuple(partition_by or ()),
        formats=tuple(table.formats or ALL_FORMATS),
        # A resource-wide Delta statistics or column-mapping setting is the new table's too: both formats follow the table's properties.
        properties={**policy_keys(ctx.delta_configuration), **mapping_keys(ctx.delta_configuration), **(table.properties or {})},
        target_file_size=table.target_file_size or DEFAULT_TARGET_FILE_SIZE,
        schema_evolution=table.schema_evolution,
    )
    window = Slice.of(window) if window is not None else None
    merge = merge.check(identifier) if merge else None
    request = WriteRequest(spec, mode, window, write_id, writer, table.target_file_size, merge, dict(snapshot_properties or {}))
    return dataclasses.replace(request, branch=branches.target_branch(identifier, branch), contract=table.contract)


def write(ctx: TableContext, df, request: WriteRequest, *, foreign_default: str, spark=None) -> WriteResult:
    """Write `df` (Spark, Arrow, pandas or Polars) as `request` asks: see the module docstring for the order.

    An Arrow, pandas or Polars frame is written in this process (core/write/arrow_frames.py) unless a step needs
    Spark: a merge, a contract (its rules are Spark SQL), existing rows to rewrite. Only then is a session started."""
    started = time.monotonic()
    check_access(ctx.storage, ctx.warehouse)  # wrong endpoint/region/credential/bucket: fail before any work
    frame = arrow_frames.arrow_of(df)
    session = (lambda: active_session(spark)) if frame is not None else (lambda: df.sparkSession)

    def write_rows(rows, req, loaded):
        if isinstance(rows, pa.Table) and req.merge is not None:  # a merge matches rows in Spark
            rows = arrow_frames.to_spark(rows, session(), req.spec.identifier, loaded)
        lazy = session if isinstance(rows, pa.Table) else (lambda: rows.sparkSession)
        return _write_batch(ctx, rows, req, started, foreign_default, loaded, lazy)

    # The table's data contract checks the rows inside the write's own job (core/contracts/guard.py).
    if frame is None:
        return enforce_contract(ctx, df, request, write_rows)
    return enforce_contract(ctx, frame, request, write_rows, as_spark=lambda rows, table: arrow_frames.to_spark(rows, session(), request.spec.identifier, table))


def _write_batch(ctx: TableContext, df, request: WriteRequest, started: float, foreign_default: str, loaded: Table | None, session) -> WriteResult:
    """`loaded`: the table as the contract's check loaded it moments ago (None: not loaded yet). `session()`: the
    Spark session, started when a step first needs it (`df` is a Spark DataFrame or a pyarrow Table)."""
    identifier = request.spec.identifier
    merge_opts = request.merge
    if merge_opts is None:
        return _write(ctx, df, request, started, foreign_default, loaded=loaded, session=session)
    # Validation, pruning, matching and rewrite must all see the same rows, even from a nondeterministic DataFrame.
    # A batch the caller already cached stays cached: unpersisting it would drop the caller's cache. Otherwise a new
    # DataFrame over the batch is cached, not the caller's object: an object that ran while cached keeps the cache in
    # its plan, and run again after `unpersist` it caches itself anew, a cache nobody releases.
    caller_cached = is_cached(df)
    source = df if caller_cached else df.select("*").persist()
    try:
        batch, key_stats = merge_batch.prepare_batch(identifier, source, merge_opts)  # raises on null/duplicate keys before any write
        if not key_stats.deduplicated:
            # A projection of the persisted source: recomputing it is free, caching it again is not.
            return _write(ctx, batch, request, started, foreign_default, key_stats, loaded, session)
        batch.persist()  # the deduplicated batch feeds the In-set, the matching join and the rewrite
        try:
            return _write(ctx, batch, request, started, foreign_default, key_stats, loaded, session)
        finally:
            batch.unpersist()
    finally:
        if not caller_cached:
            source.unpersist()


def _write(
    ctx: TableContext, df, request: WriteRequest, started: float, foreign_default: str, key_stats: merge_batch.KeyStats | None = None,
    loaded: Table | None = None, session=None,
) -> WriteResult:
    """The write after input handling: table and schema, the mode's plan, then the commit pipeline."""
    identifier, window = request.spec.identifier, request.window
    in_process = isinstance(df, pa.Table)
    data_schema = arrow_frames.spark_schema(df, identifier, loaded) if in_process else merge_batch.data_schema(df) if request.merge else df.schema
    incoming = spark_schema_to_iceberg(identifier, data_schema)
    columns = data_schema.fieldNames()
    for column in window.columns if window is not None else ():
        if column not in columns:
            raise SpecError(f"Table {identifier}: partition column {column!r} is not in the data ({', '.join(columns)}).")
    table, schema_plan, created = tables.create_or_load(ctx.catalog, ctx.storage, ctx.warehouse, request.spec, incoming, loaded)
    try:
        if request.branch is not None:
            # Main and the Delta log stay as they are: foreign Delta versions are for the publish to meet.
            _refuse_schema_change_on_branch(identifier, request.branch, schema_plan)
            if table.current_snapshot() is None:
                table = _empty_main(ctx, identifier, table)
            table = branches.on_branch(table, request.branch)
            if window is not None:
                window.validate(identifier, table)
            return _write_into(ctx, table, schema_plan, df, request, started, key_stats, session=session)
        # An adoption that must rewrite foreign files starts Spark then (None: the active session, when needed).
        delta = None if created else foreign_delta_gate(ctx, identifier, table, foreign_default, None if in_process else df.sparkSession)
        if delta is False:  # foreign versions were adopted: a new Iceberg snapshot, maybe new columns to plan against
            table, schema_plan, _ = tables.create_or_load(ctx.catalog, ctx.storage, ctx.warehouse, request.spec, incoming)
            delta = None
        if delta is not None and (renames := unfollowed_renames(table, delta)):
            raise SchemaError(
                f"Table {identifier}: another engine changed the columns in Iceberg: {'; '.join(renames)}. Nothing was written "
                "(its files would hold names Delta's log does not know)."
            )
        if window is not None:
            window.validate(identifier, table)
        return _write_into(ctx, table, schema_plan, df, request, started, key_stats, delta, session)
    except BaseException as e:
        if created and not isinstance(e, CommitOutcomeUnknown):  # a commit that may still land needs its table
            tables.drop_if_never_written(ctx.catalog, ctx.storage, table)
        raise


def _empty_main(ctx: TableContext, identifier: str, table: Table) -> Table:
    """Main's first snapshot, with no rows, mirrored to Delta: a branch needs a snapshot to fork from, and main's
    readers (of either format) then see an empty table until the branch is published."""
    ic.commit_empty(table, {SummaryKeys.OPERATION: Operation.CREATE_EMPTY})
    if ctx.delta_enabled(table):
        result = WriteResult.for_table(identifier, table, Operation.CREATE_EMPTY, table.current_snapshot().snapshot_id)
        transaction.mirror_to_delta(ctx.mirror(table), table, result)
    return table


def _refuse_schema_change_on_branch(identifier: str, branch: str, schema_plan) -> None:
    """An Iceberg schema belongs to the table, not to a branch: a column added by a branch write would change
    main's schema (and Delta's, at the next mirror) before anything is published."""
    if not schema_plan.empty:
        raise SchemaError(
            f"Table {identifier}: the data for branch {branch!r} changes the table's schema ({schema_plan.describe()}), and an Iceberg "
            "schema is shared by every branch, main included. Nothing was written. Make the schema change on main first "
            "(write data with the new columns or types to main), then write to the branch."
        )


def _conflict_check(ctx: TableContext, request: WriteRequest, df, target: WriteTarget, changes: FileChanges, *, widen_types: bool) -> conflicts.Check:
    """What a concurrent commit must not have changed for this write's plan to hold (core/write/conflicts.py)."""
    if request.merge is not None:
        # A concurrent append that cannot hold a key of the batch, or a change of files the merge does not touch,
        # leaves the merge's plan valid.
        from ..formats.position_deletes import referenced_data_file

        touched = {f.file_path for f in changes.removes} | {referenced_data_file(d) for d in changes.added_delete_files}
        return lambda fresh, base_id: merge_.concurrent_conflict(
            df.sparkSession, fresh, base_id, df, request.merge, ctx.storage, target.cast_files, touched
        )
    if widen_types or (request.window is None and request.mode == Operation.OVERWRITE):
        return conflicts.any_change  # it replaces every live file
    if request.window is not None:
        return conflicts.inside(request.window.expression, request.window.describe())
    return conflicts.never


def foreign_delta_gate(ctx: TableContext, identifier: str, table: Table, foreign_default: str, spark=None):
    """Before planning a write: Delta versions another engine wrote are refused or adopted (the table's policy).

    Returns the Delta log as read, for the commit to bring up to date instead of loading it again (None when
    there is none to hand on; False when an adoption changed the Iceberg table, which must then be reloaded)."""
    if not ctx.delta_enabled(table):
        return None
    policy = foreign_delta.policy_of(table.properties, foreign_default)
    mirror = ctx.mirror(table)
    try:
        delta = mirror.load_current(table)
    except Exception as e:  # noqa: BLE001 - an unreadable Delta log never fails the Iceberg write (repair fixes it)
        log.warning("Table %s: the Delta log cannot be read to look for foreign versions: %s", identifier, e)
        return None
    if foreign_delta.refuse_if_foreign(identifier, delta, policy):
        report = delta_adoption.adopt(identifier, table, mirror, adoption_rewrite(ctx.storage, identifier, spark))
        log.info("Table %s: adopted foreign Delta versions before the write: %s", identifier, report)
        return False
    return delta


def _write_into(ctx: TableContext, table: Table, schema_plan, df, request: WriteRequest, started: float, key_stats, delta=None, session=None) -> WriteResult:
    identifier = request.spec.identifier
    ic.start_manifest_threads()  # while the files are written: not in the commit, which queues the writers behind it
    delta_on = tables.delta_enabled(table) and request.branch is None
    if delta_on and schema_plan.widen and mapping_enabled(table.properties):
        raise SchemaError(
            f"Table {identifier}: the data widens column(s) {[n for n, _ in schema_plan.widen]} to "
            f"{[str(t) for _, t in schema_plan.widen]}, which the Delta side of a column-mapped table cannot follow "
            "(delta-rs cannot replace a column-mapped schema). Nothing was written. Cast the column(s) to the table's "
            "type, or write the wider values into a new column."
        )

    if request.write_id is not None and (earlier := history.find_snapshot_by_write_id(table, request.write_id)) is not None:
        log.info("Table %s: write %s already committed as snapshot %s; not committing again", identifier, request.write_id, earlier.snapshot_id)
        result = WriteResult.for_table(identifier, table, request.mode, earlier.snapshot_id)
        result.duplicate_of_earlier_write, result.branch = True, request.branch
        if delta_on:
            transaction.mirror_to_delta(ctx.mirror(table), table, result)
        return result

    small_writes = SmallWritesRule.for_table(identifier, table)  # a bad threshold refuses the write before any file, not after its commit
    target = WriteTarget(
        identifier,
        table,
        evolved_schema(table, schema_plan),  # new field ids; committed together with the snapshot
        ctx.storage,
        cast_files=types_were_widened(table) or bool(schema_plan.widen),
        target_file_size=request.target_file_size,
        change_feed=delta_on and delta is not None and delta_log_commit.feed_enabled(delta),
    )
    summary = request.summary()
    changes = FileChanges()
    try:
        summary |= write_modes.plan(target, request, df, changes, widen_types=delta_on and bool(schema_plan.widen), key_stats=key_stats, session=session)
        if target.change_feed and schema_plan.empty:
            change_data.write_before_commit(table, target.schema, ctx.storage, changes, summary)  # off the commit lock's Delta stage
    except BaseException:
        delete_files(ctx.storage, changes.created)  # nothing was committed
        raise
    write_seconds = time.monotonic() - started
    revalidate = _conflict_check(ctx, request, df, target, changes, widen_types=delta_on and bool(schema_plan.widen))
    result = transaction.commit(
        ctx, identifier, table, changes, summary, mode=request.mode, schema_plan=schema_plan, revalidate=revalidate, delta=delta, branch=request.branch
    )
    result.write_seconds = write_seconds
    if result.files_added or result.files_removed:
        if (advice := small_writes.advice(identifier, table)) is not None:
            result.warnings.append(advice)
            log.warning(advice)
    return result

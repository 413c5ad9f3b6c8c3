"""A write under a contract, from the caller's DataFrame to the commit; the write pipeline's one hook.

The contract is the caller's (`TableOptions(contract=...)`, the asset's `contract` metadata) or, when the caller
gives none, the one the table records: declared once, every later write keeps it. In order, before any file:
the contract is checked (modes, rule SQL against the data's columns); the schema-change modes act on the columns;
a contract that differs from the table's is checked against the table's rows and written into both formats. Then
the rows are checked inside the write's own job (enforce.py) and the policy decides: `fail` stops the job (nothing
lands), `quarantine` commits the broken rows to `<table>_quarantine` (both formats) before the rest lands,
`drop` leaves them out. The counts per check and a few sample rows are the WriteResult's `contract`.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Callable

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from ..errors import SchemaError
from ..model import WriteRequest, WriteResult
from ..schema.spec import TableSpec
from ..schema.type_mapping import iceberg_to_spark_schema
from ..spark.compat import is_cached
from ..table import branches
from . import enforce, table_contract
from .model import CONTRACT_PROPERTY, Contract

# (rows, request, the table as just loaded or None) -> the write's result: the rest of the write pipeline.
Write = Callable[[object, WriteRequest, object], WriteResult]


def enforced(ctx, df, request: WriteRequest, write: Write, as_spark=None) -> WriteResult:
    """`write(df, request, table)` under the table's contract (a plain call when there is none). `as_spark(df, table)`:
    `df` as a Spark DataFrame, for a frame that is not one (the rules are Spark SQL); called only when there is a contract."""
    identifier = request.spec.identifier
    table = _load(ctx, identifier)
    previous = table_contract.stored(table)
    contract = Contract.of(request.contract) or previous
    if contract is None:
        return write(df, request, table)
    df = as_spark(df, table) if as_spark is not None else df
    cached = is_cached(df)
    contract.check(identifier)
    _refuse_unobserved(identifier, df, contract)
    table_types = {f.name: f.dataType.simpleString() for f in iceberg_to_spark_schema(table.schema()).fields} if table is not None else None
    checks = enforce.Checks()
    control = request.merge.control_columns if request.merge is not None else ()  # a merge's operation columns are not data
    df = enforce.apply_schema_policy(identifier, df, contract, table_types, checks, exempt=control)
    rules_sql = contract.checked_rules(identifier, {f.name: f.dataType.simpleString() for f in df.schema.fields})
    if table is not None and rules_sql and ctx.delta_enabled(table):
        _refuse_widening(identifier, df, table_types)
    warnings: list[str] = []
    changed = table is not None and contract != previous
    if changed:  # checked against the table's rows now, recorded once the write has landed (a failed write changes nothing)
        _change(ctx, identifier, table, df.sparkSession, contract, previous, rules_sql)
    elif table is None:
        spec = dataclasses.replace(request.spec, properties={**request.spec.properties, CONTRACT_PROPERTY: contract.to_json()})
        request = dataclasses.replace(request, spec=spec)
    merge = request.merge
    deletes = _merge_deletes(merge, df.columns) if merge is not None else None
    check_unique = merge is None or not set(merge.keys) <= set(contract.unique)  # unique merge keys: the merge keeps them so
    if check_unique and merge is not None and table is not None and contract.unique:
        df = _with_taken_keys(ctx, identifier, branches.on_branch(table, request.branch), df, merge.keys, contract.unique)
    df = enforce.add_checks(df, contract, rules_sql, checks, merge_deletes=deletes, merge_keys=merge.keys if merge is not None else (), check_unique=check_unique)
    result = _write_checked(ctx, df, request, contract, checks, lambda rows, req, same=True: write(rows, req, table if same else None), cached)
    if table is None or changed:
        warnings += table_contract.record(ctx, identifier, ctx.load(identifier), contract, rules_sql, previous if changed else None)
    result.warnings += warnings
    return result


def _load(ctx, identifier: str):
    try:
        return ctx.catalog.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _refuse_unobserved(identifier: str, df, contract: Contract) -> None:
    """`drop`, `quarantine` and `discard_row` count rows with an Observation of the write's job: a session where
    none returns its metrics (compat.observes) is refused before any file, rather than after the commit."""
    from ..spark.compat import observes
    from .model import ContractError

    counted = [f"on_violation {contract.on_violation!r}"] if contract.on_violation != "fail" else []
    counted += [f"{mode} 'discard_row'" for mode in ("new_columns", "type_changes") if getattr(contract, mode) == "discard_row"]
    if counted and not observes(df.sparkSession):
        raise ContractError(
            f"Table {identifier}: this Spark Connect session returns no observed metrics (a PySpark 3.5 client, or a server that "
            f"cannot compute them, such as Sail), and the contract's {' and '.join(counted)} counts rows with them in the write's "
            "job. Nothing was written. On this session use on_violation 'fail' (and 'freeze' or 'discard_value' for schema "
            "changes), or connect with a PySpark 4 client to a Spark 4 Connect server."
        )


def _change(ctx, identifier: str, table, spark, contract: Contract, previous: Contract | None, rules_sql: dict[str, str]) -> None:
    """A contract that differs from the table's: its new rules and NOT NULL columns are checked against the table's rows."""
    before = previous.rules if previous is not None else {}
    new = {name: sql for name, sql in rules_sql.items() if before.get(name) != contract.rules[name]}
    had = set(previous.not_null) | set(previous.unique) if previous is not None else set()
    new_not_null = [c for c in dict.fromkeys([*contract.not_null, *contract.unique]) if c not in had]
    if table.current_snapshot() is None or not (new or new_not_null):
        return
    from ..read.table_reader import read_table

    rows = read_table(spark, identifier, table, ctx.storage, ctx.mirror(table))
    new_not_null = [c for c in new_not_null if c in rows.columns]
    table_contract.check_existing_rows(spark, identifier, rows, {n: s for n, s in new.items()}, new_not_null)


def _with_taken_keys(ctx, identifier: str, table, df, merge_keys, unique):
    """`df` with `enforce.TAKEN`: TRUE where the row's unique key is held by a table row the merge keeps (one whose merge
    key the batch does not name). The table's merge and unique key columns only are read, in the write's own job."""
    from pyspark.sql import functions as F

    table_columns = {f.name for f in table.schema().fields}
    if table.current_snapshot() is None or not set(unique) | set(merge_keys) <= table_columns:
        return df
    from ..read.table_reader import read_table

    existing = read_table(df.sparkSession, identifier, table, ctx.storage, ctx.mirror(table)).select(*dict.fromkeys([*merge_keys, *unique]))
    kept = existing.join(df.select(*merge_keys).distinct(), on=list(merge_keys), how="left_anti")
    taken = kept.select(*unique).distinct().withColumn(enforce.TAKEN, F.lit(True))
    return df.join(taken, on=list(unique), how="left").select(*[F.col(f"`{c}`") for c in [*df.columns, enforce.TAKEN]])


def _refuse_widening(identifier: str, df, table_types: dict[str, str]) -> None:
    """Widening a column replaces the Delta table (its typeWidening feature is out of delta-rs's reach), and delta-rs
    cannot create a table whose configuration holds CHECK constraints: refused before any file."""
    wider = [f.name for f in df.schema.fields if f.name in table_types and _widens(table_types[f.name], f.dataType.simpleString())]
    if wider:
        raise SchemaError(
            f"Table {identifier}: the data widens column(s) {wider}, and the table's contract rules are Delta CHECK constraints: "
            "widening replaces the Delta table, which delta-rs cannot create with constraints. Nothing was written. Cast the "
            "column(s) to the table's type, or drop the rules from the contract, widen, and add them again."
        )


_INTEGERS = ("tinyint", "smallint", "int", "bigint")


def _widens(old: str, new: str) -> bool:
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if (old, new) == ("float", "double"):
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        return int(new[8:].split(",")[0]) > int(old[8:].split(",")[0])
    return False


def _merge_deletes(merge, columns) -> str:
    """SQL TRUE for a merge row that deletes its key (its operation or deleted-at column says so): no rule applies to it."""
    delete = ["false"]
    if merge.operation_column and merge.operation_column in columns:
        values = ", ".join(enforce.literal(str(v)) for v in merge.delete_values)
        delete.append(f"coalesce(CAST({enforce.quoted(merge.operation_column)} AS STRING) IN ({values}), false)")
    if merge.deleted_at_column and merge.deleted_at_column in columns:
        delete.append(f"{enforce.quoted(merge.deleted_at_column)} IS NOT NULL")
    return " OR ".join(delete)


def _write_checked(ctx, df, request: WriteRequest, contract: Contract, checks: enforce.Checks, write, input_cached: bool) -> WriteResult:
    identifier = request.spec.identifier
    if not checks.broken:
        result = write(enforce.not_nullable(df.drop(*enforce.HELPERS), [*contract.not_null, *contract.unique]), request)
        result.contract = {"policy": contract.on_violation, "checks": {}, "discarded": _discarded(result, checks)}
        return result
    if contract.on_violation == "fail":
        try:
            result = write(enforce.not_nullable(enforce.failing(df, checks), [*contract.not_null, *contract.unique]), request)
        except Exception as e:
            if enforce.is_violation(e):
                raise enforce.describe_failure(identifier, df, checks, e) from None
            raise
        result.contract = {"policy": "fail", "checks": {name: 0 for name in checks.broken}, "discarded": _discarded(result, checks)}
        return result
    flagged = enforce.flagged(df, checks)
    if contract.on_violation == "drop":
        observed, observation = enforce.observed(flagged, checks)
        result = write(enforce.kept_rows(observed, [*contract.not_null, *contract.unique]), request)
        result.contract = None if result.duplicate_of_earlier_write else enforce.report(observation, checks, "drop")
        return result
    return _quarantine(ctx, flagged, request, contract, checks, write, input_cached)


def _quarantine(ctx, flagged, request: WriteRequest, contract: Contract, checks: enforce.Checks, write, input_cached: bool) -> WriteResult:
    """The broken rows to `<table>_quarantine` (committed first, so a write that fails later loses none), then the rest.
    Both halves read the input once: from the caller's cache, or from a cache of the checked batch made here."""
    identifier = request.spec.identifier
    run_id = (request.writer or {}).get("dagster_run_id") or request.write_id or uuid.uuid4().hex
    cached = flagged if input_cached else flagged.persist()
    try:
        observed, observation = enforce.observed(cached, checks)
        target = contract.quarantine_table(identifier)
        quarantine_request = WriteRequest(
            TableSpec(target, formats=request.spec.formats), "append", write_id=f"{request.write_id}:quarantine" if request.write_id else None,
            writer=request.writer, branch=request.branch,  # staged with the write: published (or discarded) with it
        )
        quarantined = write(enforce.quarantine_rows(observed, run_id), quarantine_request, False)
        result = write(enforce.kept_rows(cached, [*contract.not_null, *contract.unique]), request)
    finally:
        if not input_cached:
            cached.unpersist()
    result.contract = enforce.report(observation, checks, "quarantine") if not quarantined.duplicate_of_earlier_write else {"policy": "quarantine"}
    result.contract |= {"quarantine_table": target, "rows_quarantined": quarantined.rows_written, "quarantine_snapshot_id": quarantined.iceberg_snapshot_id}
    return result


def _discarded(result: WriteResult, checks: enforce.Checks) -> dict[str, int]:
    return {} if result.duplicate_of_earlier_write else enforce.discarded_counts(checks)

"""The contract written into both formats, so other engines keep it too.

Iceberg: the whole contract as the table property `lakehouse.contract` (JSON, for any reader to see), the unique
columns as identifier fields, NOT NULL columns as required fields (at creation: the write declares them
non-nullable). Delta: each rule as a CHECK constraint through delta-rs (`delta.constraints.<rule>`, the
`checkConstraints` writer feature), which Spark's Delta writer and delta-rs enforce on their own writes; NOT NULL
columns as non-nullable fields (the mirror writes the Iceberg schema's). A Delta version the contract writes carries
`lakehouse.operation`, so the mirror knows it as its own.

A rule added to a table that has rows is first checked against those rows, and refused naming them (as Delta's
ADD CONSTRAINT does), before either format changes.
"""

from __future__ import annotations

import logging

from pyiceberg.table import Table

from ..properties import SummaryKeys
from .enforce import SAMPLES, not_null_check
from .model import CONTRACT_PROPERTY, Contract, ContractError, ContractViolation
from .rules import RuleRefused, category, check_rule

log = logging.getLogger("lakehouse")
OPERATION = "contract"  # the Delta commits of constraint changes (lakehouse.operation)
DELTA_CONSTRAINT = "delta.constraints."


def stored(table: Table | None) -> Contract | None:
    return Contract.from_json(table.properties.get(CONTRACT_PROPERTY)) if table is not None else None


def check_existing_rows(spark, identifier: str, rows, new: dict[str, str], new_not_null: list[str]) -> None:
    """Refuse, naming the rule, the count and a few rows, when rows already in the table break a rule or NOT NULL
    the contract adds. `rows`: the table's rows as a Spark DataFrame."""
    from pyspark.sql import functions as F

    checks = {name: ~F.coalesce(F.expr(sql), F.lit(False)) for name, sql in new.items()}
    checks |= {not_null_check(c): F.col(f"`{c}`").isNull() for c in new_not_null}
    if not checks:
        return
    counts = rows.select(*[F.sum(cond.cast("long")).alias(name) for name, cond in checks.items()]).collect()[0]
    broken = {name: int(counts[name]) for name in checks if counts[name]}
    if not broken:
        return
    as_json = F.to_json(F.struct(*[F.col(f"`{c}`") for c in rows.columns]), {"ignoreNullFields": "false"})
    samples = {}
    for name in broken:
        samples[name] = [r[0] for r in rows.filter(checks[name]).select(as_json).limit(SAMPLES).collect()]
    listed = "; ".join(f"{name}: {count} row(s), e.g. {' '.join(samples[name])}" for name, count in broken.items())
    violation = ContractViolation(
        f"Table {identifier}: rows already in the table break the contract's new rule(s) ({listed}). The contract was not "
        "changed and nothing was written. Fix or delete those rows first (e.g. an overwrite or a merge), then add the rule."
    )
    violation.broken, violation.samples = broken, [s for v in samples.values() for s in v]
    raise violation


def record(ctx, identifier: str, table: Table, contract: Contract, rules_sql: dict[str, str], previous: Contract | None) -> list[str]:
    """Write the contract into both formats (idempotent); returns warnings for what a format could not take."""
    warnings: list[str] = []
    _record_iceberg(table, contract, warnings, identifier)
    if ctx.delta_enabled(table):
        _record_delta(ctx, identifier, table, contract, rules_sql, previous, warnings)
    for w in warnings:
        log.warning(w)
    return warnings


def _record_iceberg(table: Table, contract: Contract, warnings: list[str], identifier: str) -> None:
    with table.transaction() as tx:
        if table.properties.get(CONTRACT_PROPERTY) != contract.to_json():
            tx.set_properties({CONTRACT_PROPERTY: contract.to_json()})
    schema = table.schema()
    keys = [c for c in contract.unique if schema.find_field(c, case_sensitive=True) is not None]
    if not keys or sorted(schema.identifier_field_names()) == sorted(keys):
        return
    optional = [c for c in keys if not schema.find_field(c).required]
    if optional:
        warnings.append(
            f"Table {identifier}: the contract's unique column(s) {optional} are optional in the table's Iceberg schema, so they are not "
            "Iceberg identifier fields (which must be required); the contract still checks them on every write."
        )
        return
    with table.update_schema() as update:
        update.set_identifier_fields(*keys)


def _record_delta(ctx, identifier: str, table: Table, contract: Contract, rules_sql: dict[str, str], previous: Contract | None, warnings: list[str]) -> None:
    from deltalake.transaction import CommitProperties, PostCommitHookProperties

    delta = ctx.mirror(table).load()
    if delta is None:
        warnings.append(f"Table {identifier}: no Delta log yet, so the contract's rules are not Delta CHECK constraints yet; the next contract change adds them.")
        return
    props = CommitProperties(custom_metadata={SummaryKeys.OPERATION: OPERATION}, max_commit_retries=0)
    hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
    configuration = delta.metadata().configuration or {}
    have = {k[len(DELTA_CONSTRAINT):] for k in configuration if k.startswith(DELTA_CONSTRAINT)}
    before = dict(previous.rules) if previous is not None else {}
    for name in sorted(have - set(rules_sql)):
        if name in before:  # a rule the contract dropped (constraints other engines added stay)
            delta.alter.drop_constraint(name, commit_properties=props, post_commithook_properties=hooks)
            delta.update_incremental()
    changed = {name: sql for name, sql in rules_sql.items() if not (name in have and before.get(name) == contract.rules[name])}
    for name in sorted(changed.keys() & have):  # a rule whose text changed: its old constraint goes first
        delta.alter.drop_constraint(name, commit_properties=props, post_commithook_properties=hooks)
        delta.update_incremental()
    if not changed:
        return
    try:  # one Delta version (and one scan of the rows, which delta-rs validates) for every new rule
        delta.alter.add_constraint(changed, commit_properties=props, post_commithook_properties=hooks)
    except Exception as e:  # noqa: BLE001 - delta-rs's own refusal, named
        raise ContractError(f"Table {identifier}: delta-rs refused the contract rule(s) {sorted(changed)} as Delta CHECK constraints: {e}") from e
    delta.update_incremental()
    _check_stored(identifier, delta, sorted(changed), props, hooks)


def _check_stored(identifier: str, delta, names: list[str], props, hooks) -> None:
    """What delta-rs stored (its own rendering of each rule) must be portable SQL too, or Spark's Delta writer would not
    read it as the rule: such a constraint is dropped again and the rule refused."""
    columns = {f.name: category(str(f.type.type) if hasattr(f.type, "type") else "other") for f in delta.schema().fields}
    for name in names:
        kept = (delta.metadata().configuration or {}).get(DELTA_CONSTRAINT + name, "")
        try:
            check_rule(kept, columns)
        except RuleRefused as e:
            delta.alter.drop_constraint(name, commit_properties=props, post_commithook_properties=hooks)
            raise ContractError(
                f"Table {identifier}: delta-rs stored the contract rule {name!r} as {kept!r}, which uses {e}: Spark's Delta writer would "
                "not read it as the rule. The constraint was dropped again; rewrite the rule (docs/contracts.md)."
            ) from None


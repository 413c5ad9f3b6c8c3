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
from .rules import SIMPLE_NAME, RuleRefused, category, check_rule

log = logging.getLogger("lakehouse")
OPERATION = "contract"  # the Delta commits of constraint changes (lakehouse.operation)
DELTA_CONSTRAINT = "delta.constraints."
# Each rule's CHECK constraint as delta-rs stored it (its own rendering: `IN` becomes ORs), for verify to compare.
DELTA_TEXTS = "lakehouse.contract.delta-constraints"


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
        if (delta := ctx.mirror(table).load()) is not None:
            _record_delta_texts(table, contract, delta)
    for w in warnings:
        log.warning(w)
    return warnings


def _record_iceberg(table: Table, contract: Contract, warnings: list[str], identifier: str) -> None:
    with table.transaction() as tx:
        if table.properties.get(CONTRACT_PROPERTY) != contract.to_json():
            tx.set_properties({CONTRACT_PROPERTY: contract.to_json()})
    _require(table, contract)
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


def _require(table: Table, contract: Contract) -> None:
    """NOT NULL and unique columns the Iceberg schema still has optional become required fields (their rows were
    checked first: the table's by `check_existing_rows`, the write's by its own job). Iceberg counts making a field
    required as an incompatible change: a writer that knows nothing of the contract may no longer write NULL there."""
    fields = {f.name: f for f in table.schema().fields}
    optional = [c for c in dict.fromkeys([*contract.not_null, *contract.unique]) if c in fields and not fields[c].required]
    if optional:
        with table.update_schema(allow_incompatible_changes=True) as update:
            for column in optional:
                update.update_column(column, required=True)


def _record_not_null(root_uri: str, storage, delta, contract: Contract) -> None:
    """Contract NOT NULL columns that Delta declares nullable: one metaData version, schema otherwise unchanged. delta-rs
    has no operation for it (its `alter` can only drop a NOT NULL), so the version is written as its metaData."""
    import json

    from ..formats.delta import column_mapping as delta_column_mapping

    schema = json.loads(delta.schema().to_json())
    wanted = set(contract.not_null) | set(contract.unique)
    tightened = [f["name"] for f in schema["fields"] if f["name"] in wanted and f.get("nullable", True)]
    if not tightened:
        return
    for f in schema["fields"]:
        if f["name"] in tightened:
            f["nullable"] = False
    delta_column_mapping.commit_configuration(
        root_uri, storage, delta, {}, {SummaryKeys.OPERATION: OPERATION, "operation": "CHANGE COLUMN"}, schema_string=json.dumps(schema),
    )
    delta.update_incremental()


def _record_delta_texts(table: Table, contract: Contract, delta) -> None:
    import json

    configuration = delta.metadata().configuration or {}
    texts = json.dumps({name: configuration[DELTA_CONSTRAINT + name] for name in contract.rules if DELTA_CONSTRAINT + name in configuration}, sort_keys=True)
    if table.properties.get(DELTA_TEXTS) != texts:
        with table.transaction() as tx:
            tx.set_properties({DELTA_TEXTS: texts})


def _record_delta(ctx, identifier: str, table: Table, contract: Contract, rules_sql: dict[str, str], previous: Contract | None, warnings: list[str]) -> None:
    from deltalake.transaction import CommitProperties, PostCommitHookProperties

    delta = ctx.mirror(table).load()
    if delta is None:
        warnings.append(f"Table {identifier}: no Delta log yet, so the contract's rules are not Delta CHECK constraints yet; the next contract change adds them.")
        return
    _record_not_null(ctx.mirror(table).root_uri, ctx.storage, delta, contract)
    props = CommitProperties(custom_metadata={SummaryKeys.OPERATION: OPERATION}, max_commit_retries=0)
    hooks = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
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



def format_differences(table: Table, delta) -> list[str]:
    """Where the formats do not hold what the table's contract (the Iceberg property) says: a rule that is no Delta CHECK
    constraint or one of another meaning, a Delta constraint the contract does not have (the lakehouse's writes would
    not keep it), a NOT NULL or unique column Iceberg has optional or Delta nullable, unique columns that are not
    Iceberg's identifier fields. Empty when they agree (and for a table without contract or constraints)."""
    import json

    contract = stored(table) or Contract()
    recorded = json.loads(table.properties.get(DELTA_TEXTS) or "{}")
    configuration = delta.metadata().configuration or {}
    constraints = {k[len(DELTA_CONSTRAINT):]: v for k, v in configuration.items() if k.startswith(DELTA_CONSTRAINT)}
    fields = {f.name: f for f in delta.schema().fields}
    columns = {name: category(str(f.type.type) if hasattr(f.type, "type") else "other") for name, f in fields.items()}
    out = []
    for name, text in sorted(contract.rules.items()):
        if name not in constraints:
            out.append(f"contract rule {name!r} ({text}) is no Delta CHECK constraint (delta.constraints.{name})")
        elif constraints[name] != recorded.get(name) and _meaning(text, columns) != _meaning(constraints[name], columns):
            out.append(f"contract rule {name!r} is {text!r} but its Delta CHECK constraint is {constraints[name]!r}")
    for name in sorted(set(constraints) - set(contract.rules)):
        out.append(f"Delta CHECK constraint {name!r} ({constraints[name]}) is not in the table's contract (the lakehouse's writes do not check it)")
    iceberg = {f.name: f for f in table.schema().fields}
    for column in dict.fromkeys([*contract.not_null, *contract.unique]):
        if column in iceberg and not iceberg[column].required:
            out.append(f"contract NOT NULL column {column!r} is optional in Iceberg")
        if column in fields and fields[column].nullable:
            out.append(f"contract NOT NULL column {column!r} is nullable in Delta")
    if contract.unique and sorted(table.schema().identifier_field_names()) != sorted(contract.unique):
        out.append(f"contract unique columns {list(contract.unique)} are not Iceberg's identifier fields ({sorted(table.schema().identifier_field_names())})")
    return out


def _meaning(text: str, columns: dict[str, str]) -> str:
    """A rule's text as the rule checker spells it (delta-rs stores its own rendering: `!=` for `<>`, btrim for trim)."""
    import re

    try:
        return re.sub(r"\bbtrim\(", "trim(", check_rule(text, columns)[0])
    except RuleRefused:
        return text


def adoptable(identifier: str, delta, location: str) -> dict[str, str]:
    """The Delta table's CHECK constraints as contract rules (name -> the constraint's text), all in the portable subset
    Spark (the lakehouse's writes) and delta-rs evaluate alike; raises ImportRefused naming each one outside it."""
    import json

    from ..errors import ImportRefused

    fields = json.loads(delta.schema().to_json())["fields"]
    columns = {f["name"]: category(f["type"]) if isinstance(f["type"], str) else "other" for f in fields}
    portable, refused = {}, []
    for key, text in sorted((delta.metadata().configuration or {}).items()):
        name = key[len(DELTA_CONSTRAINT):]
        if not key.startswith(DELTA_CONSTRAINT):
            continue
        if not SIMPLE_NAME.match(name):
            refused.append(f"{name!r} ({text}), whose name is not lowercase letters, digits and underscores as a contract rule's")
            continue
        try:
            check_rule(text, columns)
            portable[name] = text
        except RuleRefused as e:
            refused.append(f"{name!r} ({text}), which uses {e}")
    if refused:
        raise ImportRefused(
            f"Table {identifier}: the Delta table at {location} has CHECK constraint(s) outside the SQL subset Spark and delta-rs "
            f"evaluate alike, which the import cannot adopt as contract rules: {'; '.join(refused)}. Nothing was imported. Fix: "
            "replace each by a constraint in the portable subset (docs/contracts.md) or drop it (delta-rs: "
            "`DeltaTable.alter.drop_constraint`), then import."
        )
    return portable


def check_delta_rows(identifier: str, delta, rules: dict[str, str]) -> None:
    """Refuse an import, naming the rule, the count and a few rows, when rows of the Delta table break a CHECK constraint
    it is to adopt as a contract rule (another engine may have written them without checking it). The rows are counted
    by delta-rs (DataFusion), which evaluates the portable subset as Spark does; only the counts and samples travel."""
    from ..errors import ImportRefused

    if not rules:
        return
    broken = {name: f"(({text}) IS NOT TRUE)" for name, text in rules.items()}
    counts = _query(delta, "SELECT " + ", ".join(f"sum(CASE WHEN {cond} THEN 1 ELSE 0 END) AS {name}" for name, cond in broken.items()) + " FROM t")[0]
    found = {name: int(counts[name]) for name in rules if counts[name]}
    if not found:
        return
    listed = []
    for name, count in found.items():
        rows = _query(delta, f"SELECT * FROM t WHERE {broken[name]} LIMIT {SAMPLES}")
        listed.append(f"{name} ({rules[name]}): {count} row(s), e.g. {rows}")
    raise ImportRefused(
        f"Table {identifier}: rows of the Delta table break its CHECK constraint(s), which the import adopts as contract rules: "
        f"{'; '.join(listed)}. Nothing was imported. Fix or delete those rows with a Delta writer, then import."
    )


def _query(delta, sql: str) -> list[dict]:
    import pyarrow as pa
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", delta).execute(sql).read_all()).to_pylist()


def adopt(table: Table, rules: dict[str, str]) -> None:
    """An imported Delta table's portable CHECK constraints as its contract (already Delta constraints: only the Iceberg
    property is written)."""
    import json

    if rules:
        with table.transaction() as tx:
            tx.set_properties({CONTRACT_PROPERTY: Contract(rules=rules).to_json(), DELTA_TEXTS: json.dumps(rules, sort_keys=True)})

"""A data contract: what a table promises about its rows and columns, declared once and checked on every write.

    rules          named row rules, SQL boolean expressions in the portable subset (rules.py)
    not_null       columns that never hold NULL (Iceberg required fields, Delta NOT NULL columns)
    unique         columns whose values identify a row within a write's batch (Iceberg identifier fields)
    types          declared column types (Spark type names: "bigint", "string", "decimal(10,2)", ...)
    new_columns    what a column the table does not have does:   evolve | freeze | discard_row | discard_value
    type_changes   what a value of another type than declared does: evolve | freeze | discard_row | discard_value
    on_violation   what a row that breaks a rule, a NOT NULL or a unique key does: fail | quarantine | drop

The schema-change modes are dlt's: `evolve` accepts the change (the table's schema evolves), `freeze` refuses the
write, `discard_row` drops the rows that carry the change (a new column's non-null value, a value that does not
convert to the declared type), `discard_value` keeps the rows without the value (the new column is not written; a
value that does not convert becomes NULL). The contract travels as JSON: an Iceberg table property, and Dagster
metadata (`contract`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import InputError, SpecError
from .rules import SIMPLE_NAME, RuleRefused, category, check_rule

SCHEMA_MODES = ("evolve", "freeze", "discard_row", "discard_value")
VIOLATION_POLICIES = ("fail", "quarantine", "drop")
CONTRACT_PROPERTY = "lakehouse.contract"  # the whole contract, as JSON, on the Iceberg table
QUARANTINE_SUFFIX = "_quarantine"


class ContractError(SpecError):
    """The contract itself is invalid (a rule outside the portable subset, an unknown column, an unknown mode)."""


class ContractViolation(InputError):
    """Rows broke the contract under the `fail` policy, or a schema change it forbids; nothing was written."""


@dataclass(frozen=True)
class Contract:
    rules: Mapping[str, str] = field(default_factory=dict)
    not_null: Sequence[str] = ()
    unique: Sequence[str] = ()
    types: Mapping[str, str] = field(default_factory=dict)
    new_columns: str = "evolve"
    type_changes: str = "evolve"
    on_violation: str = "fail"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", dict(self.rules or {}))
        object.__setattr__(self, "not_null", tuple(dict.fromkeys(self.not_null or ())))
        object.__setattr__(self, "unique", tuple(dict.fromkeys(self.unique or ())))
        object.__setattr__(self, "types", {k: str(v).lower().replace(" ", "") for k, v in (self.types or {}).items()})

    def check(self, identifier: str) -> "Contract":
        """The contract's own consistency (modes, rule names), before any column is looked at."""
        for what, value, allowed in (
            ("new_columns", self.new_columns, SCHEMA_MODES), ("type_changes", self.type_changes, SCHEMA_MODES),
            ("on_violation", self.on_violation, VIOLATION_POLICIES),
        ):
            if value not in allowed:
                raise ContractError(f"Table {identifier}: the contract setting {what}={value!r} is not one of {', '.join(allowed)}.")
        for name in self.rules:
            if not SIMPLE_NAME.match(name):
                raise ContractError(
                    f"Table {identifier}: contract rule name {name!r} must be lowercase letters, digits and underscores "
                    "(it names a Delta CHECK constraint and a Dagster asset check)."
                )
        return self

    def checked_rules(self, identifier: str, columns: Mapping[str, str]) -> dict[str, str]:
        """name -> the rule's portable SQL, over `columns` (name -> Spark type name); raises ContractError naming the rule
        and the construct refused."""
        categories = {name: category(t) for name, t in columns.items()}
        out = {}
        for name, text in self.rules.items():
            try:
                out[name] = check_rule(text, categories)[0]
            except RuleRefused as e:
                raise ContractError(
                    f"Table {identifier}: contract rule {name!r} ({text}) is refused: it uses {e}. Nothing was written. "
                    "Rewrite the rule in the portable subset (docs/contracts.md)."
                ) from None
        for kind, names in (("not_null", self.not_null), ("unique", self.unique), ("types", list(self.types))):
            for name in names:
                if name not in columns:
                    raise ContractError(f"Table {identifier}: contract {kind} names the unknown column {name!r} (columns: {', '.join(columns)}).")
        return out

    def to_json(self) -> str:
        return json.dumps(
            {"rules": self.rules, "not_null": list(self.not_null), "unique": list(self.unique), "types": self.types,
             "new_columns": self.new_columns, "type_changes": self.type_changes, "on_violation": self.on_violation},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> "Contract | None":
        return None if not text else cls(**json.loads(text))

    @classmethod
    def of(cls, value) -> "Contract | None":
        """A Contract from a Contract, a dict of its fields, or its JSON (None stays None)."""
        if value is None or isinstance(value, Contract):
            return value
        if isinstance(value, str):
            return cls.from_json(value)
        return cls(**dict(value))

    def quarantine_table(self, identifier: str) -> str:
        return identifier + QUARANTINE_SUFFIX

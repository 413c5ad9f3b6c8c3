"""A row condition of a delete or an update: Spark SQL text over the table's columns, checked before any file.

Spark decides which rows match: a row matches when the text evaluates to TRUE (NULL and FALSE leave it). The text
is checked against the table's columns by Spark's analyzer before anything is read (an unknown column, text that is
not SQL, a result that is not boolean, a nondeterministic function or a subquery are refused, naming the table).

Files are pruned by metadata only where that is sound. pyiceberg's row-filter parser reads most simple conditions
(comparisons, IN, IS NULL, BETWEEN, LIKE 'prefix%', AND/OR/NOT), but it binds some literals differently from Spark
(`id = 1.5` on a long column becomes `id = 2`; a comparison beyond the column's range becomes always true, nulls
included; `'a''b'` is `a'b` to it and `ab` to Spark), treats NaN and `!=` on nulls by Iceberg's rules, and cannot read
the rest of Spark SQL. So a predicate is used to prune only when its literal binds to exactly the value written, on a
column that is not a float or double; what pyiceberg cannot read soundly prunes nothing (each top-level AND term is
read on its own, and an AND keeps its sound side). The strict form (every row of a file matches, so the file is
dropped without being read) is used only for predicates that reject nulls and only when the whole condition was read
soundly.
"""

from __future__ import annotations

import decimal
import hashlib
import re
from dataclasses import dataclass

from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, Not, Or, UnboundPredicate
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType, TimeType

from ..errors import InputError

# Functions whose value changes between two evaluations: the rows found and the rows rewritten would differ.
_NONDETERMINISTIC = re.compile(
    r"\b(rand|randn|random|uuid|shuffle|monotonically_increasing_id|spark_partition_id|input_file_name|"
    r"current_timestamp|current_date|now|localtimestamp|unix_timestamp)\s*\(",
    re.IGNORECASE,
)
_SUBQUERY = re.compile(r"\b(select|exists)\b", re.IGNORECASE)
# Predicates whose strict evaluation by pyiceberg matches SQL: none is TRUE for a NULL value.
_NULL_REJECTING = {"EqualTo", "LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual", "In", "StartsWith", "NotNull", "IsNull"}


@dataclass(frozen=True)
class Condition:
    """`sql`: the user's text (Spark decides the rows); `prune`: an Iceberg filter every matching row's file passes;
    `strict`: whether `prune` may also drop files whose statistics say every row matches."""

    sql: str
    prune: BooleanExpression
    strict: bool

    @property
    def matches(self) -> str:
        """Spark SQL TRUE exactly for the matching rows (NULL counts as no match)."""
        return f"coalesce(({self.sql}), false)"

    def columns(self, names: list[str]) -> list[str]:
        """Of the columns `names`, those the condition names: each spelled as a whole identifier outside its string
        literals (any case, backquoted or not)."""
        text = _without_strings(self.sql).lower()
        return [n for n in names if re.search(rf"(?<![\w.]){re.escape(n.lower())}(?!\w)", text)]

    def erasure_id(self, key: str | None) -> str:
        """What an erasure records instead of its text: an HMAC-SHA256 of the text under `key` (whoever holds the key
        can tell which request an erasure answered; without it, enumerating ids does not reverse it), else a random id.
        A plain hash of `customer_id IN (42)` would be reversed by trying every id."""
        if key:
            import hmac

            return hmac.new(key.encode(), self.sql.encode(), hashlib.sha256).hexdigest()[:32]
        import uuid

        return uuid.uuid4().hex


def condition_of(identifier: str, where: str, schema: Schema, spark_schema, spark, what: str = "condition", secret: bool = False) -> Condition:
    """The checked condition `where` of `identifier` (`schema`: its Iceberg schema; `spark_schema`: the same for Spark).
    `secret`: the text holds personal data (an erasure's): messages leave it and its string literals out."""
    text = (where or "").strip() if isinstance(where, str) else None
    shown = "(its text not shown)" if secret else repr(text)
    if not text:
        raise InputError(f"Table {identifier}: the {what} must be a SQL boolean expression over the table's columns, e.g. \"id = 42\"; got {'(not shown)' if secret else repr(where)}. Nothing was changed.")
    if m := _NONDETERMINISTIC.search(text):
        raise InputError(f"Table {identifier}: the {what} {shown} calls {m.group(1)}(), whose value changes between evaluations, so the rows found and the rows rewritten could differ. Use fixed values. Nothing was changed.")
    if _SUBQUERY.search(_without_strings(text)):
        raise InputError(f"Table {identifier}: the {what} {shown} holds a subquery; it must be a condition on one row's columns. Nothing was changed.")
    check_sql(identifier, spark, spark_schema, text, what, boolean=True, secret=secret)
    prune, exact, strict = _pruning(text, schema)
    return Condition(text, prune, strict and exact)


def check_sql(identifier: str, spark, spark_schema, text: str, what: str, *, boolean: bool, secret: bool = False):
    """The Spark type of `text` over a row of `spark_schema`, as Spark's analyzer sees it; raises InputError naming the
    table and Spark's reason (an unknown column, a parse error, a type mismatch). `secret`: as for `condition_of`."""
    shown = "(its text not shown)" if secret else repr(text)
    from pyspark.sql import functions as F

    try:
        data_type = spark.createDataFrame([], spark_schema).select(F.expr(text).alias("v")).schema["v"].dataType
    except Exception as e:  # noqa: BLE001 - Spark's AnalysisException / ParseException, classic or Connect
        reason = str(e).strip().splitlines()[0][:400]
        if secret:
            reason = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", reason)
        columns = ", ".join(spark_schema.fieldNames())
        raise InputError(f"Table {identifier}: the {what} {shown} is not valid Spark SQL over the table's columns ({columns}): {reason}. Nothing was changed.") from None
    if boolean and data_type.simpleString() != "boolean":
        raise InputError(f"Table {identifier}: the {what} {shown} is {data_type.simpleString()}, not a boolean; write a comparison, e.g. \"id = 42\". Nothing was changed.")
    return data_type


def _without_strings(text: str) -> str:
    """`text` with its string literals (single- or double-quoted, backslash escapes) emptied."""
    return re.sub(r"'(?:[^'\\]|''|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", text)


def _pruning(text: str, schema: Schema) -> tuple[BooleanExpression, bool, bool]:
    """(the sound pruning filter, whether it is exactly the condition, whether every predicate in it rejects nulls).
    Each top-level AND term is read on its own: a term pyiceberg cannot read leaves the others to prune."""
    from pyiceberg.expressions.parser import parse

    out: BooleanExpression | None = None
    exact = strict = True
    for term in _conjuncts(text):
        try:
            if "''" in term or "\\" in term:
                raise ValueError("Spark reads 'a''b' as 'ab' and backslashes as escapes; pyiceberg reads them otherwise")
            plain, dated = _plain_date_literals(term)
            parsed = parse(plain)
            if dated and not _on_dates_only(parsed, schema):
                raise ValueError("a DATE literal compared with a column that is not a date: Spark casts it in its own way")
        except Exception:  # noqa: BLE001 - outside pyiceberg's grammar: this term prunes nothing
            exact = strict = False
            continue
        prune, term_exact, term_strict = _sound(parsed, schema)
        exact, strict = exact and term_exact, strict and term_strict
        out = prune if out is None else And(out, prune)
    return (out if out is not None else AlwaysTrue()), exact, strict


_DATE_LITERAL = re.compile(r"(?i)\bDATE\s*'(\d{4}-\d{2}-\d{2})'")


def _plain_date_literals(term: str) -> tuple[str, bool]:
    """`term` with Spark's typed date literals (`DATE'2024-01-01'`) as the ISO text pyiceberg reads into a date column,
    outside string literals; and whether it held any."""
    out, i, dated = [], 0, False
    while i < len(term):
        if term[i] in "'\"`":
            end = term.find(term[i], i + 1)
            end = len(term) if end == -1 else end + 1
            out.append(term[i:end])
            i = end
            continue
        m = _DATE_LITERAL.match(term, i)
        if m and (i == 0 or not (term[i - 1].isalnum() or term[i - 1] == "_")):
            out.append(f"'{m.group(1)}'")
            i, dated = m.end(), True
            continue
        out.append(term[i])
        i += 1
    return "".join(out), dated


def _on_dates_only(expr: BooleanExpression, schema: Schema) -> bool:
    """Whether every predicate of `expr` is on a date column (the only columns a rewritten DATE literal prunes)."""
    if isinstance(expr, (And, Or)):
        return _on_dates_only(expr.left, schema) and _on_dates_only(expr.right, schema)
    if isinstance(expr, Not):
        return _on_dates_only(expr.child, schema)
    if isinstance(expr, UnboundPredicate):
        try:
            return isinstance(schema.find_field(expr.term.name, case_sensitive=True).field_type, DateType)
        except ValueError:  # not a column of the table
            return False
    return False


def _conjuncts(text: str) -> list[str]:
    """`text` split at its top-level ANDs (outside quotes and parentheses, and not the AND of a BETWEEN)."""
    terms, start, depth, between, i = [], 0, 0, False, 0
    while i < len(text):
        c = text[i]
        if c in "'\"`":
            end = text.find(c, i + 1)
            while end != -1 and c == "'" and text.startswith("''", end):
                end = text.find(c, end + 2)
            i = len(text) if end == -1 else end + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and (c.isalpha() or c == "_") and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            word = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i:]).group(0)
            if word.lower() == "between":
                between = True
            elif word.lower() == "and":
                if between:
                    between = False
                else:
                    terms.append(text[start:i])
                    start = i + len(word)
            i += len(word)
            continue
        i += 1
    terms.append(text[start:])
    return [t.strip() for t in terms if t.strip()]


def _sound(expr: BooleanExpression, schema: Schema) -> tuple[BooleanExpression, bool, bool]:
    if isinstance(expr, And):
        (left, l_exact, l_strict), (right, r_exact, r_strict) = _sound(expr.left, schema), _sound(expr.right, schema)
        return And(left, right), l_exact and r_exact, l_strict and r_strict  # either side alone still holds every match
    if isinstance(expr, Or):
        (left, l_exact, l_strict), (right, r_exact, r_strict) = _sound(expr.left, schema), _sound(expr.right, schema)
        if not (l_exact and r_exact):
            return AlwaysTrue(), False, False
        return Or(left, right), True, l_strict and r_strict
    if isinstance(expr, Not):
        child, exact, _ = _sound(expr.child, schema)
        # NOT of a weakened child is not a weakened NOT; Iceberg's != and NOT IN keep nulls, so never strict.
        return (Not(child), True, False) if exact else (AlwaysTrue(), False, False)
    if isinstance(expr, UnboundPredicate) and _binds_exactly(expr, schema):
        return expr, True, type(expr).__name__ in _NULL_REJECTING
    return AlwaysTrue(), False, False


def _binds_exactly(predicate: UnboundPredicate, schema: Schema) -> bool:
    """Whether `predicate` binds to `schema` (case-sensitively, as a predicate not folded to always true or false) with
    every literal the very value written, on a column of a type whose order both engines share (not a float: Iceberg
    orders NaN apart from Spark)."""
    from pyiceberg.expressions import BoundPredicate

    try:
        bound = predicate.bind(schema, case_sensitive=True)
    except Exception:  # noqa: BLE001 - unknown column, unconvertible literal
        return False
    if not isinstance(bound, BoundPredicate):
        return False
    field_type = bound.term.ref().field.field_type
    written = [predicate.literal] if hasattr(predicate, "literal") else list(getattr(predicate, "literals", None) or ())
    kept = [bound.literal] if hasattr(bound, "literal") else list(getattr(bound, "literals", None) or ())
    if isinstance(field_type, (DateType, TimeType, TimestampType, TimestamptzType)):
        return all(isinstance(w.value, str) for w in written)  # ISO-8601 text, which pyiceberg reads as Spark does, or refuses
    if isinstance(field_type, StringType):
        if type(predicate).__name__ in ("StartsWith", "NotStartsWith") and any(c in str(predicate.literal.value) for c in "_\\"):
            return False  # LIKE's `_` and escapes, which pyiceberg reads as plain characters
        return {w.value for w in written} == {k.value for k in kept}
    if isinstance(field_type, (IntegerType, LongType, DecimalType)):
        return {_number(w.value) for w in written} == {_number(k.value) for k in kept} and None not in {_number(w.value) for w in written}
    return False


def _number(value) -> decimal.Decimal | None:
    if isinstance(value, bool):
        return None
    try:
        return decimal.Decimal(str(value).strip())
    except decimal.InvalidOperation:
        return None

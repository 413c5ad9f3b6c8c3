"""A pyiceberg row filter (`BooleanExpression`) as a Spark Column.

The Column is built as one Spark SQL expression (text) and parsed by the JVM once: building it call by
call through PySpark costs several py4j round trips per column reference and literal (~10 ms a read).

Iceberg scan planning only prunes *files* with a row filter; the rows of a planned file that do not
match must still be filtered in Spark. Either form of `row_filter` (SQL text, which pyiceberg parses,
or a pyiceberg expression) is turned into the equivalent Spark Column here, so both mean the same rows
whatever files planning kept, with Spark SQL's semantics (a
comparison with null matches nothing; `not_nan` keeps nulls, as `NOT isnan(x)` does) except for NaN,
which satisfies no `<`, `<=`, `>`, `>=` (Iceberg's rule; Spark orders NaN above every number). A
comparison with a value outside the column type's range is decided by pyiceberg's binding: always true
or always false, null rows included (`i < 2**40` on an int column keeps nulls).

Literals are rebuilt from Iceberg's own representation of the bound value (days, microseconds,
Decimal) into Spark literals of the column's exact type, never through Python's local-time datetime
conversion: `date` via `date_from_unix_date`, `timestamptz` via `timestamp_micros`, `timestamp` via
`make_timestamp_ntz` (PySpark's own date and datetime literals go through java.sql.Date / local time and
refuse or shift sentinel values such as 0001-01-01). Strings and binaries are written as hex (`X'..'`),
numbers as casts of their exact text, so no value needs SQL escaping; Spark folds them to literals
before it pushes the filter down to the Parquet reader.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundEqualTo,
    BoundGreaterThan,
    BoundGreaterThanOrEqual,
    BoundIn,
    BoundIsNaN,
    BoundIsNull,
    BoundLessThan,
    BoundLessThanOrEqual,
    BoundNotEqualTo,
    BoundNotIn,
    BoundNotNaN,
    BoundNotNull,
    BoundPredicate,
    BoundStartsWith,
    Not,
    Or,
)
from pyiceberg.expressions.literals import AboveMax, BelowMin, Literal
from pyiceberg.expressions.visitors import BoundBooleanExpressionVisitor, bind, extract_field_ids, visit, visit_bound_predicate
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from ..errors import SpecError

_EPOCH = dt.datetime(1970, 1, 1)


def spark_row_filter(spark, identifier: str, schema: Schema, bound: BooleanExpression) -> str:
    """`bound` (`bind_row_filter` of `schema`) as Spark SQL text over a DataFrame with `schema`'s columns, for
    `DataFrame.filter`: the JVM parses it in the filter's own round trip (`F.expr` would cost several more)."""
    paths = _column_paths(schema)
    if any(not _PLAIN_NAME.fullmatch(p) for i in extract_field_ids(bound) for p in paths[i]):
        # With this (non-default) setting Spark's parser reads a backquoted name holding other characters
        # than letters, digits and _ as a regex, which a filter refuses: say so, naming the table.
        if spark.conf.get(_REGEX_NAMES, "false").strip().lower() == "true":
            raise SpecError(
                f"Table {identifier}: a row_filter on columns whose names hold other characters than letters, digits "
                f"and _ needs {_REGEX_NAMES}=false in this Spark session (it is true); or filter the DataFrame yourself."
            )
    return spark_row_filter_sql(identifier, schema, bound)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")
_REGEX_NAMES = "spark.sql.parser.quotedRegexColumnNames"


def spark_row_filter_sql(identifier: str, schema: Schema, bound: BooleanExpression) -> str:
    """`bound` as Spark SQL expression text (what `spark_row_filter` parses)."""
    return _sql(bound, _ToSparkSql(identifier, _column_paths(schema)))


def _sql(expr: BooleanExpression, visitor: "_ToSparkSql") -> str:
    """Like pyiceberg's `visit`, but a chain of one operator is written flat, `(a OR b OR c)`: Spark's parser
    reads such a chain in a loop, where nested parentheses cost a level of recursion each."""
    if isinstance(expr, (And, Or)):
        parts, stack = [], [expr]
        while stack:
            node = stack.pop()
            if type(node) is type(expr):
                stack += [node.right, node.left]  # type: ignore[attr-defined]
            else:
                parts.append(_sql(node, visitor))
        return "(" + (" AND " if isinstance(expr, And) else " OR ").join(parts) + ")"
    if isinstance(expr, Not):
        return f"(NOT {_sql(expr.child, visitor)})"
    return visit(expr, visitor)


def bind_row_filter(identifier: str, schema: Schema, expr: BooleanExpression) -> BooleanExpression:
    try:
        return bind(schema, expr, case_sensitive=True)
    except (ValueError, TypeError) as e:  # an unknown column; a literal of the wrong type
        raise SpecError(f"Table {identifier}: row_filter {expr!r} does not fit the table's columns ({e}).") from None


def same_columns_for(schema: Schema, other: Schema, bound: BooleanExpression) -> bool:
    """Whether every column `bound` (bound to `schema`) reads has the same name and type in `other`:
    then the expression means the same there (a time-travel read plans with the current schema)."""
    for field_id in extract_field_ids(bound):
        try:
            theirs = other.find_field(field_id)
        except ValueError:  # the column is not in `other`
            return False
        if schema.find_column_name(field_id) != other.find_column_name(field_id) or schema.find_field(field_id).field_type != theirs.field_type:
            return False
    return True


def _column_paths(schema: Schema) -> dict[int, tuple[str, ...]]:
    """Field id -> the column's path through structs (names may hold dots: never split a joined name)."""
    out: dict[int, tuple[str, ...]] = {}

    def walk(fields: tuple[NestedField, ...], prefix: tuple[str, ...]) -> None:
        for f in fields:
            out[f.field_id] = (*prefix, f.name)
            if isinstance(f.field_type, StructType):
                walk(f.field_type.fields, (*prefix, f.name))

    walk(schema.fields, ())
    return out


class _ToSparkSql(BoundBooleanExpressionVisitor[str]):
    def __init__(self, identifier: str, paths: dict[int, tuple[str, ...]]):
        self.identifier = identifier
        self.paths = paths

    # ---- structure
    def visit_true(self) -> str:
        return "true"

    def visit_false(self) -> str:
        return "false"

    def visit_not(self, child_result: str) -> str:
        return f"(NOT {child_result})"

    def visit_and(self, left_result: str, right_result: str) -> str:
        return f"({left_result} AND {right_result})"

    def visit_or(self, left_result: str, right_result: str) -> str:
        return f"({left_result} OR {right_result})"

    # ---- predicates
    def visit_bound_predicate(self, predicate: BoundPredicate) -> str:
        if isinstance(predicate, (BoundIn, BoundNotIn)):
            # Binding turns a member outside the column type's range into a placeholder holding the type's
            # max or min (pyiceberg's value_set cannot tell it from the real max): it matches no value.
            values = {
                lit.value for lit in predicate.literals if not isinstance(lit, (AboveMax, BelowMin)) and _beyond_precision(predicate.term, lit) is None
            }
            if isinstance(predicate, BoundIn):
                return self.visit_in(predicate.term, values) if values else self.visit_false()
            return self.visit_not_in(predicate.term, values) if values else f"({self._col(predicate.term)} IS NOT NULL)"
        if isinstance(getattr(predicate, "literal", None), (AboveMax, BelowMin)):
            return self._out_of_range(predicate, above=isinstance(predicate.literal, AboveMax))
        beyond = _beyond_precision(predicate.term, getattr(predicate, "literal", None))
        if beyond is not None:
            return self._out_of_range(predicate, above=beyond > 0)
        return visit_bound_predicate(predicate, self)

    def _out_of_range(self, predicate: BoundPredicate, above: bool) -> str:
        """A comparison with a value beyond the column type's range (bound so by an In/NotIn of one member):
        every non-null value lies below it (`above`) or above it."""
        term = predicate.term
        not_null = f"({self._col(term)} IS NOT NULL)"
        every_value = self._not_nan(term, not_null)
        if isinstance(predicate, BoundEqualTo):
            return "false"
        if isinstance(predicate, BoundNotEqualTo):
            return not_null
        if isinstance(predicate, (BoundLessThan, BoundLessThanOrEqual)):
            return every_value if above else "false"
        if isinstance(predicate, (BoundGreaterThan, BoundGreaterThanOrEqual)):
            return "false" if above else every_value
        raise SpecError(f"Table {self.identifier}: row_filter {predicate} compares with a value outside the column's type.")

    def visit_in(self, term, literals: set[Any]) -> str:
        return f"({self._col(term)} IN ({', '.join(self._value(term, v) for v in literals)}))"

    def visit_not_in(self, term, literals: set[Any]) -> str:
        return f"(NOT {self.visit_in(term, literals)})"

    def visit_is_nan(self, term) -> str:
        return f"isnan({self._col(term)})"

    def visit_not_nan(self, term) -> str:
        return f"(NOT isnan({self._col(term)}))"

    def visit_is_null(self, term) -> str:
        return f"({self._col(term)} IS NULL)"

    def visit_not_null(self, term) -> str:
        return f"({self._col(term)} IS NOT NULL)"

    def visit_equal(self, term, literal: Literal[Any]) -> str:
        return self._compare(term, "=", literal)

    def visit_not_equal(self, term, literal: Literal[Any]) -> str:
        return self._compare(term, "!=", literal)

    def visit_greater_than_or_equal(self, term, literal: Literal[Any]) -> str:
        return self._not_nan(term, self._compare(term, ">=", literal))

    def visit_greater_than(self, term, literal: Literal[Any]) -> str:
        return self._not_nan(term, self._compare(term, ">", literal))

    def visit_less_than(self, term, literal: Literal[Any]) -> str:
        return self._compare(term, "<", literal)

    def visit_less_than_or_equal(self, term, literal: Literal[Any]) -> str:
        return self._compare(term, "<=", literal)

    def visit_starts_with(self, term, literal: Literal[Any]) -> str:
        return f"startswith({self._col(term)}, {self._lit(term, literal)})"

    def visit_not_starts_with(self, term, literal: Literal[Any]) -> str:
        return f"(NOT {self.visit_starts_with(term, literal)})"

    # ---- terms and values
    def _compare(self, term, op: str, literal: Literal[Any]) -> str:
        return f"({self._col(term)} {op} {self._lit(term, literal)})"

    def _not_nan(self, term, comparison: str) -> str:
        """NaN satisfies no ordering comparison (Iceberg's rule, which its file pruning assumes: bounds leave
        NaN out). Spark orders NaN above every number, so a NaN row would match `>` in some files only."""
        if isinstance(term.ref().field.field_type, (FloatType, DoubleType)):
            return f"({comparison} AND NOT isnan({self._col(term)}))"
        return comparison

    def _col(self, term) -> str:
        path = self.paths[term.ref().field.field_id]
        return ".".join("`" + p.replace("`", "``") + "`" for p in path)

    def _lit(self, term, literal: Literal[Any]) -> str:
        return self._value(term, literal.value)

    def _value(self, term, value: Any) -> str:
        """A Spark literal of the column's type from Iceberg's representation of the value (SQL text)."""
        field = term.ref().field
        t: IcebergType = field.field_type
        if isinstance(t, BooleanType):
            return "true" if value else "false"
        if isinstance(t, StringType):
            return f"CAST(X'{str(value).encode('utf-8').hex()}' AS STRING)"  # hex: nothing to escape
        if isinstance(t, IntegerType):
            return f"CAST('{int(value)}' AS INT)"
        if isinstance(t, LongType):
            return f"CAST('{int(value)}' AS BIGINT)"
        if isinstance(t, (FloatType, DoubleType)):
            double = _double_text(float(value))
            # As PySpark's float literal did: the double, then (for a float column) rounded to float.
            return f"CAST({double} AS FLOAT)" if isinstance(t, FloatType) else double
        if isinstance(t, DecimalType):
            return f"CAST('{decimal.Decimal(value)}' AS DECIMAL({t.precision},{t.scale}))"
        if isinstance(t, BinaryType):
            return f"X'{bytes(value).hex()}'"
        if isinstance(t, DateType):
            # Not a date string: the calendar of a parsed date literal is not Iceberg's before 1582.
            return f"date_from_unix_date(CAST('{int(value)}' AS INT))"
        if isinstance(t, TimestamptzType):
            return f"timestamp_micros(CAST('{int(value)}' AS BIGINT))"  # an instant: no time zone involved
        if isinstance(t, TimestampType):
            try:
                wall = _EPOCH + dt.timedelta(microseconds=int(value))  # wall-clock fields, no time zone involved
            except OverflowError:
                raise SpecError(
                    f"Table {self.identifier}: row_filter value {value} (microseconds) of column {field.name!r} is outside "
                    "the years 1-9999 Spark can hold."
                ) from None
            seconds = decimal.Decimal(wall.second) + decimal.Decimal(wall.microsecond) / 1_000_000
            return f"make_timestamp_ntz({wall.year}, {wall.month}, {wall.day}, {wall.hour}, {wall.minute}, CAST('{seconds}' AS DECIMAL(8,6)))"
        raise SpecError(
            f"Table {self.identifier}: row_filter on column {field.name!r} of type {t} cannot be applied in Spark; "
            "give the filter as SQL text instead (row_filter=\"...\")."
        )


def _beyond_precision(term, literal) -> decimal.Decimal | None:
    """A decimal literal with more integer digits than the column's precision allows (pyiceberg's binding
    checks the scale only): the value itself, which lies beyond every value of the column; else None.
    Spark would cast it to null, so `d < 1000.00` on a decimal(5,2) column would match nothing."""
    t = term.ref().field.field_type
    if literal is None or not isinstance(t, DecimalType) or isinstance(literal, (AboveMax, BelowMin)):
        return None
    value = decimal.Decimal(literal.value)
    return value if value != 0 and value.adjusted() + 1 > t.precision - t.scale else None


def _double_text(v: float) -> str:
    """A double as Spark SQL: the exact value (Python's repr round-trips), NaN and infinities by name."""
    if v != v:
        return "CAST('NaN' AS DOUBLE)"
    if v in (float("inf"), float("-inf")):
        return f"CAST('{'-' if v < 0 else ''}Infinity' AS DOUBLE)"
    return f"CAST('{v!r}' AS DOUBLE)"


# Predicates whose Iceberg residual means the same rows as the row filter. Iceberg evaluates partitions in
# two-valued logic (`null != 1` is true there), a row filter has SQL's meaning (a comparison with null
# matches nothing): the two agree on which rows are true exactly for these predicates joined by AND and OR.
_SAME_IN_BOTH_LOGICS = (
    AlwaysTrue, AlwaysFalse, BoundEqualTo, BoundIn, BoundLessThan, BoundLessThanOrEqual, BoundGreaterThan,
    BoundGreaterThanOrEqual, BoundStartsWith, BoundIsNull, BoundNotNull, BoundIsNaN, BoundNotNaN,
)


def residuals_mean_its_rows(bound: BooleanExpression) -> bool:
    """Does an Iceberg residual of "true" for a file mean every row of it matches `bound` as a row filter? Yes
    unless the filter holds a negation (`!=`, NOT IN, NOT STARTS WITH, NOT)."""
    if isinstance(bound, (And, Or)):
        return residuals_mean_its_rows(bound.left) and residuals_mean_its_rows(bound.right)
    return isinstance(bound, _SAME_IN_BOTH_LOGICS)

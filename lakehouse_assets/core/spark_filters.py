"""A pyiceberg row filter (`BooleanExpression`) as a Spark Column.

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
refuse or shift sentinel values such as 0001-01-01).
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from pyiceberg.expressions import (
    BooleanExpression,
    BoundEqualTo,
    BoundGreaterThan,
    BoundGreaterThanOrEqual,
    BoundIn,
    BoundLessThan,
    BoundLessThanOrEqual,
    BoundNotEqualTo,
    BoundNotIn,
    BoundPredicate,
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

from .errors import SpecError

_EPOCH = dt.datetime(1970, 1, 1)


def spark_row_filter(identifier: str, schema: Schema, bound: BooleanExpression):
    """`bound` (`bind_row_filter` of `schema`) as a Spark Column over a DataFrame with `schema`'s columns."""
    return visit(bound, _ToSparkColumn(identifier, _column_paths(schema)))


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


class _ToSparkColumn(BoundBooleanExpressionVisitor[Any]):
    def __init__(self, identifier: str, paths: dict[int, tuple[str, ...]]):
        self.identifier = identifier
        self.paths = paths

    # ---- structure
    def visit_true(self):
        from pyspark.sql import functions as F

        return F.lit(True)

    def visit_false(self):
        from pyspark.sql import functions as F

        return F.lit(False)

    def visit_not(self, child_result):
        return ~child_result

    def visit_and(self, left_result, right_result):
        return left_result & right_result

    def visit_or(self, left_result, right_result):
        return left_result | right_result

    # ---- predicates
    def visit_bound_predicate(self, predicate: BoundPredicate):
        if isinstance(predicate, (BoundIn, BoundNotIn)):
            # Binding turns a member outside the column type's range into a placeholder holding the type's
            # max or min (pyiceberg's value_set cannot tell it from the real max): it matches no value.
            values = {lit.value for lit in predicate.literals if not isinstance(lit, (AboveMax, BelowMin))}
            if isinstance(predicate, BoundIn):
                return self.visit_in(predicate.term, values) if values else self.visit_false()
            return self.visit_not_in(predicate.term, values) if values else self._col(predicate.term).isNotNull()
        if isinstance(getattr(predicate, "literal", None), (AboveMax, BelowMin)):
            return self._out_of_range(predicate, above=isinstance(predicate.literal, AboveMax))
        return visit_bound_predicate(predicate, self)

    def _out_of_range(self, predicate: BoundPredicate, above: bool):
        """A comparison with a value beyond the column type's range (bound so by an In/NotIn of one member):
        every non-null value lies below it (`above`) or above it."""
        from pyspark.sql import functions as F

        col, term = self._col(predicate.term), predicate.term
        every_value = self._not_nan(term, col.isNotNull())
        if isinstance(predicate, BoundEqualTo):
            return F.lit(False)
        if isinstance(predicate, BoundNotEqualTo):
            return col.isNotNull()
        if isinstance(predicate, (BoundLessThan, BoundLessThanOrEqual)):
            return every_value if above else F.lit(False)
        if isinstance(predicate, (BoundGreaterThan, BoundGreaterThanOrEqual)):
            return F.lit(False) if above else every_value
        raise SpecError(f"Table {self.identifier}: row_filter {predicate} compares with a value outside the column's type.")

    def visit_in(self, term, literals: set[Any]):
        return self._col(term).isin(*[self._value(term, v) for v in literals])

    def visit_not_in(self, term, literals: set[Any]):
        return ~self._col(term).isin(*[self._value(term, v) for v in literals])

    def visit_is_nan(self, term):
        from pyspark.sql import functions as F

        return F.isnan(self._col(term))

    def visit_not_nan(self, term):
        from pyspark.sql import functions as F

        return ~F.isnan(self._col(term))

    def visit_is_null(self, term):
        return self._col(term).isNull()

    def visit_not_null(self, term):
        return self._col(term).isNotNull()

    def visit_equal(self, term, literal: Literal[Any]):
        return self._col(term) == self._lit(term, literal)

    def visit_not_equal(self, term, literal: Literal[Any]):
        return self._col(term) != self._lit(term, literal)

    def visit_greater_than_or_equal(self, term, literal: Literal[Any]):
        return self._not_nan(term, self._col(term) >= self._lit(term, literal))

    def visit_greater_than(self, term, literal: Literal[Any]):
        return self._not_nan(term, self._col(term) > self._lit(term, literal))

    def visit_less_than(self, term, literal: Literal[Any]):
        return self._col(term) < self._lit(term, literal)

    def visit_less_than_or_equal(self, term, literal: Literal[Any]):
        return self._col(term) <= self._lit(term, literal)

    def visit_starts_with(self, term, literal: Literal[Any]):
        return self._col(term).startswith(self._lit(term, literal))

    def visit_not_starts_with(self, term, literal: Literal[Any]):
        return ~self._col(term).startswith(self._lit(term, literal))

    # ---- terms and values
    def _not_nan(self, term, comparison):
        """NaN satisfies no ordering comparison (Iceberg's rule, which its file pruning assumes: bounds leave
        NaN out). Spark orders NaN above every number, so a NaN row would match `>` in some files only."""
        from pyspark.sql import functions as F

        if isinstance(term.ref().field.field_type, (FloatType, DoubleType)):
            return comparison & ~F.isnan(self._col(term))
        return comparison

    def _col(self, term):
        from pyspark.sql import functions as F

        path = self.paths[term.ref().field.field_id]
        return F.col(".".join("`" + p.replace("`", "``") + "`" for p in path))

    def _lit(self, term, literal: Literal[Any]):
        return self._value(term, literal.value)

    def _value(self, term, value: Any):
        """A Spark literal of the column's type from Iceberg's representation of the value."""
        from pyspark.sql import functions as F

        field = term.ref().field
        t: IcebergType = field.field_type
        if isinstance(t, (BooleanType, StringType)):
            return F.lit(value)
        if isinstance(t, IntegerType):
            return F.lit(int(value)).cast("int")
        if isinstance(t, LongType):
            return F.lit(int(value)).cast("long")
        if isinstance(t, FloatType):
            return F.lit(float(value)).cast("float")
        if isinstance(t, DoubleType):
            return F.lit(float(value)).cast("double")
        if isinstance(t, DecimalType):
            return F.lit(decimal.Decimal(value)).cast(f"decimal({t.precision},{t.scale})")
        if isinstance(t, BinaryType):
            return F.lit(bytearray(value)).cast("binary")
        if isinstance(t, DateType):
            # Not a Python date: PySpark hands those to java.sql.Date, whose calendar refuses 0001-01-01.
            return F.date_from_unix_date(F.lit(int(value)))
        if isinstance(t, TimestamptzType):
            return F.timestamp_micros(F.lit(int(value)))  # an instant: no time zone involved
        if isinstance(t, TimestampType):
            try:
                wall = _EPOCH + dt.timedelta(microseconds=int(value))  # wall-clock fields, no time zone involved
            except OverflowError:
                raise SpecError(
                    f"Table {self.identifier}: row_filter value {value} (microseconds) of column {field.name!r} is outside "
                    "the years 1-9999 Spark can hold."
                ) from None
            seconds = decimal.Decimal(wall.second) + decimal.Decimal(wall.microsecond) / 1_000_000
            return F.make_timestamp_ntz(
                F.lit(wall.year), F.lit(wall.month), F.lit(wall.day), F.lit(wall.hour), F.lit(wall.minute), F.lit(seconds).cast("decimal(8,6)")
            )
        raise SpecError(
            f"Table {self.identifier}: row_filter on column {field.name!r} of type {t} cannot be applied in Spark; "
            "give the filter as SQL text instead (row_filter=\"...\")."
        )

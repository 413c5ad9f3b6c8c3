"""A pyiceberg row filter (`BooleanExpression`) as a Spark Column.

Iceberg scan planning only prunes *files* with a row filter; the rows of a planned file that do not
match must still be filtered in Spark. A filter given as SQL text is applied as is; one given as a
pyiceberg expression is turned into the equivalent Spark Column here, with Spark SQL's semantics (a
comparison with null matches nothing; `not_nan` keeps nulls, as `NOT isnan(x)` does).

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

from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.literals import Literal
from pyiceberg.expressions.visitors import BoundBooleanExpressionVisitor, bind, visit
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


def spark_row_filter(identifier: str, schema: Schema, expr: BooleanExpression):
    """`expr` bound to `schema` as a Spark Column over a DataFrame with `schema`'s columns."""
    try:
        bound = bind(schema, expr, case_sensitive=True)
    except ValueError as e:
        raise SpecError(f"Table {identifier}: row_filter {expr!r} does not fit the table's columns ({e}).") from None
    return visit(bound, _ToSparkColumn(identifier, _column_paths(schema)))


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
        return self._col(term) >= self._lit(term, literal)

    def visit_greater_than(self, term, literal: Literal[Any]):
        return self._col(term) > self._lit(term, literal)

    def visit_less_than(self, term, literal: Literal[Any]):
        return self._col(term) < self._lit(term, literal)

    def visit_less_than_or_equal(self, term, literal: Literal[Any]):
        return self._col(term) <= self._lit(term, literal)

    def visit_starts_with(self, term, literal: Literal[Any]):
        return self._col(term).startswith(self._lit(term, literal))

    def visit_not_starts_with(self, term, literal: Literal[Any]):
        return ~self._col(term).startswith(self._lit(term, literal))

    # ---- terms and values
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

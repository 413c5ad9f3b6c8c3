"""Slices: the part of a table a partitioned write replaces and a partitioned read returns.

A slice is a time range of one column (`Window`, what a Dagster time partition covers) and/or, per
column, a set of values (what a static partition or the static dimensions of a multi-partition
cover). A row is inside the slice when it is inside every part of it; a null is never inside.

Three uses, one definition:
* `expression(table)`: the pyiceberg filter that prunes files by partition and min/max;
* `spark_condition(schema)`: the same predicate on rows, for rewriting files that straddle the slice
  and for filtering reads;
* `check_inside(...)`: new files must hold only rows inside the slice, proven on the footers' min/max
  when they can prove it (a file of one partition value, a time range), otherwise by reading just
  the unproven files in Spark.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, In, LessThan
from pyiceberg.expressions.visitors import ROWS_MUST_MATCH, _StrictMetricsEvaluator
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import BooleanType, DateType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

from .errors import InputError, SpecError

# Column types a set of partition values can name (Dagster partition keys are strings).
VALUE_TYPES = (StringType, IntegerType, LongType, DateType, BooleanType)


@dataclass(frozen=True)
class Window:
    """A half-open range [start, end) of one column: what a Dagster time partition replaces."""

    column: str
    start: dt.datetime | dt.date
    end: dt.datetime | dt.date


@dataclass(frozen=True)
class Slice:
    """Rows whose `window.column` lies in the window (if any) and whose `values` columns hold one of the given values."""

    window: Window | None = None
    values: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @staticmethod
    def of(part: "Slice | Window") -> "Slice":
        return part if isinstance(part, Slice) else Slice(window=part)

    @property
    def columns(self) -> list[str]:
        return ([self.window.column] if self.window else []) + list(self.values)

    def describe(self) -> str:
        parts = [f"{self.window.column} in [{self.window.start}, {self.window.end})"] if self.window else []
        parts += [f"{c} in ({', '.join(map(str, v))})" for c, v in self.values.items()]
        return " and ".join(parts) or "the whole table"

    def validate(self, identifier: str, table: Table) -> None:
        """Every slice column exists with a type its part can name; raises SpecError naming the fix."""
        schema = table.schema()
        for column in self.columns:
            if not _has(schema, column):
                raise SpecError(
                    f"Table {identifier}: the partition column {column!r} is not a column of the table "
                    f"({', '.join(f.name for f in schema.fields)}). Fix partition_expr."
                )
        if self.window is not None:
            _literal(identifier, table, self.window.column, self.window.start)
        for column, values in self.values.items():
            t = schema.find_field(column).field_type
            if not isinstance(t, VALUE_TYPES):
                raise SpecError(
                    f"Table {identifier}: static partitions map to column {column!r} of type {t}; partition values "
                    "need a string, int, long, date or boolean column. Map the dimension to such a column in partition_expr."
                )
            if not values:
                raise SpecError(f"Table {identifier}: the slice of column {column!r} names no values.")

    def expression(self, identifier: str, table: Table) -> BooleanExpression:
        expr: BooleanExpression = AlwaysTrue()
        if self.window is not None:
            w = self.window
            expr = And(
                GreaterThanOrEqual(w.column, _literal(identifier, table, w.column, w.start)),
                LessThan(w.column, _literal(identifier, table, w.column, w.end)),
            )
        for column, values in self.values.items():
            # String literals: pyiceberg converts them to the column's type when it binds the filter.
            expr = And(expr, In(column, {str(v) for v in values}))
        return expr

    def spark_condition(self, spark_schema):
        """A Column that is true for rows inside the slice (null when a slice column is null: never inside)."""
        from pyspark.sql import functions as F

        cond = F.lit(True)
        if self.window is not None:
            c = F.col(self.window.column)
            cond = cond & (c >= F.lit(self.window.start)) & (c < F.lit(self.window.end))
        for column, values in self.values.items():
            data_type = spark_schema[column].dataType
            cond = cond & F.col(column).isin(*[F.lit(str(v)).cast(data_type) for v in values])
        return cond

    def outside_condition(self, spark_schema):
        from pyspark.sql import functions as F

        return ~F.coalesce(self.spark_condition(spark_schema), F.lit(False))

    def check_inside(self, identifier: str, table: Table, adds: list[DataFile], read_files) -> None:
        """Every new row must lie inside the slice. Footer min/max prove most files; `read_files(paths)`
        (a Spark DataFrame of those files) settles the rest. Raises InputError; the caller removes the files."""
        strict = _StrictMetricsEvaluator(table.schema(), self.expression(identifier, table)).eval
        unproven = [f for f in adds if strict(f) != ROWS_MUST_MATCH]
        if not unproven:
            return
        df = read_files([f.file_path for f in unproven])
        outside = df.filter(self.outside_condition(df.schema)).select(*self.columns).limit(5).collect()
        if outside:
            examples = "; ".join(", ".join(f"{c}={r[c]}" for c in self.columns) for r in outside)
            what = (
                f"window [{self.window.start}, {self.window.end}) of column {self.window.column!r}"
                if not self.values
                else f"partition slice {self.describe()}"
            )
            raise InputError(
                f"Table {identifier}: the data for {what} has rows outside it "
                f"(or null in {', '.join(self.columns)}), e.g. {examples}. Filter the DataFrame to the partition's "
                "slice; nothing was committed."
            )


def _has(schema, column: str) -> bool:
    try:
        schema.find_field(column, case_sensitive=True)
        return True
    except ValueError:
        return False


def _literal(identifier: str, table: Table, column: str, value):
    t = table.schema().find_field(column).field_type
    if isinstance(t, DateType):
        return (value.date() if isinstance(value, dt.datetime) else value).isoformat()
    if isinstance(t, TimestamptzType):
        v = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).isoformat()
    if isinstance(t, TimestampType):
        v = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return v.replace(tzinfo=None).isoformat()
    raise SpecError(f"Table {identifier}: partition window column {column!r} is {t}; windows need a date or timestamp column.")

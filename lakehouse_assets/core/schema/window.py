"""Windows and slices: the part of a table a partitioned write replaces and a partitioned read returns.

A `Window` is a half-open range [start, end) of one date/timestamp column (what a Dagster time
partition covers). A `Slice` is a window and/or, per column, a set of values (what a static partition
or the static dimensions of a multi-partition cover). A row is inside a slice when it is inside every
part of it; a null is never inside.

One definition, three uses:
* `expression(table)`: the pyiceberg row filter that prunes files by partition and min/max;
* `spark_filter(schema)`: the same predicate on rows, for reads and for rewriting straddling files;
* `check_inside(...)`: new files hold only rows inside the slice, proven on the footers' min/max when
  they can prove it (a time range, a file of one partition value), otherwise by reading just the
  unproven files.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, GreaterThanOrEqual, In, LessThan
from pyiceberg.expressions.visitors import ROWS_MUST_MATCH, _StrictMetricsEvaluator
from pyiceberg.types import BooleanType, DateType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

from ..errors import InputError, SpecError

if TYPE_CHECKING:  # (pyiceberg's table and manifest modules: imported where a table is loaded, not where a code location loads)
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

# Column types a set of partition values can name (Dagster partition keys are strings).
VALUE_TYPES = (StringType, IntegerType, LongType, DateType, BooleanType)


@dataclass(frozen=True)
class Window:
    column: str
    start: dt.datetime | dt.date
    end: dt.datetime | dt.date

    def expression(self, table: Table) -> BooleanExpression:
        """The window as an Iceberg row filter (prunes by partition and min/max)."""
        return And(
            GreaterThanOrEqual(self.column, _literal(table, self.column, self.start)),
            LessThan(self.column, _literal(table, self.column, self.end)),
        )

    def spark_filter(self, schema=None):
        """The window as a Spark column predicate."""
        from pyspark.sql import functions as F

        c = F.col(self.column)
        return (c >= F.lit(self.start)) & (c < F.lit(self.end))


@dataclass(frozen=True)
class Slice:
    """Rows whose `window.column` lies in the window (if any) and whose `values` columns hold one of the values."""

    window: Window | None = None
    values: Mapping[str, Sequence] = field(default_factory=dict)

    @staticmethod
    def of(part: Slice | Window) -> Slice:
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
        names = {f.name for f in schema.fields}
        for column in self.columns:
            if column not in names:
                raise SpecError(
                    f"Table {identifier}: the partition column {column!r} is not a column of the table "
                    f"({', '.join(f.name for f in schema.fields)}). Fix partition_expr."
                )
        if self.window is not None:
            _literal(table, self.window.column, self.window.start)
        for column, values in self.values.items():
            t = schema.find_field(column).field_type
            if not isinstance(t, VALUE_TYPES):
                raise SpecError(
                    f"Table {identifier}: static partitions map to column {column!r} of type {t}; partition values "
                    "need a string, int, long, date or boolean column. Map the dimension to such a column in partition_expr."
                )
            if not values:
                raise SpecError(f"Table {identifier}: the slice of column {column!r} names no values; give at least one partition key per dimension.")

    def expression(self, table: Table) -> BooleanExpression:
        expr: BooleanExpression = self.window.expression(table) if self.window is not None else AlwaysTrue()
        for column, values in self.values.items():
            # String literals: pyiceberg converts them to the column's type when it binds the filter.
            expr = And(expr, In(column, {str(v) for v in values}))
        return expr

    def spark_filter(self, schema):
        """True for rows inside the slice; null when a slice column is null (never inside). `schema`: the rows' StructType."""
        from pyspark.sql import functions as F

        cond = self.window.spark_filter() if self.window is not None else F.lit(True)
        for column, values in self.values.items():
            data_type = schema[column].dataType
            cond = cond & F.col(column).isin(*[F.lit(str(v)).cast(data_type) for v in values])
        return cond

    def outside_filter(self, schema):
        from pyspark.sql import functions as F

        return ~F.coalesce(self.spark_filter(schema), F.lit(False))


def files_inside(table: Table, part: Slice | Window, files: list[DataFile]) -> tuple[list[DataFile], list[DataFile]]:
    """(files whose every row lies inside, the others), decided on partition values and footer min/max alone."""
    strict = _StrictMetricsEvaluator(table.schema(), part.expression(table)).eval
    inside = [f for f in files if strict(f) == ROWS_MUST_MATCH]
    return inside, [f for f in files if strict(f) != ROWS_MUST_MATCH]


def check_inside(identifier: str, table: Table, adds: list[DataFile], part: Slice | Window, read_files: Callable[[list[DataFile]], object]) -> None:
    """Every new row must lie inside. Footer min/max prove most files; `read_files(files)` (a Spark
    DataFrame of them) settles the rest. Raises InputError; the caller removes the written files."""
    part = Slice.of(part)
    _, unproven = files_inside(table, part, adds)
    if not unproven:
        return
    df = read_files(unproven)
    outside = df.filter(part.outside_filter(df.schema)).select(*part.columns).limit(5).collect()
    if outside:
        examples = "; ".join(", ".join(f"{c}={r[c]}" for c in part.columns) for r in outside)
        what = (
            f"window [{part.window.start}, {part.window.end}) of column {part.window.column!r}"
            if not part.values
            else f"partition slice {part.describe()}"
        )
        raise InputError(
            f"Table {identifier}: the data for {what} has rows outside it (or null in {', '.join(part.columns)}), "
            f"e.g. {examples}. Filter the DataFrame to the partition's slice; nothing was committed."
        )


def _literal(table: Table, column: str, value):
    t = table.schema().find_field(column).field_type
    if isinstance(t, DateType):
        return (value.date() if isinstance(value, dt.datetime) else value).isoformat()
    if isinstance(t, TimestamptzType):
        v = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).isoformat()
    if isinstance(t, TimestampType):
        v = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return v.replace(tzinfo=None).isoformat()
    raise SpecError(f"Table {table.name()}: partition window column {column!r} is {t}; windows need a date or timestamp column.")

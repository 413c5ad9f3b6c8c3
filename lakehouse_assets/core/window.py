"""A half-open range [start, end) of one date/timestamp column: what a Dagster time partition replaces and reads."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyiceberg.expressions import And, BooleanExpression, GreaterThanOrEqual, LessThan
from pyiceberg.expressions.visitors import ROWS_MUST_MATCH, _StrictMetricsEvaluator
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from .errors import InputError, SpecError


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

    def spark_filter(self):
        """The window as a Spark column predicate."""
        from pyspark.sql import functions as F

        c = F.col(self.column)
        return (c >= F.lit(self.start)) & (c < F.lit(self.end))


def files_inside(table: Table, window: Window, files: list[DataFile]) -> tuple[list[DataFile], list[DataFile]]:
    """(files whose every row lies inside the window, the others), decided on footer min/max alone."""
    strict = _StrictMetricsEvaluator(table.schema(), window.expression(table)).eval
    inside = [f for f in files if strict(f) == ROWS_MUST_MATCH]
    return inside, [f for f in files if strict(f) != ROWS_MUST_MATCH]


def check_inside(identifier: str, table: Table, adds: list[DataFile], window: Window) -> None:
    """Every new row must lie inside the window (checked on footer min/max, no extra Spark job)."""
    _, outside = files_inside(table, window, adds)
    if outside:
        raise InputError(
            f"Table {identifier}: the data for window [{window.start}, {window.end}) of column {window.column!r} has rows "
            f"outside it (or null in {window.column!r}) in {len(outside)} file(s). Filter the DataFrame to the partition's "
            "window; nothing was committed."
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

"""An update's SET clause, checked before any file is read: {column: Spark SQL expression} over the table's columns,
each expression valid SQL over the row, of a type the column takes without loss, and not NULL for a required column."""

from __future__ import annotations

from typing import Mapping

from ..errors import InputError, SchemaError
from .condition import check_sql
from .target import WriteTarget


def checked_assignments(identifier: str, assignments: Mapping[str, str], target: WriteTarget, spark) -> dict:
    """{column: (expression, the column's Spark type)}, each expression checked: a known top-level column, valid SQL
    over the row, a type the column takes without loss, not NULL for a required column."""
    if not assignments or not isinstance(assignments, Mapping):
        raise InputError(f"Table {identifier}: an update needs set={{column: SQL expression}}, e.g. set={{\"status\": \"'closed'\"}}; got {assignments!r}. Nothing was changed.")
    schema = target.spark_schema()
    out = {}
    for column, expression in assignments.items():
        if column not in schema.fieldNames():
            raise InputError(f"Table {identifier}: update sets column {column!r}, which the table does not have (its columns: {', '.join(schema.fieldNames())}). Nothing was changed.")
        if not isinstance(expression, str) or not expression.strip():
            raise InputError(f"Table {identifier}: update sets column {column!r} to {expression!r}; give a Spark SQL expression as text (a string literal is quoted: \"'closed'\"). Nothing was changed.")
        wanted = schema[column].dataType
        given = check_sql(identifier, spark, schema, expression, f"value for column {column!r}", boolean=False)
        if not assignable(given, wanted):
            raise SchemaError(
                f"Table {identifier}: update sets column {column!r} ({wanted.simpleString()}) to {expression!r}, which is "
                f"{given.simpleString()}. Cast it in the expression, e.g. CAST({expression} AS {wanted.simpleString().upper()}). Nothing was changed."
            )
        if given.simpleString() == "void" and not target.schema.find_field(column).optional:
            raise SchemaError(f"Table {identifier}: update sets column {column!r} to NULL, and the column is required. Nothing was changed.")
        out[column] = (expression, wanted)
    return out


_INTEGRAL = ("tinyint", "smallint", "int", "bigint")


def assignable(given, wanted) -> bool:
    """Whether a value of Spark type `given` goes into a column of type `wanted` without loss: the same type, NULL, or a
    widening (a narrower integer; an integer into a decimal with room or a double; a float into a double)."""
    g, w = given.simpleString(), wanted.simpleString()
    if g == w or g == "void":
        return True
    if g in _INTEGRAL and w in _INTEGRAL:
        return _INTEGRAL.index(g) <= _INTEGRAL.index(w)
    if g in _INTEGRAL and w == "double":
        return True
    if g in _INTEGRAL and w.startswith("decimal"):
        return wanted.precision - wanted.scale >= (3, 5, 10, 20)[_INTEGRAL.index(g)]
    if g == "float" and w == "double":
        return True
    if g.startswith("decimal") and w.startswith("decimal"):
        return wanted.scale >= given.scale and wanted.precision - wanted.scale >= given.precision - given.scale
    return False

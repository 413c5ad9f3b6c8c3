"""Reading a table into Arrow without Spark: pyiceberg plans the files and reads them with pyarrow.

For small tables and for assets that work in pandas or Polars, starting a Spark job costs more than
the read. pyiceberg prunes files by partition and column statistics, applies the row filter to the rows
it reads, reads only the projected columns, and applies Iceberg's position deletes. The same row filter
text means the same rows here as in `Lakehouse.read` (both parse it with pyiceberg's parser).
"""

from __future__ import annotations

import datetime as dt
from typing import Sequence

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.table import Table

from ..errors import RetentionError, SpecError
from ..schema.window import Slice, Window
from . import scan_planning


def read_arrow(
    identifier: str,
    table: Table,
    *,
    columns: Sequence[str] | None = None,
    row_filter: str | BooleanExpression | None = None,
    snapshot_id: int | None = None,
    as_of: dt.datetime | None = None,
    window: Window | Slice | None = None,
) -> pa.Table:
    """`table` (loaded as `identifier`) now, or as of a snapshot or a time, as a pyarrow Table."""
    if snapshot_id is not None and as_of is not None:
        raise SpecError(f"Table {identifier}: give at most one of snapshot_id, as_of.")
    if as_of is not None:
        snap = table.snapshot_as_of_timestamp(int(as_of.timestamp() * 1000))
        if snap is None:
            raise RetentionError(f"Table {identifier} has no snapshot at or before {as_of.isoformat()}.")
        snapshot_id = snap.snapshot_id
    elif snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None:
        raise RetentionError(f"Table {identifier} has no snapshot {snapshot_id} (it may have been expired).")
    schema = table.schemas().get(table.snapshot_by_id(snapshot_id).schema_id, table.schema()) if snapshot_id is not None else table.schema()
    if columns is not None:
        missing = [c for c in columns if c not in schema.column_names]
        if missing:
            raise SpecError(f"Table {identifier} has no column(s) {missing}; its columns: {', '.join(f.name for f in schema.fields)}.")
    expr: BooleanExpression = AlwaysTrue()
    if row_filter is not None:
        expr = parse(row_filter) if isinstance(row_filter, str) else row_filter
    if window is not None:
        window = Slice.of(window)
        window.validate(identifier, table)
        expr = And(expr, window.expression(table))
    if table.current_snapshot() is None:
        empty = schema.as_arrow()
        return empty.empty_table().select(list(columns)) if columns is not None else empty.empty_table()
    scan = table.scan(row_filter=expr, selected_fields=tuple(columns) if columns is not None else ("*",), snapshot_id=snapshot_id)
    return scan_planning.to_arrow(scan)

"""Iceberg scan planning that survives pyiceberg's failures on edge values of a filter.

pyiceberg 0.12 fails to plan some filters: its residual evaluation (what of the filter a file's partition
leaves undecided) compares a null partition value with the literal (`None > 1`: a TypeError) whenever the
filter keeps a file with a null partition, e.g. `k > 1 OR k IS NULL` on a table partitioned by `k`
(test_row_filters.py); and projecting a comparison with a year-1 timestamp through a year or month
partition steps into year 0 (an OverflowError, test_reader_pins.py). Such a plan is made again without
the filter: every file is planned, and the reader filters the rows (Spark) or pyiceberg's Arrow scan does,
so the rows are the same and only the pruning is lost, for that filter only.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import DataScan, FileScanTask, Table

log = logging.getLogger("lakehouse")


def plan_files(table: Table, snapshot_id: int | None, expr: BooleanExpression) -> tuple[list[FileScanTask], bool]:
    """(the files a scan of `snapshot_id` with `expr` plans, whether their residuals were computed)."""
    try:
        return list(table.scan(snapshot_id=snapshot_id, row_filter=expr).plan_files()), True
    except (TypeError, OverflowError) as e:
        _unplanned(table, expr, e)
        return list(table.scan(snapshot_id=snapshot_id).plan_files()), False


def to_arrow(scan: DataScan) -> pa.Table:
    """`scan.to_arrow()`; the rows of every file, filtered by pyiceberg's Arrow scan, when planning with the filter fails."""
    try:
        return scan.to_arrow()
    except (TypeError, OverflowError) as e:
        from pyiceberg.io.pyarrow import ArrowScan

        _unplanned(scan, scan.row_filter, e)
        tasks = scan.update(row_filter=AlwaysTrue()).plan_files()
        return ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter, scan.case_sensitive, scan.limit).to_table(tasks)


def _unplanned(where, expr: BooleanExpression, e: Exception) -> None:
    log.debug("Planning %s with %s failed in pyiceberg (%s): planning every file, the rows are filtered after", where, expr, e)

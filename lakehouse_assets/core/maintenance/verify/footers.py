"""`verify --deep`: both logs' per-file counts and bounds against what each file's Parquet footer says it holds.

The metadata-only check compares the two logs with each other, which cannot judge what one of them leaves out (a
Delta add without stats, as older writers log them) nor a truncated bound (Iceberg's `truncate(16)`, Spark's string
prefixes) beyond compatibility. The footer settles both: each file's row count, and per top-level column its null
count and its min and max over the row groups' statistics. Every count either log records must equal the file's;
every bound must still bound the file's values (a truncated one may be looser). What a log leaves out is not judged;
a column whose footer lacks statistics in any row group neither (Parquet writers keep exact chunk statistics, so
the footer's are the file's own values).
"""

from __future__ import annotations

import math
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.table import Table
from pyiceberg.types import DecimalType

from ...formats.delta import values as delta_values
from ...formats.delta.adoption import NAME_MAPPING
from ...schema.spec import delta_partition_columns
from ...schema.statistics import delta_indexed_columns

MAX_LISTED = 3


def footer_differences(table: Table, delta, pairs: dict[str, tuple[Any, dict[str, Any]]]) -> list[str]:
    """`pairs`: relative path -> (Iceberg DataFile, flattened Delta add) of the files both logs hold."""
    import pyarrow.parquet as pq

    schema = table.schema()
    partition_columns = delta_partition_columns(table.spec(), schema)
    indexed = delta_indexed_columns(schema, delta.metadata().configuration or {}, partition_columns)
    by_name = _ids_by_name(table)
    found: dict[str, list[str]] = {}
    for path, (data_file, add) in sorted(pairs.items()):
        with table.io.new_input(data_file.file_path).open() as f:
            metadata = pq.read_metadata(f)
        rows, columns = metadata.num_rows, _footer_columns(metadata, schema, by_name)
        if data_file.record_count != rows:
            found.setdefault("row count", []).append(f"{path}: Iceberg records {data_file.record_count} rows, the file holds {rows}")
        if add.get("num_records") is not None and add["num_records"] != rows:
            found.setdefault("row count", []).append(f"{path}: Delta records {add['num_records']} rows, the file holds {rows}")
        for field_id, (nulls, low, high) in columns.items():
            field = schema.find_field(field_id)
            in_delta = field.name in indexed and field.name not in partition_columns
            for kind, detail in _column_differences(field, data_file, add if in_delta else {}, nulls, low, high):
                found.setdefault(kind, []).append(f"{path}: {detail}")
    return [f"{len(v)} {kind} difference(s) against the file's footer, e.g. {v[:MAX_LISTED]}" for kind, v in found.items()]


def _column_differences(field, data_file, add: dict[str, Any], nulls: int | None, low: bytes | None, high: bytes | None):
    """(kind, detail) for each count or bound of one column that the file's footer contradicts."""
    t, name, fid = field.field_type, field.name, field.field_id
    iceberg_nulls = (data_file.null_value_counts or {}).get(fid)
    if nulls is not None and iceberg_nulls is not None and iceberg_nulls != nulls:
        yield "null count", f"Iceberg records {iceberg_nulls} nulls in {name!r}, the file holds {nulls}"
    if nulls is not None and add.get(f"null_count.{name}") is not None and add[f"null_count.{name}"] != nulls:
        yield "null count", f"Delta records {add[f'null_count.{name}']} nulls in {name!r}, the file holds {nulls}"
    for actual, is_upper in ((low, False), (high, True)):
        if actual is None or _nan(t, actual):
            continue
        word, held = ("upper", "max") if is_upper else ("lower", "min")
        bound = (data_file.upper_bounds if is_upper else data_file.lower_bounds) or {}
        if fid in bound and not _nan(t, bound[fid]):
            a, b = from_bytes(t, bound[fid]), from_bytes(t, actual)
            if (a < b) if is_upper else (a > b):
                yield "bound", f"Iceberg's {word} bound of {name!r} is {a!r}, the file holds {b!r}"
        got = add.get(f"{held}.{name}")
        if got is not None and not delta_values.stats_bound_holds(t, got, actual, is_upper):
            yield "bound", f"Delta's {held} of {name!r} is {got!r}, the file holds {from_bytes(t, actual)!r}"


def _nan(t, raw: bytes) -> bool:
    v = from_bytes(t, raw)
    return isinstance(v, float) and math.isnan(v)


def _ids_by_name(table: Table) -> dict[str, int]:
    """Top-level column names -> field ids, for files without field ids: the table's name mapping, else its schema."""
    from pyiceberg.table.name_mapping import parse_mapping_from_json

    if NAME_MAPPING in table.properties:
        return {n: mf.field_id for mf in parse_mapping_from_json(table.properties[NAME_MAPPING]) for n in mf.names if mf.field_id is not None}
    return {f.name: f.field_id for f in table.schema().fields}


def _footer_columns(metadata, schema, by_name: dict[str, int]) -> dict[int, tuple[int | None, bytes | None, bytes | None]]:
    """field id -> (null count, min, max serialized as Iceberg bounds) of the file's top-level primitive columns; None
    where a row group keeps no such statistic."""
    arrow = metadata.schema.to_arrow_schema()
    out = {}
    for pos in range(metadata.num_columns):
        path = metadata.schema.column(pos).path
        if "." in path or path not in arrow.names:
            continue  # nested (lists, maps, structs): not compared
        meta = arrow.field(path).metadata or {}
        fid = int(meta[b"PARQUET:field_id"]) if b"PARQUET:field_id" in meta else by_name.get(path)
        try:
            t = schema.find_type(fid) if fid is not None else None
        except ValueError:
            t = None  # a column the table dropped
        if t is not None and t.is_primitive:
            out[fid] = _aggregate(metadata, pos, t)
    return out


def _aggregate(metadata, pos: int, t) -> tuple[int | None, bytes | None, bytes | None]:
    """One column's null count, min and max over the row groups (pyiceberg's own aggregation of footer statistics)."""
    from pyiceberg.io.pyarrow import StatsAggregator
    from pyiceberg.utils.decimal import unscaled_to_decimal

    nulls: int | None = 0
    agg, bounded = None, True
    for r in range(metadata.num_row_groups):
        chunk = metadata.row_group(r).column(pos)
        stats = chunk.statistics if chunk.is_stats_set else None
        nulls = nulls + stats.null_count if nulls is not None and stats is not None and stats.has_null_count else None
        if stats is None or not stats.has_min_max:
            all_null = stats is not None and stats.has_null_count and stats.null_count == chunk.num_values
            bounded = bounded and all_null
            continue
        try:
            agg = agg or StatsAggregator(t, stats.physical_type)
            if isinstance(t, DecimalType) and stats.physical_type != "FIXED_LEN_BYTE_ARRAY":
                agg.update_min(unscaled_to_decimal(stats.min_raw, t.scale))
                agg.update_max(unscaled_to_decimal(stats.max_raw, t.scale))
            else:
                agg.update_min(stats.min)
                agg.update_max(stats.max)
        except (ValueError, TypeError, AttributeError, NotImplementedError):
            bounded = False  # a physical type pyiceberg does not convert (INT96): no bounds to judge by
    if agg is None or not bounded:
        return nulls, None, None
    try:
        return nulls, agg.min_as_bytes(), agg.max_as_bytes()
    except (ValueError, TypeError, AttributeError):  # e.g. a string column stored as unannotated binary
        return nulls, None, None

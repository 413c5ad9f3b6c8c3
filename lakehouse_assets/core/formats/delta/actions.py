"""Delta add and remove actions for Iceberg data files: paths, partition values and statistics.

The Delta mirror references the very Parquet files Iceberg committed, so every per-file field of a Delta action
is derived from the file's Iceberg `DataFile` (its partition tuple and column statistics), never by re-reading
the file. Under column mapping the keys are the columns' physical names, as the Delta protocol asks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from deltalake.transaction import AddAction, RemoveAction
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from ...io.storage import relative_to
from ...schema.spec import delta_partition_columns
from ...schema.statistics import StatisticsPolicy
from .values import partition_value, stat_value


def delta_partition_values(spec: PartitionSpec, schema: Schema, data_file: DataFile, names: dict[int, str] | None = None) -> dict[str, str | None]:
    """Keyed by physical name under column mapping (`names`), as the Delta protocol asks."""
    columns = set(delta_partition_columns(spec, schema))
    out = {}
    for pos, pf in enumerate(spec.fields):
        if not isinstance(pf.transform, IdentityTransform):
            continue
        name = schema.find_column_name(pf.source_id)
        if name in columns:
            out[(names or {}).get(pf.source_id, name)] = partition_value(name, schema.find_type(pf.source_id), data_file.partition[pos])
    return out


def delta_stats(schema: Schema, data_file: DataFile, policy: StatisticsPolicy, names: dict[int, str] | None = None) -> str:
    """The add action's stats: the policy's Delta columns, derived from the file's Iceberg statistics (keyed by
    physical name under column mapping)."""
    mins, maxs, nulls = {}, {}, {}
    lower, upper, null_counts = data_file.lower_bounds or {}, data_file.upper_bounds or {}, data_file.null_value_counts or {}
    for name in policy.delta_columns():
        f = schema.find_field(name)
        key = (names or {}).get(f.field_id, f.name)
        if f.field_id in null_counts:
            nulls[key] = null_counts[f.field_id]
        if policy.has_bounds(f.field_id) and f.field_id in lower and f.field_id in upper:
            lo, hi = stat_value(f.field_type, lower[f.field_id], False), stat_value(f.field_type, upper[f.field_id], True)
            if lo is not None and hi is not None:
                mins[key], maxs[key] = lo, hi
    # Raw UTF-8, not \u escapes: delta-rs 1.6.6 decodes a surrogate pair (U+10000 and up) 0x10000 too low, so
    # an escaped max of a string column would be below the values it bounds and readers would skip the file.
    return json.dumps({"numRecords": data_file.record_count, "minValues": mins, "maxValues": maxs, "nullCount": nulls}, ensure_ascii=False)


def add_action(root_uri: str, table: Table, schema: Schema, f: DataFile, data_change: bool, now: int, policy: StatisticsPolicy, names: dict[int, str] | None = None) -> AddAction:
    """The add action of one Iceberg data file under the Delta root `root_uri`."""
    return AddAction(
        path=relative_to(root_uri, f.file_path),
        size=f.file_size_in_bytes,
        partition_values=delta_partition_values(table.specs()[f.spec_id], schema, f, names),
        modification_time=now,
        data_change=data_change,
        stats=delta_stats(schema, f, policy, names),
    )


def remove_action(root_uri: str, table: Table, schema: Schema, f: DataFile, data_change: bool, now: int, names: dict[int, str] | None = None) -> RemoveAction:
    """The remove action of one Iceberg data file under the Delta root `root_uri`."""
    return RemoveAction(
        path=relative_to(root_uri, f.file_path),
        data_change=data_change,
        deletion_timestamp=now,
        size=f.file_size_in_bytes,
        partition_values=delta_partition_values(table.specs()[f.spec_id], schema, f, names),
    )


@dataclass
class RemovedFile:
    """A file known only from the Delta log (its Iceberg snapshot was expired): path, size, typed partition values."""

    path: str
    size: int | None
    partition_values: dict

    def remove_action(self, schema: Schema, now: int, names: dict[int, str] | None = None) -> RemoveAction:
        return RemoveAction(path=self.path, data_change=True, deletion_timestamp=now, size=self.size, partition_values=_stringify(schema, self.partition_values, names))


def _stringify(schema: Schema, values: dict, names: dict[int, str] | None = None) -> dict[str, str | None]:
    """Typed partition values read back from the Delta log (keyed as the log keys them), spelled again for a remove action."""
    logical = {p: schema.find_column_name(i) for i, p in (names or {}).items()}
    return {k: partition_value(k, schema.find_type(logical.get(k, k)), v) if v is not None else None for k, v in values.items()}

"""Values of identity partition columns that a data file does not hold, for the project's own file reader.

Delta writers leave a partitioned table's partition columns out of the Parquet files: their values live in
the log's `partitionValues`. Once such files are adopted into Iceberg (core/formats/delta/foreign_versions.py) the Iceberg
spec's column projection rule applies to them: a column whose field id a file lacks reads as the file's
identity partition value. pyiceberg, DuckDB's iceberg_scan and Java Iceberg follow that rule, and Delta
readers take the values from the log. The project's pyarrow file reader (core/read/reader.py) fills them from
the values computed here on the driver from metadata alone: {file URI: {table column: value}}.

Adoption sets the table property `FILES_WITHOUT_PARTITION_COLUMNS` when it brings such files in, so reads,
merges and compactions of every other table skip this entirely (and keep Spark's own Parquet reader).
"""

from __future__ import annotations

from typing import Any, Iterable

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

FILES_WITHOUT_PARTITION_COLUMNS = "lakehouse.files-without-partition-columns"

Constants = dict[str, dict[str, Any]]  # file URI -> {table column: value of the rows}


def marked(table: Table) -> bool:
    """The table holds (or held) files that lack an identity partition column."""
    return table.properties.get(FILES_WITHOUT_PARTITION_COLUMNS) == "true"


def lacking_columns(spec: PartitionSpec, schema: Schema, present_field_ids: Iterable[int]) -> list[str]:
    """Identity partition source columns of `spec` a file without `present_field_ids` lacks."""
    present = set(present_field_ids)
    return [schema.find_column_name(f.source_id) for f in spec.fields if isinstance(f.transform, IdentityTransform) and f.source_id not in present]


def missing_values(table: Table, schema: Schema, files: Iterable[DataFile]) -> Constants:
    """For each file that lacks identity partition columns (no statistics for their field ids: the file's
    statistics are built from its footer, which names every column it holds), those columns' values."""
    out: Constants = {}
    specs = table.specs()
    for f in files:
        spec = specs[f.spec_id]
        present = set(f.column_sizes or {}) | set(f.value_counts or {})
        if not present:  # no statistics at all (another engine's writer): nothing is known to be missing
            continue
        values = {}
        for pos, field in enumerate(spec.fields):
            if isinstance(field.transform, IdentityTransform) and field.source_id not in present:
                name = schema.find_column_name(field.source_id)
                if name is not None:
                    values[name] = f.partition[pos]
        if values:
            out[f.file_path] = values
    return out


def of_files(table: Table, files: Iterable[DataFile], schema: Schema | None = None) -> Constants:
    """`missing_values` on a marked table, nothing (at no cost) on any other."""
    if not marked(table):
        return {}
    return missing_values(table, schema or table.schema(), files)


def of_delta(table: Table, delta, root_uri: str) -> Constants:
    """Every file of a Delta version of a marked, partitioned table with its partition values (the reader
    fills a column from them only where the file lacks it)."""
    if not marked(table) or not table.spec().fields:
        return {}
    import pyarrow as pa

    from ...io.storage import delta_path, join_uri

    actions = pa.table(delta.get_add_actions(flatten=False))
    if "partition" not in actions.column_names:
        return {}
    from . import column_mapping

    logical = column_mapping.logical_names(delta) if column_mapping.is_mapped(delta) else {}  # partition values are keyed by physical name
    return {
        join_uri(root_uri, delta_path(row["path"])): {logical.get(k, k): v for k, v in (row["partition"] or {}).items()}
        for row in actions.select(["path", "partition"]).to_pylist()
    }


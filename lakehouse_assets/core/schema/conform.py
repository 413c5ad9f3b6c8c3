"""Arrow batches in a table's file schema (`type_mapping.arrow_file_schema`).

Pure pyarrow: write and read tasks import it on every executor, where pyiceberg's modules would cost each fresh
Python worker a tenth of a second before its first batch.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa


def conform_batch(batch: pa.RecordBatch, target: pa.Schema, source_names: Sequence[str] | None = None) -> pa.RecordBatch:
    """Select the table's columns by name (order-insensitive), cast, and fill columns the batch lacks with nulls.
    `source_names`: the batch's name for each target column, when the files name them otherwise (physical names)."""
    names = batch.schema.names
    columns = []
    for i, f in enumerate(target):
        name = source_names[i] if source_names else f.name
        if name in names:
            col = batch.column(names.index(name))
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except pa.ArrowInvalid as e:  # e.g. a value out of a Delta short column's range: name the column
                    raise pa.ArrowInvalid(f"column {f.name!r} cannot be written as {f.type}, its type in the table's files: {e}") from e
        else:
            col = pa.nulls(batch.num_rows, f.type)
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, schema=target)

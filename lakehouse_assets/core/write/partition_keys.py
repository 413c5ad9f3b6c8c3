"""Partition keys: one JSON key per Iceberg partition (its values and its folder), computed on the executors.

Partitioned writes compute Iceberg-exact partition values as Spark expressions (core/schema/partition_columns.py);
the writer turns each run of equal values into the partition's key once (`PartitionKeyer.key_for`).
Transforms Spark cannot compute exactly (bucket of strings, decimals...) fall back to one extra Python pass
with pyiceberg's vectorized transforms that adds a key column per row (`PartitionKeyer.__call__`). The key
also refuses values of Delta partition columns the Delta log cannot hold distinctly, before any file is written.
"""

from __future__ import annotations

import base64
import decimal
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..spark.archives import keep_spark_archives_indexed

# Internal helper columns hold a space, which user column names cannot (spec._check_names): no collision possible.
PARTITION_KEY_COLUMN = "_lakehouse partition key"
PARTITION_VALUE_PREFIX = "_lakehouse partition value "

def _json_value(v):
    if isinstance(v, decimal.Decimal):
        return {"decimal": str(v)}
    if isinstance(v, bytes):
        return {"bytes": base64.b64encode(v).decode()}
    return v


def decode_partition_value(v):
    if isinstance(v, dict) and "decimal" in v:
        return decimal.Decimal(v["decimal"])
    if isinstance(v, dict) and "bytes" in v:
        return base64.b64decode(v["bytes"])
    return v


_SAFE_DIR = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _dir_value(human: str) -> str:
    # File paths stay plain ASCII so the same relative path is valid in both logs without URL encoding.
    return human if _SAFE_DIR.fullmatch(human) else "h" + hashlib.sha1(human.encode()).hexdigest()[:16]


def _dir_name(partition_field: str) -> str:
    """The folder name of a partition field. Delta vacuum and Iceberg orphan cleaners skip `_`/`.`-prefixed
    folders as hidden, so such names get a `p` in front (the folder name is cosmetic: both logs carry the
    partition values themselves)."""
    name = _dir_value(partition_field)
    return "p" + name if name.startswith(("_", ".")) else name


@dataclass
class PartitionKeyer:
    """Computes, per row, one JSON key holding the Iceberg partition tuple and the directory.

    `key_for` builds the key of one partition from its values (computed by Spark expressions, see
    partition_columns.py, or by `keys`, pyiceberg's vectorized transforms, where Spark cannot). It also
    refuses values of Delta partition columns that the Delta log cannot hold distinctly
    (delta_values.partition_value), before that partition's file is written; the failed write then
    removes every file it wrote (write_files)."""

    schema_json: str
    spec_json: str
    delta_columns: tuple[str, ...] = ()  # Delta partition columns: their values are checked (delta_values.partition_value)

    def _setup(self):
        # pyiceberg where a keyer first works, not at import: every write task imports this module.
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema

        schema = Schema.model_validate_json(self.schema_json)
        spec = PartitionSpec.model_validate_json(self.spec_json)
        fields = []
        for pf in spec.fields:
            source = schema.find_field(pf.source_id)
            fields.append((pf, schema.find_column_name(pf.source_id), source.field_type, pf.transform.pyarrow_transform(source.field_type)))
        return fields

    def key_for(self, values: tuple) -> str:
        """The JSON key of one partition, from its transformed values (Iceberg's, in spec order)."""
        from pyiceberg.partitioning import _to_partition_representation
        from pyiceberg.transforms import IdentityTransform

        from ..formats.delta import values as delta_values

        if not hasattr(self, "_fields"):
            self._fields = self._setup()
        internal = []
        for (pf, col_name, source_type, _), v in zip(self._fields, values):
            internal.append(_to_partition_representation(source_type, v) if isinstance(pf.transform, IdentityTransform) else v)
            if col_name in self.delta_columns:
                delta_values.partition_value(col_name, source_type, v)  # raises UnrepresentableValue
        return self.key_of_partition(tuple(internal))

    def key_of_partition(self, internal: tuple) -> str:
        """The JSON key of one partition from its values in Iceberg's internal representation (a data
        file's partition record, in spec order): the same key `key_for` gives that partition's rows."""
        if not hasattr(self, "_fields"):
            self._fields = self._setup()
        parts, dirs = [], []
        for (pf, _col_name, source_type, _), v in zip(self._fields, internal):
            parts.append(_json_value(v))
            result_type = pf.transform.result_type(source_type)
            dirs.append(f"{_dir_name(pf.name)}={_dir_value(pf.transform.to_human_string(result_type, v))}")
        return json.dumps({"values": parts, "dir": "/".join(dirs)}, sort_keys=True)

    def keys(self, batch: pa.RecordBatch) -> pa.Array:
        """Per row key through pyiceberg's vectorized transforms (the fallback when Spark cannot compute them)."""
        from pyiceberg.transforms import TruncateTransform
        from pyiceberg.types import IntegerType, LongType

        from ..formats.delta import values as delta_values

        if not hasattr(self, "_fields"):
            self._fields = self._setup()
        transformed = []
        for pf, col_name, source_type, fn in self._fields:
            col = _column(batch, col_name)
            if pa.types.is_decimal(col.type):
                # Arrow buffers from Spark may be unaligned for decimal128; pyiceberg-core panics on them. Copy.
                col = pa.concat_arrays([col, pa.array([], col.type)])
            if pa.types.is_timestamp(col.type) and col.type.tz is not None and col.type.tz != "UTC":
                # Spark labels instants with the session time zone; pyiceberg-core's year and month follow the
                # label's wall clock. Relabelled as UTC (the same instants), they are Iceberg's.
                col = col.cast(pa.timestamp(col.type.unit, "UTC"))
            out = fn(col)
            if isinstance(pf.transform, TruncateTransform) and isinstance(source_type, (IntegerType, LongType)):
                # Within W of the type's minimum, truncate wraps to a large positive value (as Spark's
                # expression refuses it, partition_columns._refuse_wrapped_truncation).
                if pc.any(pc.greater(out, col)).as_py():
                    from ..schema.partition_columns import wrapped_truncation_message

                    raise delta_values.UnrepresentableValue(wrapped_truncation_message(col_name, pf.transform.width, source_type))
            transformed.append(out)
        # Distinct combinations are few; build each key once and map rows onto them.
        combos = pa.table({str(i): t for i, t in enumerate(transformed)})
        uniques = combos.group_by(combos.column_names, use_threads=False).aggregate([]).to_pylist()
        out = pa.nulls(batch.num_rows, pa.string())
        for u in uniques:
            mask = None
            for i, trans_col in enumerate(transformed):
                v = u[str(i)]
                eq = pc.is_null(trans_col) if v is None else pc.fill_null(pc.equal(trans_col, pa.scalar(v, trans_col.type)), False)
                mask = eq if mask is None else pc.and_(mask, eq)
            key = self.key_for(tuple(u[str(i)] for i in range(len(transformed))))
            out = pc.if_else(mask, pa.scalar(key), out)
        if out.null_count:  # a value equal to no group (NaN): never hand Spark a null key
            raise ValueError(f"no partition key for {out.null_count} row(s): a partition source value is not equal to itself (NaN)")
        return out

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_spark_archives_indexed()  # for this worker's later tasks
        for batch in batches:
            keys = self.keys(batch)
            yield pa.RecordBatch.from_arrays([*batch.columns, keys], names=[*batch.schema.names, PARTITION_KEY_COLUMN])


def _column(batch: pa.RecordBatch, dotted: str) -> pa.Array:
    parts = dotted.split(".")
    col = batch.column(batch.schema.get_field_index(parts[0]))
    for p in parts[1:]:
        col = pc.struct_field(col, p)
    return col


UNPARTITIONED_KEY = json.dumps({"values": [], "dir": ""}, sort_keys=True)


def with_partition_key(batch: pa.RecordBatch, key: str) -> pa.RecordBatch:
    """`batch`, all of one partition, carrying its key: the FileWriter's input where the key is known
    (rows of existing files, whose partition their data file's record holds)."""
    return batch.append_column(PARTITION_KEY_COLUMN, pa.array([key] * batch.num_rows, pa.string()))

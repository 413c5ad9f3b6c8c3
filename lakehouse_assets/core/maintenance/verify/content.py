"""`verify --deep`'s content comparison: DuckDB reads both formats and compares row counts per Delta partition
value and, for tables up to `hash_max_rows` rows, an order-independent hash of all rows (streaming aggregates on
this machine: no rows are collected)."""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from ...formats.delta.committer import DeltaMirror
from ...schema.spec import delta_partition_columns

DEEP_HASH_MAX_ROWS = 5_000_000
MAX_LISTED = 3  # examples per kind of difference


def content_differences(table: Table, mirror: DeltaMirror, rows: int, hash_max_rows: int) -> dict[str, Any]:
    """Both formats read by DuckDB: row counts per Delta partition value, and a hash of all rows when small."""
    from ...read import duckdb_readers

    con = duckdb_readers.connect(mirror.storage)
    iceberg = duckdb_readers.iceberg_scan_sql(table.metadata_location)
    delta = duckdb_readers.delta_scan_sql(mirror.root_uri)
    schema = table.schema()
    out: dict[str, Any] = {"content": {}, "differences": []}
    partition_columns = delta_partition_columns(table.spec(), schema)
    if partition_columns:
        cols = ", ".join(f'"{c}"::VARCHAR' for c in partition_columns)
        query = "SELECT {cols}, count(*) FROM {src} GROUP BY ALL"
        a = sorted(map(tuple, con.execute(query.format(cols=cols, src=iceberg)).fetchall()), key=repr)
        b = sorted(map(tuple, con.execute(query.format(cols=cols, src=delta)).fetchall()), key=repr)
        out["content"]["partitions"] = len(a)
        if a != b:
            diff = sorted(set(a) ^ set(b), key=repr)[:MAX_LISTED]
            out["differences"].append(f"row counts per partition differ between the formats (read by DuckDB), e.g. {diff}")
    if rows <= hash_max_rows:
        cols = ", ".join(f'"{f.name}"::VARCHAR' for f in schema.fields)
        query = f"SELECT count(*), sum(hash({cols})::HUGEINT) FROM {{src}}"
        a = con.execute(query.format(src=iceberg)).fetchone()
        b = con.execute(query.format(src=delta)).fetchone()
        out["content"]["row_hash"] = str(a[1])
        if tuple(a) != tuple(b):
            out["differences"].append(f"the rows differ between the formats (read by DuckDB): {a[0]} rows in Iceberg, {b[0]} in Delta, different content hash")
    else:
        out["content"]["row_hash"] = f"skipped: {rows} rows > {hash_max_rows}"
    return out

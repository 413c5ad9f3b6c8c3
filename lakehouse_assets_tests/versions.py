"""Reading one point in time through every reader of both formats, with that point's own schema."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from lakehouse_assets.core.read import duckdb_readers

from .conftest import rows_of


def columns_at(lh, identifier: str, snapshot_id: int, delta_version: int) -> tuple[list[str], list[str]]:
    """Column names of the Iceberg snapshot's schema and of the Delta version's schema."""
    table = lh.load(identifier)
    snap = table.snapshot_by_id(snapshot_id)
    iceberg = [f.name for f in table.schemas()[snap.schema_id].fields]
    delta = list(pa.schema(DeltaTable(table.location(), version=delta_version).schema().to_arrow()).names)
    return iceberg, delta


def rows_at(lh, spark, duck, identifier: str, snapshot_id: int, delta_version: int) -> dict[str, list[tuple]]:
    """{reader: sorted normalised rows}; asserts both formats expose the same columns at that point."""
    table = lh.load(identifier)
    iceberg_cols, delta_cols = columns_at(lh, identifier, snapshot_id, delta_version)
    assert iceberg_cols == delta_cols, f"{identifier}: snapshot {snapshot_id} has columns {iceberg_cols}, Delta v{delta_version} {delta_cols}"
    columns = sorted(iceberg_cols)
    cols = ", ".join(f'"{c}"' for c in columns)
    root = table.location()
    local = root[len("file://"):]

    def duck_rows(sql):
        res = duck.execute(sql)
        names = [d[0] for d in res.description]
        return rows_of([dict(zip(names, row)) for row in res.fetchall()], columns)

    meta = duckdb_readers.iceberg_scan_sql(table.metadata_location)[:-1] + f", snapshot_from_id={snapshot_id})"
    out = {
        "duckdb_iceberg": duck_rows(f"SELECT {cols} FROM {meta}"),
        "pyiceberg": rows_of(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), columns),
        "spark_iceberg": rows_of(lh.read(spark, identifier, snapshot_id=snapshot_id).collect(), columns),
        "delta_rs": rows_of(pa.table(DeltaTable(local, version=delta_version).to_pyarrow_table()).to_pylist(), columns),
        "spark_delta": rows_of(lh.read(spark, identifier, delta_version=delta_version).collect(), columns),
    }
    if delta_version == DeltaTable(local).version():
        out["duckdb_delta"] = duck_rows(f"SELECT {cols} FROM {duckdb_readers.delta_scan_sql(root)}")
    return out


def assert_same_at(lh, spark, duck, identifier: str, snapshot_id: int, delta_version: int, expected=None) -> list[tuple]:
    results = rows_at(lh, spark, duck, identifier, snapshot_id, delta_version)
    ref_name, ref = next(iter(results.items()))
    for name, rows in results.items():
        assert rows == ref, f"{identifier} @ snapshot {snapshot_id} / Delta v{delta_version}: {name} differs from {ref_name}"
    if expected is not None:
        assert ref == sorted(expected, key=repr), f"{identifier} @ snapshot {snapshot_id}: readers agree but differ from the expected rows"
    return ref

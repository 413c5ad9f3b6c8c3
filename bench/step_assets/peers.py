"""The same 10,000-row pyarrow asset written to both formats by the two single-format Dagster integrations:
dagster-iceberg's `PyArrowIcebergIOManager` (pyiceberg, an SQLite catalog) and dagster-deltalake's
`DeltaLakePyarrowIOManager` (delta-rs), one output each, in one step, appending. Runs in the peers' own
environment (their pyiceberg range excludes ours); timed whole by bench/dagster_step.py."""

import os

import pyarrow as pa
from dagster import AssetOut, Definitions, multi_asset
from dagster_deltalake import DeltaLakePyarrowIOManager, LocalConfig
from dagster_iceberg.config import IcebergCatalogConfig
from dagster_iceberg.io_manager.arrow import PyArrowIcebergIOManager

WAREHOUSE = os.environ["STEP_WAREHOUSE"]
CATALOG = {"uri": f"sqlite:///{WAREHOUSE}/catalog.db", "warehouse": f"file://{WAREHOUSE}/iceberg"}


@multi_asset(outs={
    "events": AssetOut(key_prefix=["step"], io_manager_key="iceberg", metadata={"write_mode": "append"}),
    "events_delta": AssetOut(key_prefix=["step"], io_manager_key="delta"),
})
def events():
    ids = pa.array(range(10_000), pa.int64())
    rows = pa.table({"id": ids, "k": pa.array([i % 7 for i in range(10_000)], pa.int64()), "s": ids.cast(pa.string())})
    return rows, rows


def create_namespace() -> None:
    """PyArrowIcebergIOManager writes into an existing namespace only: the bench calls this once, untimed."""
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(f"{WAREHOUSE}/iceberg", exist_ok=True)
    SqlCatalog("peers", **CATALOG).create_namespace_if_not_exists("step")


defs = Definitions(
    assets=[events],
    resources={
        "iceberg": PyArrowIcebergIOManager(name="peers", config=IcebergCatalogConfig(properties=CATALOG), namespace="step"),
        "delta": DeltaLakePyarrowIOManager(root_uri=f"{WAREHOUSE}/delta", storage_options=LocalConfig(), mode="append"),
    },
)


if __name__ == "__main__":
    create_namespace()

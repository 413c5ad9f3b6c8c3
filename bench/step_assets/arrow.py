"""The same 10,000-row asset returned as a pyarrow Table, in a code location made by `lakehouse_definitions` (as a
user's is): the IO manager writes it to both formats in the step's own process, with no Spark session, and the
blocking `formats_agree` check verifies the pair. Timed whole by bench/dagster_step.py."""

import os

import pyarrow as pa
from dagster import asset

from lakehouse_assets import LakehouseResource, lakehouse_definitions


@asset(key_prefix=["step"], metadata={"write_mode": "append"})
def events() -> pa.Table:
    ids = pa.array(range(10_000), pa.int64())
    return pa.table({"id": ids, "k": pa.array([i % 7 for i in range(10_000)], pa.int64()), "s": ids.cast(pa.string())})


defs = lakehouse_definitions([events], LakehouseResource(warehouse=os.environ["STEP_WAREHOUSE"]))

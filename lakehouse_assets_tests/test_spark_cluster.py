"""Scale-out: the write, merge, read, verify and compaction paths on a real Spark standalone cluster
(master and worker in their own JVMs, executors launched by the worker), driven from a separate process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .spark_cluster import SparkCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SparkCluster(str(tmp_path_factory.mktemp("spark-cluster")))
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.mark.smoke
def test_append_merge_read_verify_on_a_standalone_cluster(cluster, tmp_path):
    out = tmp_path / "result.json"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("LAKEHOUSE_SPARK_MASTER", None)
    log = tmp_path / "cluster_job.log"
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "lakehouse_assets_tests.cluster_job", cluster.master_url, str(tmp_path / "warehouse"), str(out)],
            env=env, stdout=f, stderr=subprocess.STDOUT, timeout=900, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    assert proc.returncode == 0, log.read_text()[-4000:]
    r = json.loads(out.read_text())
    assert r["master"] == cluster.master_url
    # The driver sees the worker's executor besides itself; tasks ran in Python workers under that executor's JVM.
    assert len(r["executor_hosts"]) >= 2, r["executor_hosts"]
    assert r["tasks_in_executor_jvm"] == [True] * 4
    assert r["spark_rows"] == r["expected_rows"] == r["duckdb_iceberg_rows"] == r["duckdb_delta_rows"]
    assert r["spark_version_1"] == r["expected_version_1"]
    assert r["spark_pruned_rows"] == 1000 - len(range(0, 1000, 300))  # ids < 1000 minus the deleted ones
    assert r["verify"] and r["verify_after_compaction"]
    assert r["rows_after_compaction"] == r["expected_rows"]
    merge = r["writes"][2]
    assert merge["mode"] == "merge" and merge["files_removed"] > 0 and not merge["delta_lagging"]
    assert [w["delta_lagging"] for w in r["writes"]] == [False, False, False]

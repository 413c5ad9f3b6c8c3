"""Sail (pysail, a Rust engine behind the Spark Connect protocol) as an independent reader (Delta or Iceberg).

Run in a child process: a Spark Connect client session and the suite's classic Spark session do not share
one Python process well, and the child's server stops with it. Local tables only. Sail refuses PySpark clients
newer than 4.1, so on the Spark 4 line the child runs from `LAKEHOUSE_TEST_SAIL_PYTHON` (the Makefile's
`.venv-sail`: pysail and the thin `pyspark-client` it supports); on Spark 3.5, from this interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_SCRIPT = """
import json, sys
from pysail.spark import SparkConnectServer
server = SparkConnectServer(ip="127.0.0.1", port=0)
server.start(background=True)
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote("sc://127.0.0.1:%d" % server.listening_address[1]).getOrCreate()
path, columns, fmt = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
rows = spark.read.format(fmt).load(path).select(*columns).collect()
print(json.dumps([[r[c] for c in columns] for r in rows], default=str))
spark.stop()
server.stop()
"""


def python() -> str:
    """The interpreter Sail's child processes run with (see the module docstring)."""
    return os.environ.get("LAKEHOUSE_TEST_SAIL_PYTHON") or sys.executable


def read_delta(root: str, columns: list[str]) -> list[tuple]:
    """The rows of the Delta table at `root` (file:// or a local path), these columns, sorted."""
    return read(root, columns, "delta")


def read(root: str, columns: list[str], fmt: str) -> list[tuple]:
    """The rows of the `fmt` ("delta", "iceberg") table at `root` (file:// or a local path), these columns, sorted."""
    path = root[len("file://"):] if root.startswith("file://") else root
    done = subprocess.run([python(), "-c", _SCRIPT, path, json.dumps(columns), fmt], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        hint = " (on Spark 4, run through `make test SPARK=4`: it sets LAKEHOUSE_TEST_SAIL_PYTHON)" if "unsupported PySpark version" in done.stderr else ""
        raise RuntimeError(f"Sail could not read {path}{hint}: {done.stderr[-2000:]}")
    return sorted((tuple(r) for r in json.loads(done.stdout.strip().splitlines()[-1])), key=repr)

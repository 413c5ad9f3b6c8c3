"""The project's Spark settings and session, shared by the Dagster resource, the CLI, bench scripts and tests.

Local defaults, then `LAKEHOUSE_SPARK_CONF` (a JSON object of Spark settings), `LAKEHOUSE_SPARK_MASTER`,
`LAKEHOUSE_SPARK_REMOTE` (a Spark Connect URL, `sc://host:port`), then explicit overrides: the same code runs
against a cluster, or a Spark Connect server. A Connect session gets the session settings (`spark.sql.*`) only:
the rest belongs to the server, which was configured when it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Callable, Iterator, Optional

from .compat import is_connect

DEFAULT_SPARK_CONFIG: dict[str, Any] = {
    "spark.master": "local[2]",
    "spark.app.name": "lakehouse",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "2g",
    # PySpark's worker daemon minus a per-task re-read of Spark's own zip archives (0.1-0.5 s CPU per Python task).
    "spark.python.daemon.module": "lakehouse_assets.core.spark.daemon",
}


def spark_config(overrides: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    config = dict(DEFAULT_SPARK_CONFIG)
    if raw := os.environ.get("LAKEHOUSE_SPARK_CONF"):
        try:
            config.update(json.loads(raw))
        except json.JSONDecodeError as e:
            raise ValueError(f"LAKEHOUSE_SPARK_CONF must be a JSON object of Spark settings: {e}") from None
    if master := os.environ.get("LAKEHOUSE_SPARK_MASTER"):
        config["spark.master"] = master
    if remote := os.environ.get("LAKEHOUSE_SPARK_REMOTE"):
        config["spark.remote"] = remote
    config.update(overrides or {})
    if config.get("spark.remote"):
        return {k: v for k, v in config.items() if k == "spark.remote" or k.startswith("spark.sql.")}
    return config


def prepare_spark_environment() -> None:
    # Python workers must use this interpreter (it has pyarrow); a local driver binds to loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_session(overrides: Optional[dict[str, Any]] = None):
    """A SparkSession with the project's settings (Dagster code gets one through its PySpark resource)."""
    from pyspark.sql import SparkSession

    prepare_spark_environment()
    builder = SparkSession.builder
    for key, value in spark_config(overrides).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not is_connect(session):  # a Connect server's log is the server's
        session.sparkContext.setLogLevel("ERROR")
    return session


def active_session(spark=None):
    """`spark` if given, else the active session, else the innermost `session_provider`'s, else a new one with
    the project's settings."""
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or (_providers[-1]() if _providers else spark_session())


_providers: list[Callable[[], Any]] = []


@contextlib.contextmanager
def session_provider(provider: Callable[[], Any]) -> Iterator[None]:
    """Within the block, code that needs Spark without being handed a session (a Delta repair writing change data)
    and finds none active starts it with `provider()`: a session started on first use, with its owner's settings
    rather than the project's defaults."""
    _providers.append(provider)
    try:
        yield
    finally:
        _providers.remove(provider)

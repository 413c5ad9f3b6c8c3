"""A real Spark Connect server on this machine, in a process of its own (its own JVM, its own executors).

PySpark 4's package is a Spark home that bundles the server (`jars/spark-connect_*.jar`): `spark-submit` runs its
main class, as `sbin/start-connect-server.sh` does. It binds 127.0.0.1 on a port the kernel picks (port 0: a port chosen
here and passed on could be taken by another process while the JVM starts, and the server does not retry), logs to a file, runs its
Python tasks with this interpreter (so the executors import this package, as a cluster's executors must) and is
stopped by its PID. Tests then talk to it only through `SparkSession.builder.remote(...)`: nothing of the test
process is shared with the JVM.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# What the server logs once it listens, with the port it bound.
STARTED = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:(\d+)")


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def available() -> bool:
    """Whether this PySpark bundles a Spark Connect server (PySpark 4's full package does; 3.5's does not)."""
    jars = os.path.join(spark_home(), "jars")
    return os.path.isdir(jars) and any(n.startswith("spark-connect_") for n in os.listdir(jars))


def server_conf() -> dict[str, str]:
    """The server's Spark settings: the project's local defaults (core/spark/session.py), as a cluster's would be."""
    from lakehouse_assets.core.spark.session import DEFAULT_SPARK_CONFIG

    return {k: str(v) for k, v in DEFAULT_SPARK_CONFIG.items()}


@dataclass
class ConnectServer:
    work_dir: str
    conf: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.work_dir, "connect-server.log")

    def start(self, timeout: float = 180) -> "ConnectServer":
        os.makedirs(self.work_dir, exist_ok=True)
        conf = {
            **server_conf(),
            **self.conf,
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
            "spark.local.dir": os.path.join(self.work_dir, "tmp"),
        }
        args = [os.path.join(spark_home(), "bin", "spark-submit"), "--class", SERVER_CLASS, "--name", "lakehouse-connect"]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "LAKEHOUSE_SPARK_REMOTE"):
            env.pop(k, None)
        with open(self.log_path, "wb") as log:
            # spark-submit execs the JVM: the PID is the server's own.
            self.process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with {self.process.returncode}: {self._log_tail()}")
            started = STARTED.search(self._log_tail(20_000))
            if started:
                self.port = int(started.group(1))
                if self._listening():
                    return self
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"no Spark Connect server on 127.0.0.1 after {timeout} s: {self._log_tail()}")

    def _listening(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        p = self.process
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGTERM)  # the JVM's shutdown hooks stop its Python workers
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()

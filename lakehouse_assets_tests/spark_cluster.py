"""A real Spark standalone cluster on this machine: a master and one worker, each its own JVM process.

pyspark's package is a Spark home (`bin/spark-class`), so no download is needed. Both bind to 127.0.0.1
on ports the kernel picks (port 0), which their logs name (the master's URL, the worker's registration): a port chosen here and bound later could be taken
meanwhile by another test's server. They log to files in `work_dir` and are stopped by PID.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@dataclass
class SparkCluster:
    work_dir: str
    worker_cores: int = 2
    worker_memory: str = "2g"
    master_port: int = 0
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        env["SPARK_DAEMON_JAVA_OPTS"] = f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} -XX:TieredStopAtLevel=1".strip()  # as conftest.py's drivers
        log = open(os.path.join(self.work_dir, f"{name}.log"), "wb")
        proc = subprocess.Popen(
            [os.path.join(spark_home(), "bin", "spark-class"), *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(proc)
        return proc

    def start(self, timeout: float = 120) -> "SparkCluster":
        os.makedirs(self.work_dir, exist_ok=True)
        deadline = time.monotonic() + timeout
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        self.master_port = int(self._wait_for_log("master", r"Starting Spark master at spark://127\.0\.0\.1:(\d+)", deadline))
        self._spawn(
            "worker", "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--port", "0", "--cores", str(self.worker_cores), "--memory", self.worker_memory,
            "--webui-port", "0", "--work-dir", os.path.join(self.work_dir, "work"), self.master_url,
        )
        self._wait_for_log("worker", r"Successfully registered with (master)", deadline)
        return self

    def _wait_for_log(self, name: str, pattern: str, deadline: float) -> str:
        """The first group of `pattern` once the process's log has a matching line."""
        proc = self.processes[-1]
        path = os.path.join(self.work_dir, f"{name}.log")
        while time.monotonic() < deadline:
            with open(path, errors="replace") as f:
                found = re.search(pattern, f.read())
            if found:
                return found.group(1)
            if proc.poll() is not None:
                raise RuntimeError(f"Spark {name} exited early; see {path}")
            time.sleep(0.2)
        raise TimeoutError(f"Spark {name} did not log {pattern!r} in time; see {path}")

    def stop(self) -> None:
        for p in reversed(self.processes):  # worker first (it kills its executors), then the master
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.processes.clear()

"""A real Spark standalone cluster on this machine: a master and one worker, each its own JVM process.

pyspark's package is a Spark home (`bin/spark-class`), so no download is needed. Both bind to 127.0.0.1
on free ports, log to files in `work_dir`, and are stopped by PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@dataclass
class SparkCluster:
    work_dir: str
    worker_cores: int = 2
    worker_memory: str = "2g"
    master_port: int = 0
    master_ui_port: int = 0
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        log = open(os.path.join(self.work_dir, f"{name}.log"), "wb")
        proc = subprocess.Popen(
            [os.path.join(spark_home(), "bin", "spark-class"), *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(proc)
        return proc

    def start(self, timeout: float = 120) -> "SparkCluster":
        os.makedirs(self.work_dir, exist_ok=True)
        self.master_port, self.master_ui_port = free_port(), free_port()
        self._spawn(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
        )
        self._spawn(
            "worker", "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--cores", str(self.worker_cores), "--memory", self.worker_memory,
            "--webui-port", str(free_port()), "--work-dir", os.path.join(self.work_dir, "work"), self.master_url,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.processes:
                if p.poll() is not None:
                    raise RuntimeError(f"Spark {('master', 'worker')[self.processes.index(p)]} exited early; see logs in {self.work_dir}")
            if self.alive_workers() >= 1:
                return self
            time.sleep(0.5)
        raise TimeoutError(f"no Spark worker registered with {self.master_url} within {timeout} s; logs in {self.work_dir}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except OSError:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

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

"""`dagster dev` (webserver + daemon + code server) on a free port with a fresh DAGSTER_HOME, for the UI
and daemon tests; stopped by its process group, the way a person stops it (Ctrl-C), then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from .servers import ADDRESS_IN_USE, PortTaken, free_ports, start_on_free_ports

REPO = Path(__file__).resolve().parents[1]
LOCATION = "lakehouse_assets.definitions"  # code location name (workspace.yaml python_module)
STARTUP_TIMEOUT_S = 180


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C for `dagster dev` (it shuts its webserver, daemon and code servers down), then
    SIGKILL whatever is left in its process group (run workers, Spark JVMs)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        started = time.monotonic()
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            print(f"dagster dev (pid {proc.pid}) ignored SIGINT for 90 s; killing its process group")
        else:
            print(f"dagster dev stopped {time.monotonic() - started:.1f} s after SIGINT")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def graphql(base: str, query: str, variables: dict | None = None) -> dict:
    r = requests.post(f"{base}/graphql", json={"query": query, "variables": variables or {}}, timeout=30)
    r.raise_for_status()
    body = r.json()
    assert "errors" not in body, body
    return body["data"]


def _serving(env: dict[str, str], log: Path, workspace: Path = REPO / "workspace.yaml") -> tuple[subprocess.Popen, int]:
    """Start `dagster dev` on a free port and wait until its webserver answers: (process, port). A port is free
    until the webserver binds it, seconds later: when another process took it meanwhile, the webserver exits and
    `dagster dev` is started again on a new one (servers.start_on_free_ports)."""
    dagster = Path(sys.executable).with_name("dagster")

    def start() -> tuple[subprocess.Popen, int]:
        (port,) = free_ports(1)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(port), "-w", str(workspace)],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                # A shell's background job inherits SIGINT ignored; dagster dev needs it to shut down cleanly.
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        try:
            while True:
                if proc.poll() is not None:
                    if ADDRESS_IN_USE.search(log.read_text(errors="replace")):
                        raise PortTaken(f"dagster dev's webserver could not bind port {port}; log {log}:\n{tail(log)}")
                    pytest.fail(f"dagster dev exited with {proc.returncode} before serving; log {log}:\n{tail(log)}")
                with contextlib.suppress(requests.RequestException):
                    if requests.get(f"{base}/server_info", timeout=2).status_code == 200:
                        return proc, port
                if time.monotonic() > deadline:
                    pytest.fail(f"dagster dev not up on {base} after {STARTUP_TIMEOUT_S}s; log {log}:\n{tail(log)}")
                time.sleep(1)
        except BaseException:
            stop(proc)
            raise

    return start_on_free_ports(start)


@contextlib.contextmanager
def running_dagster_dev(root: Path, warehouse: Path, env: dict[str, str] | None = None, instance_yaml: str = "", module: str | None = None):
    """Start `dagster dev` with DAGSTER_HOME=root/dagster_home (the repository's dagster.yaml plus
    `instance_yaml`), the warehouse and extra environment; yields {base, port, home, log}. `module`: serve that code
    location (a module of this repository) instead of the demo's workspace.yaml."""
    home, log = root / "dagster_home", root / "dagster-dev.log"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text() + instance_yaml)  # telemetry off
    full_env = {k: v for k, v in os.environ.items() if k != "LAKEHOUSE_CATALOG"}  # the embedded catalog in the fresh warehouse
    full_env.update(
        DAGSTER_HOME=str(home),
        LAKEHOUSE_WAREHOUSE=str(warehouse),
        DAGSTER_DISABLE_TELEMETRY="1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        **(env or {}),
    )
    workspace = REPO / "workspace.yaml"
    if module is not None:
        workspace = root / "workspace.yaml"
        workspace.write_text(f"load_from:\n  - python_module:\n      module_name: {module}\n      working_directory: {REPO}\n")
    try:
        proc, port = _serving(full_env, log, workspace)
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    base = f"http://127.0.0.1:{port}"
    try:
        yield {"base": base, "port": port, "home": str(home), "log": log, "proc": proc}
    finally:
        stop(proc)
        shutil.rmtree(home, ignore_errors=True)

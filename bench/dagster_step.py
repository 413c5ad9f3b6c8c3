"""One Dagster step, timed as a whole process: `dagster asset materialize` of a 10,000-row asset in a fresh
process (interpreter start, imports, code location, Spark session, catalog, the commits), ours (both formats,
bench/step_assets/ours.py) against the same asset written with Spark + Java Iceberg (bench/step_assets/java.py).

Each side first creates its table (untimed); then the sides alternate, each run appending 10,000 rows. Per run:
wall seconds and the CPU seconds of the step's processes (Python and the Spark JVM it starts).

    .venv/bin/python bench/dagster_step.py [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SIDES = ("ours", "java")


def run_step(side: str, root: str) -> tuple[float, float]:
    """One fresh `dagster asset materialize` process: (wall s, CPU s of it and its children)."""
    home = os.path.join(root, f"home-{side}")
    os.makedirs(home, exist_ok=True)
    env = {
        **os.environ,
        "DAGSTER_HOME": home,
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "STEP_WAREHOUSE": os.path.join(root, f"warehouse-{side}"),
        "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
    }
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    cmd = [dagster, "asset", "materialize", "-f", os.path.join(HERE, "step_assets", f"{side}.py"), "--select", "step/events"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "RUN_SUCCESS" not in done.stdout + done.stderr:
        raise RuntimeError(f"the {side} step failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(reps: int, root: str | None = None) -> dict[str, dict[str, list[float]]]:
    """{side: {"wall": [...], "cpu": [...]}} over `reps` alternating runs, after one untimed run per side."""
    root = root or tempfile.mkdtemp(prefix="bench-dagster-step-")
    for side in SIDES:
        run_step(side, root)  # creates the table
    out = {side: {"wall": [], "cpu": []} for side in SIDES}
    for rep in range(reps):
        for side in (SIDES if rep % 2 == 0 else SIDES[::-1]):
            wall, cpu = run_step(side, root)
            out[side]["wall"].append(wall)
            out[side]["cpu"].append(cpu)
            print(f"  dagster_step rep {rep + 1} {side}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    out = measure(a.reps)
    for side in SIDES:
        print(f"{side}: median {statistics.median(out[side]['wall']):.2f} s wall, {statistics.median(out[side]['cpu']):.2f} s CPU")
    print(f"ours/java wall {statistics.median(out['ours']['wall']) / statistics.median(out['java']['wall']):.2f}")


if __name__ == "__main__":
    main()

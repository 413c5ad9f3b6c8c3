"""One Dagster step, timed as a whole process: `dagster asset materialize` of a 10,000-row asset in a fresh
process (interpreter start, imports, code location, Spark session if any, catalog, the commits). Four sides:

- ours: a Spark DataFrame, both formats (bench/step_assets/ours.py);
- java: the same Spark asset written with Spark + Java Iceberg (bench/step_assets/java.py);
- arrow: the asset returned as a pyarrow Table, both formats without Spark, plus the blocking `formats_agree`
  check, in a code location made by `lakehouse_definitions` (bench/step_assets/arrow.py);
- peers: the same pyarrow Table written by dagster-iceberg's and dagster-deltalake's IO managers, one output
  each (bench/step_assets/peers.py), from their own venv, .venv-peers (constraints/peers.txt).

Each side first creates its table (untimed); then the sides take turns in a rotating order, each run appending
10,000 rows. Per run: wall seconds and the CPU seconds of the step's processes (Python and any JVM it starts).
Also per run, for the sides without Spark (arrow, peers): loading the code location alone, a fresh interpreter
that runs the definitions file and nothing else (what the run's process, the code server and the daemon each pay
before any step).

    .venv/bin/python bench/dagster_step.py [--reps 5] [--sides ours,java,arrow,peers]
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
SIDES = ("ours", "java", "arrow", "peers")
PEERS_VENV = os.path.join(REPO, ".venv-peers")
SELECT = {"peers": "step/events,step/events_delta"}


def _bin(side: str, name: str) -> str:
    """The side's `dagster` or `python`: the peers' own venv, or this interpreter's."""
    return os.path.join(PEERS_VENV if side == "peers" else os.path.dirname(os.path.dirname(sys.executable)), "bin", name)


def _env(side: str, root: str) -> dict[str, str]:
    home = os.path.join(root, f"home-{side}")
    os.makedirs(home, exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": home, "DAGSTER_DISABLE_TELEMETRY": "1", "STEP_WAREHOUSE": os.path.join(root, f"warehouse-{side}")}
    if side != "peers":  # the peers import none of our code
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    return env


def prepare(side: str, root: str) -> None:
    """What a side needs before its first step: the peers' Iceberg namespace (their IO manager creates none)."""
    if side == "peers":
        os.makedirs(os.path.join(root, "warehouse-peers"), exist_ok=True)
        subprocess.run([_bin(side, "python"), os.path.join(HERE, "step_assets", "peers.py")], env=_env(side, root), check=True)


def run_step(side: str, root: str) -> tuple[float, float]:
    """One fresh `dagster asset materialize` process: (wall s, CPU s of it and its children)."""
    env = _env(side, root)
    cmd = [_bin(side, "dagster"), "asset", "materialize", "-f", os.path.join(HERE, "step_assets", f"{side}.py"), "--select", SELECT.get(side, "step/events")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or "RUN_SUCCESS" not in done.stdout + done.stderr:
        raise RuntimeError(f"the {side} step failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load_location(side: str, root: str) -> float:
    """Wall seconds of a fresh interpreter that loads the side's code location (its definitions file) and exits."""
    code = f"import runpy; runpy.run_path({os.path.join(HERE, 'step_assets', f'{side}.py')!r})"
    t0 = time.perf_counter()
    subprocess.run([_bin(side, "python"), "-W", "ignore", "-c", code], env=_env(side, root), cwd=root, check=True, capture_output=True)
    return time.perf_counter() - t0


LOADED = ("arrow", "peers")  # the sides whose code location is timed alone too


def measure(reps: int, root: str | None = None, sides: tuple[str, ...] = SIDES) -> dict[str, dict[str, list[float]]]:
    """{side: {"wall": [...], "cpu": [...], "load": [...]}} over `reps` runs per side in a rotating order, after one
    untimed run per side ("load": the code location alone, the sides in LOADED)."""
    root = root or tempfile.mkdtemp(prefix="bench-dagster-step-")
    for side in sides:
        prepare(side, root)
        run_step(side, root)  # creates the table
    out = {side: {"wall": [], "cpu": [], "load": []} for side in sides}
    for rep in range(reps):
        for side in sides[rep % len(sides):] + sides[:rep % len(sides)]:
            wall, cpu = run_step(side, root)
            out[side]["wall"].append(wall)
            out[side]["cpu"].append(cpu)
            if side in LOADED:
                out[side]["load"].append(load_location(side, root))
            print(f"  dagster_step rep {rep + 1} {side}: {wall:.2f} s wall, {cpu:.2f} s CPU" +
                  (f", code location {out[side]['load'][-1]:.2f} s" if side in LOADED else ""), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sides", default=",".join(SIDES))
    a = p.parse_args()
    sides = tuple(a.sides.split(","))
    out = measure(a.reps, sides=sides)
    wall = {side: statistics.median(out[side]["wall"]) for side in sides}
    for side in sides:
        print(f"{side}: median {wall[side]:.2f} s wall (min {min(out[side]['wall']):.2f}, max {max(out[side]['wall']):.2f}), {statistics.median(out[side]['cpu']):.2f} s CPU"
              + (f"; code location {statistics.median(out[side]['load']):.2f} s" if out[side]["load"] else ""))
    for a_side, b_side in (("ours", "java"), ("arrow", "peers"), ("arrow", "ours")):
        if a_side in wall and b_side in wall:
            print(f"{a_side}/{b_side} wall {wall[a_side] / wall[b_side]:.2f}")


if __name__ == "__main__":
    main()

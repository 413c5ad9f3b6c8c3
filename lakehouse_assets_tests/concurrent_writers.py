"""Writers in processes of their own, as a Dagster backfill's runs are: each overwrites (or appends) its own day of one
day-partitioned table with a pyarrow frame, so no process starts a JVM. Used by test_concurrent_writers.py and the
bench's concurrent_writers workload.

`run(...)` starts them with the `spawn` method (a fresh interpreter each, as a run's process is) and has them commit
at the same moment: each waits on a shared barrier right before its commit (core/write/transaction.py), so all of
them reach the table's commit lock, or race without one, at once.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import time
import traceback

import pyarrow as pa

FIRST_DAY = dt.date(2024, 1, 1)


def day(i: int) -> dt.date:
    return FIRST_DAY + dt.timedelta(days=i)


def rows(i: int, n: int, version: int = 0) -> pa.Table:
    """Day `i`'s `n` rows; `version` changes the value of every other row (the rest stay as they were)."""
    ids = range(i * 1_000_000, i * 1_000_000 + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "day": pa.array([day(i)] * n, pa.date32()),
        "value": pa.array([f"v{x}-{version if x % 2 else 0}" for x in ids], pa.string()),
    })


def _write(lakehouse_kwargs: dict, identifier: str, i: int, n: int, mode: str, barrier, version: int, lock: bool) -> dict:
    import contextlib

    from lakehouse_assets import Lakehouse, Window
    from lakehouse_assets.core.table import commit_lock
    from lakehouse_assets.core.write import transaction

    if not lock:  # as on a catalog without the commit lock (REST, Glue): the commits race, the losers re-validate
        commit_lock.holding = lambda *args, **kw: contextlib.nullcontext(False)
        commit_lock.committing = lambda *args, **kw: contextlib.nullcontext(commit_lock.Turn(False))

    lh = Lakehouse(**lakehouse_kwargs)
    frame = rows(i, n, version)
    real_commit, started = transaction.commit, []

    def commit_together(*args, **kw):  # each writer's commit (its lock, its Iceberg commit, its Delta version) waits for all
        transaction.commit = real_commit
        if barrier is not None:
            barrier.wait(timeout=300)
        started.append(time.monotonic())
        return real_commit(*args, **kw)

    transaction.commit = commit_together
    t0 = time.monotonic()
    try:
        window = Window("day", day(i), day(i + 1)) if mode == "overwrite" else None
        r = lh.write(frame, identifier, mode=mode, window=window)
        done = time.monotonic()
        return {"i": i, "ok": True, "attempts": r.commit_attempts, "snapshot": r.iceberg_snapshot_id, "delta_version": r.delta_version,
                "delta_lagging": r.delta_lagging, "seconds": done - t0, "commit_seconds": done - (started[0] if started else t0)}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which asserts on it
        return {"i": i, "ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(), "seconds": time.monotonic() - t0}


def run(lakehouse_kwargs: dict, identifier: str, days: list[int], n: int, mode: str = "overwrite", version: int = 1, together: bool = True,
        lock: bool = True) -> list[dict]:
    """One process per day in `days`, all writing at once; their results in `days`' order. `lock=False`: the writers
    commit without the table's commit lock (core/table/commit_lock.py), racing as on a catalog that has none."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(len(days)) if together else None
        with ctx.Pool(len(days)) as pool:
            return pool.starmap(_write, [(lakehouse_kwargs, identifier, i, n, mode, barrier, version, lock) for i in days])

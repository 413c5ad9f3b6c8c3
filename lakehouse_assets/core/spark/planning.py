"""How many tasks a job that writes files runs: from the size of its data, not from its input's partitions.

A DataFrame arrives partitioned however its pipeline left it (200 shuffle partitions, one per input file,
...). One Python task per input partition costs tens of milliseconds each and writes one file at least, so
the writer plans its own tasks: Spark's estimate of the data's size (`compat.plan_size_bytes`) over the
table's target file size, at least enough tasks to keep every core busy once the data is worth splitting,
at most a few per core (each task rolls over to a new file at the target size, so big data still ends in
target-sized files).
"""

from __future__ import annotations

import math

from .compat import default_parallelism, num_partitions, plan_size_bytes

TASKS_PER_CORE = 4  # at most; more only adds per-task overhead, since each task writes many files if it must
SPLIT_BYTES = 16 * 1024 * 1024  # data smaller than this per core is written by fewer tasks (one below 16 MiB)


def write_tasks(df, target_file_size: int) -> int:
    """The number of tasks to write `df` with, in files of about `target_file_size` bytes (see the module)."""
    cores = default_parallelism(df.sparkSession)
    most = cores * TASKS_PER_CORE
    size = plan_size_bytes(df)
    if size is None:
        return cores  # unknown size: every core, each rolling its files at the target size
    by_size = math.ceil(size / max(1, target_file_size))
    spread = min(cores, math.ceil(size / SPLIT_BYTES))
    return max(1, min(most, max(by_size, spread)))


def at_most(df, tasks: int):
    """`df` in at most `tasks` partitions, without a shuffle. Never more than it has: Spark folds two coalesces
    into the outer one, so `coalesce(n)` of a DataFrame the caller coalesced to fewer would undo the caller's."""
    current = num_partitions(df)
    return df if current is not None and current <= tasks else df.coalesce(tasks)

"""How many tasks a job that writes files runs: from the size of its data, not from its input's partitions.

A DataFrame arrives partitioned however its pipeline left it (200 shuffle partitions, one per input file,
...). One Python task per input partition costs tens of milliseconds each and writes one file at least, so
the writer plans its own tasks: Spark's estimate of the data's size (`compat.plan_size_bytes`) over the
table's target file size, at least enough tasks to keep every core busy once the data is worth splitting,
at most a few per core (each task rolls over to a new file at the target size, so big data still ends in
target-sized files). A partitioned write then brings each partition's rows to one of those tasks (`by_key`).
"""

from __future__ import annotations

import functools
import math
import struct

from .compat import coalesced_partitions, default_parallelism, plan_size_bytes

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
    """`df` in at most `tasks` partitions, without a shuffle. Never more than it has: a coalesce to more partitions
    than a plan has keeps its count, except over the caller's own coalesce, which Spark folds into the outer one
    (`coalesce(1)` then `coalesce(4)` runs 4 tasks); so a caller's coalesce to fewer is kept as it is."""
    current = coalesced_partitions(df)
    return df if current is not None and current <= tasks else df.coalesce(tasks)


def by_key(df, tasks: int, keys: list, dense: bool):
    """`df` repartitioned into `tasks` partitions with all rows of one value of the `keys` (Columns) in one task.

    Spark hashes keys onto tasks, so a few keys land unevenly (14 days over 2 tasks: 8 and 6 days, not 7 and 7),
    and the write takes as long as its busiest task. When every key is a `dense` integer (time units since 1970,
    bucket numbers: consecutive keys differ by one), consecutive keys go to consecutive tasks instead (`pmod` of
    their sum): a run of consecutive keys splits evenly, the tasks' counts within one key. The shuffle carries the
    rows' own columns and what it partitions by (dense keys: one int, the task's; else the keys' values), which the
    result drops.

    What it partitions by is a column computed before the shuffle, not an expression of it: Spark removes a coalesce directly
    under a repartition (CollapseRepartition), and the caller's `at_most` is that coalesce; without it the shuffle's
    map side would run in every input partition (200 tasks' overhead for an input in 200)."""
    from pyspark.sql import functions as F

    if not dense or tasks < 2:
        by = list(keys)
    else:
        total = sum((F.coalesce(k.cast("long"), F.lit(0)) for k in keys), F.lit(0))
        slot = F.pmod(total, F.lit(tasks)).cast("int")
        # Spark's hash partitioning places an int v in task pmod(murmur3(v, seed 42), tasks); _hashed_to gives, for
        # each task, an int that lands there, so a slot's rows land in the task of that number.
        by = [F.element_at(F.array(*[F.lit(v) for v in _hashed_to(tasks)]), slot + 1)]
    names = [f"{_SHUFFLE_KEY_PREFIX}{i}" for i in range(len(by))]
    keyed = df.select("*", *[e.alias(n) for e, n in zip(by, names)])
    return keyed.repartition(tasks, *[F.col(f"`{n}`") for n in names]).drop(*names)


# Helper columns hold a space, which table column names cannot: no collision possible.
_SHUFFLE_KEY_PREFIX = "_lakehouse shuffle key "


@functools.lru_cache(maxsize=64)
def _hashed_to(tasks: int) -> tuple[int, ...]:
    """For each task number i, the smallest int v >= 0 that Spark's hash partitioning sends to task i:
    pmod(murmur3_x86_32 of v's 4 little-endian bytes with seed 42, tasks), Spark's `Murmur3Hash.hashInt`."""
    import mmh3

    found: dict[int, int] = {}
    v = 0
    while len(found) < tasks:
        found.setdefault(mmh3.hash(struct.pack("<i", v), 42) % tasks, v)
        v += 1
    return tuple(found[i] for i in range(tasks))

"""One committer of a table at a time, among this project's writers sharing a SQL catalog: the commit's lock.

Iceberg commits are optimistic: each writer commits with the catalog's compare-and-swap, and a writer that lost
re-validates and tries again (core/write/transaction.py). With many writers at once (a backfill's runs), most attempts
lose, and each lost attempt has already written its manifests and metadata: N writers cost about N²/2 attempts. So the
project's writers first queue on a lock of the table in the catalog's own database, and commit while holding it: every
commit then lands on its first attempt, in turn, and the Delta versions follow the snapshots without racing for the
log. Waiters block in the kernel or the database, which wakes the next one as the lock is released: none polls, so the
one committing keeps the CPU.

The lock has two stages, taken in this order, so that commits flow like a pipeline (`committing`): a writer holds the
Iceberg stage for its Iceberg commit, then takes the Delta stage (it waits there for the writer ahead to finish its
Delta version) and only then lets the Iceberg stage go. The next writer commits its snapshot while this one writes its
Delta version, and the Delta versions still follow the snapshots in order: each writer enters the Delta stage before
the writer behind it can leave the Iceberg stage. N writers in a queue then wait for N times the longer stage, not for
N times both. `holding` takes both stages: while it is held no writer of the project is halfway through a commit
(the formats-agree check, an erasure).

    embedded SQLite   an advisory file lock (flock) per stage beside catalog.db: the catalog is a local file, so
                      every writer runs on this machine; the kernel releases it when a writer dies
    PostgreSQL        a session advisory lock (pg_advisory_lock) per stage on its own connection: writers on any
                      machine; released when the connection closes, a dead writer's too

The lock only orders this project's writers; another engine's commits still race, and the compare-and-swap and the
re-validation keep those safe. A stage not obtained within the wait bound is passed by (logged): the commit then races
as it would without it, as it does when the lock's database fails as it takes the Delta stage (its snapshot has landed;
a Delta commit is put-if-absent and retried). Other catalogs (REST, Glue) have no such lock here and race.

Within one process each stage is re-entrant for its thread (a write inside another write's commit, as tests stage
races) and other threads of the process queue on it too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from typing import Iterator

log = logging.getLogger("lakehouse")

WAIT_SECONDS = 300.0  # the longest a commit waits for the writers ahead of it
_local: dict[str, threading.RLock] = {}
_held: dict[str, int] = {}  # lock key -> how deep this process's owning thread holds it
DELTA_STAGE = ":delta"  # the Delta stage's key: the Iceberg stage's key with this suffix
_registry = threading.Lock()


@contextlib.contextmanager
def holding(catalog, identifier: str, wait_seconds: float = WAIT_SECONDS) -> Iterator[bool]:
    """Hold both stages of the commit lock of `identifier` in `catalog`: no writer of the project is halfway through a
    commit meanwhile (yields whether both are held: False where the catalog has none, or a wait ran out)."""
    key = _key(catalog, identifier)
    if key is None:
        yield False
        return
    with _stage(catalog, key, identifier, wait_seconds) as iceberg, _stage(catalog, key + DELTA_STAGE, identifier, wait_seconds) as delta:
        yield iceberg and delta


class Turn:
    """A writer's place in the commit queue (`committing`): `locked` whether it holds the Iceberg stage; `to_delta()`
    once its Iceberg commit is done."""

    def __init__(self, locked: bool, to_delta=None):
        self.locked = locked
        self._to_delta = to_delta

    def to_delta(self) -> None:
        """Take the Delta stage (after the writer ahead has written its Delta version), then let the Iceberg stage go
        to the writer behind. Once only; nothing where the catalog has no lock."""
        if self._to_delta is not None:
            self._to_delta, step = None, self._to_delta
            step()


@contextlib.contextmanager
def committing(catalog, identifier: str, wait_seconds: float = WAIT_SECONDS) -> Iterator[Turn]:
    """A commit's turn: the Iceberg stage held from now, the Delta stage from `Turn.to_delta()` to the end."""
    key = _key(catalog, identifier)
    if key is None:
        yield Turn(False)
        return
    with contextlib.ExitStack() as delta, contextlib.ExitStack() as iceberg:
        locked = iceberg.enter_context(_stage(catalog, key, identifier, wait_seconds))

        def to_delta() -> None:
            delta.enter_context(_stage(catalog, key + DELTA_STAGE, identifier, wait_seconds))
            iceberg.close()

        yield Turn(locked, to_delta)


@contextlib.contextmanager
def _stage(catalog, key: str, identifier: str, wait_seconds: float) -> Iterator[bool]:
    """Hold one stage (`key`) of the lock: re-entrant for this thread, queued behind this process's other threads,
    then behind other processes."""
    with _registry:
        local = _local.setdefault(key, threading.RLock())
    if not local.acquire(timeout=wait_seconds):
        log.warning("Table %s: another thread of this process kept its commit lock for %.0f s; committing without it", identifier, wait_seconds)
        yield False
        return
    try:
        if _held.get(key):  # this thread holds it already: a nested commit
            _held[key] += 1
            try:
                yield True
            finally:
                _held[key] -= 1
            return
        with _acquired(catalog, key, identifier, wait_seconds) as held:
            _held[key] = 1
            try:
                yield held
            finally:
                _held[key] = 0
    finally:
        local.release()


def _key(catalog, identifier: str) -> str | None:
    uri = str(getattr(catalog, "properties", {}).get("uri", ""))
    if uri.startswith("sqlite:///") and getattr(catalog, "engine", None) is not None:
        return f"sqlite:{uri[len('sqlite:///'):]}:{catalog.name}:{identifier}"
    if uri.startswith("postgresql") and getattr(catalog, "engine", None) is not None:
        return f"postgresql:{uri}:{catalog.name}:{identifier}"
    return None


@contextlib.contextmanager
def _acquired(catalog, key: str, identifier: str, wait_seconds: float) -> Iterator[bool]:
    if key.startswith("sqlite:"):
        with _file_lock(key, identifier, wait_seconds) as held:
            yield held
    else:
        with _advisory_lock(catalog, key, identifier, wait_seconds) as held:
            yield held


@contextlib.contextmanager
def _file_lock(key: str, identifier: str, wait_seconds: float) -> Iterator[bool]:
    import fcntl

    database = key.split(":", 2)[1]
    folder = os.path.join(os.path.dirname(database) or ".", ".commit-locks")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha1(key.encode()).hexdigest()[:20] + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if not _flock_within(fd, wait_seconds):  # the waiting thread closes `fd` once it gets the lock
        log.warning("Table %s: its commit lock (%s) was held for %.0f s; committing without it", identifier, path, wait_seconds)
        yield False
        return
    try:
        yield True
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _flock_within(fd: int, wait_seconds: float) -> bool:
    """Whether this process got the exclusive flock of `fd` within `wait_seconds`.

    The wait is the kernel's: a thread blocks in flock and is woken the moment the writer ahead releases it. Polling
    instead (try, sleep, try) cost every commit in a queue of 32 about a fifth more time: 31 waiting processes woke a
    hundred times a second each on a 2-core machine, taking the CPU from the one committing. flock has no timeout,
    so when the wait runs out the thread is left blocked and owns `fd`: if it gets the lock later, it lets it go and
    closes `fd`."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    got, guard, abandoned = threading.Event(), threading.Lock(), []

    def wait() -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with guard:
            if not abandoned:
                got.set()
                return
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    threading.Thread(target=wait, name="commit-lock-wait", daemon=True).start()
    got.wait(wait_seconds)
    with guard:
        if got.is_set():
            return True
        abandoned.append(True)
        return False


@contextlib.contextmanager
def _advisory_lock(catalog, key: str, identifier: str, wait_seconds: float) -> Iterator[bool]:
    """PostgreSQL queues the waiters itself (pg_advisory_lock), each woken as the lock is released; `lock_timeout`
    bounds the wait (it covers advisory locks), set for that statement's transaction only."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    lock_id = int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big", signed=True)
    with catalog.engine.connect() as conn:
        try:
            conn.execute(text(f"SET LOCAL lock_timeout = '{max(1, int(wait_seconds * 1000))}ms'"))
            conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": lock_id})
            conn.commit()  # the lock is the session's: it outlives this transaction
        except OperationalError as e:
            if "lock timeout" not in str(e):
                raise
            conn.rollback()
            log.warning("Table %s: its commit lock (PostgreSQL advisory lock %d) was held for %.0f s; committing without it", identifier, lock_id, wait_seconds)
            yield False
            return
        try:
            yield True
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": lock_id})
            conn.commit()

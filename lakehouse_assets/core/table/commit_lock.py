"""One committer of a table at a time, among this project's writers sharing a SQL catalog: the commit's lock.

Iceberg commits are optimistic: each writer commits with the catalog's compare-and-swap, and a writer that lost
re-validates and tries again (core/write/transaction.py). With many writers at once (a backfill's runs), most attempts
lose, and each lost attempt has already written its manifests and metadata: N writers cost about N²/2 attempts. So the
project's writers first queue on a lock of the table in the catalog's own database, and commit (Iceberg, then the
Delta version) while holding it: every commit then lands on its first attempt, in turn, and the Delta versions follow
the snapshots without racing for the log.

    embedded SQLite   an advisory file lock (flock) beside catalog.db: the catalog is a local file, so every writer
                      runs on this machine; the kernel releases it when a writer dies
    PostgreSQL        a session advisory lock (pg_advisory_lock) on its own connection: writers on any machine;
                      released when the connection closes, a dead writer's too

The lock only orders this project's writers; another engine's commits still race, and the compare-and-swap and the
re-validation keep those safe. A lock not obtained within the wait bound is passed by (logged): the commit then races
as it would without it. Other catalogs (REST, Glue) have no such lock here and race.

Within one process the lock is re-entrant for its thread (a write inside another write's commit, as tests stage
races) and other threads of the process queue on it too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from typing import Iterator

log = logging.getLogger("lakehouse")

WAIT_SECONDS = 300.0  # the longest a commit waits for the writers ahead of it
_POLL_SECONDS = 0.01
_local: dict[str, threading.RLock] = {}
_held: dict[str, int] = {}  # lock key -> how deep this process's owning thread holds it
_registry = threading.Lock()


@contextlib.contextmanager
def holding(catalog, identifier: str, wait_seconds: float = WAIT_SECONDS) -> Iterator[bool]:
    """Hold the commit lock of `identifier` in `catalog` (yields whether one is held: False where the catalog has none,
    or the wait ran out)."""
    key = _key(catalog, identifier)
    if key is None:
        yield False
        return
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
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log.warning("Table %s: its commit lock (%s) was held for %.0f s; committing without it", identifier, path, wait_seconds)
                    yield False
                    return
                time.sleep(_POLL_SECONDS)
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _advisory_lock(catalog, key: str, identifier: str, wait_seconds: float) -> Iterator[bool]:
    from sqlalchemy import text

    lock_id = int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big", signed=True)
    with catalog.engine.connect() as conn:
        deadline = time.monotonic() + wait_seconds
        while not conn.execute(text("SELECT pg_try_advisory_lock(:id)"), {"id": lock_id}).scalar():
            conn.rollback()
            if time.monotonic() > deadline:
                log.warning("Table %s: its commit lock (PostgreSQL advisory lock %d) was held for %.0f s; committing without it", identifier, lock_id, wait_seconds)
                yield False
                return
            time.sleep(_POLL_SECONDS * 4)
        conn.commit()
        try:
            yield True
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": lock_id})
            conn.commit()

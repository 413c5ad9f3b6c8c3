"""The table's commit lock (core/table/commit_lock.py): a waiter is woken when the writer ahead lets go, and a wait that
runs out passes the lock by without keeping it, on the embedded SQLite catalog's file lock and on PostgreSQL's
advisory lock; its two stages let the next writer commit its snapshot while one writes its Delta version, in order."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from lakehouse_assets.core.table import commit_lock


def _release_later(release, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), release()))
    thread.start()
    return thread


def _held_elsewhere(lock) -> tuple[threading.Thread, threading.Event]:
    """`lock` (a lock context) taken in another thread, as another writer would hold it, until the event is set."""
    ready, release = threading.Event(), threading.Event()

    def hold():
        with lock as got:
            if got:
                ready.set()
                release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert ready.wait(30), "the other writer did not get the lock"
    return thread, release


def test_a_file_lock_waiter_gets_it_when_released_and_an_ended_wait_leaves_it_free(tmp_path):
    import fcntl

    path = str(tmp_path / "t.lock")
    ahead = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(ahead, fcntl.LOCK_EX)

    # A wait that runs out: not obtained, and the fd is the waiting thread's from then on.
    given_up = os.open(path, os.O_RDWR)
    assert commit_lock._flock_within(given_up, 0.2) is False

    # The next waiter is woken by the release, long before its bound.
    waiter = os.open(path, os.O_RDWR)
    started = time.monotonic()
    releasing = _release_later(lambda: fcntl.flock(ahead, fcntl.LOCK_UN), 0.3)
    assert commit_lock._flock_within(waiter, 60) is True
    assert time.monotonic() - started < 30
    releasing.join()
    fcntl.flock(waiter, fcntl.LOCK_UN)
    os.close(waiter)

    # The abandoned waiter got the lock after its bound, let it go and closed its fd.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.fstat(given_up)
        except OSError:
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the abandoned wait kept its file descriptor")
    fcntl.flock(ahead, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: nobody holds it
    os.close(ahead)


def test_the_sqlite_lock_is_passed_by_after_its_wait_and_taken_once_free(tmp_path, caplog):
    catalog = SqlCatalog("locks", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    key = commit_lock._key(catalog, "db.t")
    thread, done = _held_elsewhere(commit_lock._file_lock(key, "db.t", 5))  # its own open file: another process, to flock
    with caplog.at_level(logging.WARNING, logger="lakehouse"), commit_lock._file_lock(key, "db.t", 0.2) as got:
        assert got is False
    assert "Table db.t: its commit lock" in caplog.text and "committing without it" in caplog.text
    done.set()
    thread.join()
    with commit_lock.holding(catalog, "db.t", 30) as got:
        assert got is True


def test_the_postgres_lock_waits_in_postgres_and_its_bound_applies_to_that_wait_only(postgres, tmp_path, caplog):  # noqa: F811
    from sqlalchemy import text

    catalog = SqlCatalog("locks", uri=postgres.urls["sqlalchemy"], warehouse=f"file://{tmp_path}")
    key = commit_lock._key(catalog, "db.t")
    with commit_lock._advisory_lock(catalog, key, "db.t", 5) as first:
        assert first is True
        with caplog.at_level(logging.WARNING, logger="lakehouse"), commit_lock._advisory_lock(catalog, key, "db.t", 0.3) as second:
            assert second is False  # PostgreSQL's lock_timeout ended the wait
        assert "PostgreSQL advisory lock" in caplog.text and "committing without it" in caplog.text

    # Woken by the release; the wait's lock_timeout does not stay on the pooled connection.
    thread, release = _held_elsewhere(commit_lock._advisory_lock(catalog, key, "db.t", 5))
    _release_later(release.set, 0.3)
    with commit_lock._advisory_lock(catalog, key, "db.t", 60) as got:
        assert got is True
    thread.join()
    with catalog.engine.connect() as conn:
        settings = {conn.execute(text("SHOW lock_timeout")).scalar() for _ in range(3)}
    assert settings == {"0"}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_next_writer_commits_its_snapshot_while_one_writes_its_delta_version_and_the_delta_versions_keep_their_order(kind, request, tmp_path, caplog):
    uri = f"sqlite:///{tmp_path}/catalog.db" if kind == "sqlite" else request.getfixturevalue("postgres").urls["sqlalchemy"]
    catalog = SqlCatalog("locks", uri=uri, warehouse=f"file://{tmp_path}")
    events, errors = [], []
    a_writes_delta, b_committed = threading.Event(), threading.Event()

    def writer(name, before, during_delta):
        try:
            if before is not None:
                assert before.wait(30)
            with commit_lock.committing(catalog, "db.t", 30) as turn:
                assert turn.locked
                events.append(f"{name} iceberg")
                if name == "b":
                    b_committed.set()
                turn.to_delta()  # b waits here until a has written its Delta version
                events.append(f"{name} delta")
                if during_delta is not None:
                    during_delta()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def a_during_delta():
        a_writes_delta.set()
        assert b_committed.wait(30), "b could not commit its snapshot while a held the Delta stage"
        # Both stages are taken now: a check that needs no commit in flight waits, and gives up after its bound.
        with caplog.at_level(logging.WARNING, logger="lakehouse"), commit_lock.holding(catalog, "db.t", 0.3) as got:
            assert got is False
        events.append("a wrote its version")

    threads = [threading.Thread(target=writer, args=("a", None, a_during_delta)), threading.Thread(target=writer, args=("b", a_writes_delta, None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert events == ["a iceberg", "a delta", "b iceberg", "a wrote its version", "b delta"]
    with commit_lock.holding(catalog, "db.t", 5) as got:  # both stages free again
        assert got is True

"""A Python worker's socket to its executor: its input acknowledged as it is read, and whether its task has ended.

The executor writes a task's input to the worker over a loopback TCP socket with Nagle's algorithm on (Spark does
not set TCP_NODELAY there): a small segment waits until the worker acknowledges what came before it. A worker reused
across tasks is in the kernel's interactive mode, where the ACK of a lone segment waits for the delayed-ACK timer,
40 ms. Measured in a stream of 10,000-row batches: about one task in five waited 40-47 ms for its input, taking 60 ms
instead of 20; with immediate ACKs (a `quickack` route on loopback, or this module) no task waited over 10 ms.

The worker cannot turn Nagle off at the other end; it can acknowledge at once. `QuickAckReader` sets TCP_QUICKACK
before each read of the socket (the option is not sticky: the kernel returns to delayed ACKs on its own), so the
ACK of what arrived goes out as the worker asks for more, and the held segment follows within a round trip.
`reading_with_quick_acks` gives PySpark's daemon a `worker` that reads its input so; the daemon module
(core/spark/daemon.py) installs it. Linux only: elsewhere, and on a socket that is not TCP, the worker is PySpark's.

A worker can also outlive its task. When a job fails, Spark kills its other tasks; a killed task ends when it next
reads from its worker, and Spark then closes the worker's socket, but kills the worker only if the task did not end.
A worker still busy goes on (a task of several outputs writes the rest of its files) until it next writes to the
socket. `task_ended` tells it: the executor has closed the socket of the task it runs. Its file writers ask before
they report a file, and remove their files if so (core/write/parquet_files.py): files written after the driver
swept the failed write's files are not left behind.
"""

from __future__ import annotations

import io
import os
import select
import socket
import types
from typing import Any, Callable

QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux
_task_socket: socket.socket | None = None  # in a worker forked by the project's daemon: its socket to the executor


def task_ended() -> bool:
    """In a Python worker: whether the executor has closed the socket of its task (the task ended while the worker
    runs on, see the module docstring). False where it cannot tell: a worker not forked by the project's daemon, or
    a system without poll(2)'s POLLRDHUP."""
    sock = _task_socket
    peer_closed = getattr(select, "POLLRDHUP", 0)  # the executor closed its end (unread input or not): Linux
    if sock is None or not peer_closed:
        return False
    try:
        poller = select.poll()
        poller.register(sock.fileno(), peer_closed | select.POLLHUP | select.POLLERR)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # cannot tell: the task goes on as if the check were not there
        return False


class QuickAckReader(io.RawIOBase):
    """The raw reader of a worker's socket (file descriptor `fd`, a duplicate of `sock`'s), asking the kernel for an
    immediate ACK before each read."""

    def __init__(self, fd: int, sock: socket.socket):
        super().__init__()
        self._fd, self._sock = fd, sock

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer) -> int:
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
        except OSError:  # a socket already shut down: the read says so
            pass
        return os.readv(self._fd, [buffer])

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _OsReadingWith(types.ModuleType):
    """`os` as PySpark's daemon module sees it in one worker: `fdopen(fd, "rb")` of the worker's socket gives a
    buffered `QuickAckReader`; everything else is `os` itself."""

    def __init__(self, real: types.ModuleType, sock: socket.socket):
        super().__init__("os")
        self._real, self._sock = real, sock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def fdopen(self, fd: int, mode: str = "r", buffering: int = -1, *args, **kwargs):
        if mode == "rb" and not args and not kwargs:
            return io.BufferedReader(QuickAckReader(fd, self._sock), buffering if buffering > 0 else io.DEFAULT_BUFFER_SIZE)
        return self._real.fdopen(fd, mode, buffering, *args, **kwargs)


def applies_to(sock: socket.socket) -> bool:
    return QUICKACK is not None and sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM


def reading_with_quick_acks(pyspark_daemon: types.ModuleType) -> Callable[[socket.socket, bool], int]:
    """PySpark's `pyspark.daemon.worker(sock, authenticated)`, its input read through `QuickAckReader`.

    PySpark's worker opens its input with `os.fdopen(os.dup(sock.fileno()), "rb", ...)` (3.5 and 4.x alike). The
    daemon calls `worker` in the forked child, once per task of a reused worker, so the `os` it sees is replaced
    there only, for that worker's socket. The socket is kept for `task_ended`."""
    run, real_os = pyspark_daemon.worker, pyspark_daemon.os

    def worker(sock: socket.socket, authenticated: bool) -> int:
        global _task_socket
        _task_socket = sock
        if applies_to(sock):
            pyspark_daemon.os = _OsReadingWith(real_os, sock)
        return run(sock, authenticated)

    return worker

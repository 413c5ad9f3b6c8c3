"""A Python worker's input from its executor, acknowledged as it is read.

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
"""

from __future__ import annotations

import io
import os
import socket
import types
from typing import Any, Callable

QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux


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
    there only, for that worker's socket."""
    run, real_os = pyspark_daemon.worker, pyspark_daemon.os

    def worker(sock: socket.socket, authenticated: bool) -> int:
        if applies_to(sock):
            pyspark_daemon.os = _OsReadingWith(real_os, sock)
        return run(sock, authenticated)

    return worker

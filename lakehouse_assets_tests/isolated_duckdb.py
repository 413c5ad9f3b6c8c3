"""DuckDB in a child process, for tests that feed it generated tables.

A native abort inside a DuckDB extension kills the whole process (pytest with it, and Hypothesis cannot
shrink what it never sees fail). Queries sent here run in one long-lived spawned child; if it dies, the
query raises `DuckDBDied` naming the SQL and the exit code (-6 is SIGABRT), and the next query starts a
fresh child.
"""

from __future__ import annotations

import multiprocessing

import pyarrow as pa


class DuckDBDied(AssertionError):
    """The DuckDB child process died while running a query (a crash in DuckDB, not a wrong answer)."""


def _serve(conn) -> None:
    from lakehouse_assets.core.read import duckdb_readers

    con = duckdb_readers.connect()
    while True:
        try:
            sql = conn.recv()
        except EOFError:
            return
        try:
            table = con.execute(sql).fetch_arrow_table()
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            conn.send(("ok", sink.getvalue().to_pybytes()))
        except Exception as e:  # a DuckDB error (not a crash) goes back to the caller as it is
            conn.send(("error", f"{type(e).__name__}: {e}"))


class IsolatedDuckDB:
    """`execute_arrow(sql)` runs SQL on a DuckDB connection (`duckdb_readers.connect()`) in a child process."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._process = self._ctx.Process(target=_serve, args=(child,), daemon=True, name="isolated-duckdb")
        self._process.start()
        child.close()
        self._conn = parent

    def execute_arrow(self, sql: str) -> pa.Table:
        if self._process is None or not self._process.is_alive():
            self._start()
        self._conn.send(sql)
        try:
            status, payload = self._conn.recv()
        except EOFError:
            self._process.join(10)
            code = self._process.exitcode
            self._process = None
            raise DuckDBDied(f"DuckDB's process died (exit code {code}) running: {sql}") from None
        if status == "error":
            raise RuntimeError(f"DuckDB failed running {sql}: {payload}")
        return pa.ipc.open_stream(payload).read_all()

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._conn.close()
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
        self._process = None

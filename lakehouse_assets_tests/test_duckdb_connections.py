"""DuckDB's connections (`duckdb_readers.connect`): a process loads the readers' extensions into one database per
storage configuration and gives every caller a connection of its own to it."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from lakehouse_assets.core.io.storage import StorageConfig
from lakehouse_assets.core.read import duckdb_readers


def _storage(port: int) -> StorageConfig:
    return StorageConfig(endpoint_url=f"http://127.0.0.1:{port}", access_key_id="key", secret_access_key="secret")


def _sees_probe(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'probe'").fetchone()[0])


def test_connections_share_their_storages_database_its_extensions_and_secrets_not_what_each_registers():
    first, second = duckdb_readers.connect(_storage(1)), duckdb_readers.connect(_storage(1))
    first.execute("CREATE TABLE probe AS SELECT 1 AS x")  # in the database, not in the connection
    try:
        assert _sees_probe(second)
        for con in (first, second):
            assert con.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
            assert {"iceberg", "delta", "avro", "httpfs", "azure"} <= {
                r[0] for r in con.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()
            }
            assert [r[0] for r in con.execute("SELECT name FROM duckdb_secrets()").fetchall()] == ["lakehouse_s3"]
        first.register("mine", pa.table({"a": [1]}))
        assert first.execute("SELECT a FROM mine").fetchall() == [(1,)]
        with pytest.raises(Exception, match="mine"):
            second.execute("SELECT a FROM mine")
        assert not _sees_probe(duckdb_readers.connect(_storage(2))), "another storage shares the database"
        second.close()  # a caller closing its connection leaves the database to the others
        assert _sees_probe(first) and _sees_probe(duckdb_readers.connect(_storage(1)))
    finally:
        first.execute("DROP TABLE probe")


def test_the_process_keeps_a_few_databases_and_drops_the_oldest_first():
    duckdb_readers.connect(_storage(3)).execute("CREATE TABLE probe AS SELECT 1 AS x")
    for port in range(4, 4 + duckdb_readers._KEPT_DATABASES):
        duckdb_readers.connect(_storage(port))
    assert len(duckdb_readers._databases) == duckdb_readers._KEPT_DATABASES
    assert not _sees_probe(duckdb_readers.connect(_storage(3))), "the oldest database was kept"



def test_a_forked_child_makes_a_database_of_its_own():
    duckdb_readers.connect(_storage(20)).execute("CREATE TABLE probe AS SELECT 1 AS x")
    pid = os.fork()
    if pid == 0:  # the child exits 0 only if its connection answers and is not to the parent's database
        code = 1
        try:
            con = duckdb_readers.connect(_storage(20))
            code = 0 if not _sees_probe(con) and con.execute("SELECT 42").fetchone() == (42,) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _sees_probe(duckdb_readers.connect(_storage(20)))

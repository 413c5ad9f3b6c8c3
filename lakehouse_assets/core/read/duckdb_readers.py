"""Independent readers: DuckDB's iceberg and delta extensions, loaded offline from their PyPI packages.

Used by the demo and the tests to prove that engines other than ours read both formats the same.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..io.storage import StorageConfig, azure_parts


def _extension_path(name: str) -> str:
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"The PyPI package duckdb-extension-{name} is not installed (pip install duckdb-extension-{name}).")
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob(f"extensions/*/{name}.duckdb_extension"))
    if not found:
        raise RuntimeError(f"duckdb-extension-{name} holds no {name}.duckdb_extension file")
    return str(found[-1])


# Loading the five extensions into a new DuckDB database costs about 0.4 s (0.8 s of CPU) here, more than a deep
# check's queries on a small table: a process keeps one database per storage configuration (a few at most, the
# oldest dropped first) and gives each caller a connection of its own to it. A kept database adds about 3 MB to the
# process (the extensions' code is shared); a process that goes round more storages than it keeps (the conformance
# tests' five) would load the extensions again on every call.
_KEPT_DATABASES = 8
_databases: OrderedDict[StorageConfig | None, Any] = OrderedDict()
_databases_lock = threading.Lock()
# A forked child's copies of its parent's databases: never used (their worker threads stayed in the parent) and
# never freed (closing one waits for those threads: the child would crash).
_inherited: list = []


def _forget_the_parents_databases() -> None:
    global _databases_lock
    _inherited.extend(_databases.values())
    _databases.clear()
    _databases_lock = threading.Lock()  # another thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_forget_the_parents_databases)


def connect(storage: StorageConfig | None = None):
    """A DuckDB connection with avro, httpfs, azure, iceberg and delta loaded (no network), and the storage's secrets.

    Each call returns a new connection (`cursor()`) to the process's database for `storage`: connections share its
    extensions, settings and secrets, not their registered tables or transactions, and one may be used from another
    thread than its neighbours'. Closing it leaves the database to the next caller. A forked child makes its own."""
    with _databases_lock:
        database = _databases.get(storage)
        if database is None:
            database = _databases[storage] = _new_database(storage)
            while len(_databases) > _KEPT_DATABASES:
                _databases.popitem(last=False)
        _databases.move_to_end(storage)
        return database.cursor()


def _new_database(storage: StorageConfig | None):
    import duckdb

    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    con.execute("SET GLOBAL TimeZone='UTC'")  # GLOBAL: the connections made from it read timestamps in UTC too
    # A kept database would hold the blocks this cache keeps of the files it read, up to its memory limit, for the
    # life of the process.
    con.execute("SET enable_external_file_cache=false")
    # httpfs gives iceberg_scan its s3:// and gs:// reads, azure its az:// and abfss:// reads (delta_scan
    # brings its own object store client for the log, and reads data files through these).
    for name in ("avro", "httpfs", "azure", "iceberg", "delta"):
        con.execute(f"LOAD '{_extension_path(name)}'")
    if storage is not None and (storage.endpoint_url or storage.access_key_id):

        endpoint = urlparse(storage.endpoint_url) if storage.endpoint_url else None
        parts = ["TYPE s3", "URL_STYLE 'path'", f"REGION '{storage.region or 'us-east-1'}'"]
        if endpoint is not None:
            parts += [f"ENDPOINT '{endpoint.netloc}'", f"USE_SSL {'true' if endpoint.scheme == 'https' else 'false'}"]
        if storage.access_key_id:
            parts += [f"KEY_ID '{storage.access_key_id}'", f"SECRET '{storage.secret_access_key}'"]
        con.execute(f"CREATE OR REPLACE SECRET lakehouse_s3 ({', '.join(parts)})")
    if storage is not None and storage.gcs_endpoint_url:
        # DuckDB speaks GCS's S3-compatible XML API, which wants HMAC keys; an emulator ignores them. For real
        # GCS, create a secret with your HMAC key yourself (CREATE SECRET (TYPE gcs, KEY_ID ..., SECRET ...)).
        endpoint = urlparse(storage.gcs_endpoint_url)
        con.execute(
            f"CREATE OR REPLACE SECRET lakehouse_gcs (TYPE gcs, KEY_ID 'emulator', SECRET 'emulator', ENDPOINT '{endpoint.netloc}', "
            f"URL_STYLE 'path', USE_SSL {'true' if endpoint.scheme == 'https' else 'false'})"
        )
    if storage is not None and storage.azure_account_name:
        if storage.azure_account_key:
            parts = [f"AccountName={storage.azure_account_name}", f"AccountKey={storage.azure_account_key}"]
            if storage.azure_endpoint_url:
                endpoint = urlparse(storage.azure_endpoint_url)
                parts += [f"DefaultEndpointsProtocol={endpoint.scheme}", f"BlobEndpoint={storage.azure_endpoint_url.rstrip('/')}/{storage.azure_account_name}"]
            con.execute(f"CREATE OR REPLACE SECRET lakehouse_azure (TYPE azure, CONNECTION_STRING '{';'.join(parts)}')")
        else:
            con.execute(f"CREATE OR REPLACE SECRET lakehouse_azure (TYPE azure, PROVIDER credential_chain, ACCOUNT_NAME '{storage.azure_account_name}')")
    return con


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def iceberg_scan_sql(metadata_location: str) -> str:
    return f"iceberg_scan('{_local(metadata_location)}')"


def delta_scan_sql(location: str) -> str:
    if location.startswith("abfss://"):
        # az:// reads through the blob endpoint, which every Azure storage account (and Azurite) has.
        container, _, path = azure_parts(location)
        location = f"az://{container}/{path}"
    return f"delta_scan('{_local(location)}')"


def count_rows(con, table: dict) -> tuple[int, int]:
    """Row counts of a table (as listed by Lakehouse.tables()) read through iceberg_scan and delta_scan."""
    iceberg = con.execute(f"SELECT count(*) FROM {iceberg_scan_sql(table['iceberg_metadata_location'])}").fetchone()[0]
    delta = con.execute(f"SELECT count(*) FROM {delta_scan_sql(table['location'])}").fetchone()[0]
    return iceberg, delta

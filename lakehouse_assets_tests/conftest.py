"""Shared fixtures: one Spark session per test session, a fresh warehouse per test, independent readers."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import os
import shutil
import sys

import pytest

# The servers' fixtures (servers.py) are this conftest's, so each test session (each xdist worker) starts one of each
# at its first use and stops it at its end. Imported into a test module instead, a fixture is that module's own: every
# module that imported them started its own SeaweedFS and Postgres, all kept until the session's end.
from .servers import azurite, backend, fake_gcs, moto, postgres, seaweedfs, servers_dir  # noqa: F401 - fixtures

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
# Every Spark driver JVM the suite launches (this session's, the subprocesses' and `dagster dev`'s runs, the Connect
# server's: spark-submit adds SPARK_SUBMIT_OPTS to each) compiles with C1 only. The tests' JVMs live seconds to
# minutes on tiny data, where C2's optimising compiles cost CPU they never pay back: a demo run in a subprocess
# took 44-45 CPU seconds instead of 67-73 (wall 36-37 s instead of 41-44), and the suite is bound by CPU.
if "TieredStopAtLevel" not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:TieredStopAtLevel=1".strip()


def _remember_the_jvm_classes_names_resolve_to() -> None:
    """PySpark names JVM classes by their short names through py4j's view (`functions` in every `F.col` and `F.lit`,
    `PythonUtils` in every `select`, `SparkSession`), and py4j asks the JVM each time: the JVM tries the name under
    each of the view's wildcard imports in turn, and every miss searches all of Spark's jars (about 250) before it
    fails, 0.2-0.4 ms of the driver's CPU a name. The suite's helpers build many small frames: on
    test_merge_matching.py these lookups were 15% of the driver's sampled time, and remembering them took the module
    from 161 to 150 CPU seconds. The project's own small merge asks about 50 (10-20 ms of its 0.5 s): left to
    PySpark. A name that resolved to a class resolves to it for the JVM's life; packages and misses are asked again."""
    from py4j.java_gateway import JavaClass, JVMView

    ask_the_jvm = JVMView.__getattr__

    def remembering(view, name):
        found = ask_the_jvm(view, name)
        if isinstance(found, JavaClass):
            view.__dict__[name] = found  # later reads of the name are plain attribute reads
        return found

    JVMView.__getattr__ = remembering


_remember_the_jvm_classes_names_resolve_to()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        compile_project_sources()
    # And they start from a class-data-sharing archive of Spark's classes (spark_classes.py), made once per venv by the
    # first test session and handed to the xdist workers, which this process starts after it, through the environment.
    if not hasattr(config, "workerinput") and "SharedArchiveFile" not in os.environ["SPARK_SUBMIT_OPTS"]:
        from .spark_classes import jvm_options

        os.environ["SPARK_SUBMIT_OPTS"] = jvm_options(os.environ["SPARK_SUBMIT_OPTS"])


def compile_project_sources() -> None:
    """The project's own modules compiled to bytecode once, before the workers start. Where the environment sets
    PYTHONDONTWRITEBYTECODE (this machine's does), no import writes it, and every process the suite starts (the xdist
    workers, Spark's Python workers, Dagster's run and step processes, subprocesses of the CLI and the bench) would
    compile each of the project's modules it imports from source again. The venv's packages are compiled when
    installed (Makefile). compileall skips a module whose bytecode is current; an edited one is compiled again."""
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for package in ("lakehouse_assets", "lakehouse_assets_tests", "bench"):
        compileall.compile_dir(str(root / package), quiet=1)


# LAKEHOUSE_TEST_SPARK=connect (`make connect SPARK=4`): the `spark` fixture is a Spark Connect session to a server
# the suite starts in a process of its own, and every Spark session the project makes (the Dagster resource's too)
# goes there. Tests that use no Spark session from the fixture are deselected: they would only repeat the classic run.
CONNECT = os.environ.get("LAKEHOUSE_TEST_SPARK", "classic") == "connect"


def pytest_collection_modifyitems(config, items):
    # Modules marked `slow` go first: the workers (pytest-xdist, one module per worker at a time) then finish
    # together instead of one of them starting a multi-minute module at the end. A stable sort keeps the rest in order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if not CONNECT:
        return
    deselected = [item for item in items if "spark" not in getattr(item, "fixturenames", ())]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if "spark" in getattr(item, "fixturenames", ())]


@pytest.fixture(scope="session", autouse=True)
def spark_scratch_dirs(tmp_path_factory):
    """Every Spark process the suite starts (this one's, the subprocesses', `dagster dev`'s runs) keeps its scratch
    (block manager, PySpark's temporary files) under the session's temporary directory. A process the tests kill
    cannot remove its own; pytest removes old session directories. A folder the environment already names is kept."""
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(tmp_path_factory.mktemp("spark-local")))


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server in its own process (connect_server.py), stopped by its PID at the end."""
    from .connect_server import ConnectServer, available

    if not available():
        raise RuntimeError("LAKEHOUSE_TEST_SPARK=connect needs PySpark 4 (its package bundles the Spark Connect server): run `make connect SPARK=4`")
    server = ConnectServer(str(tmp_path_factory.mktemp("spark-connect")), conf={"spark.sql.shuffle.partitions": "4"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


_CLASSIC: dict = {}  # this process's classic session and the Java Iceberg warehouse it is made with


def _classic_session():
    """The test session's classic Spark session, with Java Iceberg's jars (Spark 3.5: `java_iceberg.available`) so any
    test can read a table with the reference implementation; the project's own code uses no jars. Made once per
    process, by the `spark` fixture or by the first project code that starts Spark itself (a pyarrow delete or merge
    in a test without the fixture), whichever comes first: the jars load only with the process's first session."""
    from lakehouse_assets.core.spark.session import spark_session

    from . import java_iceberg

    if "session" not in _CLASSIC:
        java = java_iceberg.spark_conf(_CLASSIC["java_warehouse"]) if java_iceberg.available() else {}
        # The status tracker that `spark_jobs` counts with keeps the last `spark.ui.retainedJobs` jobs (1,000 by default),
        # fewer than a worker's tests start: past it, the count would fall. (A job id is no count: a job of no partition
        # takes one and never runs.)
        conf = {"spark.sql.shuffle.partitions": "4", "spark.app.name": "lakehouse-tests", "spark.ui.retainedJobs": "1000000"}
        _CLASSIC["session"] = spark_session({**conf, **java})
    return _CLASSIC["session"]


@pytest.fixture(scope="session", autouse=True)
def project_sessions_are_the_tests_session(tmp_path_factory):
    """Project code that needs Spark and finds no session active starts the tests' own (`_classic_session`)."""
    from lakehouse_assets.core.spark.session import session_provider

    _CLASSIC["java_warehouse"] = str(tmp_path_factory.mktemp("java-iceberg-warehouse"))
    if CONNECT:
        yield
        return
    with session_provider(_classic_session):
        yield


@pytest.fixture(scope="session")
def spark(request, project_sessions_are_the_tests_session):
    from lakehouse_assets.core.spark.session import spark_session

    if CONNECT:
        server = request.getfixturevalue("connect_server")
        os.environ["LAKEHOUSE_SPARK_REMOTE"] = server.url  # every session the project makes, the Dagster resource's too
        session = spark_session({"spark.sql.shuffle.partitions": "4"})
        session.client._session_hooks.append(_ExecutionCounter())  # what `spark_jobs` counts on Connect
        yield session
        session.stop()
        os.environ.pop("LAKEHOUSE_SPARK_REMOTE", None)
        return

    session = _classic_session()
    yield session
    session.stop()


class _ExecutionCounter:
    """A Spark Connect session hook counting the plans the client sends the server to execute."""

    executed = 0

    def on_execute_plan(self, request):
        type(self).executed += 1
        return request


def spark_jobs(spark) -> int:
    """How many Spark jobs `spark` has started so far. A Connect client cannot see the server's jobs: every job
    it causes comes from a plan it sent to execute, so there it counts those (a check that none started is as strict)."""
    if CONNECT:
        return _ExecutionCounter.executed
    # The status tracker learns of jobs from Spark's listener bus, asynchronously: a job of the previous step (a read
    # that checked the last write) may be counted only after this count, as if the next step had started it.
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "warehouse")


@pytest.fixture
def lh(warehouse, monkeypatch):
    from lakehouse_assets import Lakehouse

    # Tests use the embedded catalog unless they configure another one themselves.
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    return Lakehouse(warehouse)


@pytest.fixture(scope="session")
def duck():
    from lakehouse_assets.core.read import duckdb_readers

    return duckdb_readers.connect()


@pytest.fixture
def dagster_resources(warehouse, spark):
    """The project's Dagster resources on the test warehouse and the session's Spark."""
    from lakehouse_assets.dagster.io_manager import LakehouseIOManager
    from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource

    lakehouse = LakehouseResource(warehouse=warehouse)
    pyspark = spark_resource()
    return {"lakehouse": lakehouse, "pyspark": pyspark, "io_manager": LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark)}


def materialization_metadata(result, key_path) -> dict:
    """The last materialization's metadata of the asset `key_path` in a Dagster run result."""
    mats = [m for m in result.get_asset_materialization_events() if m.asset_key.path == key_path]
    return {k: v.value for k, v in mats[-1].materialization.metadata.items()}


@contextlib.contextmanager
def unreadable_delta_log(table_location: str):
    """A real storage failure for Delta: the `_delta_log` folder is replaced by a file while the block runs,
    so delta-rs can neither read nor write the log; the folder is put back afterwards."""
    log_dir = os.path.join(table_location[len("file://"):] if table_location.startswith("file://") else table_location, "_delta_log")
    shutil.move(log_dir, log_dir + ".away")
    open(log_dir, "w").close()
    try:
        yield
    finally:
        os.remove(log_dir)
        shutil.move(log_dir + ".away", log_dir)


def _norm(v):
    """One value representation across readers (DuckDB, delta-rs, pyiceberg, Spark)."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v.normalize()) if v == v.to_integral() else str(v)
    if isinstance(v, float):
        return round(v, 9)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        # Arrow maps arrive as lists of (key, value) pairs.
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return tuple(sorted((k, _norm(x)) for k, x in v))
        return tuple(_norm(x) for x in v)
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def rows_of(records, columns=None) -> list[tuple]:
    out = []
    for r in records:
        r = r.asDict(recursive=True) if hasattr(r, "asDict") else r
        cols = columns or sorted(r)
        out.append(tuple(_norm(r[c]) for c in cols))
    return sorted(out, key=repr)


def read_everywhere(
    lh, spark, duck, identifier: str, *, snapshot_id=None, delta_version=None, duck_formats=("iceberg", "delta"), columns=None
) -> dict[str, list[tuple]]:
    """The table's rows through every reader of both formats, normalised and sorted.

    `duck_formats`: the formats DuckDB can read on this storage (an emulator may lack what its reader needs).
    `columns`: the columns to compare (default: the current schema's; time travel to before an added column
    needs the older ones)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from lakehouse_assets.core.read import duckdb_readers

    table = lh.load(identifier)
    columns = sorted(columns or (f.name for f in table.schema().fields))
    root = table.location()
    local_root = root[len("file://"):] if root.startswith("file://") else root
    # s3:// tables: delta-rs gets the lakehouse's storage options (and `duck` must hold an S3 secret,
    # e.g. duckdb_readers.connect(lh.storage)).
    delta_options = lh.storage.delta_options(root)
    if snapshot_id is None:
        snap = table.current_snapshot()
        snapshot_id = snap.snapshot_id if snap else None
    if delta_version is None:
        delta_version = DeltaTable(local_root, storage_options=delta_options).version()
    current_delta = DeltaTable(local_root, storage_options=delta_options).version()
    cols = ", ".join(f'"{c}"' for c in columns)

    def duck_rows(sql):
        res = duck.execute(sql)
        names = [d[0] for d in res.description]
        return rows_of([dict(zip(names, row)) for row in res.fetchall()], columns)

    out = {}
    if snapshot_id is not None:
        if "iceberg" in duck_formats:
            metadata = duckdb_readers.iceberg_scan_sql(table.metadata_location)[: -1] + f", snapshot_from_id={snapshot_id})"
            out["duckdb_iceberg"] = duck_rows(f"SELECT {cols} FROM {metadata}")
        out["pyiceberg"] = rows_of(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), columns)
        out["spark_iceberg"] = rows_of(lh.read(spark, identifier, snapshot_id=snapshot_id).collect(), columns)
    if delta_version == current_delta and "delta" in duck_formats:
        # DuckDB's delta_scan reads the latest version.
        out["duckdb_delta"] = duck_rows(f"SELECT {cols} FROM {duckdb_readers.delta_scan_sql(root)}")
    delta = DeltaTable(local_root, version=delta_version, storage_options=delta_options)
    if "deletionVectors" in (delta.protocol().reader_features or []):
        # delta-rs's pyarrow reader refuses the feature (even with no vector left); its DataFusion reader supports it.
        from deltalake import QueryBuilder

        out["delta_rs"] = rows_of(pa.table(QueryBuilder().register("t", delta).execute("SELECT * FROM t").read_all()).to_pylist(), columns)
    else:
        out["delta_rs"] = rows_of(pa.table(delta.to_pyarrow_table()).to_pylist(), columns)
    out["spark_delta"] = rows_of(lh.read(spark, identifier, delta_version=delta_version).collect(), columns)
    return out


def assert_all_readers_agree(lh, spark, duck, identifier: str, expected: list[tuple] | None = None, **kw) -> list[tuple]:
    results = read_everywhere(lh, spark, duck, identifier, **kw)
    reference_name, reference = next(iter(results.items()))
    for name, rows in results.items():
        assert rows == reference, f"{identifier}: {name} ({len(rows)} rows) differs from {reference_name} ({len(reference)} rows)"
    if expected is not None:
        assert reference == sorted(expected, key=repr), f"{identifier}: readers agree with each other but not with the expected rows"
    report = lh.verify(identifier)
    assert report["agree"], report["differences"]
    return reference


def assert_the_deep_check_finds_planted_change_data(lh, identifier: str, path: str, column: str) -> None:
    """`verify --deep` of `identifier` finds each of a value of `column` changed, a row left out and a row twice,
    planted alone in the change data file `path`; the file is put back after, and the check agrees again."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = pq.read_table(path)
    index = good.schema.get_field_index(column)
    planted = {
        "a value": good.set_column(index, good.schema.field(index), pa.array(["wrong"] * good.num_rows)),
        "a row left out": good.slice(1),
        "a row twice": pa.concat_tables([good, good.slice(0, 1)]),
    }
    for what, rows in planted.items():
        pq.write_table(rows, path)
        report = lh.verify(identifier, deep=True)
        assert not report["agree"] and any("change data files of Delta version" in d for d in report["differences"]), (what, report["differences"])
    pq.write_table(good, path)
    assert lh.verify(identifier, deep=True)["agree"]

"""Driver-side work that must not grow with a table's size or history (timings live in bench/, not here)."""

from __future__ import annotations

import os

from pyspark.sql import functions as F

from lakehouse_assets import TableOptions
from lakehouse_assets.core.formats import history
from lakehouse_assets.core.spark.parquet_relation import LISTING_THRESHOLD_KEY

from .conftest import assert_all_readers_agree, unreadable_delta_log


def _rows(spark, lo, hi):
    return spark.range(lo, hi, numPartitions=1).select(F.col("id"), (F.col("id") % 40).cast("int").alias("part"))


def test_reading_many_files_runs_no_listing_job(lh, spark):
    # 40 files: above Spark's parallel-listing threshold (32), which would run a Spark job per read to stat them.
    lh.write(_rows(spark, 0, 400), "o.many", partition_by=["part"])
    table = lh.load("o.many")
    assert len(list(table.scan().plan_files())) == 40
    before = spark.conf.get(LISTING_THRESHOLD_KEY)
    sc = spark.sparkContext
    sc.setJobGroup("read-many-files", "Lakehouse.read of 40 files")
    try:
        df = lh.read(spark, "o.many")
        assert list(sc.statusTracker().getJobIdsForGroup("read-many-files")) == []  # building the DataFrame ran no job
        assert sorted(r.id for r in df.select("id").collect()) == list(range(400))
        pruned = lh.read(spark, "o.many", row_filter="part = 7")
        assert sorted(r.id for r in pruned.select("id").collect()) == list(range(7, 400, 40))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert spark.conf.get(LISTING_THRESHOLD_KEY) == before  # the session's setting is restored


def test_history_walks_follow_parents_in_order(lh, spark):
    for i in range(6):
        lh.write(_rows(spark, i * 10, i * 10 + 10), "o.hist", write_id=f"w{i}")
    table = lh.load("o.hist")
    chain = list(history.ancestors(table))
    assert [s.snapshot_id for s in chain] == [s.snapshot_id for s in reversed(table.metadata.snapshots)]
    assert history.find_snapshot_by_write_id(table, "w2").snapshot_id == chain[3].snapshot_id
    after = history.snapshots_after(table, table.current_snapshot(), chain[2].sequence_number)
    assert [s.snapshot_id for s in after] == [chain[1].snapshot_id, chain[0].snapshot_id]


def _appended(lh, spark, identifier):
    for i in range(3):
        lh.write(_rows(spark, 0, 120).filter(F.col("id") % 3 == i).filter(F.col("part") < 4), identifier, partition_by=["part"])


def _check_compacted(lh, spark, duck, identifier, r):
    assert r["committed"] and r["files_rewritten"] == 12 and r["files_added"] == 4 and r["partitions_compacted"] == 4
    table = lh.load(identifier)
    files = [t.file for t in table.scan().plan_files()]
    assert sorted(f.partition[0] for f in files) == [0, 1, 2, 3]  # one file per partition, with its own partition value
    assert sorted(f.record_count for f in files) == [3, 3, 3, 3]
    expected = sorted((i, i % 40) for i in range(120) if i % 40 < 4)
    assert_all_readers_agree(lh, spark, duck, identifier, expected)


def test_compaction_of_many_small_files_lists_nothing_and_stays_exact(lh, spark, duck):
    _appended(lh, spark, "o.compact")
    _check_compacted(lh, spark, duck, "o.compact", lh.maintain("o.compact", "compaction", spark=spark))


class _Counts:
    """Counts, by wrapping, the history-sized work of one write: metadata JSON parses, deep copies of the
    table metadata, staged-metadata builds, catalog loads and Delta log loads."""

    def __init__(self, monkeypatch):
        import deltalake
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.table.metadata import TableMetadataUtil, TableMetadataV2

        from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer
        from lakehouse_assets.core.formats.iceberg import metadata as iceberg_metadata
        from lakehouse_assets.core.table import catalog

        self.calls: dict[str, int] = {}

        def counting(name, real):
            def wrapper(*args, **kwargs):
                self.calls[name] = self.calls.get(name, 0) + 1
                return real(*args, **kwargs)

            return wrapper

        monkeypatch.setattr(TableMetadataUtil, "parse_raw", staticmethod(counting("parse", TableMetadataUtil.parse_raw)))
        real_copy = TableMetadataV2.model_copy

        def model_copy(metadata, *args, deep=False, **kwargs):
            if deep:
                self.calls["deep_copy"] = self.calls.get("deep_copy", 0) + 1
            return real_copy(metadata, *args, deep=deep, **kwargs)

        monkeypatch.setattr(TableMetadataV2, "model_copy", model_copy)
        staged = counting("staged", iceberg_metadata.staged_metadata)
        monkeypatch.setattr(iceberg_committer, "staged_metadata", staged)
        monkeypatch.setattr(catalog, "staged_metadata", staged)
        monkeypatch.setattr(SqlCatalog, "load_table", counting("load", SqlCatalog.load_table))
        monkeypatch.setattr(deltalake.DeltaTable, "__init__", counting("delta_load", deltalake.DeltaTable.__init__))
        monkeypatch.setattr(deltalake.DeltaTable, "update_incremental", counting("delta_update", deltalake.DeltaTable.update_incremental))

    def __call__(self, fn):
        self.calls.clear()
        result = fn()
        return result, dict(self.calls)


def test_a_write_does_no_work_that_grows_with_history(lh, spark, duck, monkeypatch):
    """On a table with many snapshots, one append parses no metadata JSON (the one it committed last is
    remembered under its location), copies no history, builds its staged metadata once per staged change
    and loads the Delta log once (bringing it up to date before each commit) without reading its own commit back;
    a later write in the process loads it not at all, following the log the write before it read. pyiceberg alone
    parsed the JSON twice, deep-copied every snapshot three times and built the staged metadata ~20 times per
    commit; the mirror loaded the Delta log twice and merged its own commit back into it."""
    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.formats.delta.kept_logs import KEPT

    for i in range(12):
        lh.write(_rows(spark, i * 10, i * 10 + 10), "o.meta", partition_by=["part"])
    counts = _Counts(monkeypatch)
    KEPT.clear()  # as in a process's first write of the table
    r, calls = counts(lambda: lh.write(_rows(spark, 120, 130), "o.meta"))
    assert calls.get("parse", 0) == 0 and calls.get("deep_copy", 0) == 0, calls
    assert 1 <= calls["staged"] <= 4, calls  # the snapshot and its branch ref (transaction), the catalog's commit
    assert calls["load"] <= 2 and calls["delta_load"] == 1, calls  # our load and the commit's compare-and-swap base
    # The log read once, before anything is written (versions of other engines are refused then), and brought up to
    # date once, before the Iceberg commit (reading only the versions since, to catch another engine's racing commit);
    # the Delta commit is put-if-absent, so a version landing after that fails it and the retry reads the log again
    # (test_foreign_delta's racing commit); the commit is not read back (it replays every live file).
    assert calls.get("delta_update", 0) <= 1, calls
    table = lh.load("o.meta")
    assert table.current_snapshot().snapshot_id == r.iceberg_snapshot_id and len(table.metadata.snapshots) == 13
    assert table.current_snapshot().summary["total-records"] == "130"

    # Another writer (its own catalog connection, like another process or engine) commits in between:
    # the next write reads the new location from the catalog, parses that file once and commits on top of it.
    other = Lakehouse(lh.warehouse)
    theirs = other.write(_rows(spark, 130, 140), "o.meta")
    r, calls = counts(lambda: lh.write(_rows(spark, 140, 150), "o.meta"))
    assert calls.get("parse", 0) == 1 and calls.get("deep_copy", 0) == 0, calls
    # The Delta log the write before it read (the other writer's, in this process), brought up to date twice:
    # before the job and before the Iceberg commit.
    assert calls.get("delta_load", 0) == 0 and calls.get("delta_update", 0) <= 2, calls
    table = other.load("o.meta")
    assert table.current_snapshot().snapshot_id == r.iceberg_snapshot_id
    assert table.current_snapshot().parent_snapshot_id == theirs.iceberg_snapshot_id
    assert table.current_snapshot().summary["total-records"] == "150"
    assert_all_readers_agree(lh, spark, duck, "o.meta", sorted((i, i % 40) for i in range(150)))


def test_a_commit_on_stale_metadata_is_still_refused(lh, spark):
    """The remembered metadata never replaces the catalog's: a commit based on a snapshot that is no longer
    current fails its requirement, and the catalog row's compare-and-swap still guards the update."""
    import pytest
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate

    from lakehouse_assets import Lakehouse

    lh.write(_rows(spark, 0, 10), "o.stale")
    stale = lh.load("o.stale")
    Lakehouse(lh.warehouse).write(_rows(spark, 10, 20), "o.stale")  # another writer moves the table on
    with pytest.raises(CommitFailedException):
        lh.catalog.commit_table(stale, (AssertRefSnapshotId(ref="main", snapshot_id=stale.current_snapshot().snapshot_id),), (SetPropertiesUpdate(updates={"k": "v"}),))
    assert lh.load("o.stale").properties.get("k") is None
    # pyiceberg's own commit through the stale table object is re-based on the current metadata (its retry).
    with stale.transaction() as tx:
        tx.set_properties(k="v")
    fresh = lh.load("o.stale")
    assert fresh.properties["k"] == "v" and fresh.current_snapshot().summary["total-records"] == "20"


def test_health_opens_only_the_manifests_a_write_added(lh, spark, monkeypatch):
    from lakehouse_assets.core.formats.iceberg import committer as ic
    from lakehouse_assets.core.maintenance import health
    from lakehouse_assets.core.maintenance.compaction import plan_compaction
    from lakehouse_assets.core.maintenance.settings import MaintenanceSettings

    _appended(lh, spark, "o.health")  # 3 appends of 4 small files each: 12 small files, 4 compactable partitions
    opened = []
    read = health._ManifestFigures.read.__func__
    monkeypatch.setattr(health._ManifestFigures, "read", classmethod(lambda cls, t, m, b: opened.append(m.manifest_path) or read(cls, t, m, b)))

    def figures_from_every_file():
        table = lh.load("o.health")
        settings = MaintenanceSettings.for_table(table)
        files = ic.live_data_files(table)
        return {
            "data_files": len(files),
            "data_bytes": sum(f.file_size_in_bytes for f in files),
            "small_files": sum(f.file_size_in_bytes < settings.small_file_bytes for f in files),
            "compactable_files": sum(len(g) for g in plan_compaction(table, settings, files)),
        }

    first = health.table_health(lh.context, "o.health")
    assert {k: first[k] for k in figures_from_every_file()} == figures_from_every_file()
    assert first["data_files"] == 12 and first["compactable_files"] == 12
    assert opened  # each manifest once
    opened.clear()
    assert health.table_health(lh.context, "o.health")["data_files"] == 12
    assert opened == []  # nothing new: no manifest opened again
    lh.write(_rows(spark, 1000, 1010).withColumn("part", F.lit(9)), "o.health", partition_by=["part"])
    table = lh.load("o.health")
    added = {m.manifest_path for m in table.current_snapshot().manifests(table.io) if m.added_snapshot_id == table.current_snapshot().snapshot_id}
    again = health.table_health(lh.context, "o.health")
    assert set(opened) == added  # only the manifests the last write wrote
    assert {k: again[k] for k in figures_from_every_file()} == figures_from_every_file()
    assert again["data_files"] == 13


def _worker_invalidation(_):
    """In a Python worker: which zip invalidation is installed, and how long the per-task invalidation takes."""
    import importlib
    import time
    import zipimport

    started = time.perf_counter()
    importlib.invalidate_caches()  # what PySpark's worker runs before every task
    yield zipimport.zipimporter.invalidate_caches.__name__, time.perf_counter() - started


def test_python_workers_keep_sparks_own_archives_indexed(spark):
    """The session's Python workers run our daemon: Spark's zips/jars on their path are not re-read per task."""
    assert spark.conf.get("spark.python.daemon.module") == "lakehouse_assets.core.spark.daemon"
    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_invalidation).collect()
    assert {name for name, _ in seen} == {"_invalidate_unless_spark_archive"}


def _pyspark_origin(_):
    """In a Python worker: where its PySpark came from, and whether Spark's zip is on its path at all."""
    import os
    import sys

    import pyspark

    yield pyspark.__file__, any(os.path.basename(p) == "pyspark.zip" for p in sys.path)


def test_python_workers_import_the_installed_pyspark_compiled_not_its_zip(spark):
    """The suite's PySpark is pip-installed: the daemon takes the zip Spark puts first on the workers' path (the same
    modules, never compiled) off it, and its workers import the package's compiled modules."""
    import os

    import pyspark

    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_pyspark_origin).collect()
    assert {origin for origin, _ in seen} == {pyspark.__file__} and not any(on_path for _, on_path in seen), seen
    assert os.path.isfile(os.path.join(os.path.dirname(pyspark.__file__), "python", "lib", "pyspark.zip"))  # what Spark puts on the path


def test_a_pyspark_zip_of_another_installation_stays_first(tmp_path):
    """A cluster's SPARK_HOME zip is not the installed package's: the daemon leaves it where Spark put it."""
    import subprocess
    import sys
    import zipfile

    spark_home_zip = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"
    spark_home_zip.parent.mkdir(parents=True)
    with zipfile.ZipFile(spark_home_zip, "w") as z:
        z.writestr("pyspark/__init__.py", "FROM_THE_ZIP = True\n")
    script = "import sys; import lakehouse_assets.core.spark.daemon; import pyspark; print(pyspark.__file__)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(spark_home_zip)}).stdout.strip()
    assert out == str(spark_home_zip / "pyspark" / "__init__.py")


def _frozen_objects(_):
    """In a Python worker: how many objects its garbage collections skip (frozen before the daemon forked it)."""
    import gc

    yield gc.get_freeze_count()


def test_python_workers_collect_only_what_their_tasks_made(spark):
    """PySpark's reused workers run a full gc.collect() after every task. The daemon froze the libraries it preloaded
    (pyarrow, pandas, pyiceberg: over 100,000 objects) before forking, so that collection walks the task's objects only."""
    counts = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_frozen_objects).collect()
    assert min(counts) > 50_000, counts


def _worker_input_reader(_):
    """In a Python worker: the raw readers of its open buffered inputs (PySpark's `infile` among them)."""
    import gc
    import io

    yield sorted({type(o.raw).__name__ for o in gc.get_objects() if isinstance(o, io.BufferedReader) and not o.closed})


def test_python_workers_read_their_input_acknowledging_it_at_once(spark):
    """The daemon's workers read the executor's socket through QuickAckReader (core/spark/worker_socket.py): a
    reused worker would otherwise hold its ACK for the kernel's 40 ms delayed-ACK timer, and the executor's last
    segment with it."""
    readers = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_input_reader).collect()
    assert all("QuickAckReader" in names for names in readers), readers


def test_quick_ack_reader_reads_a_socket_exactly(tmp_path):
    """What the worker reads through QuickAckReader is byte for byte what was sent, in reads of any size, up to the end."""
    import io
    import random
    import socket
    import threading

    from lakehouse_assets.core.spark.worker_socket import QuickAckReader, applies_to

    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()
    listener.close()
    assert applies_to(receiver)
    rnd = random.Random(7)
    chunks = [rnd.randbytes(n) for n in (1, 4, 65_536, 65_537, 3, 200_000, 17)]
    sent = threading.Thread(target=lambda: (sender.sendall(b"".join(chunks)), sender.close()))
    sent.start()
    infile = io.BufferedReader(QuickAckReader(os.dup(receiver.fileno()), receiver), 65_536)
    got = [infile.read(len(c)) for c in chunks]
    sent.join()
    assert got == chunks and infile.read(1) == b""
    infile.close()
    receiver.close()

    left, right = socket.socketpair()  # not TCP: the worker reads as PySpark's does
    assert not applies_to(left)
    left.close()
    right.close()


def test_a_reused_workers_tasks_each_read_through_one_quick_ack_reader():
    """PySpark's daemon calls `worker` once per task of a reused worker: every task's input is a QuickAckReader over
    the real `os`, however many tasks the worker ran before."""
    import socket
    import types

    from lakehouse_assets.core.spark.worker_socket import QuickAckReader, reading_with_quick_acks

    daemon = types.ModuleType("pyspark_daemon")
    daemon.os = os
    seen = []

    def pyspark_worker(sock, authenticated):  # what PySpark's worker does with the socket first
        infile = daemon.os.fdopen(daemon.os.dup(sock.fileno()), "rb", 65536)
        seen.append((type(infile.raw), daemon.os._real))
        infile.close()
        return 0

    daemon.worker = pyspark_worker
    worker = reading_with_quick_acks(daemon)
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as sock:
        for _ in range(3):
            assert worker(sock, True) == 0
    assert seen == [(QuickAckReader, os)] * 3


def test_every_module_the_daemon_preloads_loads():
    """The daemon skips a module that fails to load (its tasks import it as before): a misspelt name would silently
    cost every fresh worker that import again. Each one loads in this environment, the one the executors run."""
    import subprocess
    import sys

    from lakehouse_assets.core.spark.daemon import PRELOADED

    script = "import sys; from lakehouse_assets.core.spark.daemon import PRELOADED, preload; preload(); print([n for n in PRELOADED if n not in sys.modules])"
    missing = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert missing == "[]", f"not loaded: {missing}"
    assert "lakehouse_assets.core.write.parquet_files" in PRELOADED


def test_writes_of_equal_settings_share_one_python_udf_and_name_files_by_their_own_write(lh, spark, duck):
    """A stream's batches are writes of equal settings: the file writer's Python UDF is made (pickled, registered
    in the JVM) once, and each write's files still carry that write's id (which its failure cleanup removes by)."""
    from lakehouse_assets.core.spark import compat

    lh.write(_rows(spark, 0, 10), "db.shared_udf")
    before = set(compat._UDFS[spark.sparkContext])
    for lo in (10, 20):
        lh.write(_rows(spark, lo, lo + 10), "db.shared_udf", "append")
    assert set(compat._UDFS[spark.sparkContext]) == before  # no new UDF for the appends
    files = [os.path.basename(task.file.file_path) for task in lh.load("db.shared_udf").scan().plan_files()]
    write_ids = {name.split("-")[0] for name in files}  # <write id>-<task attempt>-<sequence>.parquet
    assert len(files) == 3, files
    assert len(write_ids) == 3
    assert_all_readers_agree(lh, spark, duck, "db.shared_udf", expected=[(i, i % 40) for i in range(30)])


def test_a_write_task_keeps_sparks_archives_indexed_in_any_session(tmp_path, monkeypatch):
    """A session without the project's daemon (a user's own SparkSession): the first write task a worker runs
    installs the invalidation, so the worker's later tasks skip re-reading Spark's archives."""
    import os
    import zipimport

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from lakehouse_assets.core.io.storage import StorageConfig
    from lakehouse_assets.core.schema.type_mapping import arrow_file_schema
    from lakehouse_assets.core.spark import archives
    from lakehouse_assets.core.write.parquet_files import FileWriter

    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", archives._invalidate_zip)  # a worker of a plain session
    schema = arrow_file_schema(Schema(NestedField(1, "id", LongType())))
    writer = FileWriter(f"file://{tmp_path}", "w1", schema, StorageConfig(), 1 << 30)
    rows = [r for b in writer(iter([pa.record_batch([pa.array([1, 2], pa.int64())], schema=schema)])) for r in b.to_pylist()]
    assert [r["record_count"] for r in rows] == [2]
    assert zipimport.zipimporter.invalidate_caches.__name__ == "_invalidate_unless_spark_archive"
    pyspark_dir = next(iter(archives._spark_archive_roots()))  # the installation whose archives are kept
    assert os.path.isfile(os.path.join(pyspark_dir, "python", "lib", "pyspark.zip"))


def test_other_archives_are_still_invalidated(tmp_path, monkeypatch):
    """A zip outside Spark's installation (e.g. from addPyFile) is re-read, so a module added to it is found."""
    import importlib
    import sys
    import zipfile

    from lakehouse_assets.core.spark.archives import keep_spark_archives_indexed

    keep_spark_archives_indexed()
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("first_dep.py", "X = 1\n")
    monkeypatch.syspath_prepend(str(archive))
    assert importlib.import_module("first_dep").X == 1
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("second_dep.py", "X = 2\n")
    importlib.invalidate_caches()
    assert importlib.import_module("second_dep").X == 2
    for name in ("first_dep", "second_dep"):
        sys.modules.pop(name, None)


def test_a_delta_change_after_an_unread_commit_still_fails_verify(lh, spark):
    """The mirror does not read its own last Delta commit back: a Delta-side change made right after it
    (another engine deleting rows through delta-rs) must still make the formats disagree, and stay visible."""
    from deltalake import DeltaTable

    lh.write(_rows(spark, 0, 20), "o.planted", partition_by=["part"])
    lh.write(_rows(spark, 20, 40), "o.planted")
    assert lh.verify("o.planted")["agree"]
    DeltaTable(lh.load("o.planted").location()).delete("id = 3")  # rewrites one file on the Delta side only
    assert not lh.verify("o.planted")["agree"]


def test_repeated_reads_of_one_table_state_plan_once(lh, spark, monkeypatch):
    """Reads of one (metadata file, snapshot, filter) plan once per process; any commit, a schema change
    without a snapshot, another filter or an older snapshot plans afresh and sees its own rows."""
    from pyiceberg.table import DataScan

    plans = []
    real = DataScan.plan_files
    monkeypatch.setattr(DataScan, "plan_files", lambda self: plans.append(1) or real(self))
    lh.write(_rows(spark, 0, 40), "o.plans", partition_by=["part"], table=TableOptions(formats=["iceberg"]))
    first = lh.load("o.plans").current_snapshot().snapshot_id

    def ids(**kw):
        return sorted(r.id for r in lh.read(spark, "o.plans", **kw).select("id").collect())

    assert ids(row_filter="part < 3") == [0, 1, 2] and len(plans) == 1
    assert ids(row_filter="part < 3") == [0, 1, 2] and len(plans) == 1  # the same state: no plan
    assert ids(row_filter="part < 2") == [0, 1] and len(plans) == 2  # another filter
    lh.write(_rows(spark, 40, 42), "o.plans")  # a commit: a new metadata file
    assert ids(row_filter="part < 3") == [0, 1, 2, 40, 41] and len(plans) == 3
    assert ids(snapshot_id=first, row_filter="part < 3") == [0, 1, 2] and len(plans) == 4
    lh.alter("o.plans", rename={"part": "p"})  # no snapshot, a new metadata file
    assert ids(row_filter="p < 3") == [0, 1, 2, 40, 41] and len(plans) == 5


def test_repeated_reads_of_the_same_files_build_sparks_relation_once(lh, spark, monkeypatch):
    """Spark's relation over a planned file list is made once per session, schema and list (data files never
    change); each read still gets its own DataFrame with columns of its own, and a commit or a schema change
    makes a new relation."""
    from lakehouse_assets.core.spark import parquet_relation

    made = []
    real = parquet_relation._parquet
    monkeypatch.setattr(parquet_relation, "_parquet", lambda *a: made.append(1) or real(*a))
    lh.write(_rows(spark, 0, 40).withColumn("note", F.lit("n")), "o.relations", partition_by=["part"], table=TableOptions(formats=["iceberg"]))

    def ids(df):
        return sorted(r.id for r in df.select("id").collect())

    first, again = lh.read(spark, "o.relations", row_filter="part = 3"), lh.read(spark, "o.relations", row_filter="part = 3")
    assert ids(first) == ids(again) == [3] and len(made) == 1
    first.cache()
    assert first.is_cached and not again.is_cached
    first.unpersist()
    # Two reads of one snapshot are two relations to Spark (columns of their own): a self-join means what it says.
    a, b = lh.read(spark, "o.relations"), lh.read(spark, "o.relations")
    assert sorted(r.id for r in a.join(b, a.id == b.id + 1).select(a.id).collect()) == list(range(1, 40)) and len(made) == 2
    assert ids(lh.read(spark, "o.relations", row_filter="part = 4")) == [4] and len(made) == 3  # other files
    lh.write(_rows(spark, 40, 44).withColumn("note", F.lit("n")), "o.relations")  # part 0..3 get a second file each
    assert ids(lh.read(spark, "o.relations", row_filter="part = 3")) == [3, 43] and len(made) == 4
    lh.alter("o.relations", drop=["note"])  # the same files, read with another schema
    df = lh.read(spark, "o.relations", row_filter="part = 3")
    assert ids(df) == [3, 43] and df.columns == ["id", "part"] and len(made) == 5


def test_the_spark_resource_starts_spark_on_first_use_and_imports_the_lakehouse_meanwhile(tmp_path):
    """A Dagster step is a fresh process: the project's Spark resource starts no JVM at setup; the first
    `spark_session` starts it and imports the lakehouse's modules on a thread meanwhile, joined before the session is
    handed over (no import runs on two threads after)."""
    import subprocess
    import sys

    code = (
        "import sys, threading\n"
        "from dagster import build_init_resource_context\n"
        "from pyspark import SparkContext\n"
        "from lakehouse_assets.dagster.resources import LAKEHOUSE_MODULES, spark_resource\n"
        "before = [m for m in LAKEHOUSE_MODULES if m in sys.modules]\n"
        "r = spark_resource({'spark.master': 'local[1]'})\n"
        "r.setup_for_execution(build_init_resource_context())\n"
        "print(before, SparkContext._gateway is None)\n"
        "session = r.spark_session\n"
        "print([m for m in LAKEHOUSE_MODULES if m not in sys.modules])\n"
        "print([t.name for t in threading.enumerate() if t.name == 'lakehouse-imports'])\n"
        "print(session.range(3).count(), r.spark_session is session)\n"
        "session.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-4:] == ["[] True", "[]", "[]", "3 True"]


def test_runs_that_need_no_spark_start_none_and_a_repair_that_does_uses_the_resources_settings(lh, spark, tmp_path):
    """The formats_agree check and the metadata-only maintenance operations need no Spark: a run of the check alone
    (the UI's "Execute" on a check) and a maintenance run of expiry, a checkpoint and the repair of an append, in a
    fresh process as Dagster runs them, never start a JVM. A repair that must write change data (Delta lags an
    overwrite) does need Spark: it starts it through the resource, with the resource's settings, not the
    project's defaults."""
    import subprocess
    import sys

    lh.write(spark.range(5).select("id"), "lazy.people")
    # A map column: the overwrite's change data is compared by a Spark job (core/read/arrow_changes.py groups no nested column).
    rows = {"append": ["id"], "overwrite": ["id", "map('k', id) AS tags"]}
    for name, mode in (("lazy.appended", "append"), ("lazy.overwritten", "overwrite")):  # Delta lags one commit
        lh.write(spark.range(5).selectExpr(*rows[mode]), name)
        with unreadable_delta_log(lh.load(name).location()):
            assert lh.write(spark.range(3).selectExpr(*rows[mode]), name, mode=mode).delta_lagging
    code = (
        "import sys\n"
        "from dagster import AssetSelection, asset, materialize\n"
        "from dagster_pyspark import PySparkResource\n"
        "from pyspark import SparkContext\n"
        "from pyspark.sql import SparkSession\n"
        "from lakehouse_assets.dagster.checks import build_formats_agree_checks\n"
        "from lakehouse_assets.dagster.io_manager import LakehouseIOManager\n"
        "from lakehouse_assets.dagster.maintenance import lakehouse_maintenance_job, maintenance_run_config\n"
        "from lakehouse_assets.dagster.resources import LakehouseResource, spark_resource\n"
        "@asset(key=['lazy', 'people'])\n"
        "def people(pyspark: PySparkResource):\n"
        "    return pyspark.spark_session.range(5)\n"
        "checks = build_formats_agree_checks([people.key])\n"
        "lakehouse = LakehouseResource(warehouse=sys.argv[1])\n"
        "pyspark = spark_resource({'spark.master': 'local[1]', 'spark.app.name': 'the-resources-settings'})\n"
        "resources = {'lakehouse': lakehouse, 'pyspark': pyspark, 'io_manager': LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark)}\n"
        "result = materialize([people, *checks], resources=resources, selection=AssetSelection.checks(*checks))\n"
        "print([e.asset_check_evaluation_data.passed for e in result.all_events if e.event_type_value == 'ASSET_CHECK_EVALUATION'])\n"
        "print(result.success, SparkContext._gateway is None)\n"
        "def maintain(table, operations):\n"
        "    run = lakehouse_maintenance_job.execute_in_process(run_config=maintenance_run_config([table], operations), resources={'lakehouse': lakehouse, 'pyspark': pyspark})\n"
        "    return run.success, len([e for e in run.all_events if e.event_type_value == 'ASSET_OBSERVATION'])\n"
        "print(*maintain('lazy.appended', ['repair', 'snapshot_expiry', 'delta_checkpoint']), SparkContext._gateway is None)\n"
        "print(*maintain('lazy.overwritten', ['repair']), SparkSession.getActiveSession().conf.get('spark.app.name'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LAKEHOUSE_CATALOG"}  # the warehouse's embedded catalog, as `lh`
    done = subprocess.run([sys.executable, "-c", code, lh.warehouse], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-4:] == ["[True]", "True True", "True 3 True", "True 1 the-resources-settings"]
    for name in ("lazy.appended", "lazy.overwritten"):
        assert lh.delta_lag(name) == 0 and lh.verify(name)["agree"]

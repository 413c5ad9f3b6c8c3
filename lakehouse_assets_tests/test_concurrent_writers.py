"""Concurrent writers, as a Dagster backfill launches them: every write that does not conflict lands on its first call,
and a real conflict is refused naming the other write.

The writers of the first tests are processes of their own (concurrent_writers.py) that write pyarrow frames, so none
starts a JVM, and a barrier holds each before its commit so that all commit at once. On the embedded catalog they
queue on the table's commit lock (core/table/commit_lock.py) and each commits once, in turn; without the lock (as on a
REST or Glue catalog) their commits race, and the losers re-validate against what landed (core/write/conflicts.py) and
commit again. Either way each Delta version follows its snapshot in order. The other tests stage a race inside this
process, through the commit seam the merge tests use.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import CommitConflict, MergeOptions, Window
from lakehouse_assets.core.properties import DELTA_APP_ID, DeltaCommitKeys

from . import concurrent_writers as cw
from .conftest import assert_all_readers_agree, assert_the_deep_check_finds_planted_change_data, rows_of

pytestmark = pytest.mark.slow  # processes of their own: scheduled first (conftest.py)

T = "bf.events"
DAYS = 6
ROWS = 2_000


def _populated(lh, days: int = DAYS) -> None:
    """The table as a first materialization leaves it: every day already holds rows (version 0)."""
    lh.write(pa.concat_tables([cw.rows(i, ROWS) for i in range(days)]), T, partition_by=["day"])


def _expected(versions: dict[int, int]) -> list[tuple]:
    return rows_of([r for i, v in versions.items() for r in cw.rows(i, ROWS, v).to_pylist()])


def _delta_follows_iceberg(lh) -> None:
    """One Delta version per Iceberg snapshot, in Iceberg's order, each tagged with its snapshot; the txn says the last."""
    table = lh.load(T)
    delta = DeltaTable(table.location())
    tagged = sorted((c["version"], int(c[DeltaCommitKeys.ICEBERG_SNAPSHOT_ID])) for c in delta.history() if DeltaCommitKeys.ICEBERG_SNAPSHOT_ID in c)
    sequence = {s.snapshot_id: s.sequence_number for s in table.snapshots()}
    assert [s for _, s in tagged] == sorted(sequence, key=sequence.get), "Delta versions out of Iceberg's order"
    assert [v for v, _ in tagged] == list(range(1, len(sequence) + 1))  # version 0 creates the Delta table
    assert delta.transaction_version(DELTA_APP_ID) == table.current_snapshot().sequence_number


@pytest.mark.parametrize("lock", [True, False], ids=["commit-lock", "racing"])
def test_disjoint_partition_overwrites_at_once_all_land_and_their_feed_is_exact(lh, spark, duck, warehouse, lock):
    _populated(lh)
    results = cw.run({"warehouse": warehouse}, T, list(range(DAYS)), ROWS, lock=lock)
    assert [r["ok"] for r in results] == [True] * DAYS, [r.get("trace") for r in results if not r["ok"]]
    if lock:  # in turn: each read what the ones before it committed, and committed once
        assert [r["attempts"] for r in results] == [1] * DAYS
    else:  # they raced: the losers re-validated and committed again
        assert max(r["attempts"] for r in results) > 1
    assert not any(r["delta_lagging"] for r in results)
    assert sorted(r["delta_version"] for r in results) == list(range(2, DAYS + 2))
    _delta_follows_iceberg(lh)
    assert_all_readers_agree(lh, spark, duck, T, _expected({i: 1 for i in range(DAYS)}))
    assert lh.verify(T, deep=True)["agree"]
    # Each writer computed its change data in its own process (no Spark there): the feed holds exactly the rows each
    # overwrite changed, the odd ids' old and new values, as `Lakehouse.changes` says.
    first = lh.load(T).snapshots()[0]
    columns = ["id", "value", "_change_type", "_commit_version"]
    changes = sorted(tuple(r[c] for c in columns) for r in lh.changes(T, first.snapshot_id).collect())
    feed = pa.table(DeltaTable(lh.load(T).location()).load_cdf(starting_version=2).read_all()).to_pylist()
    assert sorted(tuple(r[c] for c in columns) for r in feed) == changes
    assert len(changes) == DAYS * ROWS  # half of each day's rows, once deleted and once inserted


@pytest.mark.parametrize("lock", [True, False], ids=["commit-lock", "racing"])
def test_two_overwrites_of_the_same_partition_one_lands_and_the_other_is_refused_naming_it(lh, spark, duck, warehouse, lock):
    _populated(lh, 2)
    results = cw.run({"warehouse": warehouse}, T, [1, 1], ROWS, lock=lock)
    landed = [r for r in results if r["ok"]]
    refused = [r for r in results if not r["ok"]]
    assert len(landed) == 1 and len(refused) == 1, results
    assert refused[0]["error"].startswith(f"CommitConflict: Table {T}: the overwrite conflicts with a concurrent write: snapshot {landed[0]['snapshot']} (overwrite-window")
    assert "file(s) inside day in [2024-01-02, 2024-01-03), which this write replaces" in refused[0]["error"]
    assert "Nothing was committed and the written files were removed" in refused[0]["error"]
    _delta_follows_iceberg(lh)
    assert_all_readers_agree(lh, spark, duck, T, _expected({0: 0, 1: 1}))
    table = lh.load(T)
    referenced = {e.data_file.file_path for s in table.snapshots() for m in s.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=False)}
    on_disk = {f"file://{os.path.join(d, n)}" for d, _, names in os.walk(os.path.join(warehouse, "bf", "events", "data")) for n in names}
    assert on_disk == referenced  # the refused write's files are gone


CHANGE_DATA_BEFORE_THE_LOCK = """
import sys

import pyarrow as pa

from lakehouse_assets import Lakehouse, Window
from lakehouse_assets.core.formats.iceberg import committer as ic
from lakehouse_assets.core.read import arrow_changes
from lakehouse_assets_tests import concurrent_writers as cw

lh = Lakehouse(warehouse=sys.argv[1])
lh.write(pa.concat_tables([cw.rows(i, 100) for i in range(2)]), "bf.events", partition_by=["day"])


def computed_by_the_mirror(*args, **kwargs):
    raise AssertionError("the mirror computed the overwrite's change data while holding the commit lock's Delta stage")


arrow_changes.small_change_rows = computed_by_the_mirror
result = lh.write(cw.rows(0, 100, 2), "bf.events", mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
assert not result.delta_lagging, result.warnings


def catalog_down(*args, **kwargs):
    raise OSError("the catalog is down")


ic.commit_files = catalog_down
try:
    lh.write(cw.rows(1, 100, 2), "bf.events", mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
except Exception as e:
    print("refused:", type(e).__name__)
"""


def test_a_frame_overwrite_writes_its_change_data_before_the_commit_and_a_failed_commit_removes_it(spark, tmp_path):
    """A write without Spark (a process of its own, as a backfill's run) writes its overwrite's change data before it
    commits, so the mirror only writes the Delta version while it holds the commit lock's Delta stage; the feed is the
    rows the overwrite changed, and a commit that fails removes those files with the data files."""
    from lakehouse_assets import Lakehouse

    warehouse = tmp_path / "warehouse"
    done = subprocess.run([sys.executable, "-c", CHANGE_DATA_BEFORE_THE_LOCK, str(warehouse)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-4000:]
    assert "refused: " in done.stdout, done.stdout
    lh = Lakehouse(str(warehouse))
    table = lh.load(T)
    first = table.snapshots()[0]
    columns = ["id", "value", "_change_type", "_commit_version"]
    changes = sorted(tuple(r[c] for c in columns) for r in lh.changes(T, first.snapshot_id).collect())
    feed = pa.table(DeltaTable(table.location()).load_cdf(starting_version=2).read_all()).to_pylist()
    assert sorted(tuple(r[c] for c in columns) for r in feed) == changes and len(changes) == 100  # day 0's odd ids, out and in
    root = os.path.join(str(warehouse), "bf", "events")
    referenced = set()
    for name in os.listdir(os.path.join(root, "_delta_log")):
        if name.endswith(".json"):
            with open(os.path.join(root, "_delta_log", name)) as f:
                referenced |= {json.loads(line)["cdc"]["path"] for line in f if '"cdc"' in line}
    assert set(os.listdir(os.path.join(root, "_change_data"))) == {os.path.basename(p) for p in referenced}  # the failed write's are gone
    # The deep check recomputes that change data from the files the snapshot replaced: a value changed, a row left out
    # or a row twice in it is a difference, each alone.
    assert lh.verify(T, deep=True)["agree"]
    (path,) = [os.path.join(root, p) for p in referenced]
    assert_the_deep_check_finds_planted_change_data(lh, T, path, "value")


def test_appends_racing_at_once_all_land(lh, spark, duck, warehouse):
    _populated(lh, 1)
    results = cw.run({"warehouse": warehouse}, T, [1, 2, 3, 4], ROWS, mode="append", lock=False)
    assert [r["ok"] for r in results] == [True] * 4 and max(r["attempts"] for r in results) > 1
    _delta_follows_iceberg(lh)
    assert_all_readers_agree(lh, spark, duck, T, rows_of([r for i, v in ((0, 0), (1, 1), (2, 1), (3, 1), (4, 1)) for r in cw.rows(i, ROWS, v).to_pylist()]))


def _with_a_concurrent_write(monkeypatch, write):
    """`write()` (another writer's commit) lands right before this process's first Iceberg commit."""
    from lakehouse_assets.core.formats.iceberg import committer

    real_commit = committer.commit_files

    def commit_after_another_write(*args, **kw):
        monkeypatch.setattr(committer, "commit_files", real_commit)
        write()
        return real_commit(*args, **kw)

    monkeypatch.setattr(committer, "commit_files", commit_after_another_write)


def test_a_merge_racing_an_overwrite_of_another_partition_lands(lh, spark, duck, monkeypatch):
    _populated(lh, 2)
    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(1, ROWS, 2), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2))))
    batch = spark.createDataFrame(cw.rows(0, 10, 3).to_pandas())  # updates the odd ones of day 0's first ten rows
    merged = lh.write(batch, T, mode="merge", merge=MergeOptions(keys=["id"]))
    monkeypatch.undo()
    assert merged.commit_attempts == 2
    day0 = {r["id"]: r for r in cw.rows(0, ROWS).to_pylist()} | {r["id"]: r for r in cw.rows(0, 10, 3).to_pylist()}
    assert_all_readers_agree(lh, spark, duck, T, rows_of([*day0.values(), *cw.rows(1, ROWS, 2).to_pylist()]))
    _delta_follows_iceberg(lh)


def test_an_overwrite_racing_an_append_into_its_partition_is_refused(lh, spark, duck, monkeypatch):
    """The append's rows lie inside the slice the overwrite replaces: committing on top would keep them, so it is refused."""
    _populated(lh, 2)
    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(1, 5, 7).set_column(0, "id", pa.array(range(-5, 0), pa.int64())), T))
    with pytest.raises(CommitConflict, match=rf"Table {T}: the overwrite conflicts with a concurrent write: snapshot \d+ \(append\) added 1 file\(s\) inside day in \[2024-01-02, 2024-01-03\)"):
        lh.write(cw.rows(1, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
    monkeypatch.undo()
    assert lh.verify(T)["agree"]


def test_the_added_files_manifests_are_written_before_the_commit_kept_across_attempts_and_removed_when_refused(lh, spark, duck, monkeypatch):
    """A commit writes its added files' manifests before it queues for the lock (clustered_manifests.prepare_adds): the
    attempt after a lost race commits the same manifests as the same snapshot id, and a refused write removes them."""
    from lakehouse_assets.core.write import transaction

    _populated(lh, 2)
    prepared, real_prepare = [], transaction.prepare_adds
    monkeypatch.setattr(transaction, "prepare_adds", lambda *args: prepared.append(real_prepare(*args)) or prepared[-1])

    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(2, 10), T))  # another day's append lands first
    landed = lh.write(cw.rows(0, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
    ours = prepared[0]  # (the concurrent append's own come after it)
    table = lh.load(T)
    assert landed.commit_attempts == 2 and landed.iceberg_snapshot_id == ours.snapshot_id == table.current_snapshot().snapshot_id
    head = table.current_snapshot()
    assert {m.manifest_path for m in ours.manifests} <= {m.manifest_path for m in head.manifests(table.io)}
    added = [e for m in head.manifests(table.io) if m.manifest_path in {p.manifest_path for p in ours.manifests} for e in m.fetch_manifest_entry(table.io)]
    assert added and {e.sequence_number for e in added} == {head.sequence_number}  # the attempt that landed numbers them, not the first

    prepared.clear()
    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(1, 5, 7).set_column(0, "id", pa.array(range(-5, 0), pa.int64())), T))
    with pytest.raises(CommitConflict):
        lh.write(cw.rows(1, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
    monkeypatch.undo()
    refused = [m.manifest_path for m in prepared[0].manifests]
    assert refused and not any(os.path.exists(p.removeprefix("file://")) for p in refused)
    assert_all_readers_agree(lh, spark, duck, T, _expected({0: 1, 1: 0}) + rows_of([*cw.rows(2, 10).to_pylist(), *cw.rows(1, 5, 7).set_column(0, "id", pa.array(range(-5, 0), pa.int64())).to_pylist()]))


def test_a_commit_holding_the_lock_reads_the_catalog_row_once_and_a_stale_hand_over_fails_the_swap(lh, monkeypatch):
    """pyiceberg's SQL commit reads the table's row again before it writes. A committer holding the commit lock has just
    read the table, and hands it over for that read (catalog.fresh_for_commit): the commit's only statement on the catalog
    is its conditional update. A table handed over after another commit landed fails that update, and the metadata file
    written for it is removed; outside a hand-over pyiceberg's own read (and re-basing) is unchanged."""
    from pyiceberg.exceptions import CommitFailedException
    from sqlalchemy import event

    _populated(lh, 1)
    catalog, statements, inside = lh.catalog, [], []
    real_commit = type(catalog).commit_table

    def commit_table(self, *args):
        inside.append(True)
        try:
            return real_commit(self, *args)
        finally:
            inside.pop()

    monkeypatch.setattr(type(catalog), "commit_table", commit_table)
    listener = lambda conn, cursor, statement, *rest: inside and statements.append(statement.split()[0].upper())  # noqa: E731
    event.listen(catalog.engine, "before_cursor_execute", listener)
    try:
        lh.write(cw.rows(0, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
    finally:
        event.remove(catalog.engine, "before_cursor_execute", listener)
    assert statements == ["UPDATE"]

    stale = catalog.load_table(T)
    metadata_dir = os.path.dirname(stale.metadata_location.removeprefix("file://"))
    before = set(os.listdir(metadata_dir))
    lh.write(cw.rows(1, 10), T)  # lands after `stale` was read
    after_the_write = set(os.listdir(metadata_dir))
    with pytest.raises(CommitFailedException), catalog.fresh_for_commit(stale):
        stale.transaction().set_properties(marked="stale").commit_transaction()
    assert set(os.listdir(metadata_dir)) == after_the_write != before
    assert "marked" not in catalog.load_table(T).properties
    stale.transaction().set_properties(marked="re-based").commit_transaction()  # no hand-over: pyiceberg reads the row
    assert catalog.load_table(T).properties["marked"] == "re-based"


def test_the_files_a_commit_writes_are_opened_with_a_small_buffer_unless_the_catalog_or_azure_wants_its_own(lh, tmp_path, monkeypatch):
    """pyiceberg opens each file it writes with a 1 MiB buffer, and a process's first buffer that size took 20-30 ms of
    kernel time in about half the writers of a burst, while the writer holding the commit lock waited for the CPU
    (core/io/fileio.py). The manifests, manifest lists and metadata files a commit writes are kilobytes: they get
    OUTPUT_BUFFER_BYTES. A catalog's own `buffer-size` is kept, and so is 1 MiB on Azure (a block per buffered write)."""
    from pyiceberg.io import pyarrow as pio

    from lakehouse_assets.core.io.fileio import OUTPUT_BUFFER_BYTES, LakehouseFileIO

    opened, real_open = [], pio.PyArrowLocalFileSystem.open_output_stream

    def recording(self, path, *args, **kwargs):
        opened.append((path, kwargs.get("buffer_size")))
        return real_open(self, path, *args, **kwargs)

    monkeypatch.setattr(pio.PyArrowLocalFileSystem, "open_output_stream", recording)
    _populated(lh, 2)
    lh.write(cw.rows(0, ROWS, 1), T, mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
    metadata = [(path, size) for path, size in opened if path.endswith((".avro", ".metadata.json"))]
    assert {path.rsplit(".", 1)[-1] for path, _ in metadata} == {"avro", "json"}  # manifests, manifest lists, metadata
    assert {size for _, size in metadata} == {OUTPUT_BUFFER_BYTES} and OUTPUT_BUFFER_BYTES < pio.ONE_MEGABYTE

    assert LakehouseFileIO({"buffer-size": "4096"}).new_output(str(tmp_path / "m.avro"))._buffer_size == 4096
    azure = LakehouseFileIO({"adls.account-name": "acct", "adls.account-key": "a2V5"})
    assert azure.new_output("abfss://c@acct.dfs.core.windows.net/t/metadata/m.avro")._buffer_size == pio.ONE_MEGABYTE


def test_a_delete_racing_an_append_to_another_partition_lands_and_one_racing_an_overwrite_of_its_rows_is_refused(lh, spark, duck, monkeypatch):
    """A delete by condition re-validates like an overwrite of the rows its condition names (docs/deletes-and-erasure.md)."""
    _populated(lh, 2)
    odd_day0 = f"day = '{cw.day(0)}' AND id % 2 = 1"
    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(2, 10), T))
    deleted = lh.delete(T, odd_day0)
    monkeypatch.undo()
    assert deleted.commit_attempts == 2 and deleted.rows_removed == ROWS // 2
    kept = [r for r in cw.rows(0, ROWS).to_pylist() if r["id"] % 2 == 0] + cw.rows(1, ROWS).to_pylist() + cw.rows(2, 10).to_pylist()
    assert_all_readers_agree(lh, spark, duck, T, rows_of(kept))

    _with_a_concurrent_write(monkeypatch, lambda: lh.write(cw.rows(1, ROWS, 3), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2))))
    with pytest.raises(CommitConflict, match=rf"Table {T}: the update conflicts with a concurrent write: snapshot \d+ \(overwrite-window\) (added|removed) \d+ file\(s\) inside the rows where day = '2024-01-02'"):
        lh.update(T, {"value": "'x'"}, f"day = '{cw.day(1)}'")
    monkeypatch.undo()
    assert lh.verify(T)["agree"]
    _delta_follows_iceberg(lh)


KILLED_WRITER = """
import sys, time
from lakehouse_assets import Lakehouse, Window
from lakehouse_assets.core.formats.iceberg import committer
from lakehouse_assets.core.write import conflicts
from lakehouse_assets_tests import concurrent_writers as cw

warehouse, signal_file = sys.argv[1], sys.argv[2]
lh, other = Lakehouse(warehouse=warehouse), Lakehouse(warehouse=warehouse)
real_commit, real_inside = committer.commit_files, conflicts.inside

def another_write_first(*args, **kw):  # another writer's overwrite of day 0 lands first: this commit loses
    committer.commit_files = real_commit
    other.write(cw.rows(0, {rows}, 5), "{table}", mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
    return real_commit(*args, **kw)

def inside(*args):
    check = real_inside(*args)
    def slow_check(table, base_id):
        open(signal_file, "w").close()  # re-validating now: the test kills this process here
        time.sleep(120)
        return check(table, base_id)
    return slow_check

committer.commit_files, conflicts.inside = another_write_first, inside
lh.write(cw.rows(1, {rows}, 6), "{table}", mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
"""


def _writer_at(script: str, tmp_path, warehouse, signal_name: str, what: str) -> subprocess.Popen:
    """A writer process running `script` (formatted with the test's rows and table), once it has reached `what`,
    which it signals by creating the file `signal_name`."""
    signal_file = tmp_path / signal_name
    path = tmp_path / f"{signal_name}.py"
    path.write_text(textwrap.dedent(script).format(rows=ROWS, table=T))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, str(path), warehouse, str(signal_file)], cwd=root, env={**os.environ, "PYTHONPATH": root})
    try:
        deadline = time.monotonic() + 180
        while not signal_file.exists():
            assert proc.poll() is None, f"the writer ended before {what} (exit {proc.returncode})"
            assert time.monotonic() < deadline, f"the writer never reached {what}"
            time.sleep(0.1)
    except BaseException:
        proc.kill()
        proc.wait(timeout=60)
        raise
    return proc


def test_a_writer_killed_during_its_revalidation_leaves_the_table_clean(lh, spark, duck, warehouse, tmp_path):
    _populated(lh, 2)
    proc = _writer_at(KILLED_WRITER, tmp_path, warehouse, "revalidating", "its re-validation")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # The concurrent overwrite of day 0 landed; the killed write of day 1 did not, in either format.
    assert_all_readers_agree(lh, spark, duck, T, _expected({0: 5, 1: 0}))
    _delta_follows_iceberg(lh)
    assert lh.verify(T)["agree"]
    # Its files are orphans no snapshot or version references (its data file and the change data it wrote before its
    # commit): orphan cleanup removes them, and the next write lands.
    cleaned = lh.maintain(T, "orphan_cleanup", orphan_grace_hours=0)
    orphans = cleaned["orphan_paths"]
    assert {p.split("/")[0] for p in orphans} == {"data", "_change_data"}, orphans
    assert all(p.startswith(("data/day=2024-01-02/", "_change_data/cdc-")) for p in orphans), orphans
    lh.write(cw.rows(1, ROWS, 6), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
    assert_all_readers_agree(lh, spark, duck, T, _expected({0: 5, 1: 6}))


KILLED_IN_THE_DELTA_STAGE = """
import sys, time
from lakehouse_assets import Lakehouse, Window
from lakehouse_assets.core.write import transaction
from lakehouse_assets_tests import concurrent_writers as cw

warehouse, signal_file = sys.argv[1], sys.argv[2]

def stuck(*args, **kw):  # its snapshot is committed and it holds the lock's Delta stage: the test kills it here
    open(signal_file, "w").close()
    time.sleep(120)

transaction.mirror_to_delta = stuck
Lakehouse(warehouse=warehouse).write(cw.rows(0, {rows}, 7), "{table}", mode="overwrite", window=Window("day", cw.day(0), cw.day(1)))
"""


def test_a_writer_killed_holding_the_delta_stage_is_caught_up_by_the_writer_queued_behind_it(lh, spark, duck, warehouse, tmp_path):
    """The commit lock's two stages: a writer killed after its Iceberg snapshot, while it holds the Delta stage, lets
    the writer behind it commit its own snapshot meanwhile; once the kill frees the stage, that writer writes the
    killed one's Delta version, then its own, in the snapshots' order, with the change feed of both."""
    import threading

    _populated(lh, 2)
    before = lh.load(T).current_snapshot().snapshot_id
    proc = _writer_at(KILLED_IN_THE_DELTA_STAGE, tmp_path, warehouse, "holding-the-delta-stage", "its Delta stage")
    behind: dict = {}
    try:
        deadline = time.monotonic() + 180
        writer = threading.Thread(target=lambda: behind.update(result=lh.write(cw.rows(1, ROWS, 8), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))))
        writer.start()
        while len(lh.load(T).snapshots()) < 3:  # the writer behind committed its snapshot while the other holds the Delta stage
            assert writer.is_alive() and time.monotonic() < deadline, "the writer behind did not commit its snapshot"
            time.sleep(0.05)
        assert writer.is_alive()  # and waits for the Delta stage
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    writer.join(120)
    result = behind["result"]
    assert not result.delta_lagging and result.delta_version == 3, result.warnings
    _delta_follows_iceberg(lh)
    assert_all_readers_agree(lh, spark, duck, T, _expected({0: 7, 1: 8}))
    assert lh.verify(T, deep=True)["agree"]
    columns = ["id", "value", "_change_type", "_commit_version"]
    changes = sorted(tuple(r[c] for c in columns) for r in lh.changes(T, before).collect())
    feed = pa.table(DeltaTable(lh.load(T).location()).load_cdf(starting_version=2).read_all()).to_pylist()
    assert sorted(tuple(r[c] for c in columns) for r in feed) == changes and len(changes) == 2 * ROWS


def test_a_commit_that_cannot_take_the_delta_stage_still_writes_its_delta_version(lh, spark, duck, monkeypatch, caplog):
    """The snapshot has landed when a writer takes the lock's Delta stage: if the lock's database fails it then, the
    write still succeeds and writes its Delta version without the stage (put-if-absent, retried), saying so."""
    import contextlib
    import logging

    from lakehouse_assets.core.table import commit_lock

    _populated(lh, 2)
    real = commit_lock._acquired

    @contextlib.contextmanager
    def delta_stage_fails(catalog, key, identifier, wait_seconds):
        if key.endswith(commit_lock.DELTA_STAGE):
            raise OSError("the lock's database went away")
        with real(catalog, key, identifier, wait_seconds) as held:
            yield held

    monkeypatch.setattr(commit_lock, "_acquired", delta_stage_fails)
    with caplog.at_level(logging.WARNING, logger="lakehouse"):
        result = lh.write(cw.rows(1, ROWS, 3), T, mode="overwrite", window=Window("day", cw.day(1), cw.day(2)))
    assert not result.delta_lagging and result.delta_version == 2, result.warnings
    assert "could not take the Delta stage of the commit lock (OSError: the lock's database went away)" in caplog.text
    _delta_follows_iceberg(lh)
    assert_all_readers_agree(lh, spark, duck, T, _expected({0: 0, 1: 3}))


LAUNCH_BACKFILL = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
BACKFILL_STATUS = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) { __typename ... on PartitionBackfill { status } ... on PythonError { message } }
}"""
BACKFILL_RUNS = """
query Runs($id: String!) {
  runsOrError(filter: {tags: [{key: "dagster/backfill", value: $id}]}) { ... on Runs { results { runId status tags { key value } } } }
}"""


# The daemon launches queued runs in threads: each launch waits until the run's process has loaded the code location
# (seconds), so one thread starts a backfill's runs one after the other; and 8 at a time, as production.md says: 30
# run processes starting at once on 2 cores starved `dagster dev` until its code server stopped for lack of heartbeats.
RUN_QUEUE_THREADS = "run_queue:\n  max_concurrent_runs: 8\n  dequeue_use_threads: true\n  dequeue_num_workers: 8\n"


def test_a_dagster_backfill_of_16_daily_partitions_in_parallel_runs_lands_every_partition(spark, duck, capsys, monkeypatch):
    """Launched as a person launches it, with the default run coordinator (its queue launching runs in threads, as
    production.md says): one run per day, executing at once. Every run succeeds without a retry, and each day's
    blocking formats_agree check passes, though other runs commit while it reads the table."""
    import datetime as dt
    import tempfile
    from pathlib import Path

    from dagster import AssetCheckKey, AssetKey, DagsterInstance, RunsFilter
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    from lakehouse_assets import Lakehouse

    from .dagster_dev import graphql, running_dagster_dev, tail

    root = Path(tempfile.mkdtemp(prefix="lakehouse-backfill-"))
    warehouse = root / "warehouse"
    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE", str(warehouse))  # the code location reads it on import, here as in dagster dev
    from . import backfill_location as location
    days = [(dt.date(2024, 1, 1) + dt.timedelta(days=i)).isoformat() for i in range(location.DAYS)]
    started = time.monotonic()
    with running_dagster_dev(root, warehouse, module="lakehouse_assets_tests.backfill_location", instance_yaml=RUN_QUEUE_THREADS) as dev:
        params = {"assetSelection": [{"path": ["bf", "daily_events"]}], "partitionNames": days}
        launched = graphql(dev["base"], LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        backfill_id = launched["backfillId"]
        deadline = time.monotonic() + 600
        while (status := graphql(dev["base"], BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]) in ("REQUESTED",):
            assert time.monotonic() < deadline, f"the backfill is still {status} after 600 s; log {dev['log']}:\n{tail(dev['log'])}"
            time.sleep(3)
        runs = graphql(dev["base"], BACKFILL_RUNS, {"id": backfill_id})["runsOrError"]["results"]
        assert status == "COMPLETED_SUCCESS" and len(runs) == location.DAYS and {r["status"] for r in runs} == {"SUCCESS"}, (
            f"backfill {status}, runs {[(r['runId'][:8], r['status']) for r in runs]}; log {dev['log']}:\n{tail(dev['log'])}")
        instance = DagsterInstance.from_config(dev["home"])
        records = instance.get_run_records(RunsFilter(run_ids=[r["runId"] for r in runs]))
        at_once = max(sum(o.start_time <= r.start_time < o.end_time for o in records) for r in records)
        assert at_once >= 4, f"at most {at_once} runs executed at once"  # the runs raced, as a backfill's do
        checks = instance.event_log_storage.get_asset_check_execution_history(AssetCheckKey(AssetKey(["bf", "daily_events"]), "formats_agree"), limit=100)
        passed = [c.run_id for c in checks if c.status == AssetCheckExecutionRecordStatus.SUCCEEDED]
        assert sorted(passed) == sorted(r["runId"] for r in runs)  # every day's run: its formats_agree check passed
        with capsys.disabled():
            print(f"\nbackfill of {location.DAYS} days: {time.monotonic() - started:.0f} s from dagster dev's start")
    lh = Lakehouse(str(warehouse))
    table = lh.load("bf.daily_events")
    assert len(table.snapshots()) == location.DAYS
    expected = rows_of([r for d in days for r in location.rows_of(dt.date.fromisoformat(d)).to_pylist()])
    assert_all_readers_agree(lh, spark, duck, "bf.daily_events", expected)
    assert lh.verify("bf.daily_events")["agree"]

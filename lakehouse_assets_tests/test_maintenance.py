"""Maintenance never breaks either format: every retained version stays readable everywhere, nothing a
retained snapshot or version references is ever deleted, and what is beyond the window is refused."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from lakehouse_assets import RetentionError, TableOptions
from lakehouse_assets.core import maintenance
from lakehouse_assets.core.formats.iceberg import committer as iceberg_committer
from lakehouse_assets.core.io.storage import relative_to

from .conftest import assert_all_readers_agree, rows_of, unreadable_delta_log

AGGRESSIVE = dict(snapshot_retention_days=0, min_snapshots_to_keep=1, orphan_grace_hours=0)


def batch(spark, start, n=10):
    return spark.range(start, start + n).select("id", (F.col("id") % 2).cast("string").alias("g"), (F.col("id") * 1.5).alias("v"))


def root_path(lh, identifier) -> str:
    return lh.table_location(identifier)[len("file://"):]


def files_on_disk(lh, identifier, sub="") -> set[str]:
    root = root_path(lh, identifier)
    out = set()
    for dirpath, _, names in os.walk(os.path.join(root, sub)):
        out |= {os.path.relpath(os.path.join(dirpath, n), root) for n in names}
    return out


def delta_versions(lh, identifier) -> list[int]:
    """Delta versions that mirror an Iceberg snapshot, from the log itself."""
    delta = DeltaTable(root_path(lh, identifier))
    return sorted(c["version"] for c in delta.history() if "lakehouse.iceberg.snapshot-id" in c)


def retained_state(lh, identifier) -> tuple[list[int], list[int]]:
    """(retained Iceberg snapshot ids, retained Delta versions that mirror one)."""
    table = lh.load(identifier)
    low = int(table.properties.get(maintenance.RETENTION_DELTA_MIN_VERSION, 0))
    return [s.snapshot_id for s in table.metadata.snapshots], [v for v in delta_versions(lh, identifier) if v >= low]


def assert_every_retained_version_intact(lh, spark, duck, identifier, expected_by_snapshot: dict[int, list]):
    """Each retained snapshot and version: its files exist, and all readers of both formats agree."""
    table = lh.load(identifier)
    root = table.location()
    on_disk = files_on_disk(lh, identifier)
    snapshot_ids, versions = retained_state(lh, identifier)
    for sid in snapshot_ids:
        for f in iceberg_committer.live_data_files(table, sid):
            assert relative_to(root, f.file_path) in on_disk, f"snapshot {sid} references deleted file {f.file_path}"
    for v in versions:
        for p in DeltaTable(root_path(lh, identifier), version=v).file_uris():
            assert os.path.exists(p), f"Delta version {v} references deleted file {p}"
    by_version = {c["version"]: int(c["lakehouse.iceberg.snapshot-id"]) for c in DeltaTable(root_path(lh, identifier)).history() if "lakehouse.iceberg.snapshot-id" in c}
    version_of = {sid: v for v, sid in by_version.items() if v in versions}
    for sid in snapshot_ids:
        if sid in version_of:
            # DuckDB iceberg_scan, pyiceberg, Spark at the snapshot; delta-rs, Spark (and DuckDB if current) at its version.
            rows = assert_all_readers_agree(lh, spark, duck, identifier, snapshot_id=sid, delta_version=version_of[sid])
        else:
            rows = rows_of(table.scan(snapshot_id=sid).to_arrow().to_pylist(), ["g", "id", "v"])
            assert rows == rows_of(lh.read(spark, identifier, snapshot_id=sid).collect(), ["g", "id", "v"])
        if sid in expected_by_snapshot:
            assert rows == sorted(expected_by_snapshot[sid], key=repr), f"snapshot {sid} reads different rows"
    return snapshot_ids, versions


def expected_rows(spark, ranges) -> list[tuple]:
    rows = []
    for start, n in ranges:
        rows += [(str(i % 2), i, round(i * 1.5, 9)) for i in range(start, start + n)]
    return rows


def make_history(lh, spark, identifier, partition_by=("g",)) -> dict[int, list]:
    """append, append, append, overwrite, append: each snapshot's expected rows."""
    expected: dict[int, list] = {}
    ranges = []
    for start in (0, 10, 20):
        r = lh.write(batch(spark, start), identifier, partition_by=list(partition_by))
        ranges.append((start, 10))
        expected[r.iceberg_snapshot_id] = expected_rows(spark, ranges)
    r = lh.write(batch(spark, 100), identifier, mode="overwrite")
    ranges = [(100, 10)]
    expected[r.iceberg_snapshot_id] = expected_rows(spark, ranges)
    r = lh.write(batch(spark, 200), identifier)
    ranges.append((200, 10))
    expected[r.iceberg_snapshot_id] = expected_rows(spark, ranges)
    return expected


def test_compaction_one_commit_each_format_content_unchanged(lh, spark, duck):
    expected = make_history(lh, spark, "m.compact")
    before = lh.load("m.compact").current_snapshot()
    delta_before = DeltaTable(root_path(lh, "m.compact")).version()
    r = lh.maintain("m.compact", "compaction", spark=spark)
    assert r["committed"] and r["files_rewritten"] == 4 and r["files_added"] == 2 and r["partitions_compacted"] == 2
    table = lh.load("m.compact")
    snap = table.current_snapshot()
    assert snap.parent_snapshot_id == before.snapshot_id and snap.summary["lakehouse.operation"] == "compaction"
    assert snap.summary["total-records"] == before.summary["total-records"]
    assert r["delta_version"] == delta_before + 1
    # The Delta commit: remove + add, all with dataChange=false (read from the log, not rewritten).
    log = os.path.join(root_path(lh, "m.compact"), "_delta_log", f"{r['delta_version']:020d}.json")
    actions = [json.loads(line) for line in open(log)]
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 4 and not any(a["dataChange"] for a in adds + removes)
    expected[snap.snapshot_id] = expected[before.snapshot_id]
    assert_all_readers_agree(lh, spark, duck, "m.compact", expected[before.snapshot_id])
    assert_every_retained_version_intact(lh, spark, duck, "m.compact", expected)
    # Nothing left to compact: a second run commits nothing.
    again = lh.maintain("m.compact", "compaction", spark=spark)
    assert not again["committed"] and lh.load("m.compact").current_snapshot().snapshot_id == snap.snapshot_id


def test_compaction_racing_an_append_retries_and_loses_nothing(lh, spark, duck, monkeypatch):
    for start in (0, 10, 20):
        lh.write(batch(spark, start), "m.race")
    real_commit = iceberg_committer.commit_files
    attempt_files: list[set[str]] = []

    def append_lands_first(table, adds, removes, summary, stage=None, **kw):
        # A real concurrent writer commits between compaction's file write and its commit.
        if summary.get("lakehouse.operation") == "compaction":
            attempt_files.append({relative_to(table.location(), f.file_path) for f in adds})
            if len(attempt_files) == 1:
                lh.write(batch(spark, 500), "m.race")
        return real_commit(table, adds, removes, summary, stage, **kw)

    monkeypatch.setattr(iceberg_committer, "commit_files", append_lands_first)
    r = lh.maintain("m.race", "compaction", spark=spark)
    assert r["conflicts"] == 1 and r["attempts"] == 2 and r["committed"]
    assert "ValidationException" in r["last_conflict"] or "CommitFailed" in r["last_conflict"]
    on_disk = files_on_disk(lh, "m.race", "data")
    assert not (attempt_files[0] & on_disk), "the conflicting attempt's files were not removed"
    assert attempt_files[1] <= on_disk
    # The second attempt re-planned and also merged the concurrently appended file; no row is lost.
    table = lh.load("m.race")
    parent = table.metadata.snapshot_by_id(table.current_snapshot().parent_snapshot_id)
    assert parent.summary["lakehouse.operation"] == "append"  # the racing append, committed before the compaction
    assert r["files_rewritten"] == len(iceberg_committer.live_data_files(table, parent.snapshot_id))
    assert_all_readers_agree(lh, spark, duck, "m.race", expected_rows(spark, [(0, 30), (500, 10)]))


def test_compaction_aborts_cleanly_when_it_keeps_losing(lh, spark, duck, monkeypatch):
    for start in (0, 10):
        lh.write(batch(spark, start), "m.abort")
    real_commit = iceberg_committer.commit_files
    ours: list[str] = []
    appended = iter(range(1000, 5000, 100))

    def always_beaten(table, adds, removes, summary, stage=None, **kw):
        if summary.get("lakehouse.operation") == "compaction":
            ours.extend(relative_to(table.location(), f.file_path) for f in adds)
            lh.write(batch(spark, next(appended), 5), "m.abort")
        return real_commit(table, adds, removes, summary, stage, **kw)

    monkeypatch.setattr(iceberg_committer, "commit_files", always_beaten)
    r = lh.maintain("m.abort", "compaction", spark=spark, compaction_target_mb=128)
    assert r["aborted"] and not r["committed"] and r["conflicts"] == 3
    assert not (set(ours) & files_on_disk(lh, "m.abort", "data"))
    table = lh.load("m.abort")
    assert all(s.summary.get("lakehouse.operation") != "compaction" for s in table.metadata.snapshots)
    assert_all_readers_agree(lh, spark, duck, "m.abort", expected_rows(spark, [(0, 20), (1000, 5), (1100, 5), (1200, 5)]))


def test_inside_the_window_every_version_stays_readable(lh, spark, duck):
    expected = make_history(lh, spark, "m.window")
    r = lh.maintain("m.window", "full_maintenance", spark=spark, orphan_grace_hours=0)  # default 7-day window
    steps = {s["operation"]: s for s in r["steps"]}
    assert steps["snapshot_expiry"]["snapshots_expired"] == 0 and steps["snapshot_expiry"]["files_removed"] == 0
    assert steps["orphan_cleanup"]["files_removed"] == 0
    snapshot_ids, versions = assert_every_retained_version_intact(lh, spark, duck, "m.window", expected)
    assert set(expected) <= set(snapshot_ids) and len(versions) == len(expected) + 1  # + the compaction


def test_expiry_deletes_only_unreferenced_files_and_refuses_beyond_the_window(lh, spark, duck):
    expected = make_history(lh, spark, "m.expire")
    ids = [s.snapshot_id for s in sorted(lh.load("m.expire").metadata.snapshots, key=lambda s: s.sequence_number)]
    old_versions = delta_versions(lh, "m.expire")
    before = files_on_disk(lh, "m.expire", "data")
    dry = lh.maintain("m.expire", "snapshot_expiry", dry_run=True, snapshot_retention_days=0, min_snapshots_to_keep=2)
    assert dry["snapshots_expired"] == 3 and len(dry["would_remove"]) == 6 and files_on_disk(lh, "m.expire", "data") == before
    r = lh.maintain("m.expire", "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=2)
    assert r["snapshots_expired"] == 3 and r["files_removed"] == 6 and r["bytes_reclaimed"] > 0
    assert sorted(r["expired_snapshot_ids"]) == sorted(ids[:3])
    assert before - files_on_disk(lh, "m.expire", "data") == set(dry["would_remove"])
    snapshot_ids, versions = assert_every_retained_version_intact(lh, spark, duck, "m.expire", expected)
    assert sorted(snapshot_ids) == sorted(ids[3:])
    assert versions == old_versions[3:]
    # Beyond the window: both formats refuse, with a clear error.
    with pytest.raises(RetentionError, match=rf"Table m\.expire: snapshot {ids[0]} is not retained"):
        lh.read(spark, "m.expire", snapshot_id=ids[0])
    with pytest.raises(RetentionError, match=rf"Table m\.expire: Delta version {old_versions[0]} is outside the retention window \(the oldest retained version is {old_versions[3]}\)"):
        lh.read(spark, "m.expire", delta_version=old_versions[0])
    with pytest.raises(RetentionError, match=r"is before the retention window"):
        lh.read(spark, "m.expire", as_of=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))


def test_expiry_racing_an_append_commits_what_it_planned_and_loses_nothing(lh, spark, duck, monkeypatch):
    """Another writer commits between expiry's planning and its commit (a sensor's compaction beside the nightly
    maintenance, a streaming append): expiry's commit applies to the new metadata (it asserts no branch head), so
    it expires what it planned, keeps the new snapshot, and deletes only files nothing retained references."""
    from lakehouse_assets.core.maintenance import retention

    for start, mode in ((0, "append"), (10, "append"), (20, "overwrite"), (30, "append")):
        lh.write(batch(spark, start), "m.expire_race", mode=mode)
    first_two = [s.snapshot_id for s in sorted(lh.load("m.expire_race").metadata.snapshots, key=lambda s: s.sequence_number)][:2]
    real_snapshot_files = retention.snapshot_files
    planned = []

    def append_lands_meanwhile(table, snapshot_ids, **kwargs):
        planned.append(sorted(snapshot_ids))
        if len(planned) == 1:  # a real commit by another writer, after expiry read the table
            lh.write(batch(spark, 500), "m.expire_race")
        return real_snapshot_files(table, snapshot_ids, **kwargs)

    monkeypatch.setattr(retention, "snapshot_files", append_lands_meanwhile)
    r = lh.maintain("m.expire_race", "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=2)
    assert planned == [sorted(first_two)] and sorted(r["expired_snapshot_ids"]) == sorted(first_two)
    table = lh.load("m.expire_race")
    # The two appends the overwrite replaced: their files go; the racing append's file stays.
    assert len(table.metadata.snapshots) == 3 and r["snapshots_after"] == 3 and r["files_removed"] == 2
    assert table.current_snapshot().summary["added-records"] == "10"  # the racing append is the current snapshot
    assert_all_readers_agree(lh, spark, duck, "m.expire_race", expected_rows(spark, [(20, 20), (500, 10)]))
    assert lh.verify("m.expire_race", deep=True)["agree"]


def test_orphan_cleanup_removes_only_old_unreferenced_files(lh, spark, duck):
    expected = make_history(lh, spark, "m.orphans")
    root = root_path(lh, "m.orphans")
    old = time.time() - 3 * 86400
    orphan = os.path.join(root, "data", "g=0", "crashed-writer-00000-00001.parquet")
    in_flight = os.path.join(root, "data", "g=1", "in-flight-00000-00001.parquet")
    for path in (orphan, in_flight):
        shutil.copy(next(os.path.join(root, f) for f in files_on_disk(lh, "m.orphans", "data")), path)
    os.utime(orphan, (old, old))
    # Make the Delta log and the Iceberg metadata look ancient too: they must never be candidates.
    protected = files_on_disk(lh, "m.orphans", "_delta_log") | files_on_disk(lh, "m.orphans", "_iceberg")
    for rel in protected | (files_on_disk(lh, "m.orphans", "data") - {os.path.relpath(in_flight, root)}):
        os.utime(os.path.join(root, rel), (old, old))
    # delta-rs's own full vacuum (dry run) skips `_iceberg/` and `_delta_log/`, but it would also take
    # files that retained Iceberg snapshots still read (the overwritten ones): why maintenance never calls it.
    vacuum = set(DeltaTable(root).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True))
    assert os.path.relpath(orphan, root) in vacuum and not any(p.startswith(("_iceberg/", "_delta_log/")) for p in vacuum)
    table = lh.load("m.orphans")
    iceberg_referenced = {relative_to(table.location(), f.file_path) for s in table.metadata.snapshots for f in iceberg_committer.live_data_files(table, s.snapshot_id)}
    assert vacuum & iceberg_referenced
    dry = lh.maintain("m.orphans", "orphan_cleanup", dry_run=True, orphan_grace_hours=1)
    assert dry["orphan_paths"] == [os.path.relpath(orphan, root)] and dry["skipped_within_grace"] == 1
    assert os.path.exists(orphan)
    r = lh.maintain("m.orphans", "orphan_cleanup", orphan_grace_hours=1)
    assert r["files_removed"] == 1 and not os.path.exists(orphan) and os.path.exists(in_flight)
    assert protected <= files_on_disk(lh, "m.orphans")
    os.remove(in_flight)
    assert_every_retained_version_intact(lh, spark, duck, "m.orphans", expected)


@pytest.mark.smoke
def test_every_operation_keeps_every_referenced_file(lh, spark, duck):
    """Aggressive settings, each operation in turn: what is retained always reads the same everywhere."""
    expected = make_history(lh, spark, "m.each")
    for op in ("delta_checkpoint", "compaction", "metadata_cleanup", "orphan_cleanup", "snapshot_expiry", "metadata_cleanup", "full_maintenance"):
        current = lh.load("m.each").current_snapshot()
        r = lh.maintain("m.each", op, spark=spark, **AGGRESSIVE)
        if op == "compaction":
            assert r["committed"]
            expected[lh.load("m.each").current_snapshot().snapshot_id] = expected[current.snapshot_id]
        assert_every_retained_version_intact(lh, spark, duck, "m.each", expected)
    health = lh.maintain("m.each", "delta_checkpoint")["health"]
    assert health["snapshot_count"] == 1 and health["delta_lag_snapshots"] == 0
    # Only the live files are left on storage, and the formats agree on them.
    table = lh.load("m.each")
    live = {relative_to(table.location(), f.file_path) for f in iceberg_committer.live_data_files(table)}
    assert files_on_disk(lh, "m.each", "data") == live
    assert_all_readers_agree(lh, spark, duck, "m.each", expected_rows(spark, [(100, 10), (200, 10)]))


def test_checkpoint_and_metadata_cleanup_bound_the_logs(lh, spark, duck):
    for start in range(0, 120, 10):
        lh.write(batch(spark, start), "m.logs")
    before = maintenance.delta_log_stats(lh.context, lh.load("m.logs"))
    assert before["delta_log_files"] == 13
    cp = lh.maintain("m.logs", "delta_checkpoint")
    assert cp["checkpoint_written"] and cp["delta_commits_since_checkpoint"] == 0
    lh.maintain("m.logs", "snapshot_expiry", **AGGRESSIVE)
    manifests_before = len([f for f in files_on_disk(lh, "m.logs", "_iceberg") if f.endswith(".avro")])
    r = lh.maintain("m.logs", "metadata_cleanup", **AGGRESSIVE)
    assert r["delta_log_files_removed"] >= 11 and r["delta_log_files"] <= 3 and r["iceberg_metadata_files_removed"] >= 11
    assert len([f for f in files_on_disk(lh, "m.logs", "_iceberg") if f.endswith(".avro")]) < manifests_before
    table = lh.load("m.logs")
    low = int(table.properties[maintenance.RETENTION_DELTA_MIN_VERSION])
    with pytest.raises(RetentionError, match="outside the retention window"):
        lh.read(spark, "m.logs", delta_version=low - 1)
    assert_all_readers_agree(lh, spark, duck, "m.logs", expected_rows(spark, [(0, 120)]))
    # The table keeps working: a new commit mirrors to Delta after the cleanup.
    w = lh.write(batch(spark, 500), "m.logs")
    assert not w.delta_lagging
    assert_all_readers_agree(lh, spark, duck, "m.logs", expected_rows(spark, [(0, 120), (500, 10)]))


@pytest.mark.parametrize("operation", ["snapshot_expiry", "metadata_cleanup"])
def test_a_maintenance_commit_that_loses_the_catalogs_race_to_another_writer_is_tried_again(lh, spark, duck, monkeypatch, operation):
    """A stream's batch commits inside maintenance's own metadata commit: after the SQL catalog read the table and
    before it swaps the metadata pointer, so the swap finds another pointer and fails. Maintenance reads the
    table again and commits again; the batch is kept and both formats agree."""
    from lakehouse_assets.core.table.catalog import LakehouseSqlCatalog

    for start in range(0, 60, 10):
        lh.write(batch(spark, start), "m.catalog_race")
    lh.maintain("m.catalog_race", "delta_checkpoint")
    real_write_metadata = LakehouseSqlCatalog._write_metadata
    raced = []

    def another_writer_commits_meanwhile(metadata, io, metadata_path):
        real_write_metadata(metadata, io, metadata_path)
        if not raced:  # once: the first metadata commit maintenance makes
            raced.append(metadata_path)
            lh.write(batch(spark, 500), "m.catalog_race")

    monkeypatch.setattr(LakehouseSqlCatalog, "_write_metadata", staticmethod(another_writer_commits_meanwhile))
    report = lh.maintain("m.catalog_race", operation, **AGGRESSIVE)
    monkeypatch.undo()
    assert raced, f"{operation} made no metadata commit"
    table = lh.load("m.catalog_race")
    if operation == "snapshot_expiry":
        assert report["snapshots_expired"] >= 5 and len(table.metadata.snapshots) <= 2
    else:
        assert int(table.properties[maintenance.RETENTION_DELTA_MIN_VERSION]) > 0
    assert_all_readers_agree(lh, spark, duck, "m.catalog_race", expected_rows(spark, [(0, 60), (500, 10)]))
    assert lh.verify("m.catalog_race")["agree"]


@pytest.mark.smoke
def test_repair_of_a_lagging_delta_log(lh, spark, duck):
    first = lh.write(batch(spark, 0), "m.lag")
    with unreadable_delta_log(root_path(lh, "m.lag")):
        assert lh.write(batch(spark, 10), "m.lag").delta_lagging
    assert lh.maintain("m.lag", "repair", dry_run=True)["delta_lag_snapshots"] == 1
    r = lh.maintain("m.lag", "full_maintenance", spark=spark)
    repair = r["steps"][0]
    assert repair["operation"] == "repair" and repair["repaired"] and repair["delta_version"] == first.delta_version + 1
    assert r["health"]["delta_lag_snapshots"] == 0
    assert_all_readers_agree(lh, spark, duck, "m.lag", expected_rows(spark, [(0, 20)]))


def test_settings_come_from_table_properties_then_overrides(lh, spark):
    lh.write(batch(spark, 0), "m.props", table=TableOptions(properties={"lakehouse.maintenance.min-snapshots-to-keep": "3", "lakehouse.maintenance.compaction-target-mb": "64"}))
    for start in (10, 20, 30):
        lh.write(batch(spark, start), "m.props")
    r = lh.maintain("m.props", "snapshot_expiry", snapshot_retention_days=0)
    assert r["settings"]["min_snapshots_to_keep"] == 3 and r["settings"]["compaction_target_mb"] == 64
    assert r["snapshots_expired"] == 1 and r["snapshots_after"] == 3
    assert lh.maintain("m.props", "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=1)["snapshots_after"] == 1
    with pytest.raises(Exception, match=r"unknown maintenance operation 'vacuum'"):
        lh.maintain("m.props", "vacuum")
    with pytest.raises(Exception, match=r"unknown maintenance setting\(s\) \['retention'\]"):
        lh.maintain("m.props", "snapshot_expiry", retention=1)

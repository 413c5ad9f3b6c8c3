"""verify over what changed since a verified pair, as the blocking formats_agree check runs after a write: the same
verdict and figures as the full comparison on an agreeing table, a difference on every divergence a write can
leave in the Delta log (a file, a row count, a statistic), and the full comparison whenever the logs do not
confirm the pair."""

from __future__ import annotations

import glob
import json
import os

import pyarrow as pa
from dagster import AssetKey, DagsterInstance, asset, materialize

from lakehouse_assets import VerifiedPair
from lakehouse_assets.dagster.checks import build_formats_agree_check

FIGURES = ("iceberg_snapshot_id", "delta_version", "iceberg_files", "iceberg_rows", "delta_files", "delta_rows", "agree")


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "g": pa.array([i % 2 for i in range(lo, hi)], pa.int64())})


def _pair(report: dict) -> VerifiedPair:
    return VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])


def _verified(lh, t: str) -> VerifiedPair:
    """A table of two partitions, verified in full: the pair a check would record."""
    lh.write(_rows(0, 10), t, partition_by=["g"])
    report = lh.verify(t)
    assert report["agree"] and report["compared"] == "every live file", report
    return _pair(report)


def _newest_commit(lh, t: str) -> str:
    log = os.path.join(lh.load(t).location().removeprefix("file://"), "_delta_log")
    return sorted(glob.glob(os.path.join(log, "*.json")))[-1]


def _edit_commit(path: str, edit) -> None:
    """Rewrite a Delta commit's actions (a planted divergence: what a faulty mirror would have written)."""
    actions = [json.loads(line) for line in open(path).read().split("\n") if line.strip()]
    open(path, "w").write("\n".join(json.dumps(a) for a in edit(actions)) + "\n")


def test_a_check_since_a_verified_pair_reads_the_changes_and_says_what_the_full_check_says(lh):
    t = "vc.agree"
    since = _verified(lh, t)
    lh.write(_rows(10, 16), t)
    lh.write(_rows(100, 104), t, mode="overwrite")  # removes every file the pair saw
    lh.write(_rows(200, 203), t)
    changed, full = lh.verify(t, since=since), lh.verify(t)
    assert changed["compared"] == f"what changed since Iceberg snapshot {since.snapshot_id} and Delta version {since.delta_version}"
    assert full["compared"] == "every live file"
    assert {k: changed[k] for k in FIGURES} == {k: full[k] for k in FIGURES}, (changed, full)
    assert changed["agree"] and changed["differences"] == [] and changed["iceberg_rows"] == 7
    assert lh.verify(t, since=_pair(changed))["agree"]  # nothing changed since: nothing to compare, and the totals agree


def test_a_file_the_delta_commit_left_out_is_a_difference(lh):
    t = "vc.left_out"
    since = _verified(lh, t)
    lh.write(_rows(10, 20), t)  # one file per partition
    lost = []

    def drop_one_add(actions):
        add = next(a for a in actions if "add" in a)
        lost.append(add["add"]["path"])
        return [a for a in actions if a is not add]

    _edit_commit(_newest_commit(lh, t), drop_one_add)
    report = lh.verify(t, since=since)
    assert not report["agree"] and report["compared"].startswith("what changed since")
    assert any("added since" in d and "only in Iceberg" in d and lost[0] in d for d in report["differences"]), report["differences"]
    assert any("file counts differ" in d for d in report["differences"]), report["differences"]
    assert not lh.verify(t)["agree"]


def test_a_file_the_delta_commit_did_not_remove_is_a_difference(lh):
    t = "vc.not_removed"
    since = _verified(lh, t)
    lh.write(_rows(50, 52), t, mode="overwrite")
    _edit_commit(_newest_commit(lh, t), lambda actions: [a for a in actions if "remove" not in a])
    report = lh.verify(t, since=since)
    assert not report["agree"]
    assert any("removed since" in d and "only in Iceberg" in d for d in report["differences"]), report["differences"]
    assert any("row counts differ" in d for d in report["differences"]), report["differences"]


def test_a_manifest_merge_that_loses_an_entry_is_a_difference(lh, monkeypatch):
    """An append that merges small manifests writes their entries again: one left out is a file Iceberg readers no
    longer read, though no commit removed it (Delta still lists it, and the summary still counts it). The manifest
    list's counts say so without a manifest read."""
    from pyiceberg.manifest import ManifestWriter

    from lakehouse_assets import TableOptions

    t = "vc.lost_entry"
    lh.write(_rows(0, 4), t, table=TableOptions(properties={"commit.manifest.min-count-to-merge": "3"}))
    lh.write(_rows(4, 8), t)
    lh.write(_rows(8, 12), t)
    since = _pair(lh.verify(t))
    real, lost = ManifestWriter.existing, []
    monkeypatch.setattr(ManifestWriter, "existing", lambda self, entry: (lost.append(entry) or self) if not lost else real(self, entry))
    lh.write(_rows(12, 16), t)  # three small manifests before it: this append merges them, and the planted writer drops one
    monkeypatch.undo()
    table = lh.load(t)
    assert lost and [m.existing_files_count for m in table.current_snapshot().manifests(table.io)] == [0, 2]
    report = lh.verify(t, since=since)
    assert not report["agree"] and report["compared"].startswith("what changed since"), report
    assert any("Iceberg's manifests list 3 live data files, its snapshot summary 4" in d for d in report["differences"]), report["differences"]
    assert not lh.verify(t)["agree"]


def test_a_wrong_row_count_or_statistic_in_a_new_add_is_a_difference(lh):
    t = "vc.stats"
    since = _verified(lh, t)
    lh.write(_rows(10, 20), t)

    def wrong_stats(actions):
        for a in actions:
            if "add" in a:
                stats = json.loads(a["add"]["stats"])
                stats["numRecords"] += 1
                stats["maxValues"]["id"] = -1
                a["add"]["stats"] = json.dumps(stats)
        return actions

    _edit_commit(_newest_commit(lh, t), wrong_stats)
    differences = lh.verify(t, since=since)["differences"]
    assert any("Iceberg 5 rows, Delta 6" in d for d in differences), differences
    assert any("stats" in d and "'id'" in d and "-1" in d for d in differences), differences


def test_a_pair_the_logs_do_not_confirm_falls_back_to_the_full_check(lh):
    t = "vc.untrusted"
    since = _verified(lh, t)
    lh.write(_rows(10, 12), t)
    for pair in (VerifiedPair(12345, since.delta_version), VerifiedPair(since.snapshot_id, since.delta_version + 1), VerifiedPair(since.snapshot_id, 99)):
        report = lh.verify(t, since=pair)
        assert report["agree"] and report["compared"] == "every live file", (pair, report)


def test_the_formats_agree_check_compares_what_changed_since_its_last_pass(lh, warehouse, dagster_resources):
    @asset(key_prefix=["vc"], metadata={"partition_by": ["g"], "mode": "append"})
    def events():
        return _rows(0, 6)

    check = build_formats_agree_check(AssetKey(["vc", "events"]))
    instance = DagsterInstance.ephemeral()
    compared = []
    for _ in range(3):
        result = materialize([events, check], resources=dagster_resources, instance=instance)
        (evaluation,) = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert evaluation.passed
        compared.append(evaluation.metadata["compared"].value)
    assert compared[0] == "every live file" and all(c.startswith("what changed since Iceberg snapshot") for c in compared[1:]), compared
    assert lh.read_arrow("vc.events").num_rows == 18


def test_a_check_meeting_a_commit_in_flight_looks_again_once_it_is_done_and_a_lag_left_behind_is_reported(lh):
    """Another writer holds the commit lock between its Iceberg snapshot and its Delta version (another thread here, as
    another run's process would): the check that reads the table then waits for that commit and agrees. A snapshot
    nobody is mirroring (a writer killed between its two commits) is a difference, as before."""
    import threading
    import time

    from lakehouse_assets.core.table import commit_lock

    t = "chk.in_flight"
    since = _verified(lh, t)
    iceberg_committed, mirrored_at = threading.Event(), []

    def writer():
        with commit_lock.holding(lh.catalog, t):
            lh.load(t).append(_rows(10, 12))  # pyiceberg: Iceberg only, so far
            iceberg_committed.set()
            time.sleep(1.0)
            lh.repair(t)  # the Delta version of that snapshot
            mirrored_at.append(time.monotonic())

    thread = threading.Thread(target=writer)
    thread.start()
    assert iceberg_committed.wait(30)
    report = lh.verify(t, since=since)
    checked_at = time.monotonic()
    thread.join()
    assert report["agree"] and report["iceberg_rows"] == report["delta_rows"] == 12, report
    assert checked_at >= mirrored_at[0]  # it looked again after the Delta version, not before

    lh.load(t).append(_rows(12, 13))  # nobody holds the lock: no commit in flight, a real lag
    report = lh.verify(t, since=_pair(report))
    assert not report["agree"] and any("Delta lags Iceberg by 1 snapshot" in d for d in report["differences"]), report

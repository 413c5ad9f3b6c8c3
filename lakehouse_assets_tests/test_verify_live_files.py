"""The full formats-agree check compares the live files a batch of manifests at a time (maintenance/verify/
live_files.py): whatever the batches, it finds every divergence the two file lists can hold and reports the same
figures, including a file in one batch whose Delta add another batch's file made it look like a duplicate of."""

from __future__ import annotations

import glob
import json
import os

import pyarrow as pa

from lakehouse_assets.core.maintenance.verify import live_files

FIGURES = ("iceberg_files", "iceberg_rows", "delta_files", "delta_rows", "delta_files_without_row_count", "agree", "differences")


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "g": pa.array([i % 3 for i in range(lo, hi)], pa.int64())})


def _figures(report: dict) -> dict:
    return {k: report[k] for k in FIGURES}


def _edit_commit(path: str, edit) -> None:
    actions = [json.loads(line) for line in open(path).read().split("\n") if line.strip()]
    open(path, "w").write("\n".join(json.dumps(a) for a in edit(actions)) + "\n")


def test_the_full_check_finds_the_same_divergences_in_batches_of_any_size(lh, monkeypatch):
    t = "vl.batches"
    for lo in range(0, 40, 10):  # four appends: four manifests of three files each
        lh.write(_rows(lo, lo + 10), t, partition_by=["g"])
    agreeing = lh.verify(t)
    assert agreeing["agree"] and agreeing["iceberg_files"] == 12 and agreeing["iceberg_rows"] == 40, agreeing
    monkeypatch.setattr(live_files, "BATCH_ENTRIES", 1)
    assert _figures(lh.verify(t)) == _figures(agreeing)
    monkeypatch.undo()

    # Iceberg lists one file twice (another manifest), and the Delta log loses one add, counts another wrong, and
    # holds one for a file Iceberg does not list.
    table = lh.catalog.load_table(t)
    twice = next(iter(table.scan().plan_files())).file
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(twice)
    log = os.path.join(table.location().removeprefix("file://"), "_delta_log")
    lh.write(_rows(100, 103), t)  # (the mirror follows the duplicate's snapshot first)
    first = sorted(glob.glob(os.path.join(log, "*.json")))[1]  # the first write's files

    def diverge(actions):
        adds = [a for a in actions if "add" in a]
        lost, miscounted = adds[0], adds[1]
        stats = json.loads(miscounted["add"]["stats"])
        stats["numRecords"] += 5
        miscounted["add"]["stats"] = json.dumps(stats)
        stranger = json.loads(json.dumps(adds[2]))
        stranger["add"]["path"] = stranger["add"]["path"].replace(".parquet", "-stranger.parquet")
        return [a for a in actions if a is not lost] + [stranger]

    _edit_commit(first, diverge)
    for checkpoint in glob.glob(os.path.join(log, "*.checkpoint.parquet")) + glob.glob(os.path.join(log, "_last_checkpoint")):
        os.remove(checkpoint)
    whole = lh.verify(t)
    found = whole["differences"]
    assert not whole["agree"]
    assert any("1 file(s) live only in Iceberg" in d for d in found), found
    assert any("1 file(s) live only in Delta" in d and "-stranger.parquet" in d for d in found), found
    assert any("1 file(s) have different row counts in the two logs" in d for d in found), found
    assert any("row counts differ" in d for d in found), found
    assert any("Iceberg lists data file" in d and "2 times" in d for d in found), found
    monkeypatch.setattr(live_files, "BATCH_ENTRIES", 1)
    assert _figures(lh.verify(t)) == _figures(whole)
    monkeypatch.setattr(live_files, "BATCH_ENTRIES", 2)
    assert _figures(lh.verify(t)) == _figures(whole)

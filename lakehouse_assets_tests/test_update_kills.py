"""Kill tests of an update by condition: the process SIGKILLed at each phase of the copy-on-write update's one Spark
job and its commits (lakehouse_assets_tests/update_process.py), then the table as every reader of either format sees it.

Killed before its commit, the update changed nothing: the table is as it was in both formats, its files are orphans
that orphan cleanup removes, and running it again lands it. Killed between its Iceberg snapshot and its Delta version,
Delta lags until `repair` writes that version, with the update's change data (each row's pre- and post-image). Killed
after both, nothing is missing. Every case ends with every reader agreeing, the deep check passing, and the Delta
change feed holding what `Lakehouse.changes` says the update changed."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from .conftest import assert_all_readers_agree, rows_of

pytestmark = pytest.mark.slow  # a Spark process per case: scheduled first (conftest.py)

T = "db.accounts"
WHERE = "id % 10 = 3"


def _rows(updated: bool) -> list[tuple]:
    return rows_of([{"id": i, "amount": float(i) + (1.0 if updated and i % 10 == 3 else 0.0), "owner": f"o{i % 7}"} for i in range(200)])


def _killed(warehouse, phase: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LAKEHOUSE_CATALOG"}  # the embedded catalog in the warehouse
    return subprocess.run(
        [sys.executable, "-m", "lakehouse_assets_tests.update_process", str(warehouse), T, "amount", "amount + 1", WHERE, phase],
        capture_output=True, text=True, timeout=600, start_new_session=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)),
    )


def _feed_is_the_update(lh, spark, before_snapshot_id: int, delta_version: int) -> None:
    """The Delta change feed of the update's version holds what `Lakehouse.changes` says it changed: each matched row's
    pre- and post-image, nothing else."""
    columns = ["id", "amount", "_change_type"]
    changes = sorted(tuple(r[c] for c in columns) for r in lh.changes(T, before_snapshot_id).collect())
    table = lh.load(T)
    feed = pa.table(DeltaTable(table.location()).load_cdf(starting_version=delta_version).read_all()).to_pylist()
    assert sorted(tuple(r[c] for c in columns) for r in feed) == changes
    assert sorted(changes) == sorted([(i, float(i), "update_preimage") for i in range(3, 200, 10)] + [(i, float(i) + 1, "update_postimage") for i in range(3, 200, 10)])


@pytest.mark.parametrize("phase", ["files_written", "iceberg_committed", "delta_committed"])
def test_an_update_killed_at_each_phase_leaves_both_formats_whole(tmp_path, spark, duck, monkeypatch, phase):
    from lakehouse_assets import Lakehouse

    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    warehouse = tmp_path / "warehouse"
    lh = Lakehouse(str(warehouse))
    lh.write(spark.createDataFrame([(i, float(i), f"o{i % 7}") for i in range(200)], "id long, amount double, owner string").repartition(2), T)
    before = lh.load(T).current_snapshot().snapshot_id
    delta_version = DeltaTable(lh.load(T).location()).version() + 1  # the update's, once written

    killed = _killed(warehouse, phase)
    assert killed.returncode == -9, f"the process was not killed at {phase}: rc={killed.returncode}\n{killed.stdout[-2000:]}\n{killed.stderr[-3000:]}"
    lh = Lakehouse(str(warehouse))
    if phase == "files_written":
        assert lh.load(T).current_snapshot().snapshot_id == before
        assert_all_readers_agree(lh, spark, duck, T, _rows(False))  # nothing changed, in either format
        cleaned = lh.maintain(T, "orphan_cleanup", orphan_grace_hours=0)
        assert cleaned["orphans_found"] >= 2, cleaned  # the rewritten files the job wrote
        lh.update(T, {"amount": "amount + 1"}, WHERE, spark=spark)  # run again: it lands
    elif phase == "iceberg_committed":
        report = lh.verify(T)
        assert not report["agree"] and DeltaTable(lh.load(T).location()).version() == delta_version - 1, report
        lh.repair(T, spark=spark)  # Delta catches up, with the update's change data
    assert_all_readers_agree(lh, spark, duck, T, _rows(True))
    assert lh.verify(T, deep=True)["agree"]
    _feed_is_the_update(lh, spark, before, delta_version)

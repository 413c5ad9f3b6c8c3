"""Kill tests: the streaming process SIGKILLed at every phase of a micro-batch, restarted from its checkpoint.

Each case runs lakehouse_assets_tests/stream_process.py in its own process group, kills it (Python and the JVM)
at one phase of batch 1, restarts the same query from its checkpoint, and compares every row of both formats with
the landed files: each row exactly once, every reader of either format agrees, and `verify --deep` passes.

The restart runs in the test's own Spark session: what it depends on is on disk (the checkpoint, both formats'
commits), and the killed process shares nothing else with it. That saves a second Spark process per case."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from .conftest import assert_all_readers_agree
from .stream_process import report, sink_for
from .test_streaming import expected, land, rows, run_stream

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

PHASES = ["offsets_written", "files_written", "iceberg_committed", "delta_committed", "commit_written"]


def run_process(warehouse, landing, checkpoint, identifier, mode, kill_at=""):
    args = [sys.executable, "-m", "lakehouse_assets_tests.stream_process", str(warehouse), str(landing), str(checkpoint), identifier, mode]
    if kill_at:
        args += [kill_at, "1"]
    env = {**os.environ, "LAKEHOUSE_CATALOG": ""}
    env.pop("LAKEHOUSE_CATALOG")
    return subprocess.run(args, capture_output=True, text=True, timeout=600, start_new_session=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))


def kill_and_restart(tmp_path, spark, monkeypatch, identifier, mode, phase):
    """Kill the streaming process at `phase` of batch 1, then run the query again from its checkpoint (the same
    query and sink as stream_process.py, without hooks); returns the restart's query id and (rows, replay) per batch."""
    from lakehouse_assets import Lakehouse

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    killed = run_process(tmp_path / "warehouse", landing, checkpoint, identifier, mode, phase)
    assert killed.returncode == -9, f"the process was not killed at {phase}: rc={killed.returncode}\n{killed.stderr[-3000:]}"
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)  # the embedded catalog in the warehouse, as the process used
    sink = sink_for(Lakehouse(str(tmp_path / "warehouse")), identifier, mode)
    return report(run_stream(spark, landing, checkpoint, sink), sink)


@pytest.mark.parametrize("phase", PHASES)
def test_append_stream_killed_at_each_phase_lands_every_row_once(tmp_path, spark, duck, monkeypatch, phase):
    from lakehouse_assets import Lakehouse

    landing = tmp_path / "landing"
    for i in range(3):
        land(landing, f"{i}.json", rows(i * 5, 5))
    report = kill_and_restart(tmp_path, spark, monkeypatch, "db.events", "append", phase)
    lh = Lakehouse(str(tmp_path / "warehouse"))
    assert_all_readers_agree(lh, spark, duck, "db.events", expected(rows(0, 15)))
    assert lh.verify("db.events", deep=True)["agree"]
    assert DeltaTable(lh.table_location("db.events")).transaction_version(report["query_id"]) == 2
    # The restart wrote what the killed run had not committed, and recognised what it had.
    replayed = [dup for _, dup in report["batches"]]
    assert replayed[0] is (phase in ("iceberg_committed", "delta_committed"))


@pytest.mark.parametrize("phase", ["files_written", "iceberg_committed", "delta_committed"])
def test_merge_stream_killed_mid_batch_lands_the_changes_once(tmp_path, spark, duck, monkeypatch, phase):
    from lakehouse_assets import Lakehouse

    landing = tmp_path / "landing"
    land(landing, "0.json", rows(0, 5))
    land(
        landing, "1.json", [{"id": 1, "name": "one", "amount": 11, "op": "u"}, {"id": 2, "name": None, "amount": None, "op": "d"}, {"id": 5, "name": "n5", "amount": 50, "op": "u"}]
    )
    land(landing, "2.json", [{"id": 5, "name": "five", "amount": 55, "op": "u"}])
    kill_and_restart(tmp_path, spark, monkeypatch, "db.customers", "merge", phase)
    lh = Lakehouse(str(tmp_path / "warehouse"))
    want = [(0, 0, "n0"), (11, 1, "one"), (30, 3, "n3"), (40, 4, "n4"), (55, 5, "five")]
    assert_all_readers_agree(lh, spark, duck, "db.customers", want)
    assert lh.verify("db.customers", deep=True)["agree"]

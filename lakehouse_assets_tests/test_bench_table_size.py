"""bench/table_size.py on two tiny tables: every operation runs on both sides, the rows agree, and its page section
renders. The figures themselves come from `make bench`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import table_size  # noqa: E402 - bench/ is a folder of scripts, not a package

pytestmark = pytest.mark.java_iceberg


def test_the_table_size_workload_runs_on_tiny_tables(spark, tmp_path):
    results = [table_size.one_size(spark, files, 1, str(tmp_path / str(files)), java=files <= 200, java_merge=files <= 110) for files in (110, 200, 300)]
    assert all("java" not in ops for ops in results[-1]["times"].values()), "beyond --java-max-files, ours alone"
    assert "java" not in results[1]["times"]["merge"] and "java" in results[1]["times"]["delete"], "beyond --java-merge-max-files, no Java MERGE INTO"
    for r in results[:-1]:
        # The other days' files untouched; the first day's rewritten by the merges and grown by the appends.
        assert r["live_files"] > r["files"] - table_size.HOT_FILES
        for op in table_size.OPERATIONS:
            assert len(r["times"][op]["ours"]) == 1
            assert ("java" in r["times"][op]) == (op not in ("check", "health", "delta-rs read") and (op != "merge" or r["files"] <= 110))
            assert r["peak_mb"][op] > 50  # the driver's resident memory while that operation ran (a Python process with Spark: well above)
        assert r["held_mb"] > 50 and all(r["added_mb"][op] >= 0 for op in table_size.OPERATIONS)
        # `lakehouse verify` as a user runs it: a process of its own, which holds no Spark.
        fresh = r["fresh_verify"]
        assert fresh["peak_mb"] >= fresh["before_mb"] > 50 and fresh["seconds"] > 0
    section = table_size.render([dict(r, measured="2026-12-07 03:00-03:20 UTC (`--files 110,200,300`)") for r in results])
    run, notes = section.split(table_size.MEASURED_APART[0])  # this run's figures; then the runs measured apart, written again
    assert "| merge | " in run and "| delta-rs read | " in run and "ours 300 / 110" in run and "Java, 200 files" in run
    assert "| delete | " in run and "| health | " in run and "first health reading" in run
    assert "| driver peak RSS (MB), append, merge, delete, check, health, read | " in run and "| driver peak RSS (MB), verify | " not in run
    assert "| verify in a fresh process (s) | " in run and "| its peak over the process before it (MB) | " in run
    assert "Measured 2026-12-07 03:00-03:20 UTC (`--files 110,200,300`), the sizes taking turns" in run
    assert all(p in notes for p in table_size.MEASURED_APART[1:]) and notes.rstrip().endswith(table_size.WHERE_THE_GROWTH_GOES)
    # A tiny table's operation can peak at what the process already held: 0 MB over it, which has no ratio.
    still = [dict(r, added_mb={op: 0.0 for op in table_size.OPERATIONS}) for r in results]
    assert "| driver peak over it (MB), append, merge, delete, check, health, read | 0 | 0 | 0 | n/a |" in table_size.render(still)

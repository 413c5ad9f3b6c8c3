"""bench/deletes.py on a tiny table: every side deletes and updates the same rows, and its page section renders.

The figures themselves come from `make bench`; here only that the workload runs end to end on the suite's Spark
session (with Java Iceberg's catalog) and that the four tables agree after it (`measure` asserts it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import deletes  # noqa: E402 - bench/ is a folder of scripts, not a package

from . import java_iceberg  # noqa: E402

pytestmark = pytest.mark.java_iceberg


def test_the_deletes_workload_runs_on_a_tiny_table(spark, lh):
    result = deletes.measure(spark, lh, java_iceberg.CATALOG, rows=4000, reps=1)
    for op in ("delete", "update"):
        assert sorted(result["seconds"][op]) == sorted(f"{side} {s}" for side in ("ours", "java") for s in deletes.STRATEGIES)
        assert all(len(v["all"]) == 1 for v in result["seconds"][op].values())
    section = deletes.markdown(result)
    assert "| delete | copy-on-write |" in section and "| update | merge-on-read |" in section
    assert lh.verify(f"{deletes.NAMESPACE}.ours_copy")["agree"] and lh.verify(f"{deletes.NAMESPACE}.ours_merge")["agree"]

"""bench/merge_on_read.py on a tiny table: its sides merge, read and compact, and its page section renders.

The figures themselves come from `make bench`; here only that the workload runs end to end on the suite's Spark
session (with Java Iceberg's catalog) and that every side is either measured or reported as not measured."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import merge_on_read  # noqa: E402 - bench/ is a folder of scripts, not a package

from . import java_iceberg  # noqa: E402

pytestmark = pytest.mark.java_iceberg


def test_the_merge_on_read_workload_runs_on_a_tiny_table(spark, lh, tmp_path):
    from lakehouse_assets import Lakehouse

    lh_no_feed = Lakehouse(str(tmp_path / "no-feed"), delta_configuration=merge_on_read.NO_FEED)
    result = merge_on_read.measure(spark, lh, lh_no_feed, java_iceberg.CATALOG, rows=4000, merges=2, read_warmup=0, read_reps=1, tag="tiny")
    for work in ("merges", "read"):
        for side in merge_on_read.SIDES:
            if work == "read" and side in merge_on_read.MERGES_ONLY:
                assert side not in result[work]  # its files are laid out as the feed-on table's: not read twice
                continue
            measured = side in result[work]
            assert measured != (side in result["skipped"] or f"{side}_read" in result["skipped"] and work == "read"), (work, side, result["skipped"])
    merges = result["merges"]
    assert len(merges["cow"]["seconds"]["all"]) == len(merges["java"]["seconds"]["all"]) == 2
    assert all(b > 0 for side in merges.values() for b in side["bytes"]["all"])
    assert result["compaction"]["java"]["bytes"]["all"][0] > 0  # Java rewrote its files (the rows after it are compared)
    section = merge_on_read.markdown([result])
    assert "| 4,000 | merge | ours copy-on-write |" in section and "Java Iceberg merge-on-read" in section
    assert "| 4,000 | merge | ours merge-on-read, Delta change feed off |" in section
    from deltalake import DeltaTable

    feed = DeltaTable(lh_no_feed.load("mor_bench.mor_nofeed_tiny").location()).metadata().configuration.get("delta.enableChangeDataFeed")
    assert feed == "false", f"the feed-off side's Delta table keeps a change feed ({feed})"

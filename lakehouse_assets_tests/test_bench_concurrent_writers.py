"""bench/concurrent_writers.py on two writers: both sides' writers land, and its page section renders. The figures
themselves come from `make bench`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import concurrent_writers as bench  # noqa: E402 - bench/ is a folder of scripts, not a package

pytestmark = pytest.mark.java_iceberg


def test_the_concurrent_writers_workload_runs_with_two_writers(spark, tmp_path):
    kwargs, java_settings = bench.catalog_settings("sqlite", None, "tinyconc", str(tmp_path))
    burst = bench.ours(kwargs, 2, "overwrite")
    assert burst["landed"] == 2 and burst["agree"] and burst["attempts"] == [1, 1] and not burst["errors"]
    again_kwargs, _ = bench.catalog_settings("sqlite", None, "tinyagain", str(tmp_path))
    again = bench.ours(again_kwargs, 2, "overwrite")
    ours = bench.pooled([burst, again])  # a cell of two bursts, each on a fresh table
    assert (ours["bursts"], ours["landed"], ours["writers"], ours["attempts_max"]) == (2, 4, 4, 1) and ours["agree"]
    assert ours["p95"] == max(burst["latencies"] + again["latencies"])  # the p95 of 4 writes is their maximum
    for key, value in java_settings(kwargs).items():
        spark.conf.set(key, value)
    java = bench.pooled([bench.java(spark, "tinyconc", 2, "append", "jtiny")])
    assert java["landed"] == 2 and not java["errors"] and "agree" not in java
    lone_kwargs, _ = bench.catalog_settings("sqlite", None, "tinylone", str(tmp_path))
    assert 0 < bench.lone(lone_kwargs, 1, 2) < 60  # one process overwriting its day of a table of two days
    section = bench.render({"rows": bench.ROWS, "cells": [{"catalog": "sqlite", "writers": 2, "mode": "overwrite", "ours": ours, "java": java}],
                            "lone": {"sqlite": {"2": 0.5}}})
    assert "| sqlite | overwrite | 2 | 4/4 | 1.0 / 1 |" in section and "| 1.00 | 2/2 |" in section
    assert [bench.bursts(n) for n in (8, 16, 32)] == [3, 2, 1]  # at least 24 writes in every cell of the page
    assert "A lone commit's median, on a table of N days: sqlite 0.500 s at 2." in section

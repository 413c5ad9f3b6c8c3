"""core/collector.py: the garbage collector paused for a read of many manifest entries, and always as it was after."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

from lakehouse_assets.core.collector import collector_paused
from lakehouse_assets.core.formats.deletes import table_files


def test_a_pause_restores_the_collector_nested_or_after_an_error_and_keeps_a_callers_own_disable():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a read failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # the caller turned it off: it stays off
    finally:
        gc.enable()


def test_reading_a_tables_manifests_leaves_the_collector_on(lh):
    lh.write(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), "gc.t")
    assert len(table_files(lh.load("gc.t")).data) == 1 and gc.isenabled()
    assert lh.verify("gc.t")["agree"] and gc.isenabled()

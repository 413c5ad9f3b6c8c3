"""`make demo` end to end, as a user runs it: its own process, a new warehouse and Dagster instance.

On a Spark Connect run of the suite (`make connect SPARK=4`) the `spark` fixture has pointed
`LAKEHOUSE_SPARK_REMOTE` at the suite's Connect server, so the demo's Dagster resource and every session it
makes talk to that server: the demo's assets, checks, audit, rollback and streaming ingestion on Connect.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import CONNECT

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]


@pytest.mark.smoke
def test_the_demo_runs_and_both_formats_agree(spark, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "LAKEHOUSE_WAREHOUSE": str(tmp_path / "warehouse"), "DAGSTER_HOME": str(home)}
    assert ("LAKEHOUSE_SPARK_REMOTE" in env) == CONNECT
    done = subprocess.run([sys.executable, "-m", "lakehouse_assets.demo"], env=env, capture_output=True, text=True, timeout=1100)
    screen = done.stdout
    assert done.returncode == 0 and "demo OK: both formats agree" in screen, screen[-4000:] + done.stderr[-2000:]
    assert "[FAILED]" not in screen and "14 of 14 formats_agree checks passed" in screen, screen
    assert "[stream]  demo/landed_orders run 2: 2 new file(s) -> 1 micro-batch(es), 1,000 rows" in screen, screen
    tables = [line.split()[0] for line in screen.splitlines() if line.startswith("demo.")]
    assert tables == ["demo.country_revenue", "demo.customer_changes", "demo.customers", "demo.daily_user_activity", "demo.events",
                      "demo.landed_orders", "demo.payments"], screen

"""The `lakehouse` console script, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import functions as F

from .conftest import unreadable_delta_log

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


def run(*args, warehouse=None, env_warehouse=None, check=True):
    env = {k: v for k, v in os.environ.items() if k not in ("LAKEHOUSE_WAREHOUSE", "LAKEHOUSE_CATALOG")}
    if env_warehouse:
        env["LAKEHOUSE_WAREHOUSE"] = env_warehouse
    cmd = [LAKEHOUSE, *(["--warehouse", warehouse] if warehouse else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_tables_history_verify_repair(lh, spark, warehouse):
    df = spark.range(0, 30).select("id", (F.col("id") % 2).cast("string").alias("parity"))
    r1 = lh.write(df, "cli.numbers", partition_by=["parity"])
    r2 = lh.write(df, "cli.numbers", mode="overwrite", writer={"dagster_run_id": "abc"})

    tables = json.loads(run("tables", "--json", warehouse=warehouse).stdout)
    assert tables == [
        {
            "name": "cli.numbers",
            "location": r2.location,
            "iceberg_metadata_location": lh.load("cli.numbers").metadata_location,
            "iceberg_snapshot_id": r2.iceberg_snapshot_id,
            "delta_version": r2.delta_version,
            "partition_by": ["parity"],
            "formats": ["iceberg", "delta"],
            "delta_column_mapping": False,
            "branches": {},
        }
    ]
    # The warehouse can also come from the environment.
    assert json.loads(run("tables", "--json", env_warehouse=warehouse).stdout)[0]["name"] == "cli.numbers"
    assert "cli.numbers" in run("tables", warehouse=warehouse).stdout

    history = json.loads(run("history", "cli.numbers", "--json", warehouse=warehouse).stdout)
    assert [(h["iceberg_snapshot_id"], h["delta_version"], h["operation"]) for h in history] == [
        (r2.iceberg_snapshot_id, r2.delta_version, "overwrite"),
        (r1.iceberg_snapshot_id, r1.delta_version, "append"),
    ]
    assert history[0]["writer"] == {"dagster_run_id": "abc"} and history[0]["rows_removed"] == 30
    assert "abc" in run("history", "cli.numbers", warehouse=warehouse).stdout

    report = json.loads(run("verify", "cli.numbers", "--json", warehouse=warehouse).stdout)
    assert report["agree"] and report["iceberg_rows"] == report["delta_rows"] == 30

    # Break Delta for one write: verify exits 1 and says why; repair fixes it.
    with unreadable_delta_log(r2.location):
        assert lh.write(df, "cli.numbers").delta_lagging
    failed = run("verify", "cli.numbers", warehouse=warehouse, check=False)
    assert failed.returncode == 1 and "DISAGREE" in failed.stdout and "lags Iceberg by 1 snapshot" in failed.stdout
    repaired = json.loads(run("repair", "cli.numbers", "--json", warehouse=warehouse).stdout)
    assert repaired["delta_version"] == r2.delta_version + 1
    assert run("verify", "cli.numbers", warehouse=warehouse).returncode == 0


def test_unknown_table_is_a_clear_error(warehouse):
    proc = run("history", "nope.missing", warehouse=warehouse, check=False)
    assert proc.returncode == 2
    assert "Table nope.missing does not exist in catalog 'lakehouse'" in proc.stderr


def test_global_options_before_or_after_the_subcommand_version_and_readable_tables(lh, spark, warehouse, tmp_path):
    lh.write(spark.range(0, 5).select("id", (F.col("id") % 2).cast("string").alias("parity")), "cli.opts", partition_by=["parity"])
    before = run("--warehouse", warehouse, "tables", "--json")
    after = run("tables", "--json", "--warehouse", warehouse)
    assert json.loads(before.stdout) == json.loads(after.stdout) and json.loads(after.stdout)[0]["name"] == "cli.opts"
    # After the subcommand wins over before it (and over the environment).
    empty = str(tmp_path / "other")
    assert json.loads(run("--warehouse", empty, "tables", "--json", "--warehouse", warehouse).stdout)[0]["name"] == "cli.opts"
    assert json.loads(run("tables", "--json", "--warehouse", warehouse, env_warehouse=empty).stdout)[0]["name"] == "cli.opts"
    # The example: maintain TABLE --warehouse W (and --catalog) after the subcommand.
    maintained = json.loads(run("maintain", "cli.opts", "--op", "delta_checkpoint", "--json", "--warehouse", warehouse, "--catalog", "lakehouse").stdout)
    assert maintained["table"] == "cli.opts"
    for sub in (["history", "cli.opts"], ["verify", "cli.opts"], ["repair", "cli.opts"]):
        assert run(*sub, "--warehouse", warehouse).returncode == 0

    version = run("--version")
    assert version.stdout.strip() == "lakehouse, version 0.1.0"

    table = run("tables", "--warehouse", warehouse).stdout.splitlines()
    assert table[0].split() == ["TABLE", "ICEBERG", "SNAPSHOT", "DELTA", "VERSION", "PARTITIONED", "BY", "FORMATS", "BRANCHES", "(ICEBERG", "ONLY)", "LOCATION"]
    assert set(table[1]) <= {"-", " "}
    snapshot, version = lh.tables()[0]["iceberg_snapshot_id"], lh.tables()[0]["delta_version"]
    assert table[2].split() == ["cli.opts", str(snapshot), str(version), "parity", "iceberg+delta", "-", lh.tables()[0]["location"]]
    # Columns line up under their headers.
    assert table[2].index(str(snapshot)) == table[0].index("ICEBERG SNAPSHOT")


def test_delete_and_update_by_condition(lh, spark, warehouse):
    # In this process (click's runner), on the session's Spark: a `lakehouse` process would start a JVM of its own.
    from click.testing import CliRunner

    from lakehouse_assets.cli import cli

    df = spark.range(0, 10).select("id", F.lit("open").alias("status"))
    lh.write(df, "cli.orders")
    updated = CliRunner().invoke(cli, ["--warehouse", warehouse, "update", "cli.orders", "--set", "status='closed'", "--where", "id < 3"])
    assert updated.exit_code == 0 and updated.output.startswith("cli.orders: 3 row(s) updated as Iceberg snapshot"), updated.output
    deleted = CliRunner().invoke(cli, ["--warehouse", warehouse, "delete", "cli.orders", "--where", "id >= 8", "--json"])
    assert deleted.exit_code == 0 and json.loads(deleted.output)["rows_removed"] == 2, deleted.output
    nothing = CliRunner().invoke(cli, ["--warehouse", warehouse, "delete", "cli.orders", "--where", "id > 100"])
    assert "no row matched; nothing committed" in nothing.output
    bad = CliRunner().invoke(cli, ["--warehouse", warehouse, "update", "cli.orders", "--set", "status", "--where", "id = 1"])
    assert bad.exit_code == 2 and "write COLUMN=EXPRESSION" in bad.output
    rows = sorted((r["id"], r["status"]) for r in lh.read(spark, "cli.orders").collect())
    assert rows == [(i, "closed" if i < 3 else "open") for i in range(8)]
    assert lh.verify("cli.orders")["agree"]
    # A delete hides row 5 from reads; `verify --erased` finds it in the old files and the feed; `erase` removes it.
    CliRunner().invoke(cli, ["--warehouse", warehouse, "delete", "cli.orders", "--where", "id = 5"])
    left = CliRunner().invoke(cli, ["--warehouse", warehouse, "verify", "cli.orders", "--erased", "id = 5"])
    assert left.exit_code == 1 and "cli.orders: NOT ERASED:" in left.output and "row(s) the condition matches" in left.output, left.output
    erased = CliRunner().invoke(cli, ["--warehouse", warehouse, "erase", "cli.orders", "--where", "id = 5"])
    assert erased.exit_code == 0 and "cli.orders: erasure " in erased.output and "cli.orders: erased: 0 remnant(s)" in erased.output, erased.output
    proved = CliRunner().invoke(cli, ["--warehouse", warehouse, "verify", "cli.orders", "--erased", "id = 5", "--json"])
    assert proved.exit_code == 0 and json.loads(proved.output)["erased"], proved.output

"""A data team adds the library to its own Dagster project, as docs/dagster-project.md says.

The release is installed the way users install it, without a clone of theirs and without a constraints file:
`lakehouse_assets[spark35] @ git+file://localhost/<a clone>@0.1.0` (the extra of the Spark line the suite runs pins the
tested set), into a fresh virtual environment that has nothing but Python, next to `dagster-dg-cli`. The clone's
tag 0.1.0 is moved onto the code under test, so the install builds this commit from git as pip would. Nothing of
this repository's editable install is used. The install goes through `uv pip install` (pip's interface, as a
create-dagster project would run it) from the package index, compiled to bytecode as pip compiles it: the same
requirement and resolution as `pip install`, in about 20 s where pip takes minutes (its `pip wheel` of the same
set: 2 minutes alone, 5 beside the other tests), since `make setup` filled uv's cache with the same pinned versions.
One environment serves both tests. Then:

- a project made by `create-dagster project` scaffolds `lakehouse_assets.LakehouseComponent` with
  `dg scaffold defs`, configures it in `defs.yaml`, passes `dg check defs`, lists the checks, jobs, schedule
  and sensors, and materializes its own day-partitioned table merged by a key (twice: the second run
  updates and adds orders) and its own unpartitioned table from a pyarrow frame (a run without Spark) with `dg launch`; the formats_agree checks pass and both formats read back the rows;
- a plain `Definitions` project merges `lakehouse_definitions(...)` and does the same with `dagster`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

# A new environment, a project and two Spark runs and one without Spark in subprocesses: minutes each on a busy 2-core machine.
pytestmark = [pytest.mark.timeout(2700), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
UV = VENV_BIN / "uv"  # the test extra's uv; not on the user environment's PATH, so dg sees no uv of ours
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]  # the release tag users install
TOOLS = ["dagster-dg-cli"]  # what a project made by create-dagster has beside the library

ORDERS = '''
import datetime as dt
import os

import dagster as dg
import pyarrow as pa
from dagster_pyspark import PySparkResource

daily = dg.DailyPartitionsDefinition(start_date="2024-01-01")


@dg.asset(
    key=["sales", "orders"],
    partitions_def=daily,
    metadata={"partition_by": ["day(order_time)"], "partition_expr": "order_time", "write_mode": "merge", "merge_keys": ["order_id"]},
)
def orders(context: dg.AssetExecutionContext, pyspark: PySparkResource):
    day = dt.datetime.fromisoformat(context.partition_key).replace(tzinfo=dt.timezone.utc)
    # The day's orders as the source has them: a later run sees orders 3-5 changed and orders 6-7 new.
    ids, scale = (range(6), 10.0) if os.environ.get("SHOP_ORDERS_BATCH", "1") == "1" else (range(3, 8), 100.0)
    rows = [(i, f"c{i % 3}", day + dt.timedelta(hours=i), scale * i) for i in ids]
    return pyspark.spark_session.createDataFrame(rows, "order_id long, customer_id string, order_time timestamp, amount double")


@dg.asset(key=["sales", "customers"])
def customers() -> pa.Table:
    # A pyarrow frame is written in the step's own process: this run starts no Spark.
    return pa.table({"customer_id": ["c0", "c1", "c2"], "name": ["Ada", "Grace", "Edsger"]})
'''


def run(args, cwd=None, env=None, timeout=900) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def spark_extra() -> str:
    """The extra that pins the tested set of the Spark line this suite runs on."""
    import pyspark

    return "spark4" if pyspark.__version__.startswith("4") else "spark35"


def release_clone(tmp: Path) -> Path:
    """A clone of this repository whose tag 0.1.0 is the code under test (uncommitted changes to tracked files included)."""
    commit = run(["git", "stash", "create"], cwd=REPO).strip() or run(["git", "rev-parse", "HEAD"], cwd=REPO).strip()
    clone = tmp / "lakehouse_assets"
    run(["git", "clone", "-q", "--shared", "--no-checkout", REPO, clone])  # --shared: the stash commit is in REPO's objects
    run(["git", "tag", "-f", VERSION, commit], cwd=clone)
    return clone


@pytest.fixture(scope="session")
def user_env(tmp_path_factory):
    """A fresh venv with the tagged release installed from a git URL, as install.md says, next to dagster-dg-cli."""
    tmp = tmp_path_factory.mktemp("user-project")
    # file://localhost/<path>: the pip that Python 3.11's venv ships (23.2) refuses a git+file:/// URL (no host).
    requirement = f"lakehouse_assets[{spark_extra()}] @ git+file://localhost{release_clone(tmp)}@{VERSION}"
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    # The extra pins the tested set: no constraints file. From the package index, as users install it, compiled to
    # bytecode as pip compiles it (uv does not by default: where PYTHONDONTWRITEBYTECODE is set, as on this machine,
    # every `dg` and Dagster process would then compile Dagster's and Spark's modules from source again).
    run([UV, "pip", "install", "-q", "--compile-bytecode", "--python", py, requirement, *TOOLS], timeout=1800)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "LAKEHOUSE_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(DAGSTER_DISABLE_TELEMETRY="1", SPARK_LOCAL_IP="127.0.0.1", PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    show = "import importlib.metadata as m; print(m.version('lakehouse_assets')); print(*m.files('lakehouse_assets'), sep=chr(10))"
    reported, *files = run([py, "-c", show], cwd=venv, env=env).split()
    assert reported == VERSION, f"the installed release reports {reported}, not {VERSION}"
    assert not [f for f in files if f.startswith(("lakehouse_assets_tests/", "bench/"))], "the release installs tests or bench code"
    return {"venv": venv, "py": py, "bin": venv / "bin", "env": env}


def assert_is_the_installed_wheel(user_env):
    location = run([user_env["py"], "-c", "import lakehouse_assets, sys; print(lakehouse_assets.__file__)"], cwd=user_env["venv"], env=user_env["env"]).strip()
    assert location.startswith(str(user_env["venv"])), f"the project imports lakehouse_assets from {location}, not from its own venv"


def read_both_formats(warehouse: Path, identifier: str, duck):
    """The table's rows as DuckDB reads its Iceberg metadata and as delta-rs reads its Delta log."""
    from deltalake import DeltaTable
    from pyiceberg.catalog.sql import SqlCatalog

    namespace, name = identifier.split(".")
    catalog = SqlCatalog("lakehouse", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    table = catalog.load_table(identifier)
    iceberg = duck.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}') ORDER BY 1").fetchall()
    delta = DeltaTable(table.location()).to_pyarrow_table().sort_by(table.schema().fields[0].name).to_pylist()
    return iceberg, delta


def check_statuses(home: Path, keys: list[str]) -> dict[str, str]:
    """The latest formats_agree evaluation of each asset, from the project's Dagster instance."""
    from dagster import AssetCheckKey, AssetKey, DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        out = {}
        for key in keys:
            record = instance.get_latest_asset_check_evaluation_record(AssetCheckKey(AssetKey.from_user_string(key), "formats_agree"))
            out[key] = record.status.value if record else "never ran"
        return out


def project_env(user_env, tmp_path: Path, **extra) -> dict[str, str]:
    """The user environment with a Dagster instance of this project's own."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {**user_env["env"], "DAGSTER_HOME": str(home), **extra}


def assert_tables(warehouse: Path, duck):
    iceberg, delta = read_both_formats(warehouse, "sales.orders", duck)
    # Merged by order_id: orders 0-2 from the first run, 3-7 from the second.
    assert [r[0] for r in iceberg] == list(range(8)) and [r["order_id"] for r in delta] == list(range(8))
    assert sum(r[3] for r in iceberg) == sum(r["amount"] for r in delta) == 10.0 * (0 + 1 + 2) + 100.0 * (3 + 4 + 5 + 6 + 7)
    iceberg, delta = read_both_formats(warehouse, "sales.customers", duck)
    assert iceberg == [(r["customer_id"], r["name"]) for r in delta] == [("c0", "Ada"), ("c1", "Grace"), ("c2", "Edsger")]


def test_dg_project_with_the_lakehouse_component(user_env, tmp_path, duck):
    env, dg = project_env(user_env, tmp_path), user_env["bin"] / "dg"
    run([VENV_BIN / "create-dagster", "project", "--no-uv-sync", tmp_path / "shop"], env=env)
    project = tmp_path / "shop"
    run([UV, "pip", "install", "-q", "--python", user_env["py"], "-e", project], env=env)
    assert_is_the_installed_wheel(user_env)

    assert "lakehouse_assets.LakehouseComponent" in run([dg, "list", "components"], cwd=project, env=env)
    run([dg, "scaffold", "defs", "lakehouse_assets.LakehouseComponent", "lakehouse"], cwd=project, env=env)
    defs_yaml = project / "src" / "shop" / "defs" / "lakehouse" / "defs.yaml"
    assert "type: lakehouse_assets.LakehouseComponent" in defs_yaml.read_text()
    defs_yaml.write_text(
        textwrap.dedent(
            """\
            type: lakehouse_assets.LakehouseComponent

            attributes:
              warehouse: "{{ context.project_root }}/warehouse"
              assets: [sales/orders, sales/customers]
              spark:
                master: local[2]
                conf:
                  spark.sql.shuffle.partitions: "2"
              maintenance:
                cron: "30 2 * * *"
                snapshot_retention_days: 3
                min_snapshots_to_keep: 2
              sensors:
                enabled: [compaction, delta_lag, foreign_commits]
            """
        )
    )
    (project / "src" / "shop" / "defs" / "tables.py").write_text(ORDERS)

    run([dg, "check", "defs"], cwd=project, env=env)
    listed = json.loads(run([dg, "list", "defs", "--json"], cwd=project, env=env))
    assert sorted(a["asset_key"] for a in listed["assets"]) == ["sales/customers", "sales/orders"]
    assert sorted(c["key"] for c in listed["asset_checks"]) == ["sales/customers:formats_agree", "sales/orders:formats_agree"]
    assert {j["name"] for j in listed["jobs"]} >= {"lakehouse_maintenance_job", "lakehouse_rollback_job", "lakehouse_alter_job"}
    assert [(s["name"], s["cron_schedule"]) for s in listed["schedules"]] == [("lakehouse_nightly_maintenance", "30 2 * * *")]
    assert sorted(s["name"] for s in listed["sensors"]) == ["lakehouse_compaction_sensor", "lakehouse_delta_lag_sensor", "lakehouse_foreign_commits_sensor"]

    run([dg, "launch", "--assets", "sales/orders", "--partition", "2024-01-02"], cwd=project, env=env)
    run([dg, "launch", "--assets", "sales/orders", "--partition", "2024-01-02"], cwd=project, env={**env, "SHOP_ORDERS_BATCH": "2"})
    run([dg, "launch", "--assets", "sales/customers"], cwd=project, env=env)
    assert check_statuses(Path(env["DAGSTER_HOME"]), ["sales/orders", "sales/customers"]) == {"sales/orders": "SUCCEEDED", "sales/customers": "SUCCEEDED"}
    assert_tables(project / "warehouse", duck)


def test_plain_definitions_project_with_the_factory(user_env, tmp_path, duck):
    project = tmp_path / "plain"
    project.mkdir()
    (project / "tables.py").write_text(ORDERS)
    (project / "definitions.py").write_text(
        textwrap.dedent(
            f"""\
            import dagster as dg
            from tables import customers, orders

            from lakehouse_assets import LakehouseResource, MaintenancePlan, SensorPlan, lakehouse_definitions

            defs = dg.Definitions.merge(
                lakehouse_definitions(
                    assets=[orders, customers],
                    lakehouse=LakehouseResource(warehouse={str(project / "warehouse")!r}),
                    maintenance=MaintenancePlan(cron="15 1 * * *", settings={{"snapshot_retention_days": 3}}),
                    sensors=SensorPlan(enabled=["delta_lag", "foreign_commits"]),
                ),
            )
            """
        )
    )
    env = project_env(user_env, tmp_path, PYTHONPATH=str(project))
    dagster, target = user_env["bin"] / "dagster", ["-f", project / "definitions.py"]
    run([dagster, "definitions", "validate", *target], cwd=project, env=env)
    schedules = run([user_env["py"], "-c", "from definitions import defs; r = defs.get_repository_def(); print([(s.name, s.cron_schedule) for s in r.schedule_defs], sorted(s.name for s in r.sensor_defs))"], cwd=project, env=env)
    assert schedules.strip() == "[('lakehouse_nightly_maintenance', '15 1 * * *')] ['lakehouse_delta_lag_sensor', 'lakehouse_foreign_commits_sensor']"

    run([dagster, "asset", "materialize", *target, "--select", "sales/orders", "--partition", "2024-01-02"], cwd=project, env=env)
    run([dagster, "asset", "materialize", *target, "--select", "sales/orders", "--partition", "2024-01-02"], cwd=project, env={**env, "SHOP_ORDERS_BATCH": "2"})
    run([dagster, "asset", "materialize", *target, "--select", "sales/customers"], cwd=project, env=env)
    assert check_statuses(Path(env["DAGSTER_HOME"]), ["sales/orders", "sales/customers"]) == {"sales/orders": "SUCCEEDED", "sales/customers": "SUCCEEDED"}
    assert_tables(project / "warehouse", duck)

"""The docs' configuration blocks run against the servers the suite starts (servers.py), so they cannot drift.

A block preceded by `<!-- servers: SETUP -->` configures the lakehouse for a server this machine has only as
the suite's own: PostgreSQL, S3 and the Iceberg REST catalog (SeaweedFS), AWS Glue (moto); a Spark master's
(`spark-settings`) and a Spark Connect server's (`spark-remote`) settings are read into the session's. Its exports run in bash as a user pastes them, with the values that name the user's own servers (host names,
buckets, keys, marked by `example.com`, `my-bucket`, `...`, `PASSWORD`) pointed at the suite's; every other
value stays as the page gives it. Then a table is written through the environment the block left (the
lakehouse reads `LAKEHOUSE_*`, pyiceberg `PYICEBERG_CATALOG__*`, the storage `AWS_*`) and every reader of
both formats must see its rows. A `yaml` block of SETUP `dagster-postgres` is a Dagster instance's
configuration, run on the suite's PostgreSQL.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import assert_all_readers_agree
from .servers import ACCESS_KEY, CLOUD_ENV_PREFIXES, REGION, REST_BUCKET, S3_BUCKET, SECRET_KEY

ROOT = Path(__file__).resolve().parent.parent
MARKED = re.compile(r"<!-- servers: (?P<setup>[\w-]+) -->\s*\n^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```\s*$", re.S | re.M)
PLACEHOLDERS = re.compile(r"example\.com|my-bucket|=\.\.\.|PASSWORD")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def marked_blocks() -> list[tuple[str, str, str, str]]:
    """(page, setup, language, code) of every block marked `<!-- servers: SETUP -->`."""
    return [(page.name, m["setup"], m["lang"], m["code"]) for page in PAGES for m in MARKED.finditer(page.read_text())]


def _aws(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}


def servers_of(setup: str, request) -> tuple[dict[str, str], dict[str, str]]:
    """(what the user's machine already has: credentials, endpoints; the block's values that name the user's servers)."""
    if setup == "postgres-s3":
        pg, s3 = request.getfixturevalue("postgres"), request.getfixturevalue("seaweedfs")
        return _aws(s3.urls["s3"]), {
            "PYICEBERG_CATALOG__PG__URI": pg.urls["sqlalchemy"],
            "LAKEHOUSE_WAREHOUSE": f"s3://{S3_BUCKET}/docs-{uuid.uuid4().hex[:8]}",
        }
    if setup == "glue-s3":
        aws = _aws(request.getfixturevalue("moto").urls["endpoint"])
        return aws, {
            "AWS_ACCESS_KEY_ID": aws["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": aws["AWS_SECRET_ACCESS_KEY"],
            "LAKEHOUSE_WAREHOUSE": f"s3://{S3_BUCKET}/docs-{uuid.uuid4().hex[:8]}",
        }
    if setup == "rest-s3":
        s3 = request.getfixturevalue("seaweedfs")
        aws = _aws(s3.urls["s3"])
        return {}, {
            **aws,
            "PYICEBERG_CATALOG__REST__URI": s3.urls["iceberg"],
            "PYICEBERG_CATALOG__REST__CREDENTIAL": f"{ACCESS_KEY}:{SECRET_KEY}",
            "PYICEBERG_CATALOG__REST__WAREHOUSE": f"s3://{REST_BUCKET}",
            "LAKEHOUSE_WAREHOUSE": f"s3://{REST_BUCKET}",
        }
    if setup == "spark-settings":
        # Read into the session's settings, not connected to: test_spark_cluster.py runs the library on a real
        # standalone master. The executors' Python is this suite's own (the session's workers read it).
        return {}, {"PYSPARK_PYTHON": sys.executable}
    if setup == "spark-remote":
        # Read into the session's settings: `make connect SPARK=4` points the same variable at the Connect server
        # the suite starts (conftest.py), and every session the project makes, the Dagster resource's too, uses it.
        return {}, {}
    raise AssertionError(f"unknown servers setup {setup!r}")


def point_at(code: str, values: dict[str, str]) -> str:
    """The block with each `NAME=value` of `values` given the suite's value; what names the user's servers must be among them."""
    for name, value in values.items():
        code = re.sub(rf"(?<![\w]){name}=\S+", lambda _m, n=name, v=value: f"{n}={v}", code)
    left = [line for line in code.splitlines() if PLACEHOLDERS.search(line.split("#", 1)[0])]
    assert not left, f"a value names the user's own server and the suite has no stand-in for it: {left}"
    return code


def exported(code: str, base: dict[str, str], cwd: Path) -> dict[str, str]:
    """The variables the block exports, run in bash as pasted into a shell (on top of `base`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith((*CLOUD_ENV_PREFIXES, "LAKEHOUSE_"))} | base
    out = subprocess.run(["bash", "-e", "-c", f"{code}\nenv -0"], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    after = dict(item.split("=", 1) for item in out.stdout.split("\0") if "=" in item)
    return {k: v for k, v in after.items() if env.get(k) != v and not k.startswith(("SHLVL", "_", "PWD", "OLDPWD"))} | base


@pytest.mark.parametrize(("page", "setup", "lang", "code"), [pytest.param(*b, id=f"{b[0].removesuffix('.md')}-{b[1]}") for b in marked_blocks() if b[2] == "bash"])
def test_configuration_block_writes_a_table_both_formats_read(page, setup, lang, code, request, spark, tmp_path, monkeypatch):
    base, values = servers_of(setup, request)
    env = exported(point_at(code, values), base, tmp_path)
    assert {k for k in env if k.startswith(("LAKEHOUSE_", "PYICEBERG_", "AWS_", "PYSPARK_"))}, f"{page}: the block exports nothing the lakehouse reads"
    for k in [k for k in os.environ if k.startswith((*CLOUD_ENV_PREFIXES, "LAKEHOUSE_"))]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # no user catalog configuration leaks in
    monkeypatch.chdir(tmp_path)
    if setup == "spark-settings":
        from lakehouse_assets.dagster.resources import spark_config

        config = spark_config()
        assert config["spark.master"] == env["LAKEHOUSE_SPARK_MASTER"] and config["spark.executor.memory"] == "8g", f"{page}: {config}"
        return
    if setup == "spark-remote":
        from lakehouse_assets.dagster.resources import spark_config, spark_resource

        config = spark_config()
        assert config["spark.remote"] == env["LAKEHOUSE_SPARK_REMOTE"] and "spark.master" not in config, f"{page}: {config}"
        assert spark_resource().spark_config["spark.remote"] == env["LAKEHOUSE_SPARK_REMOTE"]
        return
    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.read import duckdb_readers

    lh = Lakehouse()  # everything from the environment, as a code location configured by these exports
    assert lh.warehouse.startswith("s3://") and lh.catalog.name == env["LAKEHOUSE_CATALOG"], f"{page}: {lh.warehouse}, {lh.catalog.name}"
    identifier = f"docs_{uuid.uuid4().hex[:8]}.events"
    lh.write(spark.range(20).selectExpr("id", "id * 2 AS value"), identifier)
    assert_all_readers_agree(lh, spark, duckdb_readers.connect(lh.storage), identifier, [(i, 2 * i) for i in range(20)])


def test_production_instance_config_runs_on_postgres(postgres, tmp_path, monkeypatch):
    """The dagster.yaml on the production page, against the PostgreSQL server the suite runs."""
    (yaml_block,) = [code for page, setup, lang, code in marked_blocks() if setup == "dagster-postgres" and lang == "yaml"]
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml_block)
    url = re.match(r"postgresql\+psycopg2://(?P<user>[^@]+)@(?P<host>[^:]+):(?P<port>\d+)/(?P<db>\w+)", postgres.urls["sqlalchemy"])
    for key, value in {"HOST": url["host"], "PORT": url["port"], "DB": url["db"], "USER": url["user"], "PASSWORD": ""}.items():
        monkeypatch.setenv(f"DAGSTER_PG_{key}", value)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    from dagster import DagsterInstance, job, op

    @op
    def hello() -> None:
        pass

    @job
    def docs_job():
        hello()

    with DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert docs_job.execute_in_process(instance=instance).success
        assert instance.get_runs_count() >= 1

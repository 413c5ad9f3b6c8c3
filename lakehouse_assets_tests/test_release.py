"""What a release promises: the version the package reports, and extras that pin the tested set (no clone needed)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Tools of the UI and `dg`: a project made with create-dagster has its own; they stay in the constraints files.
NOT_IN_EXTRAS = {"dagster-webserver", "dagster-graphql", "dagster-dg-cli", "dagster-postgres"}


def _pins(path: Path) -> list[str]:
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and re.split(r"[=<>!~]", line)[0] not in NOT_IN_EXTRAS]


@pytest.mark.parametrize(("extra", "constraints"), [("spark35", "spark-3.5.txt"), ("spark4", "spark-4.txt")])
def test_each_spark_extra_pins_what_its_constraints_file_pins(extra, constraints):
    assert PYPROJECT["project"]["optional-dependencies"][extra] == _pins(ROOT / "constraints" / constraints)


def test_every_extra_pin_is_a_dependency_of_the_library():
    """An extra may narrow the library's own dependencies (and theirs), never add a package users did not ask for."""
    declared = {re.split(r"[\[=<>!~ ]", d)[0] for d in PYPROJECT["project"]["dependencies"]}
    transitive = {"dagster-shared", "dagster-pipes", "dagster-spark"}  # Dagster's own, pinned with it
    for extra in ("spark35", "spark4"):
        names = {re.split(r"[=<>!~]", p)[0] for p in PYPROJECT["project"]["optional-dependencies"][extra]}
        assert names <= declared | transitive, names - declared - transitive


def test_the_package_reports_the_released_version():
    from importlib.metadata import version

    from click.testing import CliRunner

    from lakehouse_assets.cli import cli

    assert version("lakehouse_assets") == PYPROJECT["project"]["version"]
    assert CliRunner().invoke(cli, ["--version"]).output.strip() == f"lakehouse, version {PYPROJECT['project']['version']}"

"""The documentation builds and every snippet in it runs, so the docs cannot drift from the code.

Python and bash code blocks in README.md and docs/*.md run here, page by page, in a fresh working
directory (so `./warehouse` is a temporary warehouse) with the session's Spark. A block preceded by an
HTML comment `<!-- not-run: reason -->` installs packages or starts long-running servers, and its reason names
the test that does the same steps; a block marked `<!-- servers: SETUP -->` configures the lakehouse for a
server and runs against the suite's own (test_docs_configuration.py); every other block runs. Blocks of one
page share a namespace, in order.

A page that defines assets has them materialized, not only loaded: by its own `materialize(...)` calls, or
here, from the `Definitions` it builds. Every table a successful materialization wrote must then hold rows,
the same number in Iceberg (pyiceberg) and in Delta (delta-rs), and `verify` must find the formats agree.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import java_iceberg

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# `<!-- not-run: reason -->`: never run here; `<!-- java-iceberg: reason -->`: run where the Java Iceberg runtime is
# (Spark 3.5 here, java_iceberg.available); `<!-- servers: SETUP -->`: run by test_docs_configuration.py.
FENCE = re.compile(r"(?:<!-- (?P<kind>not-run|java-iceberg|servers):[^>]*-->\s*\n)?^```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```\s*$", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not-run: (?P<reason>[^>]*)-->\s*\n```", re.M)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[tuple[str, str, bool]]:
    """(language, code, runs) for each fenced block of a page."""
    java = java_iceberg.available()
    return [(m["lang"], m["code"], m["kind"] is None or (m["kind"] == "java-iceberg" and java)) for m in FENCE.finditer(page.read_text())]


def test_every_block_names_a_known_language_and_skips_are_few():
    skipped = []
    for page in PAGES:
        for lang, code, _ in blocks(page):
            assert lang in {"python", "bash", "text", "yaml", "json"}, f"{page.name}: a block has no or an unknown language: {code[:60]!r}"
        skipped += [f"{page.name}: {m['reason']}" for m in NOT_RUN.finditer(page.read_text())]
    # 6: `make demo` twice (test_demo.py), the install walkthrough (test_user_project.py), `make bench`
    # (test_bench_merge_on_read.py), the webserver and daemon (test_daemon.py), Trino (no server installs here).
    assert len(skipped) <= 6, f"{len(skipped)} blocks are marked not-run; only installs and long-running servers: {skipped}"
    assert all(re.search(r"test_\w+\.py", reason) for reason in skipped), f"a not-run block names no test doing its steps: {skipped}"


def test_the_site_builds_strictly(tmp_path):
    """`make docs`: every nav page exists, every link and API reference resolves, no warning."""
    out = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    cli_page = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "maintain" in cli_page and "verify" in cli_page  # generated from the click commands
    api_page = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "Lakehouse" in api_page and "read_arrow" in api_page and "rollback" in api_page  # generated from the docstrings


@pytest.mark.parametrize("page", [p for p in PAGES if any(r and lang in {"python", "bash"} for lang, _, r in blocks(p))], ids=lambda p: p.name)
def test_snippets_run(page, spark, tmp_path, monkeypatch):
    import dagster

    materializations: list[tuple] = []  # (assets, resources, result) of every materialization, the page's own and ours
    real_materialize = dagster.materialize

    def recording_materialize(assets, *args, **kwargs):
        result = real_materialize(assets, *args, **kwargs)
        materializations.append((list(assets), kwargs.get("resources") or {}, result))
        return result

    monkeypatch.setattr(dagster, "materialize", recording_materialize)  # before the page imports it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAKEHOUSE_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # no user catalog configuration leaks in
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    ran = 0
    for lang, code, runs in blocks(page):
        if not runs:
            continue
        if lang == "python":
            # dont_inherit: a snippet runs as in a user's file, without this module's `from __future__ import annotations`
            exec(compile(code, f"{page.name}", "exec", dont_inherit=True), namespace)  # noqa: S102 - the docs' own snippets
            ran += 1
        elif lang == "bash":
            for line in code.splitlines():
                command = line.split("#", 1)[0].strip()
                if command:
                    out = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
                    assert out.returncode == 0, f"{page.name}: `{command}` failed:\n{out.stdout}\n{out.stderr}"
            ran += 1
    assert ran > 0
    _materialize_definitions(page, namespace, recording_materialize)
    _check_materialized_tables(page, namespace, materializations)


def _asset_defs(namespace: dict) -> list:
    from dagster import AssetsDefinition

    return [v for v in namespace.values() if isinstance(v, AssetsDefinition) and v.keys]  # asset checks have no asset keys


def _materialize_definitions(page: Path, namespace: dict, materialize) -> None:
    """Each `Definitions` the page built, materialized with its own assets and resources."""
    from dagster import Definitions

    for defs in (v for v in namespace.values() if isinstance(v, Definitions)):
        result = materialize(list(defs.assets), resources=dict(defs.resources or {}))
        assert result.success, f"{page.name}: materializing its Definitions failed"


def _materialized_keys(result) -> set:
    return {event.asset_key for event in result.get_asset_materialization_events()}


def _check_materialized_tables(page: Path, namespace: dict, runs: list[tuple]) -> None:
    """Every asset the page defines was materialized successfully, and each table written holds rows in both formats."""
    from deltalake import DeltaTable

    from lakehouse_assets.dagster.resources import LakehouseResource

    defined = {key for a in _asset_defs(namespace) for key in a.keys}
    materialized = {key for _, _, result in runs if result.success for key in _materialized_keys(result)}
    assert defined <= materialized, f"{page.name}: assets defined but never materialized: {sorted(k.to_user_string() for k in defined - materialized)}"
    checked = 0
    for _, resources, result in runs:
        lakehouse = resources.get("lakehouse")
        if not result.success or not isinstance(lakehouse, LakehouseResource):
            continue
        lh = lakehouse.get()
        for key in _materialized_keys(result):
            identifier = ".".join(key.path)
            if identifier not in lh.table_names():
                continue  # an asset that writes no table of its own (a publish step)
            iceberg_rows = lh.read_arrow(identifier).num_rows
            assert iceberg_rows > 0, f"{page.name}: {identifier} holds no rows"
            table = lh.load(identifier)
            if lh.delta_enabled(table):
                delta = DeltaTable(table.location().removeprefix("file://"), storage_options=lh.storage.delta_options(table.location()))
                assert delta.to_pyarrow_dataset().count_rows() == iceberg_rows, f"{page.name}: {identifier} has other rows in Delta than in Iceberg"
                assert lh.verify(identifier)["agree"], f"{page.name}: the formats of {identifier} disagree"
            checked += 1
    assert checked or not defined, f"{page.name}: its assets wrote no table"


def test_every_page_is_in_the_site_navigation_and_linked_from_the_home_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    home = (ROOT / "docs" / "index.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "index.md":
            assert f": {page.name}" in nav, f"docs/{page.name} is not in mkdocs.yml's nav"
            assert f"]({page.name})" in home, f"docs/{page.name} is not linked from docs/index.md"

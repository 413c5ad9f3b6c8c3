"""The Dagster UI works for a person: a real headless Chromium drives `dagster dev`.

One `dagster dev` (fresh DAGSTER_HOME and warehouse, a free port) and one browser serve the whole
test; every step is done by clicking and typing in the UI, and GraphQL or the Lakehouse API only
confirm what the UI showed. Each step saves a screenshot into the folder printed at the start
(`LAKEHOUSE_UI_SCREENSHOTS` picks the folder; the default is /tmp/lakehouse-ui-*/screenshots).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from .dagster_dev import LOCATION, graphql, running_dagster_dev

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PARTITION = "2024-01-01"
DEMO_TABLES = ["demo.customers", "demo.events", "demo.daily_user_activity", "demo.invoices", "demo.invoices_quarantine"]
# demo/invoices' contract checks: the rows of its write that break each (it quarantines them).
INVOICE_CHECKS = {"amount_positive": 8, "known_currency": 5, "not_null_invoice_id": 0, "unique_invoice_id": 0}
AUTOMATIONS = [
    ("sensors", "lakehouse_compaction_sensor"),
    ("sensors", "lakehouse_delta_lag_sensor"),
    ("sensors", "lakehouse_delta_checkpoint_sensor"),
    ("sensors", "lakehouse_foreign_commits_sensor"),
    ("schedules", "lakehouse_nightly_maintenance"),
]
RUN_TIMEOUT_S = 420
UI_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def dagster_ui():
    # Not a pytest tmp folder: concurrent pytest sessions rotate those away, and the screenshots
    # and the server log must outlive the test. The instance and the warehouse are removed after.
    root = Path(tempfile.mkdtemp(prefix="lakehouse-ui-"))
    warehouse = root / "warehouse"
    try:
        with running_dagster_dev(root, warehouse) as dev:
            yield {**dev, "warehouse": str(warehouse), "root": root}
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


_graphql = graphql


def _instigator_status(base: str, kind: str, name: str) -> str:
    """RUNNING / STOPPED, as the instance stores it (to confirm what the UI switch shows)."""
    field, selector, arg, typename = (
        ("sensorOrError", "SensorSelector", "sensorSelector", "Sensor")
        if kind == "sensors"
        else ("scheduleOrError", "ScheduleSelector", "scheduleSelector", "Schedule")
    )
    state = "sensorState" if kind == "sensors" else "scheduleState"
    name_key = "sensorName" if kind == "sensors" else "scheduleName"
    data = _graphql(
        base,
        f"query($s: {selector}!) {{ {field}({arg}: $s) {{ __typename ... on {typename} {{ {state} {{ status }} }} }} }}",
        {"s": {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", name_key: name}},
    )[field]
    assert data["__typename"] == typename, data
    return data[state]["status"]


def _assert_instigator_status(base: str, kind: str, name: str, want: str, timeout_s: float = 30) -> None:
    """The switch updates at once; the instance follows when the UI's mutation completes."""
    deadline = time.monotonic() + timeout_s
    while (status := _instigator_status(base, kind, name)) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status == want, f"{kind[:-1]} {name} is {status} in the instance, not {want}"


class Screens:
    """Numbered screenshots; a failing step leaves a *-FAILED.png and names itself in the error."""

    def __init__(self, page, folder: Path):
        self.page, self.folder = page, folder

    def shot(self, name: str, full_page: bool = False) -> Path:
        path = self.folder / f"{name}.png"
        if not full_page:
            self.page.screenshot(path=str(path))
            return path
        # The UI scrolls inside its own panes, so a "full page" screenshot is only the viewport:
        # grow the viewport to the tallest pane for this one picture instead.
        size = self.page.viewport_size
        height = self.page.evaluate("() => Math.max(...Array.from(document.querySelectorAll('*'), e => e.scrollHeight))")
        self.page.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), 2600)})
        try:
            self.page.wait_for_timeout(500)
            self.page.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size(size)
        return path

    @contextlib.contextmanager
    def step(self, name: str, full_page: bool = False):
        try:
            yield
        except BaseException as e:
            with contextlib.suppress(Exception):
                self.shot(f"{name}-FAILED", full_page=True)
            e.add_note(f"UI step {name!r} failed at {self.page.url}; screenshots in {self.folder}")
            raise
        self.shot(name, full_page=full_page)


def _launched_run_id(page) -> str:
    """The run id from the 'Launched run ... View' toast."""
    from playwright.sync_api import expect

    link = page.locator("a[href^='/runs/']", has_text="View").first
    expect(link).to_be_visible(timeout=UI_TIMEOUT_MS)
    return link.get_attribute("href").rsplit("/", 1)[-1]


def _wait_for_run_in_ui(page, base: str, run_id: str) -> str:
    """Open the run page and wait until its status tag shows a final state; return it."""
    page.goto(f"{base}/runs/{run_id}")
    final = page.get_by_text(re.compile(r"^(Success|Failure|Canceled)$"))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    last_reload = time.monotonic()
    while time.monotonic() < deadline:
        if final.count():
            return final.first.inner_text().strip()
        if time.monotonic() - last_reload > 30:  # the page updates live; a reload is a fallback only
            page.reload()
            last_reload = time.monotonic()
        page.wait_for_timeout(2000)
    raise AssertionError(f"run {run_id} did not finish within {RUN_TIMEOUT_S}s")


def _assert_run_succeeded(page, base: str, port: int, run_id: str) -> None:
    from dagster import DagsterRunStatus
    from dagster_graphql import DagsterGraphQLClient

    status = _wait_for_run_in_ui(page, base, run_id)
    assert status == "Success", f"run {run_id} ended as {status!r} in the UI"
    assert DagsterGraphQLClient("127.0.0.1", port_number=port).get_run_status(run_id) == DagsterRunStatus.SUCCESS


def _metadata_value(page, key: str) -> str:
    """The value cell of one row of the asset page's metadata table."""
    from playwright.sync_api import expect

    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=key, exact=True))
    expect(row.first).to_be_visible(timeout=UI_TIMEOUT_MS)
    # Overview rows are key | timestamp | value; event rows are key | value | (empty).
    cells = [c.strip() for c in row.first.get_by_role("cell").all_inner_texts()]
    return [c for c in cells if c][-1]


def _execute_check_in_ui(page, base: str, port: int, asset: str, passes: bool) -> None:
    """Run the asset's formats_agree check from its Checks tab (a run of just the check; the check
    is blocking, so its failure fails the run)."""
    from dagster import DagsterRunStatus
    from dagster_graphql import DagsterGraphQLClient

    page.goto(f"{base}/assets/demo/{asset}?view=checks")
    page.get_by_role("button").filter(has_text=re.compile(r"^Execute$")).click()
    run_id = _launched_run_id(page)
    status = _wait_for_run_in_ui(page, base, run_id)
    assert status == ("Success" if passes else "Failure"), f"check run {run_id} ended as {status!r}"
    expected = DagsterRunStatus.SUCCESS if passes else DagsterRunStatus.FAILURE
    assert DagsterGraphQLClient("127.0.0.1", port_number=port).get_run_status(run_id) == expected
    page.goto(f"{base}/assets/demo/{asset}?view=checks")


def _int(text: str) -> int:
    return int(text.replace(",", "").strip())


def _set_launchpad_config(page, yaml_text: str) -> None:
    """Replace the launchpad's CodeMirror content the way a person pastes: select all, insert."""
    from playwright.sync_api import expect

    editor = page.locator(".CodeMirror")
    expect(editor).to_be_visible(timeout=UI_TIMEOUT_MS)
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(yaml_text)
    shown = page.locator(".CodeMirror-code").inner_text()
    for line in yaml_text.strip().splitlines():
        assert line.strip() in shown, f"launchpad editor lost {line!r}: {shown!r}"


def _dismiss_community_dialog(page, base: str) -> None:
    """The first visit shows a newsletter dialog a few seconds after load; its checkbox would make
    the automation switch ambiguous, so wait for it once up front and skip it (the choice is remembered)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(f"{base}/automation")
    try:
        page.get_by_text("Join the Dagster community").wait_for(timeout=15_000)
        page.get_by_role("button", name="Skip").click()
        page.get_by_text("Join the Dagster community").wait_for(state="hidden")
    except PlaywrightTimeout:
        pass  # not shown on this instance


def _switch(page, base: str, kind: str, name: str, on: bool) -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/locations/{LOCATION}/{kind}/{name}")
    switch = page.get_by_role("checkbox")  # the only one once the community dialog is dismissed
    expect(switch).to_have_count(1, timeout=UI_TIMEOUT_MS)
    if switch.is_checked() != on:
        page.locator("label", has=switch).click()
    (expect(switch).to_be_checked if on else expect(switch).not_to_be_checked)(timeout=UI_TIMEOUT_MS)


def test_dagster_ui_in_a_real_browser(dagster_ui, capsys):
    from playwright.sync_api import expect, sync_playwright
    from pyiceberg.expressions import EqualTo

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core import maintenance
    from lakehouse_assets.dagster.demo_assets import N_USERS

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make setup` (scripts/system-deps.sh installs Debian's chromium)"
    base, port, warehouse = dagster_ui["base"], dagster_ui["port"], dagster_ui["warehouse"]
    folder = Path(os.environ.get("LAKEHOUSE_UI_SCREENSHOTS") or dagster_ui["root"] / "screenshots").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\nUI screenshots: {folder}\ndagster dev: {base} (log {dagster_ui['log']})")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            # A fresh instance greets the first visitor with a newsletter dialog; dismiss it whenever it shows.
            page.add_locator_handler(
                page.get_by_text("Join the Dagster community"), lambda: page.get_by_role("button", name="Skip").click()
            )
            screens = Screens(page, folder)
            _dismiss_community_dialog(page, base)

            # 0. Switch the maintenance sensors and schedule off, so no automatic run changes a
            #    table while the test compares versions (they are switched back on at the end).
            with screens.step("00-automation-off"):
                for kind, name in AUTOMATIONS:
                    _switch(page, base, kind, name, on=False)
                    _assert_instigator_status(base, kind, name, "STOPPED")
                page.goto(f"{base}/automation")
                for _, name in AUTOMATIONS:
                    expect(page.get_by_text(name, exact=True)).to_be_visible()

            # 1. The asset graph of the demo group.
            with screens.step("01-asset-graph"):
                page.goto(f"{base}/locations/{LOCATION}/asset-groups/lakehouse_demo")
                expect(page.get_by_text("lakehouse_demo", exact=True).first).to_be_visible()
                for name in ("customers", "events", "daily_user_activity"):
                    expect(page.get_by_text(name, exact=True).first).to_be_visible()
                expect(page.get_by_text("Loading...")).to_have_count(0)

            # 2. Materialize the unpartitioned asset, then one partition of the partitioned ones.
            run_ids = []
            #    The customers and demo/invoices (an asset under a data contract) in one run, selected in the catalog.
            with screens.step("02a-materialize-customers-and-invoices"):
                page.goto(f"{base}/assets/demo")
                for name in ("customers", "invoices"):
                    box = page.get_by_test_id(f"checkbox-demo/{name}")
                    page.locator("label", has=box).click()
                    expect(box).to_be_checked()
                page.get_by_role("button").filter(has_text=re.compile(r"^Materialize selected")).click()
                run_ids.append(_launched_run_id(page))
            with screens.step("03a-customers-run-succeeded"):
                _assert_run_succeeded(page, base, port, run_ids[-1])

            with screens.step("02b-partition-dialog"):
                page.goto(f"{base}/locations/{LOCATION}/jobs/demo_daily_job")
                page.get_by_role("button").filter(has_text=re.compile(r"^Materialize all")).click()
                dialog = page.get_by_role("dialog")
                expect(dialog).to_be_visible()
                partitions = dialog.get_by_placeholder(re.compile(r"^ex: "))
                partitions.fill(PARTITION)
                partitions.press("Enter")
                expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible()
            with screens.step("02c-partition-launched"):
                dialog.get_by_role("button", name="Launch 1 run").click()
                run_ids.append(_launched_run_id(page))
            with screens.step("03b-partition-run-succeeded"):
                _assert_run_succeeded(page, base, port, run_ids[-1])
                expect(page.get_by_text(f"partition: {PARTITION}")).to_be_visible()

            # 4. Every asset's blocking formats_agree check passed.
            for key in ("customers", "events", "daily_user_activity"):
                with screens.step(f"04-checks-{key}"):
                    page.goto(f"{base}/assets/demo/{key}?view=checks")
                    expect(page.get_by_text("formats_agree", exact=True).first).to_be_visible()
                    expect(page.get_by_text("Succeeded", exact=True)).to_be_visible()
                    expect(page.get_by_text("Passed", exact=True)).to_be_visible()
                    expect(page.get_by_text("Failed", exact=True)).to_have_count(0)

            # 4b. The data contract of demo/invoices: each rule, NOT NULL column and unique key is a check with the
            #     rows the write broke as metadata (the docs' screenshot docs/screenshots/ui-contract-checks.png).
            with screens.step("04b-contract-checks-invoices"):
                page.goto(f"{base}/assets/demo/invoices?view=checks")
                expect(page.get_by_text("Checks (6)", exact=True)).to_be_visible()
                expect(page.get_by_text("Succeeded", exact=True)).to_have_count(4)  # formats_agree and the three kept
                listed = page.inner_text("body")
                for name, broken in INVOICE_CHECKS.items():
                    status = re.search(rf"contract_{name}\n(?:contract_{name}\n)?(Failed|Succeeded)\n", listed)
                    assert status and status.group(1) == ("Failed" if broken else "Succeeded"), (name, listed)
                for name, broken in INVOICE_CHECKS.items():
                    page.goto(f"{base}/assets/demo/invoices?view=checks&checkDetail=contract_{name}")
                    expect(page.get_by_text(f"{broken} row(s) broke '{name}'", exact=False).first).to_be_visible()
                    assert _int(_metadata_value(page, "rows_broken")) == broken and _int(_metadata_value(page, "rows_checked")) == 2_000
                    assert _metadata_value(page, "policy") == "quarantine"
                page.goto(f"{base}/assets/demo/invoices?view=checks&checkDetail=contract_amount_positive")
                expect(page.get_by_text("they were quarantined", exact=False).first).to_be_visible()
                assert _metadata_value(page, "rule") == "amount > 0"
                quarantined = Lakehouse(warehouse).read_arrow("demo.invoices_quarantine")
                assert quarantined.num_rows == sum(INVOICE_CHECKS.values()), quarantined.num_rows

            # 5. The asset pages show the Iceberg snapshot and Delta version; they match the tables.
            lh = Lakehouse(warehouse)
            tables = {t["name"]: t for t in lh.tables()}
            assert sorted(tables) == sorted(DEMO_TABLES), tables.keys()
            for key in ("customers", "events", "daily_user_activity"):
                with screens.step(f"05-asset-page-{key}", full_page=True):
                    page.goto(f"{base}/assets/demo/{key}")
                    snapshot_id = _int(_metadata_value(page, "iceberg_snapshot_id"))
                    delta_version = _int(_metadata_value(page, "delta_version"))
                    table = tables[f"demo.{key}"]
                    assert (snapshot_id, delta_version) == (table["iceberg_snapshot_id"], table["delta_version"]), (key, table)
                    assert _metadata_value(page, "table_location") == table["location"]
                    assert _int(_metadata_value(page, "files_added")) > 0
                    # Table health sits next to the versions (metadata only, recorded with the write).
                    health = maintenance.table_health(lh.context, f"demo.{key}")
                    assert _int(_metadata_value(page, "snapshot_count")) == health["snapshot_count"] == 1
                    assert _int(_metadata_value(page, "delta_log_length")) == health["delta_log_files"]
                    assert _int(_metadata_value(page, "small_file_count")) == health["small_files"]
                    assert _int(_metadata_value(page, "data_file_count")) == health["data_files"]
            with screens.step("05-columns-events", full_page=True):
                # Dagster's table metadata: the Columns view from dagster/column_schema (Iceberg schema, field ids).
                page.goto(f"{base}/assets/demo/events")
                expect(page.get_by_text("Columns", exact=True).first).to_be_visible()
                schema = lh.load("demo.events").schema()
                for field in schema.fields:
                    expect(page.get_by_text(field.name, exact=True).first).to_be_visible()
                    expect(page.get_by_text(f"Iceberg field id {field.field_id}", exact=True).first).to_be_visible()
                expect(page.get_by_text("timestamptz", exact=True).first).to_be_visible()
            with screens.step("05-asset-plots"):
                # Numeric metadata is plotted over time (customers: by materialization, not by partition).
                page.goto(f"{base}/assets/demo/customers")
                page.get_by_role("button", name=re.compile(r"Plots$")).click()
                expect(page.get_by_text("delta_commit_seconds", exact=True).first).to_be_visible()

            # 5b. Another engine commits to Iceberg only (pyiceberg deletes a partition): the check,
            #     run from the UI, fails and shows the differences.
            lh.load("demo.customers").delete(EqualTo("country", "JP"))
            with screens.step("05b-check-failed-shows-differences"):
                _execute_check_in_ui(page, base, port, "customers", passes=False)
                expect(page.get_by_text("Failed", exact=True).first).to_be_visible()
                expect(page.get_by_text(re.compile(r"Delta lags Iceberg by 1 snapshot")).first).to_be_visible()
                expect(page.get_by_text(re.compile(rf"row counts differ: Iceberg \d+, Delta {N_USERS}")).first).to_be_visible()

            # 6. A maintenance run with config from the launchpad: invalid config is refused, valid config runs
            #    (repair mirrors the foreign snapshot to Delta, then full maintenance).
            launchpad = f"{base}/locations/{LOCATION}/jobs/lakehouse_maintenance_job/playground"
            config = "ops:\n  lakehouse_maintenance:\n    config:\n      tables: []\n      operations: [{op}]\n      dry_run: false\n"
            launch = page.get_by_role("button", name=re.compile(r"Launch Run$"))
            with screens.step("06a-launchpad-invalid-config"):
                page.goto(launchpad)
                _set_launchpad_config(page, config.format(op="defragment"))
                expect(page.get_by_text(re.compile(r"operations\[0\] not in enum"))).to_be_visible()
                expect(launch).to_be_disabled()
            with screens.step("06b-launchpad-config"):
                _set_launchpad_config(page, config.format(op="repair, full_maintenance"))
                expect(page.get_by_text("No errors", exact=True)).to_be_visible()
                expect(launch).to_be_enabled()
            with screens.step("06c-maintenance-run-succeeded"):
                launch.click()
                page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}"))
                maintenance_run = page.url.rsplit("/", 1)[-1]
                _assert_run_succeeded(page, base, port, maintenance_run)
                expect(page.get_by_text(re.compile(r"Table demo\.customers: repair")).first).to_be_visible()
                for table in DEMO_TABLES:
                    expect(page.get_by_text(re.compile(rf"Table {re.escape(table)}: full_maintenance")).first).to_be_visible()
            for table in DEMO_TABLES:
                assert lh.verify(table)["agree"], lh.verify(table)
            with screens.step("06d-maintenance-observation"):
                # Each maintained table records what was done and its health afterwards as an observation.
                page.goto(f"{base}/assets/demo/events?view=events")
                expect(page.get_by_text("lakehouse maintenance: full_maintenance").first).to_be_visible()
                current = {t["name"]: t for t in lh.tables()}["demo.events"]
                assert _metadata_value(page, "operation") == "full_maintenance"
                assert _int(_metadata_value(page, "snapshot_count")) == len(lh.load("demo.events").metadata.snapshots)
                assert _int(_metadata_value(page, "iceberg_snapshot_id")) == current["iceberg_snapshot_id"]
                assert _int(_metadata_value(page, "delta_version")) == current["delta_version"]

            with screens.step("06e-check-passes-after-repair"):
                _execute_check_in_ui(page, base, port, "customers", passes=True)
                expect(page.get_by_text("Passed", exact=True)).to_be_visible()
                expect(page.get_by_text("Failed", exact=True)).to_have_count(0)
                # The check saw the repaired (and maintained) table: its current versions, past the foreign snapshot.
                current = {t["name"]: t for t in lh.tables()}["demo.customers"]
                assert _int(_metadata_value(page, "delta_version")) == current["delta_version"] > tables["demo.customers"]["delta_version"]
                assert _int(_metadata_value(page, "iceberg_snapshot_id")) == current["iceberg_snapshot_id"]

            # 7. Schedules and sensors switch back on.
            with screens.step("07-automation-on"):
                for kind, name in AUTOMATIONS:
                    _switch(page, base, kind, name, on=True)
                    _assert_instigator_status(base, kind, name, "RUNNING")
                page.goto(f"{base}/automation")
                expect(page.get_by_role("checkbox", checked=True)).to_have_count(len(AUTOMATIONS))
        finally:
            browser.close()

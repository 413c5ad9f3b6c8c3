"""Many processes opening one brand-new warehouse at the same moment (a Dagster multiprocess run, several runs
starting together): every one of them opens the catalog, creates or finds the namespace, and creates or loads
the same new table. Real processes released at once by a barrier, several rounds, each on a new catalog."""

from __future__ import annotations

import multiprocessing
import traceback
import uuid

PROCESSES = 4
ROUNDS = 3


def _first_contact(barrier, warehouses: list[str], catalog_properties: list[dict | None], results) -> None:
    """One writer process: for each round, wait for the others, then open the warehouse and create its table."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.schema.spec import TableSpec
    from lakehouse_assets.core.table.tables import create_or_load

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
    for warehouse, props in zip(warehouses, catalog_properties):
        barrier.wait(timeout=120)
        try:
            lh = Lakehouse(warehouse, catalog_name="first_contact" if props else None, catalog_properties=props)
            table, _, created = create_or_load(lh.catalog, lh.storage, lh.warehouse, TableSpec("first.events"), schema)
            results.put(("ok", warehouse, created, table.metadata_location))
        except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
            results.put(("error", warehouse, traceback.format_exc(), None))


def _run_processes(warehouses: list[str], catalog_properties: list[dict | None]) -> dict[str, list[tuple]]:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_first_contact, args=(barrier, warehouses, catalog_properties, results)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    outcomes: dict[str, list[tuple]] = {w: [] for w in warehouses}
    try:
        for _ in range(PROCESSES * len(warehouses)):
            status, warehouse, detail, location = results.get(timeout=300)
            outcomes[warehouse].append((status, detail, location))
    finally:
        for p in procs:
            p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    return outcomes


def _assert_one_table_everywhere(outcomes: dict[str, list[tuple]]) -> None:
    for warehouse, round_outcomes in outcomes.items():
        errors = [detail for status, detail, _ in round_outcomes if status != "ok"]
        assert not errors, f"{warehouse}: {len(errors)} of {PROCESSES} processes failed:\n" + "\n".join(errors)
        assert sum(1 for _, created, _ in round_outcomes if created) == 1, f"{warehouse}: exactly one process creates the table"
        assert len({location for _, _, location in round_outcomes}) == 1, f"{warehouse}: every process sees the same table"


def test_processes_opening_a_new_embedded_catalog_at_once_all_succeed(tmp_path):
    warehouses = [str(tmp_path / f"round{i}") for i in range(ROUNDS)]
    _assert_one_table_everywhere(_run_processes(warehouses, [None] * ROUNDS))


def test_processes_opening_a_new_postgres_catalog_at_once_all_succeed(postgres, tmp_path):  # noqa: F811
    import psycopg2

    base = postgres.urls["sqlalchemy"].rsplit("/", 1)[0]
    props = []
    for _ in range(ROUNDS):
        database = "first_" + uuid.uuid4().hex[:10]  # an empty database: the catalog's tables do not exist yet
        conn = psycopg2.connect(base.replace("postgresql+psycopg2://", "postgresql://") + "/postgres")
        conn.autocommit = True
        conn.cursor().execute(f"CREATE DATABASE {database}")
        conn.close()
        props.append({"type": "sql", "uri": f"{base}/{database}"})
    warehouses = [str(tmp_path / f"round{i}") for i in range(ROUNDS)]
    _assert_one_table_everywhere(_run_processes(warehouses, props))

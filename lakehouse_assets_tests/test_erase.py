"""Erasure: after `Lakehouse.erase` no file under the table's root, in either format, holds a row the condition matches
or a value only such a row gave it; the proof decodes every file, and finds what a plain delete leaves behind."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from lakehouse_assets import TableOptions
from lakehouse_assets.core.contracts.model import Contract
from lakehouse_assets.core.errors import InputError, RetentionError

from .conftest import assert_all_readers_agree, rows_of

pytestmark = pytest.mark.smoke

T = "db.customers"
COLUMNS = ("id", "email", "day", "amount")
SUBJECT = "jane.doe.4711@example.org"  # longer than Iceberg's 16-character bound truncation


def _customers(spark, lh, mode="copy-on-write", contract=None):
    rows = [(i, SUBJECT if i == 7 else f"c{i}@example.org", dt.date(2024, 1, 1 + i % 3), i * 10) for i in range(1, 31)]
    df = spark.createDataFrame(rows, "id long, email string, day date, amount int")
    properties = {p: mode for p in ("write.delete.mode", "write.update.mode", "write.merge.mode")}
    lh.write(df.repartition(2), T, "overwrite", partition_by=["day"], table=TableOptions(properties=properties, contract=contract))
    return rows


def _expected(rows):
    return rows_of([dict(zip(COLUMNS, r)) for r in rows if r[1] != SUBJECT])


def _kinds(report) -> set[str]:
    return {"*.avro" if r["file"].endswith(".avro") else r["file"].split("/")[0] for r in report["remnants"]}


def test_a_delete_leaves_the_subject_in_change_data_and_manifests_and_an_erase_removes_every_trace(spark, lh, duck):
    rows = _customers(spark, lh)
    first = lh.load(T).current_snapshot().snapshot_id
    lh.update(T, {"amount": "amount + 1"}, f"email = '{SUBJECT}'")
    lh.delete(T, f"email = '{SUBJECT}'")

    left = lh.prove_erased(T, f"email = '{SUBJECT}'")
    # A delete hides the rows from new reads only: the old files, their manifests' bounds, the change feed's
    # pre-images and the delete's own summary (the condition text) still hold the subject.
    assert not left["erased"] and {"data", "_change_data", "*.avro"} <= _kinds(left), left
    assert left["values_tested_alone"] and left["files_checked"]["Avro manifests and manifest lists"] > 0

    report = lh.erase(T, f"email = '{SUBJECT}'")
    assert report["proof"]["erased"], report["proof"]
    assert report["snapshots_removed"] >= 3 and report["files_deleted"] > 0 and report["rows_erased"] == 0  # already deleted
    assert_all_readers_agree(lh, spark, duck, T, _expected(rows))
    table = lh.load(T)
    assert len(table.metadata.snapshots) == 1 and report["oldest_snapshot_id"] == table.current_snapshot().snapshot_id
    with pytest.raises(RetentionError):
        lh.read(spark, T, snapshot_id=first)
    with pytest.raises(RetentionError):
        lh.read(spark, T, delta_version=0)
    # The condition is kept as a hash: in the audit record, never in a summary, the report or a log.
    audit = table.io.new_input(f"{table.location()}/{report['audit_record']}").open().read().decode()
    assert json.loads(audit)["erasure_id"] == report["erasure_id"] and SUBJECT not in audit and not report["erasure_id_keyed"]
    assert table.current_snapshot().summary["lakehouse.operation"] == "live-manifests"
    assert SUBJECT not in json.dumps(report)
    assert lh.verify(T)["agree"]


def test_an_erase_of_live_rows_rewrites_their_files_and_the_feed_carries_no_event(spark, lh, duck, monkeypatch):
    import hashlib
    import hmac

    rows = _customers(spark, lh)
    before_rows = lh.load(T).current_snapshot().snapshot_id
    monkeypatch.setenv("LAKEHOUSE_ERASURE_KEY", "k3y")
    report = lh.erase(T, "id = 7")
    assert report["rows_erased"] == 1 and report["files_rewritten"] == 1 and report["proof"]["erased"], report
    # The id: an HMAC of the condition under the key, which only a holder of the key can tell from the condition.
    assert report["erasure_id_keyed"] and report["erasure_id"] == hmac.new(b"k3y", b"id = 7", hashlib.sha256).hexdigest()[:32]
    assert_all_readers_agree(lh, spark, duck, T, _expected(rows))
    assert lh.changes(T, lh.load(T).current_snapshot().snapshot_id, spark=spark).count() == 0
    assert before_rows not in {s.snapshot_id for s in lh.load(T).metadata.snapshots}
    # The table goes on: the next write lands in both formats.
    lh.write(spark.createDataFrame([(99, "new@example.org", dt.date(2024, 1, 1), 1)], "id long, email string, day date, amount int"), T, "append")
    assert lh.verify(T)["agree"] and lh.prove_erased(T, "id = 7")["erased"]


def test_merge_on_read_rows_a_deletion_vector_hides_are_rewritten_out_of_the_files(spark, lh, duck):
    rows = _customers(spark, lh, "merge-on-read")
    lh.delete(T, "id = 7")  # a position delete / deletion vector: the row's bytes stay in the data file
    left = lh.prove_erased(T, "id = 7")
    assert not left["erased"] and "data" in _kinds(left)
    report = lh.erase(T, "id = 7")
    assert report["files_rewritten"] == 1 and report["proof"]["erased"], report
    assert_all_readers_agree(lh, spark, duck, T, _expected(rows))
    assert lh.verify(T)["agree"]


def _append_until(warehouse: str, first, stop, done) -> None:
    """Another writer's process: one customer a commit, appended until `stop` is set (and at least three), `first` set
    once the first landed; the rows it appended go into the queue `done`."""
    import time

    import pyarrow as pa

    from lakehouse_assets import Lakehouse

    lh, appended = Lakehouse(warehouse), []
    try:
        while not stop.is_set() or len(appended) < 3:
            i = 1000 + len(appended)
            lh.write(pa.table({"id": pa.array([i], pa.int64()), "email": [f"w{i}@example.org"], "day": pa.array([dt.date(2024, 1, 2)], pa.date32()),
                               "amount": pa.array([i], pa.int32())}), T, "append")
            appended.append((i, f"w{i}@example.org", dt.date(2024, 1, 2), i))
            first.set()
            time.sleep(0.05)  # a few commits a second: a stream's pace, not a loop's
    finally:
        done.put(appended)


def test_an_erase_while_another_writer_appends_leaves_no_trace_and_loses_no_append(spark, lh, duck, warehouse):
    """Another writer's process appends to the table throughout the erasure: its commits queue with the erasure's on the
    table's commit lock, every append lands in both formats, and the proof, run while the appends go on and again
    after them, finds nothing of the subject."""
    import multiprocessing as mp

    rows = _customers(spark, lh)
    spawn = mp.get_context("spawn")
    first, stop, done = spawn.Event(), spawn.Event(), spawn.Queue()
    writer = spawn.Process(target=_append_until, args=(warehouse, first, stop, done))
    writer.start()
    try:
        assert first.wait(120), "the other writer did not append"
        report = lh.erase(T, f"email = '{SUBJECT}'")
    finally:
        stop.set()
        appended = done.get(timeout=300)
        writer.join(60)
    assert writer.exitcode == 0 and len(appended) >= 3
    assert report["rows_erased"] == 1 and report["proof"]["erased"], report["proof"]
    assert lh.prove_erased(T, f"email = '{SUBJECT}'")["erased"]
    assert_all_readers_agree(lh, spark, duck, T, _expected(rows + appended))
    assert lh.verify(T)["agree"]


def test_an_erase_stopped_after_its_rows_left_is_finished_by_running_it_again(spark, lh, duck, monkeypatch):
    """A process that dies after the erasure's commit leaves the rows out of the live files and their history still
    there: the proof says so, and the same erasure run again ends the history."""
    from lakehouse_assets.core.maintenance import erase as erase_module

    rows = _customers(spark, lh)
    real = erase_module._end_history
    monkeypatch.setattr(erase_module, "_end_history", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("stopped")))
    with pytest.raises(RuntimeError, match="stopped"):
        lh.erase(T, f"email = '{SUBJECT}'")
    assert_all_readers_agree(lh, spark, duck, T, _expected(rows))
    left = lh.prove_erased(T, f"email = '{SUBJECT}'")
    assert not left["erased"] and "data" in _kinds(left), left  # the old file, which older snapshots still name
    monkeypatch.setattr(erase_module, "_end_history", real)
    report = lh.erase(T, f"email = '{SUBJECT}'")
    assert report["rows_erased"] == 0 and report["proof"]["erased"], report
    assert_all_readers_agree(lh, spark, duck, T, _expected(rows))
    assert lh.verify(T)["agree"]


def test_a_branch_or_an_untold_quarantine_table_refuses_the_erase_naming_it(spark, lh, duck):
    contract = Contract(rules={"positive": "amount > 0"}, on_violation="quarantine")
    rows = _customers(spark, lh, contract=contract)
    lh.write(spark.createDataFrame([(50, "b@example.org", dt.date(2024, 1, 1), 5)], "id long, email string, day date, amount int"), T, "append", branch="audit")
    with pytest.raises(InputError, match="branch or tag 'audit'"):
        lh.erase(T, "id = 7", dependents=True)
    lh.publish(T, "audit", spark=spark)
    lh.load(T).manage_snapshots().remove_branch("audit").commit()

    bad = spark.createDataFrame([(70, SUBJECT, dt.date(2024, 1, 2), -1)], "id long, email string, day date, amount int")
    lh.write(bad, T, "append")
    assert lh.read(spark, T + "_quarantine").count() == 1
    with pytest.raises(InputError, match="quarantine table db.customers_quarantine"):
        lh.erase(T, f"email = '{SUBJECT}'")
    report = lh.erase(T, f"email = '{SUBJECT}'", dependents=True)
    assert report["proof"]["erased"] and report["quarantine"]["proof"]["erased"], report
    assert lh.read(spark, T + "_quarantine").count() == 0
    assert_all_readers_agree(lh, spark, duck, T, rows_of([dict(zip(COLUMNS, r)) for r in rows if r[0] != 7] + [dict(zip(COLUMNS, (50, "b@example.org", dt.date(2024, 1, 1), 5)))]))


def test_the_proof_does_not_mistake_a_remaining_row_s_values_for_the_subject_s(spark, lh):
    """Literals that remaining rows hold too (a shared country, an id that is the start of another) and bounds cut
    from the subject's value that remaining rows start with are not remnants; what only the subject gave is."""
    rows = [(i, f"c{i}", "DE" if i % 2 else "FR", dt.date(2024, 1, 1)) for i in range(1, 30)]
    lh.write(spark.createDataFrame(rows, "id long, code string, country string, day date"), T, "overwrite", partition_by=["country"])
    report = lh.erase(T, "code = 'c1' AND country = 'DE'")  # c10-c19 stay; DE is every other row's country
    assert report["rows_erased"] == 1 and report["proof"]["erased"], report["proof"]
    assert lh.prove_erased(T, "code = 'c1'")["erased"] and not lh.prove_erased(T, "code = 'c10'")["erased"]


def test_a_table_partitioned_by_the_subject_column_keeps_no_folder_or_tombstone_of_it(spark, lh, duck):
    rows = [(i, SUBJECT if i == 7 else f"c{i}@example.org") for i in range(1, 13)]
    lh.write(spark.createDataFrame(rows, "id long, email string"), T, "overwrite", partition_by=["email"])
    left = lh.prove_erased(T, f"email = '{SUBJECT}'")
    assert not left["erased"], left
    report = lh.erase(T, f"email = '{SUBJECT}'")  # a whole partition: dropped by metadata, its folder and tombstone gone
    assert report["rows_erased"] == 1 and report["proof"]["erased"], report["proof"]
    assert_all_readers_agree(lh, spark, duck, T, rows_of([{"id": i, "email": e} for i, e in rows if e != SUBJECT]))


def test_the_dagster_erase_job_erases_subjects_from_every_asset_declaring_its_subject_column_and_its_check_proves_it(spark, lh, dagster_resources):
    from dagster import AssetSelection, DagsterInstance, asset, materialize

    from lakehouse_assets import lakehouse_definitions
    from lakehouse_assets.dagster.erasure import CHECK_NAME, ERASE_JOB, ERASE_OP, SUBJECT_COLUMN_KEY, build_erasure, erase_run_config

    @asset(key=["db", "customers"], metadata={SUBJECT_COLUMN_KEY: "email"})
    def customers():
        return spark.createDataFrame([(i, SUBJECT if i == 7 else f"c{i}@example.org") for i in range(1, 11)], "id long, email string")

    @asset(key=["db", "orders"], metadata={SUBJECT_COLUMN_KEY: "customer"})
    def orders():
        return spark.createDataFrame([(i, SUBJECT if i % 4 == 0 else "o'neil@example.org") for i in range(1, 13)], "order_id long, customer string")

    defs = lakehouse_definitions([customers, orders], dagster_resources["lakehouse"], dagster_resources["pyspark"])
    instance = DagsterInstance.ephemeral()
    # A plain materialization runs the assets' subjects_erased checks too: with no ids they have nothing to prove.
    plain = materialize([customers, orders, *build_erasure([customers, orders])[1]], resources=dagster_resources, instance=instance)
    assert plain.success and {e.passed for e in plain.get_asset_check_evaluations()} == {True}
    erase = defs.get_job_def(ERASE_JOB).execute_in_process(run_config=erase_run_config([SUBJECT, "nobody@example.org"]), instance=instance)
    assert erase.success
    checks = [e.event_specific_data for e in erase.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert sorted((c.asset_key.to_user_string(), c.check_name, c.passed) for c in checks) == [("db/customers", CHECK_NAME, True), ("db/orders", CHECK_NAME, True)]
    rows = {m.asset_key.to_user_string(): m.metadata["rows_erased"].value for m in erase.asset_materializations_for_node(ERASE_OP)}
    assert rows == {"db/customers": 1, "db/orders": 3}
    assert lh.read(spark, "db.orders").count() == 9 and lh.verify("db.orders")["agree"]  # o'neil stays: quotes are quoted
    # Neither the ids nor the condition reach Dagster's event log: counts and the condition's hash only.
    assert not [e for e in instance.all_logs(erase.run_id) if SUBJECT in str(e.dagster_event or "") + str(e.user_message)]
    # The check runs on its own with the same config, and proves without changing anything.
    (check, _) = build_erasure([customers, orders])[1]
    before = lh.load("db.customers").current_snapshot().snapshot_id
    alone = materialize([customers, check], selection=AssetSelection.checks(check), resources=dagster_resources,
                        run_config={"ops": {check.node_def.name: {"config": {"subject_ids": [SUBJECT]}}}})
    (evaluation,) = alone.get_asset_check_evaluations()
    assert evaluation.passed and lh.load("db.customers").current_snapshot().snapshot_id == before
    failing = materialize([customers, check], selection=AssetSelection.checks(check), resources=dagster_resources,
                          run_config={"ops": {check.node_def.name: {"config": {"subject_ids": ["c3@example.org"]}}}})
    (evaluation,) = failing.get_asset_check_evaluations()
    assert not evaluation.passed and evaluation.metadata["remnants_found"].value > 0


def test_after_a_rename_the_proof_reads_files_and_delta_statistics_by_field_id_and_physical_name(spark, lh, duck):
    rows = _customers(spark, lh)
    lh.upgrade(T)  # Delta column mapping: the Delta log keys statistics by physical names from here on
    lh.alter(T, rename={"email": "contact"})
    lh.write(spark.createDataFrame([(31, SUBJECT, dt.date(2024, 1, 1), 5)], "id long, contact string, day date, amount int"), T, "append")
    left = lh.prove_erased(T, f"contact = '{SUBJECT}'")
    # Files written before the rename name the column `email`, later ones by its physical name: both are read by id.
    assert sum("row(s) the condition matches" in r["where"] for r in left["remnants"]) == 2, left
    assert any(r["file"].startswith("_delta_log/") and "contact" not in r["where"] for r in left["remnants"]), left
    report = lh.erase(T, f"contact = '{SUBJECT}'")
    assert report["rows_erased"] == 2 and report["proof"]["erased"], report["proof"]
    expected = rows_of([dict(zip(("id", "contact", "day", "amount"), r)) for r in rows if r[1] != SUBJECT])
    assert rows_of(lh.read(spark, T).collect()) == expected
    assert lh.verify(T)["agree"]  # (delta-rs's pyarrow reader refuses column-mapped tables)


def test_the_proof_reads_the_condition_s_columns_and_literals_as_spark_does():
    from pyiceberg.expressions import AlwaysTrue

    from lakehouse_assets.core.maintenance.verify.erasure import _truncated, literals
    from lakehouse_assets.core.write.condition import Condition

    def named_columns(sql, names):
        return Condition(sql, AlwaysTrue(), False).columns(names)

    assert named_columns("customer_id = 42 AND note <> 'id'", ["id", "customer_id", "note"]) == ["customer_id", "note"]
    assert named_columns("`Email` IN ('a@b.org')", ["email", "mail"]) == ["email"]
    # Spark reads 'o''neil' as two adjacent literals, "oneil"; a backslash escapes a quote.
    assert literals("email = 'o''neil@x.org' OR name = \"dq\" OR x = 'a\\'b'")[1:] == ["oneil@x.org", "dq", "a'b"]
    literal = "jane.doe.4711@example.org"
    assert _truncated(literal[:16], literal) and _truncated(literal[:15] + chr(ord(literal[15]) + 1), literal)  # Iceberg's bounds
    assert _truncated(literal[:32], literal + "-and-more-than-32-characters")  # Spark's Delta statistics
    assert not _truncated("jane", literal) and not _truncated(literal, literal)  # a short or whole value is no cut

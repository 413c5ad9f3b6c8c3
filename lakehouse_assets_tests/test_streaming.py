"""The streaming sink: Structured Streaming micro-batches written exactly once to both formats.

Each test runs real `availableNow` queries over a landing folder of JSON files; a replay is Spark's own (the
checkpoint's last commit entry removed, as when the process dies before writing it)."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from deltalake import DeltaTable

from lakehouse_assets import MergeOptions, TableOptions, Window

from .conftest import CONNECT, assert_all_readers_agree

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

SCHEMA = "id long, name string, amount long, op string"


_T0, _landed = 1_700_000_000, 0


def land(folder, name: str, rows: list[dict]) -> None:
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    # Spark's file source takes files in modification-time order: files landed in one test get increasing times.
    global _landed
    _landed += 1
    os.utime(tmp, (_T0 + _landed, _T0 + _landed))
    os.replace(tmp, os.path.join(folder, name))  # a file appears whole, as an upload does


def run_stream(spark, landing, checkpoint, sink, *, schema: str = SCHEMA, files_per_batch: int = 1, select=None):
    """One `availableNow` run of a query over `landing`; returns the query (its id, its progress)."""
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_batch).option("mode", "FAILFAST").json(str(landing))
    if select is not None:
        df = select(df)
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return query


def forget_last_batch(checkpoint) -> int:
    """Remove the checkpoint's last commit entry, as when the process dies after the sink and before Spark records the batch."""
    commits = os.path.join(str(checkpoint), "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    os.remove(os.path.join(commits, str(last)))
    crc = os.path.join(commits, f".{last}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    return last


def rows(n0: int, n: int, op: str = "u") -> list[dict]:
    return [{"id": i, "name": f"n{i}", "amount": i * 10, "op": op} for i in range(n0, n0 + n)]


def expected(rs: list[dict]) -> list[tuple]:
    return [tuple(r[c] for c in sorted(r)) for r in rs]  # the readers' rows: columns by name


def stream_batches(lh, identifier: str) -> list[tuple[str, str, int]]:
    """(query id, batch id, rows added) of each stream batch the table's Iceberg snapshots record, oldest first."""
    out = []
    for snapshot in lh.load(identifier).metadata.snapshots:
        summary = snapshot.summary.additional_properties
        if "lakehouse.stream.batch-id" in summary:
            out.append((summary["lakehouse.stream.query-id"], summary["lakehouse.stream.batch-id"], int(summary["added-records"])))
    return out


@pytest.mark.smoke
def test_append_stream_records_query_and_batch_in_both_formats_and_a_replay_commits_nothing(lh, spark, duck, tmp_path):
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    all_rows = []
    for i in range(3):
        land(landing, f"part-{i}.json", rows(i * 10, 10))
        all_rows += rows(i * 10, 10)
    # On Spark Connect the sink runs in the server's Python process (a pickled copy): it cannot see the query's
    # id, so it is given the stream's name, and what it returns stays there (the tables tell what it did).
    name = "events-stream" if CONNECT else None
    sink = lh.stream_writer("db.events", query_id=name)
    query = run_stream(spark, landing, checkpoint, sink)
    stream_id = name or str(query.id)
    assert stream_batches(lh, "db.events") == [(stream_id, "0", 10), (stream_id, "1", 10), (stream_id, "2", 10)]
    if not CONNECT:
        assert [r.rows_written for r in sink.results] == [10, 10, 10]
    assert_all_readers_agree(lh, spark, duck, "db.events", expected(all_rows))
    delta = DeltaTable(lh.table_location("db.events"))
    assert delta.transaction_version(stream_id) == 2  # Delta's txn: appId = the stream's id, version = the batch id

    # Spark replays the last batch (its end was never recorded): nothing is committed again, in either format.
    version, snapshots = delta.version(), len(lh.load("db.events").metadata.snapshots)
    assert forget_last_batch(checkpoint) == 2
    replay = lh.stream_writer("db.events", query_id=name)
    run_stream(spark, landing, checkpoint, replay)
    if not CONNECT:
        assert [r.duplicate_of_earlier_write for r in replay.results] == [True]
    assert len(lh.load("db.events").metadata.snapshots) == snapshots
    assert DeltaTable(lh.table_location("db.events")).version() == version

    # New files after the restart: exactly those land, as batch 3.
    land(landing, "part-3.json", rows(30, 5))
    more = lh.stream_writer("db.events", query_id=name)
    run_stream(spark, landing, checkpoint, more)
    assert stream_batches(lh, "db.events")[3:] == [(stream_id, "3", 5)]
    if not CONNECT:
        assert [r.rows_written for r in more.results] == [5]
    assert_all_readers_agree(lh, spark, duck, "db.events", expected(all_rows + rows(30, 5)))
    assert DeltaTable(lh.table_location("db.events")).transaction_version(stream_id) == 3
    assert lh.verify("db.events", deep=True)["agree"]


def test_a_replayed_batch_after_the_iceberg_commit_catches_delta_up_and_commits_nothing_twice(lh, spark, duck, tmp_path):
    from lakehouse_assets.core.write import transaction

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "a.json", rows(0, 4))
    land(landing, "b.json", rows(4, 4))
    run_stream(spark, landing, checkpoint, lh.stream_writer("db.ev"))
    # The next batch commits to Iceberg and the process "dies" before the Delta commit (the mirror never runs).
    land(landing, "c.json", rows(8, 4))
    original = transaction.mirror_to_delta
    transaction.mirror_to_delta = lambda *a, **k: None
    try:
        run_stream(spark, landing, checkpoint, lh.stream_writer("db.ev"))
    finally:
        transaction.mirror_to_delta = original
    assert lh.delta_lag("db.ev") == 1
    forget_last_batch(checkpoint)
    replay = lh.stream_writer("db.ev")
    run_stream(spark, landing, checkpoint, replay)
    assert [r.duplicate_of_earlier_write for r in replay.results] == [True]
    assert lh.delta_lag("db.ev") == 0
    assert_all_readers_agree(lh, spark, duck, "db.ev", expected(rows(0, 12)))


def test_merge_stream_upserts_and_deletes_per_batch(lh, spark, duck, tmp_path):
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", rows(0, 6))
    land(
        landing, "1.json", [{"id": 1, "name": "one", "amount": 11, "op": "u"}, {"id": 2, "name": None, "amount": None, "op": "d"}, {"id": 9, "name": "n9", "amount": 90, "op": "u"}]
    )
    land(landing, "2.json", [{"id": 9, "name": None, "amount": None, "op": "d"}, {"id": 3, "name": "three", "amount": 33, "op": "u"}])
    sink = lh.stream_writer("db.customers", "merge", merge=MergeOptions(keys="id", operation_column="op"))
    run_stream(spark, landing, checkpoint, sink)
    assert len(sink.results) == 3
    want = {r["id"]: r for r in rows(0, 6)}
    want[1] = {"id": 1, "name": "one", "amount": 11, "op": "u"}
    want[3] = {"id": 3, "name": "three", "amount": 33, "op": "u"}
    del want[2]
    want = [{k: v for k, v in r.items() if k != "op"} for r in want.values()]  # the operation column is not stored
    assert_all_readers_agree(lh, spark, duck, "db.customers", expected(want))
    forget_last_batch(checkpoint)
    replay = lh.stream_writer("db.customers", "merge", merge=MergeOptions(keys="id", operation_column="op"))
    run_stream(spark, landing, checkpoint, replay)
    assert [r.duplicate_of_earlier_write for r in replay.results] == [True]
    assert_all_readers_agree(lh, spark, duck, "db.customers", expected(want))


def test_overwrite_stream_replaces_the_window_each_batch_holds(lh, spark, duck, tmp_path):
    from pyspark.sql import functions as F

    def day_of(df, batch_id):
        first = df.agg(F.min("day")).first()[0]  # one value: the batch's day (metadata-sized, not table rows)
        return Window("day", first, first + dt.timedelta(days=1))

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    schema = "id long, name string, amount long, op string, day date"
    land(landing, "0.json", [{**r, "day": "2024-01-01"} for r in rows(0, 3)])
    land(landing, "1.json", [{**r, "day": "2024-01-02"} for r in rows(3, 3)])
    land(landing, "2.json", [{**r, "day": "2024-01-01"} for r in rows(10, 2)])  # day 1 again: replaces it
    sink = lh.stream_writer("db.daily", "overwrite", window=day_of, partition_by=["day"])
    run_stream(spark, landing, checkpoint, sink, schema=schema)
    got = sorted((r["id"], str(r["day"])) for r in lh.read(spark, "db.daily").collect())
    assert got == [(3, "2024-01-02"), (4, "2024-01-02"), (5, "2024-01-02"), (10, "2024-01-01"), (11, "2024-01-01")]
    assert_all_readers_agree(lh, spark, duck, "db.daily")


def test_writer_outside_a_stream_needs_a_query_id_and_is_idempotent_with_one(lh, spark):
    from lakehouse_assets.core.errors import SpecError

    df = spark.createDataFrame([(1, "a", 1, "u")], SCHEMA)
    with pytest.raises(SpecError, match="query_id="):
        lh.stream_writer("db.t")(df, 0)
    sink = lh.stream_writer("db.t", query_id="nightly-load")
    assert not sink(df, 0).duplicate_of_earlier_write
    assert sink(df, 0).duplicate_of_earlier_write
    assert sink(df, 1).rows_written == 1
    assert lh.read(spark, "db.t").count() == 2
    with pytest.raises(SpecError, match="window= is for mode='overwrite'"):
        lh.stream_writer("db.t", window=Window("day", dt.date(2024, 1, 1), dt.date(2024, 1, 2)))


@pytest.mark.smoke  # on Spark Connect the sink runs in the server's Python process (`make connect`)
def test_dagster_streaming_asset_ingests_each_new_file_once_per_run_and_is_safe_to_retry(lh, spark, duck, dagster_resources, warehouse, tmp_path):
    from dagster import materialize

    from lakehouse_assets.dagster.streaming import streaming_ingest_asset

    from .conftest import materialization_metadata

    landed = streaming_ingest_asset("orders", key_prefix=["shop"], table="shop.orders", landing="{warehouse}/_landing/orders", schema=SCHEMA, max_files_per_batch=2)
    landing = os.path.join(warehouse, "_landing", "orders")
    resources = {k: dagster_resources[k] for k in ("lakehouse", "pyspark")}

    def run():
        result = materialize([landed], resources=resources)
        assert result.success
        return materialization_metadata(result, ["shop", "orders"])

    for i in range(3):
        land(landing, f"{i}.json", rows(i * 10, 10))
    first = run()
    assert (first["batches_committed"], first["dagster/row_count"]) == (2, 30)
    assert first["batches_replayed"] == 0 if not CONNECT else "batches_replayed" not in first
    assert first["source_offsets"] == {"end_offsets": [{"logOffset": 0}, {"logOffset": 1}]}
    land(landing, "3.json", rows(30, 7))  # lands between two runs: the second run ingests exactly this file
    second = run()
    assert (second["batches_committed"], second["dagster/row_count"], second["source_offsets"]) == (1, 7, {"end_offsets": [{"logOffset": 2}]})
    # A retry of a run that died after its commit and before the checkpoint recorded it: nothing lands twice.
    forget_last_batch(os.path.join(warehouse, "_checkpoints", "shop.orders"))
    retry = run()
    assert (retry["batches_committed"], retry["dagster/row_count"]) == (0, 0)
    # Replays are counted where the sink runs in the run's own process; a Connect server's sink skips them unseen.
    assert retry["batches_replayed"] == 1 if not CONNECT else "batches_replayed" not in retry
    assert_all_readers_agree(lh, spark, duck, "shop.orders", expected(rows(0, 37)))


def test_a_malformed_file_stops_the_stream_naming_it_and_the_fixed_file_lands_once(lh, spark, duck, tmp_path):
    from lakehouse_assets.core.errors import WriteError

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", rows(0, 3))
    land(landing, "1.json", rows(3, 3))
    (landing / "1.json").write_text('{"id": 3, "name": "n3", "amount": 30, "op": "u"}\n{"id": 4, "name": broken\n')
    with pytest.raises(Exception) as caught:
        run_stream(spark, landing, checkpoint, lh.stream_writer("db.landed"))
    message = str(caught.value)
    assert "db.landed, stream" in message and "batch 1: " in message and "Malformed records" in message, message
    assert f"{WriteError.__name__}: " in message and "restart the query from its checkpoint" in message, message
    before = lh.load("db.landed").current_snapshot().snapshot_id
    assert lh.read(spark, "db.landed").count() == 3  # batch 0 only: nothing of batch 1 in either format
    land(landing, "1.json", rows(3, 3))  # the fix: the file replaced by a good one
    run_stream(spark, landing, checkpoint, lh.stream_writer("db.landed"))
    assert lh.load("db.landed").current_snapshot().snapshot_id != before
    assert_all_readers_agree(lh, spark, duck, "db.landed", expected(rows(0, 6)))


def test_a_schema_change_mid_stream_and_repeated_merge_keys_stop_the_batch_with_the_fix(lh, spark, duck, tmp_path):
    from pyspark.sql import functions as F

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", rows(0, 3))
    merge = MergeOptions(keys="id", operation_column="op")
    run_stream(spark, landing, checkpoint, lh.stream_writer("db.m", "merge", merge=merge))
    land(landing, "1.json", rows(3, 2) + [{"id": 3, "name": "n3b", "amount": 31, "op": "u"}])  # key 3 twice in one batch
    with pytest.raises(Exception, match=r"(?s)db\.m, stream .*batch 1: .*(duplicate|more than once|repeat).*restart the query"):
        run_stream(spark, landing, checkpoint, lh.stream_writer("db.m", "merge", merge=merge))
    assert lh.read(spark, "db.m").count() == 3
    # The keys fixed (the last row of a key wins), but the query restarted with amount as a string: the table's is a long.
    fixed = MergeOptions(keys="id", operation_column="op", order_by="amount")
    as_text = lambda df: df.withColumn("amount", F.concat(F.col("amount").cast("string"), F.lit(" EUR")))  # noqa: E731
    with pytest.raises(Exception, match=r"(?s)db\.m, stream .*batch 1.*amount.*restart the query"):
        run_stream(spark, landing, checkpoint, lh.stream_writer("db.m", "merge", merge=fixed), select=as_text)
    assert lh.read(spark, "db.m").count() == 3
    # Both fixed: the batch lands once.
    run_stream(spark, landing, checkpoint, lh.stream_writer("db.m", "merge", merge=fixed))
    want = [(r["amount"], r["id"], r["name"]) for r in rows(0, 5) if r["id"] != 3] + [(31, 3, "n3b")]  # order_by amount: the last row of key 3
    assert_all_readers_agree(lh, spark, duck, "db.m", want)


def test_maintenance_runs_while_a_stream_of_small_batches_writes_and_compaction_bounds_the_files(lh, spark, duck, tmp_path):
    import time

    from lakehouse_assets.core.formats.iceberg.committer import live_data_files

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", rows(0, 5))
    run_stream(spark, landing, checkpoint, lh.stream_writer("db.small"))  # the table exists before maintenance starts
    for i in range(1, 9):
        land(landing, f"{i}.json", rows(i * 5, 5))
    sink = lh.stream_writer("db.small")
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(landing))
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    rounds = 0
    try:
        while query.isActive or rounds == 0:
            # By hand, as the schedule would: compaction, snapshot expiry, orphan cleanup, Delta checkpoints.
            report = lh.maintain("db.small", "full_maintenance", spark=spark, snapshot_retention_days=0)  # expires every older snapshot
            assert report, report
            rounds += 1
            time.sleep(0.2)
        query.awaitTermination()
    finally:
        query.stop()
    assert len(sink.results) == 8 and rounds >= 1
    assert_all_readers_agree(lh, spark, duck, "db.small", expected(rows(0, 45)))
    assert lh.verify("db.small", deep=True)["agree"]
    lh.maintain("db.small", "compaction", spark=spark)
    assert len(live_data_files(lh.load("db.small"))) == 1  # nine small batches, one file after compaction
    assert_all_readers_agree(lh, spark, duck, "db.small", expected(rows(0, 45)))


def test_a_hundred_and_twenty_small_batches_then_scheduled_maintenance_leave_bounded_files_and_snapshots(lh, spark, tmp_path):
    """More commits than Delta's checkpoint interval and Iceberg's manifest merge count: the manifests merge
    mid-stream, the log's checkpoint falls due (no write writes one: it walks every live file) and the scheduled
    maintenance writes it, and leaves one file and two snapshots."""
    from lakehouse_assets.core import maintenance
    from lakehouse_assets.core.formats.iceberg.committer import live_data_files

    batches = 120
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    for i in range(batches):
        land(landing, f"{i:03d}.json", rows(i * 2, 2))
    sink = lh.stream_writer("db.trickle", table=TableOptions(properties={"lakehouse.small-writes.commits": "0"}))
    run_stream(spark, landing, checkpoint, sink)
    table = lh.load("db.trickle")
    assert len(sink.results) == batches and len(live_data_files(table)) == batches
    log = table.location().removeprefix("file://") + "/_delta_log"
    assert not os.path.exists(f"{log}/_last_checkpoint")
    assert maintenance.delta_log_stats(lh.context, table)["delta_checkpoint_due"]  # what the checkpoint sensor asks for
    assert len(table.current_snapshot().manifests(table.io)) < batches  # Iceberg merged the manifests
    # What the maintenance schedule runs (full_maintenance), with a retention of 0 days and at least 2 snapshots kept.
    lh.maintain("db.trickle", "full_maintenance", spark=spark, snapshot_retention_days=0, min_snapshots_to_keep=2)
    table = lh.load("db.trickle")
    assert len(live_data_files(table)) == 1 and len(table.metadata.snapshots) == 2
    assert os.path.exists(f"{log}/_last_checkpoint") and not maintenance.delta_log_stats(lh.context, table)["delta_checkpoint_due"]
    assert lh.read(spark, "db.trickle").count() == 2 * batches
    assert lh.verify("db.trickle", deep=True)["agree"]


def test_a_lakehouse_pickles_as_its_arguments_and_the_copy_opens_the_same_catalog(tmp_path):
    """What a Spark Connect server's Python process receives of a sink: a Lakehouse made again, not a connection."""
    import pickle

    from lakehouse_assets import Lakehouse

    lh = Lakehouse(str(tmp_path / "warehouse"), delta_configuration={"delta.logRetentionDuration": "interval 7 days"})
    lh.catalog.create_namespace("db")
    copy = pickle.loads(pickle.dumps(lh.stream_writer("db.events", query_id="events-stream"))).lakehouse
    assert copy is not lh and copy.warehouse == lh.warehouse and copy.catalog is not lh.catalog
    assert ("db",) in copy.catalog.list_namespaces()
    assert copy.delta_configuration["delta.logRetentionDuration"] == "interval 7 days"


def test_the_dagster_asset_names_the_malformed_file_and_lands_it_once_when_fixed(lh, spark, duck, dagster_resources, warehouse):
    from dagster import materialize

    from lakehouse_assets.dagster.streaming import streaming_ingest_asset

    landed = streaming_ingest_asset("returns", key_prefix=["shop"], table="shop.returns", landing="{warehouse}/_landing/returns", schema=SCHEMA, max_files_per_batch=1)
    landing = os.path.join(warehouse, "_landing", "returns")
    resources = {k: dagster_resources[k] for k in ("lakehouse", "pyspark")}
    land(landing, "0.json", rows(0, 3))
    assert materialize([landed], resources=resources).success
    land(landing, "1.json", rows(3, 2))
    with open(os.path.join(landing, "1.json"), "w") as f:
        f.write('{"id": 3, "name": "n3", "amount": 30, "op": "u"}\n{"id": 4, "name": broken\n')
    before = lh.load("shop.returns").current_snapshot().snapshot_id
    failed = materialize([landed], resources=resources, raise_on_error=False)
    assert not failed.success
    error = str([e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"][0].event_specific_data.error)
    assert "Table shop.returns: batch 1 of the stream over" in error and "1.json (" in error and "Malformed records" in error, error
    assert "0.json" not in error and "Nothing of batch 1 was committed in either format" in error, error
    assert lh.load("shop.returns").current_snapshot().snapshot_id == before
    land(landing, "1.json", rows(3, 2))  # the fix
    assert materialize([landed], resources=resources).success
    assert_all_readers_agree(lh, spark, duck, "shop.returns", expected(rows(0, 5)))


def test_a_merge_batch_that_loses_to_a_compaction_is_planned_again_and_lands_once(lh, spark, duck, tmp_path, monkeypatch, caplog):
    """Compaction commits between a merge batch's planning and its commit (as the schedule's would, mid-stream): the
    batch's commit conflicts (the file it rewrote is gone), the sink plans it again against the compacted file, and the
    batch lands once, in both formats."""
    import logging

    from lakehouse_assets.core.write import write_modes

    for start in (0, 3, 6):
        lh.write(spark.createDataFrame([(i, f"n{i}", i * 10) for i in range(start, start + 3)], "id long, name string, amount long"), "db.race")
    from lakehouse_assets.core.formats.iceberg.committer import live_data_files

    live_before = len(live_data_files(lh.load("db.race")))
    real_plan, compactions = write_modes.plan, []

    def plan_then_compaction(*args, **kwargs):
        out = real_plan(*args, **kwargs)
        if not compactions:  # once: the batch's first attempt
            compactions.append(lh.maintain("db.race", "compaction", spark=spark, compaction_min_input_files=2))
        return out

    monkeypatch.setattr(write_modes, "plan", plan_then_compaction)
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", [{"id": 4, "name": "four", "amount": 44, "op": "u"}, {"id": 20, "name": "n20", "amount": 200, "op": "u"}])
    sink = lh.stream_writer("db.race", "merge", merge=MergeOptions(keys="id", operation_column="op"))
    with caplog.at_level(logging.INFO, logger="lakehouse"):
        run_stream(spark, landing, checkpoint, sink)
    assert compactions[0]["committed"] and compactions[0]["files_rewritten"] == live_before >= 3
    assert "stream batch 0 lost a race (attempt 1), planning it again" in caplog.text
    assert len(sink.results) == 1 and not sink.results[0].duplicate_of_earlier_write
    assert [h["operation"] for h in lh.history("db.race")][:2] == ["merge", "compaction"]
    want = [{"id": i, "name": f"n{i}", "amount": i * 10} for i in range(9) if i != 4] + [{"id": 4, "name": "four", "amount": 44}, {"id": 20, "name": "n20", "amount": 200}]
    assert_all_readers_agree(lh, spark, duck, "db.race", expected(want))


def test_the_scheduled_maintenance_run_while_a_stream_writes_loses_nothing(lh, spark, duck, dagster_resources, tmp_path):
    """What the nightly schedule requests (full maintenance of every table), run by Dagster's maintenance job again and
    again while a stream of small batches commits: every batch lands once, both formats agree."""
    import datetime as dt

    from dagster import build_schedule_context

    from lakehouse_assets.dagster.maintenance import OP_NAME, lakehouse_maintenance_job, nightly_maintenance_schedule

    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    land(landing, "0.json", rows(0, 5))
    run_stream(spark, landing, checkpoint, lh.stream_writer("db.scheduled"))  # the table exists before maintenance starts
    for i in range(1, 7):
        land(landing, f"{i}.json", rows(i * 5, 5))
    request = nightly_maintenance_schedule(build_schedule_context(scheduled_execution_time=dt.datetime(2026, 1, 2, 3, 0, tzinfo=dt.timezone.utc)))
    run_config = request.run_config
    run_config["ops"][OP_NAME]["config"].update(snapshot_retention_days=0, min_snapshots_to_keep=1)  # expire all they can
    resources = {k: dagster_resources[k] for k in ("lakehouse", "pyspark")}
    sink = lh.stream_writer("db.scheduled")
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(landing))
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    runs = []
    try:
        while query.isActive or not runs:
            runs.append(lakehouse_maintenance_job.execute_in_process(run_config=run_config, resources=resources, raise_on_error=False).success)
        query.awaitTermination()
    finally:
        query.stop()
    assert runs and all(runs) and len(sink.results) == 6
    assert_all_readers_agree(lh, spark, duck, "db.scheduled", expected(rows(0, 35)))
    assert lh.verify("db.scheduled", deep=True)["agree"]

"""A streaming process for the kill tests: one `availableNow` query over a landing folder into a lakehouse table,
optionally SIGKILLed (the whole process group: Python and Spark's JVM) at a named phase of one micro-batch.

    python -m lakehouse_assets_tests.stream_process WAREHOUSE LANDING CHECKPOINT TABLE MODE [KILL_AT KILL_BATCH]

Phases (what has happened to batch KILL_BATCH when the process dies):
    offsets_written     Spark recorded the batch's offsets in the checkpoint; the sink has not run
    files_written       the batch's Parquet files exist; nothing is committed
    iceberg_committed   the Iceberg snapshot is committed; the Delta commit has not run
    delta_committed     both formats committed; Spark has not recorded the batch as done
    commit_written      Spark recorded the batch as done in the checkpoint

The hooks wrap the project's functions from outside (this script only): production code has no test hook.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time


def die() -> None:
    sys.stdout.flush()
    os.killpg(os.getpgrp(), signal.SIGKILL)


def watch_for(path: str) -> None:
    """SIGKILL as soon as `path` exists (a checkpoint file Spark writes)."""

    def run():
        while not os.path.exists(path):
            time.sleep(0.002)
        die()

    threading.Thread(target=run, daemon=True).start()


def sink_for(lh, identifier: str, mode: str):
    """The stream's sink: an append, or a merge by `id` with the `op` column's deletes."""
    from lakehouse_assets import MergeOptions

    options = {"merge": MergeOptions(keys="id", operation_column="op")} if mode == "merge" else {}
    return lh.stream_writer(identifier, mode, **options)


def report(query, sink) -> dict:
    """The query's id and, per batch, the rows written and whether it was a replay of an earlier write."""
    return {"query_id": str(query.id), "batches": [[r.rows_written, r.duplicate_of_earlier_write] for r in sink.results]}


def main(warehouse: str, landing: str, checkpoint: str, identifier: str, mode: str, kill_at: str = "", kill_batch: str = "1") -> None:
    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.spark.session import spark_session
    from lakehouse_assets.core.write import transaction, writer

    spark = spark_session({"spark.master": "local[1]", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    lh = Lakehouse(warehouse)
    current = {"batch": None}
    target = int(kill_batch)

    def armed(phase: str) -> bool:
        return kill_at == phase and current["batch"] == target

    def killed_after(run_job):
        def write_job(*args, **kwargs):
            rows = run_job(*args, **kwargs)
            if armed("files_written"):
                die()
            return rows

        return write_job

    # A write's files come from one of the two: a job over the batch's rows, or one over task indexes (a merge's).
    writer.run_write_job = killed_after(writer.run_write_job)
    writer.run_write_tasks = killed_after(writer.run_write_tasks)
    mirror_to_delta = transaction.mirror_to_delta

    def mirror(*args, **kwargs):
        if armed("iceberg_committed"):
            die()
        return mirror_to_delta(*args, **kwargs)

    transaction.mirror_to_delta = mirror
    sink = sink_for(lh, identifier, mode)

    def batch(df, batch_id):
        current["batch"] = batch_id
        result = sink(df, batch_id)
        if armed("delta_committed"):
            die()
        return result

    if kill_at == "offsets_written":
        watch_for(os.path.join(checkpoint, "offsets", str(target)))
    if kill_at == "commit_written":
        watch_for(os.path.join(checkpoint, "commits", str(target)))
    df = spark.readStream.schema("id long, name string, amount long, op string").option("maxFilesPerTrigger", 1).json(landing)
    query = df.writeStream.foreachBatch(batch).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    print(json.dumps(report(query, sink)))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])

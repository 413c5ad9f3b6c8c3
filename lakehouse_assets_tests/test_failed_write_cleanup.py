"""A failed write leaves none of its files behind, whatever its other tasks were doing when it failed: the driver
waits until every task of the write's jobs has ended before it sweeps their files (core/spark/compat.py), and a
Python worker that outlives its task removes what it writes after (core/spark/worker_socket.py)."""

from __future__ import annotations

import os
import socket
import time

import pyarrow as pa
import pytest

from lakehouse_assets.core.io.storage import StorageConfig
from lakehouse_assets.core.spark import compat, worker_socket
from lakehouse_assets.core.write import writer as writer_module
from lakehouse_assets.core.write.compaction_tasks import one_output_writer
from lakehouse_assets.core.write.parquet_files import FILE_ROW_ARROW, FileWriter


def test_task_ended_is_the_executor_closing_the_socket_even_with_input_unread():
    """The executor's end closed is what ends a task for its worker, though input the worker never read (PySpark's
    end-of-stream marker) is still waiting in the socket."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        executor = socket.create_connection(listener.getsockname())
        worker, _ = listener.accept()
    daemon = _daemon_calling(lambda sock, authenticated: worker_socket.task_ended())
    try:
        assert worker_socket.reading_with_quick_acks(daemon)(worker, True) is False
        executor.sendall(b"\xff\xff\xff\xfc")  # unread input: the socket is readable, the task still runs
        assert worker_socket.task_ended() is False
        executor.close()
        assert worker_socket.task_ended() is True
    finally:
        worker_socket._task_socket = None
        worker.close()
    assert worker_socket.task_ended() is False  # not in a worker the project's daemon forked: it cannot tell


@pytest.mark.smoke  # on a Spark Connect server too (`make connect`): its workers are the project's daemon's
def test_a_running_task_knows_its_socket_and_has_not_ended(spark):
    rows = spark.range(0, 2, 1, 2).mapInArrow(_socket_state(), "known boolean, ended boolean").collect()
    assert [tuple(r) for r in rows] == [(True, False), (True, False)]


def _socket_state():
    def state(batches):  # (a closure ships by value: executors need not import the tests)
        from lakehouse_assets.core.spark import worker_socket

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"known": worker_socket._task_socket is not None, "ended": worker_socket.task_ended()}])

    return state


def test_no_task_of_a_failed_job_writes_after_its_tasks_were_waited_for(spark, tmp_path):
    """Task 0 fails at once; task 1, started with it, writes a file 1.5 s later (unless Spark kills its worker first).
    Once `stop_tagged_jobs` returns, no file appears any more: it waited for the job's end in the status store (which
    may count a task's start up to 100 ms late) and for no task of it running."""
    tag = "lakehouse-write-stopped"
    with compat.tagged_jobs(spark, tag), pytest.raises(Exception, match="task 0 fails"):
        spark.sparkContext.parallelize(range(2), 2).mapPartitionsWithIndex(_fail_or_write_late(str(tmp_path))).collect()
    assert compat.stop_tagged_jobs(spark, tag) is True
    at_return = sorted(os.listdir(tmp_path))
    time.sleep(2.5)  # past task 1's write, had it gone on
    assert sorted(os.listdir(tmp_path)) == at_return


def _fail_or_write_late(folder: str):
    def task(index, rows):
        if index == 0:
            raise ValueError("task 0 fails")
        time.sleep(1.5)
        with open(os.path.join(folder, f"written-by-task-{index}"), "w") as f:
            f.write("late")
        return iter(())

    return task


@pytest.mark.smoke  # on a Spark Connect server too: its tasks are stopped another way, its workers check the same
def test_a_worker_outliving_its_task_removes_the_files_it_writes_after(spark, tmp_path):
    """Task 1 writes a file, and its row reaches the executor (enough output to flush the worker's buffer) after task
    0 failed the job: the executor ends the killed task and closes its socket. The worker goes on to its second
    file, finds its task ended and removes its files. Without the check the second file would stay: the driver's
    sweep is over by then."""
    root = f"file://{tmp_path}/table"
    write_id = "0123456789abcdef"
    file_writer = FileWriter(root, write_id, pa.schema([("id", pa.int64())]), StorageConfig(), target_file_size=1 << 20)
    second_started = str(tmp_path / "second-file-started")
    tasks = _two_files_after_a_flush([one_output_writer(file_writer, write_id, i, 0) for i in range(2)], second_started)
    with pytest.raises(Exception, match="task 0 fails"):
        writer_module.run_write_tasks(spark, 2, tasks, writer_module.file_row_schema(), write_id, storage=StorageConfig(), root_uri=root, table_name="t")
    deadline = time.monotonic() + 20
    while not os.path.exists(second_started) and time.monotonic() < deadline:
        time.sleep(0.1)
    steps = open(second_started + ".steps").read() if os.path.exists(second_started + ".steps") else "(none)"
    assert os.path.exists(second_started), f"the worker never went on to its second file; its steps, seconds after the test began:\n{steps}"
    time.sleep(1.0)  # the worker writes, checks and removes its second file
    left = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "table") for f in fs]
    assert left == []


def _two_files_after_a_flush(writers: list[FileWriter], second_started: str):
    """mapInArrow over task indexes: task 0 fails 0.3 s after task 1 started; task 1 writes a file through
    `writers[0]`, then rows enough to flush PySpark's 64 KB output buffer (the executor reads them and ends the killed
    task), then, once its task has ended, a file through `writers[1]`."""

    began = time.time()

    def tasks(batches):
        from lakehouse_assets.core.spark import worker_socket

        def step(text):  # what the worker did, and when: a failure's message shows where it stopped
            with open(second_started + ".steps", "a") as f:
                f.write(f"{time.time() - began:.2f} task 1 (pid {os.getpid()}): {text}\n")

        for batch in batches:
            for task in batch.column(0).to_pylist():
                if task == 0:
                    # Fail the job once task 1 runs: a task of an earlier test still holding a core would otherwise
                    # leave task 1 unlaunched when the job fails, and nothing to test.
                    deadline = time.monotonic() + 10
                    while not os.path.exists(second_started + ".steps") and time.monotonic() < deadline:
                        time.sleep(0.05)
                    time.sleep(0.3)
                    raise ValueError("task 0 fails")
                step("started")
                time.sleep(0.8)  # task 0 has failed the job: this task is to be killed
                yield from writers[0](iter([pa.record_batch({"id": [1, 2, 3]})]))
                step("wrote its first file")
                padding = {"path": "padding", "size": 0, "record_count": 0, "partition_key": "{}", "footer": b"\0" * 200_000}
                for _ in range(2):  # a classic session's RDD road sends rows two at a time by now
                    yield pa.RecordBatch.from_pylist([padding], schema=FILE_ROW_ARROW)
                step("sent its padding rows")
                deadline = time.monotonic() + 10
                while not worker_socket.task_ended() and time.monotonic() < deadline:
                    time.sleep(0.05)
                step(f"task ended: {worker_socket.task_ended()}")
                open(second_started, "w").close()
                yield from writers[1](iter([pa.record_batch({"id": [4, 5, 6]})]))

    return tasks


def _daemon_calling(run):
    import types

    daemon = types.ModuleType("pyspark_daemon")
    daemon.os, daemon.worker = os, run
    return daemon

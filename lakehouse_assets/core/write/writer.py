"""The Spark job that writes a table's Parquet files exactly once, on the executors (driver side).

The executors run the file kit (core/write/parquet_files.py) over the DataFrame's Arrow batches; partitioned
writes first add Iceberg-exact partition values (core/schema/partition_columns.py, or core/write/partition_keys.py's
Python pass) and shuffle by them, so each partition lands in as few files as possible. The job runs as many
tasks as the data's size asks for (core/spark/planning.py), however many partitions the input arrives in. The driver receives
one small row per file (path, size, row count, partition, Parquet footer) and never sees table rows. A
failed job leaves nothing behind: its tasks are stopped and every file of the write is removed.
"""

from __future__ import annotations

import json
import logging
import re
import uuid

import pyarrow as pa
import pyarrow.fs  # noqa: F401  (pa.fs)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema

from ..errors import InputError, WriteError
from ..io.storage import StorageConfig, join_uri
from ..model import WrittenFile
from ..schema.type_mapping import arrow_file_schema, narrow_integers
from ..spark.compat import is_connect, map_in_arrow
from ..spark.planning import at_most, by_key, write_tasks
from .parquet_files import FILE_ROW_FIELDS, WRITE_TAG_PREFIX, FileWriter
from .partition_keys import PARTITION_KEY_COLUMN, PARTITION_VALUE_PREFIX, PartitionKeyer, decode_partition_value

log = logging.getLogger("lakehouse")


def write_files(
    df,
    *,
    root_uri: str,
    schema: Schema,
    spec: PartitionSpec,
    delta_columns: list[str],
    storage: StorageConfig,
    target_file_size: int,
    compression: str = "zstd",
    compression_level: int | None = 3,
    table_name: str = "",
    file_names: dict[int, str] | None = None,
    narrow: dict[int, str] | None = None,
) -> list[WrittenFile]:
    """Write `df` as Parquet files under `<root_uri>/data/`, distributed over the executors.

    If any task fails, every file of this write is removed before the error (one line, naming the table
    and the executor's cause, which stays the `__cause__`) reaches the caller."""
    write_id = uuid.uuid4().hex[:16]
    arrow_schema = arrow_file_schema(schema, file_names, narrow)
    key_columns: tuple[str, ...] = ()
    keyer = None
    tasks = write_tasks(df, target_file_size)  # from the data's size, not from how the input is partitioned
    if spec.fields:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        from ..schema.partition_columns import dense_keys, partition_columns

        keyer = PartitionKeyer(schema.model_dump_json(), spec.model_dump_json(), tuple(delta_columns))
        exprs = partition_columns(schema, spec)
        if exprs is not None:
            # Spark computes Iceberg's partition values (no Python pass); the writer turns each run into a key.
            key_columns = tuple(f"{PARTITION_VALUE_PREFIX}{i}" for i in range(len(exprs)))
            # The shuffle's map side in as many tasks as the write too (200 input partitions: 200 tasks' overhead).
            # Each key in one task (the writer fans out by key, no sort); the values are added after the shuffle.
            # Data for one task needs no shuffle: its one task holds every key (a small write saves a stage).
            df = by_key(at_most(df, tasks), tasks, exprs, dense_keys(spec)) if tasks > 1 else at_most(df, 1)
            df = df.select("*", *[e.alias(k) for e, k in zip(exprs, key_columns)])
        else:
            keyed_schema = StructType([*df.schema.fields, StructField(PARTITION_KEY_COLUMN, StringType(), False)])
            keyed = at_most(df, tasks).mapInArrow(keyer, keyed_schema)  # the Python pass in as many tasks as the write
            df = keyed.repartition(tasks, F.col(PARTITION_KEY_COLUMN)).sortWithinPartitions(PARTITION_KEY_COLUMN)
    else:
        df = at_most(df, tasks)  # no shuffle; fewer partitions only (an input with fewer keeps its own)
    # Classic sessions: the writer takes the write id from the job's tag, so equal writes reuse one Python UDF.
    reuse = not is_connect(df)
    writer = FileWriter(
        root_uri, None if reuse else write_id, arrow_schema, storage, target_file_size, compression, compression_level,
        key_columns=key_columns, keyer=keyer if key_columns else None, input_names=_input_names(schema, file_names),
    )
    rows = run_write_job(map_in_arrow(df, writer, file_row_schema(), reuse=reuse), write_id, storage=storage, root_uri=root_uri, table_name=table_name)
    return written_files(rows)


def _input_names(schema: Schema, file_names: dict[int, str] | None) -> tuple[str, ...] | None:
    return tuple(f.name for f in schema.fields) if file_names else None


def file_writer(settings: dict, write_id: str, storage: StorageConfig) -> FileWriter:
    """A FileWriter with a table's layout and Parquet settings (`table_write_settings`), for executor tasks whose rows carry their partition key."""
    return FileWriter(
        settings["root_uri"], write_id, arrow_file_schema(settings["schema"], settings["file_names"], settings["narrow"]), storage, settings["target_file_size"],
        settings["compression"], settings["compression_level"], input_names=_input_names(settings["schema"], settings["file_names"]),
    )


def run_write_job(mapped, write_id: str, *, storage: StorageConfig, root_uri: str, table_name: str) -> list:
    """Collect `mapped`, a DataFrame whose tasks write this write's files (named `<write_id>-...`) and
    return one small row per file (never table rows). If any task fails, every file of the write is
    removed before the error (one line, naming the table and the executor's cause, which stays the
    `__cause__`) reaches the caller."""
    return _run(mapped.sparkSession, mapped.collect, write_id, storage=storage, root_uri=root_uri, table_name=table_name)


def run_write_tasks(spark, tasks: int, fn, schema, write_id: str, *, storage: StorageConfig, root_uri: str, table_name: str) -> list[dict]:
    """`run_write_job` for a job whose input is its task indexes only (`fn`: a mapInArrow function, task `i` given
    `id = i`; `schema`: its rows' Spark types): run as `compat.run_indexed_tasks`, its rows as dicts."""
    from ..spark.compat import run_indexed_tasks

    return _run(spark, lambda: run_indexed_tasks(spark, tasks, fn, schema), write_id, storage=storage, root_uri=root_uri, table_name=table_name)


def _run(spark, collect, write_id: str, *, storage: StorageConfig, root_uri: str, table_name: str) -> list:
    from ..spark.compat import tagged_jobs

    tag = f"{WRITE_TAG_PREFIX}{write_id}"
    try:
        with tagged_jobs(spark, tag):  # this write's jobs, to stop their tasks if it fails
            return collect()
    except Exception as e:
        _stop_tasks_and_remove_files(spark, tag, storage, root_uri, write_id)
        raise executor_error(table_name, storage, root_uri, e) from e


def written_files(rows) -> list[WrittenFile]:
    """The writer's file rows (FILE_ROW_FIELDS) as WrittenFiles."""
    files = []
    for r in rows:
        key = json.loads(r["partition_key"])
        files.append(
            WrittenFile(
                path=r["path"],
                size=r["size"],
                record_count=r["record_count"],
                partition_values=tuple(decode_partition_value(v) for v in key["values"]),
                footer=bytes(r["footer"]),
            )
        )
    return files


def file_row_schema():
    """The writer's output rows as a StructType (a DDL string would be parsed by the JVM on every write, ~7 ms)."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    types = {"string": StringType(), "long": LongType(), "binary": BinaryType()}
    return StructType([StructField(name, types[t]) for name, t in FILE_ROW_FIELDS])


def write_table_files(df, table, storage: StorageConfig, *, schema: Schema | None = None, target_file_size: int | None = None) -> list[WrittenFile]:
    """`write_files` with the table's own layout and Parquet settings (`table_write_settings`), so every
    writer of a table agrees."""
    return write_files(df, storage=storage, **table_write_settings(table, schema or table.schema(), target_file_size))


def table_write_settings(table, schema: Schema, target_file_size: int | None = None) -> dict:
    """A table's layout and Parquet settings as `write_files` arguments: location, schema, partition spec,
    Delta partition columns, target file size, codec and level, its name for error messages, and the columns'
    names in the files (Delta column mapping's physical names; None: the columns' names)."""
    from ..formats.file_columns import file_names
    from ..io.storage import normalize_uri
    from ..properties import TableProperties
    from ..schema.spec import ALL_FORMATS, delta_partition_columns, parquet_compression, target_file_bytes

    props = table.properties
    table_name = ".".join(table.name())
    compression, compression_level = parquet_compression(props, table_name)
    return dict(
        root_uri=normalize_uri(table.location()),
        schema=schema,
        spec=table.spec(),
        # Iceberg-only tables have no Delta partition values to refuse.
        delta_columns=delta_partition_columns(table.spec(), schema) if "delta" in props.get(TableProperties.FORMATS, ",".join(ALL_FORMATS)).split(",") else [],
        target_file_size=target_file_size or target_file_bytes(props, table_name),
        compression=compression,
        compression_level=compression_level,
        table_name=table_name,
        file_names=file_names(table, schema),
        narrow=narrow_integers(props),  # a Delta byte/short column of an imported table: its files keep the Delta type
    )


def _stop_tasks_and_remove_files(spark, tag: str, storage: StorageConfig, root_uri: str, write_id: str) -> None:
    """Stop what still runs of a failed write's jobs, then remove every file it wrote. When a job fails, its other
    tasks are still running (Spark kills them asynchronously): one of them could open a file after the driver swept
    the write's files, and a killed Python worker cannot remove it. A worker that outlives its task removes what it
    writes after the task ended itself (core/spark/worker_socket.py).

    A classic session sees the tasks end. A Connect session cannot see tasks: its tasks are interrupted, and the
    write's files are swept until Spark has surely killed every Python worker of the job (its kill timeout, plus a
    margin) and a sweep finds nothing left."""
    import time

    from ..spark.compat import python_task_kill_seconds, stop_tagged_jobs

    if stop_tagged_jobs(spark, tag):
        remove_written_files(storage, root_uri, write_id)
        return
    settle_until = time.monotonic() + python_task_kill_seconds(spark) + _CONNECT_KILL_MARGIN_S
    deadline = settle_until + 60.0
    while True:
        found = remove_written_files(storage, root_uri, write_id)
        now = time.monotonic()
        if (now >= settle_until and not found) or now >= deadline:
            return
        time.sleep(0.25)


_CONNECT_KILL_MARGIN_S = 2.0  # past the kill timeout: the executor's monitor checks a killed task once a timeout


def remove_written_files(storage: StorageConfig, root_uri: str, write_id: str) -> int:
    """Delete every file of one write under `<root>/data/` (its names start with the write id) and under
    `<root>/_change_data/` (the change data a merge's tasks write, `cdc-<write id>-...`): what the finished tasks
    of a failed job wrote, and what killed tasks could not clean up themselves. Returns how many it found."""
    from ..formats.delta.log_commit import CHANGE_DATA_DIR

    mine = []
    for folder, prefix, recursive in (("data", f"{write_id}-", True), (CHANGE_DATA_DIR, f"cdc-{write_id}-", False)):
        fs, root = storage.filesystem(join_uri(root_uri, folder))
        try:
            found = fs.get_file_info(pa.fs.FileSelector(root, recursive=recursive, allow_not_found=True))
        except OSError as e:  # the storage error itself (e.g. access denied) is what the caller reports
            log.warning("cannot list %s to remove a failed write's files: %s", root, e)
            continue
        mine += [(fs, info) for info in found if info.type == pa.fs.FileType.File and info.base_name.startswith(prefix)]
    for fs, info in mine:
        try:
            fs.delete_file(info.path)
        except OSError as e:
            log.warning("cannot remove %s of a failed write: %s", info.path, e)
    return len(mine)


def executor_error(table_name: str, storage: StorageConfig, root_uri: str, error: BaseException) -> Exception:
    """A failed Spark job as one line naming the table and the cause (the executor's last error line)."""
    from ..io.storage import storage_error

    if (clear := storage_error(storage, root_uri, error)) is not None:
        return clear  # access denied, endpoint, region: the actionable storage advice
    cause = _executor_cause(error, limit=2000)
    refused = re.search(r"UnrepresentableValue: (.*)", cause)  # Python's (keyer) or a Spark raise_error (partition_columns)
    if refused:
        return InputError(f"Table {table_name}: {refused.group(1)} Nothing was written or committed.")
    cause = _one_line(cause)
    return WriteError(f"Table {table_name}: writing the data files failed on the executors: {cause}. Nothing was committed and the files this write had written were removed.")


def _executor_cause(error: BaseException, limit: int = 240) -> str:
    """The Python worker's final `Type: message` line, else the first line of Spark's task failure."""
    text = str(error)
    if "Traceback (most recent call last)" in text:
        tail = text.rsplit("Traceback (most recent call last)", 1)[1]
        lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.startswith((" ", "\t")) and ": " in ln]
        if lines:
            return _one_line(lines[-1], limit)
    m = re.search(r"most recent failure: Lost task .*? executor [^)]*\): (.*)", text)  # "(localhost executor driver)"
    if m:
        return _one_line(m.group(1), limit)
    return _one_line(f"{type(error).__name__}: {text.strip().splitlines()[0] if text.strip() else ''}", limit)


def _one_line(s: str, limit: int = 240) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"

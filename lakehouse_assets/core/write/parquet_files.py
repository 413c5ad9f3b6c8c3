"""The Parquet file kit that runs inside executor tasks: files written once, rolled at the target size.

Each task turns its Arrow batches into Parquet files through pyarrow's filesystem layer (the same code for
file:// and object stores). Files carry Iceberg field ids (and, under Delta column mapping, the columns'
physical names), hold exactly one Iceberg partition, and roll over at the target size. Each file closes
into one small row (path, size, row count, partition key, Parquet footer): all the driver ever sees.
The Spark job that runs this kit is core/write/writer.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs  # noqa: F401  (pa.fs)
import pyarrow.parquet as pq

from ..io.storage import StorageConfig
from ..schema.conform import conform_batch
from ..spark.archives import keep_spark_archives_indexed
from ..spark.worker_socket import task_ended
from .partition_keys import PARTITION_KEY_COLUMN, UNPARTITIONED_KEY, PartitionKeyer

ROW_GROUP_BYTES = 64 * 1024 * 1024
# A write task keeps a file open per partition key it holds (the shuffle clusters keys into tasks, no sort):
# at most this many at once (beyond, the oldest is closed: one more file) and this many bytes buffered.
MAX_OPEN_FILES = 128
FANOUT_PENDING_BYTES = 256 * 1024 * 1024
DICTIONARY_SAMPLE_ROWS = 10_000
# A task holding several keys groups its rows this many bytes at a time (see FileWriter._groups).
STAGE_BYTES = 32 * 1024 * 1024
WRITE_TAG_PREFIX = "lakehouse-write-"  # + write id: the tag of a write's Spark jobs (core/write/writer.py)
FILE_ROW_FIELDS = (("path", "string"), ("size", "long"), ("record_count", "long"), ("partition_key", "string"), ("footer", "binary"))

@dataclass
class FileWriter:
    """The mapInArrow function that writes Parquet files and yields one metadata row per file."""

    root_uri: str
    # The prefix of this write's file names. None: the write id in the tag of the Spark job running the task, so
    # one writer (and its Python UDF) serves every write of equal settings, e.g. a stream's batches.
    write_id: str | None
    arrow_schema: pa.Schema
    storage: StorageConfig
    target_file_size: int
    compression: str = "zstd"
    compression_level: int | None = 3
    # Partition values computed by Spark expressions (core/schema/partition_columns.py): the hidden columns
    # holding them, and the keyer that turns one run's values into its key. Empty: the key column path.
    key_columns: tuple[str, ...] = ()
    keyer: "PartitionKeyer | None" = None
    # The rows' name of each file column, when the files name columns otherwise (Delta column mapping's physical names).
    input_names: tuple[str, ...] | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        keep_spark_archives_indexed()  # for this worker's later tasks
        ctx = TaskContext.get()
        self._attempt = ctx.taskAttemptId() if ctx else 0
        self._write_id = self.write_id if self.write_id is not None else _tagged_write_id()  # this task's write
        self._seq = 0
        self._fs, _ = self.storage.filesystem(self.root_uri)
        self._opened: list[str] = []  # full paths this task created: removed again if the task fails
        self._open_files: dict[str, _RollingFile] = {}
        try:
            yield from self._write(batches)
        except Exception:
            # Spark discards a failed task's output: remove its files (the driver sweeps what a killed task leaves).
            # Open files close first: an object store's upload would complete when its stream is collected.
            for f in self._open_files.values():
                f.abandon()
            for path in self._opened:
                try:
                    self._fs.delete_file(path)
                except OSError:
                    pass
            raise

    def _write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # One open file per partition key seen by this task ("fanout"): rows computed by Spark's partition
        # expressions arrive clustered by key (the shuffle) but not sorted, so no Spark sort is needed.
        open_files = self._open_files
        results: list[dict] = []
        for groups in self._groups(batches):
            for key, part in groups:
                current = open_files.get(key)
                if current is None:
                    if len(open_files) >= MAX_OPEN_FILES:  # bounded streams and buffers: close the oldest
                        oldest = next(iter(open_files))
                        results.append(open_files[oldest].close())
                        del open_files[oldest]
                    current = open_files[key] = _RollingFile(self, key)
                done = current.write(conform_batch(part, self.arrow_schema, self.input_names))
                if done is not None:
                    results.append(done)
                    del open_files[key]
            _bound_pending(open_files.values())
            if results:
                yield self._reported(results)
                results = []
        for key in list(open_files):  # each removed once closed: a file failing to close is abandoned
            results.append(open_files[key].close())
            del open_files[key]
        if results:
            yield self._reported(results)

    def _reported(self, results: list[dict]) -> pa.RecordBatch:
        """The rows of closed files, if the task still runs: a worker outliving its task (core/spark/worker_socket.py)
        raises, and its files are removed."""
        raise_if_task_ended(self._write_id)
        return file_rows(results)

    def _groups(self, batches: Iterator[pa.RecordBatch]) -> Iterator[list[tuple[str, pa.RecordBatch]]]:
        """The input's rows as (partition key, rows) runs, a list of runs at a time."""
        if not self.key_columns:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                key_index = batch.schema.get_field_index(PARTITION_KEY_COLUMN)
                # Unpartitioned, or the keyer's path (input sorted by its key column).
                yield [(UNPARTITIONED_KEY, batch)] if key_index < 0 else split_by_key(batch, key_index)
            return
        # Rows clustered by key but interleaved: group many batches at once, so each key's rows reach its
        # file as one long run (one sort per stage, not one per 10k-row batch; and Parquet encodes long
        # runs faster than many short slices).
        key_of = self._key_cache()
        staged: list[pa.RecordBatch] = []
        staged_bytes = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            staged.append(batch)
            staged_bytes += batch.nbytes
            if staged_bytes >= STAGE_BYTES:
                yield group_by_columns(_one_batch(staged), self.key_columns, key_of)
                staged, staged_bytes = [], 0
        if staged:
            yield group_by_columns(_one_batch(staged), self.key_columns, key_of)

    def dictionary_columns(self, first: pa.Table) -> list[str]:
        """Decided once per task from the first file's first rows: the columns' nature does not change per file."""
        if not hasattr(self, "_dictionary"):
            self._dictionary = _dictionary_columns(first)
        return self._dictionary

    def _key_cache(self):
        if not hasattr(self, "_keys"):
            self._keys = {}

        def key(values: tuple) -> str:
            if values not in self._keys:
                self._keys[values] = self.keyer.key_for(values)
            return self._keys[values]

        return key

    def next_path(self, key_dir: str) -> str:
        self._seq += 1
        name = f"{self._write_id}-{self._attempt:05d}-{self._seq:05d}.parquet"
        return "/".join(p for p in ("data", key_dir, name) if p)


class TaskEnded(RuntimeError):
    """A Python worker's task ended on the executor while the worker still wrote its files."""


def raise_if_task_ended(write_id: str) -> None:
    """Raise `TaskEnded` in a worker whose task ended under it (core/spark/worker_socket.py): its caller removes the
    files it wrote."""
    if task_ended():
        raise TaskEnded(f"the executor ended this task of write {write_id} (its job failed or was cancelled): its files are removed")


def _tagged_write_id() -> str:
    from ..spark.compat import task_tag

    tag = task_tag() or ""
    if not tag.startswith(WRITE_TAG_PREFIX):
        raise RuntimeError(f"a file writer without a write id runs in a Spark job not tagged as a write (tag {tag!r})")
    return tag.removeprefix(WRITE_TAG_PREFIX)


def _one_batch(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def split_by_key(batch: pa.RecordBatch, key_index: int) -> list[tuple[str, pa.RecordBatch]]:
    """The keyer's path (input sorted by its key column): the batch's runs of one key, the key column dropped."""
    if batch.num_rows == 0:
        return []
    keys = batch.column(key_index)
    data = batch.drop_columns([PARTITION_KEY_COLUMN]) if hasattr(batch, "drop_columns") else pa.RecordBatch.from_arrays(
        [c for i, c in enumerate(batch.columns) if i != key_index], names=[n for i, n in enumerate(batch.schema.names) if i != key_index]
    )
    starts = _run_starts(batch, (PARTITION_KEY_COLUMN,))
    return [(keys[start].as_py(), data.slice(start, end - start)) for start, end in zip(starts, [*starts[1:], batch.num_rows])]


def group_by_columns(batch: pa.RecordBatch, names: tuple[str, ...], key_of) -> list[tuple[str, pa.RecordBatch]]:
    """The batch's rows per partition key (rows in any order); the value columns dropped.

    A batch of one key (the usual case: a task holding one key) is passed as is; one holding several
    (a shuffle interleaves them) is sorted by the values first, in Arrow: ~0.8 ms per 10k rows, where
    Spark's sort of the task's whole partition cost more."""
    values = pa.Table.from_batches([batch.select(list(names))])
    if values.group_by(list(names)).aggregate([]).num_rows == 1:
        return _split_by_columns(batch, names, key_of, [0])
    batch = batch.take(pc.sort_indices(values, sort_keys=[(n, "ascending") for n in names]))
    return _split_by_columns(batch, names, key_of, _run_starts(batch, names))


def _bound_pending(files) -> None:
    """Keep the rows a task buffers for its open files under FANOUT_PENDING_BYTES: flush the largest buffers
    as (smaller) row groups. With one or a few keys per task this never triggers."""
    files = list(files)
    total = sum(f.pending_bytes for f in files)
    for f in sorted(files, key=lambda f: f.pending_bytes, reverse=True):
        if total <= FANOUT_PENDING_BYTES:
            return
        total -= f.pending_bytes
        f.flush()


def _split_by_columns(batch: pa.RecordBatch, names: tuple[str, ...], key_of, starts: list[int]) -> list[tuple[str, pa.RecordBatch]]:
    """Runs of equal partition values (from `_run_starts`), each with its key; the value columns dropped."""
    n = batch.num_rows
    data = pa.RecordBatch.from_arrays(
        [c for c, f in zip(batch.columns, batch.schema) if f.name not in names], schema=pa.schema([f for f in batch.schema if f.name not in names])
    )
    columns = [batch.column(batch.schema.get_field_index(name)) for name in names]
    runs = []
    for start, end in zip(starts, [*starts[1:], n]):
        runs.append((key_of(tuple(c[start].as_py() for c in columns)), data.slice(start, end - start)))
    return runs


def _run_starts(batch: pa.RecordBatch, names: tuple[str, ...]) -> list[int]:
    """Row indices where the partition values change (nulls equal nulls, NaN equals NaN), starting with 0."""
    n = batch.num_rows
    if n <= 1:
        return [0]
    change = None
    for name in names:
        col = batch.column(batch.schema.get_field_index(name))
        a, b = col.slice(1), col.slice(0, n - 1)
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        if pa.types.is_floating(col.type):
            same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
        differs = pc.invert(same)
        change = differs if change is None else pc.or_(change, differs)
    return [0, *[i + 1 for i in pc.indices_nonzero(change).to_pylist()]]


class _RollingFile:
    def __init__(self, owner: FileWriter, key: str):
        self.owner = owner
        self.key = key
        self.path = owner.next_path(json.loads(key)["dir"])
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.rows = 0
        self.stream = None
        self.writer = None
        self.row_group_bytes = max(1 << 20, min(ROW_GROUP_BYTES, owner.target_file_size // 2))

    def write(self, batch: pa.RecordBatch):
        self.pending.append(batch)
        self.pending_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self.pending_bytes >= self.row_group_bytes:
            self.flush()
            if self.stream.tell() >= self.owner.target_file_size:
                return self.close()
        return None

    def _open(self, first: pa.Table) -> None:
        _, root_path = self.owner.storage.filesystem(self.owner.root_uri)
        full = f"{root_path}/{self.path}"
        self.owner._opened.append(full)
        if isinstance(self.owner._fs, pa.fs.LocalFileSystem):  # object stores have no directories to create
            self.owner._fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
        self.stream = self.owner._fs.open_output_stream(full)
        self.writer = pq.ParquetWriter(
            self.stream,
            self.owner.arrow_schema,
            compression=self.owner.compression,
            compression_level=self.owner.compression_level,
            use_dictionary=self.owner.dictionary_columns(first),
            write_statistics=True,
        )

    def flush(self) -> None:
        if not self.pending:
            return
        table = pa.Table.from_batches(self.pending, schema=self.owner.arrow_schema)
        if self.writer is None:
            self._open(table)
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.pending, self.pending_bytes = [], 0

    def abandon(self) -> None:
        """Close a failed task's file as it is (it is removed next)."""
        for closable in (self.writer, self.stream):
            try:
                if closable is not None:
                    closable.close()
            except Exception:  # noqa: BLE001 - the task already failed; its file goes anyway
                pass

    def close(self) -> dict:
        self.flush()
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        footer = pa.BufferOutputStream()
        self.writer.writer.metadata.write_metadata_file(footer)
        return {
            "path": self.path,
            "size": size,
            "record_count": self.rows,
            "partition_key": self.key,
            "footer": footer.getvalue().to_pybytes(),
        }


def _dictionary_columns(table: pa.Table) -> list[str]:
    """Dictionary-encode only low-cardinality columns: faster writes, same or smaller files."""
    cols = []
    table = table.slice(0, DICTIONARY_SAMPLE_ROWS)  # a sample decides; counting distinct values of every row costs
    n = max(1, table.num_rows)
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if pa.types.is_nested(t) or pa.types.is_boolean(t):
            continue
        if pc.count_distinct(col).as_py() <= max(16, n // 20):
            cols.append(name)
    return cols


FILE_ROW_ARROW = pa.schema(
    [("path", pa.string()), ("size", pa.int64()), ("record_count", pa.int64()), ("partition_key", pa.string()), ("footer", pa.binary())]
)


def file_rows(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=FILE_ROW_ARROW)

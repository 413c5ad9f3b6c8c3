"""Merge-on-read's executor-side work: a small batch's matching, change data and upserts in ONE Spark job.

A merge-on-read merge rewrites no data file, so its work is what the batch brings: the positions of the rows
its keys replace, those rows as Delta change data (feed on), and its upserts as new files. For a batch whose
keys are on the driver (write/merge/batch.py) one job of pyarrow tasks does all three, as the copy-on-write road
does its rewrite (merge_tasks.rewrite_in_one_job): each task reads the key columns of its share of the
candidates, with the feed on then the whole rows of those it replaces (the change data's preimages; a file
holding none is never read whole), and writes its share of the upserts, grouped by partition, with the writer's
own `FileWriter`. A second job for the upserts would cost a job's latency and a shuffle of a few rows.

Only paths, the batch's keys, the files' earlier deleted positions and its upserts go to the executors;
only file rows, (path, positions) and change-data rows come back. Where the upserts cannot travel
(`merge_tasks.upserts_by_partition` gives None: too large, or a transform only Spark computes when they
need a cast), the job finds positions only and the caller writes the upserts in Spark.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile

from ...model import FileChanges
from ...read.reader import ParquetFileReader
from ...spark.compat import default_parallelism
from ..parquet_files import FILE_ROW_ARROW
from ..target import WriteTarget
from . import changes as merge_changes
from . import tasks as merge_tasks

# Helper columns hold a space, which user column names cannot (spec._check_names): they never collide.
_PATH = "_lakehouse merge matched file"
_POSITIONS = "_lakehouse merge positions"
_CHANGE = "_lakehouse merge change"  # the tasks' rows on their change data (merge_changes), as JSON


@dataclass
class Matched:
    """What the one job found and wrote: per candidate with new deleted rows, their positions (sorted int64), and
    whether it wrote the upserts (recorded in `changes`; if not, the caller writes them)."""

    positions: dict[str, pa.Array]
    wrote_upserts: bool


def match_and_write(
    spark, target: WriteTarget, files: list[DataFile], values: pa.Table, earlier: dict[str, pa.Array], upserts, changes: FileChanges,
    *, upserts_on_driver: pa.Table | None = None,
) -> Matched:
    """Per file of `files` holding a key of `values` (distinct keys, on the driver), the positions of those rows
    less its `earlier` deleted ones, found in one Spark job that also writes the merge's upserts into `changes`
    (`upserts`: their DataFrame factory, `upserts_on_driver`: their rows, when the batch brought them) and, with
    the Delta feed on, the version's change data (`changes.change_data`, merge_changes)."""
    from ..partition_keys import PartitionKeyer
    from ..writer import file_row_schema, run_write_tasks, table_write_settings, written_files

    table, spec = target.table, target.table.spec()
    settings = table_write_settings(table, target.schema, target.target_file_size)
    keyer = PartitionKeyer(target.schema.model_dump_json(), spec.model_dump_json(), tuple(settings["delta_columns"]))
    by_key = merge_tasks.upserts_by_partition(target, spec, keyer, settings, upserts, upserts_on_driver)
    parts = [(key, merge_tasks.ipc(pa.Table.from_batches(rows).combine_chunks())) for key, rows in (by_key or {}).items() if sum(b.num_rows for b in rows)]
    write_id = uuid.uuid4().hex[:16]
    spark_schema = target.spark_schema()
    row_reader = target.row_reader(files, spark_schema)
    feed = merge_tasks.change_data(target, settings, values.column_names, spark_schema.fieldNames(), write_id) if target.change_feed and by_key is not None else None
    work = _shares(files, parts, default_parallelism(spark))
    task = _MatchAndWrite(
        *merge_tasks.key_reader(target, values, spark_schema, constants=row_reader.constants or {}), row_reader, earlier, parts, work, target.file_writer(settings, write_id), feed
    )
    rows = run_write_tasks(spark, len(work), task, _out_schema(file_row_schema()), write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    target.record(written_files([r for r in rows if r[_PATH] is None and r[_CHANGE] is None]), changes)
    positions = {r[_PATH]: pa.array(r[_POSITIONS], pa.int64()) for r in rows if r[_PATH] is not None}
    if feed is not None and positions:
        all_upserts = merge_changes.all_upserts(ipc for _, ipc in parts)
        task_rows = [r[_CHANGE] for r in rows if r[_CHANGE] is not None]
        changes.change_data = merge_changes.finish(feed, all_upserts, task_rows, target.storage, f"{write_id}-upserts", changes.created)
    return Matched(positions, wrote_upserts=by_key is not None)


def _out_schema(file_rows):
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    return StructType([*file_rows.fields, StructField(_PATH, StringType()), StructField(_POSITIONS, ArrayType(LongType(), False)), StructField(_CHANGE, StringType())])


def _shares(files: list[DataFile], parts: list[tuple[str, bytes]], parallelism: int) -> list[tuple[list[str], list[int]]]:
    """Per task, (the candidate URIs it matches, the indexes of the upsert parts it writes): the largest files and
    parts first, dealt round-robin so the reads and the writes spread over the tasks."""
    tasks = max(1, min(parallelism, max(len(files), len(parts))))
    work: list[tuple[list[str], list[int]]] = [([], []) for _ in range(tasks)]
    for i, f in enumerate(sorted(files, key=lambda f: f.file_size_in_bytes, reverse=True)):
        work[i % tasks][0].append(f.file_path)
    for i, p in enumerate(sorted(range(len(parts)), key=lambda p: len(parts[p][1]), reverse=True)):
        work[(tasks - 1 - i) % tasks][1].append(p)  # from the last task backwards: the first ones read the largest files
    return work


@dataclass
class _MatchAndWrite:
    """mapInArrow function: task indexes in; per task, its candidates' positions holding one of the keys (less the
    earlier deleted ones), their rows as change data (with `feed`), and its upsert parts written. Out: the writer's
    file rows, then one row per file with new positions (`_PATH`, `_POSITIONS`), then the change data's rows."""

    key_reader: ParquetFileReader  # the key columns, in the table's types
    keys_ipc: bytes  # the batch's distinct keys, an Arrow IPC stream
    row_reader: ParquetFileReader  # whole rows, for the change data
    earlier: dict  # file URI -> positions deleted already (int64)
    parts: list  # (partition key, upserts as Arrow IPC)
    work: list  # per task: (candidate URIs, indexes into `parts`)
    writer: "object"  # parquet_files.FileWriter
    feed: "merge_changes.MergeChanges | None" = None

    def __call__(self, batches):
        keys = merge_tasks.Keys(self.key_reader, self.keys_ipc)
        dropped = self.feed.dropped_rows(merge_changes.all_upserts(ipc for _, ipc in self.parts)) if self.feed is not None else None
        found: list[tuple[str, pa.Array]] = []

        def rows():
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    uris, indexes = self.work[task]
                    for uri in uris:
                        if len(positions := self._positions(keys, uri, dropped)):
                            found.append((uri, positions))
                    for i in indexes:
                        key, upserts = self.parts[i]
                        yield from merge_tasks.keyed(pa.ipc.open_stream(upserts).read_all(), key)

        for out in self.writer(rows()):
            yield _with_matches(out, [None] * out.num_rows, [], [None] * out.num_rows)
        # After the writer closed every file: the task's rows come back only if it succeeds.
        changed = dropped.finish() if dropped is not None else []
        if found or changed:
            n, m = len(found), len(changed)
            nulls = pa.RecordBatch.from_arrays([pa.nulls(n + m, f.type) for f in FILE_ROW_ARROW], schema=FILE_ROW_ARROW)
            yield _with_matches(nulls, [u for u, _ in found] + [None] * m, [p for _, p in found] + [None] * m, [None] * n + changed)

    def _positions(self, keys: "merge_tasks.Keys", uri: str, dropped) -> pa.Array:
        """The positions of `uri`'s rows holding a key, less its earlier deleted ones; with `dropped`, those rows are
        added to it. The key columns find them; only a file with such rows is read whole, and only they are kept."""
        import pyarrow.compute as pc

        key_rows = keys.rows_of(uri)
        found = keys.positions_in(uri, key_rows)
        if uri in self.earlier and len(found):
            found = pc.filter(found, pc.invert(pc.is_in(found, value_set=self.earlier[uri])))
        if dropped is not None and len(found):
            # The key columns as just read, not decoded a second time.
            dropped.add(self.row_reader.rows_at(uri, found, known=key_rows))
        return found


def _with_matches(file_rows: pa.RecordBatch, paths: list, positions: list, changes: list) -> pa.RecordBatch:
    """The writer's file rows with the columns of the matches: path, positions (a null list where None) and change-data row."""
    offsets, values = [0], []
    for p in positions:
        offsets.append(offsets[-1] + (len(p) if p is not None else 0))
        values += [p] if p is not None else []
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.concat_arrays(values) if values else pa.array([], pa.int64()),
                                     mask=pa.array([p is None for p in positions], pa.bool_()))
    if not positions:
        lists = pa.nulls(file_rows.num_rows, pa.list_(pa.int64()))
    return pa.RecordBatch.from_arrays(
        [*file_rows.columns, pa.array(paths, pa.string()), lists, pa.array(changes, pa.string())],
        names=[*file_rows.schema.names, _PATH, _POSITIONS, _CHANGE],
    )

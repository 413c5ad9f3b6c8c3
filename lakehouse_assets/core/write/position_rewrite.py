"""Copy-on-write deletes and updates whose matched rows are known by position: each file that holds one is rewritten
by pyarrow tasks into one new file, as compaction rewrites (core/write/compaction_tasks.py).

The file's rows never pass through Spark's reader and the JVM-to-Python hop of a DataFrame write: a task reads the
file with pyarrow, leaves the positions out (a delete) or puts the matched rows' new values in their place (an
update: Spark computed the values of the columns it sets and sent them to the task of their file, a shuffle of the
matched rows' new values only), and writes through the table's own `FileWriter`. The same task writes the change
data from the rows it read: a delete's removed rows, an update's pre- and post-images. So Spark's one scan
(by_condition.py) reads only the columns the condition and the new values need. A delete's positions reach the
driver and go to the tasks with the file names; so a delete matching more than MAX_POSITIONS rows is rewritten
through Spark instead, where no position leaves the executors. An update's new values reach each file's task by a
shuffle, with their positions: its scan can feed the tasks in one job, no position on the driver.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile

from ..model import FileChanges
from ..read.reader import ParquetFileReader, file_uris, path_batches
from ..spark.compat import default_parallelism
from .compaction_tasks import TASKS_PER_CORE, one_output_writer, partition_key_of
from .merge.batch import PATH
from .merge.on_read import POSITION
from .parquet_files import FILE_ROW_ARROW
from .target import WriteTarget

MAX_POSITIONS = 5_000_000  # 40 MB of int64 on the driver and spread over the tasks, at most


def takes(target: WriteTarget, files: list[DataFile], assigned=()) -> bool:
    """Whether `files` can be rewritten here: all of the table's current partition spec (each file's rows are of one
    partition of it), and no `assigned` column (an update's) is one a partition is computed from (its rows could move
    to another partition). Otherwise Spark rewrites them."""
    spec = target.table.spec()
    sources = {target.schema.find_column_name(f.source_id) for f in spec.fields}
    return all(f.spec_id == spec.spec_id for f in files) and not sources & set(assigned)


def rewrite_without(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array], deleted: dict, changes: FileChanges,
                    whole: list[DataFile] = (), feed: bool = False) -> None:
    """Each of `files` (`takes` them) rewritten without its `positions` ({file URI: sorted positions}) and the
    positions deleted before (`deleted`: {file URI: DeletedPositions}): the new files and the removed ones recorded
    in `changes`. `feed`: the same tasks write the version's change data, the rows at `positions` (and every row of
    `whole`, files dropped whole, removed by the caller), into `changes.change_data`."""
    from ..io.storage import join_uri, normalize_uri
    from .change_data import change_data_writer, file_actions
    from .writer import run_write_tasks, table_write_settings, written_files

    settings = table_write_settings(target.table, target.schema, target.target_file_size)
    key_of, write_id = partition_key_of(target, settings), uuid.uuid4().hex[:16]
    writer = target.file_writer(settings, write_id)
    root = normalize_uri(target.table.location())
    cdc = change_data_writer(target.table, target.schema, root, target.storage, write_id) if feed else None
    jobs = []
    for i, f in enumerate([*files, *(whole if feed else ())]):
        new = positions[f.file_path].to_numpy().astype(np.int64) if f.file_path in positions else None  # None: every row
        earlier = deleted[f.file_path].positions(target.storage) if f.file_path in deleted else np.empty(0, np.int64)
        jobs.append(_FileDelete(
            f.file_path, key_of(f), new, np.union1d(earlier, new) if new is not None else None,
            one_output_writer(writer, write_id, i, f.file_size_in_bytes),
            replace(cdc, write_id=f"{write_id}-{i:05d}") if cdc is not None else None,
        ))
    tasks = min(len(jobs), default_parallelism(spark) * TASKS_PER_CORE)
    fn = IndexedTasks(target.row_reader([*files, *whole]), jobs, tasks)
    rows = run_write_tasks(spark, tasks, fn, task_schema(), write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    target.record(written_files([r for r in rows if r[CHANGE] is None]), changes, counts_as_written=False)
    changes.removes += files
    if cdc is not None:
        changes.change_data = file_actions([json.loads(r[CHANGE]) for r in rows if r[CHANGE] is not None], cdc)
        changes.created += [join_uri(root, a["path"]) for a in changes.change_data]


CHANGE = "_lakehouse delete change"  # a task's row of a change data file it wrote, as JSON (a data file's: null)
SOURCE = "_lakehouse source file"  # a data file's row: the file it replaces
MATCHED = "_lakehouse matched rows"  # ... and how many of that file's rows the operation matched
TASK_ROW = pa.schema([*FILE_ROW_ARROW, pa.field(CHANGE, pa.string()), pa.field(SOURCE, pa.string()), pa.field(MATCHED, pa.int64())])


@dataclass
class _FileDelete:
    """One file's delete: its rows but `gone` written by `writer` into one file; with `cdc`, the rows at `new` (all
    of them when `new` is None) written as `delete` change data."""

    uri: str
    key: str
    new: np.ndarray | None  # the positions this delete removes (None: every row)
    gone: np.ndarray | None  # with the positions deleted before
    writer: object  # parquet_files.FileWriter
    cdc: object | None  # change_data.ChangeDataWriter

    def __call__(self, reader: ParquetFileReader):
        from .partition_keys import with_partition_key

        if self.new is None:  # dropped whole: every row is change data, streamed
            yield from self._change_data(reader(path_batches(self.uri)))
            return
        removed = []

        def kept():
            import pyarrow.compute as pc

            from ..read.deleted_positions import kept_rows

            start = 0
            for b in reader(path_batches(self.uri)):
                if self.cdc is not None:
                    removed.append(b.filter(pc.invert(kept_rows(self.new, start, b.num_rows))))
                yield with_partition_key(b.filter(kept_rows(self.gone, start, b.num_rows)), self.key)
                start += b.num_rows

        for out in self.writer(kept()):
            yield data_rows(out, self.uri, len(self.new))
        if self.cdc is not None:
            yield from self._change_data(removed)

    def _change_data(self, batches):
        from ..read.change_types import CHANGE_TYPE, DELETE

        rows = (b.append_column(CHANGE_TYPE, pa.array([DELETE] * b.num_rows, pa.string())) for b in batches if b.num_rows)
        yield from change_rows(self.cdc, rows)


@dataclass
class IndexedTasks:
    """mapInArrow function: task indexes in; task i runs jobs i, i + tasks, i + 2 * tasks... (each `job(reader)`, one
    file's work). Out: what the jobs yield."""

    reader: ParquetFileReader  # whole rows, none left out: batch offsets are file positions
    jobs: list
    tasks: int

    def __call__(self, batches):
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for job in self.jobs[task :: self.tasks]:
                    yield from job(self.reader)


def rewrite_with_updates(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array] | None, updated, assigned: list[str],
                         changes: FileChanges, feed: bool = False) -> int:
    """Each of `files` (`takes` them, with the update's `assigned` columns) that holds a matched row rewritten with its
    matched rows' new values in place: one new file each, recorded in `changes` with the files removed; returns the
    rows matched. `updated`: the matched rows' new values of `assigned` (more columns are ignored), each with its file
    (PATH) and position (POSITION). `positions`: {file URI: its matched rows' positions} when the driver has them (each
    of `files` holds some), checked against the rows each task receives; None: `updated` is computed by this job, as
    the scan that finds the matched rows feeding the tasks (one job, nothing persisted or collected), and the files
    that receive none are left alone. `feed`: the same tasks write the version's change data, the pre- and post-images
    of the rows whose values changed, into `changes.change_data`."""
    from pyspark.sql import functions as F

    from ..io.storage import join_uri, normalize_uri
    from .change_data import change_data_writer, file_actions
    from .writer import run_write_job, table_write_settings, written_files

    settings = table_write_settings(target.table, target.schema, target.target_file_size)
    key_of, write_id = partition_key_of(target, settings), uuid.uuid4().hex[:16]
    writer = target.file_writer(settings, write_id)
    root = normalize_uri(target.table.location())
    cdc = change_data_writer(target.table, target.schema, root, target.storage, write_id) if feed else None
    per_file = {
        f.file_path: _FileUpdate(key_of(f), positions[f.file_path].to_numpy().astype(np.int64) if positions is not None else None,
                                 one_output_writer(writer, write_id, i, f.file_size_in_bytes),
                                 replace(cdc, write_id=f"{write_id}-{i:05d}") if cdc is not None else None)
        for i, f in enumerate(files)
    }
    tasks = min(len(files), default_parallelism(spark) * TASKS_PER_CORE)
    columns = [F.col(f"`{c}`") for c in (PATH, POSITION, *assigned)]
    mapped = updated.select(*columns).repartition(tasks, F.col(f"`{PATH}`")).mapInArrow(FileTasks(target.row_reader(files), per_file, assigned), task_schema())
    rows = run_write_job(mapped, write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    data = [r for r in rows if r[CHANGE] is None]
    target.record(written_files(data), changes, counts_as_written=False)  # (recorded first: a refusal below removes them)
    sources = {r[SOURCE] for r in data}
    changes.removes += [f for f in files if f.file_path in sources]
    if cdc is not None and data:  # (nothing matched: no version, so no change data, not even an empty file)
        changes.change_data = file_actions([json.loads(r[CHANGE]) for r in rows if r[CHANGE] is not None], cdc)
        changes.created += [join_uri(root, a["path"]) for a in changes.change_data]
    if len(sources) != len(data) or (positions is not None and len(data) != len(files)):  # each file holding a match gives one
        raise RuntimeError(f"Table {settings['table_name']}: an update rewrote {len(sources)} files into {len(data)} (of the {len(files)} "
                           "files that may hold its rows); nothing was committed")
    return sum(r[MATCHED] for r in data)


def task_schema():
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from .writer import file_row_schema

    return StructType([*file_row_schema().fields, StructField(CHANGE, StringType()), StructField(SOURCE, StringType()), StructField(MATCHED, LongType())])


def data_rows(out: pa.RecordBatch, source: str, matched: int) -> pa.RecordBatch:
    """A writer's file rows as this job's rows: no change data, the file they replace and its matched rows."""
    n = out.num_rows
    return (out.append_column(CHANGE, pa.nulls(n, pa.string())).append_column(SOURCE, pa.array([source] * n, pa.string()))
            .append_column(MATCHED, pa.array([matched] * n, pa.int64())))


@dataclass
class _FileUpdate:
    """One file's update: its rows written by `writer` into one file, those at `positions` with their new values;
    with `cdc`, the pre- and post-images of the rows whose values changed written as change data."""

    key: str
    positions: np.ndarray | None  # sorted: the matched rows the driver collected (None: the task takes those it receives)
    writer: object  # parquet_files.FileWriter
    cdc: object | None  # change_data.ChangeDataWriter

    def __call__(self, reader: ParquetFileReader, uri: str, positions: np.ndarray, values: pa.Table):
        """`values`: the new values of the rows at `positions` (sorted), in their order."""
        import pyarrow.compute as pc

        from ..read.deleted_positions import kept_rows
        from .partition_keys import with_partition_key

        if self.positions is not None and not np.array_equal(positions, self.positions):
            raise RuntimeError(f"{uri}: the update's new values name other positions than its scan found")
        old, new = [], []

        def rows():
            start = 0
            for b in reader(path_batches(uri)):
                keep = kept_rows(positions, start, b.num_rows)
                old.append(b.filter(pc.invert(keep)))
                if (kept := b.filter(keep)).num_rows:
                    yield with_partition_key(kept, self.key)
                start += b.num_rows
            matched = pa.Table.from_batches(old).combine_chunks()
            if matched.num_rows != values.num_rows:
                raise RuntimeError(f"{uri}: {matched.num_rows} rows at the update's {values.num_rows} positions")
            for name in values.column_names:
                i = matched.schema.get_field_index(name)
                matched = matched.set_column(i, matched.field(i), values.column(name).cast(matched.field(i).type))
            new.extend(matched.to_batches())
            yield from (with_partition_key(b, self.key) for b in new if b.num_rows)

        for out in self.writer(rows()):
            yield data_rows(out, uri, values.num_rows)
        if self.cdc is not None:
            yield from change_rows(self.cdc, images(pa.Table.from_batches(old), pa.Table.from_batches(new), values.column_names))


def images(old: pa.Table, new: pa.Table, assigned: list[str]):
    """The pre- and post-image batches of the rows whose `assigned` values changed (NULL equal to NULL, NaN to NaN,
    as the change feed compares them)."""
    import pyarrow.compute as pc

    from ..read.change_types import CHANGE_TYPE, UPDATE_POSTIMAGE, UPDATE_PREIMAGE

    same = pa.array(np.ones(old.num_rows, dtype=bool))
    for name in assigned:
        same = pc.and_(same, _same(old.column(name).combine_chunks(), new.column(name).combine_chunks()))
    changed = pc.invert(same)
    for rows, kind in ((old, UPDATE_PREIMAGE), (new, UPDATE_POSTIMAGE)):
        rows = rows.filter(changed)
        if rows.num_rows:
            yield from rows.append_column(CHANGE_TYPE, pa.array([kind] * rows.num_rows, pa.string())).to_batches()


def _same(a: pa.Array, b: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    if pa.types.is_nested(a.type):  # no Arrow kernel compares them: Python's equality, value by value
        return pa.array([x == y for x, y in zip(a.to_pylist(), b.to_pylist())], pa.bool_())
    same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
    if pa.types.is_floating(a.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return same


def rows_at(reader: ParquetFileReader, uri: str, positions: np.ndarray):
    """The batches of the rows of `uri` at `positions` (sorted, not empty), read with pyarrow up to the last of them."""
    import pyarrow.compute as pc

    from ..read.deleted_positions import kept_rows

    start = 0
    for b in reader(path_batches(uri)):
        if (found := b.filter(pc.invert(kept_rows(positions, start, b.num_rows)))).num_rows:
            yield found
        start += b.num_rows
        if start > positions[-1]:  # the rest of the file holds none
            return


def change_rows(cdc, batches):
    """Write `batches` (change rows) with `cdc`; its file rows as this job's rows, in the `CHANGE` column."""
    for out in cdc(batches):
        yield pa.RecordBatch.from_pylist([{CHANGE: json.dumps(r)} for r in out.to_pylist()], schema=TASK_ROW)


@dataclass
class FileTasks:
    """mapInArrow function: the new values of some files' matched rows in (with PATH and POSITION; no other column for
    a delete's); each of those files' job of `per_file` called as `job(reader, uri, sorted positions, their values)`."""

    reader: ParquetFileReader
    per_file: dict  # file URI -> its job
    assigned: list[str]

    def __call__(self, batches):
        import pyarrow.compute as pc

        updates: dict[str, list] = defaultdict(list)  # the file's name as Spark spells it -> its matched rows' values
        for batch in batches:
            paths = batch.column(PATH)
            for spelled in pc.unique(paths).to_pylist():
                updates[spelled].append(batch.filter(pc.equal(paths, spelled)))
        for spelled, uri in zip(updates, file_uris(list(updates), list(self.per_file))):
            values = pa.Table.from_batches(updates[spelled]).sort_by(POSITION)
            yield from self.per_file[uri](self.reader, uri, values.column(POSITION).to_numpy().astype(np.int64), values.select(self.assigned))

"""Copy-on-write deletes and updates whose matched rows are known by position: each file that holds one is rewritten
by pyarrow tasks into one new file, as compaction rewrites (core/write/compaction_tasks.py).

The file's other rows never pass through Spark's reader and the JVM-to-Python hop of a DataFrame write: a task reads
the file with pyarrow, leaves the positions out, and writes through the table's own `FileWriter`; an update's task
appends the file's matched rows with their new values, which Spark computed and sent to the task of their file (a
shuffle of the matched rows only). Found by one Spark scan of the condition (by_condition.py), the positions reach
the driver and go to the tasks with the file names; so an operation matching more than MAX_POSITIONS rows is
rewritten through Spark instead, where no position leaves the executors. A delete's tasks also write its change
data, the rows they leave out, so its scan reads the condition's columns alone.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile

from ..model import FileChanges
from ..read.deleted_positions import KnownPositions
from ..read.reader import ParquetFileReader, file_uris, path_batches
from ..spark.compat import default_parallelism
from .compaction_tasks import TASKS_PER_CORE, one_output_writer, partition_key_of
from .merge.batch import PATH
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
    from pyspark.sql.types import StringType, StructField, StructType

    from ..io.storage import join_uri, normalize_uri
    from .change_data import change_data_writer, file_actions
    from .writer import file_row_schema, run_write_tasks, table_write_settings, written_files

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
    fn = _DeleteTasks(target.row_reader([*files, *whole]), jobs, tasks)
    schema = StructType([*file_row_schema().fields, StructField(_CHANGE, StringType())])
    rows = run_write_tasks(spark, tasks, fn, schema, write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    target.record(written_files([r for r in rows if r[_CHANGE] is None]), changes, counts_as_written=False)
    changes.removes += files
    if cdc is not None:
        changes.change_data = file_actions([json.loads(r[_CHANGE]) for r in rows if r[_CHANGE] is not None], cdc)
        changes.created += [join_uri(root, a["path"]) for a in changes.change_data]


_CHANGE = "_lakehouse delete change"  # a task's row of a change data file it wrote, as JSON (a data file's: null)
_TASK_ROW = pa.schema([*FILE_ROW_ARROW, pa.field(_CHANGE, pa.string())])


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
            yield out.append_column(_CHANGE, pa.nulls(out.num_rows, pa.string()))
        if self.cdc is not None:
            yield from self._change_data(removed)

    def _change_data(self, batches):
        from ..read.change_types import CHANGE_TYPE, DELETE

        rows = (b.append_column(CHANGE_TYPE, pa.array([DELETE] * b.num_rows, pa.string())) for b in batches if b.num_rows)
        for out in self.cdc(rows):
            yield pa.RecordBatch.from_pylist([{_CHANGE: json.dumps(r)} for r in out.to_pylist()], schema=_TASK_ROW)


@dataclass
class _DeleteTasks:
    """mapInArrow function: task indexes in; task i runs jobs i, i + tasks, i + 2 * tasks... Out: file rows."""

    reader: ParquetFileReader  # whole rows, none left out: batch offsets are file positions
    jobs: list[_FileDelete]
    tasks: int

    def __call__(self, batches):
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for job in self.jobs[task :: self.tasks]:
                    yield from job(self.reader)


def rewrite_with_updates(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array], updated, changes: FileChanges) -> None:
    """Each of `files` (`takes` them, with the update's columns) rewritten without its `positions` and with its
    matched rows' new values (`updated`: those rows, new values in place, each with the file it came from in PATH):
    one new file each, recorded in `changes` with the files removed."""
    from .writer import file_row_schema, run_write_job, table_write_settings, written_files

    settings = table_write_settings(target.table, target.schema, target.target_file_size)
    key_of, write_id = partition_key_of(target, settings), uuid.uuid4().hex[:16]
    writer = target.file_writer(settings, write_id)
    per_file = {
        f.file_path: (key_of(f), one_output_writer(writer, write_id, i, f.file_size_in_bytes))
        for i, f in enumerate(files)
    }
    reader = replace(target.row_reader(files), deleted={f.file_path: KnownPositions(positions[f.file_path].to_numpy().astype(np.int64)) for f in files})
    columns = [c for c in updated.columns if c != PATH]
    tasks = min(len(files), default_parallelism(spark) * TASKS_PER_CORE)
    mapped = updated.repartition(tasks, PATH).mapInArrow(_WithUpdates(reader, per_file, columns), file_row_schema())
    rows = run_write_job(mapped, write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    target.record(written_files(rows), changes, counts_as_written=False)
    changes.removes += files


@dataclass
class _WithUpdates:
    """mapInArrow function: the updated rows of some files in (with PATH); each of those files read whole but the
    matched positions (`reader`), its updated rows appended, written into one file by its own `FileWriter`."""

    reader: ParquetFileReader
    per_file: dict  # file URI -> (partition key, the file's parquet_files.FileWriter)
    columns: list[str]  # the table's columns, in the reader's order

    def __call__(self, batches):
        import pyarrow.compute as pc

        from .partition_keys import with_partition_key

        updates: dict[str, list] = defaultdict(list)  # the file's name as Spark spells it -> its updated rows
        for batch in batches:
            paths = batch.column(PATH)
            for spelled in pc.unique(paths).to_pylist():
                updates[spelled].append(batch.filter(pc.equal(paths, spelled)).select(self.columns))

        def rows(uri: str, key: str, new_rows: list):
            for b in itertools.chain(self.reader(path_batches(uri)), new_rows):
                if b.num_rows:
                    yield with_partition_key(b, key)

        for spelled, uri in zip(updates, file_uris(list(updates), list(self.per_file))):
            key, writer = self.per_file[uri]
            yield from writer(rows(uri, key, updates[spelled]))

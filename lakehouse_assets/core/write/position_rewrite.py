"""Copy-on-write deletes and updates whose matched rows are known by position: each file that holds one is rewritten
by pyarrow tasks into one new file, as compaction rewrites (core/write/compaction_tasks.py).

The file's other rows never pass through Spark's reader and the JVM-to-Python hop of a DataFrame write: a task reads
the file with pyarrow, leaves the positions out, and writes through the table's own `FileWriter`; an update's task
appends the file's matched rows with their new values, which Spark computed and sent to the task of their file (a
shuffle of the matched rows only). Found by one Spark scan of the condition (by_condition.py), the positions reach
the driver and go to the tasks with the file names; so an operation matching more than MAX_POSITIONS rows is
rewritten through Spark instead, where no position leaves the executors.
"""

from __future__ import annotations

import itertools
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
from .compaction_tasks import TASKS_PER_CORE, compact_in_one_job, partition_key_of
from .merge.batch import PATH
from .target import WriteTarget

MAX_POSITIONS = 5_000_000  # 40 MB of int64 on the driver and spread over the tasks, at most


def takes(target: WriteTarget, files: list[DataFile], assigned=()) -> bool:
    """Whether `files` can be rewritten here: all of the table's current partition spec (each file's rows are of one
    partition of it), and no `assigned` column (an update's) is one a partition is computed from (its rows could move
    to another partition). Otherwise Spark rewrites them."""
    spec = target.table.spec()
    sources = {target.schema.find_column_name(f.source_id) for f in spec.fields}
    return all(f.spec_id == spec.spec_id for f in files) and not sources & set(assigned)


def rewrite_without(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array], deleted: dict, changes: FileChanges) -> None:
    """Each of `files` (`takes` them) rewritten without its `positions` ({file URI: sorted positions}) and the
    positions deleted before (`deleted`: {file URI: DeletedPositions}): the new files and the removed ones recorded
    in `changes`."""
    gone = {}
    for f in files:
        new = positions[f.file_path].to_numpy()
        if f.file_path in deleted:
            new = np.union1d(deleted[f.file_path].positions(target.storage), new)
        gone[f.file_path] = KnownPositions(new.astype(np.int64))
    compact_in_one_job(spark, target, [[f] for f in files], changes, deleted=gone)
    changes.removes += files


def rewrite_with_updates(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array], updated, changes: FileChanges) -> None:
    """Each of `files` (`takes` them, with the update's columns) rewritten without its `positions` and with its
    matched rows' new values (`updated`: those rows, new values in place, each with the file it came from in PATH):
    one new file each, recorded in `changes` with the files removed."""
    from .writer import file_row_schema, run_write_job, table_write_settings, written_files

    settings = table_write_settings(target.table, target.schema, target.target_file_size)
    key_of, write_id = partition_key_of(target, settings), uuid.uuid4().hex[:16]
    writer = target.file_writer(settings, write_id)
    per_file = {
        f.file_path: (key_of(f), replace(writer, write_id=f"{write_id}-{i:05d}", target_file_size=max(writer.target_file_size, 2 * f.file_size_in_bytes)))
        for i, f in enumerate(files)
    }
    reader = replace(target.row_reader(files), deleted={f.file_path: KnownPositions(positions[f.file_path].to_numpy().astype(np.int64)) for f in files})
    columns = [c for c in updated.columns if c != PATH]
    tasks = min(len(files), default_parallelism(spark) * TASKS_PER_CORE)
    mapped = updated.repartition(tasks, PATH).mapInArrow(_WithUpdates(reader, per_file, columns), file_row_schema())
    rows = run_write_job(mapped, write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    target.record(written_files(rows), changes, counts_as_written=False)
    changes.removes += files
    return True


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

"""Compaction's executor-side work: small files rewritten by pyarrow tasks in ONE Spark job, no shuffle
(maintenance/compaction.py plans the groups and commits).

An Iceberg data file holds rows of one partition of its spec, so one partition's files of the current
spec rewrite into that partition as they are: their rows need no Spark reader, no shuffle and no new
partition values (the writer's key comes from the files' partition record, as in the merge's one-job
rewrite). Each partition's files are bin-packed by size into bins of about the target file size, like
Java's `rewrite_data_files` binpack; a task reads its bins' files (by field id after renames, cast to
the table's types) and writes them through the writer's own `FileWriter`. Only paths go to the
executors; only file rows (path, size, count, partition, footer) come back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from pyiceberg.manifest import DataFile

from ..model import FileChanges
from ..read.reader import ParquetFileReader, path_batches
from ..spark.compat import default_parallelism
from .target import WriteTarget

# Tasks per core: bins are dealt round-robin, largest first, so a few tasks per core even out unequal bins.
TASKS_PER_CORE = 2


def compact_in_one_job(spark, target: "WriteTarget", groups: list[list[DataFile]], changes: "FileChanges", deleted=None) -> list[DataFile] | None:
    """Rewrite each group (the files of one partition) into about target-size files in one Spark job;
    the new files, recorded in `changes` (None: a file is not of the current spec, nothing done).
    `deleted`: {file URI: its deleted positions (`read.deleted_positions`)}, rows left out of the new files."""
    from .writer import file_row_schema, run_write_tasks, table_write_settings, written_files

    table = target.table
    if any(f.spec_id != table.spec().spec_id for g in groups for f in g):
        return None
    settings = table_write_settings(table, target.schema, target.target_file_size)
    key_of = partition_key_of(target, settings)
    bins = []
    for files in groups:
        bins += [(key_of(files[0]), b) for b in _bin_pack(files, settings["target_file_size"])]
    if not bins:
        return []
    bins.sort(key=lambda kb: sum(f.file_size_in_bytes for f in kb[1]), reverse=True)
    tasks = min(len(bins), default_parallelism(spark) * TASKS_PER_CORE)
    write_id = uuid.uuid4().hex[:16]
    writer = target.file_writer(settings, write_id)
    reader = replace(target.row_reader([f for files in groups for f in files]), deleted=deleted or None)
    # One writer per bin, named apart (`<write_id>-<bin>-...`, still swept as this write's on failure): a bin's
    # file closes when the bin ends, and it is never rolled (a bin holds at most ~1.65 targets of input).
    per_bin = [
        (key, [f.file_path for f in files], one_output_writer(writer, write_id, i, sum(f.file_size_in_bytes for f in files)))
        for i, (key, files) in enumerate(bins)
    ]
    compactor = _BinRewriter(reader, per_bin, tasks)
    rows = run_write_tasks(spark, tasks, compactor, file_row_schema(), write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    return target.record(written_files(rows), changes, counts_as_written=False)


def one_output_writer(writer, write_id: str, i: int, input_bytes: int):
    """`writer` for the `i`-th output of a rewrite: named apart (`<write_id>-<i>-...`, still swept as this write's on
    failure) and never rolled, as its input (`input_bytes`) fits in one file."""
    return replace(writer, write_id=f"{write_id}-{i:05d}", target_file_size=max(writer.target_file_size, 2 * input_bytes))


def partition_key_of(target: "WriteTarget", settings: dict):
    """The FileWriter's partition key of a data file of the table's current spec, from its partition record (its rows
    are all of that partition)."""
    from .partition_keys import UNPARTITIONED_KEY, PartitionKeyer

    spec = target.table.spec()
    if not spec.fields:
        return lambda data_file: UNPARTITIONED_KEY
    keyer = PartitionKeyer(target.schema.model_dump_json(), spec.model_dump_json(), tuple(settings["delta_columns"]))
    return lambda data_file: keyer.key_of_partition(tuple(data_file.partition[i] for i in range(len(spec.fields))))


# Output files per partition: total / target rounded down below .65 (1.3x the target -> one file, 1.7x ->
# two), so every output is 0.82-1.65x the target: none is "small" (under 0.75x, MaintenanceSettings) and
# the next compaction finds nothing to redo. (ceil(total / target) equal bins would leave 150 MB as two
# small 75 MB files, rewritten again on every run.)
ROUND_UP_FROM = 0.65


def _bin_pack(files: list[DataFile], target_bytes: int) -> list[list[DataFile]]:
    """One partition's files in about total / target bins of about equal size (largest file first into the
    emptiest bin): each bin becomes one output file, and no small remainder file is left over."""
    total = sum(f.file_size_in_bytes for f in files)
    count = max(1, int(total / max(1, target_bytes) + 1 - ROUND_UP_FROM))
    bins: list[list[DataFile]] = [[] for _ in range(count)]
    sizes = [0] * count
    for f in sorted(files, key=lambda f: f.file_size_in_bytes, reverse=True):
        i = sizes.index(min(sizes))
        bins[i].append(f)
        sizes[i] += f.file_size_in_bytes
    return [b for b in bins if b]


@dataclass
class _BinRewriter:
    """mapInArrow function: task indexes in; each bin's files read whole (in the table's types) and
    written into one file, carrying their partition's key, by the bin's `FileWriter`. Out: file rows."""

    reader: ParquetFileReader
    bins: list  # (partition key, file URIs, the bin's parquet_files.FileWriter)
    tasks: int  # task i takes bins i, i + tasks, i + 2 * tasks...

    def __call__(self, batches):
        from .partition_keys import with_partition_key

        def rows(key: str, uris: list[str]):
            for uri in uris:
                for b in self.reader(path_batches(uri)):
                    if b.num_rows:
                        yield with_partition_key(b, key)

        for batch in batches:
            for task in batch.column(0).to_pylist():
                for key, uris, writer in self.bins[task :: self.tasks]:
                    yield from writer(rows(key, uris))

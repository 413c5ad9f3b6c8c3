"""Delta change data files: the rows one mirrored snapshot changed, as Parquet under the Delta root's `_change_data/`.

A Delta version that replaces or deletes rows (a merge, an overwrite, a rollback...) must carry `cdc` files, or
Delta's change feed reads every row of a rewritten file as changed. The rows are exactly those
`Lakehouse.changes` returns for the snapshot (core/read/changes.py): computed from the files the snapshot
removed and added alone, so the mirror can write them in any later process (`repair`, a lagging Delta), and the
cost follows the change, not the table. Spark executors write the files (one per task and Delta partition, the
partition columns kept in the rows as in the data files); the driver receives one small row per file. A small change
in a process without Spark (a frame's write, core/read/arrow_changes.py) is compared and written in that process by
the same writer, so such a write starts no JVM for its feed.

The files are not visible until the Delta commit that references them lands (core/formats/delta/log_commit.py):
a failed commit deletes them, and a killed process leaves unreferenced files that no reader opens.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.table import Table

from ..formats import file_columns, history
from ..formats.deletes import has_delete_files
from ..formats.delta.log_commit import CHANGE_DATA_DIR
from ..formats.delta.values import partition_value
from ..formats.snapshot_changes import SnapshotChange
from ..io.storage import StorageConfig, join_uri, normalize_uri
from ..model import FileChanges
from ..properties import SummaryKeys
from ..read.change_types import CHANGE_TYPE
from ..schema.conform import conform_batch
from ..schema.spec import delta_partition_columns
from ..schema.type_mapping import arrow_file_schema, iceberg_to_spark_schema, narrow_integers
from ..spark.archives import keep_spark_archives_indexed
from ..spark.compat import default_parallelism
from ..spark.session import active_session
from ..table.evolution import column_names_moved, types_were_widened
from .parquet_files import raise_if_task_ended

CHANGE_BYTES_PER_TASK = 256 * 1024 * 1024
_FILE_ROW = pa.schema([("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string())])


def write_change_data(table: Table, change: SnapshotChange, root_uri: str, storage: StorageConfig, removed_uris: list[str] | None = None) -> list[dict]:
    """The `cdc` actions (Delta JSON) of the files holding the rows `change` changed, written under `root_uri`.

    `removed_uris`: the commit brings a lagging Delta log to `change.snapshot` at once (files known only from the
    Delta log leave, `change.adds` come in): its rows are the difference of the two file sets.
    An empty list is never returned: a version whose rows did not change gets one empty file, so readers of the
    feed take that version from its cdc files (none), not its add/remove actions."""
    from ..read.arrow_changes import small_change_rows  # the driver's; the executors' writer needs none of them
    from ..read.changes import rows_changed_between, snapshot_changed_rows

    snap = change.snapshot
    schema = table.schemas().get(snap.schema_id, table.schema()) if snap.schema_id is not None else table.schema()
    spark_schema = _spark_schema(table, schema)
    writer = change_data_writer(table, schema, root_uri, storage, uuid.uuid4().hex)
    parent = None
    if not removed_uris:
        by_id = history.snapshots_by_id(table)
        parent = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        # A small change of a write without Spark: its rows here, with pyarrow (no JVM started for the feed).
        if (small := small_change_rows(table, change, parent, spark_schema, storage)) is not None:
            return written_here(writer, small)
    spark = active_session()
    if removed_uris:
        rows = rows_changed_between(spark, removed_uris, [f.file_path for f in change.adds], spark_schema, storage, types_were_widened(table))
    else:
        rows = snapshot_changed_rows(spark, ".".join(table.name()), table, storage, change, parent, spark_schema)
    files = []
    if rows is not None:
        # As many Python tasks as the change is large (a task per CHANGE_BYTES_PER_TASK of the files read), not one per
        # shuffle partition: a Python task's fixed cost would otherwise make a small merge's feed cost more than the merge.
        # `rows` is an aggregate built here (no caller's coalesce to keep), so a plain coalesce: asking its partition
        # count first would run its shuffle once more under adaptive execution.
        read = sum(f.file_size_in_bytes for f in change.adds) + sum(f.file_size_in_bytes for f in change.removes)
        tasks = max(1, min(default_parallelism(spark), -(-read // CHANGE_BYTES_PER_TASK)))
        files = [r.asDict() for r in rows.coalesce(tasks).mapInArrow(writer, "path string, size long, partition_values string").collect()]
    return file_actions(files, writer)


def write_before_commit(table: Table, schema, storage: StorageConfig, changes: FileChanges, summary: dict[str, str]) -> None:
    """The change data of a small plan that replaces files (an overwrite of a frame written without Spark), written
    before its commit into `changes.change_data` (its files in `changes.created`, removed if the commit does not land).

    The mirror then writes the Delta version alone, holding the second stage of the table's commit lock
    (core/table/commit_lock.py) for that only, not for reading the replaced files and writing their rows as well: in a
    queue of writers, the time each holds a stage is what the last one waits for. The rows are the same the mirror
    would compute from the snapshot (the plan's files are the snapshot's: a re-validated commit keeps them). Left to the
    mirror when the plan has its change data already, removes nothing, involves delete files (the table's or its own),
    pairs rows by key, or is not one core/read/arrow_changes.py computes in this process (Spark running, large files)."""
    from ..read.arrow_changes import planned_change_rows

    if changes.change_data is not None or not changes.removes or changes.added_delete_files or changes.removed_delete_files:
        return
    if summary.get(SummaryKeys.MERGE_KEYS) or summary.get(SummaryKeys.UPDATE_KEYS) or has_delete_files(table):
        return
    rows = planned_change_rows(changes.adds, changes.removes, _spark_schema(table, schema), storage)
    if rows is None:
        return
    root = normalize_uri(table.location())
    actions = written_here(change_data_writer(table, schema, root, storage, uuid.uuid4().hex), rows)
    changes.created += [join_uri(root, a["path"]) for a in actions]
    changes.change_data = actions


def written_here(writer: "ChangeDataWriter", rows: pa.Table) -> list[dict]:
    """The `cdc` actions of `rows` written by `writer` in this process (no Spark task)."""
    return file_actions([row for out in writer(iter(rows.to_batches())) for row in out.to_pylist()], writer)


def _spark_schema(table: Table, schema):
    """`schema` (one of `table`'s) as Spark sees the table's files: with field ids where columns were renamed."""
    return iceberg_to_spark_schema(schema, field_ids=column_names_moved(table))


def change_data_writer(table: Table, schema, root_uri: str, storage: StorageConfig, write_id: str) -> "ChangeDataWriter":
    """The writer of one version's change data files of `table`, whose rows are in `schema` (the snapshot's)."""
    # As the data files: Iceberg field ids, and under column mapping the columns' physical names (the keys of partitionValues too).
    names = file_columns.file_names(table, schema)
    partitions = tuple(
        (c, (names or {}).get(schema.find_field(c).field_id, c), schema.find_type(c)) for c in delta_partition_columns(table.spec(), schema)
    )
    file_schema = arrow_file_schema(schema, names, narrow_integers(table.properties)).append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
    input_names = (*(f.name for f in schema.fields), CHANGE_TYPE) if names else None
    return ChangeDataWriter(root_uri, write_id, storage, partitions, file_schema, input_names)


def file_actions(files: list[dict], writer: "ChangeDataWriter") -> list[dict]:
    """The `cdc` actions of the files `writer` wrote (its file rows). Never empty: a version whose rows did not change
    gets one empty file, so readers of the feed take that version from its cdc files (none), not its add/remove actions."""
    if not files:
        files = [writer.empty_file({key: None for _, key, _ in writer.partitions})]
    return [
        {"path": f["path"], "partitionValues": json.loads(f["partition_values"]), "size": f["size"], "dataChange": False}
        for f in files
    ]


@dataclass
class ChangeDataWriter:
    """The mapInArrow function that writes a task's changed rows: one Parquet file per Delta partition."""

    root_uri: str
    write_id: str
    storage: StorageConfig
    partitions: tuple  # (column, its key in partitionValues, Iceberg type) of each Delta partition column
    file_schema: pa.Schema
    input_names: tuple[str, ...] | None  # the rows' name of each file column, when the files use physical names

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        keep_spark_archives_indexed()  # for this worker's later tasks
        ctx = TaskContext.get()
        attempt = ctx.taskAttemptId() if ctx else 0
        fs, root = self.storage.filesystem(self.root_uri)
        open_files: dict[tuple, tuple] = {}  # partition values -> (relative path, stream, writer)
        try:
            for batch in batches:
                for values, part in self._groups(batch):
                    if values not in open_files:
                        rel = f"{CHANGE_DATA_DIR}/cdc-{self.write_id}-{attempt:05d}-{len(open_files):05d}.zstd.parquet"
                        if isinstance(fs, pa.fs.LocalFileSystem):
                            fs.create_dir(f"{root}/{CHANGE_DATA_DIR}", recursive=True)
                        stream = fs.open_output_stream(f"{root}/{rel}")
                        open_files[values] = (rel, stream, pq.ParquetWriter(stream, self.file_schema, compression="zstd"))
                    open_files[values][2].write_batch(conform_batch(part, self.file_schema, self.input_names))
            out = []
            for values, (rel, stream, writer) in open_files.items():
                writer.close()
                out.append({"path": rel, "size": stream.tell(), "partition_values": json.dumps(dict(values))})
                stream.close()
            if out:
                raise_if_task_ended(self.write_id)  # a worker outliving its task: its files go (below)
        except Exception:
            for rel, stream, _ in open_files.values():  # Spark retries the task: its files go
                try:
                    stream.close()
                    fs.delete_file(f"{root}/{rel}")
                except OSError:
                    pass
            raise
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=_FILE_ROW)

    def _groups(self, batch: pa.RecordBatch) -> list[tuple[tuple, pa.RecordBatch]]:
        if batch.num_rows == 0:
            return []
        if not self.partitions:
            return [((), batch)]
        import pyarrow.compute as pc

        names = [c for c, _, _ in self.partitions]
        keys = pa.Table.from_batches([batch]).select(names)
        # Each distinct key once (a batch usually holds one partition's rows), its rows selected by a mask.
        distinct = keys.group_by(names, use_threads=False).aggregate([]).to_pylist()
        out = []
        for k in distinct:
            values = tuple((key, partition_value(c, t, k[c])) for c, key, t in self.partitions)
            if len(distinct) == 1:
                out.append((values, batch))
                continue
            mask = None
            for c in names:
                column, v = keys.column(c), k[c]
                same = pc.is_null(column) if v is None else pc.is_nan(column) if isinstance(v, float) and v != v else pc.equal(column, pa.scalar(v, column.type))
                same = pc.fill_null(same, False)
                mask = same if mask is None else pc.and_(mask, same)
            out.append((values, batch.filter(mask.combine_chunks() if hasattr(mask, "combine_chunks") else mask)))
        return out

    def empty_file(self, partition_values: dict) -> dict:
        """On the driver: a cdc file without rows (a version that removed files and changed no row)."""
        schema = self.file_schema
        rel = f"{CHANGE_DATA_DIR}/cdc-{self.write_id}-empty.zstd.parquet"
        fs, root = self.storage.filesystem(join_uri(self.root_uri, rel))
        if isinstance(fs, pa.fs.LocalFileSystem):
            fs.create_dir(root.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(root) as stream:
            pq.write_table(schema.empty_table(), stream, compression="zstd")
            size = stream.tell()
        return {"path": rel, "size": size, "partition_values": json.dumps(partition_values)}

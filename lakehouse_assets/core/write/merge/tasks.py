"""The merge's executor-side work, as pyarrow tasks over the candidate files (see write/merge/merge.py for the plan).

- `files_holding`: which candidates hold a key of a small batch whose keys are on the driver (one job
  that reads the candidates' key columns only);
- `rewrite_in_one_job`: a small batch's matching and rewrite together: one job, no shuffle, the
  upserts travelling with their partition's candidates and written by the writer's own `FileWriter`;
- the same for merge-on-read (write/merge/on_read_tasks.py, with `Keys.positions_in`): positions, not rewrites.

Only file paths, partition keys, the batch's keys and its upserts (bounded: `UPSERTS_ON_DRIVER_BYTES`)
go to the executors; only file rows (path, size, footer...), rewritten paths and row positions come back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile

from ...errors import InputError
from ...model import FileChanges
from ...read.reader import ParquetFileReader, map_paths, path_batches
from ...schema.type_mapping import SPARK_FIELD_ID_KEY
from ...spark.compat import collect_arrow, default_parallelism
from ..target import WriteTarget
from . import changes as merge_changes

# A small batch's upserts of at most this much Arrow travel with the tasks of its one-job rewrite, each
# task reading at most this many candidates of one partition.
UPSERTS_ON_DRIVER_BYTES = 32 * 1024 * 1024
FILES_PER_TASK_GROUP = 16
# Helper columns hold a space, which user column names cannot (spec._check_names): they never collide.
_REWRITTEN = "_lakehouse merge rewritten"  # the one-job rewrite's rows naming a file it rewrote
_POSITION = "_lakehouse merge position"
_CHANGE = "_lakehouse merge change"  # the one-job rewrite's rows on its change data (merge_changes), as JSON


def files_holding(spark, target: "WriteTarget", files: list[DataFile], values: pa.Table) -> set[str]:
    """Paths of the `files` holding at least one key of `values` (distinct keys, on the driver): one Spark
    job whose pyarrow tasks read each file's key columns only (by field id after renames, cast to the
    table's types) and test them against the keys. No row leaves the executors; only paths come back."""
    from pyspark.sql.types import StringType, StructField, StructType

    holder = _KeyHolder(*key_reader(target, values, constants=target.partition_constants(files)))
    schema = StructType([StructField("path", StringType(), False)])
    hits = map_paths(spark, [f.file_path for f in files], holder, schema, tasks=min(len(files), default_parallelism(spark)))
    return {r[0] for r in hits.collect()}


def key_reader(target: "WriteTarget", values: pa.Table, spark_schema=None, *, constants: dict) -> tuple[ParquetFileReader, bytes]:
    """A reader of the table's key columns (by field id after renames, in the table's types) and the
    batch's distinct keys cast to those types, as an Arrow IPC stream for the executors. `spark_schema`:
    the table's, with field ids after renames, when the caller has it already; `constants`: the target's
    `partition_constants(files)` of the files it reads."""
    from pyspark.sql.types import StructType

    from ...spark.compat import arrow_schema as to_arrow_schema

    keys = values.column_names
    spark_schema = spark_schema or target.spark_schema()
    key_schema = to_arrow_schema(StructType([spark_schema[k] for k in keys]))
    field_ids = {k: spark_schema[k].metadata[SPARK_FIELD_ID_KEY] for k in keys if SPARK_FIELD_ID_KEY in (spark_schema[k].metadata or {})}
    # The table's types: schema evolution only widens a table's key type to the batch's, so this never narrows.
    values = values.cast(pa.schema([pa.field(f.name, f.type) for f in key_schema]))
    return ParquetFileReader(target.storage, key_schema, field_ids=field_ids or None, constants=constants or None), ipc(values)


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


class Keys:
    """The batch's distinct keys on an executor: which files hold one, and a file's rows without them."""

    def __init__(self, reader: ParquetFileReader, keys_ipc: bytes):
        self.reader = reader
        self.values = pa.ipc.open_stream(keys_ipc).read_all()
        self.names = self.values.column_names
        self.single = self.values.column(0).combine_chunks() if len(self.names) == 1 else None

    def held_in(self, uri: str) -> bool:
        import pyarrow.compute as pc

        # One test per file (each builds a hash table of the keys): the key columns of a file are small.
        rows = self.rows_of(uri)
        if self.single is not None:
            return pc.any(pc.is_in(rows.column(0), value_set=self.single)).as_py() is True
        return rows.join(self.values, keys=self.names, join_type="left semi").num_rows > 0

    def rows_of(self, uri: str) -> pa.Table:
        """The file's key columns, every row, in file order."""
        return pa.Table.from_batches(list(self.reader(path_batches(uri))), schema=self.reader.arrow_schema)

    def positions_in(self, uri: str, rows: pa.Table | None = None) -> pa.Array:
        """The positions of the file's rows holding one of the keys (sorted int64); `rows`: its `rows_of`, when read."""
        import pyarrow.compute as pc

        rows = self.rows_of(uri) if rows is None else rows
        return pc.indices_nonzero(self.held(rows)).cast(pa.int64())

    def split(self, rows: pa.RecordBatch) -> tuple[pa.Table, pa.Table]:
        """(`rows` minus those holding one of the keys, those rows): a null key never equals one, so its row stays."""
        import pyarrow.compute as pc

        table = pa.Table.from_batches([rows])
        held = self.held(table)
        return table.filter(pc.invert(held)), table.filter(held)

    def held(self, table: pa.Table) -> pa.Array:
        """Per row of `table`, whether its key is one of the keys (a null key never is)."""
        import pyarrow.compute as pc

        if self.single is not None:
            return pc.fill_null(pc.is_in(table.column(self.names[0]), value_set=self.single), False)
        # Composite keys: Arrow's join refuses nested non-key columns, so join the keys and a row number only.
        positions = pa.array(range(table.num_rows), pa.int64())
        keyed = table.select(self.names).append_column(_POSITION, positions)
        return pc.is_in(positions, value_set=keyed.join(self.values, keys=self.names, join_type="left semi").column(_POSITION))


@dataclass
class _KeyHolder:
    """mapInArrow function: file paths in, the paths of the files holding one of the keys out (on the executors)."""

    reader: ParquetFileReader  # reads the key columns, in the table's types
    keys_ipc: bytes  # the distinct keys, an Arrow IPC stream

    def __call__(self, batches):
        keys = Keys(self.reader, self.keys_ipc)
        for batch in batches:
            hits = [uri for uri in batch.column(0).to_pylist() if keys.held_in(uri)]
            yield pa.RecordBatch.from_arrays([pa.array(hits, pa.string())], names=["path"])


def rewrite_in_one_job(
    spark, target: "WriteTarget", candidates: list[DataFile], values: pa.Table, upserts, changes: "FileChanges", *, upserts_on_driver: pa.Table | None = None
) -> list[DataFile] | None:
    """A small batch's whole merge write in ONE Spark job, no shuffle; the rewritten files (None: not
    this road, nothing done).

    The upserts (at most UPSERTS_ON_DRIVER_BYTES) are on the driver: `upserts_on_driver`, taken from the
    prepared batch the check collected when they need no cast to the table's types (their partition keys
    then come from pyiceberg's transforms, the writer's own fallback), else collected now with partition
    values computed by Spark as for any write (`upserts()`, their DataFrame). The driver groups them,
    and the candidate files, by partition. Each group goes to one pyarrow task, which tests its files' key columns against the
    batch's keys, reads the files holding one, drops the rows of those keys, and writes the rest with
    the group's upserts through the writer's own `FileWriter`: one file per partition, as the shuffled
    rewrite writes. A kept row's partition is its file's (an Iceberg data file holds one partition of
    its spec), so only tables whose candidates are all of the current spec take this road.
    """
    from pyspark.sql.types import StringType, StructField, StructType

    from ..partition_keys import PartitionKeyer
    from ..writer import file_row_schema, run_write_tasks, table_write_settings, written_files

    table = target.table
    spec = table.spec()
    if any(f.spec_id != spec.spec_id for f in candidates):
        return None
    settings = table_write_settings(table, target.schema, target.target_file_size)
    keyer = PartitionKeyer(target.schema.model_dump_json(), spec.model_dump_json(), tuple(settings["delta_columns"]))
    upserts_by_key = upserts_by_partition(target, spec, keyer, settings, upserts, upserts_on_driver)
    if upserts_by_key is None:
        return None
    groups = _task_groups(spec, keyer, candidates, upserts_by_key)
    if not groups:
        return []
    tasks = min(len(groups), default_parallelism(spark))
    write_id = uuid.uuid4().hex[:16]
    writer = target.file_writer(settings, write_id)
    spark_schema = target.spark_schema()
    row_reader = target.row_reader(candidates, spark_schema)
    # With the Delta feed on, the tasks also write the rows they drop as the version's change data (merge_changes).
    feed = change_data(target, settings, values.column_names, spark_schema.fieldNames(), write_id) if target.change_feed else None
    rewrite = _GroupRewriter(*key_reader(target, values, spark_schema, constants=row_reader.constants or {}), row_reader, groups, tasks, writer, feed)
    out_schema = StructType([*file_row_schema().fields, StructField(_REWRITTEN, StringType()), StructField(_CHANGE, StringType())])
    rows = run_write_tasks(spark, tasks, rewrite, out_schema, write_id, storage=target.storage, root_uri=settings["root_uri"], table_name=settings["table_name"])
    rewritten = {r[_REWRITTEN] for r in rows if r[_REWRITTEN] is not None}
    target.record(written_files([r for r in rows if r[_REWRITTEN] is None and r[_CHANGE] is None]), changes)
    if feed is not None and rewritten:
        task_rows = [r[_CHANGE] for r in rows if r[_CHANGE] is not None]
        upserts = merge_changes.all_upserts(g[2] for g in groups)
        changes.change_data = merge_changes.finish(feed, upserts, task_rows, target.storage, f"{write_id}-upserts", changes.created)
    return [f for f in candidates if f.file_path in rewritten]


def change_data(target: "WriteTarget", settings: dict, keys: list[str], columns: list[str], write_id: str) -> "merge_changes.MergeChanges":
    from ..change_data import change_data_writer

    writer = change_data_writer(target.table, target.schema, settings["root_uri"], target.storage, write_id)
    return merge_changes.MergeChanges(writer, tuple(keys), tuple(columns))


def upserts_by_partition(target: "WriteTarget", spec, keyer, settings: dict, upserts, on_driver: pa.Table | None) -> dict[str, list[pa.RecordBatch]] | None:
    """The batch's upserts per partition key (the writer's keys), on the driver; None: not this road
    (a transform only pyiceberg computes for collected upserts, or more than UPSERTS_ON_DRIVER_BYTES)."""
    from ...formats.delta.values import UnrepresentableValue
    from ...schema.partition_columns import partition_columns
    from ..parquet_files import group_by_columns
    from ..partition_keys import PARTITION_VALUE_PREFIX, UNPARTITIONED_KEY
    from ..writer import executor_error

    value_columns: tuple[str, ...] = ()
    if on_driver is None:
        to_collect = upserts()
        if spec.fields:
            exprs = partition_columns(target.schema, spec)
            if exprs is None:
                return None  # a transform only pyiceberg computes (bucket of a string...): the shuffled rewrite
            value_columns = tuple(f"{PARTITION_VALUE_PREFIX}{i}" for i in range(len(exprs)))
            to_collect = to_collect.select("*", *[e.alias(k) for e, k in zip(exprs, value_columns)])
        try:
            collected = collect_arrow(to_collect)  # PySpark's Arrow collect (toPandas uses it)
        except AttributeError:  # a private API: if it goes, the shuffled rewrite remains
            return None
        except Exception as e:  # e.g. a partition value refused by its Spark expression: one line, as the writer's
            raise executor_error(settings["table_name"], target.storage, settings["root_uri"], e) from e
        if sum(b.nbytes for b in collected) > UPSERTS_ON_DRIVER_BYTES:
            return None
    by_key: dict[str, list[pa.RecordBatch]] = {}
    keys_of: dict[tuple, str] = {}

    def key_of(vals: tuple) -> str:
        if vals not in keys_of:
            keys_of[vals] = keyer.key_for(vals)  # refuses values the Delta log cannot hold, as the writer does
        return keys_of[vals]

    try:
        if on_driver is not None:
            parts = [p for b in on_driver.to_batches() for p in _by_partition(b, keyer if spec.fields else None)]
        else:
            parts = [p for b in collected for p in (group_by_columns(b, value_columns, key_of) if value_columns else [(UNPARTITIONED_KEY, b)])]
    except UnrepresentableValue as e:
        raise InputError(f"Table {target.identifier}: {e} Nothing was written or committed.") from e
    for key, part in parts:
        by_key.setdefault(key, []).append(part)
    return by_key


def _task_groups(spec, keyer, candidates: list[DataFile], upserts_by_key: dict[str, list[pa.RecordBatch]]) -> list[tuple[str, list[str], bytes | None]]:
    """(partition key, candidate URIs, upserts as Arrow IPC or None) per task group: the candidates by the
    partition their record holds (the key the writer gives that partition's rows), at most
    FILES_PER_TASK_GROUP per group, the partition's upserts with its first group. Ordered for dealing
    round-robin over the tasks: likeliest rewrites (a CDC batch updates the partitions it writes) and
    largest files first, so the rewrites spread."""
    from ..partition_keys import UNPARTITIONED_KEY

    files_by_key: dict[str, list[DataFile]] = {}
    for f in candidates:
        key = keyer.key_of_partition(tuple(f.partition[i] for i in range(len(spec.fields)))) if spec.fields else UNPARTITIONED_KEY
        files_by_key.setdefault(key, []).append(f)
    groups, cost = [], []
    for key in dict.fromkeys([*files_by_key, *upserts_by_key]):
        files = files_by_key.get(key, [])
        chunks = [files[i : i + FILES_PER_TASK_GROUP] for i in range(0, len(files), FILES_PER_TASK_GROUP)] or [[]]
        rows = upserts_by_key.get(key)
        for i, chunk in enumerate(chunks):
            upserts_ipc = ipc(pa.Table.from_batches(rows)) if rows and i == 0 else None
            groups.append((key, [f.file_path for f in chunk], upserts_ipc))
            cost.append((upserts_ipc is not None, sum(f.file_size_in_bytes for f in chunk)))
    return [g for _, g in sorted(zip(cost, groups), key=lambda cg: cg[0], reverse=True)]


def _by_partition(batch: pa.RecordBatch, keyer) -> list[tuple[str, pa.RecordBatch]]:
    """`batch`'s rows per partition key, by pyiceberg's vectorized transforms (`PartitionKeyer.keys`,
    what the writer uses where Spark cannot compute a transform); None keyer: unpartitioned."""
    import pyarrow.compute as pc

    from ..parquet_files import split_by_key
    from ..partition_keys import PARTITION_KEY_COLUMN, UNPARTITIONED_KEY

    if not batch.num_rows:
        return []
    if keyer is None:
        return [(UNPARTITIONED_KEY, batch)]
    keyed = batch.append_column(PARTITION_KEY_COLUMN, keyer.keys(batch))
    keyed = keyed.take(pc.sort_indices(keyed.column(PARTITION_KEY_COLUMN)))
    return split_by_key(keyed, keyed.schema.get_field_index(PARTITION_KEY_COLUMN))


@dataclass
class _GroupRewriter:
    """mapInArrow function of the one-job rewrite: group indexes in; per group, its candidates holding
    one of the keys are rewritten without those keys' rows, with the group's upserts, by the writer's
    `FileWriter`. Out: its file rows, then one row per rewritten file (`_REWRITTEN`)."""

    key_reader: ParquetFileReader
    keys_ipc: bytes
    row_reader: ParquetFileReader  # whole rows, in the table's types
    groups: list  # (partition key, candidate URIs, upserts as Arrow IPC or None)
    tasks: int  # task i takes groups i, i + tasks, i + 2 * tasks...
    writer: "object"  # parquet_files.FileWriter
    feed: "merge_changes.MergeChanges | None" = None  # writes the dropped rows as change data (Delta feed on)

    def __call__(self, batches):
        from ..parquet_files import FILE_ROW_ARROW

        keys = Keys(self.key_reader, self.keys_ipc)
        rewritten: list[str] = []
        dropped = self.feed.dropped_rows(merge_changes.all_upserts(g[2] for g in self.groups)) if self.feed is not None else None

        def rows():
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    for key, uris, upserts_ipc in self.groups[task :: self.tasks]:
                        for uri in uris:
                            if not keys.held_in(uri):
                                continue  # stays live as it is
                            rewritten.append(uri)
                            for b in self.row_reader(path_batches(uri)):
                                kept, gone = keys.split(b)
                                yield from keyed(kept, key)
                                if dropped is not None:
                                    dropped.add(gone)
                        if upserts_ipc is not None:
                            yield from keyed(pa.ipc.open_stream(upserts_ipc).read_all(), key)

        for out in self.writer(rows()):
            yield out.append_column(_REWRITTEN, pa.nulls(out.num_rows, pa.string())).append_column(_CHANGE, pa.nulls(out.num_rows, pa.string()))
        # After the writer closed every file: the task's rows come back only if it succeeds.
        changed = dropped.finish() if dropped is not None else []
        if rewritten or changed:
            n, m = len(rewritten), len(changed)
            yield pa.RecordBatch.from_arrays(
                [*(pa.nulls(n + m, f.type) for f in FILE_ROW_ARROW), pa.array(rewritten + [None] * m, pa.string()), pa.array([None] * n + changed, pa.string())],
                names=[*FILE_ROW_ARROW.names, _REWRITTEN, _CHANGE],
            )


def keyed(rows: pa.Table, key: str):
    """`rows` as record batches carrying their partition key (the writer's key-column input)."""
    from ..partition_keys import with_partition_key

    for b in rows.to_batches():
        if b.num_rows:
            yield with_partition_key(b, key)

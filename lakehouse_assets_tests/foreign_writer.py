"""Another engine writing to a project table's Iceberg side, the way Spark/Flink/Trino do.

pyiceberg writes the data (append, overwrite, schema updates). It cannot write row-level deletes
(0.12 falls back to copy-on-write even with write.delete.mode=merge-on-read), so delete files are
built here as a merge-on-read engine writes them: Parquet files with the spec's reserved field ids
(position deletes: file_path 2147483546, pos 2147483545; equality deletes: the equality columns with
their table field ids), metadata from the Parquet footer via pyiceberg, committed in a delete
manifest by a pyiceberg snapshot producer (a "row delta" snapshot, operation `delete`).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from lakehouse_assets.core.formats.deletes import DeleteManifestWriter  # the project's own: what it writes in repair

POSITION_DELETE_SCHEMA = Schema(
    NestedField(2147483546, "file_path", StringType(), required=True),
    NestedField(2147483545, "pos", LongType(), required=True),
)


class _RowDelta(_SnapshotProducer["_RowDelta"]):
    """Adds delete files in a new delete manifest; every existing manifest stays."""

    def __init__(self, transaction, delete_files: list[DataFile]):
        super().__init__(Operation.DELETE, transaction, transaction._table.io)
        self._added_data_files = list(delete_files)  # feeds pyiceberg's summary (added-delete-files...)

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        snap = self._transaction.table_metadata.current_snapshot()
        return snap.manifests(self._io) if snap else []

    def _manifests(self) -> list[ManifestFile]:
        by_spec: dict[int, list[DataFile]] = {}
        for f in self._added_data_files:
            by_spec.setdefault(f.spec_id, []).append(f)
        out = []
        for spec_id, files in by_spec.items():
            writer = DeleteManifestWriter(self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)
            with writer:
                for f in files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id, data_file=f))
            out.append(writer.to_manifest_file())
        return out + self._existing_manifests()


def _delete_file(table: Table, data: pa.Table, schema: Schema, content: DataFileContent, partition_of: DataFile | None, equality_ids=None) -> DataFile:
    fields = [f.with_metadata({b"PARQUET:field_id": str(schema.find_field(f.name).field_id).encode()}) for f in data.schema]
    data = pa.Table.from_arrays(data.columns, schema=pa.schema(fields))
    folder = partition_of.file_path.rsplit("/", 1)[0] if partition_of is not None else table.location().rstrip("/") + "/data"
    uri = f"{folder}/{uuid.uuid4()}-deletes.parquet"
    with table.io.new_output(uri).create() as out:
        writer = pq.ParquetWriter(out, data.schema)
        writer.write_table(data)
        writer.close()
    metadata = pq.read_metadata(table.io.new_input(uri).open())
    stats = data_file_statistics_from_parquet_metadata(metadata, compute_statistics_plan(schema, table.properties), parquet_path_to_id_mapping(schema))
    f = DataFile.from_args(
        content=content,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=partition_of.partition if partition_of is not None else Record(),
        file_size_in_bytes=len(table.io.new_input(uri)),
        sort_order_id=None,
        equality_ids=equality_ids,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )
    f.spec_id = partition_of.spec_id if partition_of is not None else table.metadata.default_spec_id
    return f


def commit_deletes(table: Table, delete_files: list[DataFile]) -> None:
    with table.transaction() as tx:
        _RowDelta(tx, delete_files).commit()


def position_deletes(table: Table, data_file: DataFile, positions: list[int]) -> DataFile:
    """A position-delete file removing rows `positions` of `data_file`, in that file's partition."""
    rows = pa.table({"file_path": pa.array([data_file.file_path] * len(positions), pa.string()), "pos": pa.array(positions, pa.int64())})
    return _delete_file(table, rows, POSITION_DELETE_SCHEMA, DataFileContent.POSITION_DELETES, data_file)


def equality_deletes(table: Table, rows: pa.Table, partition_of: DataFile | None = None) -> DataFile:
    """An equality-delete file: every row whose columns `rows.column_names` equal one of `rows` is deleted.

    Global (unpartitioned spec) when the table is unpartitioned, else in `partition_of`'s partition.
    """
    schema = table.schema()
    ids = [schema.find_field(n).field_id for n in rows.column_names]
    return _delete_file(table, rows, schema, DataFileContent.EQUALITY_DELETES, partition_of, equality_ids=ids)


def data_files(table: Table) -> list[DataFile]:
    """Live data files (manifests only: works with equality deletes, unlike scan planning)."""
    out = []
    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content == ManifestContent.DATA:
            out += [e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
    return out


def delete_files(table: Table) -> list[DataFile]:
    out = []
    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content == ManifestContent.DELETES:
            out += [e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
    return out

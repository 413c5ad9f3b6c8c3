"""Iceberg delete files written by other engines: find them, refuse to ignore them, apply them.

Iceberg is the primary, so Spark, Trino, Flink or pyiceberg may commit row-level deletes
(merge-on-read): position-delete files (data file path + row position) and equality-delete files
(rows whose equality columns match). Delta cannot express them (delta-rs writes no deletion vectors),
and every project operation that reads or rewrites data files would silently bring deleted rows
back if it ignored them. So:

* `refuse_delete_files` stops read, merge, window overwrite, compaction and widening with an error
  naming the table and the fix;
* `apply_deletes` is the fix: it rewrites the data files that lose rows, in Spark, with the deletes
  applied by the Iceberg spec's rules (position deletes by file path + row position for data files
  with a data sequence number <= the delete's; equality deletes by a null-safe anti-join on the
  equality columns for data files with a strictly lower sequence number; both scoped to the delete
  file's partition unless its spec is unpartitioned), and commits ONE Iceberg overwrite snapshot that
  removes those data files and every applied delete file. That snapshot holds data files only, so
  the Delta mirror can follow it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, SnapshotSummaryCollector, update_snapshot_summaries, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles

from .errors import DeleteFilesError

if TYPE_CHECKING:
    from .lakehouse import Lakehouse

log = logging.getLogger("lakehouse.deletes")

APPLY_DELETES = "apply-deletes"  # lakehouse.operation of the snapshot that applies delete files
_PATH, _POS, _DEL = "_lakehouse_file", "_lakehouse_pos", "_lakehouse_delete_file"


class DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer for delete-file entries (pyiceberg 0.12 writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


@dataclass
class TableFiles:
    """Live entries of one snapshot, read from its manifests (no scan planning: works with equality deletes)."""

    data: list[ManifestEntry]
    deletes: list[ManifestEntry]

    @property
    def position_deletes(self) -> list[ManifestEntry]:
        return [e for e in self.deletes if e.data_file.content == DataFileContent.POSITION_DELETES]

    @property
    def equality_deletes(self) -> list[ManifestEntry]:
        return [e for e in self.deletes if e.data_file.content == DataFileContent.EQUALITY_DELETES]


def table_files(table: Table, snapshot: Snapshot | None = None) -> TableFiles:
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    data, deletes = [], []
    if snapshot is not None:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                (data if manifest.content == ManifestContent.DATA else deletes).append(entry)
    return TableFiles(data, deletes)


def has_delete_files(table: Table, snapshot: Snapshot | None = None) -> bool:
    """From the manifest list only (manifest-level file counts), without opening a manifest."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if snapshot is None:
        return False
    return any(
        m.content == ManifestContent.DELETES and ((m.added_files_count or 0) + (m.existing_files_count or 0)) > 0
        for m in snapshot.manifests(table.io)
    )


def describe_delete_files(files: TableFiles) -> str:
    pos, eq = len(files.position_deletes), len(files.equality_deletes)
    parts = [f"{pos} position-delete file(s)"] if pos else []
    parts += [f"{eq} equality-delete file(s)"] if eq else []
    return " and ".join(parts) or "no delete files"


def refuse_delete_files(table: Table, operation: str, snapshot: Snapshot | None = None) -> None:
    """Raise DeleteFilesError if the snapshot has live delete files: `operation` would ignore them."""
    snapshot = snapshot if snapshot is not None else table.current_snapshot()
    if not has_delete_files(table, snapshot):
        return
    ident = ".".join(table.name())
    raise DeleteFilesError(
        f"Table {ident}: snapshot {snapshot.snapshot_id} has {describe_delete_files(table_files(table, snapshot))} "
        f"written by another engine (row-level deletes, merge-on-read). {operation} does not apply delete files, "
        f"so it would bring the deleted rows back; refused, nothing was written. Run `lakehouse repair {ident} "
        "--apply-deletes` to rewrite the affected data files with the deletes applied (one Iceberg snapshot that "
        "Delta then mirrors), then retry. To keep other engines from writing delete files, set the table "
        "properties write.delete.mode, write.update.mode and write.merge.mode to copy-on-write."
    )


# ---------------------------------------------------------------- the commit that removes delete files


class OverwriteRemovingDeletes(_OverwriteFiles):
    """An overwrite that also removes delete files (pyiceberg's overwrite removes data files only).

    Data files go through pyiceberg's own overwrite (manifests, validation, retries). Delete manifests
    are rewritten without the removed delete files, and one delete manifest records them as DELETED,
    so history-based tools (expiry, incremental readers) see them go.
    """

    def __init__(self, *args, removed_delete_files: list[DataFile] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self._removed_deletes = {f.file_path for f in removed_delete_files}
        self._removed_delete_files = list(removed_delete_files)

    def _existing_manifests(self) -> list[ManifestFile]:
        out: list[ManifestFile] = []
        gone: dict[int, list[ManifestEntry]] = {}
        for manifest in super()._existing_manifests():
            if manifest.content != ManifestContent.DELETES:
                out.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            keep = [e for e in entries if e.data_file.file_path not in self._removed_deletes]
            if len(keep) == len(entries):
                out.append(manifest)
                continue
            gone.setdefault(manifest.partition_spec_id, []).extend(e for e in entries if e.data_file.file_path in self._removed_deletes)
            if keep:
                out.append(self._write(manifest.partition_spec_id, keep, ManifestEntryStatus.EXISTING))
        for spec_id, entries in gone.items():
            out.append(self._write(spec_id, entries, ManifestEntryStatus.DELETED))
        missing = self._removed_deletes - {e.data_file.file_path for es in gone.values() for e in es}
        if missing:
            from pyiceberg.exceptions import ValidationException

            raise ValidationException(f"Delete files to remove are no longer live: {sorted(missing)}")
        return out

    def _write(self, spec_id: int, entries: list[ManifestEntry], status: ManifestEntryStatus) -> ManifestFile:
        writer = DeleteManifestWriter(self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)
        with writer:
            for e in entries:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=status,
                        snapshot_id=self._snapshot_id if status == ManifestEntryStatus.DELETED else e.snapshot_id,
                        sequence_number=e.sequence_number,
                        file_sequence_number=e.file_sequence_number,
                        data_file=e.data_file,
                    )
                )
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 - pyiceberg's signature
        summary = super()._summary(snapshot_properties)
        if not self._removed_delete_files:
            return summary
        # pyiceberg's collector counts data files only here: add the removed delete files to the totals.
        collector = SnapshotSummaryCollector()
        schema, specs = self._transaction.table_metadata.schema(), self._transaction.table_metadata.specs()
        for f in self._removed_delete_files:
            collector.remove_file(f, schema, specs[f.spec_id])
        extra = {k: v for k, v in collector.metrics.to_dict().items()}
        merged = dict(summary.additional_properties)
        for k, v in extra.items():
            merged[k] = str(int(merged.get(k, 0)) + int(v))
        previous = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id else None
        # Recompute totals from the parent's with the combined changes.
        changes = {k: v for k, v in merged.items() if not k.startswith("total-")}
        return update_snapshot_summaries(Summary(operation=summary.operation, **changes), previous.summary if previous else None)


# ---------------------------------------------------------------- applying deletes


def _applies(delete: ManifestEntry, data: ManifestEntry) -> bool:
    """Iceberg spec: which delete file applies to which data file (sequence numbers and partition)."""
    d, f = delete.data_file, data.data_file
    if delete.data_file.content == DataFileContent.POSITION_DELETES:
        if delete.sequence_number < data.sequence_number:
            return False
    elif delete.sequence_number <= data.sequence_number:
        return False
    if len(d.partition) == 0:  # unpartitioned delete spec: a global delete
        return True
    return d.spec_id == f.spec_id and tuple(d.partition) == tuple(f.partition)


def apply_deletes(lh: "Lakehouse", identifier: str, spark=None) -> dict[str, Any]:
    """Rewrite the data files that delete files remove rows from, and drop the delete files: one snapshot."""
    from pyspark.sql import functions as F

    from . import iceberg_committer as ic
    from .reader import read_parquet_files
    from .spec import iceberg_to_spark_schema
    from .storage import delete_files, join_uri, normalize_uri
    from .writer import write_table_files

    table = lh.load(identifier)
    snapshot = table.current_snapshot()
    files = table_files(table, snapshot)
    result: dict[str, Any] = {"table": identifier, "delete_files": len(files.deletes), "data_files_rewritten": 0, "rows_deleted": 0}
    if not files.deletes:
        result["applied"] = False
        return result
    spark = spark or _spark()
    schema = table.schema()
    spark_schema = iceberg_to_spark_schema(schema)
    pairs = [(d.data_file.file_path, f.data_file.file_path) for d in files.deletes for f in files.data if _applies(d, f)]
    candidates = sorted({data for _, data in pairs})
    by_uri = {e.data_file.file_path: e.data_file for e in files.data}
    cast_files = True  # the pyarrow reader gives row positions, and casts files written in narrower types
    drops = None
    if candidates:
        rows = read_parquet_files(spark, candidates, spark_schema, lh.storage, path_column=_PATH, position_column=_POS, cast_files=cast_files)
        pair_df = spark.createDataFrame(pairs, f"{_DEL} string, {_PATH} string")
        parts = []
        pos_files = sorted({e.data_file.file_path for e in files.position_deletes})
        if pos_files:
            from pyspark.sql.types import LongType, StringType, StructField, StructType

            pos_schema = StructType([StructField("file_path", StringType()), StructField("pos", LongType())])
            pos = read_parquet_files(spark, pos_files, pos_schema, lh.storage, path_column=_DEL, cast_files=True)
            parts.append(
                pos.join(pair_df, _DEL).filter(F.col("file_path") == F.col(_PATH)).select(_PATH, F.col("pos").alias(_POS))
            )
        groups: dict[tuple, list[str]] = {}
        for e in files.equality_deletes:
            groups.setdefault(tuple(sorted(e.data_file.equality_ids or [])), []).append(e.data_file.file_path)
        for ids, uris in groups.items():
            names = [schema.find_column_name(i) for i in ids]
            if not ids or any(n is None or "." in n for n in names):
                raise DeleteFilesError(
                    f"Table {identifier}: equality-delete file(s) {uris[:3]} use equality field ids {list(ids)} that are not "
                    "top-level columns of the current schema; they cannot be applied here. Apply them with the engine that wrote them."
                )
            eq_schema = iceberg_to_spark_schema(schema.select(*names))
            eq = read_parquet_files(spark, uris, eq_schema, lh.storage, path_column=_DEL, cast_files=True)
            keyed = eq.join(pair_df, _DEL).select(_PATH, *[F.col(n).alias(f"_eq_{n}") for n in names])
            cond = F.lit(True)
            for n in names:
                cond = cond & rows[n].eqNullSafe(keyed[f"_eq_{n}"])
            parts.append(rows.join(keyed, (rows[_PATH] == keyed[_PATH]) & cond, "left_semi").select(_PATH, _POS))
        drops = parts[0]
        for p in parts[1:]:
            drops = drops.unionByName(p)
        drops = drops.distinct().persist()
    try:
        affected = [r[0] for r in drops.select(_PATH).distinct().collect()] if drops is not None else []  # file paths only
        deleted_rows = drops.count() if drops is not None else 0
        root = normalize_uri(table.location())
        written_uris: list[str] = []
        adds: list[DataFile] = []
        if affected:
            kept = read_parquet_files(spark, affected, spark_schema, lh.storage, path_column=_PATH, position_column=_POS, cast_files=cast_files)
            kept = kept.join(drops, [_PATH, _POS], "left_anti").drop(_PATH, _POS)
            written = write_table_files(kept, table, lh.storage, schema=schema)
            written_uris = [join_uri(root, f.path) for f in written]
    finally:
        if drops is not None:
            drops.unpersist()
    removes = [by_uri[u] for u in affected]
    try:
        if affected:
            adds = ic.data_files_from_written(table, root, written, schema)
        expected = sum(f.record_count for f in removes) - deleted_rows
        if sum(f.record_count for f in adds) != expected:
            raise DeleteFilesError(
                f"Table {identifier}: applying deletes wrote {sum(f.record_count for f in adds)} rows where {expected} were "
                "expected; nothing was committed."
            )
        summary = {ic.OPERATION: APPLY_DELETES, "lakehouse.apply-deletes.delete-files": str(len(files.deletes))}
        snap = ic.commit_files(table, adds, removes, summary, removed_delete_files=[e.data_file for e in files.deletes])
    except BaseException:
        delete_files(lh.storage, written_uris)
        raise
    result.update(
        applied=True,
        data_files_rewritten=len(removes),
        data_files_added=len(adds),
        rows_deleted=deleted_rows,
        iceberg_snapshot_id=snap.snapshot_id if snap else None,
    )
    return result


def _spark():
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()

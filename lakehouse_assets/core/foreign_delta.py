"""Delta versions the mirror did not write: find them, name them, and refuse to build on top of them.

Other engines (a Databricks job, a delta-rs script, a DuckDB or Polars append) can write the Delta side of a
table. Iceberg is the source of truth, so a Delta version that did not come from the mirror is a divergence:
mirroring the next Iceberg snapshot on top of it would hide it and let it grow with every write. Every version
the mirror writes carries `lakehouse.*` keys in its commitInfo (the Iceberg snapshot id on data versions,
`lakehouse.operation` on schema-change and repair versions) and version 0 is the mirror's own creation; any
other version is foreign.

Detection walks the log from the newest version back to the newest version of ours, so its cost grows with the
number of versions written since the last mirrored one, not with the table's history (checkpoints are not
versions and never show up in `DeltaTable.history`).

The policy is the table property `lakehouse.delta.foreign-commits` (`refuse`, the default, or a resource-wide
default passed by the caller). Under `refuse`, a project write fails before writing anything and the
formats-agree check fails with the same explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from . import delta_column_mapping
from .errors import ForeignDeltaCommits, LakehouseError
from .properties import DELTA_APP_ID, DeltaCommitKeys, Operation, SummaryKeys, TableProperties
from .storage import delta_path, join_uri, relative_to

NAME_MAPPING = "schema.name-mapping.default"  # Iceberg readers match columns of files without field ids by name
ADOPTED_VERSIONS = "lakehouse.delta.adopted-versions"
REVERTED_VERSIONS = "lakehouse.delta.reverted-versions"

REFUSE = "refuse"
ADOPT = "adopt"
POLICIES = (REFUSE, ADOPT)
_OURS = (DeltaCommitKeys.ICEBERG_SNAPSHOT_ID, SummaryKeys.OPERATION, DeltaCommitKeys.REPLACED_FOR)


@dataclass(frozen=True)
class ForeignVersion:
    version: int
    operation: str
    engine: str
    files_added: int | None
    files_removed: int | None
    timestamp_ms: int | None

    def describe(self) -> str:
        added = "?" if self.files_added is None else self.files_added
        removed = "?" if self.files_removed is None else self.files_removed
        return f"version {self.version} ({self.operation} by {self.engine}: {added} file(s) added, {removed} removed)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operation": self.operation,
            "engine": self.engine,
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "timestamp_ms": self.timestamp_ms,
        }


def is_ours(commit: dict[str, Any]) -> bool:
    """A commit the mirror wrote: it carries one of our commitInfo keys, or it is the log's creation."""
    return commit.get("version") == 0 or any(k in commit for k in _OURS)


def foreign_versions(delta: DeltaTable) -> list[ForeignVersion]:
    """Versions newer than the newest version of ours that the mirror did not write, oldest first."""
    limit = 4
    while True:
        commits = delta.history(limit)
        newest_first = sorted(commits, key=lambda c: c["version"], reverse=True)
        foreign: list[ForeignVersion] = []
        for c in newest_first:
            if is_ours(c):
                return list(reversed(foreign))
            foreign.append(_foreign(c))
        if len(commits) < limit:  # history ran out (log cleaned up to here): everything seen is foreign
            return list(reversed(foreign))
        limit *= 4


def _foreign(c: dict[str, Any]) -> ForeignVersion:
    metrics = c.get("operationMetrics") or {}

    def metric(*names: str) -> int | None:
        for n in names:
            if n in metrics and metrics[n] is not None:
                return int(metrics[n])
        return None

    engine = c.get("engineInfo") or c.get("clientVersion") or "an unknown engine"
    return ForeignVersion(
        version=int(c["version"]),
        operation=str(c.get("operation") or "unknown operation"),
        engine=str(engine),
        files_added=metric("num_added_files", "numAddedFiles", "numFiles", "numOutputFiles"),
        files_removed=metric("num_removed_files", "numRemovedFiles"),
        timestamp_ms=c.get("timestamp"),
    )


def policy_of(properties: dict[str, str], default: str = REFUSE) -> str:
    value = (properties.get(TableProperties.DELTA_FOREIGN_COMMITS) or default).strip().lower()
    if value not in POLICIES:
        raise LakehouseError(
            f"Table property {TableProperties.DELTA_FOREIGN_COMMITS}={value!r} is not a policy: expected one of {', '.join(POLICIES)}. "
            f"Set it with ALTER TABLE ... SET TBLPROPERTIES or pyiceberg's `transaction().set_properties(...)`."
        )
    return value


def explain(identifier: str, versions: list[ForeignVersion]) -> str:
    """Why the table is refused, which versions, and the two ways out."""
    listed = "; ".join(v.describe() for v in versions)
    return (
        f"Table {identifier}: the Delta log holds {len(versions)} version(s) the Iceberg mirror did not write ({listed}). "
        f"Iceberg is the source of truth, so mirroring on top of them would hide the divergence. Ways out: "
        f"`lakehouse repair {identifier} --revert-delta` undoes them with a new Delta version (their rows leave Delta), or "
        f"`lakehouse repair {identifier} --adopt-delta` brings them into Iceberg as one snapshot (set the table property "
        f"{TableProperties.DELTA_FOREIGN_COMMITS}=adopt to do that at every write). Nothing was written."
    )


def refuse_if_foreign(identifier: str, delta: DeltaTable | None, policy: str) -> list[ForeignVersion]:
    """Raise ForeignDeltaCommits under `refuse` when there are foreign versions; return them otherwise."""
    if delta is None:
        return []
    versions = foreign_versions(delta)
    if versions and policy == REFUSE:
        raise ForeignDeltaCommits(explain(identifier, versions), versions)
    return versions


def refuse_to_mirror_over(identifier: str, delta: DeltaTable) -> None:
    """Before a mirror step, on the log as just brought up to date: a foreign version that landed since the write
    checked (a race) stops it. Raised as MirrorRefused, so the Iceberg write stands, Delta lags, and the warning
    names the versions."""
    from .errors import MirrorRefused

    if versions := foreign_versions(delta):
        raise MirrorRefused(explain(identifier, versions).replace("Nothing was written.", "Delta was left as it was."))


# ---------------------------------------------------------------- the ways out


def _live(delta: DeltaTable) -> dict[str, dict[str, Any]]:
    """Live files of a Delta version: decoded relative path -> (size, partition values)."""
    import pyarrow as pa

    actions = pa.table(delta.get_add_actions(flatten=False))
    out = {}
    for row in actions.select([c for c in ("path", "size_bytes", "partition") if c in actions.column_names]).to_pylist():
        out[delta_path(row["path"])] = row
    return out


def _changes(delta: DeltaTable, versions: list[ForeignVersion], root_uri: str, storage_options: dict) -> tuple[dict, dict, DeltaTable]:
    before = DeltaTable(root_uri, version=versions[0].version - 1, storage_options=storage_options)
    old, new = _live(before), _live(delta)
    return {p: new[p] for p in new.keys() - old.keys()}, {p: old[p] for p in old.keys() - new.keys()}, before


def adoption_refusals(identifier: str, table: Table, delta: DeltaTable, before: DeltaTable, added: dict) -> list[str]:
    """Why the foreign versions cannot be brought into Iceberg as they are (empty: they can)."""
    reasons = []
    protocol = delta.protocol()
    if "deletionVectors" in (protocol.reader_features or []):
        reasons.append(
            "the Delta table has deletion vectors enabled (a row-level delete Iceberg v2 cannot take as is); "
            "rewrite the affected files without them on the Delta side (e.g. Databricks `REORG TABLE ... APPLY (PURGE)`), "
            "or revert the foreign versions"
        )
    outside = [p for p in added if "://" in p or p.startswith("/") or p.startswith("..")]
    if outside:
        reasons.append(f"{len(outside)} added file(s) lie outside the table location, e.g. {outside[:3]}; Iceberg would not own them")
    if any(not isinstance(f.transform, IdentityTransform) for f in table.spec().fields):
        reasons.append(
            f"the Iceberg partition spec has non-identity transforms ({table.spec()}): Delta's partitionValues carry no value for them"
        )
    old_fields = {f.name: f for f in before.schema().fields}
    for f in delta.schema().fields:
        prev = old_fields.pop(f.name, None)
        if prev is not None and prev.type != f.type:
            reasons.append(f"column {f.name!r} changed type in Delta ({prev.type} -> {f.type}), which Iceberg cannot take as is")
    if old_fields:
        reasons.append(f"column(s) {sorted(old_fields)} were dropped in Delta; adopt only takes added columns")
    return reasons


def adopt(identifier: str, table: Table, root_uri: str, storage_options: dict) -> dict[str, Any]:
    """Bring the foreign Delta versions into Iceberg as one snapshot with the same adds and removes.

    Files stay where they are; DataFiles are built from their Parquet footers (columns matched by name through
    the table's name mapping, which is set for readers of files without Iceberg field ids, and by Delta's
    physical names and ids under column mapping); identity partition values come from Delta's
    `partitionValues`. An empty Delta version then records that this snapshot is mirrored (app transaction and
    snapshot id), so the next write mirrors on top of agreeing formats.
    """
    from .iceberg_committer import MetadataCachingTransaction, live_data_files

    delta = DeltaTable(root_uri, storage_options=storage_options)
    versions = foreign_versions(delta)
    if not versions:
        return {"adopted_versions": [], "reason": "no foreign Delta versions"}
    added, removed, before = _changes(delta, versions, root_uri, storage_options)
    live = {relative_to(root_uri, f.file_path): f for f in live_data_files(table)}
    new_columns = [f.name for f in delta.schema().fields if f.name not in {c.name for c in table.schema().fields}]
    # Column mapping: Delta names a column in its files by its physical name (and delta-rs tags it with its id,
    # which is the Iceberg field id): match the files by those, not by the logical names.
    physical = delta_column_mapping.physical_names(delta) if delta_column_mapping.is_mapped(delta) else {}
    _check_adoptable(identifier, table, delta, before, versions, added, [p for p in removed if p not in live], new_columns, physical)
    adopted = ",".join(str(v.version) for v in versions)
    with MetadataCachingTransaction(table) as tx:
        if new_columns:
            import pyarrow as pa

            arrow_schema = pa.schema(delta.schema().to_arrow())
            with tx.update_schema() as update:
                update.union_by_name(pa.schema([arrow_schema.field(c) for c in new_columns]))
        schema = tx.table_metadata.schema()
        tx.set_properties({NAME_MAPPING: _name_mapping(schema, physical)})
        files = _FooterReader(identifier, versions, table, schema, tx.table_metadata, physical)
        adds = [files.data_file(join_uri(root_uri, path), path, action) for path, action in sorted(added.items())]
        update = tx.update_snapshot(snapshot_properties={SummaryKeys.OPERATION: Operation.ADOPT_DELTA, ADOPTED_VERSIONS: adopted})
        with (update.overwrite() if removed else update.fast_append()) as producer:
            for p in removed:
                producer.delete_data_file(live[p])
            for f in adds:
                producer.append_data_file(f)
    snap = table.refresh().current_snapshot()
    _record_as_mirrored(delta, snap, adopted)
    return {
        "adopted_versions": [v.to_dict() for v in versions],
        "iceberg_snapshot_id": snap.snapshot_id,
        "files_added": len(adds),
        "files_removed": len(removed),
        "columns_added": new_columns,
    }


def _cannot_adopt(identifier: str, versions: list[ForeignVersion], why: str, way_out: str | None = None) -> ForeignDeltaCommits:
    way_out = way_out or f"`lakehouse repair {identifier} --revert-delta` undoes them on the Delta side instead."
    return ForeignDeltaCommits(
        f"Table {identifier}: the foreign Delta version(s) {[v.version for v in versions]} cannot be adopted into Iceberg: {why}. "
        f"Nothing was changed. {way_out}",
        versions,
    )


def _check_adoptable(identifier: str, table: Table, delta: DeltaTable, before: DeltaTable, versions, added: dict, missing: list[str], new_columns, physical) -> None:
    """Raise ForeignDeltaCommits (nothing changed) unless the versions' adds and removes can become one Iceberg snapshot."""
    if reasons := adoption_refusals(identifier, table, delta, before, added):
        raise _cannot_adopt(identifier, versions, "; ".join(reasons))
    current = table.current_snapshot()
    if current is not None and delta.transaction_version(DELTA_APP_ID) != current.sequence_number:
        raise _cannot_adopt(
            identifier, versions, f"Delta also lags Iceberg (snapshot {current.snapshot_id} is not mirrored; a foreign commit raced a write)",
            f"`lakehouse repair {identifier} --revert-delta` undoes them and mirrors what Delta lags behind.",
        )
    if missing:
        raise ForeignDeltaCommits(
            f"Table {identifier}: the foreign Delta version(s) remove {len(missing)} file(s) Iceberg does not hold, e.g. {missing[:3]}: "
            f"the formats disagreed before them. Run `lakehouse verify {identifier}`; nothing was changed.",
            versions,
        )
    if physical and new_columns:
        raise _cannot_adopt(
            identifier, versions,
            f"they add column(s) {new_columns} to a table with Delta column mapping, whose Delta column ids would not be the Iceberg field ids",
            f"`lakehouse repair {identifier} --revert-delta` undoes them; add columns through the lakehouse.",
        )  # fmt: skip


class _FooterReader:
    """Iceberg DataFiles of foreign Delta files, from their Parquet footers and Delta's partition values."""

    def __init__(self, identifier: str, versions, table: Table, schema, metadata, physical: dict[int, str]):
        from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping

        self.identifier, self.versions, self.io, self.schema = identifier, versions, table.io, schema
        self.spec, self.spec_id = metadata.spec(), metadata.default_spec_id
        self.plan = compute_statistics_plan(schema, metadata.properties)
        top = {f.field_id: p for f in schema.fields if (p := physical.get(f.field_id)) is not None}
        self.ids = parquet_path_to_id_mapping(delta_column_mapping.with_file_names(schema, top))
        self.by_physical = {p: schema.find_column_name(i) for i, p in top.items()}  # Delta keys partition values by physical name

    def data_file(self, uri: str, path: str, action: dict):
        import pyarrow.parquet as pq
        from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        metadata = pq.read_metadata(self.io.new_input(uri).open())
        self._refuse_unreadable(path, metadata)
        stats = data_file_statistics_from_parquet_metadata(metadata, self.plan, self.ids)
        values = {self.by_physical.get(k, k): v for k, v in (action.get("partition") or {}).items()}
        partition = []
        for field in self.spec.fields:
            source = self.schema.find_field(field.source_id)
            raw = values.get(source.name)
            partition.append(None if raw is None else _typed_partition_value(source.field_type, raw))
        f = DataFile.from_args(
            content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET, partition=Record(*partition),
            file_size_in_bytes=int(action["size_bytes"]), sort_order_id=None, equality_ids=None, key_metadata=None,
            **stats.to_serialized_dict(),
        )  # fmt: skip
        f.spec_id = self.spec_id
        return f

    def _refuse_unreadable(self, path: str, metadata) -> None:
        if views := _view_typed_columns(metadata):
            raise _cannot_adopt(
                self.identifier, self.versions,
                f"file {path} declares Arrow view types for column(s) {views} in its Parquet metadata (delta-rs writes them in its "
                "DataFusion-based DELETE, UPDATE and MERGE), and pyiceberg 0.12 cannot read such a file together with the table's "
                "other files",
                f"`lakehouse repair {self.identifier} --revert-delta` undoes them on the Delta side; then make the same change through "
                "the lakehouse (Lakehouse.write with mode='merge' and a delete operation column), which writes both formats.",
            )  # fmt: skip
        inside = set(metadata.schema.names)
        if lacking := [self.schema.find_field(f.source_id).name for f in self.spec.fields if self.schema.find_field(f.source_id).name not in inside]:
            # Delta writers leave partition columns out of the files; the project's Spark reader reads columns
            # from the files only, so it would return NULLs for them: refuse rather than diverge.
            raise _cannot_adopt(
                self.identifier, self.versions,
                f"file {path} does not contain the partition column(s) {lacking} (Delta writers leave them out of the files, "
                "and this project's readers need them inside)",
            )  # fmt: skip


def _record_as_mirrored(delta: DeltaTable, snap, adopted: str) -> None:
    """The adopted snapshot's Delta side is the foreign versions themselves: an empty version records it as mirrored."""
    from deltalake.transaction import CommitProperties, Transaction

    delta.update_incremental()
    delta.create_write_transaction(
        [],
        mode="append",
        schema=delta.schema(),
        partition_by=delta.metadata().partition_columns or None,
        commit_properties=CommitProperties(
            custom_metadata={
                SummaryKeys.OPERATION: Operation.ADOPT_DELTA,
                DeltaCommitKeys.ICEBERG_SNAPSHOT_ID: str(snap.snapshot_id),
                DeltaCommitKeys.ICEBERG_SEQUENCE_NUMBER: str(snap.sequence_number),
                ADOPTED_VERSIONS: adopted,
            },
            app_transactions=[Transaction(DELTA_APP_ID, snap.sequence_number)],
        ),
    )


def _name_mapping(schema, physical: dict[int, str]) -> str:
    """The table's name mapping (for files without field ids), each column also under its Delta physical name."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping, create_mapping_from_schema

    mapping = create_mapping_from_schema(schema)
    if not physical:
        return mapping.model_dump_json()
    fields = [
        MappedField(field_id=f.field_id, names=[*f.names, *([physical[f.field_id]] if physical.get(f.field_id) not in (None, *f.names) else [])], fields=f.fields)
        for f in mapping
    ]
    return NameMapping(fields).model_dump_json()


def _view_typed_columns(metadata) -> list[str]:
    """Columns whose Arrow type, as the file's embedded Arrow schema declares it, is a view type (string_view,
    binary_view, list_view): what pyarrow-based readers then read them as."""
    import pyarrow as pa

    views = (pa.types.is_string_view, pa.types.is_binary_view, pa.types.is_list_view, pa.types.is_large_list_view)
    return [f.name for f in metadata.schema.to_arrow_schema() if any(is_view(f.type) for is_view in views)]


def _typed_partition_value(iceberg_type, raw: str):
    """A Delta partition value (typed by delta-rs, or a string) as the Iceberg partition record holds it.

    Delta writers leave partition columns out of the files; Iceberg readers take an identity partition's
    value from this record when the file lacks the column (Iceberg spec, column projection)."""
    from pyiceberg.conversions import from_bytes  # noqa: F401 - keeps the conversion in pyiceberg's terms
    from pyiceberg.partitioning import _to_partition_representation
    from pyiceberg.types import BooleanType, DateType, DoubleType, FloatType, IntegerType, LongType, StringType

    if not isinstance(raw, str):  # delta-rs hands typed partition values back
        value = raw
    elif isinstance(iceberg_type, StringType):
        value = raw
    elif isinstance(iceberg_type, (IntegerType, LongType)):
        value = int(raw)
    elif isinstance(iceberg_type, (FloatType, DoubleType)):
        value = float(raw)
    elif isinstance(iceberg_type, BooleanType):
        value = raw.lower() == "true"
    elif isinstance(iceberg_type, DateType):
        import datetime as dt

        value = dt.date.fromisoformat(raw)
    else:
        raise LakehouseError(f"a Delta partition value {raw!r} of type {iceberg_type} cannot be adopted")
    return _to_partition_representation(iceberg_type, value)


def revert(identifier: str, root_uri: str, storage_options: dict) -> dict[str, Any]:
    """Undo the foreign versions with one new Delta version: their adds removed, their removes restored.

    delta-rs's `restore` to the version before them writes exactly that commit (the Iceberg side never saw them);
    the commitInfo marks it as ours so it is not foreign itself.
    """
    from deltalake.transaction import CommitProperties

    delta = DeltaTable(root_uri, storage_options=storage_options)
    versions = foreign_versions(delta)
    if not versions:
        return {"reverted_versions": [], "reason": "no foreign Delta versions"}
    target = versions[0].version - 1
    metrics = delta.restore(
        target,
        commit_properties=CommitProperties(
            custom_metadata={SummaryKeys.OPERATION: Operation.REVERT_DELTA, REVERTED_VERSIONS: ",".join(str(v.version) for v in versions)}
        ),
    )
    return {"reverted_versions": [v.to_dict() for v in versions], "restored_to": target, "delta_metrics": metrics}

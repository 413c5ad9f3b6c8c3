"""Adopt another engine's Delta versions into Iceberg: one snapshot with the same adds and removes.

Iceberg is the source of truth, so a Delta version the mirror did not write (core/formats/delta/foreign_versions.py finds and
names them) either leaves Delta (revert) or joins Iceberg (adopt, here). Adoption reads no rows: files stay
where they are, and each one's Iceberg DataFile is built from its Parquet footer (pyiceberg's statistics),
its columns matched by name through the table's name mapping (Delta writers write no Iceberg field ids) or,
under Delta column mapping, by physical name and id; identity partition values come from Delta's
`partitionValues`, since Delta writers leave partition columns out of the files. Iceberg readers fill such a
column from the partition value (the spec's column projection rule); the project's own reader does so through
core/formats/delta/partition_constants.py, which the table property `FILES_WITHOUT_PARTITION_COLUMNS` switches on.

One kind of file is rewritten instead of adopted as is: files whose embedded Arrow schema declares view types
(`string_view`...), as delta-rs's DataFusion-based DELETE, UPDATE and MERGE write them. pyiceberg reads such a
file's strings as `string_view` and cannot put them together with the table's other files (`to_arrow` fails:
"Unable to merge: string vs string_view"). The caller's `rewrite` writes their rows again with the project's
writer, in Spark; the adopted snapshot holds the rewritten files, and the Delta version that records the
adoption swaps them in for Delta readers too (rows unchanged), so both formats hold the same files.

Deletion vectors of a merge-on-read table become Iceberg position-delete files (core/formats/delta/vector_adoption.py).
Refused with the reason, nothing changed: deletion vectors on any other table, a dropped or retyped column,
files outside the table location, non-identity partition transforms, and a Delta log that also lags Iceberg.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from deltalake import DeltaTable
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from ...errors import ForeignDeltaCommits, LakehouseError
from ...io.storage import delete_files, delta_path, join_uri, relative_to
from ...properties import DELTA_APP_ID, Operation, SummaryKeys
from .. import file_columns
from . import column_mapping, partition_constants, vector_adoption, vector_mirror
from .foreign_versions import ForeignVersion, foreign_versions

NAME_MAPPING = "schema.name-mapping.default"  # Iceberg readers match columns of files without field ids by name
ADOPTED_VERSIONS = "lakehouse.delta.adopted-versions"

# rewrite(table, schema, files, constants, created) -> the rewritten files' DataFiles (same rows); URIs of the
# files it wrote are appended to `created` as it writes them, so a failed adoption removes them.
Rewrite = Callable[[Table, Any, list[DataFile], dict, list[str]], list[DataFile]]


def adopt(identifier: str, table: Table, mirror, rewrite: Rewrite | None = None) -> dict[str, Any]:
    """Bring the foreign Delta versions into Iceberg as one snapshot with the same adds and removes, then record
    that snapshot as mirrored with one Delta version of ours (`mirror`: the table's DeltaMirror).

    Raises ForeignDeltaCommits, nothing changed, when they cannot be adopted."""
    from ..iceberg.committer import MetadataCachingTransaction, live_data_files

    root_uri = mirror.root_uri
    storage_options = mirror.storage.delta_options(root_uri)
    delta = mirror.load()
    versions = foreign_versions(delta) if delta is not None else []
    if not versions:
        return {"adopted_versions": [], "reason": "no foreign Delta versions"}
    added, removed, before = _changes(delta, versions, root_uri, storage_options)
    live = {relative_to(root_uri, f.file_path): f for f in live_data_files(table)}
    new_columns = [f.name for f in delta.schema().fields if f.name not in {c.name for c in table.schema().fields}]
    # Column mapping: Delta names a column in its files by its physical name (and delta-rs tags it with its id,
    # which is the Iceberg field id): match the files by those, not by the logical names.
    physical = column_mapping.physical_names(delta) if column_mapping.is_mapped(delta) else {}
    _check_adoptable(identifier, table, delta, before, versions, added, [p for p in removed if p not in live], new_columns, physical)
    adopted = ",".join(str(v.version) for v in versions)
    # On a merge-on-read table, other engines' deletion vectors become Iceberg position deletes (no file rewritten).
    vectors = (
        vector_adoption.changed_vectors(mirror.storage, root_uri, before.version(), delta.version(), [v.version for v in versions])
        if vector_mirror.enabled(table.properties) else {}
    )
    created: list[str] = []
    try:
        with MetadataCachingTransaction(table) as tx:
            if new_columns:
                _add_columns(tx, delta, new_columns)
            schema = tx.table_metadata.schema()
            files = FooterReader(identifier, versions, table, schema, tx.table_metadata, physical)
            adds = [files.data_file(join_uri(root_uri, path), path, action) for path, action in sorted(added.items())]
            properties = {NAME_MAPPING: name_mapping(schema, physical, CHANGE_TYPE in files.extra_columns or maps_change_type(table.properties))}
            if files.lacking_partition_columns:
                properties[partition_constants.FILES_WITHOUT_PARTITION_COLUMNS] = "true"
            tx.set_properties(properties)
            unreadable = [f for f in adds if f.file_path in files.view_typed]
            rewritten = _rewrite_view_typed(identifier, versions, table, schema, unreadable, files.view_typed, rewrite, created)
            deletes, replaced = vector_adoption.position_deletes(mirror.storage, root_uri, table, {**live, **dict(zip(sorted(added), adds))}, vectors)
            created += [f.file_path for f in deletes]
            summary = {SummaryKeys.OPERATION: Operation.ADOPT_DELTA, ADOPTED_VERSIONS: adopted}
            with vector_adoption.producer(tx, table, summary, bool(removed), deletes, replaced) as producer:
                for p in removed:
                    producer.delete_data_file(live[p])
                for f in [f for f in adds if f.file_path not in files.view_typed] + rewritten:
                    producer.append_data_file(f)
    except BaseException:
        delete_files(mirror.storage, created)
        raise
    table = table.refresh()
    snap = table.current_snapshot()
    delta.update_incremental()
    _record_in_delta(identifier, mirror, table, delta, snap, adopted, rewritten, unreadable)
    return {
        "adopted_versions": [v.to_dict() for v in versions],
        "iceberg_snapshot_id": snap.snapshot_id,
        "files_added": len(adds),
        "files_removed": len(removed),
        "files_rewritten": len(unreadable),
        "columns_added": new_columns,
    }


def _add_columns(tx, delta: DeltaTable, new_columns: list[str]) -> None:
    """Add the columns the foreign versions added to Delta's schema to the Iceberg schema, in the adoption's transaction."""
    import pyarrow as pa

    arrow_schema = pa.schema(delta.schema().to_arrow())
    with tx.update_schema() as update:
        update.union_by_name(pa.schema([arrow_schema.field(c) for c in new_columns]))


def _rewrite_view_typed(
    identifier: str,
    versions: list[ForeignVersion],
    table: Table,
    schema,
    unreadable: list[DataFile],
    view_typed: dict[str, list[str]],
    rewrite: Rewrite | None,
    created: list[str],
) -> list[DataFile]:
    """The view-typed files pyiceberg cannot read with the table's others, rewritten by `rewrite` (same rows, checked);
    refused when there is no `rewrite`."""
    if not unreadable:
        return []
    if rewrite is None:
        raise _cannot_adopt(identifier, versions, _view_types_reason(view_typed), _VIEW_TYPES_WAY_OUT.format(t=identifier))
    constants = partition_constants.missing_values(table, schema, unreadable)
    rewritten = rewrite(table, schema, unreadable, constants, created)
    _check_same_rows(identifier, versions, unreadable, rewritten)
    return rewritten


def _record_in_delta(identifier: str, mirror, table: Table, delta: DeltaTable, snap, adopted: str, rewritten: list[DataFile], unreadable: list[DataFile]) -> None:
    """One Delta version of ours recording the adopted snapshot as mirrored; a failure says how to get Delta back in step."""
    try:
        # The adopted snapshot's Delta side is the foreign versions themselves, with the rewritten files swapped in.
        mirror.record_adoption(table, delta, snap, adds=rewritten, removes=unreadable)
    except Exception as e:
        raise LakehouseError(
            f"Table {identifier}: the foreign Delta version(s) {adopted} were adopted as Iceberg snapshot {snap.snapshot_id}, but "
            f"recording that in Delta failed ({type(e).__name__}: {e}); another Delta commit may have landed meanwhile, and Delta "
            f"lags Iceberg. `lakehouse repair {identifier} --revert-delta` undoes the foreign versions in Delta and mirrors the "
            "adopted snapshot on top (the same rows, as the lakehouse's own version)."
        ) from e


# ---------------------------------------------------------------- what changed, and whether it can be adopted


def live_files(delta: DeltaTable) -> dict[str, dict[str, Any]]:
    """Live files of a Delta version: decoded relative path -> (size, partition values)."""
    import pyarrow as pa

    actions = pa.table(delta.get_add_actions(flatten=False))
    out = {}
    for row in actions.select([c for c in ("path", "size_bytes", "partition") if c in actions.column_names]).to_pylist():
        out[delta_path(row["path"])] = row
    return out


def _changes(delta: DeltaTable, versions: list[ForeignVersion], root_uri: str, storage_options: dict) -> tuple[dict, dict, DeltaTable]:
    before = DeltaTable(root_uri, version=versions[0].version - 1, storage_options=storage_options)
    old, new = live_files(before), live_files(delta)
    return {p: new[p] for p in new.keys() - old.keys()}, {p: old[p] for p in old.keys() - new.keys()}, before


def files_with_deletion_vectors(delta: DeltaTable) -> list[str]:
    """Live files whose rows a deletion vector partly deletes (none unless the protocol has the feature)."""
    import pyarrow as pa

    if "deletionVectors" not in (delta.protocol().reader_features or []):
        return []
    return sorted(pa.table(delta.deletion_vectors()).column("filepath").to_pylist())


def adoption_refusals(identifier: str, table: Table, delta: DeltaTable, before: DeltaTable, added: dict) -> list[str]:
    """Why the foreign versions cannot be brought into Iceberg as they are (empty: they can)."""
    reasons = []
    if not vector_mirror.enabled(table.properties) and (with_vectors := files_with_deletion_vectors(delta)):
        # The mirror writes deletion vectors only on merge-on-read tables, so every one of them came with the foreign versions.
        reasons.append(
            f"{len(with_vectors)} file(s) carry deletion vectors (rows deleted by marking them, the file left as it was), e.g. "
            f"{[relative_to(delta.table_uri, u) for u in with_vectors[:3]]}. Adopting them means rewriting those files without the "
            "deleted rows, and delta-rs cannot commit the matching Delta change (its remove actions carry no deletion vector, so the "
            "marked file would stay live in Delta). Purge them with the engine that wrote them (Delta Lake on Spark or Databricks: "
            f"`REORG TABLE ... APPLY (PURGE)`), which rewrites them without vectors; that version can then be adopted. Or revert"
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


def _check_same_rows(identifier: str, versions, files: list[DataFile], rewritten: list[DataFile]) -> None:
    want, got = sum(f.record_count for f in files), sum(f.record_count for f in rewritten)
    if want != got:
        raise _cannot_adopt(identifier, versions, f"rewriting {len(files)} file(s) wrote {got} rows where {want} were read")


_VIEW_TYPES_WAY_OUT = (
    "`lakehouse repair {t} --adopt-delta` rewrites such files (rows unchanged) while adopting them; or `lakehouse repair {t} "
    "--revert-delta` undoes them on the Delta side."
)


def _view_types_reason(view_typed: dict[str, list[str]]) -> str:
    path, columns = next(iter(sorted(view_typed.items())))
    return (
        f"{len(view_typed)} added file(s) declare Arrow view types in their Parquet metadata (e.g. {path} for column(s) {columns}; "
        "delta-rs writes them in its DataFusion-based DELETE, UPDATE and MERGE), which pyiceberg cannot read together with the "
        "table's other files, and this adoption was not given a Spark session to rewrite them"
    )


# ---------------------------------------------------------------- the adopted files' Iceberg metadata


class FooterReader:
    """Iceberg DataFiles of foreign Delta files, from their Parquet footers and Delta's partition values.

    Notes the files pyiceberg cannot read beside others (`view_typed`: URI -> columns) and whether any file
    lacks an identity partition column (`lacking_partition_columns`)."""

    def __init__(self, identifier: str, versions, table: Table, schema, metadata, physical: dict[int, str]):
        from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping

        self.identifier, self.versions, self.io, self.schema = identifier, versions, table.io, schema
        self.spec, self.spec_id = metadata.spec(), metadata.default_spec_id
        self.plan = compute_statistics_plan(schema, metadata.properties)
        top = {f.field_id: p for f in schema.fields if (p := physical.get(f.field_id)) is not None}
        self.file_schema = file_columns.with_file_names(schema, top)  # columns as the files name them
        self.ids = with_list_item_paths(parquet_path_to_id_mapping(self.file_schema))
        self.by_physical = {p: schema.find_column_name(i) for i, p in top.items()}  # Delta keys partition values by physical name
        self.view_typed: dict[str, list[str]] = {}
        self.lacking_partition_columns = False
        self.extra_columns: set[str] = set()  # columns some files hold outside the table (a Delta file's `_change_type`)

    def data_file(self, uri: str, path: str, action: dict) -> DataFile:
        import pyarrow.parquet as pq
        from pyiceberg.manifest import DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        metadata = pq.read_metadata(self.io.new_input(uri).open())
        if views := _view_typed_columns(metadata):
            self.view_typed[uri] = views
        held = [self.file_schema.find_field(n).field_id for n in metadata.schema.to_arrow_schema().names if self._has(n)]
        if partition_constants.lacking_columns(self.spec, self.schema, held):
            self.lacking_partition_columns = True
        stats = self._statistics(metadata)
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

    def _statistics(self, metadata):
        """The file's Iceberg statistics, from its footer. Columns outside the table are not the table's: a Delta
        data file may also carry its rows' `_change_type` (the protocol lets one file serve as data and change data),
        which Delta readers drop and Iceberg readers, matching by field id or name mapping, never see."""
        from pyiceberg.io.pyarrow import MetricModeTypes, MetricsMode, StatisticsCollector, data_file_statistics_from_parquet_metadata
        from pyiceberg.types import StringType

        plan = _counts_only_for_int96(metadata, self.plan, self.ids)
        extra = {metadata.schema.column(i).path for i in range(metadata.num_columns)} - self.ids.keys()
        if not extra:
            return data_file_statistics_from_parquet_metadata(metadata, plan, self.ids)
        ignored = StatisticsCollector(field_id=-1, iceberg_type=StringType(), mode=MetricsMode(MetricModeTypes.NONE), column_name="")
        self.extra_columns.update(path.split(".", 1)[0] for path in extra)
        stats = data_file_statistics_from_parquet_metadata(metadata, {**plan, -1: ignored}, {**self.ids, **dict.fromkeys(extra, -1)})
        stats.column_sizes.pop(-1, None)
        return stats

    def _has(self, name: str) -> bool:
        try:
            self.file_schema.find_field(name)
            return True
        except ValueError:
            return False


def _counts_only_for_int96(metadata, plan: dict, ids: dict[str, int]) -> dict:
    """The statistics plan with counts but no bounds for INT96 columns (Spark's legacy timestamps): Parquet defines no order
    for INT96, so its footer min/max are not bounds Iceberg can use (pyiceberg refuses them), and an absent bound is unknown."""
    import dataclasses

    from pyiceberg.io.pyarrow import MetricModeTypes, MetricsMode

    int96 = {ids[c.path] for c in (metadata.schema.column(i) for i in range(len(metadata.schema))) if c.physical_type == "INT96" and c.path in ids}
    if not int96:
        return plan
    counts = MetricsMode(MetricModeTypes.COUNTS)
    return {i: dataclasses.replace(c, mode=counts) if i in int96 and c.mode != MetricsMode(MetricModeTypes.NONE) else c for i, c in plan.items()}


CHANGE_TYPE = "_change_type"  # a Delta data file's change type, where the file also serves as change data
CHANGE_TYPE_FIELD_ID = 2**31 - 1 - 104  # Iceberg's reserved id of the `_change_type` metadata column: no table column has it


def with_list_item_paths(ids: dict[str, int]) -> dict[str, int]:
    """Parquet column paths -> field ids, each list element also under `<list>.list.item`: Arrow-based writers (delta-rs,
    pyarrow without `use_compliant_nested_type`) name the element `item` where the Parquet spec and Iceberg say `element`."""
    out = dict(ids)
    for path, field_id in ids.items():
        alias = re.sub(r"\.list\.element(?=\.|$)", ".list.item", path)
        out.setdefault(alias, field_id)
    return out


def name_mapping(schema, physical: dict[int, str], change_type: bool = False) -> str:
    """The table's name mapping (for files without field ids), each column also under its Delta physical name.
    `change_type`: some files also carry `_change_type`, mapped to Iceberg's reserved id for it (pyiceberg refuses a
    file column the mapping lacks; readers of the table's columns never ask for that id)."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping, create_mapping_from_schema

    mapping = create_mapping_from_schema(schema)
    fields = [
        MappedField(field_id=f.field_id, names=[*f.names, *([physical[f.field_id]] if physical.get(f.field_id) not in (None, *f.names) else [])], fields=f.fields)
        for f in mapping
    ]
    if change_type:
        fields.append(MappedField(field_id=CHANGE_TYPE_FIELD_ID, names=[CHANGE_TYPE]))
    return NameMapping(fields).model_dump_json()


def maps_change_type(properties) -> bool:
    """Whether the table's name mapping maps `_change_type` (its imported files carry it): kept when it is written again."""
    return f'"{CHANGE_TYPE}"' in properties.get(NAME_MAPPING, "")


def _view_typed_columns(metadata) -> list[str]:
    """Columns whose Arrow type, as the file's embedded Arrow schema declares it, is a view type (string_view,
    binary_view, list_view): what pyarrow-based readers then read them as."""
    import pyarrow as pa

    views = (pa.types.is_string_view, pa.types.is_binary_view, pa.types.is_list_view, pa.types.is_large_list_view)
    return [f.name for f in metadata.schema.to_arrow_schema() if any(is_view(f.type) for is_view in views)]


def _typed_partition_value(iceberg_type, raw: str):
    """A Delta partition value (typed by delta-rs, or a string) as the Iceberg partition record holds it."""
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
        raise LakehouseError(
            f"a Delta partition value {raw!r} of a {iceberg_type} column cannot be adopted into Iceberg (only string, integer, "
            "floating, boolean and date partition values can). Undo the foreign Delta versions with "
            "`lakehouse repair TABLE --revert-delta` and write those rows through the lakehouse."
        )
    return _to_partition_representation(iceberg_type, value)

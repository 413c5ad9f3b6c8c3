"""A new Iceberg table over files that already exist: a Delta table's live files or a plain Parquet dataset.

Nothing is rewritten. The Iceberg table lives at the files' root (the Delta root is the Iceberg location, as for every
table here), its metadata under `_iceberg/`, and its one snapshot holds every file as it is: each DataFile is built
from the file's Parquet footer (core/formats/delta/adoption.py's `FooterReader`), its partition values from the Delta
log or from Hive-style `key=value/` folders. Such files carry no Iceberg field ids, so the table gets a name mapping
(`schema.name-mapping.default`, as pyiceberg's `add_files` writes) by which every Iceberg reader matches their
columns; identity partition columns the files leave out are filled from the partition values
(core/formats/delta/partition_constants.py).

A column-mapped Delta table keeps its mapping, in this project's convention (core/formats/delta/column_mapping.py): the
Delta column ids are the Iceberg field ids, the first Iceberg schema names the columns by their physical names (what
the files hold) and a rename in the same import gives them their Delta names.

A Delta source keeps its log: one Delta version of ours records the snapshot as mirrored (later writes mirror on top).
Files with deletion vectors are kept as Iceberg position deletes when the table sets `delta.enableDeletionVectors=true`
(core/formats/delta/vector_adoption.py), else refused, or on request (`purge_deletion_vectors`) first rewritten by
delta-rs without the rows their vectors delete: a Delta version that changes no row, as `REORG TABLE ... APPLY (PURGE)`.
A Parquet dataset gets a new Delta log: version 0 (schema) and version 1 (the files).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from pyiceberg.catalog import Catalog
from pyiceberg.schema import INITIAL_SCHEMA_ID, Schema, assign_fresh_schema_ids
from pyiceberg.table import Table

from ..errors import ImportRefused
from ..formats import file_columns
from ..formats.delta import column_mapping as delta_column_mapping
from ..formats.delta import partition_constants
from ..formats.delta import vector_adoption as delta_vector_adoption
from ..formats.delta.adoption import CHANGE_TYPE, NAME_MAPPING, FooterReader, name_mapping
from ..formats.iceberg.committer import commit_files
from ..io.storage import delete_files, join_uri
from ..properties import METADATA_FOLDER, Operation, SummaryKeys, TableProperties
from ..schema.spec import ALL_FORMATS, build_partition_spec
from ..schema.statistics import DELTA_NUM_INDEXED_COLUMNS, DELTA_NUM_INDEXED_COLUMNS_DEFAULT, DELTA_STATS_COLUMNS
from ..schema.type_mapping import NARROW_INTEGERS, delta_type_refusals, narrow_integer_fields, plain_arrow_type
from ..table.catalog import ensure_namespace
from ..table.context import TableContext
from ..table.tables import check_delta_partitioning

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # Hive's (and Spark's, pyarrow's) folder name for a NULL partition value


@dataclass
class ExistingFiles:
    """Files to register as they are: their common Arrow schema (partition columns included), the partition columns,
    and per file (path relative to the root, size in bytes, partition values as strings or typed values)."""

    root_uri: str
    arrow_schema: Any
    partition_columns: list[str]
    files: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    physical: dict[str, tuple[int, str]] = field(default_factory=dict)  # Delta column mapping: name -> (id, physical name)
    properties: dict[str, str] = field(default_factory=dict)  # Iceberg table properties the source decides
    deleted: dict[str, Any] = field(default_factory=dict)  # path -> positions its Delta deletion vector deletes (kept as position deletes)


def iceberg_schema(arrow_schema) -> Schema:
    """The Iceberg schema of Arrow columns, with fresh field ids (the files have none: the name mapping matches them)."""
    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(arrow_schema))


def create_over_files(ctx: TableContext, identifier: str, existing: ExistingFiles, source: str) -> Table:
    """The Iceberg table at `existing.root_uri` and its one snapshot holding `existing.files`. Raises ImportRefused
    (nothing created) when the partition columns have no Delta form."""
    mapped = existing.physical
    arrow = existing.arrow_schema
    if mapped:  # the first schema names the columns as the files do; a rename then gives them their Delta names
        import pyarrow as pa

        arrow = pa.schema([f.with_name(mapped[f.name][1]) for f in arrow])
    schema = _iceberg_schema_or_refuse(identifier, source, arrow)
    narrow = narrow_integer_fields(arrow, schema)
    spec = _identity_spec(schema, [mapped[c][1] for c in existing.partition_columns]) if mapped else build_partition_spec(identifier, schema, existing.partition_columns)
    check_delta_partitioning(identifier, schema, spec)
    ensure_namespace(ctx.catalog, identifier.rsplit(".", 1)[0])
    properties = {
        **TableProperties.DEFAULTS,
        TableProperties.METADATA_PATH: join_uri(existing.root_uri, METADATA_FOLDER),
        TableProperties.FORMATS: ",".join(ALL_FORMATS),
        **existing.properties,
        **({NARROW_INTEGERS: json.dumps({str(k): v for k, v in sorted(narrow.items())})} if narrow else {}),
    }
    if mapped:
        properties.update({file_columns.MODE: "name", file_columns.SCHEMA_ID_PROPERTY: str(INITIAL_SCHEMA_ID)})
    table = ctx.catalog.create_table(identifier, schema=schema, location=existing.root_uri, partition_spec=spec, properties=properties)
    if mapped:
        table = _rename_to_delta_names(ctx, identifier, table, existing, source)
    try:
        schema, metadata = table.schema(), table.metadata
        physical = {f.field_id: existing.physical[f.name][1] for f in schema.fields} if existing.physical else {}
        reader = FooterReader(identifier, [], table, schema, metadata, physical)
        adds = [reader.data_file(join_uri(existing.root_uri, path), path, {"size_bytes": size, "partition": values}) for path, size, values in existing.files]
        if reader.view_typed:
            path, columns = next(iter(sorted(reader.view_typed.items())))
            raise ImportRefused(
                f"Table {identifier}: {len(reader.view_typed)} file(s) of {source} declare Arrow view types in their Parquet metadata (e.g. "
                f"{path} for column(s) {columns}), as Polars and delta-rs's DataFusion operations write them, which pyiceberg cannot read "
                "together with other files. Nothing was imported. Rewrite the files without view types, then import again: a Delta "
                "table with delta-rs, `DeltaTable(root).optimize.z_order([a column])` (one version that changes no row; its plain "
                "`compact()` leaves a lone file as it is) or Delta Lake's `OPTIMIZE ... ZORDER BY`; Parquet files with pyarrow."
            )
        if other := sorted(reader.extra_columns - {CHANGE_TYPE}):
            raise ImportRefused(
                f"Table {identifier}: file(s) of {source} hold column(s) {other} that the table does not have, which pyiceberg cannot "
                "read beside the table's columns. Nothing was imported. Rewrite those files with the engine that wrote them."
            )
        marks = {NAME_MAPPING: name_mapping(schema, physical, CHANGE_TYPE in reader.extra_columns)}
        if reader.lacking_partition_columns:
            marks[partition_constants.FILES_WITHOUT_PARTITION_COLUMNS] = "true"
        _commit_import(ctx, table, existing, adds, marks, {SummaryKeys.OPERATION: Operation.IMPORT, IMPORTED_FROM: source})
    except BaseException:
        drop_created(ctx, identifier, existing.root_uri)
        raise
    return ctx.load(identifier)


def _commit_import(ctx: TableContext, table: Table, existing: ExistingFiles, adds: list, marks: dict, summary: dict) -> None:
    """The import's one snapshot: its files, and the position-delete files of the deletion vectors it keeps."""
    deletes = delta_vector_adoption.delete_files(ctx.storage, existing.root_uri, {p: f for (p, _, _), f in zip(existing.files, adds)}, existing.deleted)
    try:  # an append (its manifests clustered by partition) or, with delete files, a row delta
        commit_files(table, adds, [], summary, stage=lambda tx: tx.set_properties(marks), added_delete_files=deletes)
    except BaseException:
        delete_files(ctx.storage, [f.file_path for f in deletes])
        raise


def _iceberg_schema_or_refuse(identifier: str, source: str, arrow) -> Schema:
    """The Iceberg schema of the files' columns; ImportRefused, nothing created, naming each column with no type in both formats."""
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException

    try:
        schema = iceberg_schema(arrow)
    except UnsupportedPyArrowTypeException as e:
        reasons = [f"column {e.field.name!r} is {e.field.type} (no Iceberg type in format version 2, nor a Delta type)"]
    else:
        reasons = delta_type_refusals(schema)
    if reasons:
        raise ImportRefused(
            f"Table {identifier} cannot be imported from {source}: column types Iceberg and Delta do not share: " + "; ".join(reasons)
            + ". Nothing was imported. Rewrite the column(s) as the type suggested with the engine that wrote them, then import again."
        )
    return schema


def _identity_spec(schema: Schema, columns: list[str]):
    """Identity partitions on `columns` (physical names such as `col-<uuid>`, which partition terms cannot spell)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    fields = [PartitionField(schema.find_field(c).field_id, 1000 + i, IdentityTransform(), c) for i, c in enumerate(columns)]
    return PartitionSpec(*fields)


def _rename_to_delta_names(ctx: TableContext, identifier: str, table: Table, existing: ExistingFiles, source: str) -> Table:
    """A column-mapped Delta table's columns under their Delta names, each with the Delta column id as its Iceberg field id
    (the convention of core/formats/delta/column_mapping.py); refused when the ids differ."""
    try:
        ids = {f.name: f.field_id for f in table.schema().fields}
        wrong = [n for n, (i, p) in existing.physical.items() if ids.get(p) != i]
        if wrong:
            raise ImportRefused(
                f"Table {identifier}: the column-mapped Delta table at {source} numbers column(s) {wrong} differently from the order "
                "Iceberg assigns field ids (columns were dropped or reordered, or the table has nested columns). Nothing was "
                "imported. Rewrite it as a new table through the lakehouse."
            )
        with table.update_schema() as update:
            for name, (_, physical) in existing.physical.items():
                if name != physical:
                    update.rename_column(physical, name)
    except BaseException:
        drop_created(ctx, identifier, existing.root_uri)
        raise
    return table.refresh()


IMPORTED_FROM = "lakehouse.imported-from"  # the snapshot summary key naming what an import brought in


def drop_created(ctx: TableContext, identifier: str, root_uri: str) -> None:
    """Undo `create_over_files`: the catalog entry and the `_iceberg/` folder it wrote (the source's files stay)."""
    try:
        ctx.catalog.drop_table(identifier)
    except Exception:  # noqa: BLE001 - never hide the import's own error
        pass
    fs, path = ctx.storage.filesystem(join_uri(root_uri, METADATA_FOLDER))
    try:
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


# ---------------------------------------------------------------- a plain Parquet dataset


def parquet_dataset(ctx: TableContext, identifier: str, root_uri: str) -> ExistingFiles:
    """The data files under `root_uri` (files and folders starting with `_` or `.` skipped, as Spark and pyarrow do),
    Hive-style partition columns from `key=value/` folders, and one schema all footers must agree on."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow.fs import FileSelector

    fs, base = ctx.storage.filesystem(root_uri)
    infos = [i for i in fs.get_file_info(FileSelector(base, recursive=True)) if i.is_file]
    paths = sorted(i.path[len(base.rstrip("/")) + 1 :] for i in infos)
    paths = [p for p in paths if not any(part.startswith(("_", ".")) for part in p.split("/"))]
    sizes = {i.path[len(base.rstrip("/")) + 1 :]: i.size for i in infos}
    if not paths:
        raise ImportRefused(f"Table {identifier}: {root_uri} holds no Parquet files (nor a Delta log or Iceberg metadata). Nothing was imported.")
    partition_schema = _hive_partition_schema(identifier, paths)
    partition_columns = list(partition_schema.names)
    file_schema = None
    first = None
    for p in paths:
        with fs.open_input_file(join_uri(base, p)) as f:
            found = _file_schema(pq.ParquetFile(f))
        found = pa.schema([fld for fld in found if fld.name not in partition_columns])
        if file_schema is None:
            file_schema, first = found, p
        else:
            check_same_columns(identifier, first, file_schema, p, found)
    existing = ExistingFiles(root_uri, pa.schema([*file_schema, *partition_schema]).remove_metadata(), partition_columns)
    for p in paths:
        existing.files.append((p, sizes[p], _hive_values(p, partition_columns)))
    return existing


def _file_schema(parquet):
    """A file's Arrow schema, INT96 timestamps as the timestamptz they are: Spark's legacy encoding of an instant (UTC-adjusted),
    which pyarrow reads as timezone-less nanoseconds. In a column that also holds real nanosecond timestamps (INT64 NANOS)
    nothing is changed, and the import refuses those by name."""
    import json

    import pyarrow as pa

    leaves = [parquet.schema.column(i) for i in range(len(parquet.schema))]
    int96 = {c.path.split(".")[0] for c in leaves if c.physical_type == "INT96"}
    nanos = {c.path.split(".")[0] for c in leaves if c.logical_type.type == "TIMESTAMP" and json.loads(c.logical_type.to_json())["timeUnit"] == "nanoseconds"}
    return pa.schema([f.with_type(_int96_as_micros(f.type)) if f.name in int96 - nanos else f for f in parquet.schema_arrow])


def _int96_as_micros(t):
    """`t` with each nanosecond timestamp in it (what pyarrow makes of INT96) as a UTC microsecond timestamp."""
    import pyarrow as pa

    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC") if t.unit == "ns" else t
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_int96_as_micros(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_int96_as_micros(t.key_type)), t.item_field.with_type(_int96_as_micros(t.item_type)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(_int96_as_micros(t.value_type)))
    return t


def check_same_columns(identifier: str, first: str, expected, path: str, found) -> None:
    """Every file of a dataset has the first file's columns and types (nullability aside; string and large_string, binary and
    large_binary are one type each, encoded with 32- or 64-bit offsets)."""
    want = {f.name: plain_arrow_type(f.type) for f in expected}
    got = {f.name: plain_arrow_type(f.type) for f in found}
    for name, t in want.items():
        if name in got and got[name] != t:
            raise ImportRefused(
                f"Table {identifier}: column {name!r} is {got[name]} in {path} but {t} in {first}: one table has one type per column. "
                f"Nothing was imported. Rewrite {path} with {name} as {t} (or import the files separately)."
            )
    if want.keys() != got.keys():
        raise ImportRefused(
            f"Table {identifier}: {path} has columns {sorted(got)} where {first} has {sorted(want)}: every file of an imported dataset "
            "needs the same columns. Nothing was imported. Rewrite the odd files (or move them out of the dataset)."
        )


def _hive_partition_schema(identifier: str, paths: list[str]):
    """The `key=value/` folder keys every file shares (in order), typed as pyarrow and Spark infer them: int32 (int64 when
    a value needs it) when every value is an integer, else string."""
    import pyarrow as pa

    keys = {tuple(part.split("=", 1)[0] for part in p.split("/")[:-1] if "=" in part) for p in paths}
    if len(keys) > 1:
        raise ImportRefused(
            f"Table {identifier}: the dataset's files sit under different partition folders ({sorted(keys)}): a table has one "
            "set of partition columns. Nothing was imported. Move the odd files out of the dataset."
        )
    columns = list(next(iter(keys)))
    fields = []
    for column in columns:
        values = [v for p in paths if (v := _hive_values(p, [column]).get(column)) is not None]
        if values and all(v.lstrip("-").isdigit() for v in values):
            fits = all(-(2**31) <= int(v) < 2**31 for v in values)
            fields.append(pa.field(column, pa.int32() if fits else pa.int64()))
        else:
            fields.append(pa.field(column, pa.string()))
    return pa.schema(fields)


def _hive_values(path: str, columns: list[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for part in path.split("/")[:-1]:
        if "=" in part:
            key, value = part.split("=", 1)
            if key in columns:
                value = unquote(value)
                values[key] = None if value == HIVE_NULL else value
    return values


# ---------------------------------------------------------------- a Delta table


def delta_files(identifier: str, delta, root_uri: str, keep_vectors: bool = False) -> ExistingFiles:
    """A Delta table's live files at its current version, refused (nothing changed) where Iceberg cannot hold them as they are.
    `keep_vectors`: its deletion vectors become position deletes (`deleted`) instead of a refusal."""
    import pyarrow as pa

    from ..formats.delta.adoption import files_with_deletion_vectors, live_files

    try:
        with_vectors = [] if keep_vectors else files_with_deletion_vectors(delta)
    except Exception as e:  # noqa: BLE001 - a vector the kernel cannot decode is still a vector
        with_vectors = [f"(unreadable: {type(e).__name__}: {e})"]
    if with_vectors:
        raise ImportRefused(
            f"Table {identifier}: {len(with_vectors)} live file(s) of the Delta table at {root_uri} carry deletion vectors (rows deleted "
            f"by marking them, the file left as it was), e.g. {with_vectors[:3]}. Iceberg would read those rows as live. Nothing was "
            "imported. Import with apply_deletes=True (`lakehouse import --apply-deletes`) to rewrite those files without the deleted "
            f"rows first, or set `{delta_vector_adoption.deletion_vectors.ENABLE_PROPERTY}=true` on the Delta table to import it as a merge-on-read table "
            "(its vectors kept as Iceberg position deletes), or purge them with the engine that wrote them (Delta Lake on Spark or Databricks: "
            "`REORG TABLE ... APPLY (PURGE)`), then import again."
        )
    live = live_files(delta)
    outside = [p for p in live if "://" in p or p.startswith(("/", ".."))]
    if outside:
        raise ImportRefused(
            f"Table {identifier}: {len(outside)} live file(s) of the Delta table at {root_uri} lie outside it (e.g. {outside[:3]}, a "
            "shallow clone?); the imported table owns only files under its root. Nothing was imported."
        )
    arrow_schema = pa.schema(delta.schema().to_arrow())
    existing = ExistingFiles(root_uri, arrow_schema, list(delta.metadata().partition_columns))
    # The statistics columns the source declares (Delta's default when it declares none) become the table's policy, so
    # the Delta log needs no new configuration and both formats keep statistics of the same columns.
    configuration = delta.metadata().configuration or {}
    existing.properties = {k: configuration[k] for k in (DELTA_STATS_COLUMNS, DELTA_NUM_INDEXED_COLUMNS) if k in configuration} or {
        DELTA_NUM_INDEXED_COLUMNS: str(DELTA_NUM_INDEXED_COLUMNS_DEFAULT)
    }
    if delta_column_mapping.is_mapped(delta):
        by_physical = {p: i for i, p in delta_column_mapping.physical_names(delta).items()}
        existing.physical = {name: (by_physical[p], p) for p, name in delta_column_mapping.logical_names(delta).items()}
    for path, row in sorted(live.items()):
        existing.files.append((path, int(row["size_bytes"]), dict(row.get("partition") or {})))
    if keep_vectors:
        existing.deleted = delta_vector_adoption.deleted_positions(delta, root_uri)
        existing.properties.update(delta_vector_adoption.MERGE_ON_READ_PROPERTIES)
    return existing


def refuse_float_partitions(identifier: str, delta, root_uri: str) -> None:
    """Refuse (nothing changed) a Delta table partitioned by a float or double column: the Iceberg side would hold its
    values as identity partition values, which its readers do not read back alike."""
    types = {f.name: getattr(f.type, "type", None) for f in delta.schema().fields}  # a primitive type's name, e.g. "double"
    floats = [c for c in delta.metadata().partition_columns if types.get(c) in ("float", "double")]
    if floats:
        raise ImportRefused(
            f"Table {identifier}: the Delta table at {root_uri} is partitioned by floating-point column(s) {floats}. Iceberg would hold "
            "them as identity partition values, which its readers do not read alike (pyiceberg 0.12 reads such a double back "
            "rounded to float precision where DuckDB reads it exact; Delta spells -0.0, NaN and infinities as '-0', 'NaN', 'inf'), "
            "and the lakehouse refuses identity partitions on floating-point columns for the same reason. Nothing was imported. "
            f"Rewrite the table partitioned by a decimal or integer column derived from {floats[0]!r}, or unpartitioned."
        )


def refuse_variant_columns(identifier: str, delta, root_uri: str) -> None:
    """Refuse (before any work, `--apply-deletes` included) a Delta table with variant columns."""
    if variants := variant_columns(json.loads(delta.schema().to_json())):
        raise ImportRefused(
            f"Table {identifier}: column(s) {variants} of the Delta table at {root_uri} are of type variant, which this project's "
            "Iceberg side cannot hold (pyiceberg has no variant type; Iceberg's variant needs format v3). Nothing was imported. "
            "Store the values as JSON strings instead (Spark: `to_json(col)`), or keep the table Delta-only."
        )


def variant_columns(delta_type, path: str = "") -> list[str]:
    """Paths of the `variant` fields in a Delta schema (its JSON form), at any depth."""
    if delta_type == "variant":
        return [path]
    if not isinstance(delta_type, dict):
        return []
    if delta_type.get("type") == "struct":
        return [c for f in delta_type["fields"] for c in variant_columns(f["type"], f"{path}.{f['name']}" if path else f["name"])]
    if delta_type.get("type") == "array":
        return variant_columns(delta_type["elementType"], f"{path}.element")
    if delta_type.get("type") == "map":
        return variant_columns(delta_type["keyType"], f"{path}.key") + variant_columns(delta_type["valueType"], f"{path}.value")
    return []


def purge_deletion_vectors(identifier: str, delta) -> int:
    """Rewrite the live files that carry deletion vectors without the rows the vectors delete; returns how many.

    delta-rs's optimize reads through the vectors and commits removes that carry them, in one Delta version with
    `dataChange=false`. Its compaction leaves a lone file alone, its Z-order rewrites every file of the partitions it
    is given: so Z-order, on only the partitions that hold vectors (on the whole table when unpartitioned or when a
    partition value is null). It runs in this process, like the rest of delta-rs.
    """
    from ..formats.delta.adoption import files_with_deletion_vectors, live_files
    from ..io.storage import relative_to

    with_vectors = files_with_deletion_vectors(delta)
    if not with_vectors:
        return 0
    if delta_column_mapping.is_mapped(delta):
        raise ImportRefused(
            f"Table {identifier}: the Delta table uses column mapping, which delta-rs does not rewrite. Nothing was imported. Purge its "
            "deletion vectors with the engine that wrote them (`REORG TABLE ... APPLY (PURGE)`), then import again."
        )
    partition_columns = list(delta.metadata().partition_columns)
    order_by = [f.name for f in delta.schema().fields if f.name not in partition_columns and isinstance(f.type, _primitive_type())]
    if not order_by:
        raise ImportRefused(f"Table {identifier}: no primitive column outside the partition columns to rewrite the files by. Nothing was imported.")
    live = live_files(delta)
    partitions = {tuple(sorted((live[relative_to(delta.table_uri, uri)].get("partition") or {}).items())) for uri in with_vectors}
    if not partition_columns or any(v is None for p in partitions for _, v in p):
        partitions = {()}
    for partition in sorted(partitions, key=repr):
        filters = [(column, "=", str(value)) for column, value in partition] or None
        delta.optimize.z_order(order_by[:1], partition_filters=filters)
        delta.update_incremental()
    return len(with_vectors)


def _primitive_type():
    from deltalake.schema import PrimitiveType

    return PrimitiveType

"""Delta column mapping (name mode): the one place this project writes Delta log actions itself.

With column mapping a Delta column has a logical name (what readers see) and a physical name (the
column's name inside the Parquet files) plus a stable id. That is what makes a rename or a drop a
metadata-only change in Delta, as it is in Iceberg: Iceberg readers find a column by its field id, Delta
readers by its physical name, so each Delta field here carries `delta.columnMapping.id` equal to its
Iceberg field id and a physical name that never changes.

delta-rs (1.6.6) writes data into a column-mapped table and upgrades the protocol
(`alter.add_feature(ColumnMapping)`), but refuses every change of the `metaData` action that column
mapping needs: the mode, a field's id and physical name, a new or renamed column. This module writes
exactly that action, and nothing else, as a Delta commit of its own:

* the commit file `_delta_log/<version>.json` is created put-if-absent (obstore's `mode="create"`: the
  conditional PUT of the same object_store crate delta-rs commits with), so a concurrent writer of the
  same version makes it fail, never overwrite; the caller re-reads the log and tries again;
* it carries a `commitInfo` and one `metaData` action; the rest of the metaData (table id, name,
  partition columns, configuration, creation time) is copied from the log as delta-rs reads it.

The same metaData-only commit sets table properties on any table with table features (`commit_configuration`):
delta-rs's SET TBLPROPERTIES rewrites such a table's protocol.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Mapping

import obstore
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import from_url
from pyiceberg.schema import Schema
from pyiceberg.types import ListType, MapType, NestedField, StructType

from ...io.storage import StorageConfig
from ...properties import Operation, SummaryKeys
from ...schema.type_mapping import delta_schema
from ..file_columns import MODE

MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
FIELD_ID = "delta.columnMapping.id"
PHYSICAL_NAME = "delta.columnMapping.physicalName"
CLIENT = "lakehouse-assets"


def mapping_keys(configuration: Mapping[str, str]) -> dict[str, str]:
    """The column-mapping setting among `configuration` (e.g. a resource-wide Delta configuration), for new tables."""
    return {MODE: configuration[MODE]} if MODE in configuration else {}


def without_mapping_keys(configuration: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in configuration.items() if k not in (MODE, MAX_COLUMN_ID)}


def is_mapped(delta: DeltaTable) -> bool:
    return (delta.metadata().configuration or {}).get(MODE) == "name"


def logical_names(delta: DeltaTable) -> dict[str, str]:
    """Physical -> logical name of each top-level column of a column-mapped Delta table (the log keys stats and
    partition values by physical name)."""
    return {
        (f.get("metadata") or {}).get(PHYSICAL_NAME, f["name"]): f["name"] for f in json.loads(delta.schema().to_json())["fields"]
    }


def schema_matches(delta: DeltaTable, schema: Schema, names: Mapping[int, str], narrow: Mapping[int, str] | None = None) -> bool:
    """Whether the Delta table is column-mapped with exactly `schema`'s columns, ids and physical names (other field
    metadata, such as Spark's char/varchar lengths or comments, aside). `narrow`: type_mapping.narrow_integers."""
    if not is_mapped(delta):
        return False
    return _mapping_only(json.loads(delta.schema().to_json())["fields"]) == mapped_schema(schema, names, narrow)["fields"]


def _mapping_only(t: Any) -> Any:
    """A Delta schema (JSON) whose fields keep only their column mapping metadata."""
    if isinstance(t, list):
        return [_mapping_only(v) for v in t]
    if not isinstance(t, dict):
        return t
    out = {k: _mapping_only(v) for k, v in t.items() if k != "metadata"}
    if "metadata" in t:
        out["metadata"] = {k: v for k, v in (t["metadata"] or {}).items() if k in (FIELD_ID, PHYSICAL_NAME)}
    return out


def changed_types(delta: DeltaTable, schema: Schema, narrow: Mapping[int, str] | None = None) -> list[str]:
    """Columns (matched by field id) whose type in `schema` differs from the column-mapped Delta table's."""
    if not is_mapped(delta):
        return []
    current = {(f.get("metadata") or {}).get(FIELD_ID): f["type"] for f in json.loads(delta.schema().to_json())["fields"]}
    target = json.loads(delta_schema(schema, narrow).to_json())["fields"]
    return [t["name"] for t, f in zip(target, schema.fields, strict=True) if f.field_id in current and _bare(current[f.field_id]) != _bare(t["type"])]


def _bare(t: Any) -> Any:
    """A Delta type without field metadata (ids and physical names of nested fields)."""
    if isinstance(t, dict):
        return {k: _bare(v) for k, v in t.items() if k != "metadata"}
    if isinstance(t, list):
        return [_bare(v) for v in t]
    return t


def physical_names(delta: DeltaTable) -> dict[int, str]:
    """Field id -> physical name of every field of a column-mapped Delta table (nested struct fields too)."""
    out: dict[int, str] = {}

    def walk(fields: list[dict[str, Any]]) -> None:
        for f in fields:
            md = f.get("metadata") or {}
            if FIELD_ID in md and PHYSICAL_NAME in md:
                out[int(md[FIELD_ID])] = md[PHYSICAL_NAME]
            for child in _struct_children(f["type"]):
                walk(child)

    walk(json.loads(delta.schema().to_json())["fields"])
    return out


def mapped_schema(schema: Schema, physical: Mapping[int, str], narrow: Mapping[int, str] | None = None) -> dict[str, Any]:
    """The Delta schema of an Iceberg schema (type_mapping.delta_schema), each struct field carrying its Iceberg
    field id and its physical name (`physical[field_id]`, else its current name)."""
    rendered = json.loads(delta_schema(schema, narrow).to_json())

    def annotate(delta_fields: list[dict[str, Any]], iceberg_fields: tuple[NestedField, ...]) -> None:
        for d, f in zip(delta_fields, iceberg_fields, strict=True):
            d["metadata"] = {**(d.get("metadata") or {}), FIELD_ID: f.field_id, PHYSICAL_NAME: physical.get(f.field_id, f.name)}
            _annotate_type(d["type"], f.field_type, annotate)

    annotate(rendered["fields"], schema.fields)
    return rendered


def _annotate_type(delta_type: Any, iceberg_type: Any, annotate) -> None:
    if isinstance(iceberg_type, StructType):
        annotate(delta_type["fields"], iceberg_type.fields)
    elif isinstance(iceberg_type, ListType):
        _annotate_type(delta_type["elementType"], iceberg_type.element_type, annotate)
    elif isinstance(iceberg_type, MapType):
        _annotate_type(delta_type["keyType"], iceberg_type.key_type, annotate)
        _annotate_type(delta_type["valueType"], iceberg_type.value_type, annotate)


def _keeping_metadata(rendered: dict[str, Any], delta: DeltaTable) -> dict[str, Any]:
    """`rendered` with each top-level column's other field metadata (char/varchar lengths, comments) kept from Delta."""
    kept = {(f.get("metadata") or {}).get(FIELD_ID): f.get("metadata") or {} for f in json.loads(delta.schema().to_json())["fields"]}
    for f in rendered["fields"]:
        f["metadata"] = {**kept.get(f["metadata"][FIELD_ID], {}), **f["metadata"]}
    return rendered


def _struct_children(t: Any) -> list[list[dict[str, Any]]]:
    if not isinstance(t, dict):
        return []
    if t.get("type") == "struct":
        return [t["fields"]]
    if t.get("type") == "array":
        return _struct_children(t["elementType"])
    if t.get("type") == "map":
        return _struct_children(t["keyType"]) + _struct_children(t["valueType"])
    return []


def commit_schema(
    root_uri: str,
    storage: StorageConfig,
    delta: DeltaTable,
    schema: Schema,
    physical: Mapping[int, str],
    *,
    operation: str,
    commit_info: Mapping[str, str] | None = None,
    configuration: Mapping[str, str] | None = None,
    narrow: Mapping[int, str] | None = None,
) -> int:
    """One Delta version whose metaData declares `schema` with column mapping (name mode), at `delta.version() + 1`.

    Enables column mapping first when the table has not got it (the protocol change through delta-rs, then this
    metaData). `configuration`: table properties to set in the same version. Partition columns keep their field
    ids: a renamed one is listed under its new name. Raises deltalake's CommitFailedError when another writer committed that version first: re-read
    the log (`delta.update_incremental()`) and call again. Returns the version written."""
    from deltalake.table import TableFeatures

    protocol = delta.protocol()
    if "columnMapping" not in (protocol.writer_features or []) and protocol.min_writer_version < 5:
        delta.alter.add_feature(
            TableFeatures.ColumnMapping, allow_protocol_versions_increase=True,
            commit_properties=CommitProperties(custom_metadata={SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE}),
        )
        delta.update_incremental()
    md = delta.metadata()
    before = {f["name"]: (f.get("metadata") or {}).get(FIELD_ID) for f in json.loads(delta.schema().to_json())["fields"]}
    by_id = {f.field_id: f.name for f in schema.fields}
    partition_columns = [by_id.get(before.get(c) or _id_of(schema, c), c) for c in md.partition_columns]
    settings = {**(md.configuration or {}), **(configuration or {})}
    ids = list(_field_ids(schema))
    settings[MODE] = "name"
    settings[MAX_COLUMN_ID] = str(max([int(settings.get(MAX_COLUMN_ID, 0)), *ids]))
    version = delta.version() + 1
    metadata_action = {
        "id": md.id,
        "name": md.name,
        "description": md.description,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(_keeping_metadata(mapped_schema(schema, physical, narrow), delta), separators=(",", ":")),
        "partitionColumns": partition_columns,
        "configuration": settings,
        "createdTime": md.created_time,
    }
    # `lakehouse.operation` marks the version as the mirror's own (formats/delta/foreign_versions.py counts untagged versions as another engine's).
    info = {"timestamp": int(time.time() * 1000), "operation": operation, "operationParameters": {}, "clientVersion": CLIENT,
            SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, **(commit_info or {})}
    actions: list[dict] = [{"commitInfo": info}, {"metaData": metadata_action}]
    protocol = delta.protocol()
    writer_features = list(protocol.writer_features or [])
    if _feed_on(settings) and protocol.min_writer_version >= 7 and CHANGE_DATA_FEED_FEATURE not in writer_features:
        # delta-rs drops the change data feed's (legacy, writer version 4) feature when it moves the table to writer version 7.
        actions.insert(1, {"protocol": {"minReaderVersion": protocol.min_reader_version, "minWriterVersion": protocol.min_writer_version,
                                        "readerFeatures": list(protocol.reader_features or []), "writerFeatures": [*writer_features, CHANGE_DATA_FEED_FEATURE]}})
    body = "\n".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) for a in actions) + "\n"
    put_if_absent(root_uri, storage, f"_delta_log/{version:020d}.json", body.encode())
    return version


def commit_configuration(
    root_uri: str, storage: StorageConfig, delta: DeltaTable, configuration: Mapping[str, str], commit_info: Mapping[str, str], schema_string: str | None = None
) -> int:
    """One Delta version whose metaData sets the table properties `configuration`, schema and protocol left as they are
    (`schema_string`: the schema instead, e.g. a column made NOT NULL, which delta-rs has no operation for).

    For a table with table features (writer version 7), whose protocol delta-rs's SET TBLPROPERTIES rewrites: it adds
    `appendOnly`, `invariants` and, at reader version 3, `variantType`, and raises reader version 1 to 2, whatever the
    table holds. Raises deltalake's CommitFailedError when another writer committed that version first."""
    md = delta.metadata()
    version = delta.version() + 1
    metadata_action = {
        "id": md.id, "name": md.name, "description": md.description, "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string or delta.schema().to_json(), "partitionColumns": list(md.partition_columns),
        "configuration": {**(md.configuration or {}), **configuration}, "createdTime": md.created_time,
    }  # fmt: skip
    info = {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES", "operationParameters": {}, "clientVersion": CLIENT,
            SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, **commit_info}
    body = "\n".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) for a in ({"commitInfo": info}, {"metaData": metadata_action})) + "\n"
    put_if_absent(root_uri, storage, f"_delta_log/{version:020d}.json", body.encode())
    return version


# What delta-rs itself declares when it adds the feature to a table (`alter.add_feature(ColumnMapping)`).
PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["columnMapping"], "writerFeatures": ["columnMapping"]}


CHANGE_DATA_FEED_FEATURE = "changeDataFeed"


def _feed_on(settings: Mapping[str, str]) -> bool:
    return str(settings.get("delta.enableChangeDataFeed", "false")).lower() == "true"


def create_table(
    root_uri: str,
    storage: StorageConfig,
    *,
    name: str,
    schema: Schema,
    physical: Mapping[int, str],
    partition_columns: list[str],
    configuration: Mapping[str, str],
) -> None:
    """Version 0 of a new column-mapped Delta table: its protocol and metaData in one commit, as delta-rs writes
    version 0 of any other table (delta-rs cannot create a mapped table). Created put-if-absent: a concurrent
    creator makes it raise deltalake's CommitFailedError, and the caller loads that table instead."""
    now = int(time.time() * 1000)
    settings = {**configuration, MODE: "name", MAX_COLUMN_ID: str(max(_field_ids(schema), default=0))}
    metadata_action = {
        "id": str(uuid.uuid4()),
        "name": name,
        "description": None,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(mapped_schema(schema, physical), separators=(",", ":")),
        "partitionColumns": list(partition_columns),
        "configuration": settings,
        "createdTime": now,
    }
    info = {"timestamp": now, "operation": "CREATE TABLE", "operationParameters": {"mode": "ErrorIfExists"}, "clientVersion": CLIENT}
    protocol = {**PROTOCOL, "writerFeatures": [*PROTOCOL["writerFeatures"], *([CHANGE_DATA_FEED_FEATURE] if _feed_on(settings) else [])]}
    actions = ({"commitInfo": info}, {"protocol": protocol}, {"metaData": metadata_action})
    body = "\n".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) for a in actions) + "\n"
    put_if_absent(root_uri, storage, f"_delta_log/{0:020d}.json", body.encode())


def _id_of(schema: Schema, name: str) -> int | None:
    try:
        return schema.find_field(name).field_id
    except ValueError:
        return None


def _field_ids(schema: Schema):
    for f in schema.fields:
        yield from _ids(f)


def _ids(f: NestedField):
    yield f.field_id
    t = f.field_type
    if isinstance(t, StructType):
        for child in t.fields:
            yield from _ids(child)
    elif isinstance(t, ListType):
        yield from _ids(t.element_field)
    elif isinstance(t, MapType):
        yield from _ids(t.key_field)
        yield from _ids(t.value_field)


def put_if_absent(root_uri: str, storage: StorageConfig, path: str, data: bytes) -> None:
    """Create `path` under the table root only if nothing is there (local file systems, S3, GCS and Azure alike)."""
    config, client_options = _obstore_options(storage.delta_options(root_uri))
    store = from_url(root_uri, config=config, client_options=client_options)
    try:
        obstore.put(store, path, data, mode="create")
    except (AlreadyExistsError, PreconditionError) as e:
        raise CommitFailedError(f"Delta version file {path} was written by another writer first") from e


def _obstore_options(delta_options: Mapping[str, str] | None) -> tuple[dict[str, str], dict[str, Any]]:
    """delta-rs storage options are object_store's keys, which obstore reads too: the store's own (`aws_...`,
    `azure_...`, `google_...`) as its configuration, `allow_http` (delta-rs also takes `AWS_ALLOW_HTTP`) as a
    client option."""
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    for key, value in (delta_options or {}).items():
        key = key.lower()
        if key in ("allow_http", "aws_allow_http"):
            client["allow_http"] = str(value).lower() == "true"
        else:
            config[key] = value
    return config, client

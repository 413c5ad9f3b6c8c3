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
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties
from pyiceberg.schema import Schema
from pyiceberg.types import ListType, MapType, NestedField, StructType

from .properties import Operation, SummaryKeys
from .storage import StorageConfig
from .type_mapping import delta_schema

MODE = "delta.columnMapping.mode"
MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
FIELD_ID = "delta.columnMapping.id"
PHYSICAL_NAME = "delta.columnMapping.physicalName"
CLIENT = "lakehouse-assets"


def is_mapped(delta: DeltaTable) -> bool:
    return (delta.metadata().configuration or {}).get(MODE) == "name"


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


def mapped_schema(schema: Schema, physical: Mapping[int, str]) -> dict[str, Any]:
    """The Delta schema of an Iceberg schema (type_mapping.delta_schema), each struct field carrying its Iceberg
    field id and its physical name (`physical[field_id]`, else its current name)."""
    rendered = json.loads(delta_schema(schema).to_json())

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
) -> int:
    """One Delta version whose metaData declares `schema` with column mapping (name mode), at `delta.version() + 1`.

    Enables column mapping first when the table has not got it (the protocol change through delta-rs, then this
    metaData). Raises deltalake's CommitFailedError when another writer committed that version first: re-read
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
    configuration = dict(md.configuration or {})
    ids = list(_field_ids(schema))
    configuration[MODE] = "name"
    configuration[MAX_COLUMN_ID] = str(max([int(configuration.get(MAX_COLUMN_ID, 0)), *ids]))
    version = delta.version() + 1
    metadata_action = {
        "id": md.id,
        "name": md.name,
        "description": md.description,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(mapped_schema(schema, physical), separators=(",", ":")),
        "partitionColumns": list(md.partition_columns),
        "configuration": configuration,
        "createdTime": md.created_time,
    }
    # `lakehouse.operation` marks the version as the mirror's own (foreign_delta.py counts untagged versions as another engine's).
    info = {"timestamp": int(time.time() * 1000), "operation": operation, "operationParameters": {}, "clientVersion": CLIENT,
            SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, **(commit_info or {})}
    body = "\n".join(json.dumps(a, separators=(",", ":"), ensure_ascii=False) for a in ({"commitInfo": info}, {"metaData": metadata_action})) + "\n"
    _put_if_absent(root_uri, storage, f"_delta_log/{version:020d}.json", body.encode())
    return version


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


def _put_if_absent(root_uri: str, storage: StorageConfig, path: str, data: bytes) -> None:
    """Create `path` under the table root only if nothing is there (local file systems, S3, GCS and Azure alike)."""
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError
    from obstore.store import from_url

    config, client_options = _obstore_options(storage.delta_options(root_uri))
    store = from_url(root_uri, config=config, client_options=client_options)
    try:
        obstore.put(store, path, data, mode="create")
    except (AlreadyExistsError, PreconditionError) as e:
        raise CommitFailedError(f"Delta version file {path} was written by another writer first: {e}") from None


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

"""Tables in the catalog: where a new table lives, how it is created, and the schema change a write needs.

A table is created on its first write with the project's defaults (`properties.TableProperties`):
Iceberg metadata under `_iceberg/`, zstd, the formats it is mirrored to. Its partition spec is fixed
then; later writes may evolve its schema (`evolution.py`), committed together with their data.
"""

from __future__ import annotations

import logging
import re

import pyarrow.fs as pafs
from deltalake import DeltaTable
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.schema import INITIAL_SCHEMA_ID, Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BinaryType

from ..errors import LocationInUse, SpecError
from ..formats import file_columns
from ..io.storage import StorageConfig, delete_files, join_uri
from ..properties import METADATA_FOLDER, TableProperties
from ..schema.spec import ALL_FORMATS, TableSpec, build_partition_spec, spec_terms
from .catalog import ensure_namespace
from .evolution import SchemaPlan, plan_schema_change

log = logging.getLogger("lakehouse")


def table_location(warehouse: str, identifier: str) -> str:
    spec = TableSpec(identifier)
    return join_uri(warehouse, *spec.namespace.split("."), spec.name)


def formats(table: Table) -> list[str]:
    return table.properties.get(TableProperties.FORMATS, ",".join(ALL_FORMATS)).split(",")


def delta_enabled(table: Table) -> bool:
    return "delta" in formats(table)


def create_or_load(
    catalog: Catalog, storage: StorageConfig, warehouse: str, spec: TableSpec, incoming_schema: Schema, loaded: Table | None = None
) -> tuple[Table, SchemaPlan, bool]:
    """The table (created if new), the schema change the data needs (committed with the data), and whether
    this call created the table (a first write that then fails drops it again: `drop_if_never_written`).
    `loaded`: the table as the caller loaded it moments ago (not loaded again)."""
    table = loaded
    try:
        table = table if table is not None else catalog.load_table(spec.identifier)
    except NoSuchTableError:
        table = None
    except NoSuchNamespaceError:
        table = None
    if table is None:
        partition_spec = build_partition_spec(spec.identifier, incoming_schema, spec.partition_by)
        if "delta" in spec.formats:
            check_delta_partitioning(spec.identifier, incoming_schema, partition_spec)
        location = table_location(warehouse, spec.identifier)
        if (in_use := location_in_use(storage, spec.identifier, location)) is not None:
            try:  # another writer's first write of this table: its Delta log follows its catalog entry
                table = catalog.load_table(spec.identifier)
            except (NoSuchTableError, NoSuchNamespaceError):
                raise in_use from None
            return create_or_load(catalog, storage, warehouse, spec, incoming_schema, table)
        ensure_namespace(catalog, spec.namespace)
        properties = {
            **TableProperties.DEFAULTS,
            TableProperties.METADATA_PATH: join_uri(location, METADATA_FOLDER),
            TableProperties.TARGET_FILE_SIZE: str(spec.target_file_size),
            TableProperties.FORMATS: ",".join(spec.formats),
            **spec.properties,
        }
        if file_columns.enabled(properties):
            properties[file_columns.SCHEMA_ID_PROPERTY] = str(INITIAL_SCHEMA_ID)  # the new table's columns keep their names in the files
        try:
            table = catalog.create_table(
                spec.identifier, schema=incoming_schema, location=location, partition_spec=partition_spec, properties=properties
            )
            return table, SchemaPlan([], [], []), True
        except TableAlreadyExistsError:
            table = catalog.load_table(spec.identifier)
    existing_terms = spec_terms(table.spec(), table.schema())
    if spec.partition_by and [t.replace(" ", "") for t in spec.partition_by] != [t.replace(" ", "") for t in existing_terms]:
        raise SpecError(
            f"Table {spec.identifier} is partitioned by {existing_terms}, not {list(spec.partition_by)}. "
            "Partition evolution is not supported: keep the existing partition_by or write a new table."
        )
    plan = plan_schema_change(
        spec.identifier, table.schema(), incoming_schema, spec.schema_evolution and table.properties.get(TableProperties.SCHEMA_EVOLUTION, "true") != "false"
    )
    if not plan.empty:
        log.info("Table %s: evolving schema: %s", spec.identifier, plan.describe())
    return table, plan, False


def location_in_use(storage: StorageConfig, identifier: str, location: str) -> LocationInUse | None:
    """Why a new table cannot be created at `location`, or None. A Delta log already there belongs to another table:
    this one's mirror would take its versions for its own (the log's last mirrored snapshot is not this table's)
    and Delta readers of the folder would go on reading the old rows. Iceberg metadata left there is harmless: each
    file has a name of its own, and the catalog points at one."""
    options = storage.delta_options(location)
    if not DeltaTable.is_deltatable(location, options):
        return None
    version = DeltaTable(location, storage_options=options).version()
    newest = None
    for folder in (METADATA_FOLDER, "metadata"):  # this project's tables; an Iceberg table imported in place
        fs, metadata_path = storage.filesystem(join_uri(location, folder))
        if (found := newest_metadata_json(fs.get_file_info(pafs.FileSelector(metadata_path, allow_not_found=True)))) is not None:
            newest = join_uri(location, folder, found.base_name)
            break
    if newest is not None:  # this project's table, dropped from the catalog with its files kept
        back = f"To bring that table back with its history, register its newest Iceberg metadata: `lh.catalog.register_table({identifier!r}, {newest!r})`. "
    else:
        back = f"To manage that Delta table, import it: `lakehouse import {identifier} {location}`. "
    return LocationInUse(
        f"Table {identifier} does not exist in the catalog, but its location {location} holds a Delta table (version {version}): "
        "a table of that name was dropped from the catalog with its files kept, renamed (then write under its new name), "
        f"or another tool wrote there. Nothing was written, and those files were left as they were. {back}"
        "To start afresh instead, delete the folder, or write the data under another table name.",
        location,
        newest,
    )


def newest_metadata_json(files: list[pafs.FileInfo]) -> pafs.FileInfo | None:
    """The Iceberg metadata JSON of the highest version among a folder's files (then the latest written), or None."""
    found = [i for i in files if i.is_file and i.base_name.endswith(".metadata.json")]
    return max(found, key=lambda i: (_metadata_version(i.base_name), i.mtime_ns or 0)) if found else None


def _metadata_version(name: str) -> int:
    """The version of `00012-<uuid>.metadata.json` (catalogs) or `v12.metadata.json` (Hadoop tables); -1 otherwise."""
    found = re.match(r"(?:v(\d+)\.|(\d+)-)", name)
    return int(found.group(1) or found.group(2)) if found else -1


def drop_if_never_written(catalog: Catalog, storage: StorageConfig, table: Table) -> None:
    """A failed first write leaves no table behind: drop it, unless another writer committed to it meanwhile."""
    name = ".".join(table.name())
    try:
        table = catalog.load_table(name)
        if table.current_snapshot() is None:
            catalog.drop_table(name)
            delete_files(storage, [table.metadata_location])  # its only file: the first metadata JSON
    except Exception as e:  # noqa: BLE001 - never hide the write's own error
        log.warning("Table %s: could not drop the table its failed first write created: %s", name, e)


def check_delta_partitioning(identifier: str, schema, partition_spec) -> None:
    for pf in partition_spec.fields:
        source = schema.find_field(pf.source_id)
        if isinstance(pf.transform, IdentityTransform) and isinstance(source.field_type, BinaryType):
            raise SpecError(
                f"Table {identifier}: identity partition on binary column {source.name!r} has no Delta representation. "
                f"Use bucket(n, {source.name}) or truncate(w, {source.name})."
            )

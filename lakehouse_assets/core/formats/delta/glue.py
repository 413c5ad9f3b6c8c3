"""The Delta side registered in AWS Glue, next to the Iceberg table, for Athena, EMR and Redshift Spectrum.

Those engines find a Delta table through a Glue table whose parameters say `table_type=DELTA` and whose
location is the table root (Athena then reads the schema and the files from the Delta log). delta-rs
cannot register one, so the mirror does: after every Delta sync (`transaction.sync_delta`) the Glue entry
is created, or updated when the table's columns or location changed (a first write, schema evolution,
`alter` renames and drops). Per process, an entry already brought to a table's current schema is not
asked again, so steady writes make no Glue call.

Iceberg stays first: a Glue failure never fails the write. It is a warning on the write, `verify` lists
the entry as out of sync, and `repair` registers it again. An entry is updated only when it is ours
(parameter `lakehouse.iceberg-table` names the table): a Glue table of the same name that belongs to
something else (the Iceberg table itself, say) is never overwritten.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, fields
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.schema import visit
from pyiceberg.table import Table

from ...errors import CatalogError
from ...properties import TableProperties

log = logging.getLogger("lakehouse")

OWNER_PARAMETER = "lakehouse.iceberg-table"  # which Iceberg table this Glue entry is the Delta side of
NO_REGISTRATION = "none"
ENV_VARIABLE = "LAKEHOUSE_DELTA_GLUE"  # the registration as JSON, for processes configured by environment (the CLI)
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"


@dataclass(frozen=True)
class GlueDeltaRegistration:
    """Where and how the Delta side of each table is registered in Glue.

    `database`: the Glue database (default: the table's namespace, dots as underscores). `name_suffix`:
    appended to the table's name (`events` -> `events_delta`). `region`, `endpoint_url`, `catalog_id`,
    `profile_name`: the Glue client; left empty, the Iceberg catalog's own Glue client is used when the
    Iceberg catalog is Glue, else boto3's defaults (AWS_REGION, AWS_ENDPOINT_URL_GLUE, credentials chain).
    A table property `lakehouse.delta.glue-name` ("<database>.<name>", "<name>" or "none") overrides the
    name per table, and registers that table even when the lakehouse has no registration configured.
    """

    database: str | None = None
    name_suffix: str = "_delta"
    region: str | None = None
    endpoint_url: str | None = None
    catalog_id: str | None = None
    profile_name: str | None = None

    @classmethod
    def of(cls, value: "GlueDeltaRegistration | dict | None") -> "GlueDeltaRegistration | None":
        """From the settings a resource holds (a dict of the fields above); with none, from `LAKEHOUSE_DELTA_GLUE`
        (the same dict as JSON, e.g. `{"name_suffix": "_delta"}`), which is how the CLI and every process get it."""
        if value is None and (env := os.environ.get(ENV_VARIABLE, "").strip()):
            try:
                value = json.loads(env)
                return cls(**value)
            except (ValueError, TypeError) as e:
                raise CatalogError(
                    f"{ENV_VARIABLE}={env!r} is not a Glue registration ({e}): give a JSON object of the fields "
                    f"{', '.join(f.name for f in fields(cls))}, e.g. {{\"name_suffix\": \"_delta\"}}."
                ) from e
        return value if value is None or isinstance(value, cls) else cls(**value)

    def client(self, catalog: Catalog | None):
        own = not (self.region or self.endpoint_url or self.profile_name)
        if own and catalog is not None and type(catalog).__name__ == "GlueCatalog":
            return catalog.glue  # the client (region, endpoint, credentials) the Iceberg side is registered with
        with _clients_lock:  # a boto3 client takes tens of milliseconds to make: one per registration and process
            if self not in _clients:
                import boto3

                # AWS_REGION too, as delta-rs and pyarrow read it (boto3 itself reads AWS_DEFAULT_REGION only).
                session = boto3.Session(profile_name=self.profile_name, region_name=self.region or os.environ.get("AWS_REGION"))
                _clients[self] = session.client("glue", endpoint_url=self.endpoint_url)
            return _clients[self]


_clients: dict[GlueDeltaRegistration, Any] = {}
_clients_lock = threading.Lock()


@dataclass(frozen=True)
class GlueEntry:
    """One table's Delta registration: the Glue table it is kept as, and the client to reach it."""

    registration: GlueDeltaRegistration
    catalog: Catalog | None  # the Iceberg catalog: its Glue client is reused when it is Glue
    database: str
    name: str
    identifier: str  # the Iceberg table's

    @property
    def client(self):
        return self.registration.client(self.catalog)

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"

    def _ids(self) -> dict[str, str]:
        return {"CatalogId": self.registration.catalog_id} if self.registration.catalog_id else {}


def entry_for(table: Table, configured: GlueDeltaRegistration | None, catalog: Catalog | None) -> GlueEntry | None:
    """The Glue entry `table`'s Delta side is kept as, or None when it is not registered."""
    names = table.name()
    wanted = table.properties.get(TableProperties.DELTA_GLUE_NAME, "").strip()
    if wanted.lower() == NO_REGISTRATION or (configured is None and not wanted):
        return None
    registration = configured or GlueDeltaRegistration()
    database = registration.database or "_".join(names[:-1])
    name = names[-1] + registration.name_suffix
    if wanted:
        database, _, name = wanted.rpartition(".") if "." in wanted else (database, "", wanted)
    return GlueEntry(registration, catalog, database, name, ".".join(names))


def table_input(entry: GlueEntry, table: Table, root_uri: str) -> dict[str, Any]:
    """What Athena, EMR and Spectrum read: a Delta table at the table root, with the current columns."""
    location = root_uri.rstrip("/")
    from pyiceberg.catalog.glue import _IcebergSchemaToGlueType  # pyiceberg's own Iceberg-to-Glue types (imports boto3: here, not at import)

    columns = [{"Name": f.name, "Type": visit(f.field_type, _IcebergSchemaToGlueType())} for f in table.schema().fields]
    return {
        "Name": entry.name,
        "Description": f"Delta Lake side of the Iceberg table {entry.identifier} (same files, kept in sync by lakehouse_assets)",
        "TableType": "EXTERNAL_TABLE",
        "Parameters": {"table_type": "DELTA", "EXTERNAL": "TRUE", "spark.sql.sources.provider": "delta", OWNER_PARAMETER: entry.identifier},
        "StorageDescriptor": {
            "Columns": columns,
            "Location": location,
            "InputFormat": PARQUET_INPUT,
            "OutputFormat": PARQUET_OUTPUT,
            "SerdeInfo": {"SerializationLibrary": PARQUET_SERDE, "Parameters": {"path": location}},
        },
    }


def differences(entry: GlueEntry, table: Table, root_uri: str) -> list[str]:
    """How the Glue entry differs from the table (empty when in sync); what `verify` reports."""
    try:
        current = _get(entry)
    except Exception as e:  # noqa: BLE001 - unreachable or denied: that is the difference
        return [f"Glue entry {entry.qualified} cannot be read ({type(e).__name__}: {e}): `lakehouse repair {entry.identifier}` registers it again"]
    if current is None:
        return [f"Glue entry {entry.qualified} for the Delta side is missing: `lakehouse repair {entry.identifier}` registers it"]
    if (owner := _owner_problem(entry, current)) is not None:
        return [owner]
    wanted = table_input(entry, table, root_uri)
    out = []
    if _columns(current) != _columns(wanted):
        out.append(f"Glue entry {entry.qualified} has columns {_columns(current)}, the table {_columns(wanted)}: `lakehouse repair {entry.identifier}` updates it")
    if current.get("StorageDescriptor", {}).get("Location") != wanted["StorageDescriptor"]["Location"]:
        out.append(f"Glue entry {entry.qualified} points at {current.get('StorageDescriptor', {}).get('Location')}, not the table root {wanted['StorageDescriptor']['Location']}")
    if current.get("Parameters", {}).get("table_type", "").upper() != "DELTA":
        out.append(f"Glue entry {entry.qualified} is not of table_type DELTA: `lakehouse repair {entry.identifier}` updates it")
    return out


_synced: dict[tuple, str] = {}  # (registration, catalog, database, name) -> the table input Glue holds, per process
_synced_lock = threading.Lock()


def _memo_key(entry: GlueEntry) -> tuple:
    return (entry.registration, id(entry.catalog), entry.database, entry.name)


def forget(entry: GlueEntry) -> None:
    """The next `keep_in_sync` asks Glue again (repair: the entry may have been deleted or edited since)."""
    with _synced_lock:
        _synced.pop(_memo_key(entry), None)


def keep_in_sync(entry: GlueEntry, table: Table, root_uri: str) -> str:
    """Create or update the Glue entry; returns what was done ("created", "updated", "unchanged").
    Raises when Glue refuses or the name belongs to another table (the caller warns; the write stands)."""
    wanted = table_input(entry, table, root_uri)
    key, fingerprint = _memo_key(entry), repr(wanted)
    if _synced.get(key) == fingerprint:
        return "unchanged"
    current = _get(entry)
    if current is None:
        _create(entry, wanted)
        action = "created"
    elif (owner := _owner_problem(entry, current)) is not None:
        raise ValueError(owner)
    elif _same(current, wanted):
        action = "unchanged"
    else:
        # Parameters others added (descriptions, tags of a data catalog tool) are kept; ours win.
        wanted = {**wanted, "Parameters": {**current.get("Parameters", {}), **wanted["Parameters"]}}
        entry.client.update_table(DatabaseName=entry.database, TableInput=wanted, **entry._ids())
        action = "updated"
    with _synced_lock:
        _synced[key] = fingerprint
    if action != "unchanged":
        log.info("Table %s: Glue entry %s of its Delta side %s", entry.identifier, entry.qualified, action)
    return action


def remove(entry: GlueEntry) -> str:
    """Delete the Glue entry of a dropped or renamed table's Delta side when it is this table's; returns what was done
    ("removed", "absent", or "kept": the name belongs to another table, whose entry is never touched)."""
    current = _get(entry)
    if current is None:
        return "absent"
    if (owner := _owner_problem(entry, current)) is not None:
        log.warning("Table %s: its Glue entry %s was kept: %s", entry.identifier, entry.qualified, owner)
        return "kept"
    entry.client.delete_table(DatabaseName=entry.database, Name=entry.name, **entry._ids())
    forget(entry)
    log.info("Table %s: Glue entry %s of its Delta side removed", entry.identifier, entry.qualified)
    return "removed"


def sync_warning(entry: GlueEntry, error: Exception) -> str:
    return (
        f"Table {entry.identifier}: the write committed to both formats, but its Delta side could not be registered in Glue as "
        f"{entry.qualified} ({type(error).__name__}: {error}). Athena/EMR see the previous entry until `lakehouse repair "
        f"{entry.identifier}` (or the next write) registers it; check the IAM permissions glue:GetTable, glue:CreateTable, "
        "glue:UpdateTable, glue:GetDatabase and glue:CreateDatabase."
    )


def _get(entry: GlueEntry) -> dict | None:
    try:
        return entry.client.get_table(DatabaseName=entry.database, Name=entry.name, **entry._ids())["Table"]
    except entry.client.exceptions.EntityNotFoundException:
        return None


def _create(entry: GlueEntry, wanted: dict) -> None:
    try:
        entry.client.create_table(DatabaseName=entry.database, TableInput=wanted, **entry._ids())
    except entry.client.exceptions.EntityNotFoundException:  # no such database yet: create it, as writes do for Iceberg
        try:
            entry.client.create_database(DatabaseInput={"Name": entry.database}, **entry._ids())
        except entry.client.exceptions.AlreadyExistsException:
            pass
        entry.client.create_table(DatabaseName=entry.database, TableInput=wanted, **entry._ids())
    except entry.client.exceptions.AlreadyExistsException:  # another writer registered it meanwhile: bring it up to date
        current = _get(entry)
        if current is not None and (owner := _owner_problem(entry, current)) is not None:
            raise ValueError(owner) from None
        if current is not None and not _same(current, wanted):
            entry.client.update_table(DatabaseName=entry.database, TableInput=wanted, **entry._ids())


def _owner_problem(entry: GlueEntry, current: dict) -> str | None:
    owner = current.get("Parameters", {}).get(OWNER_PARAMETER)
    if owner == entry.identifier:
        return None
    kind = current.get("Parameters", {}).get("table_type", "none")
    what = f"the Delta side of {owner}" if owner else f"a table of table_type {kind} that this project did not register"
    return (
        f"Glue table {entry.qualified} exists and is {what}, not the Delta side of {entry.identifier}: it is left unchanged. "
        f"Choose another name (table property {TableProperties.DELTA_GLUE_NAME}, or the registration's name_suffix / database)."
    )


def _columns(glue_table: dict) -> list[tuple[str, str]]:
    return [(c["Name"], c["Type"]) for c in glue_table.get("StorageDescriptor", {}).get("Columns", [])]


def _same(current: dict, wanted: dict) -> bool:
    sd, want_sd = current.get("StorageDescriptor", {}), wanted["StorageDescriptor"]
    params = current.get("Parameters", {})
    return (
        _columns(current) == _columns(wanted)
        and sd.get("Location") == want_sd["Location"]
        and all(params.get(k) == v for k, v in wanted["Parameters"].items())
        and sd.get("SerdeInfo", {}).get("Parameters", {}).get("path") == want_sd["Location"]
    )

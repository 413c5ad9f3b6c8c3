"""Which Iceberg catalog a warehouse uses.

The catalog is picked by name (`LAKEHOUSE_CATALOG`, default `lakehouse`) and configured through
pyiceberg's own configuration (`.pyiceberg.yaml` or `PYICEBERG_CATALOG__<NAME>__...`), or through
explicit properties. With no configuration at all, an embedded SQLite catalog lives inside the
warehouse folder (`<warehouse>/catalog.db`).
"""

from __future__ import annotations

import os
import random
import threading
import time
from contextlib import contextmanager
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.utils.config import Config
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ..errors import CatalogError
from ..formats.iceberg.metadata import MetadataByLocation, staged_metadata
from ..io.storage import StorageConfig

DEFAULT_CATALOG_NAME = "lakehouse"


def catalog_name(name: str | None = None) -> str:
    return name or os.environ.get("LAKEHOUSE_CATALOG") or DEFAULT_CATALOG_NAME


def configured_properties(name: str) -> dict:
    """pyiceberg's configuration for `name` (read fresh, so environment changes are seen)."""
    return dict(Config().get_catalog_config(name) or {})


def open_catalog(warehouse_uri: str, storage: StorageConfig, name: str | None = None, properties: dict | None = None) -> Catalog:
    name = catalog_name(name)
    props = {**configured_properties(name), **(properties or {})}
    if props:
        merged = {**storage.iceberg_properties(), "warehouse": warehouse_uri, **props}
        try:
            if _is_sql(merged):
                return LakehouseSqlCatalog(name, **merged)
            return load_catalog(name, **merged)
        except Exception as e:  # the catalog server or database is unreachable or misconfigured
            raise CatalogError(
                f"Cannot open Iceberg catalog {name!r} ({props.get('type') or props.get('uri') or 'configured'}): {e}. "
                "Check its URI, credentials and region in .pyiceberg.yaml or PYICEBERG_CATALOG__"
                f"{name.upper()}__* variables."
            ) from e
    parsed = urlparse(warehouse_uri)
    if parsed.scheme != "file":
        raise CatalogError(
            f"Warehouse {warehouse_uri} is on object storage but no catalog named {name!r} is configured. The embedded "
            "SQLite catalog only works with a local warehouse: configure a REST, Glue or SQL (PostgreSQL) catalog, "
            f"e.g. PYICEBERG_CATALOG__{name.upper()}__TYPE=rest and PYICEBERG_CATALOG__{name.upper()}__URI=http://..."
        )
    os.makedirs(parsed.path, exist_ok=True)
    return LakehouseSqlCatalog(name, uri=f"sqlite:///{parsed.path}/catalog.db", warehouse=warehouse_uri, **storage.iceberg_properties())


def _is_sql(props: dict) -> bool:
    """A SQL catalog (SQLite, PostgreSQL), by its `type` or, as pyiceberg infers it, by its URI."""
    if props.get("py-catalog-impl"):
        return False
    if kind := props.get("type"):
        return str(kind).lower() == "sql"
    uri = props.get("uri")
    return isinstance(uri, str) and uri.startswith(("sqlite", "postgresql"))


class LakehouseSqlCatalog(SqlCatalog):
    """pyiceberg's SQL catalog, without per-commit work that grows with the table's history.

    pyiceberg parses the current metadata JSON on every `load_table`, and `commit_table` loads the table
    again, then deep-copies the metadata with the commit's updates applied: a write parsed the JSON twice
    and copied every snapshot once. Here each metadata file is parsed once per process (the location is
    still read from the catalog on every load, so another engine's commit is seen; a metadata file never
    changes: `iceberg_metadata.MetadataByLocation`), the metadata a commit produced is remembered under
    its new location, and the commit applies its updates without the deep copy. The conditional update of
    the catalog row (compare-and-swap on the previous location) is pyiceberg's own, unchanged.

    pyiceberg's `commit_table` reads the row once more before it writes, to check the commit's requirements and to
    swap on the location it read. A committer that has just read the table holding the commit lock hands that table
    over for this read (`fresh_for_commit`): one query fewer while the writers behind it wait.
    """

    def __init__(self, name: str, **properties: str):
        super().__init__(name, **properties)
        self.metadata_cache = MetadataByLocation()
        self._commit = threading.local()  # this thread's handed-over table and the metadata file its commit stages

    @contextmanager
    def fresh_for_commit(self, table: Table):
        """Within: a commit of `table` (the same object) checks its requirements against `table` instead of reading the
        row again. Only for a table read just before, committing a snapshot of main: its requirement on main's snapshot
        then holds exactly when no one has committed since the table was read, and if someone has, the row's swap on the
        location fails (CommitFailedException, a lost race; the metadata file written for it is removed). Anything else
        committed through the catalog meanwhile (a property change, a schema update) is re-based by pyiceberg on the
        row as it is, as always."""
        self._commit.fresh = table
        try:
            yield
        finally:
            self._commit.fresh = None

    def create_tables(self) -> None:
        """Create the catalog's tables, safe when several processes open a brand-new catalog at once.

        pyiceberg checks for each table, then creates it: two processes can both see it missing, and the
        slower one fails (SQLite: "table iceberg_tables already exists"; PostgreSQL: a duplicate table or
        a unique violation on its system catalog). Whatever fails, the catalog is ready once both tables
        exist, whoever created them; only a failure that leaves them missing is retried, then raised.
        """
        from pyiceberg.catalog.sql import SqlCatalogBaseTable

        deadline = time.monotonic() + 30.0
        while True:
            try:
                SqlCatalogBaseTable.metadata.create_all(self.engine)
                return
            except DBAPIError:
                if self._catalog_tables_exist():
                    return
                if time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.05, 0.2))  # another process is creating them: look again

    def _catalog_tables_exist(self) -> bool:
        from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables

        with Session(self.engine) as session:
            try:
                for orm in (IcebergTables, IcebergNamespaceProperties):
                    session.execute(select(1).select_from(orm).limit(1))
                return True
            except DBAPIError:
                session.rollback()
                return False

    def _convert_orm_to_iceberg(self, orm_table) -> Table:
        location = orm_table.metadata_location
        identifier = Catalog.identifier_to_tuple(orm_table.table_namespace or "") + (orm_table.table_name,)
        metadata = self.metadata_cache.get(identifier, location) if location and orm_table.table_name else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)  # parses the JSON, and raises on a broken row
            self.metadata_cache.put(table.name(), table.metadata_location, table.metadata)
            return table
        return Table(identifier=identifier, metadata=metadata, metadata_location=location, io=self._load_file_io(metadata.properties, location), catalog=self)

    def _update_and_stage_table(self, current_table, table_identifier, requirements, updates) -> StagedTable:
        if current_table is None:
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)  # a new table: validated whole
        # pyiceberg's own steps, with `staged_metadata` in place of update_table_metadata's deep copy.
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = staged_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(version)
        self._commit.staged = location  # the metadata file commit_table writes next, before it swaps the row
        return StagedTable(
            identifier=table_identifier, metadata=metadata, metadata_location=location, io=self._load_file_io(properties=metadata.properties, location=location), catalog=self
        )

    def load_table(self, identifier) -> Table:
        standing_in = getattr(self._commit, "standing_in", None)
        if standing_in is not None and standing_in.name() == Catalog.identifier_to_tuple(identifier):
            return standing_in  # (commit_table's own read of the row, see fresh_for_commit)
        return super().load_table(identifier)

    def commit_table(self, table: Table, requirements, updates) -> CommitTableResponse:
        from pyiceberg.exceptions import CommitFailedException

        handed_over = table is getattr(self._commit, "fresh", None)
        self._commit.standing_in, self._commit.staged = (table if handed_over else None), None
        try:
            response = super().commit_table(table, requirements, updates)
        except CommitFailedException:
            if handed_over and self._commit.staged:  # the swap failed: the metadata file written for it is named nowhere
                _delete_quietly(table, self._commit.staged)
            raise
        finally:
            self._commit.standing_in = None
        self.metadata_cache.put(table.name(), response.metadata_location, response.metadata)
        return response


def _delete_quietly(table: Table, path: str) -> None:
    try:
        table.io.delete(path)
    except Exception:  # noqa: BLE001 - the lost race is what the caller must see; an unnamed metadata file harms no reader
        pass


def _is_glue(catalog: Catalog) -> bool:
    return type(catalog).__name__ == "GlueCatalog"


def _glue_region(catalog: Catalog) -> str:
    return str(catalog.properties.get("glue.region") or catalog.properties.get("client.region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "the default region")


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """Writers create a missing namespace (Glue: database); when the catalog refuses, say what to do."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    try:
        if catalog.namespace_exists(namespace):
            return
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass
    except Exception as e:  # noqa: BLE001 - denied or misconfigured: re-raise with advice
        if _namespace_exists_now(catalog, namespace):
            return  # another writer created it between our check and our create (a duplicate-key error here)
        if _is_glue(catalog):
            raise CatalogError(
                f"Cannot create the Glue database {namespace!r} in {_glue_region(catalog)} ({type(e).__name__}: {e}). Create the "
                "Glue database first (or grant glue:CreateDatabase), and verify the region (glue.region / AWS_REGION)."
            ) from e
        raise CatalogError(
            f"Cannot create namespace {namespace!r} in catalog {catalog.name!r} ({type(e).__name__}: {e}). Create it in the "
            "catalog first, or give the catalog credential permission to create namespaces."
        ) from e


def _namespace_exists_now(catalog: Catalog, namespace: str) -> bool:
    try:
        return catalog.namespace_exists(namespace)
    except Exception:  # noqa: BLE001 - the create's own error is the one to report
        return False


def missing_table_hint(catalog: Catalog, identifier: str) -> str:
    """Why a table is not found: a missing namespace or Glue database (and where we looked)."""
    namespace = identifier.rsplit(".", 1)[0]
    try:
        exists = catalog.namespace_exists(namespace)
    except Exception:  # noqa: BLE001 - the hint is best effort
        return ""
    if exists:
        return ""
    if _is_glue(catalog):
        return (
            f" The Glue database {namespace!r} does not exist in {_glue_region(catalog)}: create the Glue database first "
            "(a write creates it when the credential has glue:CreateDatabase) and verify the region (glue.region / AWS_REGION)."
        )
    return f" Namespace {namespace!r} does not exist in catalog {catalog.name!r}; a write creates it."

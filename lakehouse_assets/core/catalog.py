"""Which Iceberg catalog a warehouse uses.

The catalog is picked by name (`LAKEHOUSE_CATALOG`, default `lakehouse`) and configured through
pyiceberg's own configuration (`.pyiceberg.yaml` or `PYICEBERG_CATALOG__<NAME>__...`), or through
explicit properties. With no configuration at all, an embedded SQLite catalog lives inside the
warehouse folder (`<warehouse>/catalog.db`).
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.utils.config import Config

from .errors import CatalogError
from .storage import StorageConfig

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
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(parsed.path, exist_ok=True)
    return SqlCatalog(name, uri=f"sqlite:///{parsed.path}/catalog.db", warehouse=warehouse_uri, **storage.iceberg_properties())

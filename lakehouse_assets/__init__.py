"""Dagster lakehouse: every table an asset, written once as Parquet, committed to Iceberg and Delta."""

from .core.errors import (
    CatalogError,
    CommitError,
    InputError,
    LakehouseError,
    RetentionError,
    SchemaError,
    SpecError,
    TableNotFound,
    WriteError,
)
from .core.lakehouse import Lakehouse, Window, WriteResult
from .core.storage import StorageConfig

__all__ = [
    "CatalogError",
    "CommitError",
    "InputError",
    "Lakehouse",
    "LakehouseError",
    "RetentionError",
    "SchemaError",
    "SpecError",
    "StorageConfig",
    "TableNotFound",
    "Window",
    "WriteError",
    "WriteResult",
]

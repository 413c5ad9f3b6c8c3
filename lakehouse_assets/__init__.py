"""Dagster lakehouse: every table an asset, written once as Parquet, committed to Iceberg and Delta."""

from .core.errors import (
    CatalogError,
    CommitError,
    DeleteFilesError,
    InputError,
    LakehouseError,
    MirrorRefused,
    RetentionError,
    SchemaError,
    SpecError,
    TableNotFound,
    WriteError,
)
from .core.lakehouse import Lakehouse, Slice, Window, WriteResult
from .core.storage import StorageConfig

__all__ = [
    "CatalogError",
    "CommitError",
    "DeleteFilesError",
    "InputError",
    "Lakehouse",
    "LakehouseError",
    "MirrorRefused",
    "RetentionError",
    "SchemaError",
    "Slice",
    "SpecError",
    "StorageConfig",
    "TableNotFound",
    "Window",
    "WriteError",
    "WriteResult",
]

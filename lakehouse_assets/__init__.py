"""Dagster lakehouse: every table an asset, written once as Parquet, committed to Iceberg and Delta."""

from typing import TYPE_CHECKING

from .core.errors import (
    CatalogError,
    CommitError,
    DeleteFilesError,
    ForeignDeltaCommits,
    ImportRefused,
    InputError,
    LakehouseError,
    MirrorRefused,
    RetentionError,
    SchemaError,
    SpecError,
    TableNotFound,
    WriteError,
)

if TYPE_CHECKING:
    from .core.io.storage import StorageConfig
    from .core.lakehouse import Lakehouse, Slice, Window, WriteResult
    from .core.model import MergeOptions, TableOptions
    from .core.spark.session import spark_session

# Imported on first use: Spark's Python workers import this package to run the write and read functions
# (core/write/writer.py, core/read/reader.py), and importing the whole facade (catalogs, Delta, pandas) costs them ~1 s.
_LAZY = {
    "Lakehouse": ".core.lakehouse",
    "Slice": ".core.lakehouse",
    "Window": ".core.lakehouse",
    "WriteResult": ".core.lakehouse",
    "StorageConfig": ".core.io.storage",
    "MergeOptions": ".core.model",
    "TableOptions": ".core.model",
    "spark_session": ".core.spark.session",
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CatalogError",
    "CommitError",
    "DeleteFilesError",
    "ForeignDeltaCommits",
    "ImportRefused",
    "InputError",
    "Lakehouse",
    "LakehouseError",
    "MergeOptions",
    "MirrorRefused",
    "RetentionError",
    "SchemaError",
    "Slice",
    "SpecError",
    "StorageConfig",
    "TableNotFound",
    "TableOptions",
    "Window",
    "WriteError",
    "WriteResult",
    "spark_session",
]

"""Dagster lakehouse: every table an asset, written once as Parquet, committed to Iceberg and Delta."""

from typing import TYPE_CHECKING

from .core.errors import (
    CatalogError,
    CommitConflict,
    CommitError,
    CommitOutcomeUnknown,
    DeleteFilesError,
    ForeignDeltaCommits,
    ImportRefused,
    InputError,
    LakehouseError,
    LocationInUse,
    MirrorRefused,
    RetentionError,
    SchemaError,
    SpecError,
    TableNotFound,
    WriteError,
)
from .core.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from .core.contracts import Contract, ContractViolation
    from .core.formats.delta.glue import GlueDeltaRegistration
    from .core.io.storage import StorageConfig
    from .core.lakehouse import Lakehouse, Slice, Window, WriteResult
    from .core.maintenance.verify.changes import VerifiedPair
    from .core.model import MergeOptions, TableOptions
    from .core.spark.session import spark_session
    from .dagster.component import LakehouseComponent
    from .dagster.definitions_factory import MaintenancePlan, SensorPlan, lakehouse_definitions
    from .dagster.io_manager import LakehouseIOManager
    from .dagster.resources import LakehouseResource

# Imported on first use: Spark's Python workers import this package to run the write and read functions
# (core/write/writer.py, core/read/reader.py), and importing the whole facade (catalogs, Delta, pandas) costs them ~1 s.
_LAZY = {
    "Lakehouse": ".core.lakehouse",
    "Slice": ".core.lakehouse",
    "Window": ".core.lakehouse",
    "WriteResult": ".core.lakehouse",
    "StorageConfig": ".core.io.storage",
    "GlueDeltaRegistration": ".core.formats.delta.glue",
    "MergeOptions": ".core.model",
    "TableOptions": ".core.model",
    "Contract": ".core.contracts",
    "ContractViolation": ".core.contracts",
    "spark_session": ".core.spark.session",
    "VerifiedPair": ".core.maintenance.verify.changes",
    # The Dagster layer, for a project's code location (docs/dagster-project.md).
    "LakehouseComponent": ".dagster.component",
    "lakehouse_definitions": ".dagster.definitions_factory",
    "MaintenancePlan": ".dagster.definitions_factory",
    "SensorPlan": ".dagster.definitions_factory",
    "LakehouseIOManager": ".dagster.io_manager",
    "LakehouseResource": ".dagster.resources",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    # `dg list components` finds LakehouseComponent by listing this package (entry point in pyproject.toml).
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CatalogError",
    "CommitConflict",
    "CommitError",
    "CommitOutcomeUnknown",
    "Contract",
    "ContractViolation",
    "DeleteFilesError",
    "ForeignDeltaCommits",
    "GlueDeltaRegistration",
    "ImportRefused",
    "InputError",
    "Lakehouse",
    "LakehouseComponent",
    "LakehouseError",
    "LocationInUse",
    "LakehouseIOManager",
    "LakehouseResource",
    "MaintenancePlan",
    "MergeOptions",
    "MirrorRefused",
    "RetentionError",
    "SchemaError",
    "SensorPlan",
    "Slice",
    "SpecError",
    "StorageConfig",
    "TableNotFound",
    "TableOptions",
    "VerifiedPair",
    "Window",
    "WriteError",
    "WriteResult",
    "lakehouse_definitions",
    "spark_session",
]

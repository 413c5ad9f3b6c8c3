"""Errors a user can act on. Each names the table and says how to fix the problem."""


class LakehouseError(Exception):
    """Base class: every error raised on purpose by the lakehouse core."""


class SpecError(LakehouseError, ValueError):
    """The table spec (partitioning, formats, properties) is invalid for the data."""


class SchemaError(LakehouseError, ValueError):
    """The DataFrame's schema cannot be represented or cannot evolve the table's schema."""


class InputError(LakehouseError, ValueError):
    """The rows themselves are invalid (null merge keys, rows outside a partition window...)."""


class CommitError(LakehouseError):
    """A commit did not land; the write left the table unchanged and removed its files."""


class CommitConflict(CommitError):
    """Another writer committed first and this commit's validation failed; re-planning may succeed."""


class TableNotFound(LakehouseError, LookupError):
    """The table does not exist in the catalog."""


class CatalogError(LakehouseError):
    """The catalog or the storage under it cannot be reached or is misconfigured."""


class RetentionError(LakehouseError, LookupError):
    """A time-travel target is older than what the retention window keeps."""

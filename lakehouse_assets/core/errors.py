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


class CommitOutcomeUnknown(LakehouseError):
    """The catalog could not say whether the commit landed (a REST catalog's 500, 502 or 504) and it was not visible
    right after: the write's files are kept, because the commit may still land (as Java Iceberg keeps them). Not a
    `CommitError`: retrying blindly could commit the same change twice."""


class TableNotFound(LakehouseError, LookupError):
    """The table does not exist in the catalog."""


class LocationInUse(LakehouseError):
    """A new table's location already holds another table's Delta log (a table dropped from the catalog with its
    files kept, or another tool's table): nothing was written, and the files there were left as they were.
    `metadata_location` is the newest Iceberg metadata this project left there (None if there is none): register it
    in the catalog to bring that table back."""

    def __init__(self, message: str, location: str, metadata_location: str | None = None):
        super().__init__(message)
        self.location = location
        self.metadata_location = metadata_location

    def __reduce__(self):  # pickled whole (a Spark Connect sink's process hands its errors back)
        return type(self), (str(self), self.location, self.metadata_location)


class CatalogError(LakehouseError):
    """The catalog or the storage under it cannot be reached or is misconfigured."""


class RetentionError(LakehouseError, LookupError):
    """A time-travel target is older than what the retention window keeps."""


class DeleteFilesError(LakehouseError):
    """The table holds Iceberg delete files (written by another engine) that an operation cannot apply."""


class MirrorRefused(LakehouseError):
    """An Iceberg snapshot (usually from another engine) has no exact Delta equivalent; Delta was left as it was."""


class WriteError(LakehouseError):
    """Writing the data files failed on the executors (disk full, a task error...); nothing was committed
    and the files the write had written were removed. The executor's own error is the `__cause__`."""


class ForeignDeltaCommits(LakehouseError):
    """Another engine wrote Delta versions the mirror did not write, and the table's policy refuses to build on them.
    `versions` lists them (version, operation, engine, files added and removed)."""

    def __init__(self, message: str, versions: list | None = None):
        super().__init__(message)
        self.versions = versions or []


class ImportRefused(LakehouseError):
    """An existing table cannot be brought under management as it is; the source was left exactly as it was."""


class DeletionVectorError(LakehouseError):
    """A Delta deletion vector cannot be read as its descriptor describes it (missing file, size, magic number,
    CRC-32 or cardinality that does not match); the message names the vector's file."""

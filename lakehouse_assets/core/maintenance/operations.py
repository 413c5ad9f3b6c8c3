"""The registry of table operations that the CLI, the Dagster job config and the sensors read.

It imports nothing heavy: a code location builds its maintenance job's config (the operation names) and a
CLI its choices from it without loading catalogs, Delta or pyiceberg's Arrow FileIO. Each operation names the
function that runs it (`module:function` in this package), imported when it first runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable


@dataclass(frozen=True)
class Operation:
    name: str
    target: str | None  # "module:function" in this package, (ctx, identifier, settings, dry_run, spark=None) -> report; None: FULL_ORDER
    uses_spark: bool
    description: str

    @property
    def run(self) -> Callable | None:
        if self.target is None:
            return None
        module, function = self.target.split(":")
        return getattr(import_module(f"{__package__}.{module}"), function)


REGISTRY: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("snapshot_expiry", "retention:snapshot_expiry", False,
                  "Expire Iceberg snapshots outside the retention window; delete files nothing retained references."),
        Operation("orphan_cleanup", "retention:orphan_cleanup", False,
                  "Delete unreferenced files under the table root older than the grace period."),
        Operation("compaction", "compaction:compaction", True, "Bin-pack small files per partition (one snapshot, one Delta version)."),
        Operation("metadata_cleanup", "logs:metadata_cleanup", False,
                  "Remove unreferenced Iceberg metadata and Delta log files a checkpoint covers."),
        Operation("delta_checkpoint", "logs:delta_checkpoint", False,
                  "Write a Delta checkpoint at the current version."),
        Operation("full_maintenance", None, True, "All of the above in a safe order, after a repair."),
        Operation("repair", "runner:repair", False, "Bring a lagging Delta log up to Iceberg (idempotent)."),
        Operation("verify_deep", "runner:verify_deep", False,
                  "Check that the formats agree, including the content as DuckDB reads each (read-only)."),
    )
}
OPERATIONS = tuple(REGISTRY)
# Safe order: Delta catches up first (expiry needs the snapshot<->version mapping); compaction before
# expiry (the small files it replaces stay readable through retained snapshots); the checkpoint before
# the log cleanup that relies on it.
FULL_ORDER = ("repair", "compaction", "snapshot_expiry", "orphan_cleanup", "delta_checkpoint", "metadata_cleanup")

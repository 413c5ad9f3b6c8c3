"""Per-table maintenance settings: the product's defaults, overridden by table properties, overridden by arguments."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pyiceberg.table import Table

from ..errors import SpecError
from ..properties import TableProperties
from .delete_figures import FileDeletes

PROPERTY_PREFIX = TableProperties.MAINTENANCE_PREFIX
_INTEGERS = ("min_snapshots_to_keep", "compaction_min_input_files", "compaction_max_attempts", "compaction_delete_files")
MB = 1024 * 1024
# A maintenance metadata commit (snapshot expiry, a recorded boundary) that lost a race with another writer's commit
# (a stream's next batch) is planned again this often.
CONCURRENT_COMMIT_ATTEMPTS = 5


@dataclass
class MaintenanceSettings:
    """Per-table settings. Defaults are the product's; table properties `lakehouse.maintenance.<name
    with dashes>` override them, and explicit arguments (job config, CLI) override both."""

    snapshot_retention_days: float = 7.0
    min_snapshots_to_keep: int = 5
    compaction_target_mb: float = 128.0
    small_file_fraction: float = 0.75  # a file below this fraction of the target is "small"
    compaction_min_input_files: int = 2  # a partition is rewritten only with at least this many small files
    compaction_max_attempts: int = 3  # re-plans after a conflicting concurrent commit
    # Merge-on-read: compaction rewrites a data file with position deletes into a clean file (its deletes folded in)
    # when they delete at least this share of its rows, or when at least this many delete files apply to it.
    compaction_deleted_fraction: float = 0.3
    compaction_delete_files: int = 2
    orphan_grace_hours: float = 24.0  # files younger than this may belong to an in-flight write
    delta_log_retention_days: float | None = None  # default: the snapshot retention

    @classmethod
    def for_table(cls, table: Table, **overrides) -> "MaintenanceSettings":
        values: dict[str, Any] = {}
        for f in fields(cls):
            prop = PROPERTY_PREFIX + f.name.replace("_", "-")
            if prop in table.properties:
                values[f.name] = table.properties[prop]
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise SpecError(
                f"Table {'.'.join(table.name())}: unknown maintenance setting(s) {sorted(unknown)}; "
                f"known settings: {', '.join(f.name for f in fields(cls))}."
            )
        values.update({k: v for k, v in overrides.items() if v is not None})
        out = cls()
        for f in fields(cls):
            if f.name in values:
                raw = values[f.name]
                kind = int if f.name in _INTEGERS else float
                try:
                    setattr(out, f.name, kind(raw))
                except (TypeError, ValueError):
                    raise SpecError(
                        f"Table {'.'.join(table.name())}: maintenance setting {f.name} = {raw!r} is not a number; "
                        f"set table property {PROPERTY_PREFIX + f.name.replace('_', '-')} or the override to a number."
                    ) from None
        if out.min_snapshots_to_keep < 1:
            raise SpecError(f"Table {'.'.join(table.name())}: min_snapshots_to_keep must be at least 1 (the current snapshot).")
        if not 0 < out.compaction_deleted_fraction <= 1 or out.compaction_delete_files < 1:
            raise SpecError(
                f"Table {'.'.join(table.name())}: compaction_deleted_fraction must be above 0 and at most 1 and compaction_delete_files "
                f"at least 1 (got {out.compaction_deleted_fraction} and {out.compaction_delete_files}); 1 and 1 fold every delete."
            )
        if out.snapshot_retention_days < 0 or out.orphan_grace_hours < 0:
            raise SpecError(
                f"Table {'.'.join(table.name())}: retention and grace periods cannot be negative (snapshot_retention_days="
                f"{out.snapshot_retention_days}, orphan_grace_hours={out.orphan_grace_hours}); give 0 or more."
            )
        return out

    @property
    def target_bytes(self) -> int:
        return int(self.compaction_target_mb * MB)

    @property
    def small_file_bytes(self) -> int:
        return int(self.target_bytes * self.small_file_fraction)

    def worth_compacting(self, spec_id: int, default_spec_id: int, small_files: int) -> bool:
        """The compaction rule, shared by `plan_compaction` and the health figures the compaction sensor
        watches: a partition of the table's current spec holding at least compaction_min_input_files small files."""
        return spec_id == default_spec_id and small_files >= self.compaction_min_input_files

    def folds(self, deletes: FileDeletes) -> bool:
        """Whether compaction rewrites this data file with its position deletes folded in (`delete_figures`)."""
        return deletes.deleted_fraction >= self.compaction_deleted_fraction or len(deletes.delete_files) >= self.compaction_delete_files

    @property
    def log_retention_days(self) -> float:
        return self.snapshot_retention_days if self.delta_log_retention_days is None else self.delta_log_retention_days

"""Per-table maintenance settings: the product's defaults, overridden by table properties, overridden by arguments."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pyiceberg.table import Table

from ..errors import SpecError
from ..properties import TableProperties

PROPERTY_PREFIX = TableProperties.MAINTENANCE_PREFIX
MB = 1024 * 1024


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
                kind = int if f.name in ("min_snapshots_to_keep", "compaction_min_input_files", "compaction_max_attempts") else float
                try:
                    setattr(out, f.name, kind(raw))
                except (TypeError, ValueError):
                    raise SpecError(
                        f"Table {'.'.join(table.name())}: maintenance setting {f.name} = {raw!r} is not a number; "
                        f"set table property {PROPERTY_PREFIX + f.name.replace('_', '-')} or the override to a number."
                    ) from None
        if out.min_snapshots_to_keep < 1:
            raise SpecError(f"Table {'.'.join(table.name())}: min_snapshots_to_keep must be at least 1 (the current snapshot).")
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

    @property
    def log_retention_days(self) -> float:
        return self.snapshot_retention_days if self.delta_log_retention_days is None else self.delta_log_retention_days

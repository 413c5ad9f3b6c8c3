"""Everything the lakehouse adds to a Dagster code location, in one call.

`lakehouse_definitions(assets=[...], lakehouse=...)` returns a `Definitions` to merge into a project's own:
the `lakehouse` and `pyspark` resources, the IO manager, a blocking `formats_agree` check on every managed
asset, a check per rule of each asset's data contract and its quarantine table (contracts.py), the maintenance, rollback, alter, delete and update jobs, the erase job and its `subjects_erased` checks (erasure.py) for assets that declare a subject column, the maintenance schedule and the sensors. The demo's code
location (`lakehouse_assets/definitions.py`) and the `dg` component (component.py) are two users of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

from dagster import AssetKey, AssetsDefinition, Definitions, in_process_executor
from dagster_pyspark import PySparkResource

from ..core.errors import InputError
from .checks import build_formats_agree_checks
from .contracts import build_contract_checks, quarantine_specs
from .erasure import build_erasure
from .foreign_commits import INTERVAL_S as FOREIGN_COMMITS_INTERVAL_S
from .foreign_commits import build_foreign_commits_sensor
from .io_manager import LakehouseIOManager
from .maintenance import (
    COMPACTION_SENSOR_INTERVAL_S,
    DELTA_CHECKPOINT_SENSOR_INTERVAL_S,
    DELTA_LAG_SENSOR_INTERVAL_S,
    MAINTENANCE_CRON,
    build_compaction_sensor,
    build_delta_checkpoint_sensor,
    build_delta_lag_sensor,
    build_maintenance_schedule,
    maintenance_jobs,
)
from .resources import LakehouseResource, spark_resource
from .rollback import lakehouse_rollback_job
from .row_changes import lakehouse_delete_job, lakehouse_update_job
from .schema_ops import lakehouse_alter_job

SENSOR_NAMES = ("compaction", "delta_lag", "delta_checkpoint", "foreign_commits")


@dataclass(frozen=True)
class MaintenancePlan:
    """When the maintenance schedule runs and what it keeps.

    `settings` override the tables' own `lakehouse.maintenance.*` properties and the defaults, by the names of
    the maintenance job's config: snapshot_retention_days, min_snapshots_to_keep, compaction_target_mb,
    orphan_grace_hours, delta_log_retention_days.
    """

    cron: str = MAINTENANCE_CRON
    settings: dict[str, Any] = field(default_factory=dict)
    schedule: bool = True
    running: bool = True


@dataclass(frozen=True)
class SensorPlan:
    """Which sensors to define (any of SENSOR_NAMES), whether they start running, and how often they run."""

    enabled: Sequence[str] = SENSOR_NAMES
    running: bool = True
    compaction_interval_s: int = COMPACTION_SENSOR_INTERVAL_S
    delta_lag_interval_s: int = DELTA_LAG_SENSOR_INTERVAL_S
    delta_checkpoint_interval_s: int = DELTA_CHECKPOINT_SENSOR_INTERVAL_S
    foreign_commits_interval_s: int = FOREIGN_COMMITS_INTERVAL_S

    def definitions(self) -> list:
        unknown = sorted(set(self.enabled) - set(SENSOR_NAMES))
        if unknown:
            raise InputError(f"Unknown lakehouse sensor(s) {unknown}: expected any of {list(SENSOR_NAMES)}.")
        builders = {
            "compaction": lambda: build_compaction_sensor(self.compaction_interval_s, self.running),
            "delta_lag": lambda: build_delta_lag_sensor(self.delta_lag_interval_s, self.running),
            "delta_checkpoint": lambda: build_delta_checkpoint_sensor(self.delta_checkpoint_interval_s, self.running),
            "foreign_commits": lambda: build_foreign_commits_sensor(self.foreign_commits_interval_s, self.running),
        }
        return [builders[name]() for name in SENSOR_NAMES if name in self.enabled]


def managed_keys(assets: Iterable[Union[AssetsDefinition, AssetKey, str, Sequence[str]]]) -> list[AssetKey]:
    """The table assets' keys: every key of an assets definition, an AssetKey, "ns/table" or ["ns", "table"]."""
    keys: list[AssetKey] = []
    for item in assets:
        if isinstance(item, AssetsDefinition):
            keys.extend(item.keys)
        elif isinstance(item, AssetKey):
            keys.append(item)
        elif isinstance(item, str):
            keys.append(AssetKey.from_user_string(item))
        else:
            keys.append(AssetKey(list(item)))
    return list(dict.fromkeys(keys))


def lakehouse_definitions(
    assets: Iterable[Union[AssetsDefinition, AssetKey, str, Sequence[str]]] = (),
    lakehouse: Optional[LakehouseResource] = None,
    pyspark: Optional[PySparkResource] = None,
    *,
    io_manager_key: str = "io_manager",
    checks: bool = True,
    maintenance: Optional[MaintenancePlan] = None,
    sensors: Optional[SensorPlan] = None,
    in_process: bool = True,
) -> Definitions:
    """The lakehouse's part of a code location, to merge with `Definitions.merge(...)`.

    `assets`: the table assets it manages; assets definitions are included, keys (of assets defined
    elsewhere in the code location) only get their checks. `lakehouse` defaults to a local warehouse
    (`./warehouse`), `pyspark` to the project's Spark settings (`LAKEHOUSE_SPARK_MASTER`,
    `LAKEHOUSE_SPARK_CONF`). `in_process` makes the in-process executor the code location's default: one
    Spark session for the whole run, parallel inside Spark, instead of a JVM per step.
    """
    assets = list(assets)
    lakehouse = lakehouse or LakehouseResource()
    pyspark = pyspark or spark_resource()
    maintenance = maintenance or MaintenancePlan()
    sensors = sensors or SensorPlan()
    schedules = [build_maintenance_schedule(maintenance.cron, maintenance.settings, maintenance.running)] if maintenance.schedule else []
    defined = [a for a in assets if isinstance(a, AssetsDefinition)]
    erase_jobs, erasure_checks = build_erasure(defined)
    return Definitions(
        assets=[*defined, *quarantine_specs(defined)],
        asset_checks=[*build_formats_agree_checks(managed_keys(assets)), *build_contract_checks(defined), *erasure_checks] if checks else [],
        jobs=[*maintenance_jobs, lakehouse_alter_job, lakehouse_rollback_job, lakehouse_delete_job, lakehouse_update_job, *erase_jobs],
        schedules=schedules,
        sensors=sensors.definitions(),
        resources={
            "lakehouse": lakehouse,
            "pyspark": pyspark,
            io_manager_key: LakehouseIOManager(lakehouse=lakehouse, pyspark=pyspark),
        },
        executor=in_process_executor if in_process else None,
    )

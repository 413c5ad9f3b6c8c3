"""The lakehouse as a `dg` component: `dg scaffold defs lakehouse_assets.LakehouseComponent lakehouse`
writes a `defs.yaml` whose attributes say where the warehouse and catalog are, which assets are tables,
when maintenance runs and what it keeps, and which sensors run. It builds what `lakehouse_definitions`
builds (definitions_factory.py): resources, IO manager, checks, jobs, schedule and sensors.

Example `defs.yaml`:

    type: lakehouse_assets.LakehouseComponent
    attributes:
      warehouse: "{{ context.project_root }}/warehouse"
      assets: [sales/orders]
      maintenance: {cron: "0 3 * * *", snapshot_retention_days: 7}
"""

# No `from __future__ import annotations`: the Resolvable framework reads field types at class creation.
from typing import Literal, Optional

from dagster import ComponentLoadContext, Definitions
from dagster.components import Component, Model, Resolvable, Scaffolder, ScaffoldRequest, scaffold_component, scaffold_with
from pydantic import Field

from .definitions_factory import SENSOR_NAMES, MaintenancePlan, SensorPlan, lakehouse_definitions
from .resources import LakehouseResource, spark_resource


class StorageSettings(Model):
    """Object-store settings; left empty, each cloud's standard environment variables apply. Give secrets as
    `{{ env.NAME }}` templates, never literally."""

    s3_endpoint_url: Optional[str] = None
    s3_region: Optional[str] = None
    s3_access_key_id: Optional[str] = None
    s3_secret_access_key: Optional[str] = None
    s3_session_token: Optional[str] = None
    gcs_endpoint_url: Optional[str] = None
    gcs_project_id: Optional[str] = None
    azure_account_name: Optional[str] = None
    azure_account_key: Optional[str] = None
    azure_sas_token: Optional[str] = None
    azure_client_id: Optional[str] = None
    azure_client_secret: Optional[str] = None
    azure_tenant_id: Optional[str] = None
    azure_endpoint_url: Optional[str] = None


class CatalogSettings(Model):
    """The Iceberg catalog: pyiceberg's catalog name and properties (type sql, rest, glue, ...); empty = an
    embedded SQLite catalog in the warehouse."""

    name: Optional[str] = None
    properties: dict[str, str] = Field(default_factory=dict)


class DeltaSettings(Model):
    configuration: dict[str, str] = Field(default_factory=dict, description="Delta table properties for new tables, e.g. delta.enableChangeDataFeed.")
    foreign_commits: Optional[Literal["refuse", "adopt"]] = Field(default=None, description="Default for commits other Delta writers made: refuse (default) or adopt.")


class SparkSettings(Model):
    master: Optional[str] = Field(default=None, description="spark.master, e.g. local[2] or spark://host:7077; default LAKEHOUSE_SPARK_MASTER or local[2].")
    conf: dict[str, str] = Field(default_factory=dict, description="Further Spark settings, over the project's defaults.")


class MaintenanceSettings(Model):
    schedule: bool = Field(default=True, description="Define the maintenance schedule.")
    running: bool = Field(default=True, description="The schedule starts running (else stopped until turned on in the UI).")
    cron: str = Field(default=MaintenancePlan.cron, description="When full_maintenance runs, UTC.")
    snapshot_retention_days: Optional[float] = None
    min_snapshots_to_keep: Optional[int] = None
    compaction_target_mb: Optional[float] = None
    orphan_grace_hours: Optional[float] = None
    delta_log_retention_days: Optional[float] = None

    def plan(self) -> MaintenancePlan:
        names = ("snapshot_retention_days", "min_snapshots_to_keep", "compaction_target_mb", "orphan_grace_hours", "delta_log_retention_days")
        settings = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        return MaintenancePlan(cron=self.cron, settings=settings, schedule=self.schedule, running=self.running)


class SensorSettings(Model):
    enabled: list[Literal["compaction", "delta_lag", "delta_checkpoint", "foreign_commits"]] = Field(default_factory=lambda: list(SENSOR_NAMES))
    running: bool = Field(default=True, description="The sensors start running (else stopped until turned on in the UI).")
    compaction_interval_s: int = SensorPlan.compaction_interval_s
    delta_lag_interval_s: int = SensorPlan.delta_lag_interval_s
    delta_checkpoint_interval_s: int = SensorPlan.delta_checkpoint_interval_s
    foreign_commits_interval_s: int = SensorPlan.foreign_commits_interval_s

    def plan(self) -> SensorPlan:
        return SensorPlan(
            enabled=tuple(self.enabled),
            running=self.running,
            compaction_interval_s=self.compaction_interval_s,
            delta_lag_interval_s=self.delta_lag_interval_s,
            delta_checkpoint_interval_s=self.delta_checkpoint_interval_s,
            foreign_commits_interval_s=self.foreign_commits_interval_s,
        )


class LakehouseScaffolder(Scaffolder):
    def scaffold(self, request: ScaffoldRequest) -> None:
        scaffold_component(request, {"warehouse": "{{ context.project_root }}/warehouse", "assets": [], "spark": {"master": "local[2]"}})


@scaffold_with(LakehouseScaffolder)
class LakehouseComponent(Component, Resolvable, Model):
    """Dagster assets as Iceberg + Delta tables: resources, IO manager, formats_agree checks, maintenance,
    rollback and alter jobs, the maintenance schedule and sensors."""

    warehouse: str = Field(default="./warehouse", description="Where table files live: a path or s3://, gs://, abfss:// URI.")
    assets: list[str] = Field(default_factory=list, description='The table assets (defined elsewhere in the project), as keys "namespace/table"; each gets a formats_agree check.')
    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    delta: DeltaSettings = Field(default_factory=DeltaSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    sensors: SensorSettings = Field(default_factory=SensorSettings)
    branch: Optional[str] = Field(default=None, description="Write every table of this deployment to this Iceberg branch.")
    io_manager_key: str = Field(default="io_manager", description="The resource key of the IO manager the table assets use.")
    in_process_executor: bool = Field(default=True, description="Make the in-process executor the default: one Spark session per run.")

    def lakehouse_resource(self) -> LakehouseResource:
        return LakehouseResource(
            warehouse=self.warehouse,
            catalog_name=self.catalog.name,
            catalog_properties=self.catalog.properties or None,
            delta_configuration=self.delta.configuration or None,
            foreign_delta_commits=self.delta.foreign_commits,
            branch=self.branch,
            **self.storage.model_dump(exclude_none=True),
        )

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        spark_overrides = {**self.spark.conf, **({"spark.master": self.spark.master} if self.spark.master else {})}
        return lakehouse_definitions(
            assets=self.assets,
            lakehouse=self.lakehouse_resource(),
            pyspark=spark_resource(spark_overrides),
            io_manager_key=self.io_manager_key,
            maintenance=self.maintenance.plan(),
            sensors=self.sensors.plan(),
            in_process=self.in_process_executor,
        )

"""Dagster resources: the lakehouse (catalog + storage) and Spark."""

import contextlib
import importlib
import os
import threading
from typing import TYPE_CHECKING, Any, Iterator, Optional

from dagster import ConfigurableResource, InitResourceContext
from dagster_pyspark import PySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pydantic import PrivateAttr

from ..core.io.storage import StorageConfig
from ..core.spark.session import prepare_spark_environment, session_provider, spark_config, spark_session  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from ..core.lakehouse import Lakehouse  # imported where a run first asks for it: see get()


def spark_resource(overrides: Optional[dict[str, Any]] = None) -> PySparkResource:
    """The project's Spark settings (core/spark/session.py) as a Dagster resource."""
    prepare_spark_environment()
    return LakehouseSparkResource(spark_config=spark_config(overrides))


# What a step's first write or read imports: pyiceberg (its pyarrow FileIO brings pyarrow.dataset and pandas),
# its SQL catalog, delta-rs and the lakehouse's own modules; ~1 s of CPU in a fresh process.
LAKEHOUSE_MODULES = (
    "pyiceberg.io.pyarrow",
    "pyiceberg.catalog.sql",
    "deltalake",
    "lakehouse_assets.core.lakehouse",
    "lakehouse_assets.core.write.table_write",
    "lakehouse_assets.dagster.health",
)


class LakehouseSparkResource(PySparkResource):
    """dagster-pyspark's PySparkResource whose session starts where a step first asks for it (`spark_session`),
    importing the lakehouse's modules while it starts.

    A run whose steps never touch Spark starts no JVM: a run of `formats_agree` checks alone, a maintenance run
    of metadata-only operations (expiry, cleanups, checkpoints, a repair of appends), each of which dagster-pyspark's
    resource would make wait seconds for a JVM at resource setup. The first `spark_session` starts it, once per
    process; lakehouse code that needs Spark without being handed it gets it from here too (`yield_for_execution`).

    A Dagster step is a new process. Starting Spark keeps its Python process waiting on the JVM for seconds;
    importing LAKEHOUSE_MODULES on a second thread meanwhile takes them off the step's path (session start plus
    imports here: 3.40-4.04 s one after the other, 3.12-3.45 s side by side). The thread is joined before the
    session is handed over, so no module is ever imported on two threads while the step's own code runs. A Spark
    Connect session starts no JVM here (nothing to wait on) and imports its own client modules meanwhile: it
    starts as dagster-pyspark's does."""

    def setup_for_execution(self, context: InitResourceContext) -> None:
        pass  # the session starts on first use: see spark_session

    @contextlib.contextmanager
    def yield_for_execution(self, context: InitResourceContext) -> Iterator["LakehouseSparkResource"]:
        # Lakehouse code that needs Spark without being handed this session (a Delta repair writing change data
        # for an overwrite or merge) starts it through this resource, with its settings.
        with session_provider(lambda: self.spark_session):
            yield self

    @property
    def spark_session(self) -> Any:
        with _SESSION_START:
            if self._spark_session is None:
                self._spark_session = self._start()
        return self._spark_session

    def _start(self) -> Any:
        if (self.spark_config or {}).get("spark.remote") or os.environ.get("SPARK_REMOTE"):
            return spark_session_from_config(self.spark_config)
        imports = threading.Thread(target=_import_lakehouse_modules, name="lakehouse-imports", daemon=True)
        imports.start()
        try:
            return spark_session_from_config(self.spark_config)
        finally:
            imports.join()


# One Spark session per process (getOrCreate): two threads asking at once start it once.
_SESSION_START = threading.Lock()


def _import_lakehouse_modules() -> None:
    for name in LAKEHOUSE_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the step's own import of it reports the error where it matters
            return


class LakehouseResource(ConfigurableResource):
    """Where the warehouse lives and which catalog holds its tables.

    Storage settings left empty come from `s3` (dagster-aws's S3Resource) if given, else from each
    cloud's standard environment variables (AWS_*, STORAGE_EMULATOR_HOST / GOOGLE_*, AZURE_STORAGE_*);
    they can also be given as Dagster `EnvVar`s. They are never
    written to metadata or logs.
    """

    warehouse: str = "./warehouse"
    catalog_name: Optional[str] = None
    catalog_properties: Optional[dict[str, str]] = None
    s3_endpoint_url: Optional[str] = None
    s3_region: Optional[str] = None
    s3_access_key_id: Optional[str] = None
    s3_secret_access_key: Optional[str] = None
    s3_session_token: Optional[str] = None
    # GCS: credentials are Google's Application Default Credentials; an endpoint means an emulator.
    gcs_endpoint_url: Optional[str] = None
    gcs_project_id: Optional[str] = None
    # Azure: one of account key, SAS token or service principal (client id/secret/tenant); else the default chain.
    azure_account_name: Optional[str] = None
    azure_account_key: Optional[str] = None
    azure_sas_token: Optional[str] = None
    azure_client_id: Optional[str] = None
    azure_client_secret: Optional[str] = None
    azure_tenant_id: Optional[str] = None
    azure_endpoint_url: Optional[str] = None
    delta_configuration: Optional[dict[str, str]] = None
    # Default for tables without `lakehouse.delta.foreign-commits`: "refuse" (default) or "adopt".
    foreign_delta_commits: Optional[str] = None
    # Register every table's Delta side in AWS Glue for Athena/EMR/Spectrum: the fields of GlueDeltaRegistration
    # (database, name_suffix, region, endpoint_url, catalog_id, profile_name), e.g. {"name_suffix": "_delta"}.
    delta_glue: Optional[dict[str, str]] = None
    # dagster-aws's S3Resource (or any resource with its endpoint_url, region_name and aws_* fields): used where
    # the s3_* fields above are empty. Typed as any resource so that local warehouses never import dagster-aws
    # (0.4 s of imports in every Dagster process).
    s3: Optional[ConfigurableResource] = None
    # An environment branch (e.g. EnvVar("LAKEHOUSE_BRANCH")): every write of this deployment goes to this
    # Iceberg branch, never to main or Delta; reads take the branch where a table has it, else main.
    branch: Optional[str] = None

    _lakehouse: Optional["Lakehouse"] = PrivateAttr(default=None)

    def storage(self) -> StorageConfig:
        s3 = self.s3
        return StorageConfig.from_env(
            endpoint_url=self.s3_endpoint_url or (s3.endpoint_url if s3 else None),
            region=self.s3_region or (s3.region_name if s3 else None),
            access_key_id=self.s3_access_key_id or (s3.aws_access_key_id if s3 else None),
            secret_access_key=self.s3_secret_access_key or (s3.aws_secret_access_key if s3 else None),
            session_token=self.s3_session_token or (s3.aws_session_token if s3 else None),
            gcs_endpoint_url=self.gcs_endpoint_url,
            gcs_project_id=self.gcs_project_id,
            azure_account_name=self.azure_account_name,
            azure_account_key=self.azure_account_key,
            azure_sas_token=self.azure_sas_token,
            azure_client_id=self.azure_client_id,
            azure_client_secret=self.azure_client_secret,
            azure_tenant_id=self.azure_tenant_id,
            azure_endpoint_url=self.azure_endpoint_url,
        )

    def get(self) -> "Lakehouse":
        if self._lakehouse is None:
            from ..core.lakehouse import Lakehouse

            self._lakehouse = Lakehouse(
                self.warehouse,
                catalog_name=self.catalog_name,
                catalog_properties=self.catalog_properties,
                storage=self.storage(),
                delta_configuration=self.delta_configuration,
                foreign_delta_commits=self.foreign_delta_commits,
                delta_glue=self.delta_glue,
            )
        return self._lakehouse

"""The IO manager: an asset's DataFrame becomes one Iceberg snapshot and one Delta version.

Table spec from the asset definition's metadata:

    partition_by      list of partition terms, e.g. ["day(event_time)", "bucket(16, user_id)"]
    write_mode        "append" (default), "overwrite" or "merge"
    merge_keys        key columns for write_mode="merge"
    merge_operation_column / merge_delete_values / merge_deleted_at_column / merge_order_by
                      CDC deletes and duplicate-key resolution for merges (see core/merge.py)
    formats           ["iceberg", "delta"] (default) or ["iceberg"]
    table_properties  extra Iceberg table properties
    partition_expr    the column a Dagster time partition maps to (required for time-partitioned assets)
    schema_evolution  True (default) / False
    target_file_size  bytes (default 128 MB)

The asset key's prefix is the namespace: AssetKey(["demo", "events"]) is table `demo.events`.
A time-partitioned asset overwrites exactly its partition's window, so re-running a partition is
idempotent and never touches other partitions.
"""


from typing import Any

from dagster import (
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
    ResourceDependency,
    TimeWindowPartitionsDefinition,
)
from dagster_pyspark import PySparkResource

from ..core.errors import SpecError
from ..core.lakehouse import Window, WriteResult
from .health import table_health_metadata
from .resources import LakehouseResource

DEFAULT_NAMESPACE = "default"


def table_identifier(asset_key) -> str:
    path = list(asset_key.path)
    namespace = ".".join(path[:-1]) or DEFAULT_NAMESPACE
    return f"{namespace}.{path[-1]}"


def _time_window(context, metadata: dict[str, Any], identifier: str) -> Window | None:
    if not context.has_asset_partitions:
        return None
    partitions_def = context.asset_partitions_def
    if not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        raise SpecError(
            f"Table {identifier}: only time-window partitions map to table windows; got {type(partitions_def).__name__}. "
            "Use a DailyPartitionsDefinition (or another time-window definition) with partition_expr metadata."
        )
    column = metadata.get("partition_expr")
    if not column:
        raise SpecError(
            f"Table {identifier}: the asset is time-partitioned but has no 'partition_expr' metadata naming the "
            "timestamp or date column its partitions cover, e.g. metadata={'partition_expr': 'event_time'}."
        )
    tw = context.asset_partitions_time_window
    return Window(column, tw.start, tw.end)


def write_metadata(result: WriteResult) -> dict[str, Any]:
    """Output metadata; numbers stay numbers so the UI plots them over time."""
    md: dict[str, Any] = {
        "iceberg_snapshot_id": MetadataValue.int(result.iceberg_snapshot_id) if result.iceberg_snapshot_id is not None else MetadataValue.null(),
        "delta_version": MetadataValue.int(result.delta_version) if result.delta_version is not None else MetadataValue.null(),
        "table": MetadataValue.text(result.table),
        "table_location": MetadataValue.path(result.location),
        "iceberg_metadata_location": MetadataValue.path(result.iceberg_metadata_location),
        "dagster/row_count": MetadataValue.int(result.rows_written),
        "rows_removed": MetadataValue.int(result.rows_removed),
        "files_added": MetadataValue.int(result.files_added),
        "files_removed": MetadataValue.int(result.files_removed),
        "bytes_added": MetadataValue.int(result.bytes_written),
        "write_seconds": MetadataValue.float(round(result.write_seconds, 3)),
        "iceberg_commit_seconds": MetadataValue.float(round(result.iceberg_commit_seconds, 3)),
        "delta_commit_seconds": MetadataValue.float(round(result.delta_commit_seconds, 3)),
        "delta_lagging": MetadataValue.bool(result.delta_lagging),
        "write_mode": MetadataValue.text(result.mode),
    }
    if result.duplicate_of_earlier_write:
        md["duplicate_of_earlier_write"] = MetadataValue.bool(True)
    if result.delta_error:
        md["delta_error"] = MetadataValue.text(result.delta_error)
    return md


class LakehouseIOManager(ConfigurableIOManager):
    """Stores Spark DataFrames (or small pyarrow/pandas tables) as dual-format lakehouse tables."""

    lakehouse: ResourceDependency[LakehouseResource]
    pyspark: ResourceDependency[PySparkResource]

    def handle_output(self, context: OutputContext, obj) -> None:
        if obj is None:
            return
        metadata = dict(context.definition_metadata or {})
        identifier = table_identifier(context.asset_key)
        window = _time_window(context, metadata, identifier)
        mode = metadata.get("write_mode", "append")
        partition_key = context.partition_key if context.has_asset_partitions else None
        if window is not None and mode == "append":
            mode = "overwrite"  # a time partition replaces its own window: re-runs are idempotent
        kwargs: dict[str, Any] = dict(
            partition_by=metadata.get("partition_by") or None,
            formats=metadata.get("formats") or None,
            properties=metadata.get("table_properties") or None,
            target_file_size=metadata.get("target_file_size"),
            schema_evolution=metadata.get("schema_evolution", True),
            window=window,
            # Retried steps of the same run and partition never commit twice.
            write_id=f"dagster:{context.run_id}:{identifier}:{partition_key or '-'}",
            writer={"dagster_run_id": context.run_id, "asset": context.asset_key.to_user_string(), "partition": partition_key or ""},
            spark=self.pyspark.spark_session,
        )
        if mode == "merge":
            kwargs["merge_keys"] = metadata.get("merge_keys")
            for key in ("merge_operation_column", "merge_delete_values", "merge_deleted_at_column", "merge_order_by"):
                if key in metadata:
                    kwargs[key[len("merge_"):]] = metadata[key]
        result = self.lakehouse.get().write(obj, identifier, mode=mode, **kwargs)
        for warning in result.warnings:
            context.log.warning(warning)
        context.add_output_metadata(write_metadata(result))
        try:  # the table's health next to its versions on the asset page; never fails a committed write
            context.add_output_metadata(table_health_metadata(self.lakehouse.get(), identifier))
        except Exception as e:  # noqa: BLE001
            context.log.warning(f"Table {identifier}: health metadata not computed: {type(e).__name__}: {e}")

    def load_input(self, context: InputContext):
        upstream = context.upstream_output
        identifier = table_identifier(context.asset_key)
        metadata = dict(upstream.definition_metadata or {}) if upstream is not None else {}
        window = None
        if context.has_asset_partitions:
            window = _time_window(context, metadata, identifier)
        return self.lakehouse.get().read(self.pyspark.spark_session, identifier, window=window)

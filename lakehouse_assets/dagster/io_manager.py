"""The IO manager: an asset's DataFrame becomes one Iceberg snapshot and one Delta version.

Table spec from the asset definition's metadata:

    partition_by      list of partition terms, e.g. ["day(event_time)", "bucket(16, user_id)"]
    write_mode        WriteMode.append (default), .overwrite or .merge (or the same as strings)
    merge_keys        key columns for write_mode="merge"
    merge_operation_column / merge_delete_values / merge_deleted_at_column / merge_order_by
                      CDC deletes and duplicate-key resolution for merges (see core/write/merge/batch.py)
    formats           ["iceberg", "delta"] (default) or ["iceberg"]
    table_properties  extra Iceberg table properties
    partition_expr    the column each Dagster partition dimension maps to (required for partitioned
                      assets): "event_time" for a time or static partitions definition, a dict per
                      dimension for a multi-partition, e.g. {"date": "event_time", "region": "region"}
    schema_evolution  True (default) / False
    target_file_size  bytes (default 128 MB)
    audit             True: stage each materialization on a branch until its blocking checks pass (audit.py)

The asset key's prefix is the namespace: AssetKey(["demo", "events"]) is table `demo.events`.

Partitions map to table slices the way Dagster's DB IO managers map them to
`TablePartitionDimension`s: a time dimension covers a window of its column, a static (or dynamic)
dimension covers a set of values of its column. A partitioned materialization overwrites exactly its
slice (one commit for a whole single-run backfill), so re-running a partition is idempotent and never
touches other partitions; `load_input` reads exactly the upstream partitions the mapping asks for.
"""

# No `from __future__ import annotations`: Dagster resolves the IO manager's field types at import time.
import math
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pyarrow as pa
from dagster import (
    ConfigurableIOManager,
    DagsterInvariantViolationError,
    InputContext,
    MetadataValue,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    OutputContext,
    PartitionsDefinition,
    ResourceDependency,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
    TimeWindowPartitionsDefinition,
)

# Dagster's standard `dagster/*` metadata keys (not re-exported at the top level in 1.13).
from dagster._core.definitions.metadata.metadata_set import TableMetadataSet, UriMetadataSet
from dagster_pyspark import PySparkResource

from ..core.errors import SpecError
from . import audit, contracts, incremental
from .inputs import InputRequest, from_arrow, input_kind
from .resources import LakehouseResource

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from ..core.model import WriteResult
    from ..core.schema.window import Slice, Window

# The lakehouse core (pyiceberg, pyarrow's datasets, the catalogs) is imported where a materialization or a load
# uses it, not with this module: a code location loads in every Dagster process (the daemon, the webserver, each
# run's worker), most of which never write a table.

DEFAULT_NAMESPACE = "default"


class WriteMode(Enum):
    """What a materialization does to its table (asset metadata `write_mode`), as in dagster-iceberg.

    A partitioned asset writes its partition's slice: `append` and `overwrite` both mean "overwrite the
    slice" there, and `merge` merges the partition's rows by key into the slice (rows outside it never change).
    """

    append = "append"
    overwrite = "overwrite"
    merge = "merge"

    @classmethod
    def from_metadata(cls, asset: str, value) -> "WriteMode":
        if value is None:
            return cls.append
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise SpecError(
                f"Asset {asset}: unknown write_mode {value!r} in its metadata; use one of "
                f"{', '.join(repr(m.value) for m in cls)} (or WriteMode.append / .overwrite / .merge)."
            ) from None


def table_identifier(asset_key) -> str:
    path = list(asset_key.path)
    namespace = ".".join(path[:-1]) or DEFAULT_NAMESPACE
    return f"{namespace}.{path[-1]}"


def partition_slice(asset: str, partitions_def: PartitionsDefinition, keys: Sequence[str], partition_expr) -> "Slice":
    """The table slice that the partition `keys` of `partitions_def` cover (keys of one run or one input).

    Raises SpecError, naming the asset and the fix, when `partition_expr` does not name a column per
    dimension or when the keys are not one rectangle (adjacent time partitions x a set of static values).
    """
    from ..core.schema.window import Slice

    if not partition_expr:
        example = (
            "{" + ", ".join(f"{d.name!r}: '<column>'" for d in partitions_def.partitions_defs) + "}"
            if isinstance(partitions_def, MultiPartitionsDefinition)
            else "'<column>'"
        )
        raise SpecError(
            f"Asset {asset} is partitioned but has no 'partition_expr' metadata naming the column its partitions cover, "
            f"e.g. metadata={{'partition_expr': {example}}}."
        )
    if isinstance(partitions_def, MultiPartitionsDefinition):
        if not isinstance(partition_expr, Mapping):
            raise SpecError(
                f"Asset {asset} has multi-partitions ({', '.join(d.name for d in partitions_def.partitions_defs)}): its "
                f"'partition_expr' must map each dimension to a column, e.g. "
                "{" + ", ".join(f"{d.name!r}: '<column>'" for d in partitions_def.partitions_defs) + "}" + f", not {partition_expr!r}."
            )
        multi_keys = [k if isinstance(k, MultiPartitionKey) else partitions_def.get_partition_key_from_str(k) for k in keys]
        window, values, sizes = None, {}, []
        for dim in partitions_def.partitions_defs:
            column = partition_expr.get(dim.name)
            if not column:
                raise SpecError(
                    f"Asset {asset}: 'partition_expr' has no entry for the partition dimension {dim.name!r}; "
                    f"name the column it covers, e.g. {{..., {dim.name!r}: '<column>'}}."
                )
            dim_keys = sorted({k.keys_by_dimension[dim.name] for k in multi_keys})
            sizes.append(len(dim_keys))
            if isinstance(dim.partitions_def, TimeWindowPartitionsDefinition):
                window = _covering_window(asset, dim.partitions_def, dim_keys, column)
            else:
                values[column] = dim_keys
        if math.prod(sizes) != len(set(multi_keys)):
            raise SpecError(
                f"Asset {asset}: the {len(set(multi_keys))} partitions of this run are not every combination of their "
                "dimensions' keys, so they are not one table slice. Launch one run per time range with all of its "
                "static keys, or one run per partition."
            )
        return Slice(window=window, values=values)
    if not isinstance(partition_expr, str):
        raise SpecError(f"Asset {asset}: 'partition_expr' must name one column for a single-dimension partitions definition, not {partition_expr!r}.")
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return Slice(window=_covering_window(asset, partitions_def, list(keys), partition_expr))
    return Slice(values={partition_expr: sorted(set(keys))})  # static or dynamic partitions: one value each


def _covering_window(asset: str, partitions_def: TimeWindowPartitionsDefinition, keys: Sequence[str], column: str) -> "Window":
    from ..core.schema.window import Window

    windows = sorted((partitions_def.time_window_for_partition_key(k) for k in keys), key=lambda w: w.start)
    for before, after in zip(windows, windows[1:]):
        if before.end != after.start:
            raise SpecError(
                f"Asset {asset}: the time partitions of this run are not adjacent ({before.start} to {before.end} and "
                f"{after.start} to {after.end}); one run writes one time range. Launch one run per range."
            )
    return Window(column, windows[0].start, windows[-1].end)


def _partition_label(context: OutputContext) -> str | None:
    if not context.has_asset_partitions:
        return None
    keys = context.asset_partition_keys
    if len(keys) == 1:
        return str(keys[0])
    r = context.asset_partition_key_range
    return f"{r.start}...{r.end}"


def table_metadata(table: "Table", identifier: str) -> dict[str, Any]:
    """Dagster's standard table metadata: the Columns view, the table name, the URI; and the partition spec."""
    from ..core.schema.spec import spec_terms

    schema = table.schema()
    columns = [
        TableColumn(
            name=f.name,
            type=str(f.field_type),
            description=f"Iceberg field id {f.field_id}" + (f". {f.doc}" if f.doc else ""),
            constraints=TableColumnConstraints(nullable=not f.required),
        )
        for f in schema.fields
    ]
    terms = spec_terms(table.spec(), schema)
    return {
        **dict(TableMetadataSet(column_schema=TableSchema(columns=columns), table_name=identifier, storage_kind="iceberg")),
        **dict(UriMetadataSet(uri=table.location())),
        "partition_spec": MetadataValue.text(", ".join(terms) if terms else "unpartitioned"),
    }


def _producing_run(upstream) -> Optional[str]:
    """The run whose step produced the upstream output this input loads (the parent run's, after a re-execution
    that did not run that step again); None when the upstream was not materialized by this run or its parents."""
    try:
        return upstream.run_id
    except DagsterInvariantViolationError:
        return None


def write_metadata(result: "WriteResult") -> dict[str, Any]:
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
    if result.commit_attempts is not None:  # more than 1: concurrent writes (a backfill's runs) got in first
        md["commit_attempts"] = MetadataValue.int(result.commit_attempts)
    if result.duplicate_of_earlier_write:
        md["duplicate_of_earlier_write"] = MetadataValue.bool(True)
    if result.delta_error:
        md["delta_error"] = MetadataValue.text(result.delta_error)
    return md


class LakehouseIOManager(ConfigurableIOManager):
    """Stores Spark DataFrames (or small pyarrow, pandas and Polars tables) as dual-format lakehouse tables, and loads
    them as the downstream input's annotation asks: a Spark DataFrame, a pyarrow Table, a pandas or a Polars DataFrame."""

    lakehouse: ResourceDependency[LakehouseResource]
    pyspark: ResourceDependency[PySparkResource]
    # Write-audit-publish for every asset without its own `audit` metadata (see audit.py).
    audit: bool = False

    def handle_output(self, context: OutputContext, obj) -> None:
        from ..core.model import MergeOptions, TableOptions
        from .health import table_health_metadata

        if obj is None:
            return
        metadata = dict(context.definition_metadata or {})
        identifier = table_identifier(context.asset_key)
        asset = context.asset_key.to_user_string()
        mode = WriteMode.from_metadata(asset, metadata.get("write_mode"))
        part = None
        if context.has_asset_partitions:
            part = partition_slice(asset, context.asset_partitions_def, context.asset_partition_keys, metadata.get("partition_expr"))
            if mode is not WriteMode.merge:
                mode = WriteMode.overwrite  # a partition replaces its own slice: re-runs are idempotent
        label = _partition_label(context)
        kwargs: dict[str, Any] = dict(
            partition_by=metadata.get("partition_by") or None,
            table=TableOptions(
                formats=metadata.get("formats") or None,
                properties=metadata.get("table_properties") or None,
                target_file_size=metadata.get("target_file_size"),
                schema_evolution=metadata.get("schema_evolution", True),
                contract=contracts.contract_of(asset, metadata),
            ),
            window=part,
            # Retried steps of the same run and partition(s) never commit twice.
            write_id=f"dagster:{context.run_id}:{identifier}:{label or '-'}",
            writer={"dagster_run_id": context.run_id, "asset": asset, "partition": label or ""},
            # A frame that is not Spark's is written without Spark: the session starts only if a step needs it (through
            # the resource's provider, with its settings).
            spark=self.pyspark.spark_session if hasattr(obj, "sparkSession") else None,
        )
        if mode is WriteMode.merge:
            options = {key[len("merge_"):]: metadata[key] for key in ("merge_operation_column", "merge_delete_values", "merge_deleted_at_column", "merge_order_by") if key in metadata}
            kwargs["merge"] = MergeOptions(keys=metadata.get("merge_keys") or (), **options)
        lh = self.lakehouse.get()
        consumed = incremental.consumed(context.run_id, identifier)  # the upstream changes this output was computed from
        if consumed:
            kwargs["snapshot_properties"] = incremental.snapshot_properties(consumed)
            context.add_output_metadata(incremental.metadata(consumed))
        if (branch := self._branch_to_write(context, asset, metadata)) is not None:
            kwargs["branch"] = branch
        result = lh.write(obj, identifier, mode=mode.value, **kwargs)
        for warning in result.warnings:
            context.log.warning(warning)
        context.add_output_metadata(write_metadata(result) | contracts.write_metadata(result.contract))
        if (quarantined := contracts.quarantine_materialization(context.asset_key, result.contract)) is not None:
            context.log_event(quarantined)
        if part is not None:
            context.add_output_metadata({"partition_slice": MetadataValue.text(part.describe()), **dict(TableMetadataSet(partition_row_count=result.rows_written))})
        try:  # table metadata and health next to its versions on the asset page; never fails a committed write
            table = lh.load(identifier)  # once: each load parses the whole snapshot history
            context.add_output_metadata(table_metadata(table, identifier))
            context.add_output_metadata(table_health_metadata(lh, identifier, table))
        except Exception as e:  # noqa: BLE001
            context.log.warning(f"Table {identifier}: table metadata not computed: {type(e).__name__}: {e}")

    def _branch_to_write(self, context: OutputContext, asset: str, metadata) -> Optional[str]:
        """The branch an output is written to: its run's audit branch (write-audit-publish), the deployment's environment
        branch, or None (main)."""
        if audit.is_audited(asset, metadata, self.audit):
            if self.lakehouse.branch:
                raise SpecError(
                    f"Asset {asset}: write-audit-publish stages on a branch of main and publishes to main, and this deployment writes to "
                    f"the environment branch {self.lakehouse.branch!r}. Turn 'audit' off for this deployment, or unset its branch."
                )
            branch = audit.audit_branch(context.run_id)
            context.add_output_metadata({"lakehouse/staged_branch": MetadataValue.text(branch)})
            return branch
        if self.lakehouse.branch:
            context.add_output_metadata({"lakehouse/branch": MetadataValue.text(self.lakehouse.branch)})
        return self.lakehouse.branch or None

    def _branch_to_read(self, lh, identifier: str, asset: str, upstream, metadata) -> Optional[str]:
        """What an input reads instead of main: the branch its audited upstream's materialization staged (until
        published), else the deployment's branch where the table has one."""
        run_id = _producing_run(upstream) if upstream is not None and audit.is_audited(asset, metadata, self.audit) else None
        if run_id is None and not self.lakehouse.branch:
            return None  # no branch to look for: no table load
        have = lh.branches(identifier)
        if run_id is not None and (staged := audit.audit_branch(run_id)) in have:
            return staged
        if self.lakehouse.branch and self.lakehouse.branch in have:
            return self.lakehouse.branch
        return None

    def load_input(self, context: InputContext):
        """The upstream table as the input's annotation asks (Spark by default), narrowed by the
        input's metadata (columns, row_filter, snapshot_id, as_of, as_of_run) and the partition mapping."""
        from pyiceberg.expressions import AlwaysFalse

        from ..core.read.changes import CHANGE_COLUMNS

        upstream = context.upstream_output
        identifier = table_identifier(context.asset_key)
        metadata = dict(upstream.definition_metadata or {}) if upstream is not None else {}
        asset = context.asset_key.to_user_string()
        request = InputRequest.from_metadata(asset, dict(context.definition_metadata or {}))
        kind = input_kind(context.dagster_type.typing_type if context.dagster_type is not None else None)
        lh = self.lakehouse.get()
        if (context.definition_metadata or {}).get(audit.STAGED_INPUT_KEY):
            if upstream is None or not audit.is_audited(asset, metadata, self.audit):
                raise SpecError(f"Asset {asset}: the publish step reads what an audited asset staged, and {asset} is not audited: give it metadata {{'audit': True}}.")
            run_id = _producing_run(upstream)
            if run_id is None:
                raise SpecError(f"Asset {asset}: its publish step runs in the run that materializes {asset}: select both, or publish by hand with `lakehouse publish`.")
            return audit.StagedWrite(identifier, audit.audit_branch(run_id))
        if request.changes:
            downstream = table_identifier(incremental.downstream_asset_key(context))
            df = incremental.load_changes(lh, self.pyspark.spark_session, context.step_context.run_id, downstream, identifier)
            if request.columns is not None:
                df = df.select(*request.columns, *CHANGE_COLUMNS)
            return df if kind == "spark" else from_arrow(pa.Table.from_pandas(df.toPandas(), preserve_index=False), kind)
        part = None
        if context.has_asset_partitions:
            keys = context.asset_partition_keys
            if keys:
                part = partition_slice(asset, context.asset_partitions_def, keys, metadata.get("partition_expr"))
        snapshot_id = lh.snapshot_of_run(identifier, request.as_of_run) if request.as_of_run is not None else request.snapshot_id
        read = dict(row_filter=request.row_filter, snapshot_id=snapshot_id, as_of=request.as_of, window=part)
        if snapshot_id is None and request.as_of is None and (branch := self._branch_to_read(lh, identifier, asset, upstream, metadata)):
            read["branch"] = branch
        nothing = context.has_asset_partitions and not context.asset_partition_keys  # the mapping asks for no upstream partition
        if kind != "spark":
            if nothing:
                read["row_filter"] = AlwaysFalse()
            return from_arrow(lh.read_arrow(identifier, columns=request.columns, **read), kind)
        df = lh.read(self.pyspark.spark_session, identifier, **read)
        if request.columns is not None:
            df = df.select(*request.columns)
        return df.limit(0) if nothing else df

"""Delta's schema and table properties brought up to an Iceberg snapshot before its files are added.

delta-rs's write transaction carries add and remove actions only, so a new column, a relaxed NOT NULL, a rename
under column mapping or a change of the statistics columns is committed as its own metadata-only Delta version,
tagged, right before the data version. Each step is idempotent: a retry finds the schema already there.
"""

from __future__ import annotations

from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, PostCommitHookProperties
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ...io.storage import StorageConfig
from ...properties import DeltaCommitKeys, Operation, SummaryKeys
from ...schema.spec import statistics_policy
from ...schema.statistics import DELTA_STATS_COLUMNS, StatisticsPolicy, delta_indexed_columns
from ...schema.type_mapping import delta_schema, narrow_integers
from .. import file_columns
from . import column_mapping


def evolve_schema(root_uri: str, storage: StorageConfig, delta: DeltaTable, table: Table, schema: Schema, snap: Snapshot) -> None:
    """Bring Delta's schema up to the snapshot's Iceberg schema before its files are added.

    delta-rs's create_write_transaction ignores its `schema` argument (it writes no metaData
    action), so new columns and relaxed NOT NULLs are committed first with delta-rs's
    ALTER TABLE operations: one metadata-only Delta version, tagged, right before the data version.
    Idempotent: a retry finds the columns already there.
    """
    target = {f.name: f for f in delta_schema(schema, narrow_integers(table.properties)).fields}
    current = {f.name: f for f in delta.schema().fields}
    props = CommitProperties(
        custom_metadata={SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)},
        max_commit_retries=0,
    )
    hooks = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
    names = file_columns.file_names(table, schema)
    if names is None and column_mapping.is_mapped(delta):
        # Mapped in Delta only (an upgrade stopped before its Iceberg property): the files hold the columns' names.
        names = {f.field_id: f.name for f in schema.fields} | {i: p for i, p in column_mapping.physical_names(delta).items() if schema.find_column_name(i) in {f.name for f in schema.fields}}
    if names is not None:
        # delta-rs refuses schema changes of a column-mapped table: the metaData is written here, one version for
        # any mix of new, renamed and dropped columns (ids and physical names as the table's files hold them).
        narrow = narrow_integers(table.properties)
        if not column_mapping.schema_matches(delta, schema, names, narrow):
            column_mapping.commit_schema(
                root_uri, storage, delta, schema, names, operation="CHANGE COLUMNS", commit_info=props.custom_metadata,
                configuration=statistics_policy(table, schema).delta_configuration(delta.metadata().configuration or {}), narrow=narrow,
            )
            delta.update_incremental()
        return
    new = [f for n, f in target.items() if n not in current]
    relaxed = [n for n in target if n in current and target[n].nullable and not current[n].nullable]
    if new:
        delta.alter.add_columns(new, commit_properties=props, post_commithook_properties=hooks)
    for name in relaxed:
        delta.alter.drop_column_not_null(name, commit_properties=props, post_commithook_properties=hooks)
    if new:
        delta.update_incremental()

def declare_statistics(root_uri: str, storage: StorageConfig, delta: DeltaTable, snap: Snapshot, policy: StatisticsPolicy, narrow: dict[int, str] | None = None) -> None:
    """Make Delta readers parse the statistics of exactly the policy's columns (a metadata-only version, tagged,
    when the columns changed: a new table, new columns, changed statistics properties). Idempotent."""
    current = delta.metadata().configuration or {}
    wanted = policy.delta_configuration(current)
    if all(current.get(k) == v for k, v in wanted.items()):
        return
    primitive = {f.name for f in policy.schema.fields if f.field_type.is_primitive}
    empty_list = current.get(DELTA_STATS_COLUMNS) == ""  # no column at all, which delta_indexed_columns does not read
    if not empty_list and delta_indexed_columns(policy.schema, current, policy.partition_columns) & primitive == set(policy.delta_columns()):
        return  # Delta readers parse the policy's columns already, e.g. by Delta's default of 32 columns
    if column_mapping.is_mapped(delta):  # delta-rs refuses SET TBLPROPERTIES on a column-mapped table
        column_mapping.commit_schema(
            root_uri, storage, delta, policy.schema, column_mapping.physical_names(delta), operation="SET TBLPROPERTIES",
            commit_info={DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)}, configuration=wanted, narrow=narrow,
        )
        delta.update_incremental()
        return
    if delta.protocol().min_writer_version >= 7:  # delta-rs's SET TBLPROPERTIES would add features the table does not use
        column_mapping.commit_configuration(
            root_uri, storage, delta, wanted, {SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)}
        )
        delta.update_incremental()
        return
    delta.alter.set_table_properties(
        wanted,
        raise_if_not_exists=False,
        commit_properties=CommitProperties(
            custom_metadata={SummaryKeys.OPERATION: Operation.SCHEMA_CHANGE, DeltaCommitKeys.ICEBERG_SCHEMA_ID: str(snap.schema_id)},
            max_commit_retries=0,
        ),
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False),
    )
    delta.update_incremental()

def schema_differs(delta: DeltaTable, schema: Schema, names: dict[int, str] | None = None, narrow: dict[int, str] | None = None) -> bool:
    """Whether the Iceberg schema asks anything of Delta's: other columns or types (refused or evolved by
    `DeltaMirror.sync`), or a column Iceberg made optional that Delta still declares NOT NULL (relaxed by `evolve_schema`)."""
    target = {f.name: f for f in delta_schema(schema, narrow).fields}
    current = {f.name: f for f in delta.schema().fields}
    if names is not None:
        return not column_mapping.schema_matches(delta, schema, names, narrow)
    if target.keys() != current.keys():
        return True
    return any(str(target[n].type) != str(current[n].type) or (target[n].nullable and not current[n].nullable) for n in target)


def changed_types(delta: DeltaTable, schema: Schema, narrow: dict[int, str] | None = None) -> list[str]:
    """Columns whose type in the Iceberg schema differs from Delta's (a widening to mirror); `narrow`: `narrow_integers`."""
    target = {f.name: str(f.type) for f in delta_schema(schema, narrow).fields}
    current = {f.name: str(f.type) for f in delta.schema().fields}
    return [n for n in target if n in current and target[n] != current[n]]

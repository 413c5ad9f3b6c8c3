"""Every `lakehouse.*` key this project reads or writes, and the defaults of new tables.

Three places carry them (in the style of pyiceberg's `TableProperties`):

* `TableProperties`: Iceberg table properties (set by users or by maintenance);
* `SummaryKeys`: Iceberg snapshot-summary keys (kept with each snapshot forever) and, with the same
  names, the Delta commitInfo of the version that mirrors the snapshot;
* `DeltaCommitKeys`: keys only the Delta commitInfo carries (the mapping back to Iceberg).
"""

from __future__ import annotations

METADATA_FOLDER = "_iceberg"  # `_`-prefixed: Delta's vacuum and Iceberg's orphan cleanup both skip it
DELTA_APP_ID = "lakehouse-iceberg"  # Delta txn app id; its version is the last mirrored Iceberg sequence number
# New Delta tables keep a change data feed: the mirror writes the cdc files of every rewrite (core/write/change_data.py).
# Their checkpoints carry each file's statistics as a struct too, so a process's first check reads the live files'
# row counts as one int64 column, not every file's path and statistics JSON (formats/delta/checkpoint_state.py).
STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
DEFAULT_DELTA_CONFIGURATION = {"delta.checkpointInterval": "10", "delta.enableChangeDataFeed": "true", STATS_AS_STRUCT: "true"}


class TableProperties:
    FORMATS = "lakehouse.formats"  # "iceberg,delta" (default) or "iceberg"
    SCHEMA_EVOLUTION = "lakehouse.schema-evolution"  # "false": this table refuses schema changes whatever the writer asks
    # What a write does about Delta versions another engine wrote: "refuse" (default) or "adopt" (see formats/delta/foreign_versions.py).
    DELTA_FOREIGN_COMMITS = "lakehouse.delta.foreign-commits"
    # The AWS Glue table the Delta side is registered as: "<database>.<name>", "<name>", or "none" (see formats/delta/glue.py).
    DELTA_GLUE_NAME = "lakehouse.delta.glue-name"

    # Maintenance settings: `lakehouse.maintenance.<setting with dashes>` (see maintenance/settings.py).
    MAINTENANCE_PREFIX = "lakehouse.maintenance."
    # The retention boundary both formats enforce (written by snapshot expiry and Delta log cleanup).
    RETENTION_MIN_TIMESTAMP = "lakehouse.retention.min-timestamp-ms"  # oldest retained snapshot's commit time
    RETENTION_DELTA_MIN_VERSION = "lakehouse.retention.delta-min-version"  # oldest retained Delta version

    # The small-writes warning (see small_writes.py).
    SMALL_WRITES_COMMITS = "lakehouse.small-writes.commits"
    SMALL_WRITES_WINDOW_SECONDS = "lakehouse.small-writes.window-seconds"
    SMALL_WRITES_FILE_BYTES = "lakehouse.small-writes.file-bytes"
    SMALL_WRITES_DEFAULTS = {SMALL_WRITES_COMMITS: 20, SMALL_WRITES_WINDOW_SECONDS: 3600, SMALL_WRITES_FILE_BYTES: 1 << 20}

    # The data files' Parquet codec and level (read as Java Iceberg reads them: schema/spec.py, parquet_compression).
    COMPRESSION_CODEC = "write.parquet.compression-codec"
    COMPRESSION_LEVEL = "write.parquet.compression-level"
    # Iceberg's own properties this project sets on new tables.
    DEFAULTS = {
        "format-version": "2",
        COMPRESSION_CODEC: "zstd",
        COMPRESSION_LEVEL: "3",
        # Old metadata JSON files are deleted as commits accumulate (each one holds the full snapshot list).
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "50",
        # Appends merge small manifests (Java Iceberg's default): the manifest list stays bounded, so
        # planning and commit time do not grow with the number of commits.
        "commit.manifest-merge.enabled": "true",
        # A snapshot changing at most this many partitions names them in its summary: a writer re-validating a lost
        # race reads them there instead of the snapshot's manifests (formats/iceberg/partition_summaries.py).
        "write.summary.partition-limit": "10",
    }
    # Iceberg's row-level write modes: how a merge, a CDC delete and a window overwrite remove rows from a
    # data file. "copy-on-write" (default) rewrites the file without them; "merge-on-read" leaves it and
    # records their positions: an Iceberg position-delete file and a Delta deletion vector (write_modes.md).
    MERGE_MODE = "write.merge.mode"
    DELETE_MODE = "write.delete.mode"
    UPDATE_MODE = "write.update.mode"
    ROW_LEVEL_MODES = (MERGE_MODE, DELETE_MODE, UPDATE_MODE)
    COPY_ON_WRITE, MERGE_ON_READ = "copy-on-write", "merge-on-read"
    METADATA_PATH = "write.metadata.path"
    TARGET_FILE_SIZE = "write.target-file-size-bytes"


def merge_on_read(properties: dict[str, str], mode_property: str = TableProperties.MERGE_MODE) -> bool:
    """Whether a table's properties choose merge-on-read for the operation `mode_property` names."""
    return properties.get(mode_property, TableProperties.COPY_ON_WRITE).strip().lower() == TableProperties.MERGE_ON_READ


class SummaryKeys:
    WRITE_ID = "lakehouse.write-id"  # idempotency key: a retried write with the same key never commits twice
    COMMIT_ID = "lakehouse.commit-id"  # unique per commit: tells a commit the catalog could not confirm among new snapshots
    WRITER = "lakehouse.writer"  # who wrote it (Dagster run id, partition), JSON
    OPERATION = "lakehouse.operation"  # one of Operation below
    DELTA_EXPECTED_VERSION = "lakehouse.delta.expected-version"  # the Delta version the mirror is about to write
    MERGE_KEYS = "lakehouse.merge.keys"
    MERGE_LIVE_FILES = "lakehouse.merge.live-files"
    MERGE_CANDIDATE_FILES = "lakehouse.merge.candidate-files"
    MERGE_REWRITTEN_FILES = "lakehouse.merge.rewritten-files"
    MERGE_STRATEGY = "lakehouse.merge.strategy"  # copy-on-write or merge-on-read (the table's write.merge.mode then)
    MERGE_DELETED_FILES = "lakehouse.merge.files-with-new-deletes"  # merge-on-read: data files given a new delete file
    MERGE_ROWS_DELETED = "lakehouse.merge.rows-deleted"  # merge-on-read: rows those delete files remove anew
    CONDITION = "lakehouse.condition"  # a delete's or update's condition (Spark SQL text)
    ERASURE_ID = "lakehouse.erasure.id"  # an erasure's id (core/write/condition.py erasure_id), never its condition
    UPDATE_SET = "lakehouse.update.set"  # an update's assignments, JSON {column: Spark SQL expression}
    # An update's pre- and post-images pair on these columns (those it leaves alone), as a merge's on its keys
    UPDATE_KEYS = "lakehouse.update.keys"
    COMPACTION_FILES_REWRITTEN = "lakehouse.compaction.files-rewritten"
    APPLIED_DELETE_FILES = "lakehouse.apply-deletes.delete-files"  # other engines' delete files an apply-deletes removed
    ROLLBACK_TARGET = "lakehouse.rollback.target-snapshot-id"  # the snapshot a rollback restored the rows of
    BRANCH = "lakehouse.branch"  # on a snapshot written to a branch other than main: that branch
    # On a snapshot that re-applied a branch's change on top of main: the branch and its head then
    PUBLISHED_BRANCH = "lakehouse.published.branch"
    PUBLISHED_SNAPSHOT = "lakehouse.published.snapshot-id"
    # + an upstream table's name: the upstream snapshot whose changes this commit's data includes (incremental inputs)
    CONSUMED_PREFIX = "lakehouse.consumed."
    # A streaming micro-batch (core/write/stream.py): the query's id and the batch id, also the Delta `txn` (appId, version)
    STREAM_QUERY_ID = "lakehouse.stream.query-id"
    STREAM_BATCH_ID = "lakehouse.stream.batch-id"
    PREFIX = "lakehouse."  # summary keys with this prefix are copied into the mirroring Delta commitInfo


class DeltaCommitKeys:
    ICEBERG_SNAPSHOT_ID = "lakehouse.iceberg.snapshot-id"  # authoritative snapshot <-> version mapping
    ICEBERG_SEQUENCE_NUMBER = "lakehouse.iceberg.sequence-number"
    ICEBERG_SCHEMA_ID = "lakehouse.iceberg.schema-id"  # on metadata-only schema-change versions
    REPLACED_FOR = "lakehouse.delta.replaced-for"  # on a CREATE OR REPLACE version ("type-widening")


class Operation:
    """Values of `SummaryKeys.OPERATION`."""

    APPEND = "append"
    OVERWRITE = "overwrite"
    OVERWRITE_WINDOW = "overwrite-window"
    MERGE = "merge"
    DELETE = "delete"  # rows matching a condition removed (core/write/by_condition.py)
    UPDATE = "update"  # columns of the rows matching a condition set anew (core/write/by_condition.py)
    ERASE = "erase"  # rows matching a condition removed from every file's bytes (core/maintenance/erase.py)
    LIVE_MANIFESTS = "live-manifests"  # manifests written again without DELETED entries; rows unchanged (erase.py)
    COMPACTION = "compaction"  # rows unchanged: the Delta mirror writes dataChange=false
    APPLY_DELETES = "apply-deletes"  # other engines' delete files applied by rewriting the data files they hit
    REPAIR = "repair"  # a Delta-only commit that makes the file sets equal again
    ROLLBACK = "rollback"  # the live files of an earlier snapshot, committed again (rollback.py)
    SCHEMA_CHANGE = "schema-change"  # a metadata-only Delta version before a data version
    DELTA_CONFIGURATION = "delta-configuration"  # a metadata-only Delta version of table properties (maintenance)
    ADOPT_DELTA = "adopt-delta"  # another engine's Delta versions brought into Iceberg (core/formats/delta/foreign_versions.py)
    IMPORT = "import"  # an existing table's live files brought under management as they are (maintenance/import_table.py)
    REVERT_DELTA = "revert-delta"  # another engine's Delta versions undone by a new Delta version
    CREATE_EMPTY = "create-empty"  # main's first snapshot, with no rows: what a branch of a new table forks from

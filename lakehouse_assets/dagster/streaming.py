"""A streaming ingestion as a Dagster asset: each materialization runs an `availableNow` Structured Streaming
query over a landing folder into a lakehouse table, then stops.

Spark's file source and the query's checkpoint decide what is new: each run ingests exactly the files that
landed since the last run, in micro-batches the stream sink (core/write/stream.py) commits once to both formats.
A retried run resumes from the checkpoint; a batch that a failed run had already committed commits nothing again.
The materialization reports the batches, rows and source offsets the run committed.
"""

import json
import os
from typing import Any, Mapping, Sequence

from dagster import AssetExecutionContext, Failure, MaterializeResult, MetadataValue, asset
from dagster_pyspark import PySparkResource

from ..core.model import MergeOptions
from ..core.spark import checkpoint as checkpoints
from ..core.spark.compat import foreach_batch_runs_here
from .resources import LakehouseResource


def streaming_ingest_asset(
    name: str,
    *,
    table: str,
    landing: str,
    schema: str,
    file_format: str = "json",
    mode: str = "append",
    merge: MergeOptions | None = None,
    partition_by: Sequence[str] | None = None,
    checkpoint: str | None = None,
    max_files_per_batch: int | None = None,
    reader_options: Mapping[str, str] | None = None,
    key_prefix: Sequence[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
):
    """An asset whose materialization ingests the new files of `landing` into `table` (an `availableNow` stream).

    `landing`: a folder or URI; `{warehouse}` in it stands for the lakehouse resource's warehouse.
    `schema`: the files' schema as a DDL string (a stream never infers one). `checkpoint`: the query's checkpoint
    folder (default: `<warehouse>/_checkpoints/<table>`), which holds what was ingested: keep it with the table.
    `max_files_per_batch`: files per micro-batch (default: all new files in one batch). `reader_options`: the file
    source's options; JSON and CSV files are read with `mode=FAILFAST` unless they say otherwise, so a malformed
    record stops the run (naming its file) instead of landing as nulls."""
    options = {**({"mode": "FAILFAST"} if file_format in PARSED_FORMATS else {}), **dict(reader_options or {})}

    @asset(
        name=name,
        key_prefix=list(key_prefix) if key_prefix else None,
        group_name=group_name,
        kinds={"spark", "iceberg", "deltalake"},
        description=description or f"Files landing in {landing}, streamed into {table} exactly once (availableNow).",
    )
    def _ingest(context: AssetExecutionContext, lakehouse: LakehouseResource, pyspark: PySparkResource) -> MaterializeResult:
        lh = lakehouse.get()
        spark = pyspark.spark_session
        location = checkpoint or os.path.join(lh.warehouse, "_checkpoints", table)
        source = landing.format(warehouse=lh.warehouse)
        if (folder := local_folder(source)) is not None:
            os.makedirs(folder, exist_ok=True)  # an empty landing folder is a run with nothing to ingest
        # The query's id, fixed in its checkpoint before its first start: a sink on Spark Connect cannot ask for it.
        stream_id = checkpoints.query_id(lh.storage.filesystem, location)
        sink = lh.stream_writer(table, mode, merge=merge, partition_by=partition_by, query_id=stream_id, writer={"dagster_run_id": context.run_id})
        reader = spark.readStream.format(file_format).schema(schema).options(**options)
        if max_files_per_batch:
            reader = reader.option("maxFilesPerTrigger", max_files_per_batch)
        query = reader.load(source).writeStream.foreachBatch(sink).option("checkpointLocation", location).trigger(availableNow=True).start()
        try:
            query.awaitTermination()
        except Exception as e:
            named = _named_files(e, lh, spark, location, source, table, file_format, schema, options)
            if named is None:
                raise
            raise named from e
        finally:
            query.stop()
        progress = [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]
        if foreach_batch_runs_here(spark):
            metadata = run_metadata(stream_id, location, sink.results, progress)
        else:  # the sink ran in the Connect server's Python process: what this run committed, from the table
            metadata = connect_run_metadata(stream_id, location, _commits_of_run(lh, table, context.run_id), progress)
        context.log.info("stream %s into %s: %s batch(es) committed", stream_id, table, metadata["batches_committed"].value)
        return MaterializeResult(metadata=metadata)

    return _ingest


PARSED_FORMATS = ("json", "csv", "xml")  # formats whose reader takes a parse `mode`


def _named_files(error: Exception, lh, spark, location: str, source: str, table: str, file_format: str, schema: str, options) -> Failure | None:
    """The failure naming the files of the failed batch that cannot be read (None: no such file, the error stands)."""
    batch = checkpoints.failed_batch(error)
    files = checkpoints.batch_files(lh.storage.filesystem, location, batch) if batch is not None else []
    bad = checkpoints.unreadable_files(spark, files, file_format, schema, options) if files else {}
    if not bad:
        return None
    listed = "; ".join(f"{path} ({reason})" for path, reason in bad.items())
    return Failure(
        description=(
            f"Table {table}: batch {batch} of the stream over {source} stopped on {len(bad)} file(s) that cannot be read as "
            f"{file_format} with the schema {schema!r}: {listed}. Nothing of batch {batch} was committed in either format. Replace "
            "or fix the file(s) (or remove them from the landing folder), then materialize again: the run resumes at that batch."
        )
    )


def _commits_of_run(lh, table: str, run_id: str) -> list[dict[str, Any]]:
    """The table's commits written by Dagster run `run_id`, newest first (none if the table does not exist yet)."""
    from ..core.errors import TableNotFound

    try:
        return [c for c in lh.history(table) if c["writer"].get("dagster_run_id") == run_id]
    except TableNotFound:
        return []


def connect_run_metadata(query_id: str, checkpoint: str, commits: list[dict[str, Any]], progress: list[dict[str, Any]]) -> dict[str, Any]:
    """`run_metadata` from the run's commits (newest first), for a sink that ran in another process: the rows are those
    the commits added (for a merge, the rewritten files' rows too), and batches it skipped as replays are not known."""
    last = commits[0] if commits else None
    return _metadata(
        query_id, checkpoint, progress, batches=len(commits), rows=sum(c["rows_added"] for c in commits),
        removed=sum(c["rows_removed"] for c in commits), files=sum(c["files_added"] for c in commits),
        snapshot=last["iceberg_snapshot_id"] if last else None, version=last["delta_version"] if last else None,
        lagging=last is not None and last["delta_version"] is None,
    )


def end_offsets(progress: list[dict[str, Any]]) -> list[Any]:
    """Each batch's source end offsets from the query's progress (a Connect client gets them as JSON text)."""
    offsets = [s.get("endOffset") for p in progress for s in p.get("sources", [])]
    return [json.loads(o) if isinstance(o, str) else o for o in offsets if o is not None]


def local_folder(uri: str) -> str | None:
    """The local path of a plain path or a file:// URI (None: an object store)."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    return None if "://" in uri else uri


def run_metadata(query_id: str, checkpoint: str, results: list, progress: list[dict[str, Any]]) -> dict[str, Any]:
    """What one run committed: the batches (new and replayed), rows, the snapshot and Delta version, the source offsets."""
    committed = [r for r in results if not r.duplicate_of_earlier_write]
    last = results[-1] if results else None
    return _metadata(
        query_id, checkpoint, progress, batches=len(committed), rows=sum(r.rows_written for r in committed),
        removed=sum(r.rows_removed for r in committed), files=sum(r.files_added for r in committed),
        snapshot=last.iceberg_snapshot_id if last else None, version=last.delta_version if last else None,
        lagging=any(r.delta_lagging for r in results), replayed=len(results) - len(committed),
    )


def _metadata(query_id, checkpoint, progress, *, batches, rows, removed, files, snapshot, version, lagging, replayed=None) -> dict[str, Any]:
    def optional_int(v):
        return MetadataValue.int(v) if v is not None else MetadataValue.null()

    md = {
        "stream_query_id": MetadataValue.text(query_id),
        "checkpoint": MetadataValue.path(checkpoint),
        "batches_committed": MetadataValue.int(batches),
        "dagster/row_count": MetadataValue.int(rows),
        "rows_removed": MetadataValue.int(removed),
        "files_added": MetadataValue.int(files),
        "source_offsets": MetadataValue.json({"end_offsets": end_offsets(progress)}),
        "iceberg_snapshot_id": optional_int(snapshot),
        "delta_version": optional_int(version),
        "delta_lagging": MetadataValue.bool(lagging),
    }
    if replayed is not None:
        md["batches_replayed"] = MetadataValue.int(replayed)
    return md

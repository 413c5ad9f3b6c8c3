"""A Structured Streaming query's checkpoint: the query's id, and what a file source read in one micro-batch.

The query's id lives in the checkpoint's `metadata` file (`{"id": "<uuid>"}`, Spark's StreamMetadata), written at the
query's first start and read at every restart. A sink on a Spark Connect session runs in the server's Python process
and cannot ask for it, so `query_id` fixes it before the first start: Spark then adopts it, and the sink is told it.

A batch that fails on a malformed file stops with Spark's parse error, which names no file, and foreachBatch hands
the sink an RDD-backed DataFrame that knows none either. The query's checkpoint does: the file source logs each
batch's files under `sources/<n>/<batch>` (a `v1` line, then one JSON entry per file; every tenth batch the log
is compacted into `<batch>.compact`, whose entries carry their `batchId`). Reading each of those files again with
the stream's reader settings, as a batch job, tells which one is at fault. Used on failure only.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Callable, Mapping

_BATCH = re.compile(r"\bbatch (\d+): ")
_ERROR_CONDITION = re.compile(r"\[[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\][^\n]*")  # "[MALFORMED_RECORD_IN_PARSING...] Malformed..."


def query_id(filesystem: Callable, checkpoint: str) -> str:
    """The id of the query whose checkpoint is `checkpoint`: from its `metadata` file, written now (a new id) if the
    query never ran. `filesystem(uri)` gives the pyarrow file system and path of a URI (`StorageConfig.filesystem`)."""
    fs, path = filesystem(checkpoint.rstrip("/") + "/metadata")
    try:
        with fs.open_input_stream(path) as f:
            return json.loads(f.read().decode())["id"]
    except FileNotFoundError:
        pass
    new = str(uuid.uuid4())
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(json.dumps({"id": new}).encode() + b"\n")
    return new


def failed_batch(error: BaseException) -> int | None:
    """The batch id the stream sink's error names (core/write/stream.py: "..., batch N: ...")."""
    match = _BATCH.search(str(error))
    return int(match.group(1)) if match else None


def batch_files(filesystem: Callable, checkpoint: str, batch_id: int) -> list[str]:
    """The files every file source of the query read in batch `batch_id`, from its checkpoint (empty: not found).
    `filesystem(uri)` gives the pyarrow file system and path of a URI (`StorageConfig.filesystem`)."""
    from pyarrow.fs import FileSelector, FileType

    fs, sources = filesystem(checkpoint.rstrip("/") + "/sources")
    try:
        source_dirs = [i.path for i in fs.get_file_info(FileSelector(sources, allow_not_found=True)) if i.type == FileType.Directory]
    except (FileNotFoundError, OSError):
        return []
    files: list[str] = []
    for folder in sorted(source_dirs):
        names = {i.base_name for i in fs.get_file_info(FileSelector(folder)) if i.type == FileType.File}
        compacted = sorted((int(n.split(".")[0]), n) for n in names if n.endswith(".compact") and n.split(".")[0].isdigit())
        name = str(batch_id) if str(batch_id) in names else next((n for b, n in compacted if b >= batch_id), None)
        if name is None:
            continue
        with fs.open_input_stream(f"{folder}/{name}") as f:
            lines = f.read().decode().splitlines()[1:]  # the first line is the log's version
        entries = [json.loads(line) for line in lines if line.strip()]
        files += [e["path"] for e in entries if e.get("batchId", batch_id) == batch_id and e.get("action", "add") == "add"]
    return files


def unreadable_files(spark, files: list[str], file_format: str, schema: str, options: Mapping[str, str]) -> dict[str, str]:
    """Each of `files` that the stream's reader cannot read -> the first line of the error."""
    out = {}
    for path in files:
        try:
            spark.read.format(file_format).schema(schema).options(**dict(options)).load(path).count()
        except Exception as e:  # noqa: BLE001 - any reader error is what the user must see
            out[path] = error_summary(e)
    return out


def error_summary(error: BaseException, limit: int = 300) -> str:
    """Spark's own message for `error`: its error condition line where there is one (py4j's first line only names
    the JVM call that failed), else the first line."""
    text = str(error)
    match = _ERROR_CONDITION.search(text)
    line = match.group(0) if match else next((x for x in text.splitlines() if x.strip()), type(error).__name__)
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"

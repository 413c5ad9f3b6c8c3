"""The mirror's Delta versions: each whole commit (add, remove, cdc, txn, commitInfo), written here.

delta-rs's Python commit (`create_write_transaction`) brings a copy of its state of every live file up to the new
version once it is written, and drops it: its cost follows the table, not the change (0.15 s at 100,000 files). It
cannot commit `cdc` actions either. So every data version of the mirror is written by this module, following the
Delta protocol: one JSON action per line in `_delta_log/<version>.json`, created put-if-absent through obstore (as
the column-mapping versions, `delta_column_mapping`). A concurrent writer that took the version first makes it raise
deltalake's CommitFailedError, which the mirror's retry policy handles as any lost race (re-read the log; the txn
tag tells what is left), never an overwrite. The followed log (followed_log.py) records the commit without reading
it back. Everything else about the log (checkpoints, reading it) stays delta-rs's. A checkpoint walks every live
file, so no write writes one: maintenance does (`delta_checkpoint`, requested by the checkpoint sensor once the
table's `delta.checkpointInterval` commits have landed since the last one).
"""

from __future__ import annotations

import json
import time
from typing import Mapping

from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction, Transaction

from ...errors import MirrorRefused
from ...io.storage import StorageConfig, delete_files, delta_uri_path, join_uri
from . import features
from .column_mapping import CLIENT, put_if_absent
from .followed_log import FollowedLog, read_commit

CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
CHANGE_DATA_DIR = "_change_data"  # where change data files live, under the Delta root (the protocol's convention)
_APPEND_ONLY = "delta.appendOnly"


def cdc_actions(storage: StorageConfig, root_uri: str, version: int) -> list[dict] | None:
    """The `cdc` actions of one Delta version, read from its commit file (delta-rs exposes none of them);
    None when the commit file is gone (cleaned up after a checkpoint)."""
    actions = read_commit(storage, root_uri, version)
    return None if actions is None else [a["cdc"] for a in actions if "cdc" in a]


def feed_enabled(delta: DeltaTable) -> bool:
    """Whether the table's change data feed is on: its data-changing rewrites then carry cdc files."""
    return str((delta.metadata().configuration or {}).get(CHANGE_DATA_FEED, "false")).lower() == "true"


def commit(
    root_uri: str,
    storage: StorageConfig,
    delta: FollowedLog,
    actions: list[AddAction | RemoveAction | dict],
    cdc: list[dict],
    transactions: list[Transaction],
    metadata: Mapping[str, str],
    protocol: dict | None = None,
    removed_rows: Mapping[str, int] | None = None,
) -> int:
    """Commit `actions` and the `cdc` actions as version `delta.version() + 1`, with the `txn` actions of
    `transactions` (the mirror's own, and a streaming micro-batch's), and record it in `delta`. Returns that version.
    On any failure the cdc files are deleted (nothing referenced them).
    `actions` given as dicts are already rendered (delta_deletion_vectors: actions carrying a deletion vector);
    `protocol`: a `protocol` action the version raises the table to; `removed_rows`: {path: rows} of files the version
    removes, written into their remove actions' statistics (numRecords alone, the protocol's optional `stats`: no
    column value), so a reader of the log knows the live rows without looking up the files' adds (followed_log.py)."""
    _refuse_what_the_protocol_forbids(root_uri, delta, actions)
    version = delta.version() + 1
    now = int(time.time() * 1000)
    info = {"timestamp": now, "operation": "WRITE", "operationParameters": {"mode": "Append"}, "clientVersion": CLIENT,
            "isBlindAppend": False, **metadata}
    lines = [{"commitInfo": info}] + ([protocol] if protocol else []) + [{"txn": {"appId": t.app_id, "version": t.version, "lastUpdated": now}} for t in transactions]
    lines += [_action_json(a, removed_rows or {}) for a in actions]
    lines += [{"cdc": c} for c in cdc]
    body = "".join(json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n" for line in lines)
    try:
        put_if_absent(root_uri, storage, f"_delta_log/{version:020d}.json", body.encode())
    except BaseException:
        delete_files(storage, [join_uri(root_uri, c["path"]) for c in cdc])
        raise
    delta.record(version, lines)
    return version


def _refuse_what_the_protocol_forbids(root_uri: str, delta: FollowedLog, actions: list) -> None:
    """The writer's side of the Delta protocol that the table declares (delta-rs's commit checked it for its own
    versions): a feature this writer cannot keep, or a data-changing remove on an append-only table, is refused as
    MirrorRefused (the Iceberg commit stands, Delta lags, the write's warning says why) before anything is written."""
    if reasons := features.refusals(delta):
        raise MirrorRefused(f"The Delta table at {root_uri} declares table features the mirror cannot write: {'; '.join(reasons)}. Delta was left as it was.")
    removes = [a for a in actions if isinstance(a, RemoveAction) or (isinstance(a, dict) and "remove" in a)]
    data_change = any(a.data_change if isinstance(a, RemoveAction) else a["remove"].get("dataChange", True) for a in removes)
    if data_change and str((delta.metadata().configuration or {}).get(_APPEND_ONLY, "false")).lower() == "true":
        raise MirrorRefused(
            f"The Delta table at {root_uri} sets {_APPEND_ONLY}=true, and this version would remove data files with a data "
            "change, which the Delta protocol forbids on an append-only table. Delta was left as it was."
        )


def _action_json(a: AddAction | RemoveAction | dict, removed_rows: Mapping[str, int]) -> dict:
    if isinstance(a, dict):
        return a
    if isinstance(a, AddAction):
        return {"add": {"path": delta_uri_path(a.path), "partitionValues": dict(a.partition_values), "size": a.size,
                        "modificationTime": a.modification_time, "dataChange": a.data_change, "stats": a.stats}}
    remove = {"path": delta_uri_path(a.path), "dataChange": a.data_change, "deletionTimestamp": a.deletion_timestamp, "extendedFileMetadata": True,
              "partitionValues": dict(a.partition_values or {})}
    if a.size is not None:
        remove["size"] = a.size
    if (rows := removed_rows.get(a.path)) is not None:
        remove["stats"] = json.dumps({"numRecords": rows})
    return {"remove": remove}

"""The deletion vectors of a Delta version's live files, from the log itself.

delta-rs (1.6.6) applies deletion vectors when it reads, but its add actions carry no `deletionVector`
descriptor, and `verify`, the readers of a Delta version and retention need exactly those: which file's rows a
vector deletes, and which vector files a version references. So the log is replayed here: the latest
checkpoint at or before the version (its live adds), then each commit after it in order (an add makes a path
live with its vector, a remove ends it). Metadata only; the vectors themselves are read by
`delta_deletion_vectors.read_vector`.
"""

from __future__ import annotations

import json
from typing import Any

from ..io.storage import StorageConfig, delta_path, join_uri
from .delta_deletion_vectors import Descriptor
from .delta_logged_stats import CHECKPOINT_FILE, COMMIT_FILE


def live_vectors(storage: StorageConfig, root_uri: str, version: int) -> dict[str, dict[str, Any] | None]:
    """Decoded relative path -> the `deletionVector` descriptor (JSON) of its live add at `version` (None: no vector).
    FileNotFoundError when the log cannot be replayed to `version` (a commit missing, no checkpoint after it)."""
    fs, log = storage.filesystem(join_uri(root_uri, "_delta_log"))
    from pyarrow.fs import FileSelector

    names = [i.base_name for i in fs.get_file_info(FileSelector(log, allow_not_found=True)) if i.is_file]
    checkpoints = sorted({int(m.group(1)) for n in names if (m := CHECKPOINT_FILE.match(n)) and int(m.group(1)) <= version})
    live: dict[str, dict[str, Any] | None] = {}
    since = checkpoints[-1] if checkpoints else -1
    if since >= 0:
        for part in [n for n in names if (m := CHECKPOINT_FILE.match(n)) and int(m.group(1)) == since]:
            _replay_checkpoint(fs, f"{log}/{part}", live)
    commits = {int(m.group(1)) for n in names if (m := COMMIT_FILE.match(n))}
    for v in range(since + 1, version + 1):
        if v not in commits:
            raise FileNotFoundError(f"the Delta log has no commit {v} and no checkpoint after it up to version {version}")
        with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
            for line in f.read().decode().splitlines():
                action = json.loads(line) if line.strip() else {}
                if (remove := action.get("remove")) is not None:
                    live.pop(delta_path(remove["path"]), None)
                if (add := action.get("add")) is not None:
                    live[delta_path(add["path"])] = add.get("deletionVector")
    return live


def _replay_checkpoint(fs, path: str, live: dict[str, dict[str, Any] | None]) -> None:
    import pyarrow.parquet as pq

    with fs.open_input_file(path) as f:
        adds = pq.read_table(f, columns=["add"]).column("add").to_pylist()
    for add in adds:
        if add is not None and add.get("path") is not None:
            live[delta_path(add["path"])] = _descriptor_json(add.get("deletionVector"))


def _descriptor_json(dv: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint's struct (every field present, NULL when unset) as the JSON descriptor."""
    if not dv or dv.get("storageType") is None:
        return None
    return {k: v for k, v in dv.items() if v is not None}


def vectors_of(live: dict[str, dict[str, Any] | None]) -> dict[str, Descriptor]:
    """The live files that carry a vector, with its descriptor."""
    return {p: Descriptor.from_json(d) for p, d in live.items() if d is not None}


def vector_file_uris(storage: StorageConfig, root_uri: str, versions: range) -> set[str]:
    """URIs of the vector files (storage types u and p) the live files of any of `versions` reference."""
    if not versions:
        return set()
    out: set[str] = set()
    first = live_vectors(storage, root_uri, versions[0])
    out |= {u for d in vectors_of(first).values() if (u := d.file_uri(root_uri)) is not None}
    fs, log = storage.filesystem(join_uri(root_uri, "_delta_log"))
    for v in versions[1:]:  # every add after the first version is live at its own version
        with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
            for line in f.read().decode().splitlines():
                add = (json.loads(line) if line.strip() else {}).get("add")
                if add is not None and add.get("deletionVector"):
                    if (u := Descriptor.from_json(add["deletionVector"]).file_uri(root_uri)) is not None:
                        out.add(u)
    return out

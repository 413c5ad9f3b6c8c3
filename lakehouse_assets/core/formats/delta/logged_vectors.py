"""The deletion vectors of a Delta version's live files, and the vector files a range of versions references.

delta-rs (1.6.6) applies deletion vectors when it reads, but its add actions carry no `deletionVector`
descriptor, and `verify`, the readers of a Delta version and retention need exactly those: which file's rows a
vector deletes, and which vector files a retained version references. The log's own adds say
(`delta_deletion_vectors.live_adds` replays it); the vectors themselves are read by `read_vector`.
Metadata only. A commit file the replay needs and cannot read raises OSError (FileNotFoundError).
"""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import DeltaTable

from ...io.storage import StorageConfig, delta_path, join_uri
from . import deletion_vectors


def live_vectors(storage: StorageConfig, root_uri: str, delta: DeltaTable) -> dict[str, deletion_vectors.Descriptor]:
    """Relative (decoded) path -> the vector its live add carries at `delta`'s loaded version; files without one left out."""
    if deletion_vectors.FEATURE not in (delta.protocol().reader_features or []):
        return {}
    paths = {delta_path(p) for p in pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist()}
    adds = deletion_vectors.live_adds(storage, root_uri, delta.version(), paths, vectors_only=True)
    return {p: d for p, a in adds.items() if (d := deletion_vectors.descriptor_of(a)) is not None}


def vector_file_uris(storage: StorageConfig, root_uri: str, first: DeltaTable, last_version: int) -> set[str]:
    """URIs of the vector files (storage types u and p) that the live files of any version from `first` (loaded at
    the first version of the range) to `last_version` reference: those live at the first, and every add after it
    (each is live at its own version)."""
    out = {u for d in live_vectors(storage, root_uri, first).values() if (u := d.file_uri(root_uri)) is not None}
    fs, log = storage.filesystem(join_uri(root_uri, "_delta_log"))
    for v in range(first.version() + 1, last_version + 1):
        with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
            for line in f.read().decode().split("\n"):  # JSON lines end at "\n" only: splitlines() also breaks at U+2028, U+0085... inside a string value
                add = (json.loads(line) if line.strip() else {}).get("add")
                if add is not None and (d := deletion_vectors.descriptor_of(add)) is not None and (u := d.file_uri(root_uri)) is not None:
                    out.add(u)
    return out

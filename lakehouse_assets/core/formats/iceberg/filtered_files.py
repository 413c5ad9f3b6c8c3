"""The live data files a row filter may match, planned as pyiceberg plans them, decoded in the caller's thread.

pyiceberg's scan planning keeps the manifests whose partition summaries the filter allows, then the entries whose
partition values and column bounds it allows, with pyiceberg's own evaluators, which are used here as they are. It
maps the manifests over its thread pool, where decoding Avro in Python holds the interpreter lock: the threads take
turns on it and cost more than one thread does. Planning a merge keyed by `id` alone over 1,000,000 files (500
manifests) took 53.7 s on pyiceberg's pool on 2 cores and 36.0 s in one thread (docs/performance.md). Here the
manifests are decoded one after another in the caller's thread. On an object store their bytes are fetched ahead on
a few threads, so each request's latency overlaps the decoding (waiting on the network releases the lock); on a local
disk the fetching threads cost more than they save (39.9-42.2 s against 35.9-36.4 s at 1,000,000 files), so the
decoding thread reads them itself. Delete files are not planned: the callers want data files (a merge's candidates,
an overwrite's window, a delete's or an update's files).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from pyiceberg.expressions import BooleanExpression
from pyiceberg.io import FileIO, InputFile, InputStream
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import ManifestGroupPlanner, Table, _open_manifest
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import KeyDefaultDict

from ...collector import collector_paused
from .. import manifest_lists

# Manifests fetched ahead of the one being decoded: about 320 KB each at 2,000 entries.
FETCH_AHEAD = 8


def filtered_data_files(table: Table, snapshot: Snapshot, row_filter: BooleanExpression) -> list[DataFile]:
    """The live data files of `snapshot` that may hold rows `row_filter` matches."""
    planner = ManifestGroupPlanner(table.metadata, table.io, row_filter)
    keeps_manifest = KeyDefaultDict(planner._build_manifest_evaluator)
    keeps_partition = KeyDefaultDict(planner._build_partition_evaluator)
    keeps_file = planner._build_metrics_evaluator()
    manifests = [
        m for m in manifest_lists.manifests(table.io, snapshot)
        if m.content == ManifestContent.DATA and keeps_manifest[m.partition_spec_id](m)
    ]
    out: list[DataFile] = []
    with collector_paused():  # (decoding allocates an object per entry field; none is garbage)
        for manifest, fetched in _fetched_ahead(table.io, manifests):
            out += [e.data_file for e in _open_manifest(fetched, manifest, keeps_partition[manifest.partition_spec_id], keeps_file)]
    return out


def _fetched_ahead(file_io: FileIO, manifests: list[ManifestFile]) -> Iterator[tuple[ManifestFile, FileIO]]:
    """Each manifest with a FileIO that serves its bytes: on an object store fetched up to FETCH_AHEAD manifests
    ahead, on a local disk `file_io` itself."""
    if len(manifests) <= 1 or all(_is_local(m.manifest_path) for m in manifests):
        yield from ((m, file_io) for m in manifests)
        return
    with ThreadPoolExecutor(max_workers=FETCH_AHEAD) as pool:
        pending = [pool.submit(_read, file_io, m.manifest_path) for m in manifests[:FETCH_AHEAD]]
        for i, manifest in enumerate(manifests):
            data = pending[i].result()
            pending[i] = None  # (its bytes go once decoded)
            if i + FETCH_AHEAD < len(manifests):
                pending.append(pool.submit(_read, file_io, manifests[i + FETCH_AHEAD].manifest_path))
            yield manifest, _Fetched(manifest.manifest_path, data)


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file:")


def _read(file_io: FileIO, path: str) -> bytes:
    with file_io.new_input(path).open() as f:
        return f.read()


class _Fetched(FileIO):
    """The one manifest's bytes, as `ManifestFile.fetch_manifest_entry` opens them."""

    def __init__(self, path: str, data: bytes):
        super().__init__()
        self._input = _BytesInput(path, data)

    def new_input(self, location: str) -> InputFile:
        return self._input

    def new_output(self, location: str):
        raise NotImplementedError("a fetched manifest is read only")

    def delete(self, location) -> None:
        raise NotImplementedError("a fetched manifest is read only")


class _BytesInput(InputFile):
    def __init__(self, location: str, data: bytes):
        super().__init__(location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._data)

"""The manifests a snapshot lists, read once per manifest list in a process.

pyiceberg's `Snapshot.manifests` reads the manifest list file again on every call (it keeps the ManifestFile objects,
not the lists). A commit asks twice of the same snapshot, which under the commit lock is usually one another writer
has just committed: whether it holds delete files (which producer the commit needs), then which manifests the
overwrite rewrites. A manifest list is written once and never changed, so its manifests are kept by its location.
The project's own commits keep the list they write (`remember`): the check after a write, the next write's commit and
the table's health then read none back (at a million files a list holds about 500 manifests: 0.02 s a read).
"""

from __future__ import annotations

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.snapshots import Snapshot

from ..memo import ByImmutableFiles

# Manifests in all (a table of a million files lists about a hundred); the ManifestFile objects are pyiceberg's own.
_LISTS = ByImmutableFiles(max_weight=20_000, weight=len)


def manifests(io: FileIO, snapshot: Snapshot) -> tuple[ManifestFile, ...]:
    """`snapshot.manifests(io)`, the list read once."""
    if not snapshot.manifest_list:
        return tuple(snapshot.manifests(io))
    return _LISTS.get(snapshot.manifest_list, lambda: tuple(snapshot.manifests(io)))


def remember(manifest_list: str, manifests: list[ManifestFile]) -> None:
    """The manifests a commit of this process wrote into `manifest_list`, as a reader reads them back."""
    _LISTS.get(manifest_list, lambda: tuple(manifests))

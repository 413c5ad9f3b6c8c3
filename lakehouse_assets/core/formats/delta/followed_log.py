"""A Delta log followed commit by commit, at a cost that follows what changed, not what the table holds.

delta-rs's `DeltaTable` holds the state of every live file and brings it to a newer version by merging that
version's actions into all of it (`update_incremental`); its own commit does the same to a copy once the version
is written. At 100,000 files that is 0.15 s per commit, twice per write (the commit, then the check). What a
write and the formats-agree check need of the log is far less: its version, metadata and protocol, the mirror's
transaction version, the commitInfo of the newest versions (foreign_versions.py), and the live files' totals.

`FollowedLog` keeps one read of the log (the base) and the commits after it (the tail), each parsed once from its
commit file. The base is the log's newest checkpoint read with pyarrow (checkpoint_state.py: metadata, protocol,
transaction versions, each live file's path and row count), or, for a log without such a checkpoint, delta-rs's
read, which holds every live file's entry with its statistics:
- `update_incremental` reads only the commit files after the newest version it knows (one missing file ends it);
- `record` adds a commit this process just wrote (log_commit.py) without reading it back;
- a commit in the tail that changes the table's metadata or protocol, a tail of `MAX_TAIL` commits, or one that
  would touch more than `MAX_TAIL_FILES` files (an import, a rewrite of the whole table), is merged into the base (a
  checkpoint's read takes the tail's files and metadata; delta-rs merges its own), so `metadata`, `schema` and
  `protocol` are always the base's and always current;
- any other `DeltaTable` method needs delta-rs's whole state (`table()`): a checkpoint's read gives way to
  delta-rs's read of the log at the followed version, a delta-rs base merges the tail, and the call goes to it. Its
  cost then follows the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from ...io.storage import StorageConfig, join_uri
from .checkpoint_state import CheckpointState, num_records, totals_of

MAX_TAIL = 1000  # commits kept beside the base before delta-rs merges them (memory follows the files they touched)
MAX_TAIL_FILES = 10_000  # files a tail touches before delta-rs merges it: what each `live_totals` walks stays small


@dataclass
class _Tail:
    """The commits after the base, net: raw (as logged) paths added with their row counts, base paths removed since, txn versions."""

    added: dict[str, int | None] = field(default_factory=dict)  # path -> its newest add's numRecords, parsed once
    removed: dict[str, int | None] = field(default_factory=dict)  # base path -> the numRecords its remove carries
    transactions: dict[str, int] = field(default_factory=dict)
    commit_infos: dict[int, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None  # the newest metaData and protocol actions (a checkpoint's read takes them as it merges)
    protocol: dict[str, Any] | None = None


@dataclass(frozen=True)
class LiveTotals:
    files: int
    rows: int
    files_without_row_count: int


class FollowedLog:
    """The Delta log at `root_uri`, read once (`base`: its checkpoint's read, or delta-rs's) and followed from there by its commit files."""

    def __init__(self, base: DeltaTable | CheckpointState, root_uri: str, storage: StorageConfig):
        self.base = base
        self.root_uri = root_uri
        self.storage = storage
        self._version = base.version()
        self._tail = _Tail()
        self._base_files: tuple[int, pa.Table | None, LiveTotals] | None = None  # (version, path and num_records of the base's live adds when read, their totals)

    # ---- what a write and the check read, from the base and the tail

    @property
    def table_uri(self) -> str:
        return self.root_uri if isinstance(self.base, CheckpointState) else self.base.table_uri

    def base_version(self) -> int:
        """The version the base was read or merged at (the tail holds the commits after it)."""
        return self.base.version()

    def holds_every_file(self) -> bool:
        """Whether the base is delta-rs's state of every live file (not a checkpoint's read)."""
        return isinstance(self.base, DeltaTable)

    def version(self) -> int:
        self._follow_base()
        return self._version

    def metadata(self):
        self._follow_base()
        return self.base.metadata()

    def schema(self):
        self._follow_base()
        return self.base.schema()

    def protocol(self):
        self._follow_base()
        return self.base.protocol()

    def transaction_version(self, app_id: str) -> int | None:
        self._follow_base()
        if app_id in self._tail.transactions:
            return self._tail.transactions[app_id]
        return self.base.transaction_version(app_id)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The commitInfo of the newest `limit` versions, newest first, each with its `version`."""
        return commit_history(self.storage, self.root_uri, self.version(), limit, self._tail.commit_infos)

    def live_totals(self) -> LiveTotals:
        """Live files, their rows, and files whose add carries no row count, at `version()`."""
        self._follow_base()
        totals = self._base_totals()
        tail = self._tail
        # The base's totals less the files the tail removed. A remove that carries its file's row count (the mirror's
        # do, log_commit.py) is taken at its word; only the others are looked up among the base's files, a scan of
        # all of them (0.02 s at a million, once their paths are read), and all of them when the base holds files
        # without a row count (whose removal the totals must see). An add of a path the base holds with no remove
        # before it is not looked up: that version is not the mirror's, and the check names it (foreign_versions.py,
        # the changed file sets).
        trusted = not totals.files_without_row_count
        counted = [n for n in tail.removed.values() if n is not None and trusted]
        unknown = [p for p, n in tail.removed.items() if n is None or not trusted]
        counts = pa.array([], pa.int64())
        if unknown:
            if (base := self._base_adds()) is None:  # the checkpoint is gone: delta-rs read the log, tail and all
                return self.live_totals()
            counts = base.filter(pc.is_in(base.column("path"), value_set=pa.array(sorted(unknown), pa.string()))).column("num_records")
        added = list(tail.added.values())
        return LiveTotals(
            files=totals.files - len(counted) - len(counts) + len(added),
            rows=totals.rows - sum(counted) - (pc.sum(counts).as_py() or 0) + sum(n for n in added if n is not None),
            files_without_row_count=totals.files_without_row_count - counts.null_count + sum(n is None for n in added),
        )

    # ---- following the log

    def update_incremental(self) -> None:
        """Read the commits written since `version()` (by this process or any other)."""
        self._follow_base()
        while (actions := self._read(self._version + 1)) is not None:
            self._add(self._version + 1, actions)

    def record(self, version: int, actions: list[dict[str, Any]]) -> None:
        """A commit this process wrote as `version` (the version right after `version()`), without reading it back."""
        if version != self.version() + 1:
            self.update_incremental()  # not the next one: the log moved on, read it
            return
        self._add(version, actions)

    def table(self) -> DeltaTable:
        """delta-rs's read of the log at `version()`, every live file in it (the tail merged: cost follows the table)."""
        self._follow_base()
        if isinstance(self.base, CheckpointState):  # from here on delta-rs's state is the base
            self.base, self._tail, self._base_files = LoadedDeltaTable(self.root_uri, self.storage, self._version), _Tail(), None
        elif self._version > self.base.version() or self._tail.commit_infos:
            self._merge()
        return self.base

    def __getattr__(self, name: str):
        # Every other DeltaTable method reads the whole state (get_add_actions, deletion_vectors, alter, ...).
        if name.startswith("__") or name in ("base", "_tail", "_version", "_base_files", "root_uri", "storage"):
            raise AttributeError(name)
        return getattr(self.table(), name)

    # ---- internals

    def _add(self, version: int, actions: list[dict[str, Any]]) -> None:
        tail = self._tail
        files = sum("add" in a or "remove" in a for a in actions)
        merge = (any("metaData" in a or "protocol" in a for a in actions) or len(tail.commit_infos) >= MAX_TAIL
                 or len(tail.added) + len(tail.removed) + files > MAX_TAIL_FILES)
        if merge and not isinstance(self.base, CheckpointState):
            self._merge()  # delta-rs reads the new metadata (and everything after the base) itself
            return
        tail.commit_infos[version] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        for a in actions:  # within one commit, removes before adds: a path removed and added again is live
            if "remove" in a:
                path = a["remove"]["path"]
                if path not in tail.added:
                    tail.removed[path] = num_records(a["remove"].get("stats"))
                tail.added.pop(path, None)
        for a in actions:
            if "add" in a:
                tail.added[a["add"]["path"]] = num_records(a["add"].get("stats"))
            elif "txn" in a:
                tail.transactions[a["txn"]["appId"]] = int(a["txn"]["version"])
            elif "metaData" in a:
                tail.metadata = a["metaData"]
            elif "protocol" in a:
                tail.protocol = a["protocol"]
        self._version = version
        if merge:
            self._merge()

    def _merge(self) -> None:
        if isinstance(self.base, CheckpointState):  # the tail's files, transactions and metadata taken into the read
            t = self._tail
            self.base = self.base.advanced(self._version, t.added, set(t.removed) | set(t.added), t.transactions, t.metadata, t.protocol)
        else:
            self.base.update_incremental()
        self._version, self._tail = self.base.version(), _Tail()

    def _follow_base(self) -> None:
        # A write delta-rs made through the base (an ALTER TABLE through `table()`) moved it past the tail's version.
        if self.base.version() > self._version:
            self._version, self._tail = self.base.version(), _Tail()

    def _base_totals(self) -> LiveTotals:
        """The base's live totals; of a checkpoint's read, from its row counts alone (its paths are read when a
        remove must be looked up: `_base_adds`)."""
        version = self.base.version()
        if self._base_files is None or self._base_files[0] != version:
            if isinstance(self.base, CheckpointState):
                try:
                    totals = LiveTotals(*self.base.totals())
                except (OSError, pa.ArrowException):  # the checkpoint was cleaned up since it was read: delta-rs reads the log
                    self.table()
                    return self._base_totals()
                self._base_files = (version, None, totals)
            else:
                adds = pa.table(self.base.get_add_actions(flatten=False)).select(["path", "num_records"])
                self._base_files = (version, adds, LiveTotals(*totals_of(adds.column("num_records"))))
        return self._base_files[2]

    def _base_adds(self) -> pa.Table | None:
        """path and num_records of the base's live adds (after `_base_totals`); None when the checkpoint they were to
        be read from is gone (delta-rs has then read the log at `version()`, the tail merged into it)."""
        version, adds, totals = self._base_files
        if adds is None:  # a checkpoint's read: the paths are read now
            try:
                adds = self.base.adds
            except (OSError, pa.ArrowException):
                self.table()
                return None
            self._base_files = (version, adds, totals)
        return adds

    def _read(self, version: int) -> list[dict[str, Any]] | None:
        return read_commit(self.storage, self.root_uri, version)


class LoadedDeltaTable(DeltaTable):
    """delta-rs's DeltaTable of a table on `storage`, whose `history` gives each commit its own version.

    delta-rs 1.6.6 lists the commits in storage, newest first, versions written after the table was loaded included,
    and labels them down from the version it loaded: a commit another writer lands in between shifts every label
    by one (the oldest to -1), so a snapshot's Delta version, the log's oldest version or a foreign version's
    number would be off by one. Here each version's commitInfo from the loaded one down is read from its commit
    file, as `FollowedLog` reads it."""

    def __init__(self, root_uri: str, storage: StorageConfig, version: int | None = None):
        super().__init__(root_uri, version=version, storage_options=storage.delta_options(root_uri))
        self._files = (storage, root_uri)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        return commit_history(*self._files, self.version(), limit)


def commit_history(storage: StorageConfig, root_uri: str, newest: int, limit: int | None = None, known: dict | None = None) -> list[dict[str, Any]]:
    """The commitInfo of the `limit` versions from `newest` down (all still in the log when None), newest first, each
    with its `version`; `known`: {version: commitInfo} already read."""
    out = []
    v = newest
    while v >= 0 and (limit is None or len(out) < limit):
        info = (known or {}).get(v)
        if info is None:
            info = read_commit_info(storage, root_uri, v)
            if info is None:
                break  # cleaned up with the log's retention
        out.append({**info, "version": v})
        v -= 1
    return out


def read_commit(storage: StorageConfig, root_uri: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of one Delta version, from its commit file; None when it is not there (not written yet, or
    cleaned up after a checkpoint)."""
    fs, path = storage.filesystem(join_uri(root_uri, f"_delta_log/{version:020d}.json"))
    try:
        with fs.open_input_stream(path) as f:
            lines = f.read().decode().split("\n")  # JSON lines end at "\n" only: splitlines() also breaks inside strings
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in lines if line.strip()]


def read_commit_info(storage: StorageConfig, root_uri: str, version: int) -> dict[str, Any] | None:
    """The commitInfo of one Delta version (`{}` when it has none); None when the commit file is not there.

    An import's commit lists every file of the table (320 MB of JSON at a million files), and writers put the
    commitInfo first (delta-rs, Spark, this project): the file is read a block at a time up to that line, and only
    lines that name a commitInfo are decoded."""
    fs, path = storage.filesystem(join_uri(root_uri, f"_delta_log/{version:020d}.json"))
    try:
        with fs.open_input_stream(path) as f:
            rest = b""
            while True:
                block = f.read(_INFO_BLOCK)
                lines = (rest + block).split(b"\n")
                rest = lines.pop() if block else b""
                for line in lines:
                    if b'"commitInfo"' in line and "commitInfo" in (action := json.loads(line)):
                        return action["commitInfo"]
                if not block:
                    return {}
    except FileNotFoundError:
        return None


_INFO_BLOCK = 1 << 16




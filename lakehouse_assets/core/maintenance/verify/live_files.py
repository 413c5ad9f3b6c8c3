"""The full formats-agree check's pass over every live file, a batch of Iceberg manifests at a time.

The driver holds the Delta log's live add actions as columns (delta-rs's `get_add_actions`, one row per file) and
one batch of manifest entries, never a dictionary of either side's files: each batch's data files are found among
the adds by path (`pc.index_in` over the adds' paths, so a pass costs the adds once per batch: batches of at least
BATCH_ENTRIES keep that small next to decoding the entries), compared (files.FileComparison), and dropped. What
stays: totals, a seen-count per add, at most MAX_LISTED examples per kind of difference, and the entries a caller
asks to keep (those the row-level deletes apply to, `keep`).
The cyclic garbage collector is paused for the pass (core/collector.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import ManifestContent, ManifestEntry
from pyiceberg.table import Table

from ...collector import collector_paused
from ...formats.delta import column_mapping as delta_column_mapping
from ...io.storage import delta_path, relative_to
from .files import MAX_LISTED, FileComparison, Findings

BATCH_ENTRIES = 10_000  # manifest entries compared at once (a few tens of MB of pyiceberg objects)


@dataclass
class DeltaAdds:
    """The Delta log's live add actions as delta-rs lists them (`get_add_actions(flatten=False)`), with each one's path
    decoded to the form Iceberg's relative paths take (Delta logs paths percent-encoded)."""

    table: pa.Table
    paths: pa.Array
    num_records: np.ndarray  # -1 where an add carries no numRecords
    counted: np.ndarray  # bool: the add carries numRecords

    @classmethod
    def of(cls, adds: pa.Table) -> DeltaAdds:
        raw = adds.column("path").combine_chunks()
        encoded = pc.match_substring(raw, "%")
        paths = raw
        if pc.any(encoded).as_py():  # decode only the few paths that need it
            decoded = [delta_path(p) for p in pc.filter(raw, encoded).to_pylist()]
            paths = pc.replace_with_mask(raw, encoded, pa.array(decoded, pa.string()))
        counts = adds.column("num_records").combine_chunks()
        return cls(adds, paths, pc.fill_null(counts, -1).to_numpy(), pc.is_valid(counts).to_numpy(zero_copy_only=False))

    @property
    def files(self) -> int:
        return self.table.num_rows

    @property
    def rows(self) -> int:
        return int(self.num_records[self.counted].sum())


def flat_rows(adds: pa.Table, delta) -> list[dict[str, Any]]:
    """Add actions as rows keyed `min.<column>`, `partition.<column>`... (delta-rs's `flatten=True` spelling), by the columns' names."""
    while any(pa.types.is_struct(f.type) for f in adds.schema):
        adds = adds.flatten()
    rows = adds.to_pylist()
    if delta_column_mapping.is_mapped(delta):
        # The log keys stats and partition values by physical name: compare them under the columns' names.
        logical = delta_column_mapping.logical_names(delta)
        rows = [_logical_keys(a, logical) for a in rows]
    return rows


def _logical_keys(add: dict[str, Any], logical: dict[str, str]) -> dict[str, Any]:
    out = {}
    for key, value in add.items():
        prefix, dot, column = key.partition(".")
        out[f"{prefix}.{logical.get(column, column)}" if dot else key] = value
    return out


def live_entries(table: Table, snap, content: ManifestContent, batch: int | None = None) -> Iterator[list[ManifestEntry]]:
    """The snapshot's live entries of manifests of `content`, in batches of at least `batch` (the last may hold fewer)."""
    out: list[ManifestEntry] = []
    for manifest in snap.manifests(table.io) if snap is not None else []:
        if manifest.content == content:
            out.extend(manifest.fetch_manifest_entry(table.io, discard_deleted=True))
            if len(out) >= (batch or BATCH_ENTRIES):
                yield out
                out = []
    if out:
        yield out


@dataclass
class LivePass:
    """What the pass found: each side's totals (a path Iceberg lists twice counted once, as its readers see one
    file), the differences of the two file sets, and what the caller asked to keep."""

    iceberg_files: int = 0
    iceberg_rows: int = 0
    differences: list[str] = field(default_factory=list)
    kept: list[ManifestEntry] = field(default_factory=list)
    pairs: dict[str, tuple] = field(default_factory=dict)  # path -> (data file, flat add), when asked for
    same_files: bool = True


def compare_live_files(
    table: Table, snap, root: str, delta, adds: DeltaAdds, comparison: FileComparison, *,
    keep: Callable[[ManifestEntry, str], bool] | None = None, keep_pairs: bool = False, batch: int | None = None,
) -> LivePass:
    """Every live data file of `snap` against the Delta adds: the file sets and row counts here, each pair's partition
    values and statistics by `comparison`. `keep(entry, path)`: entries to hand back; `keep_pairs`: every pair too."""
    with collector_paused():
        return _compare(table, snap, root, delta, adds, comparison, keep, keep_pairs, batch or BATCH_ENTRIES)


def _compare(table: Table, snap, root: str, delta, adds: DeltaAdds, comparison: FileComparison, keep, keep_pairs: bool, batch: int) -> LivePass:
    out = LivePass()
    seen = np.zeros(adds.files, np.int32)  # how many times Iceberg lists each add's file
    only_iceberg: Counter[str] = Counter()
    found = Findings()
    counted_rows = 0  # Iceberg's rows over the files whose row count Delta records
    for entries in live_entries(table, snap, ManifestContent.DATA, batch):
        paths = [relative_path(root, e.data_file.file_path) for e in entries]
        positions = pc.index_in(adds.paths, value_set=pa.array(paths, pa.string()))
        matched = pc.is_valid(positions).to_numpy(zero_copy_only=False)
        add_of = dict(zip((paths[i] for i in pc.drop_null(positions).to_numpy()), np.flatnonzero(matched).tolist()))
        pairs_at: dict[str, tuple[ManifestEntry, int]] = {}
        for entry, path in zip(entries, paths):
            count = entry.data_file.record_count
            if keep is not None and keep(entry, path):
                out.kept.append(entry)
            row = add_of.get(path)
            if row is None:
                only_iceberg[path] += 1
                if only_iceberg[path] == 1:
                    out.iceberg_files, out.iceberg_rows, counted_rows = out.iceberg_files + 1, out.iceberg_rows + count, counted_rows + count
                continue
            seen[row] += 1
            if seen[row] > 1:
                continue
            out.iceberg_files, out.iceberg_rows = out.iceberg_files + 1, out.iceberg_rows + count
            if adds.counted[row]:
                counted_rows += count
                if adds.num_records[row] != count:
                    found.note("rows", path, f"{path}: Iceberg {count}, Delta {int(adds.num_records[row])}")
            pairs_at[path] = (entry, row)
        if pairs_at:
            rows = sorted(r for _, r in pairs_at.values())
            flat = dict(zip(rows, flat_rows(adds.table.take(rows), delta)))
            pairs = {p: (e.data_file, flat[r]) for p, (e, r) in pairs_at.items()}
            comparison.add(pairs)
            if keep_pairs:
                out.pairs.update(pairs)
    out.differences = _set_differences(adds, seen, only_iceberg, found, counted_rows)
    out.differences += [f"Iceberg lists data file {p} {n} times (its readers read its rows {n} times; Delta lists it once)" for p, n in _listed_twice(adds, seen, only_iceberg)]
    out.same_files = not only_iceberg and bool((seen > 0).all())
    return out


def _set_differences(adds: DeltaAdds, seen: np.ndarray, only_iceberg: Counter, found: Findings, counted_rows: int) -> list[str]:
    """Files only one side has, and row counts.

    A Delta add without `numRecords` (optional in the protocol; older writers leave it out) counts nothing: its
    files' counts are compared with the files themselves by `verify --deep` (maintenance/verify/footers.py)."""
    differences = []
    if only_iceberg:
        differences.append(f"{len(only_iceberg)} file(s) live only in Iceberg, e.g. {sorted(only_iceberg)[:MAX_LISTED]}")
    unseen = np.flatnonzero(seen == 0)
    if len(unseen):
        examples = pc.take(adds.paths, pa.array(unseen)).sort()[:MAX_LISTED].to_pylist()
        differences.append(f"{len(unseen)} file(s) live only in Delta, e.g. {examples}")
    if counted_rows != adds.rows:
        uncounted = int((~adds.counted).sum())
        over = f" (over the files whose row count Delta records; {uncounted} add(s) record none)" if uncounted else ""
        differences.append(f"row counts differ: Iceberg {counted_rows}, Delta {adds.rows}{over}")
    if n := found.counts.get("rows"):
        differences.append(f"{n} file(s) have different row counts in the two logs, e.g. {found.examples('rows')}")
    return differences


def _listed_twice(adds: DeltaAdds, seen: np.ndarray, only_iceberg: Counter) -> list[tuple[str, int]]:
    """A data file listed twice in Iceberg is read twice by its readers; Delta lists a path once."""
    twice = np.flatnonzero(seen > 1)
    listed = dict(zip(pc.take(adds.paths, pa.array(twice, pa.int64())).to_pylist(), seen[twice].tolist())) if len(twice) else {}
    listed.update((p, n) for p, n in only_iceberg.items() if n > 1)
    return sorted(listed.items())


def relative_path(root: str, uri: str) -> str:
    """`uri` relative to the table root, or whole when outside it (never in the Delta log: reported as Iceberg-only)."""
    try:
        return relative_to(root, uri)
    except ValueError:
        return uri

"""What a lost commit race means for a write's plan: the snapshots committed since it read the table, and whether
they change what the plan replaces.

A write plans against the snapshot it read (its base) and commits with the catalog's compare-and-swap. When another
writer committed first, the commit pipeline (transaction.py) reads the table again and asks the write's check
whether the snapshots since its base conflict with its plan. The answer follows what each write mode depends on:

    append                  nothing: its files replace nothing, so it never conflicts
    overwrite of a slice    the slice's rows: a snapshot that added or removed data files, or added delete files,
                            which may hold rows inside it (by partition values, then column bounds); a snapshot
                            whose summary lists the partitions it changed, none of them inside, is not opened
    overwrite of a table    every row: any snapshot that added or removed a file
    merge                   write/merge/merge.py: removed files, delete files, or added rows with a key of the batch
    compaction              the files it rewrites and everything else (as the whole-table overwrite)

No conflict: the pipeline commits the same files again on top. A conflict is a reason naming the snapshot, the write
that made it (its operation, write id and writer, e.g. a Dagster run and partition) and what overlapped; the pipeline
raises it as `CommitConflict`, never a lost update or a silent last-writer-wins.
"""

from __future__ import annotations

import json
from typing import Callable

from pyiceberg.expressions import BooleanExpression
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Record

from ..formats import history
from ..formats.iceberg.partition_summaries import changed_partitions
from ..formats.snapshot_changes import snapshot_change
from ..properties import SummaryKeys

# (the table as it is now, the id of the snapshot the plan was checked against) -> why it no longer holds, or None
Check = Callable[[Table, "int | None"], "str | None"]


def since(table: Table, base_id: int | None) -> list[Snapshot] | str:
    """Main's snapshots committed after `base_id`, oldest first; a reason when `base_id` is no longer an ancestor of
    the current snapshot (a rollback moved main past it, or history was rewritten)."""
    out, snap = [], table.current_snapshot()
    while snap is not None and snap.snapshot_id != base_id:
        out.append(snap)
        snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    if snap is None and base_id is not None:
        return f"snapshot {base_id}, which the write planned against, is no longer an ancestor of the current one (a rollback?)"
    return out[::-1]


def describe(snapshot: Snapshot) -> str:
    """The snapshot and the write that made it, as a person looks for it: `lakehouse history` shows the same keys."""
    summary = history.summary(snapshot)
    operation = summary.get(SummaryKeys.OPERATION) or (snapshot.summary.operation.value if snapshot.summary else "commit")
    parts = [f"snapshot {snapshot.snapshot_id} ({operation}"]
    if write_id := summary.get(SummaryKeys.WRITE_ID):
        parts.append(f", write id {write_id}")
    if writer := summary.get(SummaryKeys.WRITER):
        try:
            writer = ", ".join(f"{k} {v}" for k, v in json.loads(writer).items())
        except (ValueError, AttributeError):
            pass
        if writer:
            parts.append(f", by {writer}")
    return "".join(parts) + ")"


def never(table: Table, base_id: int | None) -> str | None:
    """An append's check: its files replace nothing, so no concurrent snapshot invalidates it."""
    return None


def any_change(table: Table, base_id: int | None) -> str | None:
    """A whole-table overwrite's (and compaction's) check: any snapshot that added or removed a file conflicts."""
    snapshots = since(table, base_id)
    if isinstance(snapshots, str):
        return snapshots
    for s in snapshots:
        change = snapshot_change(table, s)
        if change.adds or change.removes or change.delete_files_added:
            return f"{describe(s)} changed the table's files while this write replaced them"
    return None


def inside(expression: Callable[[Table], BooleanExpression], what: str) -> Check:
    """A slice overwrite's check: the snapshots since the base conflict when they added or removed data files, or added
    delete files, that may hold rows of the slice (`expression(table)`, the slice as an Iceberg filter; `what`: the
    slice as the user named it, e.g. `day in [2024-01-01, 2024-01-02)`)."""

    def check(table: Table, base_id: int | None) -> str | None:
        snapshots = since(table, base_id)
        if isinstance(snapshots, str):
            return snapshots
        slice_ = expression(table)
        partition_may_hold = _partition_may_hold(table, slice_)
        may_hold, manifest_may_hold = _may_hold(table, slice_, partition_may_hold), _manifest_may_hold(table, slice_)
        spec_id = table.spec().spec_id
        for s in snapshots:
            changed = changed_partitions(table, s)  # by its summary: no manifest read when it changed other partitions only
            if changed is not None and not any(partition_may_hold(spec_id, p) for p in changed):
                continue
            change = snapshot_change(table, s, manifest_may_hold)  # manifests whose partitions exclude the slice are not read
            for kind, files in (("added", change.adds), ("removed", change.removes), ("added delete file(s) to", change.delete_files_added)):
                if overlap := [f for f in files if may_hold(f)]:
                    return f"{describe(s)} {kind} {len(overlap)} file(s) inside {what}, which this write replaces (e.g. {overlap[0].file_path})"
        return None

    return check


def _manifest_may_hold(table: Table, expression: BooleanExpression) -> Callable[[ManifestFile], bool]:
    """Whether a manifest may list files with rows matching `expression`, by its partition summaries (which cover
    every entry it lists, deleted ones too)."""
    from pyiceberg.expressions.visitors import inclusive_projection, manifest_evaluator

    schema, specs = table.schema(), table.specs()
    by_spec: dict[int, Callable] = {}

    def may_hold(m: ManifestFile) -> bool:
        if m.partition_spec_id not in by_spec:
            spec = specs[m.partition_spec_id]
            by_spec[m.partition_spec_id] = manifest_evaluator(spec, schema, inclusive_projection(schema, spec)(expression), case_sensitive=True)
        return by_spec[m.partition_spec_id](m)

    return may_hold


def _partition_may_hold(table: Table, expression: BooleanExpression) -> Callable[[int, Record], bool]:
    """Whether a partition (its spec id and values) may hold rows matching `expression`."""
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.schema import Schema

    schema, specs = table.schema(), table.specs()
    by_spec: dict[int, Callable] = {}

    def may_hold(spec_id: int, partition: Record) -> bool:
        if spec_id not in by_spec:
            spec = specs[spec_id]
            partition_schema = Schema(*spec.partition_type(schema).fields)
            by_spec[spec_id] = expression_evaluator(partition_schema, inclusive_projection(schema, spec)(expression), case_sensitive=True)
        return by_spec[spec_id](partition)

    return may_hold


def _may_hold(table: Table, expression: BooleanExpression, partition_may_hold: Callable[[int, Record], bool]) -> Callable[[DataFile], bool]:
    """Whether a file may hold rows matching `expression`: its partition values first (the spec it was written with),
    then its column bounds, as Iceberg's scan planning prunes (a file without bounds may hold any row)."""
    from pyiceberg.expressions.visitors import ROWS_CANNOT_MATCH, _InclusiveMetricsEvaluator

    metrics = _InclusiveMetricsEvaluator(table.schema(), expression)
    return lambda f: partition_may_hold(f.spec_id, f.partition) and metrics.eval(f) is not ROWS_CANNOT_MATCH

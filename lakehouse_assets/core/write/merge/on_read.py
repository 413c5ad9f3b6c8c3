"""Merge-on-read, the second strategy over the merge's plan: rows leave by position, no data file is rewritten.

On a table whose `write.merge.mode` is `merge-on-read` a merge writes only its upserts and, for every data
file holding a row it replaces or deletes, ONE position-delete file (core/formats/position_deletes.py) with
every position deleted from that file so far: the union of its earlier delete file's positions and the new
ones; the commit removes the earlier file (`FileChanges.removed_delete_files`). A window or partition
overwrite on a table whose `write.delete.mode` is `merge-on-read` does the same for the files straddling the
window's edge (files wholly inside it are dropped as they are, with their delete files).

Positions come from the matching step: for a small batch, one job of pyarrow tasks reading the candidates'
key columns and writing the upserts (write/merge/on_read_tasks.py); otherwise Spark's semi-join over the candidates
read with a position column. Only (file, position) pairs reach the driver, never rows. Rows an earlier delete
file removed already are not matched again: they are no longer in the table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

from ...formats import position_deletes
from ...formats.deletes import live_delete_entries, refuse_delete_files
from ...io.storage import normalize_uri
from ...model import FileChanges
from ...properties import TableProperties, merge_on_read
from ...read.reader import file_uris
from ...spark.compat import collect_arrow
from ..target import WriteTarget
from . import on_read_tasks
from .batch import PATH
from .plan import MergePlan

POSITION = "_lakehouse merge position"  # helper columns hold a space, which user column names cannot


def chosen(table: Table, mode_property: str = TableProperties.MERGE_MODE) -> bool:
    """Whether `table` removes rows by position for the operation `mode_property` names."""
    return merge_on_read(table.properties, mode_property)


def check_deletes(table: Table, operation: str) -> None:
    """A merge-on-read write keeps one position-delete file per data file: it refuses (as a copy-on-write write does)
    delete files it cannot fold into that rule, such as equality deletes or position deletes naming several data files."""
    if any(e.data_file.content != DataFileContent.POSITION_DELETES or position_deletes.referenced_data_file(e.data_file) is None for e in live_delete_entries(table)):
        refuse_delete_files(table, operation)


def merge_by_position(spark, plan: MergePlan, changes: FileChanges) -> None:
    """Write the batch's upserts and the position-delete files of the rows it replaces or deletes into `changes`.

    A batch whose keys are on the driver is matched and its upserts written in one job of pyarrow tasks, which
    with the Delta feed on also write the replaced rows and the upserts as the version's change data
    (write/merge/on_read_tasks.py), as the one-job copy-on-write rewrite does; otherwise Spark matches, and the Delta
    mirror computes the change data from the files."""
    target = plan.target
    earlier = live_delete_files(target.table)
    wrote_upserts = False
    if plan.candidates and plan.values is not None and not plan.straddling:
        deleted_before = {f.file_path: position_deletes.positions_as_written(target.storage, earlier[f.file_path], f.file_path) for f in plan.candidates if f.file_path in earlier}
        on_driver = plan.upserts_on_driver()
        matched = on_read_tasks.match_and_write(spark, target, plan.candidates, plan.values, deleted_before, plan.upserts, changes, upserts_on_driver=on_driver)
        positions, wrote_upserts = matched.positions, matched.wrote_upserts
    else:
        positions, deleted_before = _matched_positions(spark, plan), None
    if not wrote_upserts:
        target.write(plan.upserts(), changes)
    by_uri = {f.file_path: f for f in plan.candidates}
    deleted = delete_positions(target, {by_uri[u]: p for u, p in positions.items()}, changes, earlier, deleted_before)
    plan.stats.matched_files = plan.stats.delete_files = len(deleted)
    plan.stats.rows_deleted = sum(deleted.values())


def _matched_positions(spark, plan: MergePlan) -> dict[str, pa.Array]:
    """Per candidate holding a key of the batch (inside the window), the positions of those rows, in Spark."""
    if not plan.candidates:
        return {}
    rows = plan.target.read(spark, plan.candidates, path_column=PATH, position_column=POSITION)
    inside = plan.inside(rows)
    rows = rows.filter(inside) if inside is not None else rows
    hits = rows.select(*plan.keys, PATH, POSITION).join(plan.batch_keys(), plan.keys, "left_semi")
    return collect_positions(hits, [f.file_path for f in plan.candidates])


def positions_where(spark, target: WriteTarget, files: list[DataFile], row_filter, deleted=None, columns=None) -> dict[str, pa.Array]:
    """Per file of `files`, the positions of its rows `row_filter(schema)` (a Spark predicate) holds for (`deleted`:
    the files' deleted positions, whose rows are not looked at: they are no longer in the table; `columns`: the only
    columns the predicate reads, when the caller knows them: the positions' reader decodes no other)."""
    return without_deleted(physical_positions_where(spark, target, files, row_filter, columns), deleted, target.storage)


def physical_positions_where(spark, target: WriteTarget, files: list[DataFile], row_filter, columns=None) -> dict[str, pa.Array]:
    """`positions_where` over every row as the file holds it, rows deleted before included: Spark's own vectorised
    scan gives the positions (its row index); reading the deletes into the scan would move it to the pyarrow reader."""
    if not files:
        return {}
    rows = target.read(spark, files, path_column=PATH, position_column=POSITION, columns=columns)
    return collect_positions(rows.filter(row_filter(rows.schema)), [f.file_path for f in files])


def without_deleted(found: dict[str, pa.Array], deleted, storage) -> dict[str, pa.Array]:
    """`found` without the positions deleted before (`deleted`: {file URI: its deleted positions}), on the driver."""
    out = dict(found)
    for uri, gone in (deleted or {}).items():
        if uri in out:
            kept = np.setdiff1d(out[uri].to_numpy(), gone.positions(storage), assume_unique=True)
            if len(kept):
                out[uri] = pa.array(kept, pa.int64())
            else:
                del out[uri]
    return out


def collect_positions(hits, uris: list[str]) -> dict[str, pa.Array]:
    """The (path, position) pairs of `hits` on the driver, per file URI of `uris` (positions only, never rows)."""
    import pyarrow.compute as pc

    try:
        batches = collect_arrow(hits.select(PATH, POSITION))
        pairs = pa.Table.from_batches(batches) if batches else pa.table({PATH: pa.array([], pa.string()), POSITION: pa.array([], pa.int64())})
    except AttributeError:  # a private API: if it goes, the plain collect
        rows = hits.select(PATH, POSITION).collect()
        pairs = pa.table({PATH: pa.array([r[0] for r in rows], pa.string()), POSITION: pa.array([r[1] for r in rows], pa.int64())})
    out: dict[str, pa.Array] = {}
    spelled = pc.unique(pairs.column(PATH)).to_pylist()
    for name, uri in zip(spelled, file_uris(spelled, uris)):
        found = pairs.filter(pc.equal(pairs.column(PATH), name)).column(POSITION).combine_chunks()
        out[uri] = found.cast(pa.int64()).sort()
    return out


def delete_positions(
    target: WriteTarget, positions: dict[DataFile, pa.Array], changes: FileChanges, earlier: dict[str, list[DataFile]] | None = None,
    deleted_before: dict[str, pa.Array] | None = None,
) -> dict[str, int]:
    """For every data file given positions: ONE position-delete file with those and its earlier deleted positions,
    replacing its earlier delete file(s) (`earlier`: the live ones per data file, when the caller has them; `deleted_before`:
    their positions per data file, when the caller read them), recorded in `changes`. Positions already deleted are not
    new deletes. Returns, per data file that lost rows, how many it lost."""
    import pyarrow.compute as pc

    earlier = live_delete_files(target.table) if earlier is None else earlier
    root = normalize_uri(target.table.location())
    out: dict[str, int] = {}
    for data_file, found in positions.items():
        old_files = earlier.get(data_file.file_path, [])
        if deleted_before is not None:
            old = deleted_before.get(data_file.file_path, pa.array([], pa.int64()))
        else:
            old = position_deletes.positions_as_written(target.storage, old_files, data_file.file_path)
        new = pc.filter(found, pc.invert(pc.is_in(found, value_set=old))) if len(old) else found
        if not len(new):
            continue  # every row it names is deleted already
        entry = position_deletes.write_delete_file(target.storage, root, data_file, position_deletes.union(old, new))
        changes.created.append(entry.file_path)
        changes.added_delete_files.append(entry)
        changes.removed_delete_files += old_files
        changes.rows_deleted += len(new)
        out[data_file.file_path] = len(new)
    return out


def live_delete_files(table: Table) -> dict[str, list[DataFile]]:
    """The live position-delete files per data file they apply to (file-scoped: `check_deletes` refused others)."""
    out: dict[str, list[DataFile]] = {}
    for e in live_delete_entries(table):
        if e.data_file.content != DataFileContent.POSITION_DELETES:
            continue
        if (data := position_deletes.referenced_data_file(e.data_file)) is not None:
            out.setdefault(data, []).append(e.data_file)
    return out

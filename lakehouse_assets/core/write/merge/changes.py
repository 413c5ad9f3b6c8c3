"""The Delta change data of a small merge, written by the merge's own rewrite (`merge_tasks.rewrite_in_one_job`).

A merge knows the rows it changes: the rows of its keys that it drops from the files it rewrites, and its
upserts. So the feed (core/write/change_data.py) needs no second pass over the rewritten files: each rewrite
task writes the rows it drops, labelled, as change data files beside its data files, and the driver writes the
upserts' rows, which the one-job road holds already. The cost follows the changed rows, not the files.

The labels are `Lakehouse.changes`'s (core/read/changes.py), per key: a dropped row whose key has an upsert is
an `update_preimage` and the upsert an `update_postimage`; a dropped row without an upsert is a `delete`; an
upsert without a dropped row an `insert`; an upsert equal to the one row it replaces changes nothing (rows are
equal as Spark groups them: NULL equals NULL, NaN equals NaN, 0.0 equals -0.0).

A task sees only its own files, so it labels a dropped row by its key's upsert alone, and reports per upsert how
many rows it dropped and how many equalled the upsert. The driver adds the counts up. Where a key had several
old rows and one of them equalled its upsert (duplicate keys in the table), the tasks' labels are not the
multiset difference `Lakehouse.changes` computes: `finish` then removes the tasks' files and returns None, and
the Delta mirror compares the files instead.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import pyarrow as pa

from ...read.change_types import CHANGE_TYPE, DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE
from ..change_data import ChangeDataWriter, file_actions

_INDEX = "_lakehouse merge upsert"  # helper columns hold a space, which user column names cannot
_POSITION = "_lakehouse merge dropped"


@dataclass
class MergeChanges:
    """What a rewrite task needs to label and write the rows it drops (shipped to the executors)."""

    writer: ChangeDataWriter  # the version's change data files (the merge's write id in their names)
    keys: tuple[str, ...]
    columns: tuple[str, ...]  # the table's columns, as the rows carry them

    def dropped_rows(self, upserts: pa.Table) -> "DroppedRows":
        """One task's collector of dropped rows; `upserts`: every upsert of the merge, in `all_upserts` order."""
        return DroppedRows(self, upserts)


def all_upserts(upsert_ipcs) -> pa.Table | None:
    """Every upsert of the merge as one table, in the order of its task groups (Arrow IPC streams, None for a group
    without): the index a task reports counts by. The same on the driver and in every task."""
    tables = [pa.ipc.open_stream(ipc).read_all() for ipc in upsert_ipcs if ipc is not None]
    return pa.concat_tables(tables) if tables else None


class DroppedRows:
    """In one rewrite task: the rows it drops, labelled by their key's upsert, and per upsert the counts."""

    def __init__(self, spec: MergeChanges, upserts: pa.Table | None):
        self.spec = spec
        self.upserts = upserts.select(list(spec.columns)) if upserts is not None else None
        # The upserts' keys with their index, the right side of every batch's join (built once per task).
        self.upsert_keys = None
        if self.upserts is not None:
            keys = self.upserts.select(list(spec.keys))
            self.upsert_keys = keys.append_column(_INDEX, pa.array(range(keys.num_rows), pa.int64()))
        self.labelled: list[pa.Table] = []
        self.dropped: dict[int, int] = {}  # upsert index -> rows of its key dropped here
        self.equal: dict[int, int] = {}  # upsert index -> of those, rows equal to the upsert

    def add(self, dropped: pa.Table) -> None:
        import numpy as np
        import pyarrow.compute as pc

        if not dropped.num_rows:
            return
        dropped = dropped.select(list(self.spec.columns))
        index = self._upsert_index(dropped)
        deleted = pc.is_null(index)
        labels = pc.if_else(deleted, pa.scalar(DELETE), pa.scalar(UPDATE_PREIMAGE))
        keep = np.ones(dropped.num_rows, dtype=bool)
        if not pc.all(deleted).as_py():
            matched = pc.indices_nonzero(pc.invert(deleted))
            ups = pc.take(index, matched)
            same = rows_equal(dropped.take(matched), self.upserts.take(ups))
            for i, s in zip(ups.to_pylist(), same.tolist()):
                self.dropped[i] = self.dropped.get(i, 0) + 1
                self.equal[i] = self.equal.get(i, 0) + int(s)
            keep[matched.to_numpy()] = ~same  # an upsert equal to the row it replaces changes nothing
        rows = dropped.append_column(CHANGE_TYPE, labels).filter(pa.array(keep))
        if rows.num_rows:
            self.labelled.append(rows)

    def _upsert_index(self, dropped: pa.Table) -> pa.Array:
        """Per dropped row, the index of its key's upsert (null: its key was deleted)."""
        keys = list(self.spec.keys)
        if self.upsert_keys is None:
            return pa.nulls(dropped.num_rows, pa.int64())
        left = dropped.select(keys).append_column(_POSITION, pa.array(range(dropped.num_rows), pa.int64()))
        right = self.upsert_keys.cast(pa.schema([*left.select(keys).schema, self.upsert_keys.schema.field(_INDEX)]))
        joined = left.join(right, keys=keys, join_type="left outer").sort_by(_POSITION)
        return joined.column(_INDEX).combine_chunks()

    def finish(self) -> list[str]:
        """After the task's data files closed: its change data files written; the task's rows for the driver (JSON)."""
        out = [json.dumps({"counts": [[i, n, self.equal.get(i, 0)] for i, n in self.dropped.items()]})] if self.dropped else []
        if self.labelled:
            table = pa.concat_tables(self.labelled).combine_chunks()  # one batch: one row group per file written, not one per file read
            for batch in self.spec.writer(iter(table.to_batches())):
                out += [json.dumps({"file": row}) for row in batch.to_pylist()]
        return out


def finish(spec: MergeChanges, upserts: pa.Table | None, task_rows: list[str], storage, upserts_write_id: str, created: list[str]) -> list[dict] | None:
    """On the driver, after the rewrite job: the version's `cdc` actions, or None when the tasks' labels are not
    exact (see the module) and the mirror must compare the files. Every change data file written is added to
    `created` as soon as it exists (a failed commit deletes them)."""
    from ...io.storage import delete_files, join_uri

    files, dropped, equal = [], {}, {}
    for text in task_rows:
        row = json.loads(text)
        if "file" in row:
            files.append(row["file"])
        for i, n, e in row.get("counts", []):
            dropped[i] = dropped.get(i, 0) + n
            equal[i] = equal.get(i, 0) + e
    written = [join_uri(spec.writer.root_uri, f["path"]) for f in files]
    if any(e and (e > 1 or dropped[i] > 1) for i, e in equal.items()):
        delete_files(storage, written)  # a key's several old rows, one equal to its upsert: see the module
        return None
    created += written
    if upserts is not None and upserts.num_rows:
        labels = [None if equal.get(i) else (UPDATE_POSTIMAGE if dropped.get(i) else INSERT) for i in range(upserts.num_rows)]
        rows = upserts.select(list(spec.columns)).append_column(CHANGE_TYPE, pa.array(labels, pa.string()))
        # One batch: the upserts arrive in a chunk per partition and collected batch, and each chunk written is a row group.
        rows = rows.filter(pa.array([label is not None for label in labels])).combine_chunks()
        if rows.num_rows:
            for batch in dataclasses.replace(spec.writer, write_id=upserts_write_id)(iter(rows.to_batches())):
                files += batch.to_pylist()
                created += [join_uri(spec.writer.root_uri, r["path"]) for r in batch.to_pylist()]
    actions = file_actions(files, spec.writer)
    if not files:  # the one empty file of a version that changed no row
        created.append(join_uri(spec.writer.root_uri, actions[0]["path"]))
    return actions


def rows_equal(a: pa.Table, b: pa.Table):
    """Per row (a numpy bool array), whether rows `a[i]` and `b[i]` (same columns) are equal as Spark's grouping compares them."""
    import numpy as np
    import pyarrow.compute as pc

    same = np.ones(a.num_rows, dtype=bool)
    for name in a.column_names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if y.type != x.type:
            y = y.cast(x.type)
        if pa.types.is_nested(x.type) or pa.types.is_dictionary(x.type):
            col = np.array([_same_value(u, v) for u, v in zip(x.to_pylist(), y.to_pylist())], dtype=bool)
        else:
            eq = pc.fill_null(pc.equal(x, y), False)
            eq = pc.or_(eq, pc.and_(pc.is_null(x), pc.is_null(y)))
            if pa.types.is_floating(x.type):
                eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(x), pc.is_nan(y)), False))
            col = eq.to_numpy(zero_copy_only=False)
        same &= col
    return same


def _same_value(u, v) -> bool:
    """Equality of two Python values from Arrow, with NaN equal to NaN at any depth."""
    if isinstance(u, float) and isinstance(v, float):
        return u == v or (math.isnan(u) and math.isnan(v))
    if isinstance(u, (list, tuple)) and isinstance(v, (list, tuple)):
        return len(u) == len(v) and all(_same_value(p, q) for p, q in zip(u, v))
    if isinstance(u, dict) and isinstance(v, dict):
        return u.keys() == v.keys() and all(_same_value(u[k], v[k]) for k in u)
    return u == v

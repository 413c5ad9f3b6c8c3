"""A merge-on-read delete's reads: the positions of the rows its condition matches, and with the change feed on those
rows written as the version's `delete` change data.

Spark's own reader scans the candidate files for the positions, reading only the columns the condition names (Spark
SQL decides which rows match, as everywhere in by_condition.py); only positions reach the driver. Then pyarrow tasks
read each file holding a match, as the copy-on-write delete's tasks do (position_rewrite.py), and write the rows at
its positions as change data; a file holding none is never read whole. Scanning every column once and caching the
matched rows for the feed cost more: on 2,000,000 rows in 8 files, the cached scan and its collect took 0.52-0.58 s,
the same scan of the condition's column alone 0.17-0.29 s (docs/performance.md).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile

from ..io.storage import join_uri, normalize_uri
from ..model import FileChanges
from ..read.reader import ParquetFileReader
from . import position_updates
from .condition import Condition
from .merge import on_read
from .merge.batch import PATH
from .merge.on_read import POSITION
from .position_rewrite import CHANGE, change_rows
from .target import WriteTarget


def matched_positions(spark, target: WriteTarget, files: list[DataFile], condition: Condition, deleted: dict, changes: FileChanges) -> dict[str, pa.Array]:
    """{file URI: the sorted positions of its rows `condition` matches}, files without one left out, and the positions
    `deleted` ({file URI: its deleted positions}) already hides left out. With `target.change_feed`, the rows at those
    positions are written as `delete` change data: `changes.change_data` (its files in `changes.created`)."""
    from pyspark.sql import functions as F

    columns = condition.columns([f.name for f in target.schema.fields]) or None
    if not target.change_feed:
        return on_read.positions_where(spark, target, files, lambda _: F.expr(condition.matches), deleted, columns=columns)
    if not files:
        return {}
    from .change_data import change_data_writer, file_actions

    root, write_id = normalize_uri(target.table.location()), uuid.uuid4().hex[:16]
    cdc = change_data_writer(target.table, target.schema, root, target.storage, write_id)
    per_file = {f.file_path: _DeletedRows(replace(cdc, write_id=f"{write_id}-{i:05d}"), np.asarray(deleted[f.file_path].positions(target.storage), np.int64) if f.file_path in deleted else None)
                for i, f in enumerate(files)}
    matched = target.read(spark, files, path_column=PATH, position_column=POSITION, columns=columns).filter(F.expr(condition.matches))
    rows = position_updates.run_by_file(spark, target, files, matched, [], per_file, write_id)
    positions = position_updates.positions_of(rows)
    if positions:
        changes.change_data = file_actions([json.loads(r[CHANGE]) for r in rows if r[CHANGE] is not None], cdc)
        changes.created += [join_uri(root, a["path"]) for a in changes.change_data]
    return positions


@dataclass
class _DeletedRows:
    """One file's deleted rows: those at the positions its task receives, but any `gone` already, written as `delete`
    change data by `cdc`."""

    cdc: object  # change_data.ChangeDataWriter
    gone: np.ndarray | None

    def __call__(self, reader: ParquetFileReader, uri: str, positions: np.ndarray, values: pa.Table):
        from ..read.change_types import CHANGE_TYPE, DELETE

        positions, _ = position_updates.live(positions, values, self.gone)
        if not len(positions):
            return
        rows = position_updates.rows_at(reader, uri, positions)
        batches = rows.append_column(CHANGE_TYPE, pa.array([DELETE] * rows.num_rows, pa.string())).to_batches()
        yield from map(position_updates.without_positions, change_rows(self.cdc, batches))
        yield position_updates.positions_row(uri, positions)

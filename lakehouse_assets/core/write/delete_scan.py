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

import uuid
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile

from ..io.storage import join_uri, normalize_uri
from ..model import FileChanges
from ..read.reader import ParquetFileReader
from ..spark.compat import default_parallelism
from .compaction_tasks import TASKS_PER_CORE
from .condition import Condition
from .merge import on_read
from .position_rewrite import IndexedTasks, rows_at
from .target import WriteTarget


def matched_positions(spark, target: WriteTarget, files: list[DataFile], condition: Condition, deleted: dict, changes: FileChanges) -> dict[str, pa.Array]:
    """{file URI: the sorted positions of its rows `condition` matches}, files without one left out, and the positions
    `deleted` ({file URI: its deleted positions}) already hides left out. With `target.change_feed`, the rows at those
    positions are written as `delete` change data: `changes.change_data` (its files in `changes.created`)."""
    from pyspark.sql import functions as F

    names = [f.name for f in target.schema.fields]
    positions = on_read.positions_where(spark, target, files, lambda _: F.expr(condition.matches), deleted, columns=condition.columns(names) or None)
    if target.change_feed and positions:
        _write_feed(spark, target, [f for f in files if f.file_path in positions], positions, changes)
    return positions


def _write_feed(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array], changes: FileChanges) -> None:
    from .change_data import change_data_writer, file_actions
    from .writer import run_write_tasks

    root, write_id = normalize_uri(target.table.location()), uuid.uuid4().hex[:16]
    cdc = change_data_writer(target.table, target.schema, root, target.storage, write_id)
    jobs = [_FileFeed(f.file_path, positions[f.file_path].to_numpy().astype(np.int64), replace(cdc, write_id=f"{write_id}-{i:05d}")) for i, f in enumerate(files)]
    tasks = min(len(jobs), default_parallelism(spark) * TASKS_PER_CORE)
    fn = IndexedTasks(target.row_reader(files), jobs, tasks)
    rows = run_write_tasks(spark, tasks, fn, "path string, size long, partition_values string", write_id, storage=target.storage, root_uri=root, table_name=target.identifier)
    changes.change_data = file_actions([dict(r) for r in rows], cdc)
    changes.created += [join_uri(root, a["path"]) for a in changes.change_data]


@dataclass
class _FileFeed:
    """One file's change data: its rows at `positions` (sorted) as `delete` events, written by `cdc`."""

    uri: str
    positions: np.ndarray
    cdc: object  # change_data.ChangeDataWriter

    def __call__(self, reader: ParquetFileReader):
        from ..read.change_types import CHANGE_TYPE, DELETE

        rows = (b.append_column(CHANGE_TYPE, pa.array([DELETE] * b.num_rows, pa.string())) for b in rows_at(reader, self.uri, self.positions))
        yield from self.cdc(rows)

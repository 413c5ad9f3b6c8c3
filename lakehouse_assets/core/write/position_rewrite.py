"""A copy-on-write delete whose matched rows are known by position: each file that holds one is rewritten without
them by compaction's pyarrow tasks (core/write/compaction_tasks.py), one output file for each input file.

The rows never pass through Spark's reader and the JVM-to-Python hop of a DataFrame write: a task reads the file
with pyarrow, leaves the positions out, and writes through the table's own `FileWriter`. Found by one Spark scan of
the condition (by_condition.py), the positions reach the driver and go to the tasks with the file names; so a
delete matching more than MAX_POSITIONS rows is rewritten through Spark instead, where no position leaves the
executors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile

from ..model import FileChanges
from ..read.deleted_positions import KnownPositions
from .compaction_tasks import compact_in_one_job
from .target import WriteTarget

MAX_POSITIONS = 5_000_000  # 40 MB of int64 on the driver and spread over the tasks, at most


def rewrite_without(spark, target: WriteTarget, files: list[DataFile], positions: dict[str, pa.Array], deleted: dict, changes: FileChanges) -> bool:
    """Each of `files` rewritten without its `positions` ({file URI: sorted positions}) and the positions deleted
    before (`deleted`: {file URI: DeletedPositions}): the new files and the removed ones recorded in `changes`. False
    when a file is not of the table's current partition spec: nothing was written, and the caller rewrites through
    Spark."""
    gone = {}
    for f in files:
        new = positions[f.file_path].to_numpy()
        if f.file_path in deleted:
            new = np.union1d(deleted[f.file_path].positions(target.storage), new)
        gone[f.file_path] = KnownPositions(new.astype(np.int64))
    if compact_in_one_job(spark, target, [[f] for f in files], changes, deleted=gone) is None:
        return False
    changes.removes += files
    return True

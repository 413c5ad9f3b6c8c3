"""The merge's matching: which candidate files really hold one of the batch's keys (write/merge/plan.py found them).

Two roads with the same outcome, and only file paths reach the driver:
- the batch's distinct keys are on the driver (a small batch): pyarrow tasks read the candidates' key
  columns only and test them against that key set (`tasks.files_holding`);
- otherwise, or when candidates straddle a window's edge: a distributed semi-join of the candidates' keys
  (rows inside the window only) with the batch's keys, in Spark.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFile

from ...read.reader import file_uris
from . import tasks
from .batch import PATH
from .plan import MergePlan


def matched_files(spark, plan: MergePlan) -> list[DataFile]:
    """The candidates of `plan` holding at least one of its batch's keys (inside its window)."""
    if not plan.candidates:
        return []
    if plan.values is not None and not plan.straddling:
        holding = tasks.files_holding(spark, plan.target, plan.candidates, plan.values)
        return [f for f in plan.candidates if f.file_path in holding]
    by_uri = {f.file_path: f for f in plan.candidates}
    existing = plan.target.read(spark, plan.candidates, path_column=PATH)
    inside = plan.inside(existing)
    existing = existing.filter(inside) if inside is not None else existing
    hits = existing.select(*plan.keys, PATH).join(plan.batch_keys(), plan.keys, "left_semi")
    spelled = [r[0] for r in hits.select(PATH).distinct().collect()]  # file paths only
    return [by_uri[u] for u in file_uris(spelled, list(by_uri))]

"""Copy-on-write, the default merge strategy: each file holding a key of the batch is rewritten without it.

Matched files are rewritten: their rows minus the batch's keys, plus the batch's inserted/updated rows,
one file per partition. A small batch's rewrite is the same job as its matching
(`tasks.rewrite_in_one_job`: its upserts travel with the tasks, grouped by partition with the
candidates; no shuffle, no second job); any other batch is matched (write/merge/matching.py) and rewritten in
Spark (an anti-join, then `write_files`, which shuffles by partition). Files without a matched key are
never opened for writing and stay live as they are.
The commit pipeline commits removes (matched files) + adds (the rewrite) as ONE Iceberg overwrite
snapshot, which the Delta mirror turns into ONE Delta commit (remove + add).
"""

from __future__ import annotations

from ...model import FileChanges
from . import tasks
from .matching import matched_files
from .plan import MergePlan


def copy_on_write(spark, plan: MergePlan, changes: FileChanges) -> None:
    """Write the merged files into `changes` (adds; removes = the matched files); counts them in `plan.stats`."""
    target, stats = plan.target, plan.stats
    if plan.values is not None and not plan.straddling:
        on_driver = plan.upserts_on_driver()
        rewritten = tasks.rewrite_in_one_job(spark, target, plan.candidates, plan.values, plan.upserts, changes, upserts_on_driver=on_driver)
        if rewritten is not None:
            stats.matched_files = len(rewritten)
            changes.removes += rewritten
            return
    matched = matched_files(spark, plan)
    stats.matched_files = len(matched)
    if matched:
        rows = target.read(spark, matched)
        inside = plan.inside(rows)
        if inside is not None:
            kept = rows.filter(~inside).unionByName(rows.filter(inside).join(plan.batch_keys(), plan.keys, "left_anti"))
        else:
            kept = rows.join(plan.batch_keys(), plan.keys, "left_anti")
        merged = kept.unionByName(plan.upserts())
    else:
        merged = plan.upserts()
    if not target.table.spec().fields:
        # Unpartitioned: one Spark partition per output file otherwise (the union adds the batch's partitions).
        merged = merged.coalesce(max(1, len(matched)))
    target.write(merged, changes)
    changes.removes += matched

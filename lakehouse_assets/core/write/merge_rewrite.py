"""Copy-on-write, the default merge strategy: each file holding a key of the batch is rewritten without it.

Matched files are rewritten: their rows minus the batch's keys, plus the batch's inserted/updated rows,
one file per partition. A small batch's rewrite is the same job as its matching
(`merge_tasks.rewrite_in_one_job`: its upserts travel with the tasks, grouped by partition with the
candidates; no shuffle, no second job); any other batch is matched (merge_matching.py) and rewritten in
Spark (an anti-join, then `write_files`, which shuffles by partition). Files without a matched key are
never opened for writing and stay live as they are.
The commit pipeline commits removes (matched files) + adds (the rewrite) as ONE Iceberg overwrite
snapshot, which the Delta mirror turns into ONE Delta commit (remove + add).
"""

from __future__ import annotations

import pyarrow as pa

from ..model import FileChanges
from . import merge_tasks
from .merge_batch import DELETE, arrow_schema
from .merge_matching import matched_files
from .merge_plan import MergePlan


def copy_on_write(spark, plan: MergePlan, changes: FileChanges) -> None:
    """Write the merged files into `changes` (adds; removes = the matched files); counts them in `plan.stats`."""
    target, stats = plan.target, plan.stats
    if plan.values is not None and not plan.straddling:
        rows = plan.key_stats.rows
        on_driver = _upserts_of(rows, plan.batch.schema, plan.spark_schema) if rows is not None else None
        rewritten = merge_tasks.rewrite_in_one_job(spark, target, plan.candidates, plan.values, plan.upserts, changes, upserts_on_driver=on_driver)
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


def _upserts_of(rows: pa.Table, batch_schema, spark_schema) -> pa.Table | None:
    """The prepared batch's inserted/updated rows in the table's columns (those the batch lacks are null),
    from its rows on the driver; None when a column would need a cast (Spark's semantics: collect anew)."""
    import pyarrow.compute as pc

    have = {f.name: f.dataType for f in batch_schema.fields if f.name != DELETE}
    if not set(have) <= set(spark_schema.fieldNames()):
        return None  # a column spelled in another case (Spark resolves it case-insensitively) or not stored
    if any(f.name in have and have[f.name] != f.dataType for f in spark_schema.fields):
        return None
    kept = rows.filter(pc.invert(rows.column(DELETE)))
    arrow = arrow_schema(spark_schema)
    return pa.table({f.name: kept.column(f.name) if f.name in have else pa.nulls(kept.num_rows, f.type) for f in arrow})

"""Merge by key (upsert and CDC delete): one plan, two strategies, one snapshot.

    merge.py           the entry: plan, the strategy the table asks for, the snapshot summary, a lost race re-checked
    batch.py           the batch checked (null and duplicate keys, control columns), deduplicated and measured
    plan.py            the candidate files, from metadata (key ranges or an In-set, the window)
    matching.py        which candidates really hold a key of the batch
    rewrite.py         copy-on-write: each file holding a key rewritten without it
    on_read.py         merge-on-read: the replaced rows' positions as delete files, no data file rewritten
    tasks.py           the executor-side work over the candidate files (pyarrow tasks)
    on_read_tasks.py   merge-on-read's executor-side work in one Spark job
    changes.py         the Delta change data of a small merge, written by its own rewrite
"""

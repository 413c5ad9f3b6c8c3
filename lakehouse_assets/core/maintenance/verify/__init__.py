"""The formats-agree check: do Iceberg and Delta say the same thing about the table? (Read-only.)

    settled.py           verify_settled: the check's entry, looking again when it met a commit in flight
    formats_agree.py     verify_table: the check's entry, the live file sets and the schema of both formats
    files.py             per file both logs hold: counts, partition values and statistics
    changes.py           only what changed since a pair of versions that agreed
    deletion_vectors.py  on a merge-on-read table: the rows each format deletes from each file
    content.py           `--deep`: DuckDB reads both formats and compares counts and a hash of the rows
    change_data.py       `--deep`: the Delta change data of the current snapshot against the rows it changed
    footers.py           `--deep`: both logs' counts and bounds against each file's Parquet footer
"""

"""The Iceberg side, the source of truth: pyiceberg commits and reads the metadata.

    committer.py   externally written Parquet files committed as one snapshot; a snapshot's live data files
    metadata.py    table metadata with staged updates applied, without copying the table's history
"""

"""The two table formats over the same Parquet files: the Iceberg commit (the source of truth), the Delta
mirror of each Iceberg snapshot (values, statistics, column mapping), and what another engine may have
written on either side (delete files, foreign Delta versions and their adoption).

    iceberg/              the Iceberg side (commit, metadata)
    delta/                the Delta side (the mirror, its commits, other engines' versions); it reads Iceberg, never the reverse
    file_columns.py       which name each column has inside the Parquet files (Delta column mapping's physical names)
    deletes.py            Iceberg delete files (other engines' and merge-on-read's): found, refused where ignored, applied
    position_deletes.py   position-delete files of merge-on-read tables, one per data file (the Delta vectors' source)
    history.py            from metadata only: the snapshot ancestor chain and the snapshot <-> Delta version map
    snapshot_changes.py   one Iceberg snapshot's file changes, read from its manifests
    manifest_lists.py     the manifests a snapshot lists, read once per manifest list
"""

"""The Delta side: the log as a mirror of Iceberg's snapshots, and what other engines write into it.

One module per concern:

    committer.py         DeltaMirror: which Iceberg snapshots Delta still lacks, mirrored in order
    snapshot_commit.py   one Iceberg snapshot as one Delta commit
    actions.py           add and remove actions from Iceberg data files (paths, partition values, stats)
    values.py            how the log spells partition values and statistics
    schema_evolution.py  the Delta schema and properties brought up to a snapshot before its files land
    refusals.py          what the log cannot express of an Iceberg table, and the error that says so
    log_commit.py        every data version's whole commit (add, remove, cdc, txn, commitInfo), written put-if-absent
    followed_log.py      a delta-rs read of the log, followed by its commit files since
    column_mapping.py    column mapping's metaData commits (ids and physical names)
    deletion_vectors.py  deletion vectors: bytes, files, descriptors and the actions that carry them
    vector_mirror.py     a snapshot's position deletes as deletion vectors
    vector_adoption.py   other engines' deletion vectors as Iceberg position-delete files
    logged_vectors.py    the vectors a version's live files carry, and the vector files versions reference
    logged_stats.py      add actions' stats as the log spells them, before a reader parses them
    kept_logs.py         the followed log a write read, kept for the process's next write of the table
    foreign_versions.py  versions the mirror did not write: found, named, refused or reverted
    adoption.py          another engine's Delta versions adopted into Iceberg
    partition_constants.py  identity partition values that adopted files lack, read from the log
    features.py          the table features an imported Delta table may have
    glue.py              the Delta side registered in AWS Glue next to the Iceberg table
"""

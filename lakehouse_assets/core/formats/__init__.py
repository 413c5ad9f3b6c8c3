"""The two table formats over the same Parquet files: the Iceberg commit (the source of truth), the Delta
mirror of each Iceberg snapshot (values, statistics, column mapping), and what another engine may have
written on either side (delete files, foreign Delta versions and their adoption)."""

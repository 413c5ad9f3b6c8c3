"""The write path: the Spark job that writes Parquet files once, the write modes (append, overwrite,
merge) and compaction tasks built on it, deletes and updates by condition, schema changes (`alter`), and the
commit pipeline that commits the written files to Iceberg and then mirrors them to Delta."""

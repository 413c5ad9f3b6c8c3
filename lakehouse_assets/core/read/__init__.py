"""The read path: reading a table (either format, any snapshot or version) in Spark through the
project's Parquet reader, filters pushed down to file pruning, time travel, Arrow and DuckDB readers."""

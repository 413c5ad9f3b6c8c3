"""What a table is, in both formats: its spec (partitioning, formats, properties), the mapping of its
column types between Spark, Arrow, Iceberg and Delta, its statistics policy and its partition columns."""

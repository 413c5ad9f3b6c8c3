"""The Dagster-free core: table spec, writer, the Iceberg and Delta committers, readers, maintenance."""

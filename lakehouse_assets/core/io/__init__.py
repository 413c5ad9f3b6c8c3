"""Where the files live: storage configuration (local, S3, GCS, Azure) as pyarrow file systems, Spark
options, Delta storage options and pyiceberg FileIO properties, all derived from one `StorageConfig`."""

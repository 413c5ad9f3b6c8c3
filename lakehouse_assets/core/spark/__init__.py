"""The Spark session the lakehouse runs on (`spark.master` is configuration) and what differs between the
supported Spark lines."""

"""Spark DataFrames over a list of Parquet files chosen by Iceberg scan planning or a Delta version.

On file:// Spark's own Parquet reader opens the files. On object stores Spark's JVM has no S3
connector here, so the files are opened on the executors with pyarrow (the driver only ships paths).
Either way columns are matched by name and columns missing from older files read as null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .storage import StorageConfig


@dataclass
class _ParquetFileReader:
    """mapInArrow function: path rows in, table rows out (runs on the executors)."""

    storage: StorageConfig
    arrow_schema: pa.Schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from .writer import conform_batch

        for batch in batches:
            for uri in batch.column(0).to_pylist():
                fs, path = self.storage.filesystem(uri)
                parquet = pq.ParquetFile(fs.open_input_file(path))
                names = [n for n in self.arrow_schema.names if n in parquet.schema_arrow.names]
                for rb in parquet.iter_batches(columns=names, batch_size=65536):
                    yield conform_batch(rb, self.arrow_schema)


def read_parquet_files(spark, uris: list[str], spark_schema, storage: StorageConfig):
    if not uris:
        return spark.createDataFrame([], spark_schema)
    if all(u.startswith("file:") for u in uris):
        return spark.read.schema(spark_schema).parquet(*uris)
    from pyspark.sql.pandas.types import to_arrow_schema

    paths = spark.createDataFrame([(u,) for u in uris], "path string").repartition(min(len(uris), spark.sparkContext.defaultParallelism * 4))
    return paths.mapInArrow(_ParquetFileReader(storage, to_arrow_schema(spark_schema)), spark_schema)

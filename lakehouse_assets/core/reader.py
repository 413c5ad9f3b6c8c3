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
    path_column: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from .type_mapping import conform_batch

        for batch in batches:
            for uri in batch.column(0).to_pylist():
                fs, path = self.storage.filesystem(uri)
                parquet = pq.ParquetFile(fs.open_input_file(path))
                names = [n for n in self.arrow_schema.names if n in parquet.schema_arrow.names]
                data_schema = pa.schema([f for f in self.arrow_schema if f.name != self.path_column])
                for rb in parquet.iter_batches(columns=names, batch_size=65536):
                    out = conform_batch(rb, data_schema)
                    if self.path_column:
                        out = out.append_column(self.path_column, pa.array([uri] * out.num_rows, pa.string()))
                    yield out


def read_parquet_files(spark, uris: list[str], spark_schema, storage: StorageConfig, path_column: str | None = None, cast_files: bool = False):
    """`path_column` adds each row's file URI, exactly as given in `uris` (merge uses it to find matched files).

    `cast_files`: some files hold narrower types than `spark_schema` (widened columns); read them with
    pyarrow, which casts, instead of Spark's Parquet reader, which refuses.
    """
    from pyspark.sql.types import StringType, StructField, StructType

    out_schema = StructType([*spark_schema.fields, StructField(path_column, StringType(), False)]) if path_column else spark_schema
    if not uris:
        return spark.createDataFrame([], out_schema)
    if not cast_files and all(u.startswith("file:") for u in uris):
        df = spark.read.schema(spark_schema).parquet(*uris)
        if path_column:
            from pyspark.sql import functions as F

            # Spark reports file:/x for file:///x; map its spelling back onto the URIs we were given.
            spelled = {_file_key(u): u for u in uris}
            mapping = F.create_map(*[x for k, u in spelled.items() for x in (F.lit(k), F.lit(u))])
            df = df.withColumn(path_column, mapping[F.expr("url_decode(regexp_replace(input_file_name(), '^file:/+', '/'))")])
        return df
    from pyspark.sql.pandas.types import to_arrow_schema

    paths = spark.createDataFrame([(u,) for u in uris], "path string").repartition(min(len(uris), spark.sparkContext.defaultParallelism * 4))
    return paths.mapInArrow(_ParquetFileReader(storage, to_arrow_schema(out_schema), path_column), out_schema)


def _file_key(uri: str) -> str:
    from urllib.parse import unquote

    return "/" + unquote(uri[len("file:"):]).lstrip("/")

"""The rows other engines' Iceberg delete files remove, as (file path, row position), computed in Spark.

Which delete file applies to which data file follows the Iceberg spec's rules (`deletes.applies`: sequence
numbers and partitions) and is decided on the driver from metadata; position deletes match by (file path,
row position), equality deletes by a null-safe semi-join on the equality columns. Only file paths reach the
driver. Used by `repair --apply-deletes` (which rewrites the files without those rows) and by
`Lakehouse.changes` (the rows a commit's delete files removed).
"""

from __future__ import annotations

from ..errors import DeleteFilesError
from ..formats.deletes import applies
from ..formats.delta import partition_constants
from ..schema.type_mapping import iceberg_to_spark_schema
from .reader import read_parquet_files

PATH, POSITION, DELETE_FILE = "_lakehouse_file", "_lakehouse_pos", "_lakehouse_delete_file"


def dropped_rows(spark, identifier: str, table, files, spark_schema, storage, persist: bool = True):
    """(file path, row position) of every row a delete file removes, persisted; None when no data file is affected.
    Which delete file applies to which data file is decided on the driver from metadata; rows are matched in Spark."""

    pairs = [(d.data_file.file_path, f.data_file.file_path) for d in files.deletes for f in files.data if applies(d, f)]
    candidates = sorted({data for _, data in pairs})
    if not candidates:
        return None
    schema = table.schema()
    by_uri = {e.data_file.file_path: e.data_file for e in files.data}
    constants = partition_constants.of_files(table, [by_uri[u] for u in candidates], schema)  # partition columns a file lacks
    rows = read_parquet_files(spark, candidates, spark_schema, storage, path_column=PATH, position_column=POSITION, constants=constants)
    pair_df = spark.createDataFrame(pairs, f"{DELETE_FILE} string, {PATH} string")
    parts = []
    if pos_files := sorted({e.data_file.file_path for e in files.position_deletes}):
        parts.append(_position_drops(spark, pos_files, pair_df, storage))
    groups: dict[tuple, list[str]] = {}
    for e in files.equality_deletes:
        groups.setdefault(tuple(sorted(e.data_file.equality_ids or [])), []).append(e.data_file.file_path)
    for ids, uris in groups.items():
        parts.append(_equality_drops(spark, identifier, schema, ids, uris, rows, pair_df, storage))
    drops = parts[0]
    for p in parts[1:]:
        drops = drops.unionByName(p)
    drops = drops.distinct()
    return drops.persist() if persist else drops  # persisted: the caller reads it more than once, then unpersists it


def _position_drops(spark, pos_files: list[str], pair_df, storage):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    pos_schema = StructType([StructField("file_path", StringType()), StructField("pos", LongType())])
    pos = read_parquet_files(spark, pos_files, pos_schema, storage, path_column=DELETE_FILE, cast_files=True)
    return pos.join(pair_df, DELETE_FILE).filter(F.col("file_path") == F.col(PATH)).select(PATH, F.col("pos").alias(POSITION))


def _equality_drops(spark, identifier: str, schema, ids: tuple, uris: list[str], rows, pair_df, storage):
    from pyspark.sql import functions as F

    names = [schema.find_column_name(i) for i in ids]
    if not ids or any(n is None or "." in n for n in names):
        raise DeleteFilesError(
            f"Table {identifier}: equality-delete file(s) {uris[:3]} use equality field ids {list(ids)} that are not "
            "top-level columns of the current schema; they cannot be applied here. Apply them with the engine that wrote them."
        )
    eq = read_parquet_files(spark, uris, iceberg_to_spark_schema(schema.select(*names)), storage, path_column=DELETE_FILE, cast_files=True)
    keyed = eq.join(pair_df, DELETE_FILE).select(F.col(PATH).alias("_eq_file"), *[F.col(n).alias(f"_eq_{n}") for n in names])
    cond = rows[PATH] == keyed["_eq_file"]
    for n in names:
        cond = cond & rows[n].eqNullSafe(keyed[f"_eq_{n}"])  # Iceberg: null equals null in an equality delete
    return rows.join(keyed, cond, "left_semi").select(PATH, POSITION)

"""The rewrite Delta adoption needs (core/formats/delta/adoption.py): another engine's Delta files written again
by the project's writer when pyiceberg cannot read them beside the table's other files."""

from __future__ import annotations

from ..formats import file_columns
from ..io.storage import StorageConfig
from ..model import FileChanges
from ..read.reader import read_parquet_files
from ..schema.type_mapping import iceberg_to_spark_schema
from ..spark.session import active_session
from ..table.evolution import column_names_moved
from .target import WriteTarget


def adoption_rewrite(storage: StorageConfig, identifier: str, spark=None):
    """The `rewrite` of `delta_adoption.adopt`: foreign Delta files that pyiceberg cannot read beside the table's
    other files (Arrow view types declared in them) written again by the project's writer, rows unchanged, in the
    adopted snapshot's schema. Rows are read on the executors (by name, or by field id under column mapping, where
    delta-rs tags columns with the Iceberg field ids); identity partition columns the files lack come from `constants`."""

    def rewrite(table, schema, files, constants, created: list[str]):
        session = active_session(spark)
        target = WriteTarget(identifier, table, schema, storage, cast_files=True)
        by_id = column_names_moved(table) or file_columns.enabled(table.properties)
        changes = FileChanges()
        try:
            rows = read_parquet_files(session, [f.file_path for f in files], iceberg_to_spark_schema(schema, field_ids=by_id), storage, cast_files=True, constants=constants)
            return target.write(rows, changes, counts_as_written=False)
        finally:
            created += changes.created

    return rewrite

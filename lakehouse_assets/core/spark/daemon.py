"""PySpark's Python worker daemon without one per-task cost: re-reading Spark's own zip archives.

Before every task PySpark's worker calls `importlib.invalidate_caches()` (so that files added with
`addPyFile` are found). Since CPython 3.10 that makes every zipimporter on `sys.path` re-read its
archive's directory, and Spark puts `pyspark.zip`, py4j's zip and the spark-core jar (about 6,000
entries) on the workers' PYTHONPATH: 0.1-0.5 s of CPU for every Python task, whatever its size.
Spark's own archives do not change while a worker lives, so their importers keep their directories;
every other importer (directories, archives added with `addPyFile`) is still invalidated.

Spark starts it when `spark.python.daemon.module` names this module (the project's session does;
see `core/spark/session.py`). Executors need the project installed, as they already do for its write functions.
"""

from __future__ import annotations

import os
import zipimport

import pyspark

# Archives under the PySpark installation (python/lib/*.zip, jars/*.jar) or SPARK_HOME.
_SPARK_ARCHIVE_ROOTS = tuple(
    os.path.join(os.path.realpath(p), "") for p in (os.path.dirname(pyspark.__file__), os.environ.get("SPARK_HOME")) if p
)
_invalidate_zip = zipimport.zipimporter.invalidate_caches


def _invalidate_unless_spark_archive(self) -> None:
    if os.path.realpath(self.archive).startswith(_SPARK_ARCHIVE_ROOTS):
        return
    _invalidate_zip(self)


zipimport.zipimporter.invalidate_caches = _invalidate_unless_spark_archive

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()

"""Python workers keep Spark's own archives indexed from one task to the next.

Before every task PySpark's worker calls `importlib.invalidate_caches()` (so that files added with `addPyFile`
are found). Since CPython 3.10 that makes every zipimporter on `sys.path` re-read its archive's directory, and
Spark puts `pyspark.zip`, py4j's zip and the spark-core jar (about 6,000 entries) on the workers' PYTHONPATH:
0.02-0.5 s of CPU for every Python task, whatever its size. Spark's own archives do not change while a worker
lives, so their importers keep their directories; every other importer (directories, archives added with
`addPyFile`) is still invalidated.

The project's session installs this in its worker daemon (core/spark/daemon.py), before any task; any other
session (a cluster's, a notebook's) gets it from the first of our tasks a worker runs (the write, read, merge
and compaction functions call `keep_spark_archives_indexed`), for every later task of that worker. Pure
standard library: it runs in every Python worker.
"""

from __future__ import annotations

import importlib.util
import os
import zipimport

_invalidate_zip = zipimport.zipimporter.invalidate_caches


def keep_spark_archives_indexed() -> None:
    """Install the invalidation that skips Spark's own archives (once per process; later calls return at once)."""
    if zipimport.zipimporter.invalidate_caches is not _invalidate_zip:
        return
    roots = _spark_archive_roots()

    def _invalidate_unless_spark_archive(self) -> None:
        if os.path.realpath(self.archive).startswith(roots):
            return
        _invalidate_zip(self)

    zipimport.zipimporter.invalidate_caches = _invalidate_unless_spark_archive


def _spark_archive_roots() -> tuple[str, ...]:
    """The PySpark installation (python/lib/*.zip, jars/*.jar) and SPARK_HOME, each ending in a separator."""
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    pyspark_dir = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    return tuple(os.path.join(os.path.realpath(p), "") for p in (pyspark_dir, os.environ.get("SPARK_HOME")) if p)

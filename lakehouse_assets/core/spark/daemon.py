"""PySpark's Python worker daemon, with Spark's own archives kept indexed in every worker it forks
(core/spark/archives.py: no re-read of Spark's zips and jars before each task), and the libraries every task of the
project imports loaded once, before any fork.

Spark starts it when `spark.python.daemon.module` names this module (the project's session does;
see `core/spark/session.py`). Executors need the project installed, as they already do for its write functions.

Spark forks a worker from this daemon for each Python task that finds no idle one, and stops workers idle for a
minute: a merge every few minutes meets no idle worker. A fresh worker imports what its task needs, pyarrow,
pandas (PySpark's Arrow serializers) and pyiceberg (the project's file readers and writers), seconds of CPU on a
loaded machine; imported here, every fork starts with them. The only threads the imports start are numpy's
(PySpark's own daemon imports numpy before it forks too) and pyarrow's jemalloc background thread, whose fork
handlers reset it in the child.

A reused worker runs a full `gc.collect()` after every task (PySpark's daemon does), and a full collection walks
every object the process tracks: with these libraries loaded, about 115,000 objects and 30-45 ms of CPU per task,
spent just as the driver commits. The daemon freezes what it preloaded (`gc.freeze`) before it forks, so its
workers' collections walk only what their tasks made; the forks also keep sharing those pages with the daemon.

Its workers acknowledge their input as they read it (core/spark/worker_socket.py): a reused worker otherwise waits
40 ms, the kernel's delayed-ACK timer, for one task's input in about five.

Spark puts `pyspark.zip` first on the workers' path, and modules in a zip are compiled from source by every process
that imports them (no bytecode is ever written into it): 0.7 s of CPU for what the daemon imports of PySpark, against
0.2 s from a compiled package, here. A pip-installed PySpark ships that very zip inside its own package, whose modules
were compiled at install: the daemon then imports PySpark from the package (`pyspark_from_its_package`). A zip of
another installation (a cluster's SPARK_HOME) is left first.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

from .archives import keep_spark_archives_indexed


def pyspark_from_its_package() -> None:
    """Take off `sys.path` a `pyspark.zip` that lies in the installed PySpark package it holds (<dir>/pyspark/python/lib/
    pyspark.zip, with <dir> on the path), before anything imports PySpark."""
    if "pyspark" in sys.modules:
        return
    on_path = {os.path.realpath(p) for p in sys.path if p}
    for entry in [p for p in sys.path if os.path.basename(p) == "pyspark.zip"]:
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(entry))))
        if os.path.basename(package) == "pyspark" and os.path.isfile(os.path.join(package, "__init__.py")) and os.path.dirname(package) in on_path:
            sys.path.remove(entry)


pyspark_from_its_package()
keep_spark_archives_indexed()

# distutils.version: PySpark 3.5 imports it in every Arrow task (`to_arrow_type`); under setuptools' distutils shim
# the first import in a process takes about 120 ms of CPU. parquet_files: the file writer every write task unpickles.
PRELOADED = (
    "pyarrow.parquet", "pyarrow.compute", "pyarrow.dataset", "pyarrow.ipc", "pandas", "pyiceberg.manifest", "pyiceberg.io.pyarrow", "pyiceberg.table",
    "pyspark.sql.pandas.serializers", "distutils.version", "lakehouse_assets.core.write.parquet_files",
)  # fmt: skip


def preload() -> None:
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a library that does not load here is imported (and fails) in the task as before
            pass


if __name__ == "__main__":
    import pyspark.daemon

    from .worker_socket import reading_with_quick_acks

    pyspark.daemon.worker = reading_with_quick_acks(pyspark.daemon)  # called in each forked worker
    preload()
    gc.freeze()  # see the module docstring: workers' collections skip what every fork shares
    pyspark.daemon.manager()

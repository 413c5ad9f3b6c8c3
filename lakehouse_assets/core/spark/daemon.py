"""PySpark's Python worker daemon, with Spark's own archives kept indexed in every worker it forks
(core/spark/archives.py: no re-read of Spark's zips and jars before each task).

Spark starts it when `spark.python.daemon.module` names this module (the project's session does;
see `core/spark/session.py`). Executors need the project installed, as they already do for its write functions.
"""

from __future__ import annotations

from .archives import keep_spark_archives_indexed

keep_spark_archives_indexed()

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()

"""A process for the kill tests of an update by condition: one copy-on-write `Lakehouse.update` (the one Spark job that
finds the matched rows and rewrites their files with the new values and the change data), SIGKILLed (the whole process
group: Python and Spark's JVM) at a named phase.

    python -m lakehouse_assets_tests.update_process WAREHOUSE TABLE SET_COLUMN SET_EXPRESSION WHERE KILL_AT

Phases (what has happened when the process dies):
    files_written       the job wrote the rewritten data files and the change data; nothing is committed
    iceberg_committed   the Iceberg snapshot is committed; the Delta version has not been written
    delta_committed     both formats committed; the call has not returned

The hooks wrap the project's functions from outside (this script only): production code has no test hook.
"""

from __future__ import annotations

import os
import signal
import sys


def die() -> None:
    sys.stdout.flush()
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(warehouse: str, identifier: str, column: str, expression: str, where: str, kill_at: str) -> None:
    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.spark.session import spark_session
    from lakehouse_assets.core.write import position_rewrite, transaction

    spark = spark_session({"spark.master": "local[1]", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})

    rewrite = position_rewrite.rewrite_with_updates

    def rewrite_then_die(*args, **kwargs):
        matched = rewrite(*args, **kwargs)
        if kill_at == "files_written":
            die()
        return matched

    mirror_to_delta = transaction.mirror_to_delta

    def mirror_around(*args, **kwargs):
        if kill_at == "iceberg_committed":
            die()
        mirror_to_delta(*args, **kwargs)
        if kill_at == "delta_committed":
            die()

    position_rewrite.rewrite_with_updates = rewrite_then_die
    transaction.mirror_to_delta = mirror_around
    Lakehouse(warehouse).update(identifier, {column: expression}, where, spark=spark)
    print("not killed")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""A class-data-sharing archive of the classes a Spark driver loads, so that the suite's many JVMs start faster.

The suite starts dozens of Spark driver JVMs (its sessions, the Dagster runs in subprocesses, `dagster dev`'s runs,
the Connect server), and each one loads and verifies some 10,000 classes from Spark's jars before its first job.
A JDK's dynamic CDS archive (`-XX:ArchiveClassesAtExit`, JDK 13 and later) holds those classes already parsed: a
local session's start, one job and stop take about 3.5 s with it instead of 6-7 s here.

The archive is made once per virtual environment, Spark and JDK (one session run with `ArchiveClassesAtExit`), and
kept in the venv. A JVM whose class path does not match it (another Spark, another JDK, a different
`SPARK_CONF_DIR`) ignores it; its logging is off, so that says nothing on the JVM's output either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SESSION = (
    "from lakehouse_assets.core.spark.session import spark_session\n"
    "s = spark_session({})\n"
    "s.range(10).selectExpr('sum(id)').collect()\n"
    "s.stop()\n"
)


def _java_version() -> str:
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    first = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else "unknown"
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in first)[:80]


def archive_path() -> Path:
    import pyspark

    return Path(sys.prefix) / "lakehouse-test-cds" / f"pyspark-{pyspark.__version__}-{_java_version()}.jsa"


def jvm_options(base_options: str) -> str:
    """`base_options` with the archive's options, making the archive first if this venv has none (about 10 s).
    Unchanged when it cannot be made (an old JDK, a failed session): the JVMs then start as before."""
    path = archive_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{base_options} -XX:ArchiveClassesAtExit={partial}".strip()}
        try:
            subprocess.run([sys.executable, "-c", _SESSION], env=env, capture_output=True, timeout=300, check=True)
            os.replace(partial, path)  # whole or not at all: another process may read it at once
        except (subprocess.SubprocessError, OSError):
            partial.unlink(missing_ok=True)
            return base_options
    return f"{base_options} -XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off".strip()

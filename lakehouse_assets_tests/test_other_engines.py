"""Every snippet of the README's "Reading from other engines" runs, as written, against a real table.

The snippets are taken from the README itself (so they cannot drift from what is tested); the only
substitutions are the warehouse path and the table name. Each snippet's `n_*` variables must all be the
table's row count.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import java_iceberg

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_snippets() -> list[str]:
    text = README.read_text()
    section = text.split("## Reading from other engines", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_has_a_snippet_per_engine():
    code = "\n".join(readme_snippets())
    for engine in ("iceberg_scan", "delta_scan", "DeltaTable", "pl.read_delta", "pl.scan_iceberg", "StaticTable", "SqlCatalog", 'format("iceberg")', '.type": "jdbc"'):
        assert engine in code, engine


def test_readme_snippets_read_the_same_rows(lh, spark, warehouse):
    df = spark.sql(
        "SELECT id, IF(id % 3 = 0, NULL, CAST(id % 4 AS STRING)) AS region, "
        "TIMESTAMP'1500-01-01 00:00:00' + make_interval(0, 0, 0, CAST(id AS INT)) AS event_time FROM range(40)"
    )
    lh.write(df, "engines.events", partition_by=["region", "day(event_time)"])
    lh.write(df.limit(5), "engines.events")  # a second snapshot: readers must pick the current metadata
    expected = 45
    namespace: dict = {}
    for snippet in readme_snippets():
        if ('format("iceberg")' in snippet or '.type": "jdbc"' in snippet) and not java_iceberg.available():
            continue  # the Java Iceberg runtime exists here for Spark 3.5 only
        code = snippet.replace("./warehouse", warehouse).replace("demo.events", "engines.events")
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own snippets
    counts = {k: v for k, v in namespace.items() if k.startswith("n_")}
    # DuckDB x2, delta-rs, Polars x2, pyiceberg x2, Java Iceberg x2 (path, JdbcCatalog) on Spark 3.5
    assert len(counts) == (9 if java_iceberg.available() else 7), counts
    assert all(v == expected for v in counts.values()), counts

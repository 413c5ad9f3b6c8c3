"""The "Reading from other engines" page has a snippet per engine; test_docs.py runs them against a real table.

Each runnable snippet of docs/other-engines.md asserts the row count it reads, so an engine that read the
table differently would fail there; this file checks that no engine's snippet goes missing from the page.
"""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "other-engines.md"


def test_the_page_has_a_snippet_per_engine():
    code = "\n".join(re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S))
    for engine in ("iceberg_scan", "delta_scan", "DeltaTable", "pl.read_delta", "pl.scan_iceberg", "StaticTable", "SqlCatalog", 'format("iceberg")', '.type": "jdbc"'):
        assert engine in code, engine

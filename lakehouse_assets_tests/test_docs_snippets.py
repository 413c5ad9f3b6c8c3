"""Every Python snippet of the user documentation (docs/*.md) runs, as written, so the docs cannot drift from the code.

The snippets of one page run in order in one namespace (a page may build on its earlier snippets); each
creates what it needs (a temporary warehouse, the project's Spark session) and asserts what it shows.
Blocks fenced as ```text are commands or configuration for the reader, not run here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.glob("**/*.md") if re.search(r"```python\n", p.read_text()))


def snippets(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_the_documentation_has_runnable_snippets():
    assert PAGES, f"no page under {DOCS} has a Python snippet"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_every_snippet_of_the_page_runs(page, spark):
    namespace: dict = {"__name__": f"docs.{page.stem}"}
    for i, code in enumerate(snippets(page)):
        exec(compile(code, f"{page.relative_to(DOCS.parent)} snippet {i + 1}", "exec"), namespace)  # noqa: S102 - our own docs

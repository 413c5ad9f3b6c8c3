"""The code keeps the shape CONTRIBUTING.md describes: its map names every package and only packages that exist,
every package says what its modules hold, modules stay under 450 lines and functions under 60 (docstrings aside)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lakehouse_assets"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def _packages() -> set[str]:
    return {str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE}


def _mapped_folders() -> set[str]:
    """The folders the map in CONTRIBUTING.md names, as paths below lakehouse_assets/ (two spaces of indent a level)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text[text.index("The map of the code"):]
    block = block[block.index("```text") + len("```text"):]
    block = block[:block.index("```")]
    folders, parents = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        names = [n.strip() for n in re.split(r"\s{2,}", line.strip())[0].split(",")]  # the first column, before the description
        here = [n[:-1] for n in names if n.endswith("/")]
        if depth == 0:
            parents = here
            continue
        parents = parents[:depth]
        folders.update("/".join(parents[1:] + [name]) for name in here)
        if len(names) == 1 and here:
            parents.append(here[0])
    return folders


def test_the_map_in_contributing_names_every_package_and_no_other():
    packages, mapped = _packages(), _mapped_folders()
    assert packages - mapped == set(), f"packages missing from CONTRIBUTING.md's map of the code: {sorted(packages - mapped)}"
    assert mapped - packages == set(), f"CONTRIBUTING.md's map names folders that are not packages: {sorted(mapped - packages)}"


def test_every_package_says_what_it_holds():
    silent = [p for p in _packages() if not ast.get_docstring(ast.parse((PACKAGE / p / "__init__.py").read_text()))]
    assert not silent, f"packages without a docstring in __init__.py: {silent}"


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    return node.end_lineno - node.lineno + 1 - (first.end_lineno - first.lineno + 1 if docstring else 0)


def test_modules_and_functions_stay_small():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(ROOT)
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n := _function_lines(node)) > MAX_FUNCTION_LINES:
                too_long.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    assert not too_long, f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function (docstring aside): {too_long}"

"""The reference table of metadata keys (docs/io-manager.md) lists exactly the keys the Dagster layer reads.

The keys are found in the code itself: every `metadata.get(KEY)`, `metadata[KEY]` and `KEY in metadata`
of the modules that read asset or input metadata, with KEY a string, a module constant, or a name bound
by a comprehension over a tuple of strings. A key added to the code without a row, or a row left behind
by a key removed from the code, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAGSTER_LAYER = ROOT / "lakehouse_assets" / "dagster"
READERS = ("io_manager.py", "inputs.py", "audit.py", "incremental.py")
ROW = re.compile(r"^\| `(?P<key>[^`]+)` \|(?P<rest>.*)\|\s*$", re.M)


def _constants(trees: dict[str, ast.Module]) -> dict[str, object]:
    """Module-level string and tuple-of-string constants, by name and by `module.NAME`."""
    out: dict[str, object] = {}
    for module, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                if isinstance(value, str) or (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
                    out[node.targets[0].id] = out[f"{module}.{node.targets[0].id}"] = value
    return out


def _keys_of(node: ast.AST, constants: dict, bound: dict) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    name = ast.unparse(node)
    value = bound.get(name, constants.get(name))
    if isinstance(value, str):
        return {value}
    if isinstance(value, tuple):
        return set(value)
    raise AssertionError(f"metadata read with a key this test cannot resolve: {name}")


def _is_metadata(node: ast.AST) -> bool:
    return "metadata" in ast.unparse(node)


def code_keys() -> set[str]:
    trees = {path.stem: ast.parse(path.read_text()) for path in (DAGSTER_LAYER / name for name in READERS)}
    constants = _constants(trees)
    keys: set[str] = set()
    for tree in trees.values():
        bound: dict[str, object] = {}
        for node in ast.walk(tree):  # comprehensions over a tuple of keys bind their target to the tuple
            if isinstance(node, ast.comprehension) and isinstance(node.target, ast.Name):
                try:
                    bound[node.target.id] = ast.literal_eval(node.iter)
                except ValueError:
                    if ast.unparse(node.iter) in constants:
                        bound[node.target.id] = constants[ast.unparse(node.iter)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and _is_metadata(node.func.value) and node.args:
                keys |= _keys_of(node.args[0], constants, bound)
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and "metadata" in node.value.id:
                keys |= _keys_of(node.slice, constants, bound)
            elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and _is_metadata(node.comparators[0]):
                keys |= _keys_of(node.left, constants, bound)
    return keys


def table_keys(page: Path, heading: str | None = None) -> dict[str, list[str]]:
    """key -> its other cells, for the `| `key` | ... |` rows of a page (after `heading` when given)."""
    text = page.read_text()
    if heading is not None:
        text = text[text.index(heading):]
    return {m["key"]: [c.strip() for c in m["rest"].split("|")] for m in ROW.finditer(text)}


def test_the_code_reads_the_keys_this_test_knows_how_to_find():
    keys = code_keys()
    # A sample from each reader module: the extraction itself works.
    assert {"write_mode", "merge_order_by", "audit", "as_of_run", "changes", "lakehouse/staged"} <= keys


def test_the_reference_table_lists_exactly_the_keys_the_code_reads():
    documented = table_keys(ROOT / "docs" / "io-manager.md", "## Asset metadata keys")
    code = code_keys()
    assert sorted(code - documented.keys()) == [], "keys the IO manager reads without a row in docs/io-manager.md"
    assert sorted(documented.keys() - code) == [], "rows in docs/io-manager.md for keys the IO manager does not read"
    for key, cells in documented.items():
        assert len(cells) == 3 and all(cells), f"docs/io-manager.md: the row of `{key}` needs a type, a default and what it does"


def test_the_downstream_inputs_guide_lists_the_same_input_keys():
    reference = table_keys(ROOT / "docs" / "io-manager.md", "### On a downstream input")
    guide = table_keys(ROOT / "docs" / "downstream-inputs.md", "## Input metadata")
    assert set(guide) == set(reference) - {"lakehouse/staged"}

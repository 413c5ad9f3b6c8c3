"""Every error message the project raises on purpose is listed, with its fix, in docs/troubleshooting.md.

The raise sites are found with ``ast``: a ``raise`` of a project error class (every class defined in
``lakehouse_assets`` that derives from an exception) or of click's ``BadParameter``/``UsageError``.
Each message is reduced to a stable fragment, its first run of literal text long enough to be
recognisable (after a leading ``Table {...}: `` / ``Asset {...}: `` prefix), and that fragment must
appear in the troubleshooting page. To document a new error, add a row to the page's table for its
area whose "message starts with" cell contains the fragment the failure message prints.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lakehouse_assets"
PAGE = ROOT / "docs" / "troubleshooting.md"

CLICK_ERRORS = {"BadParameter", "UsageError"}
# A fragment shorter than this many letters is not recognisable; the next literal run is used.
MIN_LETTERS = 12
# A fragment is cut at a word boundary after this many characters, so the page can abbreviate the rest.
MAX_CHARS = 48
_PREFIX = re.compile(r"^\s*(Table|Asset|Table identifier)\s*$")

# Raise sites that are internal (never meant for a user): "path:fragment" -> reason.
INTERNAL: dict[str, str] = {}


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    fragment: str | None

    @property
    def key(self) -> str:
        return f"{self.path}:{self.fragment}"


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    constants: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            constants[node.target.id] = node.value
    return constants


def _pieces(node: ast.expr, constants: dict[str, ast.expr], local: dict[str, ast.expr]) -> list[str | None]:
    """The message as literal text runs, ``None`` standing for each interpolated value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list[str | None] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                out.append(value.value)
            else:
                out.append(None)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pieces(node.left, constants, local) + _pieces(node.right, constants, local)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _pieces(node.left, constants, local)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _pieces(node.func.value, constants, local)
    if isinstance(node, ast.Name):
        if node.id in local:
            return _pieces(local[node.id], constants, local)
        if node.id in constants:
            return _pieces(constants[node.id], constants, {})
    return [None]


def _fragment(pieces: list[str | None]) -> str | None:
    runs: list[str] = []
    current = ""
    for piece in pieces:
        if piece is None:
            runs.append(current)
            current = ""
        else:
            current += piece
    runs.append(current)
    # Drop the "Table {t}: " / "Asset {a}: " prefix's first run.
    if len(runs) > 1 and _PREFIX.match(runs[0]):
        runs = runs[1:]
        runs[0] = runs[0].lstrip(": ").lstrip()
    for run in runs:
        text = " ".join(run.split()).strip(" :,.'\"")
        if sum(c.isalpha() for c in text) >= MIN_LETTERS:
            if len(text) > MAX_CHARS:
                cut = text.rfind(" ", 0, MAX_CHARS)
                text = text[: cut if cut > 0 else MAX_CHARS]
            return text.rstrip(" :,.(")
    return None


def _project_error_classes(trees: dict[Path, ast.Module]) -> set[str]:
    names = {"LakehouseError"}
    changed = True
    while changed:
        changed = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names:
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                    if bases & names or bases & {"Exception", "ValueError", "RuntimeError", "LookupError"}:
                        names.add(node.name)
                        changed = True
    return names


def _local_assignments(func: ast.AST) -> dict[str, ast.expr]:
    local: dict[str, ast.expr] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            local.setdefault(node.targets[0].id, node.value)
    return local


def raise_sites(package: Path = PACKAGE) -> list[Site]:
    trees = {p: ast.parse(p.read_text(), filename=str(p)) for p in sorted(package.rglob("*.py"))}
    classes = _project_error_classes(trees) | CLICK_ERRORS
    sites: list[Site] = []
    for path, tree in trees.items():
        constants = _module_constants(tree)
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        enclosing: dict[int, dict[str, ast.expr]] = {}
        for scope in scopes:
            local = _local_assignments(scope)
            for node in ast.walk(scope):
                enclosing[id(node)] = local
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in classes:
                continue
            args = node.exc.args or [kw.value for kw in node.exc.keywords if kw.arg == "message"]
            pieces = _pieces(args[0], constants, enclosing.get(id(node), {})) if args else [None]
            sites.append(Site(str(path.relative_to(ROOT)), node.lineno, _fragment(pieces)))
    return sites


def _normalise(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_the_scan_finds_the_project_errors():
    sites = raise_sites()
    assert len(sites) >= 100, f"only {len(sites)} raise sites found: the scan is broken"
    assert all(s.path.startswith("lakehouse_assets/") for s in sites)


def test_every_raised_message_is_in_the_troubleshooting_page():
    page = _normalise(PAGE.read_text())
    missing = []
    for site in raise_sites():
        if site.key in INTERNAL:
            continue
        if site.fragment is None:
            missing.append(f"{site.path}:{site.line}: no literal text in the message; give it one")
        elif _normalise(site.fragment) not in page:
            missing.append(f"{site.path}:{site.line}: {site.fragment!r}")
    assert not missing, (
        f"{len(missing)} error message(s) are not in {PAGE.relative_to(ROOT)}; add a row whose "
        "'message starts with' cell contains the fragment (or list a truly internal one in INTERNAL "
        "with its reason):\n" + "\n".join(missing)
    )


def test_the_allow_list_names_existing_sites():
    keys = {s.key for s in raise_sites()}
    stale = sorted(set(INTERNAL) - keys)
    assert not stale, f"INTERNAL lists raise sites that no longer exist: {stale}"

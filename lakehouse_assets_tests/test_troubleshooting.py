"""Every error message the project raises on purpose is listed, with its fix, in docs/troubleshooting.md.

The raise sites are found with ``ast``: a ``raise`` of a project error class (every class defined in
``lakehouse_assets`` that derives from an exception) or of click's ``BadParameter``/``UsageError``.
Each message is reduced to a stable fragment, its first run of literal text long enough to be
recognisable (after a leading ``Table {...}: `` / ``Asset {...}: `` prefix), and that fragment must
appear in the troubleshooting page. A message built by a helper function of the package (``raise
MirrorRefused(refusal_message(...))``) is read from the helper's ``return``; a raise that only puts context in
front of a caught project error (``except SpecError as e: raise SpecError(f"Table {t}: {e}")``) starts with
that error's message, which its own raise site documents. To document a new error, add a row to the page's table for its
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
    # The message starts with a caught project error's message (documented at that error's own raise site).
    wraps_caught: bool = False

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


@dataclass(frozen=True)
class _Helper:
    """A function of the package that returns a message: its ``return`` value, module constants and locals."""

    value: ast.expr
    constants: dict[str, ast.expr]
    local: dict[str, ast.expr]


def _pieces(
    node: ast.expr, constants: dict[str, ast.expr], local: dict[str, ast.expr], helpers: dict[str, _Helper] | None = None
) -> list[str | None]:
    """The message as literal text runs, ``None`` standing for each interpolated value."""
    helpers = helpers or {}
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
        return _pieces(node.left, constants, local, helpers) + _pieces(node.right, constants, local, helpers)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _pieces(node.left, constants, local, helpers)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "replace"):
        # str.replace edits a message's tail (e.g. its last sentence); its start stays.
        return _pieces(node.func.value, constants, local, helpers)
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if (helper := helpers.get(name)) is not None:
            return _pieces(helper.value, helper.constants, helper.local)
    if isinstance(node, ast.Name):
        if node.id in local:
            return _pieces(local[node.id], constants, local, helpers)
        if node.id in constants:
            return _pieces(constants[node.id], constants, {}, helpers)
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


def _message_helpers(trees: dict[Path, ast.Module]) -> dict[Path, dict[str, _Helper]]:
    """Per module, the functions a raise may call for its message: those whose one ``return`` is text.

    A helper of the module itself wins; one of another module counts when no other module defines that name."""
    found: dict[Path, dict[str, _Helper]] = {}
    for path, tree in trees.items():
        constants = _module_constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
            if len(returns) == 1 and isinstance(returns[0], (ast.JoinedStr, ast.Constant, ast.BinOp)):
                found.setdefault(path, {})[node.name] = _Helper(returns[0], constants, _local_assignments(node))
    defined_in: dict[str, list[Path]] = {}
    for path, helpers in found.items():
        for name in helpers:
            defined_in.setdefault(name, []).append(path)
    shared = {name: found[paths[0]][name] for name, paths in defined_in.items() if len(paths) == 1}
    return {path: {**shared, **found.get(path, {})} for path in trees}


def _caught_project_errors(tree: ast.Module, classes: set[str]) -> dict[int, str]:
    """For each node inside an ``except <project error> as name:`` block, that name."""
    names: dict[int, str] = {}
    for handler in ast.walk(tree):
        if not (isinstance(handler, ast.ExceptHandler) and handler.name and handler.type is not None):
            continue
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        caught = {t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in types}
        if caught and caught <= classes:
            for stmt in handler.body:
                for node in ast.walk(stmt):
                    names[id(node)] = handler.name
    return names


def _starts_with_caught(message: ast.expr, caught: str | None) -> bool:
    """The f-string message is an optional ``Table {t}: `` prefix and then the caught error ``{caught}``."""
    if caught is None or not isinstance(message, ast.JoinedStr):
        return False
    for value in message.values:
        if isinstance(value, ast.FormattedValue):
            if isinstance(value.value, ast.Name) and value.value.id == caught:
                return True
        elif isinstance(value, ast.Constant) and not _PREFIX.match(value.value) and value.value.strip(" :"):
            return False
    return False


def _local_assignments(func: ast.AST) -> dict[str, ast.expr]:
    local: dict[str, ast.expr] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            local.setdefault(node.targets[0].id, node.value)
    return local


def raise_sites(package: Path = PACKAGE) -> list[Site]:
    trees = {p: ast.parse(p.read_text(), filename=str(p)) for p in sorted(package.rglob("*.py"))}
    classes = _project_error_classes(trees) | CLICK_ERRORS
    helpers = _message_helpers(trees)
    sites: list[Site] = []
    for path, tree in trees.items():
        constants = _module_constants(tree)
        caught = _caught_project_errors(tree, classes)
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
            pieces = _pieces(args[0], constants, enclosing.get(id(node), {}), helpers[path]) if args else [None]
            wraps = bool(args) and _starts_with_caught(args[0], caught.get(id(node)))
            sites.append(Site(str(path.relative_to(ROOT)), node.lineno, None if wraps else _fragment(pieces), wraps))
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
        if site.key in INTERNAL or site.wraps_caught:
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


def test_the_scan_reads_helper_messages_and_wrapped_errors():
    sites = {(s.path.rsplit("/", 1)[-1], s.fragment, s.wraps_caught) for s in raise_sites()}
    # raise MirrorRefused(refusal_message(...)): the helper's returned f-string is the message.
    assert ("refusals.py", "Delta cannot mirror Iceberg", False) in sites
    # raise ForeignDeltaCommits(explain(...).replace(...)): still the helper's message.
    assert ("foreign_versions.py", "the Delta log holds", False) in sites
    # except SpecError as e: raise SpecError(f"Table {t}: {e}"): the caught error's own site documents it.
    assert ("spec.py", None, True) in sites

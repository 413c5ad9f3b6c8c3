"""Write docs/cli.md and docs/api.md from the code (the CLI's click commands, the public API's docstrings), and
docs/changelog.md from CHANGELOG.md (the same text, its links made relative to docs/), for the site.

The pages are plain Markdown, checked in, so they read on the repository page as well as in the site;
`lakehouse_assets_tests/test_reference.py` fails when they no longer match the code. Run `make reference`
after changing a command, an option, a public signature or a docstring.

    python scripts/reference.py            # rewrite both pages
    python scripts/reference.py --check    # exit 1 if either page is stale
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path

import click

DOCS = Path(__file__).resolve().parent.parent / "docs"

# What the Python reference covers, in reading order: the objects users import (lakehouse_assets/__init__.py).
API_OBJECTS = [
    "lakehouse_assets.core.lakehouse.Lakehouse",
    "lakehouse_assets.core.model.TableOptions",
    "lakehouse_assets.core.model.MergeOptions",
    "lakehouse_assets.core.model.WriteResult",
    "lakehouse_assets.core.model.PublishResult",
    "lakehouse_assets.core.schema.window.Window",
    "lakehouse_assets.core.schema.window.Slice",
    "lakehouse_assets.core.io.storage.StorageConfig",
    "lakehouse_assets.dagster.io_manager.LakehouseIOManager",
    "lakehouse_assets.dagster.io_manager.WriteMode",
    "lakehouse_assets.dagster.resources.LakehouseResource",
    "lakehouse_assets.dagster.audit.publish_asset",
    "lakehouse_assets.dagster.audit.audit_branch",
]
ERRORS_MODULE = "lakehouse_assets.core.errors"

CLI_INTRO = """\
# CLI reference

`lakehouse` inspects, repairs and maintains tables from a shell. The warehouse comes from `--warehouse`,
else `LAKEHOUSE_WAREHOUSE`, else `./warehouse`; the catalog from `--catalog`, else `LAKEHOUSE_CATALOG`.
Both options go before or after the subcommand. Every command that reports takes `--json` for
machine-readable output. Errors exit with status 2 and a message naming the table and the fix.

This page is generated from the commands themselves (`make reference`); the suite checks it is current.
"""

API_INTRO = """\
# Python API reference

The objects `lakehouse_assets` exports, with their signatures and docstrings. Guides show them at work;
this page is generated from the code (`make reference`) and the suite checks it is current.
"""


def _option_row(param: click.Parameter) -> str:
    names = ", ".join(f"`{n}`" for n in (*param.opts, *param.secondary_opts))
    kind = "flag" if getattr(param, "is_flag", False) else param.type.name if not isinstance(param.type, click.Choice) else " \\| ".join(param.type.choices)
    default = param.default if param.show_default or isinstance(param.default, (int, float)) and not isinstance(param.default, bool) else None
    help_text = " ".join((getattr(param, "help", None) or "").split())
    if default not in (None, False, ()) and "Default" not in help_text:
        help_text = f"{help_text} Default: `{default}`.".strip()
    return f"| {names} | {kind} | {help_text.replace('|', chr(92) + '|')} |"


def _usage(command: click.Command, name: str) -> str:
    args = " ".join(a.human_readable_name if a.required else f"[{a.human_readable_name}]" for a in command.params if isinstance(a, click.Argument))
    return f"lakehouse {name} [OPTIONS]{' ' + args if args else ''}".rstrip()


def cli_page() -> str:
    from lakehouse_assets.cli import cli

    out = [CLI_INTRO]
    group_options = [p for p in cli.params if isinstance(p, click.Option)]
    out += ["## Global options", "", "| option | type | meaning |", "|---|---|---|", *(_option_row(p) for p in group_options), ""]
    for name in sorted(cli.commands):
        command = cli.commands[name]
        out += [f"## `lakehouse {name}`", "", "```text", _usage(command, name), "```", ""]
        out += [inspect.cleandoc(command.help or ""), ""]
        options = [p for p in command.params if isinstance(p, click.Option) and p.name not in ("warehouse", "catalog")]
        if options:
            out += ["| option | type | meaning |", "|---|---|---|", *(_option_row(p) for p in options), ""]
    return "\n".join(out).rstrip() + "\n"


def _doc(obj) -> str:
    return inspect.cleandoc(inspect.getdoc(obj) or "")


def _signature(name: str, obj) -> str:
    try:
        sig = re.sub(r"'([^']*)'", r"\1", str(inspect.signature(obj)))  # string annotations, unquoted
    except (TypeError, ValueError):
        return name
    return textwrap.fill(f"{name}{sig}", width=110, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def _fence(text: str) -> list[str]:
    return ["```text", text, "```", ""]  # a signature, not a runnable example


def _members(cls) -> list[tuple[str, object]]:
    own = [(n, v) for n, v in vars(cls).items() if not n.startswith("_")]
    return [(n, v) for n, v in own if inspect.isfunction(v) or isinstance(v, (property, classmethod, staticmethod))]


def _class_section(path: str, cls) -> list[str]:
    out = [f"## `{cls.__name__}`", "", f"`{path}`", ""]
    if issubclass(cls, enum.Enum):
        out += [_doc(cls), "", "| member | value |", "|---|---|", *(f"| `{m.name}` | `{m.value!r}` |" for m in cls), ""]
        return out
    out += _fence(_signature(cls.__name__, cls)) + [_doc(cls), ""]
    if dataclasses.is_dataclass(cls):
        return out
    undocumented = []
    for name, member in _members(cls):
        func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if not _doc(func):
            undocumented.append(name)
            continue
        label = name if isinstance(member, property) else _signature(name, func).replace("(self, ", "(").replace("(self)", "()")
        out += [f"### `{cls.__name__}.{name}`", ""] + _fence(label) + [_doc(func), ""]
    if undocumented:
        out += [f"Also public: {', '.join(f'`{n}`' for n in undocumented)}.", ""]
    return out


def api_page() -> str:
    out = [API_INTRO]
    for path in API_OBJECTS:
        module, _, name = path.rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        if inspect.isclass(obj):
            out += _class_section(path, obj)
        else:
            out += [f"## `{name}`", "", f"`{path}`", ""] + _fence(_signature(name, obj)) + [_doc(obj), ""]
    errors = importlib.import_module(ERRORS_MODULE)
    out += ["## Errors", "", f"`{ERRORS_MODULE}`: every error this library raises is a `LakehouseError`.", ""]
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if cls.__module__ == ERRORS_MODULE:
            base = cls.__bases__[0].__name__
            out += [f"- `{name}` ({base}): {' '.join(_doc(cls).split())}"]
    return "\n".join(out).rstrip() + "\n"


def changelog_page() -> str:
    text = (DOCS.parent / "CHANGELOG.md").read_text()
    note = "<!-- generated from CHANGELOG.md by scripts/reference.py: edit that file -->\n"
    return note + text.replace("](docs/", "](")


def pages() -> dict[Path, str]:
    return {DOCS / "cli.md": cli_page(), DOCS / "api.md": api_page(), DOCS / "changelog.md": changelog_page()}


def main(argv: list[str]) -> int:
    stale = [p for p, text in pages().items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p} is stale: run `make reference`", file=sys.stderr)
        return 1 if stale else 0
    for p, text in pages().items():
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

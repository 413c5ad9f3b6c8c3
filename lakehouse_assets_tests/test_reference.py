"""docs/cli.md, docs/api.md and docs/changelog.md are generated (scripts/reference.py) and checked in: they must be current."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _reference():
    spec = importlib.util.spec_from_file_location("reference", ROOT / "scripts" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_and_api_pages_match_the_code():
    stale = [p.name for p, text in _reference().pages().items() if p.read_text() != text]
    assert not stale, f"{stale} no longer match the code: run `make reference` and commit the result"


def test_every_command_and_option_is_on_the_cli_page():
    from lakehouse_assets.cli import cli

    page = (ROOT / "docs" / "cli.md").read_text()
    for name, command in cli.commands.items():
        assert f"## `lakehouse {name}`" in page
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert f"`{opt}`" in page, f"lakehouse {name} {opt} is missing from docs/cli.md"

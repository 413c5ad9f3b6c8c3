"""`lakehouse`: inspect and repair tables from a shell.

The warehouse comes from --warehouse, else LAKEHOUSE_WAREHOUSE, else ./warehouse; the catalog from
--catalog, else LAKEHOUSE_CATALOG and pyiceberg's configuration (see README). Both options are
accepted before or after the subcommand (`lakehouse --warehouse W maintain T` = `lakehouse maintain T --warehouse W`).

`group.py` holds the command group and what every command shares; `commands.py` the commands on tables (inspect,
verify, repair, import, alter, rollback, publish, maintain); `row_changes.py` delete and update by condition.
"""

from __future__ import annotations

import sys

import click

from ..core.errors import LakehouseError
from . import commands, row_changes  # noqa: F401 - each registers its commands on the group
from .group import cli

__all__ = ["cli", "main"]


def main() -> None:
    try:
        # standalone_mode=False returns ctx.exit()'s code instead of raising it.
        code = cli(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except LakehouseError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

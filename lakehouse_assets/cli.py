"""`lakehouse`: inspect and repair tables from a shell.

The warehouse comes from --warehouse, else LAKEHOUSE_WAREHOUSE, else ./warehouse; the catalog from
LAKEHOUSE_CATALOG and pyiceberg's configuration (see README).
"""

from __future__ import annotations

import json
import sys

import click

from .core.errors import LakehouseError


def _lakehouse(ctx):
    from .core.lakehouse import Lakehouse

    if "lakehouse" not in ctx.obj:
        ctx.obj["lakehouse"] = Lakehouse(ctx.obj["warehouse"], catalog_name=ctx.obj["catalog"])
    return ctx.obj["lakehouse"]


def _emit(data, as_json: bool, render) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        render(data)


@click.group()
@click.option("--warehouse", envvar="LAKEHOUSE_WAREHOUSE", default="./warehouse", show_default=True, help="Warehouse path or URI.")
@click.option("--catalog", envvar="LAKEHOUSE_CATALOG", default=None, help="Catalog name in pyiceberg's configuration.")
@click.pass_context
def cli(ctx, warehouse: str, catalog: str | None) -> None:
    """Dual-format (Iceberg + Delta) lakehouse tables."""
    ctx.ensure_object(dict)
    ctx.obj.update(warehouse=warehouse, catalog=catalog)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def tables(ctx, as_json: bool) -> None:
    """List tables with their Iceberg snapshot and Delta version."""

    def render(rows):
        if not rows:
            click.echo("no tables")
        for t in rows:
            click.echo(f"{t['name']:<32} snapshot {t['iceberg_snapshot_id']}  delta v{t['delta_version']}  {t['location']}")

    _emit(_lakehouse(ctx).tables(), as_json, render)


@cli.command()
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(ctx, table: str, as_json: bool) -> None:
    """Every retained commit: snapshot <-> version, operation, rows/files added and removed, writer, time."""

    def render(rows):
        for h in rows:
            writer = h["writer"].get("dagster_run_id") or "-"
            click.echo(
                f"{h['timestamp']}  snapshot {h['iceberg_snapshot_id']}  delta v{h['delta_version']}  {h['operation']:<16} "
                f"+{h['rows_added']}/-{h['rows_removed']} rows  +{h['files_added']}/-{h['files_removed']} files  writer {writer}"
            )

    _emit(_lakehouse(ctx).history(table), as_json, render)


@cli.command()
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def verify(ctx, table: str, as_json: bool) -> None:
    """Check that Iceberg and Delta agree (exit code 1 when they do not)."""
    report = _lakehouse(ctx).verify(table)

    def render(r):
        state = "agree" if r["agree"] else "DISAGREE"
        click.echo(f"{r['table']}: formats {state} (Iceberg snapshot {r['iceberg_snapshot_id']}, Delta version {r.get('delta_version')})")
        click.echo(f"  files: Iceberg {r['iceberg_files']}, Delta {r.get('delta_files')}; rows: Iceberg {r['iceberg_rows']}, Delta {r.get('delta_rows')}")
        for d in r["differences"]:
            click.echo(f"  - {d}")

    _emit(report, as_json, render)
    if not report["agree"]:
        ctx.exit(1)


@cli.command()
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def repair(ctx, table: str, as_json: bool) -> None:
    """Bring a lagging Delta log up to Iceberg (idempotent)."""
    _emit(_lakehouse(ctx).repair(table), as_json, lambda r: click.echo(f"{r['table']}: Delta version {r.get('delta_version_before')} -> {r['delta_version']}"))


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

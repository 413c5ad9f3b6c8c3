"""The `lakehouse` command group and what its commands share: the Lakehouse of the invocation, the global options,
plain-text tables and --json output."""


from __future__ import annotations

import json

import click


def _lakehouse(ctx):
    from ..core.lakehouse import Lakehouse

    if "lakehouse" not in ctx.obj:
        ctx.obj["lakehouse"] = Lakehouse(ctx.obj["warehouse"], catalog_name=ctx.obj["catalog"])
    return ctx.obj["lakehouse"]


def _remember(ctx, param, value):
    """The subcommand's --warehouse/--catalog override the group's (its callback ran first)."""
    if value is not None:
        ctx.ensure_object(dict)[param.name] = value
    return value


def global_options(command):
    """--warehouse and --catalog after the subcommand too, as users type them."""
    command = click.option("--catalog", default=None, expose_value=False, callback=_remember, help="Catalog name (as before the subcommand).")(command)
    return click.option("--warehouse", default=None, expose_value=False, callback=_remember, help="Warehouse path or URI (as before the subcommand).")(command)


def _text_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A plain aligned table: header, rule, one line per row."""
    cells = [[h for _, h in columns]] + [["-" if r.get(k) is None else str(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([line(cells[0]), line(["-" * w for w in widths]), *(line(r) for r in cells[1:])])


def _emit(data, as_json: bool, render) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        render(data)


@click.group()
@click.version_option(package_name="lakehouse_assets", prog_name="lakehouse")
@click.option("--warehouse", envvar="LAKEHOUSE_WAREHOUSE", default="./warehouse", show_default=True, help="Warehouse path or URI.")
@click.option("--catalog", envvar="LAKEHOUSE_CATALOG", default=None, help="Catalog name in pyiceberg's configuration.")
@click.pass_context
def cli(ctx, warehouse: str, catalog: str | None) -> None:
    """Dual-format (Iceberg + Delta) lakehouse tables."""
    ctx.ensure_object(dict)
    ctx.obj.update(warehouse=warehouse, catalog=catalog)

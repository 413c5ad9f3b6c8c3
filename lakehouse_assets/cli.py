"""`lakehouse`: inspect and repair tables from a shell.

The warehouse comes from --warehouse, else LAKEHOUSE_WAREHOUSE, else ./warehouse; the catalog from
LAKEHOUSE_CATALOG and pyiceberg's configuration (see README).
"""

from __future__ import annotations

import json
import sys

import click

from .core import maintenance
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


MAINTENANCE_OPERATIONS = list(maintenance.OPERATIONS)


@cli.command()
@click.argument("table", required=False)
@click.option("--all", "all_tables", is_flag=True, help="Every table in the catalog.")
@click.option("--op", "operation", type=click.Choice(MAINTENANCE_OPERATIONS), default="full_maintenance", show_default=True)
@click.option("--dry-run", is_flag=True, help="Report what would be done; change nothing.")
@click.option("--snapshot-retention-days", type=float, default=None, help="Default 7 (or the table's lakehouse.maintenance.* property).")
@click.option("--min-snapshots-to-keep", type=int, default=None, help="Default 5.")
@click.option("--compaction-target-mb", type=float, default=None, help="Default 128.")
@click.option("--orphan-grace-hours", type=float, default=None, help="Default 24.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def maintain(ctx, table, all_tables, operation, dry_run, snapshot_retention_days, min_snapshots_to_keep, compaction_target_mb, orphan_grace_hours, as_json) -> None:
    """Run a maintenance operation on TABLE (or --all tables)."""
    if bool(table) == bool(all_tables):
        raise click.UsageError("Give exactly one of TABLE or --all.")
    lh = _lakehouse(ctx)
    settings = dict(
        snapshot_retention_days=snapshot_retention_days,
        min_snapshots_to_keep=min_snapshots_to_keep,
        compaction_target_mb=compaction_target_mb,
        orphan_grace_hours=orphan_grace_hours,
    )
    results = [lh.maintain(t, operation, dry_run=dry_run, **settings) for t in (lh.table_names() if all_tables else [table])]

    def render(rows):
        for r in rows:
            steps = r.get("steps") or [r]
            total = lambda k, steps=steps: sum(int(s.get(k) or 0) for s in steps)
            h = r["health"]
            click.echo(
                f"{r['table']}: {r['operation']}{' (dry run)' if dry_run else ''}: {total('files_rewritten')} files rewritten, "
                f"{total('files_removed')} removed, {total('bytes_reclaimed')} bytes reclaimed, {total('snapshots_expired')} snapshots expired"
            )
            for s in steps:
                for p in (s.get("would_remove") or []) + ((s.get("orphan_paths") or []) if dry_run else []):
                    click.echo(f"  would delete {p}")
            click.echo(
                f"  now: {h['data_files']} data files ({h['small_files']} small), {h['snapshot_count']} snapshots, "
                f"Delta v{h.get('delta_version')} with {h.get('delta_log_files')} log files"
            )

    _emit(results if all_tables else results[0], as_json, lambda d: render(d if isinstance(d, list) else [d]))


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

"""The commands that change rows by condition: `lakehouse delete`, `lakehouse update` and `lakehouse erase`."""

from __future__ import annotations

import click

from .group import _emit, _lakehouse, cli, global_options


@cli.command()
@global_options
@click.argument("table")
@click.option("--where", required=True, help="The rows to delete: a Spark SQL condition over the table's columns, e.g. \"id = 42\".")
@click.option("--write-id", default=None, help="An idempotency key: a second delete with it commits nothing.")
@click.option("--branch", default=None, help="Delete on this Iceberg branch (write-audit-publish) instead of main.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def delete(ctx, table: str, where: str, write_id, branch, as_json: bool) -> None:
    """Delete the rows a condition matches, in both formats (copy-on-write or merge-on-read, as the table's write.delete.mode says)."""
    result = _lakehouse(ctx).delete(table, where, write_id=write_id, branch=branch).to_dict()
    _emit(result, as_json, lambda r: click.echo(_row_change_line(r, f"{r['rows_removed']} row(s) deleted")))


@cli.command()
@global_options
@click.argument("table")
@click.option("--set", "assignments", multiple=True, required=True, metavar="COLUMN=EXPRESSION",
              help="A column and its new value, a Spark SQL expression over the row (repeat for more columns), e.g. --set \"status='closed'\".")
@click.option("--where", required=True, help="The rows to update: a Spark SQL condition over the table's columns.")
@click.option("--write-id", default=None, help="An idempotency key: a second update with it commits nothing.")
@click.option("--branch", default=None, help="Update on this Iceberg branch (write-audit-publish) instead of main.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def update(ctx, table: str, assignments, where: str, write_id, branch, as_json: bool) -> None:
    """Set columns of the rows a condition matches, in both formats (as the table's write.update.mode says)."""
    values = {}
    for item in assignments:
        column, sep, expression = item.partition("=")
        if not sep or not column.strip():
            raise click.BadParameter(f"{item!r}: write COLUMN=EXPRESSION, e.g. \"status='closed'\"", param_hint="--set")
        values[column.strip()] = expression.strip()
    result = _lakehouse(ctx).update(table, values, where, write_id=write_id, branch=branch).to_dict()
    _emit(result, as_json, lambda r: click.echo(_row_change_line(r, f"{r['rows_written']} row(s) updated")))


@cli.command()
@global_options
@click.argument("table")
@click.option("--where", required=True, help="The rows to erase: a Spark SQL condition over the table's columns, e.g. \"customer_id = 42\". Never stored: the erasure gets an id (LAKEHOUSE_ERASURE_KEY: an HMAC of it).")
@click.option("--dependents", is_flag=True, help="Erase the rows from the contract's quarantine table too.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def erase(ctx, table: str, where: str, dependents: bool, as_json: bool) -> None:
    """Erase the rows a condition matches from every file of both formats, with the history that held them, and prove it (exit code 1 when the proof finds a remnant)."""
    report = _lakehouse(ctx).erase(table, where, dependents=dependents)

    def render(r):
        click.echo(
            f"{r['table']}: erasure {r['erasure_id']}: {r['rows_erased']} row(s) erased, {r['files_rewritten']} file(s) rewritten, "
            f"{r['files_deleted']} file(s) deleted, {r['snapshots_removed']} snapshot(s) and {r['delta_versions_removed']} Delta version(s) removed; "
            f"time travel now starts at snapshot {r['oldest_snapshot_id']} / Delta version {r['oldest_delta_version']}"
        )
        for part in [r, *([r["quarantine"]] if r.get("quarantine") else [])]:
            _proof_lines(part["proof"])

    _emit(report, as_json, render)
    if not report["proof"]["erased"] or not (report.get("quarantine") or {"proof": {"erased": True}})["proof"]["erased"]:
        ctx.exit(1)


def emit_proof(ctx, proof: dict, as_json: bool) -> None:
    """`lakehouse verify --erased`: the proof's report; exit code 1 when it found a remnant."""
    _emit(proof, as_json, _proof_lines)
    if not proof["erased"]:
        ctx.exit(1)


def _proof_lines(p: dict) -> None:
    checked = ", ".join(f"{n} {k}" for k, n in p["files_checked"].items())
    click.echo(f"{p['table']}: {'erased' if p['erased'] else 'NOT ERASED'}: {p['remnants_found']} remnant(s) in {checked}")
    for r in p["remnants"]:
        click.echo(f"  - {r['file']}: {r['where']}")


def _row_change_line(r: dict, what: str) -> str:
    if r.get("duplicate_of_earlier_write"):
        return f"{r['table']}: already done as Iceberg snapshot {r['iceberg_snapshot_id']} (same write id); nothing committed"
    if not r["rows_removed"] and not r["rows_written"]:
        return f"{r['table']}: no row matched; nothing committed"
    return (f"{r['table']}: {what} as Iceberg snapshot {r['iceberg_snapshot_id']} / Delta version {r['delta_version']} "
            f"({r['files_removed']} file(s) replaced, {r['files_added']} written)")

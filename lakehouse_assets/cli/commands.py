"""The commands on tables: list, history, changes, verify, repair, import, alter, upgrade, drop, rename, rollback, publish,
discard, maintain."""

from __future__ import annotations

import click

from ..core import maintenance
from ..core.errors import LakehouseError
from .group import _emit, _lakehouse, _text_table, cli, global_options


@cli.command()
@global_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def tables(ctx, as_json: bool) -> None:
    """List tables with their Iceberg snapshot and Delta version."""

    def render(rows):
        if not rows:
            click.echo("no tables")
            return
        shown = [{**t, "partition_by": ", ".join(t["partition_by"]) or "-", "formats": "+".join(t["formats"]),
                  "branches": ", ".join(t["branches"]) or "-"} for t in rows]
        click.echo(_text_table(shown, [
            ("name", "TABLE"), ("iceberg_snapshot_id", "ICEBERG SNAPSHOT"), ("delta_version", "DELTA VERSION"),
            ("partition_by", "PARTITIONED BY"), ("formats", "FORMATS"), ("branches", "BRANCHES (ICEBERG ONLY)"), ("location", "LOCATION"),
        ]))

    _emit(_lakehouse(ctx).tables(), as_json, render)


@cli.command()
@global_options
@click.argument("table")
@click.option("--branch", default=None, help="The commits of this Iceberg branch instead of main's.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(ctx, table: str, branch: str | None, as_json: bool) -> None:
    """Every retained commit: snapshot <-> version, operation, rows/files added and removed, writer, time."""

    def render(rows):
        for h in rows:
            writer = h["writer"].get("dagster_run_id") or "-"
            delta = f"delta v{h['delta_version']}" if h["delta_version"] is not None else f"branch {h['branch']}, no Delta version" if h["branch"] else f"delta v{h['delta_version']}"
            click.echo(
                f"{h['timestamp']}  snapshot {h['iceberg_snapshot_id']}  {delta}  {h['operation']:<16} "
                f"+{h['rows_added']}/-{h['rows_removed']} rows  +{h['files_added']}/-{h['files_removed']} files  writer {writer}"
            )

    _emit(_lakehouse(ctx).history(table, branch=branch), as_json, render)


@cli.command()
@global_options
@click.argument("table")
@click.option("--since", "since", type=int, default=None, help="Snapshot id the changes come after (exclusive; default: the table's first commit).")
@click.option("--until", "until", type=int, default=None, help="Snapshot id the changes go up to (inclusive; default: the current one).")
@click.option("--limit", type=int, default=100, show_default=True, help="Rows to show (the counts cover every row).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def changes(ctx, table: str, since: int | None, until: int | None, limit: int, as_json: bool) -> None:
    """Rows changed between two snapshots: insert, delete, update_preimage, update_postimage, with their commit."""
    from ..core.read.changes import CHANGE_TYPE, COMMIT_SNAPSHOT_ID
    from ..core.spark.session import spark_session

    df = _lakehouse(ctx).changes(table, since, until, spark=spark_session())
    counts = {r[CHANGE_TYPE]: r["count"] for r in df.groupBy(CHANGE_TYPE).count().collect()}
    rows = [r.asDict() for r in df.orderBy(COMMIT_SNAPSHOT_ID).limit(limit).collect()]  # at most `limit` rows reach the driver
    report = {"table": table, "since": since, "until": until, "counts": counts, "rows": rows}

    def render(r):
        summary = ", ".join(f"{k} {v}" for k, v in sorted(r["counts"].items())) or "no changes"
        click.echo(f"{table}: {summary}")
        if r["rows"]:
            click.echo(_text_table(r["rows"], [(c, c) for c in r["rows"][0]]))

    _emit(report, as_json, render)


@cli.command()
@global_options
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.option("--deep", is_flag=True, help="Also compare the content as DuckDB reads each format (rows per partition, a hash of all rows).")
@click.option("--erased", default=None, metavar="CONDITION",
              help="Instead: prove an erasure. Decode every file under the table's root and report each row or value the Spark SQL condition still matches.")
@click.pass_context
def verify(ctx, table: str, as_json: bool, deep: bool, erased) -> None:
    """Check that Iceberg and Delta agree, or with --erased that nothing a condition matches is left (exit code 1 when not)."""
    if erased is not None:
        from .row_changes import emit_proof

        emit_proof(ctx, _lakehouse(ctx).prove_erased(table, erased), as_json)
        return
    report = _lakehouse(ctx).verify(table, deep=deep)

    def render(r):
        state = "agree" if r["agree"] else "DISAGREE"
        click.echo(f"{r['table']}: formats {state} (Iceberg snapshot {r['iceberg_snapshot_id']}, Delta version {r.get('delta_version')})")
        uncounted = f" ({r['delta_files_without_row_count']} Delta add(s) record no row count)" if r.get("delta_files_without_row_count") else ""
        click.echo(f"  files: Iceberg {r['iceberg_files']}, Delta {r.get('delta_files')}; rows: Iceberg {r['iceberg_rows']}, Delta {r.get('delta_rows')}{uncounted}")
        for d in r["differences"]:
            click.echo(f"  - {d}")

    _emit(report, as_json, render)
    if not report["agree"]:
        ctx.exit(1)


@cli.command()
@global_options
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--apply-deletes",
    is_flag=True,
    help="First rewrite the data files that other engines' Iceberg delete files remove rows from (Spark), as one snapshot Delta can mirror.",
)
@click.option(
    "--rewrite-files",
    is_flag=True,
    help="First rewrite other engines' data files of a column-mapped table under the columns' physical names (Spark), as one snapshot.",
)
@click.option("--adopt-delta", is_flag=True, help="Bring Delta versions another engine wrote into Iceberg as one snapshot.")
@click.option("--revert-delta", is_flag=True, help="Undo Delta versions another engine wrote with a new Delta version.")
@click.pass_context
def repair(ctx, table: str, as_json: bool, apply_deletes: bool, rewrite_files: bool, adopt_delta: bool, revert_delta: bool) -> None:
    """Bring a lagging Delta log up to Iceberg (idempotent)."""
    if adopt_delta and revert_delta:
        raise click.UsageError("Give --adopt-delta or --revert-delta, not both: adopt brings the foreign Delta versions into Iceberg, revert undoes them.")
    spark = None
    if apply_deletes or rewrite_files:
        from ..core.spark.session import spark_session

        spark = spark_session()
    report = _lakehouse(ctx).repair(
        table, apply_deletes=apply_deletes, adopt_delta=adopt_delta, revert_delta=revert_delta, rewrite_files=rewrite_files, spark=spark
    )

    def render(r):
        if "apply_deletes" in r:
            a = r["apply_deletes"]
            click.echo(f"{r['table']}: applied {a['delete_files']} delete file(s): {a['rows_deleted']} row(s) removed, {a['data_files_rewritten']} data file(s) rewritten")
        if r.get("rewrite_files", {}).get("rewritten"):
            click.echo(f"{r['table']}: rewrote {r['rewrite_files']['data_files_rewritten']} data file(s) under the physical column names")
        for way in ("adopt_delta", "revert_delta"):
            if r.get(way):
                done = r[way].get("adopted_versions") or r[way].get("reverted_versions") or []
                click.echo(f"{r['table']}: {way.replace('_', ' ')}: Delta version(s) {[v['version'] for v in done]}")
        if r.get("reason"):
            click.echo(f"{r['table']}: not repaired: {r['reason']}")
        click.echo(f"{r['table']}: Delta version {r.get('delta_version_before')} -> {r['delta_version']}")

    _emit(report, as_json, render)


@cli.command("import")
@global_options
@click.argument("table")
@click.argument("source", required=False)
@click.option(
    "--apply-deletes",
    is_flag=True,
    help="Apply row-level deletes first: an Iceberg source's delete files (Spark rewrites the data files they remove rows from, as "
    "`repair --apply-deletes` does), a Delta source's deletion vectors (delta-rs rewrites the files that carry them).",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def import_(ctx, table: str, source: str | None, apply_deletes: bool, as_json: bool) -> None:
    """Bring an existing table under management over its own data files.

    SOURCE: a Delta table folder, a Parquet dataset folder (flat or Hive `key=value/` folders), an Iceberg metadata JSON
    file or Hadoop-catalog table folder (registered under TABLE); without SOURCE, the Iceberg table TABLE already in
    the catalog. A refused import leaves the source as it was."""
    spark = None
    if apply_deletes:
        from ..core.spark.session import spark_session

        spark = spark_session()
    report = _lakehouse(ctx).import_table(table, source, apply_deletes=apply_deletes, spark=spark)

    def render(r):
        if r.get("apply_deletes"):
            a = r["apply_deletes"]
            click.echo(f"{r['table']}: applied {a['delete_files']} delete file(s): {a['rows_deleted']} row(s) removed, {a['data_files_rewritten']} data file(s) rewritten")
        click.echo(
            f"{r['table']}: imported from {r['source_format']} ({r['source']}): {r['files']} file(s), {r['rows']} row(s) at {r['location']}; "
            f"Iceberg snapshot {r['iceberg_snapshot_id']}, Delta version {r['delta_version']}"
        )

    _emit(report, as_json, render)


@cli.command()
@click.argument("table")
@click.option("--rename", "renames", multiple=True, metavar="OLD=NEW", help="Rename a column (repeatable).")
@click.option("--drop", "drops", multiple=True, metavar="COLUMN", help="Drop a column (repeatable).")
@click.option("--write-mode", type=click.Choice(["copy-on-write", "merge-on-read"]), help="How merges, deletes and window overwrites remove rows.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def alter(ctx, table: str, renames: tuple[str, ...], drops: tuple[str, ...], write_mode: str | None, as_json: bool) -> None:
    """Rename and drop columns, or set the write mode, in metadata only, in both formats (no data file is rewritten).

    A Delta-mirrored table needs Delta column mapping first: `lakehouse upgrade TABLE`."""
    pairs = {}
    for r in renames:
        old, sep, new = r.partition("=")
        if not sep or not old or not new:
            raise click.BadParameter(f"expected OLD=NEW, got {r!r}", param_hint="--rename")
        pairs[old] = new
    result = _lakehouse(ctx).alter(table, rename=pairs, drop=list(drops), write_mode=write_mode)

    def render(r):
        if "write_modes" in r:
            click.echo(f"{r['table']}: write mode {write_mode} ({', '.join(r['write_modes'])}; no data file rewritten)")
        if "columns" not in r:
            return
        changes = [f"renamed {o} -> {n}" for o, n in r["renamed"].items()] + [f"dropped {c}" for c in r["dropped"]]
        click.echo(f"{r['table']}: {', '.join(changes)} (schema {r['schema_id_before']} -> {r['schema_id']}, no data file rewritten)")
        click.echo(f"  columns: {', '.join(f'{n} {t}' for n, t in r['columns'].items())}")
        if r.get("delta_version") is not None:
            click.echo(f"  Delta version {r['delta_version']}")
        if r.get("delta_error"):
            click.echo(f"  Delta lags: {r['delta_error']}")

    _emit(result, as_json, render)


@cli.command()
@click.argument("table")
@click.option("--no-column-mapping", "no_column_mapping", is_flag=True,
              help="Turn the change data feed on alone: delta-rs's pyarrow reader and Polars refuse column-mapped tables.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def upgrade(ctx, table: str, no_column_mapping: bool, as_json: bool) -> None:
    """Turn the Delta change data feed and Delta column mapping on, so that Delta's change feed is exact and renames
    and drops work in both formats, and checkpoint statistics as a struct, as new tables have them (metadata only;
    idempotent)."""
    result = _lakehouse(ctx).upgrade(table, column_mapping=not no_column_mapping)

    def render(r):
        if r.get("change_data_feed_enabled"):
            click.echo(f"{r['table']}: Delta change data feed on (from the next change on)")
        if r.get("checkpoint_stats_as_struct_enabled"):
            click.echo(f"{r['table']}: Delta checkpoints keep statistics as a struct too (from the next checkpoint on)")
        if not r["upgraded"]:
            click.echo(f"{r['table']}: {'column mapping: ' if r.get('change_data_feed_enabled') else ''}nothing to do: {r['reason']}")
            return
        click.echo(f"{r['table']}: Delta column mapping on (Delta version {r['delta_version']}, no data file rewritten)")
        click.echo(f"  physical names: {', '.join(f'{c}={p}' for c, p in r['physical_names'].items())}")

    _emit(result, as_json, render)


@cli.command()
@global_options
@click.argument("table")
@click.option("--purge", is_flag=True, help="Also remove every file under the table's root (both formats' data and logs).")
@click.option("--dependents", is_flag=True, help="Also drop the contract's quarantine table, and the table's branches with it.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def drop(ctx, table: str, purge: bool, dependents: bool, as_json: bool) -> None:
    """Drop a table from its catalog; its files stay unless --purge."""
    result = _lakehouse(ctx).drop(table, purge=purge, dependents=dependents)

    def render(r):
        click.echo(f"{r['table']}: dropped; " + (f"{r['files_removed']} file(s) removed" if r["purged"] else f"to register it again: {r['how_to_register_again']}"))

    _emit(result, as_json, render)


@cli.command()
@global_options
@click.argument("table")
@click.argument("new_name")
@click.option("--dependents", is_flag=True, help="Also rename the contract's quarantine table.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def rename(ctx, table: str, new_name: str, dependents: bool, as_json: bool) -> None:
    """Rename a table in its catalog; its files stay where they are."""
    result = _lakehouse(ctx).rename(table, new_name, dependents=dependents)
    _emit(result, as_json, lambda r: click.echo(f"{r['renamed_from']}: renamed to {r['table']} (files stay under {r['location']})"))


@cli.command()
@global_options
@click.argument("table")
@click.option("--to-snapshot", "snapshot_id", type=int, default=None, help="An Iceberg snapshot id (see `lakehouse history`).")
@click.option("--to-version", "delta_version", type=int, default=None, help="A Delta version.")
@click.option("--as-of", "as_of", type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]), default=None,
              help="A time (UTC unless it names a zone): the table as it was then.")
@click.option("--to-run", "run_id", default=None, help="A Dagster run id: the table as that run left it.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def rollback(ctx, table: str, snapshot_id, delta_version, as_of, run_id, as_json: bool) -> None:
    """Give a table back the rows of an earlier point, in both formats, as one new commit in each (history is kept)."""
    import datetime as dt

    if as_of is not None and as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=dt.timezone.utc)
    result = _lakehouse(ctx).rollback(table, snapshot_id=snapshot_id, delta_version=delta_version, as_of=as_of, run_id=run_id).to_dict()

    def render(r):
        click.echo(f"{r['table']}: rolled back as Iceberg snapshot {r['iceberg_snapshot_id']} / Delta version {r['delta_version']} "
                   f"({r['files_added']} file(s) back, {r['files_removed']} removed, no data file written)")

    _emit(result, as_json, render)


@cli.command()
@global_options
@click.argument("table", required=False)
@click.option("--branch", required=True, help="The Iceberg branch whose writes main takes.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def publish(ctx, table: str | None, branch: str, as_json: bool) -> None:
    """Make a branch's writes main's, in both formats: fast-forward, or re-applied on top of main when it moved.
    Without TABLE: every table that has the branch; a table that cannot be published is refused with its reason
    (exit status 1) and the others are published."""
    lh = _lakehouse(ctx)
    names = [table] if table else [t for t in lh.table_names() if branch in lh.branches(t)]
    results = []
    for name in names:
        try:
            results.append(lh.publish(name, branch).to_dict())
        except LakehouseError as e:
            if table:
                raise
            results.append({"table": name, "branch": branch, "refused": str(e)})

    def render(rows):
        if not rows:
            click.echo(f"no table has a branch {branch}")
        for r in rows:
            if "refused" in r:
                click.echo(f"{r['table']}: refused: {r['refused']}")
            elif r["published"] == "nothing to publish":
                click.echo(f"{r['table']}: branch {r['branch']} has nothing main does not have")
            else:
                click.echo(f"{r['table']}: published branch {r['branch']} ({r['published']}, {r['snapshots_published']} snapshot(s)) as Iceberg "
                           f"snapshot {r['iceberg_snapshot_id']} / Delta version {r['delta_version']}")

    _emit(results[0] if table else results, as_json, (lambda r: render([r])) if table else render)
    if any("refused" in r for r in results):
        ctx.exit(1)


@cli.command()
@global_options
@click.argument("table")
@click.option("--branch", required=True, help="The Iceberg branch to remove, with its unpublished writes.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def discard(ctx, table: str, branch: str, as_json: bool) -> None:
    """Remove a branch and its unpublished writes; main and Delta are not touched."""
    result = _lakehouse(ctx).discard(table, branch)

    def render(r):
        click.echo(f"{r['table']}: discarded branch {r['branch']} ({r['unpublished_snapshots']} unpublished snapshot(s))")

    _emit(result, as_json, render)


MAINTENANCE_OPERATIONS = list(maintenance.OPERATIONS)


@cli.command()
@global_options
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

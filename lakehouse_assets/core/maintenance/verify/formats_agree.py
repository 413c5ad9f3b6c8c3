"""The formats-agree check: do Iceberg and Delta say the same thing about every live file?

Metadata only (always; the `formats_agree` asset check and `lakehouse verify`):
* the same live data files, Delta up to date (no lagging snapshots);
* per file: the record count, the Iceberg partition record against the file's bounds (order-keeping
  transforms of numbers, dates and times: Iceberg readers prune by the record), the Delta partition values (typed, and spelled exactly as the one
  encoder in `delta_values` spells them: `0001-01-01`, never `1-01-01`; never `""` for a value Iceberg
  holds as the empty string), and the Delta stats (numRecords, nullCount, minValues/maxValues equal to
  what the encoder derives from the Iceberg bounds, and in any case still bounds);
  of every column the Delta log indexes (`statistics.py`: what Delta readers parse, never more). A count or
  statistic a Delta writer left out is unknown, not a difference (one delta-rs cannot parse is one: the log
  itself tells the two apart, `formats/delta/logged_stats.py`); string bounds, which either side may truncate, must
  only be able to bound the same values;
* the schema: column names, types and nullability, and the Delta partition columns;
* on a merge-on-read table, the rows each format deletes from each data file (`maintenance/verify/deletion_vectors.py`).

Content (`deep=True`: `lakehouse verify TABLE --deep`, the maintenance operation `verify_deep`): DuckDB
reads both formats on this machine (streaming aggregates, no rows collected) and compares the row count
per Delta partition value and, for tables up to `deep_hash_max_rows` rows, an order-independent hash of
all rows; the change data files of the Delta version that mirrors the current snapshot against the rows
that snapshot changed (`maintenance/verify/change_data.py`); and every count and bound either log records against each
file's Parquet footer (`maintenance/verify/footers.py`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from ...contracts import table_contract
from ...errors import SchemaError
from ...formats import file_columns
from ...formats.deletes import TableFiles, describe_delete_files, has_delete_files
from ...formats.delta import column_mapping as delta_column_mapping
from ...formats.delta import foreign_versions as foreign_delta
from ...formats.delta import glue as delta_glue
from ...formats.delta.committer import DeltaMirror
from ...formats.delta.followed_log import FollowedLog, LiveTotals
from ...io.storage import delta_path, normalize_uri
from ...schema.spec import delta_partition_columns
from ...schema.type_mapping import delta_schema, narrow_integers
from . import changes, deletion_vectors
from .change_data import change_data_differences
from .changes import Changes, VerifiedPair
from .content import DEEP_HASH_MAX_ROWS, content_differences
from .files import FileComparison, file_differences, partition_record_differences
from .footers import footer_differences
from .live_files import DeltaAdds, compare_live_files, flat_rows, live_entries, relative_path

MAX_LISTED = 3  # examples per kind of difference


def _schema_columns(arrow_schema: pa.Schema) -> dict[str, str]:
    return {f.name: str(f.type) for f in arrow_schema}


def verify_table(
    table: Table, mirror: DeltaMirror | None, *, deep: bool = False, deep_hash_max_rows: int = DEEP_HASH_MAX_ROWS, since: VerifiedPair | None = None
) -> dict[str, Any]:
    """What each format says about `table` and every difference between them (`agree` when there is none).

    `since`: a pair of versions an earlier check found agreeing; when the logs confirm it, only what changed since
    is compared (maintenance/verify/changes.py), otherwise everything."""
    root = normalize_uri(table.location())
    snap = table.current_snapshot()
    loaded = None
    if since is not None and mirror is not None and not deep:
        # The check after a write follows the log that write read (core/formats/delta/kept_logs.py).
        loaded = _load_delta(mirror, table)[0]
        if (report := _verify_since(table, snap, mirror, loaded, since, root)) is not None:
            return report
    # From the manifests, not scan planning: pyiceberg's planning raises on equality deletes.
    deletes = [e for batch in live_entries(table, snap, ManifestContent.DELETES) for e in batch]
    report = _iceberg_report(table, snap, None, None, len(deletes), delta_enabled=mirror is not None, deep=deep)
    if mirror is None:
        report.update(_iceberg_totals(table, snap, root), agree=True, differences=[])
        return report
    delta, adds = _read_delta_adds(mirror, report, loaded)
    if delta is None:  # the report says why
        report.update(_iceberg_totals(table, snap, root))
        return report
    pending = _delta_figures(table, snap, mirror, delta, adds, report)
    vectors = deletion_vectors.compares(table, delta)
    compare_vectors = vectors and not pending  # (a lagging log is reported as such)
    keep = deletion_vectors.deleted_from(deletes, delta, mirror.storage, root) if compare_vectors else None
    comparison = FileComparison(table, delta, mirror)
    live = compare_live_files(table, snap, root, delta, adds, comparison, keep=keep, keep_pairs=deep)
    del adds  # (before the comparison's last step reads every live file's partition values again)
    report.update(iceberg_files=live.iceberg_files, iceberg_rows=live.iceberg_rows)
    files = TableFiles(live.kept, deletes)  # the data files deletes apply to, and every delete file
    differences = live.differences
    differences += _schema_differences(table, delta)
    differences += table_contract.format_differences(table, delta)  # the data contract, in both formats
    if foreign := foreign_delta.foreign_versions(delta):
        report["delta_foreign_versions"] = [v.to_dict() for v in foreign]
        differences.append(foreign_delta.explain(".".join(table.name()), foreign))
    differences += comparison.differences()
    if compare_vectors:
        differences += deletion_vectors.deleted_position_differences(table, files, delta, mirror.storage, root, report)
    differences += _unmirrored_differences(report["table"], files, pending, vectors)
    if mirror.glue is not None:
        report["delta_glue_table"] = mirror.glue.qualified
        differences += delta_glue.differences(mirror.glue, table, mirror.root_uri)
    # Content is compared only when the file sets agree: otherwise the counts above already say what differs.
    # (DuckDB applies position deletes and deletion vectors, not other engines' equality deletes.)
    if deep and not pending and live.same_files and not (files.equality_deletes or (files.deletes and not vectors)):
        differences += _deep_differences(table, mirror, delta, live.pairs, report, deep_hash_max_rows)
    report["columns"] = _schema_columns(_expected_delta_schema(table)[0])
    report["differences"] = differences
    report["agree"] = not differences
    return report


def _verify_since(table: Table, snap, mirror: DeltaMirror, loaded, since: VerifiedPair, root: str) -> dict[str, Any] | None:
    """The check of only what changed since `since`, or None when the logs do not confirm that pair."""
    changed = _trusted_changes(table, snap, mirror, loaded, since, root)
    # (a log whose adds delta-rs cannot list is a finding the full comparison reports)
    if changed is None or (totals := _live_totals_or_none(loaded)) is None:
        return None
    report = _verify_changes(table, snap, mirror, loaded, changed, totals)
    mirror.keep(table, loaded)
    return report


def _delta_figures(table: Table, snap, mirror: DeltaMirror, delta, adds: DeltaAdds, report: dict[str, Any]) -> list | None:
    """The Delta side's figures into `report`; returns the snapshots Delta still lacks (None when unknown)."""
    mirrored = mirror.mirrored_sequence_number(delta)
    pending = mirror.pending_snapshots(table, snap, mirrored) if snap else []
    report.update(
        delta_version=delta.version(),
        delta_files=adds.files,
        delta_rows=adds.rows,
        delta_files_without_row_count=int((~adds.counted).sum()),
        delta_mirrored_sequence_number=mirrored,
        delta_lag_snapshots=len(pending) if pending is not None else None,
    )
    return pending


def _deep_differences(table: Table, mirror: DeltaMirror, delta, both: dict, report: dict[str, Any], deep_hash_max_rows: int) -> list[str]:
    """`--deep`: the content as DuckDB reads each format, the counts and bounds against the footers, the change data."""
    deep_report = content_differences(table, mirror, report["iceberg_rows"], deep_hash_max_rows)
    report["content"] = deep_report["content"]
    differences = list(deep_report["differences"])
    differences += footer_differences(table, delta, both)
    checked, cdc_differences = change_data_differences(table, mirror, delta)
    if checked:
        report["content"]["change_data"] = checked
    return differences + cdc_differences


def _iceberg_report(table: Table, snap, files: int | None, rows: int | None, delete_files: int, *, delta_enabled: bool, deep: bool) -> dict[str, Any]:
    """The report's Iceberg side: the current snapshot and its live files, rows and delete files."""
    return {
        "table": ".".join(table.name()),
        "iceberg_snapshot_id": snap.snapshot_id if snap else None,
        "iceberg_sequence_number": snap.sequence_number if snap else None,
        "iceberg_files": files,
        "iceberg_rows": rows,
        "iceberg_delete_files": delete_files,
        "delta_enabled": delta_enabled,
        "deep": deep,
        "compared": "every live file",
    }


def _trusted_changes(table: Table, snap, mirror: DeltaMirror, delta, since: VerifiedPair, root: str) -> Changes | None:
    """What changed since `since`, when comparing that alone is exact: the logs confirm the pair, Delta is up to
    date with no log of its own to compare, and no row-level deletes are live (their positions are compared file by
    file, `maintenance/verify/deletion_vectors.py`)."""
    if delta is None or snap is None or deletion_vectors.compares(table, delta) or has_delete_files(table, snap):
        return None
    mirrored = mirror.mirrored_sequence_number(delta)
    if mirror.pending_snapshots(table, snap, mirrored) != [] or mirror.glue is not None:
        return None
    if (changed := changes.changes_since(table, snap, mirror, delta, since, root)) is not None:
        changed.mirrored_sequence_number = mirrored
    return changed


def _verify_changes(table: Table, snap, mirror: DeltaMirror, delta: FollowedLog, changed: Changes, totals: LiveTotals) -> dict[str, Any]:
    """The report of a check over what changed since a verified pair: the same findings as the full check, about
    the files the two logs added and removed since, and the totals of both (`totals`: Delta's live files) against
    each other.

    An added file whose logged add is exactly the one the mirror derives from its Iceberg data file (changes.py,
    `as_mirrored`) holds the same partition values and statistics in both logs by construction; only the others are
    compared as Delta readers parse them, which needs delta-rs's state of every live file."""
    summary = snap.summary.additional_properties if snap.summary else {}
    iceberg_files, iceberg_rows = summary.get("total-data-files"), summary.get("total-records")
    report = _iceberg_report(table, snap, int(iceberg_files) if iceberg_files else None, int(iceberg_rows) if iceberg_rows else None, 0, delta_enabled=True, deep=False)
    report.update(compared=f"what changed since Iceberg snapshot {changed.since.snapshot_id} and Delta version {changed.since.delta_version}")
    report.update(delta_version=delta.version(), delta_files=totals.files, delta_rows=totals.rows, delta_files_without_row_count=totals.files_without_row_count,
                  delta_mirrored_sequence_number=changed.mirrored_sequence_number, delta_lag_snapshots=0)
    differences = changed.set_differences() + changes.listed_count_differences(table, snap)
    if report["iceberg_files"] is not None and report["iceberg_files"] != totals.files:
        differences.append(f"file counts differ: Iceberg's snapshot summary {report['iceberg_files']}, Delta {totals.files}")
    if report["iceberg_rows"] is not None and not totals.files_without_row_count and report["iceberg_rows"] != totals.rows:
        differences.append(f"row counts differ: Iceberg's snapshot summary {report['iceberg_rows']}, Delta {totals.rows}")
    mirrored = changes.as_mirrored(table, mirror.root_uri, changed)
    differences += partition_record_differences(table, {p: changed.iceberg_added[p] for p in mirrored})
    rest = {p: a for p, a in changed.delta.added.items() if p not in mirrored}
    both = {}
    if rest:
        adds = _delta_adds(delta)  # delta-rs's state of every live file: the statistics as Delta readers parse them
        raw = [a["path"] for a in rest.values()]
        added = {delta_path(a["path"]): a for a in flat_rows(adds.filter(pc.is_in(adds.column("path"), value_set=pa.array(raw, pa.string()))), delta)}
        both = {p: (f, added[p]) for p, f in changed.iceberg_added.items() if p in added}
    if miscounted := [f"{p}: Iceberg {f.record_count} rows, Delta {a['num_records']}" for p, (f, a) in sorted(both.items()) if a.get("num_records") not in (None, f.record_count)]:
        differences.append(f"{len(miscounted)} added file(s) have different row counts in the two logs, e.g. {miscounted[:MAX_LISTED]}")
    differences += _schema_differences(table, delta)
    differences += table_contract.format_differences(table, delta)
    if foreign := foreign_delta.foreign_versions(delta):
        report["delta_foreign_versions"] = [v.to_dict() for v in foreign]
        differences.append(foreign_delta.explain(".".join(table.name()), foreign))
    if rest:
        differences += file_differences(table, delta, mirror, both, [a.get("partitionValues") or {} for a in rest.values()])
    report["columns"] = _schema_columns(_expected_delta_schema(table)[0])
    report.update(differences=differences, agree=not differences)
    return report


def _load_delta(mirror: DeltaMirror, table: Table | None = None) -> tuple[Any, str | None]:
    """The Delta log (`table`'s as this process last read it, brought up to date, when given), or None and why
    (missing or unreadable: a finding, not a crash)."""
    try:
        # Followed, not bare: its `history` decodes only the newest versions' commitInfo lines, where delta-rs's reads
        # each commit file whole (an import's version lists every file of the table).
        delta = mirror.follow() if table is None else mirror.load_current(table)
        return delta, None if delta is not None else "the Delta log does not exist at the table root"
    except Exception as e:  # noqa: BLE001 - an unreadable log is a finding, not a crash
        return None, f"the Delta log cannot be read: {type(e).__name__}: {e}"


def _read_delta_adds(mirror: DeltaMirror, report: dict[str, Any], loaded=None) -> tuple[Any, DeltaAdds | None]:
    """The Delta log (`loaded`, or read now) and its live add actions (stats and partition values keyed by column name).

    A missing or unreadable log is a finding, not a crash: `report` then says why and the log is None."""
    delta, problem = (loaded, None) if loaded is not None else _load_delta(mirror)
    if delta is None:
        report.update(delta_version=None, delta_files=0, delta_rows=0, delta_lag_snapshots=None, agree=False)
        report["differences"] = [problem]
        return None, []
    try:
        adds = DeltaAdds.of(_delta_adds(delta))
    except Exception as e:  # noqa: BLE001 - e.g. a NULL partition value in a NOT NULL column
        report.update(delta_version=delta.version(), delta_files=None, delta_rows=None, delta_lag_snapshots=None, agree=False)
        report["differences"] = [f"the Delta log cannot be read: {type(e).__name__}: {e}"]
        return None, []
    return delta, adds


def _live_totals_or_none(delta: FollowedLog) -> LiveTotals | None:
    try:
        return delta.live_totals()
    except Exception:  # noqa: BLE001 - e.g. a NULL partition value in a NOT NULL column: the full comparison says so
        return None


def _delta_adds(delta) -> pa.Table:
    """The live add actions, their stats and partition values as structs (flattening only the rows compared is cheap)."""
    return pa.table(delta.get_add_actions(flatten=False))


def _unmirrored_differences(t: str, files: TableFiles, pending: list | None, vectors: bool) -> list[str]:
    """What Delta does not show yet: live row-level deletes it cannot express (`vectors`: position deletes it
    expresses with deletion vectors, compared file by file), and snapshots not mirrored."""
    differences = []
    if vectors:
        files = TableFiles([], files.equality_deletes)
    if files.deletes:
        differences.append(
            f"{describe_delete_files(files)} written by another engine are live in Iceberg: its readers skip the deleted rows, "
            f"Delta readers cannot (Delta has no equivalent); run `lakehouse repair {t} --apply-deletes`"
        )
    if pending:
        fix = " --apply-deletes" if files.deletes else ""
        differences.append(f"Delta lags Iceberg by {len(pending)} snapshot(s); run `lakehouse repair {t}{fix}`")
    return differences


def _iceberg_totals(table: Table, snap, root: str) -> dict[str, int]:
    """Iceberg's live files and rows (a path listed twice counted once), for a report without Delta's side."""
    counts = {relative_path(root, e.data_file.file_path): e.data_file.record_count for batch in live_entries(table, snap, ManifestContent.DATA) for e in batch}
    return {"iceberg_files": len(counts), "iceberg_rows": sum(counts.values())}


# ---------------------------------------------------------------- schema


def _expected_delta_schema(table: Table) -> tuple[pa.Schema, str | None]:
    """The Delta schema Iceberg's maps to, or none and why: Iceberg holds a type Delta lacks (another engine added it)."""
    try:
        return pa.schema(delta_schema(table.schema(), narrow_integers(table.properties)).to_arrow()), None
    except SchemaError as e:
        return pa.schema([]), f"schema: Iceberg has {e}"


def _schema_differences(table: Table, delta) -> list[str]:
    out = []
    expected_schema, unmapped = _expected_delta_schema(table)
    if unmapped:
        return [unmapped]
    expected = {f.name: f for f in expected_schema}
    actual = {f.name: f for f in pa.schema(delta.schema().to_arrow())}
    for name in sorted(set(expected) | set(actual)):
        e, a = expected.get(name), actual.get(name)
        if e is None or a is None or str(e.type) != str(a.type):
            out.append(f"column {name!r}: Iceberg {e.type if e else 'missing'}, Delta {a.type if a else 'missing'}")
        elif e.nullable != a.nullable:
            out.append(f"column {name!r}: Iceberg {'optional' if e.nullable else 'required'}, Delta {'nullable' if a.nullable else 'NOT NULL'}")
    if file_columns.enabled(table.properties):
        # Column mapping: each Delta column carries its Iceberg field id and the physical name the files hold.
        names = file_columns.file_names(table, table.schema())
        if not delta_column_mapping.schema_matches(delta, table.schema(), names, narrow_integers(table.properties)):
            want_names = {table.schema().find_column_name(i): p for i, p in names.items()}
            have = delta_column_mapping.physical_names(delta) if delta_column_mapping.is_mapped(delta) else {}
            out.append(f"column mapping: Iceberg's columns have physical names {want_names}; Delta's field ids and physical names are {have or 'absent'}")
    want = delta_partition_columns(table.spec(), table.schema())
    have = list(delta.metadata().partition_columns)
    if want != have:
        out.append(f"partition columns: Iceberg identity partitions {want}, Delta partition columns {have}")
    return out

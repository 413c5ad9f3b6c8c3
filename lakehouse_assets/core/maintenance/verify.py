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
  itself tells the two apart, `delta_logged_stats.py`); string bounds, which either side may truncate, must
  only be able to bound the same values;
* the schema: column names, types and nullability, and the Delta partition columns;
* on a merge-on-read table, the rows each format deletes from each data file (`deletion_vector_check.py`).

Content (`deep=True`: `lakehouse verify TABLE --deep`, the maintenance operation `verify_deep`): DuckDB
reads both formats on this machine (streaming aggregates, no rows collected) and compares the row count
per Delta partition value and, for tables up to `deep_hash_max_rows` rows, an order-independent hash of
all rows; the change data files of the Delta version that mirrors the current snapshot against the rows
that snapshot changed (`change_data_check.py`); and every count and bound either log records against each
file's Parquet footer (`footer_check.py`).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
from pyiceberg.conversions import from_bytes
from pyiceberg.partitioning import _to_partition_representation
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, TruncateTransform, YearTransform
from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

from ..contracts import table_contract
from ..errors import SchemaError
from ..formats import delta_column_mapping, delta_glue, delta_logged_stats, delta_values, foreign_delta
from ..formats.deletes import TableFiles, describe_delete_files, table_files
from ..formats.delta_committer import DeltaMirror
from ..io.storage import delta_path, normalize_uri, relative_to
from ..schema.spec import delta_partition_columns, statistics_policy
from ..schema.statistics import delta_indexed_columns
from ..schema.type_mapping import delta_schema, narrow_integers
from . import deletion_vector_check
from .change_data_check import change_data_differences
from .footer_check import footer_differences

DEEP_HASH_MAX_ROWS = 5_000_000
MAX_LISTED = 3  # examples per kind of difference


def _schema_columns(arrow_schema: pa.Schema) -> dict[str, str]:
    return {f.name: str(f.type) for f in arrow_schema}


def verify_table(table: Table, mirror: DeltaMirror | None, *, deep: bool = False, deep_hash_max_rows: int = DEEP_HASH_MAX_ROWS) -> dict[str, Any]:
    """What each format says about `table` and every difference between them (`agree` when there is none)."""
    root = normalize_uri(table.location())
    snap = table.current_snapshot()
    # From the manifests, not scan planning: pyiceberg's planning raises on equality deletes.
    files = table_files(table, snap)
    live = {_relative(root, e.data_file.file_path): e.data_file for e in files.data}
    iceberg_files = {p: f.record_count for p, f in live.items()}
    report = _iceberg_report(table, snap, iceberg_files, len(files.deletes), delta_enabled=mirror is not None, deep=deep)
    if mirror is None:
        report.update(agree=True, differences=[])
        return report
    delta, add_rows = _read_delta_adds(mirror, report)
    if delta is None:  # the report says why
        return report
    # Delta stores paths percent-encoded (URIs); compare them decoded, as Iceberg stores them.
    delta_adds = {delta_path(a["path"]): a for a in add_rows}
    delta_files = {p: a.get("num_records") for p, a in delta_adds.items()}
    mirrored = mirror.mirrored_sequence_number(delta)
    pending = mirror.pending_snapshots(table, snap, mirrored) if snap else []
    report.update(
        delta_version=delta.version(),
        delta_files=len(delta_files),
        delta_rows=sum(v or 0 for v in delta_files.values()),
        delta_files_without_row_count=sum(v is None for v in delta_files.values()),
        delta_mirrored_sequence_number=mirrored,
        delta_lag_snapshots=len(pending) if pending is not None else None,
    )
    differences = _file_set_differences(iceberg_files, delta_files)
    # A data file listed twice in Iceberg is read twice by its readers; Delta lists a path once.
    listed = Counter(_relative(root, e.data_file.file_path) for e in files.data)
    differences += [f"Iceberg lists data file {p} {n} times (its readers read its rows {n} times; Delta lists it once)" for p, n in sorted(listed.items()) if n > 1]
    differences += _schema_differences(table, delta)
    differences += table_contract.format_differences(table, delta)  # the data contract, in both formats
    if foreign := foreign_delta.foreign_versions(delta):
        report["delta_foreign_versions"] = [v.to_dict() for v in foreign]
        differences.append(foreign_delta.explain(".".join(table.name()), foreign))
    both = {p: (live[p], delta_adds[p]) for p in set(live) & set(delta_adds)}
    differences += _file_differences(table, delta, mirror, both)
    vectors = deletion_vector_check.compares(table, delta)
    if vectors and not pending:  # (a lagging log is reported as such)
        differences += deletion_vector_check.deleted_position_differences(table, files, delta, mirror.storage, root, report)
    differences += _unmirrored_differences(report["table"], files, pending, vectors)
    if mirror.glue is not None:
        report["delta_glue_table"] = mirror.glue.qualified
        differences += delta_glue.differences(mirror.glue, table, mirror.root_uri)
    # Content is compared only when the file sets agree: otherwise the counts above already say what differs.
    # (DuckDB applies position deletes and deletion vectors, not other engines' equality deletes.)
    if deep and not pending and set(iceberg_files) == set(delta_files) and not (files.equality_deletes or (files.deletes and not vectors)):
        deep_report = _content_differences(table, mirror, report["iceberg_rows"], deep_hash_max_rows)
        report["content"] = deep_report["content"]
        differences += deep_report["differences"]
        differences += footer_differences(table, delta, both)
        checked, cdc_differences = change_data_differences(table, mirror, delta)
        if checked:
            report["content"]["change_data"] = checked
        differences += cdc_differences
    report["columns"] = _schema_columns(_expected_delta_schema(table)[0])
    report["differences"] = differences
    report["agree"] = not differences
    return report


def _iceberg_report(table: Table, snap, iceberg_files: dict[str, int], delete_files: int, *, delta_enabled: bool, deep: bool) -> dict[str, Any]:
    """The report's Iceberg side: the current snapshot and its live files, rows and delete files."""
    return {
        "table": ".".join(table.name()),
        "iceberg_snapshot_id": snap.snapshot_id if snap else None,
        "iceberg_sequence_number": snap.sequence_number if snap else None,
        "iceberg_files": len(iceberg_files),
        "iceberg_rows": sum(iceberg_files.values()),
        "iceberg_delete_files": delete_files,
        "delta_enabled": delta_enabled,
        "deep": deep,
    }


def _read_delta_adds(mirror: DeltaMirror, report: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """The Delta log and its live add actions (stats and partition values keyed by column name).

    A missing or unreadable log is a finding, not a crash: `report` then says why and the log is None."""
    try:
        delta = mirror.load()
        problem = None if delta is not None else "the Delta log does not exist at the table root"
    except Exception as e:  # noqa: BLE001 - an unreadable log is a finding, not a crash
        delta, problem = None, f"the Delta log cannot be read: {type(e).__name__}: {e}"
    if delta is None:
        report.update(delta_version=None, delta_files=0, delta_rows=0, delta_lag_snapshots=None, agree=False)
        report["differences"] = [problem]
        return None, []
    try:
        add_rows = pa.table(delta.get_add_actions(flatten=True)).to_pylist()
    except Exception as e:  # noqa: BLE001 - e.g. a NULL partition value in a NOT NULL column
        report.update(delta_version=delta.version(), delta_files=None, delta_rows=None, delta_lag_snapshots=None, agree=False)
        report["differences"] = [f"the Delta log cannot be read: {type(e).__name__}: {e}"]
        return None, []
    if delta_column_mapping.is_mapped(delta):
        # The log keys stats and partition values by physical name: compare them under the columns' names.
        add_rows = [_logical_keys(a, delta_column_mapping.logical_names(delta)) for a in add_rows]
    return delta, add_rows


def _file_set_differences(iceberg_files: dict[str, int], delta_files: dict[str, int | None]) -> list[str]:
    """The two logs' live files (path -> record count) compared: files only one side has, and row counts.

    A Delta add without `numRecords` (optional in the protocol; older writers leave it out) counts nothing: its
    files' counts are compared with the files themselves by `verify --deep` (footer_check.py)."""
    differences = []
    only_iceberg = sorted(set(iceberg_files) - set(delta_files))
    only_delta = sorted(set(delta_files) - set(iceberg_files))
    if only_iceberg:
        differences.append(f"{len(only_iceberg)} file(s) live only in Iceberg, e.g. {only_iceberg[:MAX_LISTED]}")
    if only_delta:
        differences.append(f"{len(only_delta)} file(s) live only in Delta, e.g. {only_delta[:MAX_LISTED]}")
    uncounted = {p for p, n in delta_files.items() if n is None}
    iceberg_rows = sum(n for p, n in iceberg_files.items() if p not in uncounted)
    delta_rows = sum(n for n in delta_files.values() if n is not None)
    if iceberg_rows != delta_rows:
        over = f" (over the files whose row count Delta records; {len(uncounted)} add(s) record none)" if uncounted else ""
        differences.append(f"row counts differ: Iceberg {iceberg_rows}, Delta {delta_rows}{over}")
    mismatched = sorted(p for p in set(iceberg_files) & set(delta_files) if delta_files[p] is not None and iceberg_files[p] != delta_files[p])
    if mismatched:
        examples = [f"{p}: Iceberg {iceberg_files[p]}, Delta {delta_files[p]}" for p in mismatched[:MAX_LISTED]]
        differences.append(f"{len(mismatched)} file(s) have different row counts in the two logs, e.g. {examples}")
    return differences


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


def _logical_keys(add: dict[str, Any], logical: dict[str, str]) -> dict[str, Any]:
    out = {}
    for key, value in add.items():
        prefix, dot, column = key.partition(".")
        out[f"{prefix}.{logical.get(column, column)}" if dot else key] = value
    return out


def _relative(root: str, uri: str) -> str:
    try:
        return relative_to(root, uri)
    except ValueError:
        return uri  # outside the table root: never in the Delta log, reported as Iceberg-only


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
    if delta_column_mapping.enabled(table.properties):
        # Column mapping: each Delta column carries its Iceberg field id and the physical name the files hold.
        names = delta_column_mapping.file_names(table, table.schema())
        if not delta_column_mapping.schema_matches(delta, table.schema(), names, narrow_integers(table.properties)):
            want_names = {table.schema().find_column_name(i): p for i, p in names.items()}
            have = delta_column_mapping.physical_names(delta) if delta_column_mapping.is_mapped(delta) else {}
            out.append(f"column mapping: Iceberg's columns have physical names {want_names}; Delta's field ids and physical names are {have or 'absent'}")
    want = delta_partition_columns(table.spec(), table.schema())
    have = list(delta.metadata().partition_columns)
    if want != have:
        out.append(f"partition columns: Iceberg identity partitions {want}, Delta partition columns {have}")
    return out


# ---------------------------------------------------------------- per file


def _same(t, a, b) -> bool:
    if isinstance(a, dt.datetime) or isinstance(b, dt.datetime):
        if a is None or b is None:
            return a is b
        return delta_values._micros(a) == delta_values._micros(b)
    return a == b


def _file_differences(table: Table, delta, mirror: DeltaMirror, pairs: dict) -> list[str]:
    """Partition values and stats of the files both logs hold."""
    schema = table.schema()
    found: dict[str, list[str]] = {}

    def note(kind: str, detail: str) -> None:
        found.setdefault(kind, []).append(detail)

    delta_columns = set(delta.metadata().partition_columns)
    # Delta readers parse the statistics of these columns only (its dataSkipping* configuration): compare those.
    indexed = delta_indexed_columns(schema, delta.metadata().configuration or {}, delta_columns)
    exact = _exact_string_lengths(table)
    unparsed: list[tuple[str, str, str, Any]] = []  # (path, min|max, column, expected): NULL to delta-rs
    expected_spellings: set[tuple] = set()
    for path, (data_file, add) in sorted(pairs.items()):
        spec = table.specs()[data_file.spec_id]
        spelled = {}
        for pos, pf in enumerate(spec.fields):
            name = schema.find_column_name(pf.source_id)
            if not isinstance(pf.transform, IdentityTransform) or name not in delta_columns:
                continue
            t = schema.find_type(pf.source_id)
            iceberg_value = delta_values.from_internal(t, data_file.partition[pos])
            try:
                spelled[name] = delta_values.partition_value(name, t, data_file.partition[pos])
            except delta_values.UnrepresentableValue:
                note("unrepresentable partition value", f"{path}: {name!r} is {iceberg_value!r} in Iceberg, which Delta reads as NULL")
                continue
            delta_value = add.get(f"partition.{name}")
            if not _same(t, iceberg_value, delta_value):
                note("partition value", f"{path}: {name!r} is {iceberg_value!r} in Iceberg, {delta_value!r} in Delta")
        expected_spellings.add(tuple(sorted(spelled.items())))
        _partition_bound_differences(schema, spec, data_file, path, note)
        _stats_differences(schema, data_file, add, path, note, indexed, exact, unparsed)
    _unreadable_stats(delta, mirror, unparsed, note)
    if delta_columns:
        # delta-rs parses sloppy spellings leniently; other readers do not: compare the strings in the log.
        logical = delta_column_mapping.logical_names(delta) if delta_column_mapping.is_mapped(delta) else {}
        actual_spellings = {tuple(sorted((logical.get(k, k), v) for k, v in p.items())) for p in delta.partitions()}
        wrong = sorted(actual_spellings - expected_spellings, key=repr)
        if wrong:
            note("partition value spelling", f"Delta log holds {dict(wrong[0])}, which is not how the Iceberg values are spelled")
    return [f"{len(v)} {kind} difference(s), e.g. {v[:MAX_LISTED]}" for kind, v in found.items()]


# Transforms that keep order, over source types whose Iceberg bounds are exact (strings' may be truncated).
_MONOTONIC = (IdentityTransform, YearTransform, MonthTransform, DayTransform, HourTransform, TruncateTransform)
_EXACT_BOUNDS = (IntegerType, LongType, DateType, TimestampType, TimestamptzType, DecimalType)


def _partition_bound_differences(schema, spec, data_file, path: str, note) -> None:
    """Iceberg readers prune by a file's partition record, Delta readers by its rows (a transform's value is
    no Delta partition column): the record must be the transform of every row's value. Checked on the
    file's lower and upper bounds, which an order-keeping transform maps to the same value."""
    lower, upper = data_file.lower_bounds or {}, data_file.upper_bounds or {}
    for pos, pf in enumerate(spec.fields):
        t = schema.find_type(pf.source_id)
        if not isinstance(pf.transform, _MONOTONIC) or not isinstance(t, _EXACT_BOUNDS):
            continue
        if pf.source_id not in lower or pf.source_id not in upper or data_file.partition[pos] is None:
            continue
        fn = pf.transform.transform(t)
        value = _to_partition_representation(t, data_file.partition[pos]) if isinstance(pf.transform, IdentityTransform) else data_file.partition[pos]
        for bound in (lower[pf.source_id], upper[pf.source_id]):
            got = fn(from_bytes(t, bound))
            if got != value:
                note("partition record", f"{path}: {pf.name} is {value!r} in the Iceberg record, but the file holds rows of {got!r} "
                     "(Iceberg readers that prune by partition skip them; Delta readers see them)")
                break


def _stats_differences(schema, data_file, add: dict, path: str, note, indexed: set[str], exact: dict[int, int], unparsed: list) -> None:
    """The statistics of the columns the Delta log indexes: each must be what the mirror derives from the file's
    Iceberg statistics (a column Iceberg keeps no statistics for must have none in Delta that Iceberg contradicts).

    A string bound may be truncated on either side: it must only be compatible with the other side's. A statistic
    the add leaves out is unknown, not a difference; one delta-rs reads as NULL goes to `unparsed`, which the log
    decides between the two."""
    lower, upper, nulls = data_file.lower_bounds or {}, data_file.upper_bounds or {}, data_file.null_value_counts or {}
    for f in schema.fields:
        if not f.field_type.is_primitive or f.name not in indexed:
            continue
        t, name = f.field_type, f.name
        if f"partition.{name}" in add:
            continue  # Delta keeps no stats for partition columns
        if f.field_id in nulls and add.get(f"null_count.{name}") is not None and add[f"null_count.{name}"] != nulls[f.field_id]:
            note("null count", f"{path}: {name!r} has {nulls[f.field_id]} nulls in Iceberg, {add[f'null_count.{name}']} in Delta")
        both = f.field_id in lower and f.field_id in upper
        lo = delta_values.stat_value(t, lower[f.field_id], False) if both else None
        hi = delta_values.stat_value(t, upper[f.field_id], True) if both else None
        if lo is None or hi is None:
            lo = hi = None  # the mirror writes a column's min and max together or not at all
        for bound, raw, want_json, is_upper in (("min", lower.get(f.field_id), lo, False), ("max", upper.get(f.field_id), hi, True)):
            got = add.get(f"{bound}.{name}")
            if got is None:
                if want_json is not None and add.get("num_records") is not None:  # an add without stats has nothing to misread
                    unparsed.append((path, bound, name, want_json))
            elif want_json is None:
                if raw is not None and not delta_values.stats_bound_holds(t, got, raw, is_upper):
                    note("stats bound", f"{path}: Delta {bound} of {name!r} is {got!r}, not a bound of Iceberg's {from_bytes(t, raw)!r}")
            elif isinstance(t, StringType):
                if not delta_values.string_bounds_compatible(got, want_json, is_upper, len(want_json) < exact.get(f.field_id, TRUNCATED_STRINGS)):
                    note("stats bound", f"{path}: Delta {bound} of {name!r} is {got!r}, which cannot bound the rows Iceberg bounds by {want_json!r}")
            elif isinstance(t, (TimestampType, TimestamptzType)):
                if not delta_values.timestamp_stat_matches(t, got, raw, is_upper):
                    note("stats", f"{path}: Delta {bound} of {name!r} is {got!r}, expected {want_json!r} (or its millisecond truncated)")
            elif not _same(t, _typed_stat(t, want_json), got):
                note("stats", f"{path}: Delta {bound} of {name!r} is {got!r}, expected {want_json!r}")


TRUNCATED_STRINGS = 16  # Iceberg's default truncate(16): a string bound this long may be a truncated one


def _exact_string_lengths(table: Table) -> dict[int, int]:
    """Per string column, the length below which its Iceberg bounds are the file's own values: its truncation length
    under the table's statistics policy, at most Iceberg's default (files written under an older setting)."""
    policy = statistics_policy(table)
    return {
        f.field_id: min(policy.mode(f.field_id).length or TRUNCATED_STRINGS, TRUNCATED_STRINGS)
        for f in table.schema().fields
        if isinstance(f.field_type, StringType)
    }


def _unreadable_stats(delta, mirror: DeltaMirror, unparsed: list, note) -> None:
    """Of the statistics delta-rs reads as NULL, those the log holds: unreadable (a reader that parses them differently
    would skip files wrongly). Those the writer left out are unknown, never a difference."""
    if not unparsed:
        return
    logged = delta_logged_stats.logged_stats(mirror.storage, mirror.root_uri, delta.version(), {p for p, *_ in unparsed})
    physical = {v: k for k, v in delta_column_mapping.logical_names(delta).items()} if delta_column_mapping.is_mapped(delta) else {}
    key = {"min": "minValues", "max": "maxValues"}
    for path, bound, name, want_json in unparsed:
        if path not in logged:
            continue  # not found in the log (e.g. a v2 checkpoint): cannot tell
        stats = logged[path]
        logged_value = ((stats or {}).get(key[bound]) or {}).get(physical.get(name, name))
        if stats is None or logged_value is not None:  # a JSON null is no statistic, as a left-out one
            note("stats", f"{path}: Delta {bound} of {name!r} is missing or unreadable, expected {want_json!r} (the log holds {logged_value!r})")


def _typed_stat(t, value):
    if isinstance(t, DateType):
        return dt.date.fromisoformat(value)
    if isinstance(t, (TimestampType, TimestamptzType)):
        return delta_values.parse_partition_value(t, value)
    return value


# ---------------------------------------------------------------- content (deep)


def _content_differences(table: Table, mirror: DeltaMirror, rows: int, hash_max_rows: int) -> dict[str, Any]:
    """Both formats read by DuckDB: row counts per Delta partition value, and a hash of all rows when small."""
    from ..read import duckdb_readers

    con = duckdb_readers.connect(mirror.storage)
    iceberg = duckdb_readers.iceberg_scan_sql(table.metadata_location)
    delta = duckdb_readers.delta_scan_sql(mirror.root_uri)
    schema = table.schema()
    out: dict[str, Any] = {"content": {}, "differences": []}
    partition_columns = delta_partition_columns(table.spec(), schema)
    if partition_columns:
        cols = ", ".join(f'"{c}"::VARCHAR' for c in partition_columns)
        query = "SELECT {cols}, count(*) FROM {src} GROUP BY ALL"
        a = sorted(map(tuple, con.execute(query.format(cols=cols, src=iceberg)).fetchall()), key=repr)
        b = sorted(map(tuple, con.execute(query.format(cols=cols, src=delta)).fetchall()), key=repr)
        out["content"]["partitions"] = len(a)
        if a != b:
            diff = sorted(set(a) ^ set(b), key=repr)[:MAX_LISTED]
            out["differences"].append(f"row counts per partition differ between the formats (read by DuckDB), e.g. {diff}")
    if rows <= hash_max_rows:
        cols = ", ".join(f'"{f.name}"::VARCHAR' for f in schema.fields)
        query = f"SELECT count(*), sum(hash({cols})::HUGEINT) FROM {{src}}"
        a = con.execute(query.format(src=iceberg)).fetchone()
        b = con.execute(query.format(src=delta)).fetchone()
        out["content"]["row_hash"] = str(a[1])
        if tuple(a) != tuple(b):
            out["differences"].append(f"the rows differ between the formats (read by DuckDB): {a[0]} rows in Iceberg, {b[0]} in Delta, different content hash")
    else:
        out["content"]["row_hash"] = f"skipped: {rows} rows > {hash_max_rows}"
    return out

"""The formats-agree check, per file both logs hold: the Delta partition values (typed, and spelled exactly as
`delta_values` spells them), the Iceberg partition record against the file's bounds, and the Delta statistics of
every column the Delta log indexes against what the mirror derives from the Iceberg statistics (see maintenance/verify/formats_agree.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.partitioning import _to_partition_representation
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, TruncateTransform, YearTransform
from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

from ...formats.delta import column_mapping as delta_column_mapping
from ...formats.delta import logged_stats as delta_logged_stats
from ...formats.delta import values as delta_values
from ...formats.delta.committer import DeltaMirror
from ...schema.spec import statistics_policy
from ...schema.statistics import delta_indexed_columns

MAX_LISTED = 3  # examples per kind of difference


def _same(t, a, b) -> bool:
    if isinstance(a, dt.datetime) or isinstance(b, dt.datetime):
        if a is None or b is None:
            return a is b
        return delta_values._micros(a) == delta_values._micros(b)
    return a == b


class Findings:
    """Differences by kind: how many, and the first MAX_LISTED in path order (files may come in any order)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, list[tuple[str, int, str]]] = {}
        self._seen = 0

    def note(self, kind: str, path: str, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._seen += 1
        kept = self.first.setdefault(kind, [])
        kept.append((path, self._seen, detail))
        if len(kept) > MAX_LISTED:
            kept.sort()
            kept.pop()

    def examples(self, kind: str) -> list[str]:
        return [d for *_, d in sorted(self.first.get(kind, []))]

    def differences(self) -> list[str]:
        return [f"{n} {kind} difference(s), e.g. {self.examples(kind)}" for kind, n in self.counts.items()]


class FileComparison:
    """Partition values and stats of the files both logs hold, compared as they come (`add`, any number of times and
    in any order); `differences` says what differs. Holds a few examples and the partition spellings seen, not the files."""

    def __init__(self, table: Table, delta, mirror: DeltaMirror):
        self.table, self.delta, self.mirror = table, delta, mirror
        self.findings = Findings()
        self.delta_columns = set(delta.metadata().partition_columns)
        # Delta readers parse the statistics of these columns only (its dataSkipping* configuration): compare those.
        self.indexed = delta_indexed_columns(table.schema(), delta.metadata().configuration or {}, self.delta_columns)
        self.exact = _exact_string_lengths(table)
        self.unparsed: list[tuple[str, str, str, Any]] = []  # (path, min|max, column, expected): NULL to delta-rs
        self.expected_spellings: set[tuple] = set()

    def add(self, pairs: dict) -> None:
        """`pairs`: path -> (Iceberg data file, the Delta add as a flat row)."""
        schema = self.table.schema()
        for path, (data_file, add) in sorted(pairs.items()):

            def note(kind: str, detail: str, path: str = path) -> None:
                self.findings.note(kind, path, detail)

            spec = self.table.specs()[data_file.spec_id]
            spelled = {}
            for pos, pf in enumerate(spec.fields):
                name = schema.find_column_name(pf.source_id)
                if not isinstance(pf.transform, IdentityTransform) or name not in self.delta_columns:
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
            self.expected_spellings.add(tuple(sorted(spelled.items())))
            _partition_bound_differences(schema, spec, data_file, path, note)
            _stats_differences(schema, data_file, add, path, note, self.indexed, self.exact, self.unparsed)

    def differences(self, partitions: list[dict] | None = None) -> list[str]:
        """`partitions`: the Delta partition values as logged to check the spelling of (default: every live file's)."""
        _unreadable_stats(self.delta, self.mirror, self.unparsed, lambda kind, detail: self.findings.note(kind, detail, detail))
        if self.delta_columns:
            # delta-rs parses sloppy spellings leniently; other readers do not: compare the strings in the log.
            logical = delta_column_mapping.logical_names(self.delta) if delta_column_mapping.is_mapped(self.delta) else {}
            logged = self.delta.partitions() if partitions is None else partitions
            actual_spellings = {tuple(sorted((logical.get(k, k), v) for k, v in p.items())) for p in logged}
            wrong = sorted(actual_spellings - self.expected_spellings, key=repr)
            if wrong:
                self.findings.note("partition value spelling", "", f"Delta log holds {dict(wrong[0])}, which is not how the Iceberg values are spelled")
        return self.findings.differences()


def file_differences(table: Table, delta, mirror: DeltaMirror, pairs: dict, partitions: list[dict] | None = None) -> list[str]:
    """Partition values and stats of the files both logs hold (`pairs`: path -> (data file, flat add)); `partitions`: the
    Delta partition values as logged to check the spelling of (default: every live file's)."""
    comparison = FileComparison(table, delta, mirror)
    comparison.add(pairs)
    return comparison.differences(partitions)


def partition_record_differences(table: Table, data_files: dict) -> list[str]:
    """The Iceberg partition record against the bounds of each of `data_files` (path -> data file), alone: the files
    whose Delta add is the one the mirror derives from them (maintenance/verify/changes.py, `as_mirrored`)."""
    schema = table.schema()
    found: dict[str, list[str]] = {}
    for path, data_file in sorted(data_files.items()):
        _partition_bound_differences(schema, table.specs()[data_file.spec_id], data_file, path, lambda kind, detail: found.setdefault(kind, []).append(detail))
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

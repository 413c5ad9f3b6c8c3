"""Which columns carry statistics, decided once per table and the same in Iceberg and Delta.

Both formats keep per-file column statistics (null counts, min/max) that readers use to skip files,
and each has its own knobs for which columns get them:

* Iceberg: `write.metadata.metrics.default` (`none`, `counts`, `truncate(N)`, `full`; default
  `truncate(16)`), `write.metadata.metrics.column.<col>` per column, and
  `write.metadata.metrics.max-inferred-column-defaults` (default 100): with no explicit default, only
  the first that many top-level columns get statistics (Java Iceberg's rule; pyiceberg has no limit).
* Delta: `delta.dataSkippingStatsColumns` (a column list) or `delta.dataSkippingNumIndexedCols` (the
  first N leaf columns, partition columns not counted; default 32). Delta readers parse statistics of
  those columns only, whatever else the log holds.

Left alone, the two disagree on any table wider than 32 columns. `StatisticsPolicy` resolves every
one of those properties (all live in the Iceberg table properties) into one mode per column; the
Iceberg committer hands its Iceberg form to pyiceberg's statistics code, and the Delta mirror writes
the same columns' statistics and declares exactly those columns in `delta.dataSkippingStatsColumns`.

Precedence: Delta's `dataSkippingStatsColumns`, else its `dataSkippingNumIndexedCols`, select the
columns when set; else Iceberg's explicit default applies to every column; else the first
`max-inferred-column-defaults` top-level columns. Selected columns get Iceberg's default mode (or
`truncate(16)`), the others none; `write.metadata.metrics.column.<col>` overrides either. Delta keeps
statistics of top-level columns only (its partition columns carry their values instead); fields inside
structs, lists and maps get null counts in Iceberg only, as pyiceberg writes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, Iterable, Mapping

from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, ListType, MapType, NestedField, StringType, StructType

from ..errors import SpecError

if TYPE_CHECKING:
    from pyiceberg.io.pyarrow import MetricsMode

METRICS_DEFAULT = "write.metadata.metrics.default"
METRICS_COLUMN_PREFIX = "write.metadata.metrics.column."
MAX_INFERRED_COLUMNS = "write.metadata.metrics.max-inferred-column-defaults"
MAX_INFERRED_COLUMNS_DEFAULT = 100  # Iceberg's default
DELTA_STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DELTA_NUM_INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"
DELTA_NUM_INDEXED_COLUMNS_DEFAULT = 32  # Delta's default
# Keys that decide the policy: copied from a resource-wide Delta configuration into a new table's properties.
POLICY_KEYS = (METRICS_DEFAULT, MAX_INFERRED_COLUMNS, DELTA_STATS_COLUMNS, DELTA_NUM_INDEXED_COLUMNS)


@cache
def _iceberg():
    """pyiceberg's metrics modes, imported when a policy is first resolved: they live in its pyarrow FileIO module,
    whose import brings pyarrow.dataset and with it pandas (about 0.2 s), which loading a code location does not need."""
    from pyiceberg.io import pyarrow

    return pyarrow


def _mode(kind: str, length: int | None = None) -> "MetricsMode":
    """pyiceberg's metrics mode `kind` (NONE, COUNTS, TRUNCATE, FULL)."""
    return _iceberg().MetricsMode(_iceberg().MetricModeTypes[kind], length)


def _is(mode: "MetricsMode", *kinds: str) -> bool:
    return mode.type.name in kinds


def policy_keys(properties: Mapping[str, str]) -> dict[str, str]:
    """The statistics settings among `properties` (e.g. a resource-wide Delta configuration)."""
    return {k: v for k, v in properties.items() if k in POLICY_KEYS or k.startswith(METRICS_COLUMN_PREFIX)}


@dataclass(frozen=True)
class StatisticsPolicy:
    """The statistics mode of every primitive column of one schema (by field id), for both formats."""

    schema: Schema
    modes: dict[int, MetricsMode]
    partition_columns: tuple[str, ...] = ()  # Delta partition columns: their values, not statistics

    def mode(self, field_id: int) -> MetricsMode:
        return self.modes.get(field_id) or _mode("NONE")

    def has_bounds(self, field_id: int) -> bool:
        return _is(self.mode(field_id), "TRUNCATE", "FULL")

    def has_counts(self, field_id: int) -> bool:
        return not _is(self.mode(field_id), "NONE")

    def iceberg_properties(self) -> dict[str, str]:
        """Properties for pyiceberg's `compute_statistics_plan` that yield exactly these modes."""
        out = {METRICS_DEFAULT: "none"}
        for field_id, mode in self.modes.items():
            name = self.schema.find_column_name(field_id)
            if name is not None and not _is(mode, "NONE"):
                out[METRICS_COLUMN_PREFIX + name] = _mode_text(mode)
        return out

    def delta_columns(self) -> list[str]:
        """Top-level columns whose statistics the Delta log carries, in schema order."""
        return list(self._delta_fields)

    @cached_property
    def _delta_fields(self) -> tuple[str, ...]:  # asked once per mirrored file
        return tuple(f.name for f in self.schema.fields if f.field_type.is_primitive and f.name not in self.partition_columns and self.has_counts(f.field_id))

    def delta_configuration(self, current: Mapping[str, str] | None = None) -> dict[str, str]:
        """The Delta table configuration that makes Delta readers parse `delta_columns()`, given the table's `current` one.

        The first N leaf columns (`dataSkippingNumIndexedCols`, -1 for all) when the columns are a prefix of the
        schema, so that columns added later outside the policy need no new Delta version; else the column list
        (`dataSkippingStatsColumns`), which Delta readers prefer once it is set, even empty."""
        columns = set(self.delta_columns())
        fields = [f for f in self.schema.fields if f.name not in self.partition_columns]
        if DELTA_STATS_COLUMNS not in (current or {}):
            k = next((i for i, f in enumerate(fields) if f.field_type.is_primitive and f.name not in columns), len(fields))
            if all(f.name not in columns for f in fields[k:]):
                return {DELTA_NUM_INDEXED_COLUMNS: "-1" if k == len(fields) else str(sum(_delta_leaf_count(f) for f in fields[:k]))}
        if not columns:
            return {DELTA_STATS_COLUMNS: ""}
        # Struct columns before the last listed column are listed too (their leaves get no statistics, which readers
        # take as unknown): delta-rs 1.6.6 parses no statistics of any column after a struct the list leaves out.
        last = max(i for i, f in enumerate(fields) if f.name in columns)
        listed = [f.name for i, f in enumerate(fields) if f.name in columns or (i < last and isinstance(f.field_type, StructType))]
        return {DELTA_STATS_COLUMNS: ",".join(map(quote_column, listed))}


def table_policy(identifier: str, schema: Schema, properties: Mapping[str, str], partition_columns: Iterable[str] = ()) -> StatisticsPolicy:
    """Resolve the table's statistics properties (Iceberg's and Delta's, see the module docstring)."""
    partition_columns = tuple(partition_columns)
    base = _parse_mode(identifier, METRICS_DEFAULT, properties[METRICS_DEFAULT]) if METRICS_DEFAULT in properties else _mode("TRUNCATE", 16)
    top = schema.fields
    if properties.get(DELTA_STATS_COLUMNS):
        named = set(parse_column_list(properties[DELTA_STATS_COLUMNS]))
        selected = [f for f in top if f.name in named or any(n.startswith(f.name + ".") for n in named)]
    elif DELTA_STATS_COLUMNS in properties or DELTA_NUM_INDEXED_COLUMNS in properties:
        n = 0 if DELTA_STATS_COLUMNS in properties else _parse_int(identifier, DELTA_NUM_INDEXED_COLUMNS, properties[DELTA_NUM_INDEXED_COLUMNS], minimum=-1)
        selected = _first_leaves(schema, partition_columns, n)
    elif METRICS_DEFAULT in properties:
        selected = list(top)
    else:
        limit = _parse_int(identifier, MAX_INFERRED_COLUMNS, properties.get(MAX_INFERRED_COLUMNS, str(MAX_INFERRED_COLUMNS_DEFAULT)), minimum=0)
        selected = list(top[:limit])
    chosen = {f.field_id for f in selected} | {f.field_id for f in top if f.name in partition_columns}
    modes: dict[int, MetricsMode] = {}
    for f in top:
        for leaf in _leaves(f):
            modes[leaf.field_id] = base if f.field_id in chosen else _mode("NONE")
    for key, value in properties.items():
        if key.startswith(METRICS_COLUMN_PREFIX):
            name = key[len(METRICS_COLUMN_PREFIX):]
            try:
                field = schema.find_field(name)
            except ValueError:
                continue  # a setting for a column the table does not have (yet, or any more): Iceberg ignores it too
            mode = _parse_mode(identifier, key, value)
            for leaf in _leaves(field):
                modes[leaf.field_id] = mode
    # As pyiceberg collects them: truncation only shortens strings and binaries (others get full bounds);
    # nested fields get counts at most.
    for field_id, mode in list(modes.items()):
        leaf_type = schema.find_type(field_id)
        if _is(mode, "TRUNCATE") and not isinstance(leaf_type, (StringType, BinaryType)):
            modes[field_id] = _mode("FULL")
        if "." in (schema.find_column_name(field_id) or "") and _is(modes[field_id], "TRUNCATE", "FULL"):
            modes[field_id] = _mode("COUNTS")
    return StatisticsPolicy(schema, modes, partition_columns)


def delta_indexed_columns(schema: Schema, configuration: Mapping[str, str], partition_columns: Iterable[str]) -> set[str]:
    """Top-level columns whose statistics Delta readers parse, from a Delta table's own configuration."""
    partition_columns = tuple(partition_columns)
    if configuration.get(DELTA_STATS_COLUMNS):
        named = set(parse_column_list(configuration[DELTA_STATS_COLUMNS]))
        return {f.name for f in schema.fields if f.name in named and f.name not in partition_columns}
    try:
        n = int(configuration.get(DELTA_NUM_INDEXED_COLUMNS, DELTA_NUM_INDEXED_COLUMNS_DEFAULT))
    except ValueError:
        n = DELTA_NUM_INDEXED_COLUMNS_DEFAULT
    return {f.name for f in _first_leaves(schema, partition_columns, n)}


# ---------------------------------------------------------------- column lists and leaves


_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote_column(name: str) -> str:
    """A column name as Delta's column lists spell it: backquoted (backquotes doubled) unless plain."""
    return name if _SIMPLE_NAME.fullmatch(name) else "`" + name.replace("`", "``") + "`"


def parse_column_list(text: str) -> list[str]:
    """`a, `b c`, s.x` -> ["a", "b c", "s.x"] (Delta's comma-separated, backquote-quoted names)."""
    out, part, quoted, i = [], "", False, 0
    while i < len(text):
        ch = text[i]
        if ch == "`":
            if quoted and text[i + 1:i + 2] == "`":
                part += "`"
                i += 1
            else:
                quoted = not quoted
        elif ch == "," and not quoted:
            out.append(part.strip())
            part = ""
        else:
            part += ch
        i += 1
    out.append(part.strip())
    return [p for p in out if p]


def _leaves(field: NestedField) -> list[NestedField]:
    """The primitive fields at or under `field`, in schema order (struct fields, list elements, map keys and values)."""
    t = field.field_type
    if t.is_primitive:
        return [field]
    if isinstance(t, StructType):
        children = list(t.fields)
    elif isinstance(t, ListType):
        children = [t.element_field]
    elif isinstance(t, MapType):
        children = [t.key_field, t.value_field]
    else:
        children = []
    return [leaf for child in children for leaf in _leaves(child)]


def _delta_leaf_count(field: NestedField) -> int:
    """How many of Delta's indexed leaf columns `field` takes: a struct its fields' count, anything else one."""
    t = field.field_type
    return sum(_delta_leaf_count(f) for f in t.fields) if isinstance(t, StructType) else 1


def _first_leaves(schema: Schema, partition_columns: tuple[str, ...], n: int) -> list[NestedField]:
    """Top-level fields holding the first `n` leaf columns (-1: all), partition columns not counted (Delta's rule)."""
    out, count = [], 0
    for f in schema.fields:
        if f.name in partition_columns:
            continue
        if 0 <= n <= count:
            break
        out.append(f)
        count += _delta_leaf_count(f)
    return out


def _mode_text(mode: MetricsMode) -> str:
    return f"truncate({mode.length})" if _is(mode, "TRUNCATE") else mode.type.value


def _parse_mode(identifier: str, key: str, value: str) -> MetricsMode:
    try:
        return _iceberg().match_metrics_mode(value)
    except ValueError:
        raise SpecError(f"Table {identifier}: table property {key}={value!r} is not a metrics mode; use none, counts, truncate(N) or full.") from None


def _parse_int(identifier: str, key: str, value: str, minimum: int) -> int:
    try:
        n = int(value)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        raise SpecError(f"Table {identifier}: table property {key}={value!r} must be an integer of at least {minimum}.")
    return n

"""The partitions a snapshot changed, read from its summary alone: no manifest list or manifest is opened.

Under the table property `write.summary.partition-limit` (Iceberg's, which pyiceberg and Java Iceberg both honour),
a snapshot that changed at most that many partitions lists each of them in its summary, as `partitions.<path>` with
the path of the partition's values (`day=2024-01-01`), and says so (`partition-summaries-included=true`). A writer
that lost a commit race re-validates against every snapshot committed since it planned; reading these keys instead of
each snapshot's manifest list keeps that cost flat however many writers committed first (core/write/conflicts.py).

Only what the summary states for certain is used; anything else answers None, and the caller reads the manifests:
a table whose partitioning changed (a path does not say which spec it was written with), a snapshot that changed
delete files (the collectors count their totals, not their partitions), or a path whose values do not read back to
the same text (a `null`, which an identity string partition could also hold; a month or hour, whose text is not a
value of its type).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import CHANGED_PARTITION_COUNT_PROP, CHANGED_PARTITION_PREFIX, PARTITION_SUMMARY_PROP, Snapshot
from pyiceberg.typedef import Record

LIMIT_PROPERTY = "write.summary.partition-limit"
# Delete-file counts of a snapshot (`added-position-delete-files`, `removed-equality-deletes`, `added-dvs`, ...).
_DELETE_FILE_KEYS = re.compile(r"^(added|removed)-.*(delete|dvs)")


def changed_partitions(table: Table, snapshot: Snapshot) -> list[Record] | None:
    """The partition values of every partition `snapshot` added or removed data files in, by its summary; None when
    the summary does not say for certain (see the module docstring)."""
    summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
    if summary.get(PARTITION_SUMMARY_PROP) != "true" or len(specs := table.specs()) != 1:
        return None
    if any(_DELETE_FILE_KEYS.match(k) and v != "0" for k, v in summary.items()):
        return None
    paths = [k[len(CHANGED_PARTITION_PREFIX):] for k in summary if k.startswith(CHANGED_PARTITION_PREFIX)]
    if str(len(paths)) != summary.get(CHANGED_PARTITION_COUNT_PROP):
        return None
    spec, schema = next(iter(specs.values())), table.schema()
    out = []
    for path in paths:
        if (values := _values(spec, schema, path)) is None:
            return None
        out.append(Record(*values))
    return out


def _values(spec: PartitionSpec, schema: Schema, path: str) -> list | None:
    """The partition values `path` was made of (pyiceberg's `PartitionSpec.partition_to_path`), or None when a value's
    text does not read back to exactly that text."""
    from pyiceberg.expressions.literals import literal

    parts = path.split("/")
    fields = spec.partition_type(schema).fields
    if len(parts) != len(spec.fields):
        return None
    values = []
    for part, partition_field, field in zip(parts, spec.fields, fields):
        name, _, text = part.partition("=")
        text = unquote_plus(text)
        if unquote_plus(name) != partition_field.name or text == "null":
            return None
        try:
            value = literal(text).to(field.field_type).value
            if partition_field.transform.to_human_string(field.field_type, value) != text:
                return None
        except Exception:  # noqa: BLE001 - any text that does not parse is left to the manifests
            return None
        values.append(value)
    return values

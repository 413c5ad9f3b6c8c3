"""What the Delta log cannot express of an Iceberg table, and the error that says so.

The Delta mirror commits only what Delta readers would read exactly like Iceberg readers. Row-level deletes,
partition evolution, files outside the table root, renames without column mapping and files that name columns
other than Delta looks for have no exact Delta commit: each check here returns why (empty when there is
nothing to refuse) with the fix, and the mirror refuses instead of half-mirroring.
"""

from __future__ import annotations

from deltalake import DeltaTable
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ...errors import MirrorRefused
from ...io.storage import relative_to
from ...properties import SummaryKeys
from ...schema.type_mapping import delta_schema, narrow_integers
from .. import file_columns
from ..snapshot_changes import SnapshotChange
from . import column_mapping, vector_mirror

_FIX_DELETES = "run `lakehouse repair {t} --apply-deletes` (rewrites the affected data files with the deletes applied in one Iceberg snapshot; Delta then mirrors the result)"
_FIX_RENAME = "Delta cannot rename or drop a column without column mapping: run `lakehouse upgrade {t}` (turns column mapping on, metadata only) and Delta follows the rename, or rename it back in Iceberg"
_FIX_WIDEN_MAPPED = "Delta cannot widen a column's type in a column-mapped table (delta-rs cannot replace its schema); restore the old type in Iceberg"
_FIX_NAMES = "run `lakehouse repair {t} --rewrite-files` (rewrites those files under the physical names, rows unchanged, as one Iceberg snapshot; Delta then mirrors the table)"
_FIX_SPEC = "partition evolution is not supported: Delta's partition columns are fixed. Restore the original spec in Iceberg (and rewrite files written under the new one), or keep the table Iceberg-only"


def schema_refusals(table: Table, delta: DeltaTable, schema: Schema, summary: dict[str, str]) -> list[str]:
    """Why Delta cannot follow `schema` (a rename or drop without column mapping, a type changed in metadata only)."""
    if file_columns.enabled(table.properties):
        # Renames and drops are metadata-only Delta commits (`delta_schema_evolution.evolve_schema`); a type change still is not.
        changed = column_mapping.changed_types(delta, schema, narrow_integers(table.properties))
        return [f"the type of column(s) {changed} changed; {_FIX_WIDEN_MAPPED}"] if changed else []
    target = {f.name: f for f in delta_schema(schema, narrow_integers(table.properties)).fields}
    current = {f.name: f for f in delta.schema().fields}
    out = []
    gone = [n for n in current if n not in target]
    if gone:
        # Name the new name when the field id survived (a rename), else it was dropped.
        renamed = {}
        for old in gone:
            for s in table.schemas().values():
                try:
                    fid = s.find_field(old).field_id
                except ValueError:
                    continue
                new = schema.find_column_name(fid)
                if new is not None:
                    renamed[old] = new
                    break
        desc = ", ".join(f"{o!r} renamed to {renamed[o]!r}" if o in renamed else f"{o!r} dropped" for o in gone)
        out.append(f"the Iceberg schema no longer has Delta's column(s): {desc}. {_FIX_RENAME.format(t='.'.join(table.name()))}")
    changed = [n for n in target if n in current and str(target[n].type) != str(current[n].type)]
    if changed and SummaryKeys.OPERATION not in summary:
        out.append(
            f"another engine changed the type of column(s) {changed} in the Iceberg metadata only; the live data files keep the "
            f"old type, which Delta would then declare wrongly. Delta cannot follow a type change without a rewrite of every file"
        )
    return out


def unfollowed_renames(table: Table, delta: DeltaTable) -> list[str]:
    """Why Delta cannot follow the current Iceberg schema without column mapping (a rename or drop another engine
    made in Iceberg): checked before a write, whose files would otherwise hold names Delta's log does not know."""
    if file_columns.enabled(table.properties) or column_mapping.is_mapped(delta):
        return []
    names = {f.name for f in table.schema().fields}
    if all(f.name in names for f in delta.schema().fields):
        return []
    return [r for r in schema_refusals(table, delta, table.schema(), {}) if "no longer has Delta's column" in r]


def change_refusals(table: Table, delta: DeltaTable, change: SnapshotChange, root_uri: str) -> list[str]:
    """Why this snapshot's change has no exact Delta commit (empty when it has one)."""
    t = ".".join(table.name())
    out = []
    deletes = change.delete_files_added + change.delete_files_removed
    if vector_mirror.enabled(table.properties):  # position deletes become Delta deletion vectors
        deletes = [f for f in deletes if f.content != DataFileContent.POSITION_DELETES]
    if deletes:
        kinds = sorted({f.content.name.lower().replace("_", "-") for f in deletes})
        out.append(
            f"it adds or removes {len(deletes)} delete file(s) ({', '.join(kinds)}): "
            f"row-level deletes that Delta cannot express (delta-rs writes no deletion vectors); {_FIX_DELETES.format(t=t)}"
        )
    out += _file_refusals(table, change.adds, root_uri)
    snap = change.snapshot
    schema = table.schemas().get(snap.schema_id, table.schema()) if snap.schema_id is not None else table.schema()
    if SummaryKeys.OPERATION not in change.summary:  # another engine's files: are the columns where Delta looks?
        out += misnamed_refusals(table, schema, [f.file_path for f in change.adds])
    out += schema_refusals(table, delta, schema, change.summary)
    return out


def misnamed_refusals(table: Table, schema: Schema, uris: list[str]) -> list[str]:
    """Files of a column-mapped table whose columns are not under their physical names (Delta would read NULL)."""
    renamed = file_columns.renamed_in_files(table, schema)
    misnamed = file_columns.misnamed_files(table, uris, renamed)
    if not misnamed:
        return []
    expected = ", ".join(f"{schema.find_column_name(i)!r} as {p!r}" for i, p in renamed.items())
    return [
        f"{len(misnamed)} data file(s) written by another engine (e.g. {misnamed[0]}) name columns by their current names, while "
        f"Delta readers look for their physical names under column mapping ({expected}) and would read NULL; "
        f"{_FIX_NAMES.format(t='.'.join(table.name()))}"
    ]


def state_refusals(table: Table, delta: DeltaTable, snapshot: Snapshot, root_uri: str) -> list[str]:
    """Why the table at `snapshot` cannot be mirrored as a whole (a full file-set diff)."""
    from ..deletes import describe_delete_files, table_files

    t = ".".join(table.name())
    files = table_files(table, snapshot)
    out = []
    # Position deletes of a merge-on-read table become Delta deletion vectors (vector_mirror.full_diff).
    if files.equality_deletes if vector_mirror.enabled(table.properties) else files.deletes:
        out.append(f"{describe_delete_files(files)} are live: row-level deletes that Delta cannot express; {_FIX_DELETES.format(t=t)}")
    out += _file_refusals(table, [e.data_file for e in files.data], root_uri)
    schema = table.schema() if snapshot.snapshot_id == getattr(table.current_snapshot(), "snapshot_id", None) else table.schemas().get(snapshot.schema_id, table.schema())
    out += schema_refusals(table, delta, schema, {})
    return out


def _file_refusals(table: Table, files: list[DataFile], root_uri: str) -> list[str]:
    specs = table.specs()
    first = specs[min(specs)]
    other_spec = sorted({f.spec_id for f in files if specs[f.spec_id].fields != first.fields})
    out = []
    if other_spec:
        out.append(f"data files were written under partition spec(s) {other_spec}, not the table's original spec {min(specs)}: {_FIX_SPEC}")
    outside = []
    for f in files:
        try:
            relative_to(root_uri, f.file_path)
        except ValueError:
            outside.append(f.file_path)
    if outside:
        out.append(f"{len(outside)} data file(s) lie outside the table root {root_uri} (e.g. {outside[0]}); the Delta log only references files under its root. Rewrite them into the table (e.g. compaction by the writing engine)")
    return out


def refuse_unless_whole(table: Table, delta: DeltaTable, target: Snapshot, root_uri: str, why: str) -> None:
    """Raise MirrorRefused (`why`, plus what keeps the table at `target` from being mirrored) unless one
    full file-set diff can bring Delta to `target`."""
    if refusals := state_refusals(table, delta, target, root_uri):
        raise MirrorRefused(refusal_message(table, delta, f"{why}; at snapshot {target.snapshot_id}: " + "; ".join(refusals)))


def refusal_message(table: Table, delta: DeltaTable, why: str) -> str:
    """The MirrorRefused message: what Delta lacks, and what each format's readers see meanwhile."""
    t = ".".join(table.name())
    return (
        f"Table {t}: Delta cannot mirror Iceberg ({why}). Delta was left at version {delta.version()} (nothing "
        f"half-mirrored); Iceberg readers see the current table, Delta readers the table as of that version, and "
        f"`lakehouse verify {t}` reports the lag until the table is whole again."
    )

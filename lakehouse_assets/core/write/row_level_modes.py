"""A table's row-level write mode: how its merges, CDC deletes and window overwrites remove rows.

Iceberg's standard properties `write.merge.mode`, `write.delete.mode` and `write.update.mode` say it, for
this project's writers (core/write/merge/on_read.py) and for other engines alike: `copy-on-write` (the
default) rewrites a data file without the removed rows; `merge-on-read` leaves it and records their
positions in a position-delete file. Setting the mode is metadata only: one Iceberg property update, no
snapshot, no file read or written; the next write follows it. Delete files already written stay: a
table set back to copy-on-write refuses merges over them until they are applied
(`lakehouse repair TABLE --apply-deletes`).
"""

from __future__ import annotations

from typing import Any

from pyiceberg.exceptions import CommitFailedException

from ..errors import CommitConflict, SpecError
from ..formats.deletes import table_files
from ..properties import TableProperties
from ..table.context import TableContext

MODES = (TableProperties.COPY_ON_WRITE, TableProperties.MERGE_ON_READ)


def set_row_level_mode(ctx: TableContext, identifier: str, mode: str) -> dict[str, Any]:
    """Set all three row-level mode properties of `identifier` to `mode`; returns them before and after."""
    chosen = str(mode).strip().lower()
    if chosen not in MODES:
        raise SpecError(f"Table {identifier}: unknown row-level write mode {mode!r}; use 'copy-on-write' (the default) or 'merge-on-read'.")
    table = ctx.load(identifier)
    if chosen == TableProperties.MERGE_ON_READ and int(table.metadata.format_version) < 2:
        raise SpecError(
            f"Table {identifier}: merge-on-read needs Iceberg format version 2 or later (position-delete files), and this "
            f"table is version {table.metadata.format_version}. Upgrade it (table property format-version=2) with an engine that can, then set the mode."
        )
    before = {p: table.properties.get(p, TableProperties.COPY_ON_WRITE) for p in TableProperties.ROW_LEVEL_MODES}
    try:
        with table.transaction() as tx:
            tx.set_properties({p: chosen for p in TableProperties.ROW_LEVEL_MODES})
    except CommitFailedException as e:
        raise CommitConflict(f"Table {identifier}: another writer changed the table while its write mode was set ({e}); nothing was changed. Run it again.") from e
    return {
        "table": identifier,
        "write_modes_before": before,
        "write_modes": {p: chosen for p in TableProperties.ROW_LEVEL_MODES},
        "delete_files": len(table_files(table).deletes),  # live ones: a copy-on-write table's merges refuse them
        "data_files_rewritten": 0,
    }

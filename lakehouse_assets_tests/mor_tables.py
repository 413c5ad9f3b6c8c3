"""Merge-on-read tables built through the position-delete seam: rows written with `lh`, rows deleted by position.

`delete_positions` writes each data file's position-delete file (the union with its earlier one, which the commit
removes) with `position_deletes.write_delete_file` and commits them through the commit pipeline, as a merge-on-read
write does; the Delta mirror then follows the snapshot as it follows any.
"""

from __future__ import annotations

import pyarrow as pa

from lakehouse_assets.core.formats.deletes import table_files
from lakehouse_assets.core.formats.position_deletes import read_positions, referenced_data_file, union, write_delete_file
from lakehouse_assets.core.model import FileChanges
from lakehouse_assets.core.properties import Operation, SummaryKeys, TableProperties
from lakehouse_assets.core.write import transaction

MERGE_ON_READ = {p: TableProperties.MERGE_ON_READ for p in TableProperties.ROW_LEVEL_MODES}


def data_files(lh, identifier: str) -> dict[str, object]:
    """The live data files, by path, ordered by their smallest `id` (each test writes ids it can tell apart)."""
    from pyiceberg.conversions import from_bytes

    table = lh.load(identifier)
    field = table.schema().find_field("id")
    entries = sorted((e.data_file for e in table_files(table).data), key=lambda f: from_bytes(field.field_type, f.lower_bounds[field.field_id]))
    return {f.file_path: f for f in entries}


def delete_positions(lh, identifier: str, positions: dict[str, list[int]]):
    """Delete rows by (data file path, positions) in one snapshot; returns its WriteResult."""
    table = lh.load(identifier)
    files = table_files(table)
    live = {e.data_file.file_path: e.data_file for e in files.data}
    earlier = {referenced_data_file(e.data_file): e.data_file for e in files.position_deletes}
    changes = FileChanges()
    for path, new in positions.items():
        wanted = pa.array(sorted(set(new)), pa.int64())
        if (old := earlier.get(path)) is not None:
            wanted = union(read_positions(lh.storage, [old], path), wanted)
            changes.removed_delete_files.append(old)
        written = write_delete_file(lh.storage, table.location(), live[path], wanted)
        changes.added_delete_files.append(written)
        changes.created.append(written.file_path)
    return transaction.commit(lh.context, identifier, table, changes, {SummaryKeys.OPERATION: Operation.MERGE}, mode=Operation.MERGE)

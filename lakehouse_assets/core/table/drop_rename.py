"""Dropping and renaming a table, in its catalog and, where the Delta side is registered in Glue, there too.

A drop removes the catalog entries; its files stay unless `purge` is given, and the report says how to register
them again (pyiceberg's `register_table` keeps the whole Iceberg history; `lakehouse import` brings the Delta table
back). With `purge` every file under the table's root goes (and its metadata folder, when
`write.metadata.path` puts it elsewhere). A rename changes names only: the files stay where they are, since both
logs address them by the root, and the Glue entry of the Delta side follows the new name.

Both refuse, naming them, while something depends on the table: branches other than main (a drop would lose their
unpublished writes) and the contract's quarantine table `<table>_quarantine` (left behind under the old name).
`dependents=True` takes them along: the branches go with the table, the quarantine table is dropped (purged alike)
or renamed with it.
"""

from __future__ import annotations

import logging
from typing import Any

from pyarrow.fs import FileSelector
from pyiceberg.exceptions import NoSuchTableError

from ..errors import SpecError
from ..formats.delta import glue as delta_glue
from ..io.storage import normalize_uri
from ..properties import TableProperties
from .context import TableContext

log = logging.getLogger("lakehouse")

QUARANTINE_SUFFIX = "_quarantine"


def drop_table(ctx: TableContext, identifier: str, *, purge: bool = False, dependents: bool = False) -> dict[str, Any]:
    """Drop `identifier` (see the module docstring); returns what was dropped and where the files are."""
    table = ctx.load(identifier)
    quarantine = _refuse_dependents(ctx, identifier, table, "drop", dependents)
    report: dict[str, Any] = {"table": identifier, "purged": purge, "location": table.location(), "metadata_location": table.metadata_location}
    if quarantine is not None:
        report["quarantine"] = drop_table(ctx, quarantine, purge=purge)
    glue = delta_glue.entry_for(table, ctx.delta_glue, ctx.catalog) if ctx.delta_enabled(table) else None
    ctx.catalog.drop_table(identifier)
    report["glue_entry_removed"] = delta_glue.remove(glue) if glue is not None else None
    if purge:
        report["files_removed"] = _purge(ctx, table)
    else:
        report["how_to_register_again"] = (
            f"the files stay under {table.location()}: `catalog.register_table({identifier!r}, {table.metadata_location!r})` (pyiceberg) "
            f"registers the Iceberg table with its history, or `lakehouse import {identifier} {table.location()}` imports the Delta table"
        )
    log.info("Table %s: dropped%s", identifier, " and its files removed" if purge else "; its files stay")
    return report


def rename_table(ctx: TableContext, identifier: str, new_identifier: str, *, dependents: bool = False) -> dict[str, Any]:
    """Rename `identifier` to `new_identifier` (see the module docstring)."""
    if not isinstance(new_identifier, str) or "." not in new_identifier.strip(".") or new_identifier == identifier:
        raise SpecError(f"Table {identifier}: the new name must be another namespace.table identifier; got {new_identifier!r}. Nothing was changed.")
    table = ctx.load(identifier)
    if ctx.catalog.table_exists(new_identifier):
        raise SpecError(f"Table {identifier}: cannot rename to {new_identifier}, which is another table of the catalog. Nothing was changed.")
    quarantine = _refuse_dependents(ctx, identifier, table, "rename", dependents)
    glue = delta_glue.entry_for(table, ctx.delta_glue, ctx.catalog) if ctx.delta_enabled(table) else None
    namespace = tuple(new_identifier.split(".")[:-1])
    ctx.catalog.create_namespace_if_not_exists(namespace)
    ctx.catalog.rename_table(identifier, new_identifier)
    report: dict[str, Any] = {"table": new_identifier, "renamed_from": identifier, "location": table.location()}
    if quarantine is not None:
        report["quarantine"] = rename_table(ctx, quarantine, new_identifier + QUARANTINE_SUFFIX)
    if glue is not None:
        renamed = ctx.load(new_identifier)
        delta_glue.remove(glue)
        if (entry := delta_glue.entry_for(renamed, ctx.delta_glue, ctx.catalog)) is not None:
            report["glue_entry"] = entry.qualified
            delta_glue.keep_in_sync(entry, renamed, normalize_uri(renamed.location()))
    log.info("Table %s: renamed to %s", identifier, new_identifier)
    return report


def _refuse_dependents(ctx: TableContext, identifier: str, table, what: str, dependents: bool) -> str | None:
    """The quarantine table's identifier when there is one and `dependents` takes it along; refuses otherwise."""
    branches = sorted(name for name in table.metadata.refs if name != "main")
    quarantine = identifier + QUARANTINE_SUFFIX
    has_quarantine = not identifier.endswith(QUARANTINE_SUFFIX) and _exists(ctx, quarantine)
    if dependents or not (branches or has_quarantine):
        return quarantine if has_quarantine else None
    named = ([f"branch(es) {', '.join(branches)} (their unpublished writes)"] if branches else []) + (
        [f"the contract's quarantine table {quarantine}"] if has_quarantine else []
    )
    raise SpecError(
        f"Table {identifier}: refusing to {what} it while {' and '.join(named)} depend on it. Nothing was changed. Publish or "
        f"discard the branches first, or pass dependents=True (CLI --dependents) to {what} them with the table."
    )


def _exists(ctx: TableContext, identifier: str) -> bool:
    try:
        return ctx.catalog.table_exists(identifier)
    except NoSuchTableError:
        return False


def _purge(ctx: TableContext, table) -> int:
    """Remove every file under the table's root (and its metadata folder when it lies elsewhere); returns the count."""
    roots = [normalize_uri(table.location())]
    if metadata_path := table.properties.get(TableProperties.METADATA_PATH):
        roots.append(normalize_uri(metadata_path))
    removed = 0
    for root in roots:
        fs, path = ctx.storage.filesystem(root)
        try:
            removed += sum(1 for info in fs.get_file_info(FileSelector(path, recursive=True)) if info.is_file)
            fs.delete_dir(path)
        except FileNotFoundError:
            continue
    return removed


"""Import: bring an existing Iceberg table, Delta table or Parquet dataset under management without rewriting its data.

What `source` is decides the way in (`source_kind`):

* no source: an Iceberg table already in the lakehouse's catalog (written by pyiceberg, Java Iceberg, Trino...), managed
  in place; a source that is an Iceberg metadata JSON file, or a Hadoop-catalog table folder (`metadata/`), is first
  registered in the lakehouse's catalog under `identifier` (`Catalog.register_table`: the same metadata, no copy). From
  then on the lakehouse's catalog owns the table: the source catalog no longer sees its commits, so stop writing
  through it. Its Delta log is created at the table location: version 0 (schema), version 1 (its live files). Other
  engines' delete files are applied first with `apply_deletes=True` (as `repair --apply-deletes` does), else refused;
  so are partition evolution, files outside the location and identity partitions Delta cannot express.
* a folder with `_delta_log/`: the Iceberg table is created over the Delta table's live files (core/maintenance/import_files.py);
  files with deletion vectors are first rewritten without their deleted rows with `apply_deletes=True`, else refused.
* any other folder: a Parquet dataset, flat or Hive-partitioned, registered in both formats over the same files.

A refused import changes nothing; an import that fails midway undoes what it created (catalog entry, `_iceberg/`,
a `_delta_log/` it started), so the source is left as it was.
"""

from __future__ import annotations

import logging
from typing import Any

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import StaticTable, Table

from ..contracts import table_contract
from ..errors import ImportRefused
from ..formats.deletes import describe_delete_files, table_files
from ..formats.delta import features as delta_features
from ..formats.delta import vector_adoption as delta_vector_adoption
from ..io.storage import join_uri, normalize_uri, relative_to
from ..schema.type_mapping import delta_schema
from ..table.context import TableContext
from ..table.tables import check_delta_partitioning, newest_metadata_json
from ..write import transaction
from . import import_files
from .apply_deletes import apply_deletes as apply

log = logging.getLogger("lakehouse.import")

ICEBERG, DELTA, PARQUET = "iceberg", "delta", "parquet"


def import_table(ctx: TableContext, identifier: str, source: str | None = None, *, apply_deletes: bool = False, spark=None) -> dict[str, Any]:
    """`Lakehouse.import_table` (see its docstring): the report of what was imported."""
    kind, location = source_kind(ctx, source)
    if kind == ICEBERG:
        return _import_iceberg(ctx, identifier, location, apply_deletes, spark)
    _refuse_if_exists(ctx, identifier)
    _refuse_if_present(ctx, identifier, location, import_files.METADATA_FOLDER, "Iceberg metadata of this project")
    if kind == DELTA:
        from deltalake import DeltaTable

        try:
            delta = DeltaTable(location, storage_options=ctx.storage.delta_options(location))
        except Exception as e:
            if refusal := delta_features.unreadable(identifier, location, e):
                raise refusal from e
            raise
        delta_features.refuse_unsupported(identifier, delta, location)  # before any work
        adopted = table_contract.adoptable(identifier, delta, location)  # CHECK constraints: the table's contract rules
        table_contract.check_delta_rows(identifier, delta, adopted)
        import_files.refuse_float_partitions(identifier, delta, location)
        import_files.refuse_variant_columns(identifier, delta, location)
        purged = import_files.purge_deletion_vectors(identifier, delta) if apply_deletes else 0
        # A table whose Delta writers delete with vectors is merge-on-read: imported as one, its vectors kept.
        existing = import_files.delta_files(identifier, delta, location, keep_vectors=not apply_deletes and delta_vector_adoption.opted_in(delta))
        table = import_files.create_over_files(ctx, identifier, existing, location)
        try:
            # The Delta side is the source's own versions: one version of ours marks the snapshot as mirrored.
            ctx.mirror(table).record_adoption(table, delta, table.current_snapshot(), adds=[], removes=[])
            table_contract.adopt(table, adopted)
        except BaseException:
            import_files.drop_created(ctx, identifier, location)
            raise
        delta.update_incremental()
        report = _report(identifier, kind, location, ctx.load(identifier), delta.version(), len(existing.files))
        return {**report, "deletion_vectors_purged": purged, "deletion_vectors_kept": len(existing.deleted)}
    existing = import_files.parquet_dataset(ctx, identifier, location)
    _refuse_if_present(ctx, identifier, location, "_delta_log", "a Delta log")
    table = import_files.create_over_files(ctx, identifier, existing, location)
    try:
        version = transaction.sync_delta(ctx.mirror(table), table)
    except BaseException:
        import_files.drop_created(ctx, identifier, location)
        _delete_folder(ctx, join_uri(location, "_delta_log"))
        raise
    _checkpoint(ctx, table)
    return _report(identifier, kind, location, ctx.load(identifier), version, len(existing.files))


def source_kind(ctx: TableContext, source: str | None) -> tuple[str, str | None]:
    """(ICEBERG | DELTA | PARQUET, the source's URI: a metadata JSON for Iceberg, a root folder otherwise)."""
    if source is None:
        return ICEBERG, None
    uri = normalize_uri(source)
    if uri.endswith(".metadata.json"):
        return ICEBERG, uri
    if _exists(ctx, join_uri(uri, "_delta_log")):
        return DELTA, uri
    if metadata := _hadoop_metadata(ctx, uri):
        return ICEBERG, metadata
    return PARQUET, uri


def _exists(ctx: TableContext, uri: str) -> bool:
    """Whether the folder `uri` holds anything. Listed, not HEAD-requested: some object stores answer a HEAD of a
    missing key with 403 instead of 404 (SeaweedFS with its Iceberg REST catalog's credentials)."""
    from pyarrow.fs import FileSelector

    fs, path = ctx.storage.filesystem(uri)
    try:
        return bool(fs.get_file_info(FileSelector(path, allow_not_found=True)))
    except NotADirectoryError:
        return True


def _hadoop_metadata(ctx: TableContext, root: str) -> str | None:
    """The current metadata JSON of a Hadoop-catalog table folder (`metadata/version-hint.text` -> `vN.metadata.json`),
    else the newest `*.metadata.json` under `metadata/`; None when there is none."""
    from pyarrow.fs import FileSelector

    fs, path = ctx.storage.filesystem(join_uri(root, "metadata"))
    try:
        files = [i for i in fs.get_file_info(FileSelector(path)) if i.is_file]
    except (FileNotFoundError, OSError):
        return None
    names = {i.base_name for i in files}
    if "version-hint.text" in names:
        with fs.open_input_stream(join_uri(path, "version-hint.text")) as f:
            hinted = f"v{f.read().decode().strip()}.metadata.json"
        if hinted in names:
            return join_uri(root, "metadata", hinted)
    newest = newest_metadata_json(files)
    return None if newest is None else join_uri(root, "metadata", newest.base_name)


# ---------------------------------------------------------------- an Iceberg table


def _import_iceberg(ctx: TableContext, identifier: str, metadata_location: str | None, apply_deletes: bool, spark) -> dict[str, Any]:
    if metadata_location is None:
        table, registered = ctx.load(identifier), False
        source = table.metadata_location
    else:
        _refuse_if_exists(ctx, identifier)
        table, registered, source = StaticTable.from_metadata(metadata_location, properties=ctx.storage.iceberg_properties()), True, metadata_location
    location = normalize_uri(table.location())
    _refuse_if_present(ctx, identifier, location, "_delta_log", "a Delta log")
    _check_iceberg(identifier, table, location, apply_deletes)
    if registered:
        from ..table.catalog import ensure_namespace

        ensure_namespace(ctx.catalog, identifier.rsplit(".", 1)[0])
        table = ctx.catalog.register_table(identifier, metadata_location)
    try:
        applied = None
        if apply_deletes and table_files(table).deletes:
            # One snapshot without delete files, committed and mirrored by the pipeline (which creates the Delta log).
            applied = apply(ctx, identifier, spark)
            table = ctx.load(identifier)
            version = transaction.sync_delta(ctx.mirror(table), table)
        else:
            version = ctx.mirror(table).start_at(table)
    except BaseException:
        _delete_folder(ctx, join_uri(location, "_delta_log"))
        if registered:
            ctx.catalog.drop_table(identifier)  # the catalog entry only: the source's files stay
        raise
    _checkpoint(ctx, table)
    report = _report(identifier, ICEBERG, source, ctx.load(identifier), version, None)
    report.update(registered=registered, apply_deletes=applied)
    return report


def _check_iceberg(identifier: str, table: Table, location: str, apply_deletes: bool) -> None:
    """Raise ImportRefused, nothing changed, unless the table's live state has an exact Delta form (after applying deletes
    when asked)."""
    snapshot = table.current_snapshot()
    reasons = []
    files = table_files(table) if snapshot is not None else None
    if files is not None and files.deletes and not apply_deletes:
        reasons.append(
            f"{describe_delete_files(files)} are live (row-level deletes that Delta cannot express): import with apply_deletes=True "
            "(`lakehouse import --apply-deletes`), which first rewrites the affected data files with the deletes applied, as "
            "`lakehouse repair --apply-deletes` does"
        )
    specs = table.specs()
    if files is not None and (other := sorted({e.data_file.spec_id for e in files.data} - {table.spec().spec_id})):
        reasons.append(
            f"live data files were written under partition spec(s) {other}, not the current spec {table.spec().spec_id} "
            f"({specs[table.spec().spec_id]}): Delta's partition columns are fixed. Rewrite them under the current spec first "
            "(e.g. Java Iceberg's `CALL <catalog>.system.rewrite_data_files`)"
        )
    try:
        check_delta_partitioning(identifier, table.schema(), table.spec())
        delta_schema(table.schema())
    except Exception as e:  # noqa: BLE001 - the reason is the message
        reasons.append(str(e))
    outside = []
    for entry in files.data if files is not None else []:
        try:
            relative_to(location, entry.data_file.file_path)
        except ValueError:
            outside.append(entry.data_file.file_path)
    if outside:
        reasons.append(
            f"{len(outside)} data file(s) lie outside the table location {location} (e.g. {outside[0]}); a Delta log references "
            "only files under its root. Rewrite them into the table first (e.g. a compaction by the writing engine)"
        )
    if reasons:
        raise ImportRefused(f"Table {identifier} cannot be imported: " + "; ".join(reasons) + ". Nothing was changed.")


# ---------------------------------------------------------------- shared


def _refuse_if_exists(ctx: TableContext, identifier: str) -> None:
    try:
        ctx.catalog.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        return
    raise ImportRefused(
        f"Table {identifier} already exists in catalog {ctx.catalog.name!r}. Nothing was imported. Import under another name, or, if "
        f"it is the Iceberg table you mean, run `lakehouse import {identifier}` without a source to manage it in place."
    )


def _refuse_if_present(ctx: TableContext, identifier: str, location: str, folder: str, what: str) -> None:
    if _exists(ctx, join_uri(location, folder)):
        raise ImportRefused(
            f"Table {identifier}: {location} already holds {what} ({folder}/): it was imported or written by this project before, or "
            f"another tool left it. Nothing was imported. If the table is managed already, use it as it is (`lakehouse verify {identifier}`)."
        )


def _delete_folder(ctx: TableContext, uri: str) -> None:
    fs, path = ctx.storage.filesystem(uri)
    try:
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


def _checkpoint(ctx: TableContext, table: Table) -> None:
    """A Delta checkpoint of the log the import created: its first commit lists every imported file, and every later
    load of the log (each write, each check) would replay that JSON; delta-rs reads a checkpoint's Parquet instead
    (at 100,000 files, about 0.2 s instead of 0.5-0.9 s)."""
    try:
        if (delta := ctx.mirror(table).load()) is not None:
            delta.create_checkpoint()
    except Exception as e:  # noqa: BLE001 - the import is committed; the log's checkpoint interval writes one later
        log.warning("Table %s: imported, but its Delta checkpoint was not written: %s", ".".join(table.name()), e)


def _report(identifier: str, kind: str, source: str | None, table: Table, delta_version: int | None, files: int | None) -> dict[str, Any]:
    snapshot = table.current_snapshot()
    return {
        "table": identifier,
        "source_format": kind,
        "source": source,
        "location": table.location(),
        "iceberg_snapshot_id": snapshot.snapshot_id if snapshot else None,
        "delta_version": delta_version,
        "files": files if files is not None else _live_files(table),
        "rows": int(snapshot.summary.get("total-records", 0)) if snapshot and snapshot.summary else None,
    }


def _live_files(table: Table) -> int:
    """From the snapshot summary when its writer kept the total (pyiceberg and Java do), else from the manifests."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0
    total = snapshot.summary.additional_properties.get("total-data-files") if snapshot.summary else None
    return int(total) if total is not None else len(table_files(table).data)

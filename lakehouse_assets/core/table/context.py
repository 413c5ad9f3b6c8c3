"""`TableContext`: what an operation on a table needs from the lakehouse the table belongs to.

The commit pipeline (core/write/transaction.py), maintenance and repair work on one table at a time and
need four things: the catalog to load it from, the storage its files live on, the Delta settings of its
mirror, and the warehouse. The `Lakehouse` facade builds one context and hands it down, so those modules
receive what they need and never call back into the facade.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from ..errors import TableNotFound
from ..formats.delta import glue as delta_glue
from ..formats.delta.committer import DeltaMirror
from ..formats.delta.snapshot_commit import ChangeData
from ..io.storage import StorageConfig, normalize_uri
from . import tables
from .catalog import missing_table_hint


@dataclass(frozen=True)
class TableContext:
    catalog: Catalog
    warehouse: str  # the stored form of the warehouse URI
    storage: StorageConfig
    delta_configuration: Mapping[str, str] = field(default_factory=dict)  # new Delta tables' configuration
    delta_glue: delta_glue.GlueDeltaRegistration | None = None  # register every table's Delta side in Glue
    change_data: ChangeData | None = None  # writes the Delta change data files of a rewrite (core/write/change_data.py)

    def load(self, identifier: str) -> Table:
        try:
            return self.catalog.load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise TableNotFound(
                f"Table {identifier} does not exist in catalog {self.catalog.name!r} (warehouse {self.warehouse})."
                f"{missing_table_hint(self.catalog, identifier)} Existing tables: {', '.join(self.table_names()) or 'none'}."
            ) from None

    def table_names(self) -> list[str]:
        names = []
        for ns in self.catalog.list_namespaces():
            names += [".".join(t) for t in self.catalog.list_tables(ns)]
        return sorted(names)

    def mirror(self, table: Table) -> DeltaMirror:
        glue = delta_glue.entry_for(table, self.delta_glue, self.catalog)
        return DeltaMirror(normalize_uri(table.location()), self.storage, dict(self.delta_configuration), glue=glue, change_data=self.change_data)

    def delta_enabled(self, table: Table) -> bool:
        return tables.delta_enabled(table)

    def delta_lag_of(self, table: Table, delta=None) -> int | None:
        """Iceberg snapshots the Delta log has not mirrored yet, from metadata only (no manifests, no file lists).

        0 when up to date (or Delta is off); None when the Delta log is missing or unreadable, or the
        snapshots it lags behind were expired: `repair` is needed either way. `delta`: the table's Delta
        table when the caller already loaded it."""
        if not self.delta_enabled(table):
            return 0
        mirror = self.mirror(table)
        kept = delta is None  # the log this process follows (a sensor asking every minute reads the commits since)
        if kept:
            try:
                delta = mirror.load_current(table)
            except Exception:  # noqa: BLE001 - an unreadable log is what repair is for
                return None
        try:
            snapshot = table.current_snapshot()
            if delta is None or snapshot is None:
                return None if delta is None else 0
            pending = mirror.pending_snapshots(table, snapshot, mirror.mirrored_sequence_number(delta))
            return None if pending is None else len(pending)
        finally:
            if kept and delta is not None:
                mirror.keep(table, delta)

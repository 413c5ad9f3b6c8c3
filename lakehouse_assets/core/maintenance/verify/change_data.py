"""`verify --deep` for the Delta change data feed: the cdc files of the version that mirrors the current snapshot
hold exactly the rows that snapshot changed (when the files it replaced are still there: snapshot expiry may have
deleted them with its parent).

DuckDB reads, on this machine, the files the snapshot removed and added and compares their multiset difference
(the rows `Lakehouse.changes` returns) with the cdc files' rows, signed by change type (a delete or pre-image
removes a row, an insert or post-image adds one): row counts and an order-independent hash, streaming
aggregates only. The cdc files and the data files name columns alike (physical names under column mapping), so
they are compared by the cdc files' own columns. Every cdc file that version references must exist.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.table import Table

from ...formats import history
from ...formats.deletes import has_delete_files, table_files
from ...formats.delta.committer import DeltaMirror
from ...formats.delta.log_commit import cdc_actions
from ...formats.delta.vector_mirror import named_data_files
from ...formats.position_deletes import read_positions, referenced_data_file
from ...formats.snapshot_changes import snapshot_change
from ...io.storage import join_uri

_REMOVES_ROW = "('delete', 'update_preimage')"
_SIGN = '"__lakehouse_sign"'  # the sign column: named apart from any table column (one may be called `s`)


def change_data_differences(table: Table, mirror: DeltaMirror, delta) -> tuple[dict[str, Any], list[str]]:
    """(what was checked, differences) for the Delta version of the current snapshot; nothing when it has no cdc files."""
    snap = table.current_snapshot()
    version = history.delta_version_of(delta, snap.snapshot_id) if snap is not None else None
    cdc = (cdc_actions(mirror.storage, mirror.root_uri, version) or []) if version is not None else []
    if not cdc:
        return {}, []
    uris = [join_uri(mirror.root_uri, c["path"]) for c in cdc]
    missing = [c["path"] for c, u in zip(cdc, uris) if not _exists(mirror, u)]
    if missing:
        return {"version": version, "cdc_files": len(cdc)}, [f"Delta version {version} references {len(missing)} missing change data file(s), e.g. {missing[:3]}"]
    change = snapshot_change(table, snap)
    if change.removes and not all(_exists(mirror, f.file_path) for f in change.removes):
        # Snapshot expiry deleted the files the snapshot replaced (its parent is past retention): nothing to recompute from.
        return {"version": version, "cdc_files": len(cdc), "skipped": "the files this snapshot replaced were expired"}, []
    from ...read import duckdb_readers

    con = duckdb_readers.connect(mirror.storage)
    cdc_src = _parquet(uris)
    columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {cdc_src}").fetchall() if r[0] != "_change_type"]
    text = ", ".join(f'"{c}"::VARCHAR' for c in columns)
    feed = con.execute(
        f"SELECT count(*), coalesce(sum(hash({text})::HUGEINT * CASE WHEN _change_type IN {_REMOVES_ROW} THEN -1 ELSE 1 END), 0) FROM {cdc_src}"
    ).fetchone()
    removed, added = [f.file_path for f in change.removes], [f.file_path for f in change.adds]
    parent = history.snapshots_by_id(table).get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    deletes = has_delete_files(table, snap) or (parent is not None and has_delete_files(table, parent))
    if deletes:
        # Merge-on-read: rows hidden by position deletes are not rows; a data file whose deletes changed is read on both sides.
        touched = [u for u in named_data_files(mirror.storage, change.delete_files_added + change.delete_files_removed) if u not in removed + added]
        removed, added = removed + touched, added + touched
        con.register("__before_deleted", _deleted(table, mirror.storage, parent, removed))
        con.register("__after_deleted", _deleted(table, mirror.storage, snap, added))
    sides = [_side(con, removed, columns, -1, "__before_deleted" if deletes else None) if removed else None,
             _side(con, added, columns, 1, "__after_deleted" if deletes else None) if added else None]
    both = " UNION ALL ".join(s for s in sides if s)
    names = ", ".join(f'"{c}"' for c in columns)
    truth = con.execute(
        f"WITH d AS ({both}), n AS (SELECT {names}, sum({_SIGN}) AS net FROM d GROUP BY ALL HAVING sum({_SIGN}) <> 0) "
        f"SELECT coalesce(sum(abs(net)), 0), coalesce(sum(hash({names})::HUGEINT * net), 0) FROM n"
    ).fetchone()
    checked = {"version": version, "cdc_files": len(cdc), "cdc_rows": feed[0]}
    if tuple(feed) != tuple(truth):
        return checked, [
            f"the change data files of Delta version {version} hold {feed[0]} row(s) where snapshot {snap.snapshot_id} changed {truth[0]} "
            "(read by DuckDB), or other rows: Delta's change feed disagrees with Lakehouse.changes"
        ]
    return checked, []


def _exists(mirror: DeltaMirror, uri: str) -> bool:
    fs, path = mirror.storage.filesystem(uri)
    return fs.get_file_info(path).type == pafs.FileType.File


def _side(con, uris: list[str], columns: list[str], sign: int, deleted: str | None = None) -> str:
    """The rows of `uris` as text columns `columns`, each row signed: files written before a column was added lack
    it, and their rows hold NULL there (as every reader of the table sees them). `deleted`: a (path, pos) relation of
    the rows position deletes hide, left out."""
    src = _parquet(uris)
    present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    cols = ", ".join(f'"{c}"::VARCHAR AS "{c}"' if c in present else f'NULL::VARCHAR AS "{c}"' for c in columns)
    if deleted is None:
        return f"SELECT {cols}, {sign} AS {_SIGN} FROM {src}"
    src = src[:-1] + ", filename = true, file_row_number = true)"
    return f"SELECT {cols}, {sign} AS {_SIGN} FROM {src} t WHERE NOT EXISTS (SELECT 1 FROM {deleted} d WHERE d.path = t.filename AND d.pos = t.file_row_number)"


def _deleted(table: Table, storage, snap, uris: list[str]) -> pa.Table:
    """(path as DuckDB names the file, position) of the rows the position deletes live at `snap` hide in `uris`."""
    chunks = [pa.table({"path": pa.array([], pa.string()), "pos": pa.array([], pa.int64())})]
    live = table_files(table, snap).position_deletes if snap is not None else []
    for uri in uris:
        applying = [e.data_file for e in live if referenced_data_file(e.data_file) in (uri, None)]
        positions = read_positions(storage, applying, uri) if applying else pa.array([], pa.int64())
        chunks.append(pa.table({"path": pa.array([_local(uri)] * len(positions), pa.string()), "pos": positions}))
    return pa.concat_tables(chunks)


def _local(uri: str) -> str:
    """A local file as DuckDB opens and names it (`file:/x`, as Java Iceberg spells paths, and `file:///x` alike)."""
    return urlparse(uri).path if uri.startswith("file:") else uri


def _parquet(uris: list[str]) -> str:
    paths = ", ".join(f"'{_local(u)}'" for u in uris)
    return f"read_parquet([{paths}], union_by_name = true)"

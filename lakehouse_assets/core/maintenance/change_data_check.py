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

import pyarrow.fs as pafs
from pyiceberg.table import Table

from ..formats import history
from ..formats.delta_cdc_commit import cdc_actions
from ..formats.delta_committer import DeltaMirror
from ..formats.snapshot_changes import snapshot_change
from ..io.storage import join_uri

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
    from ..read import duckdb_readers

    con = duckdb_readers.connect(mirror.storage)
    cdc_src = _parquet(uris)
    columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {cdc_src}").fetchall() if r[0] != "_change_type"]
    text = ", ".join(f'"{c}"::VARCHAR' for c in columns)
    feed = con.execute(
        f"SELECT count(*), coalesce(sum(hash({text})::HUGEINT * CASE WHEN _change_type IN {_REMOVES_ROW} THEN -1 ELSE 1 END), 0) FROM {cdc_src}"
    ).fetchone()
    sides = [_side(con, [f.file_path for f in change.removes], columns, -1) if change.removes else None,
             _side(con, [f.file_path for f in change.adds], columns, 1) if change.adds else None]
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


def _side(con, uris: list[str], columns: list[str], sign: int) -> str:
    """The rows of `uris` as text columns `columns`, each row signed: files written before a column was added lack
    it, and their rows hold NULL there (as every reader of the table sees them)."""
    src = _parquet(uris)
    present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    cols = ", ".join(f'"{c}"::VARCHAR AS "{c}"' if c in present else f'NULL::VARCHAR AS "{c}"' for c in columns)
    return f"SELECT {cols}, {sign} AS {_SIGN} FROM {src}"


def _parquet(uris: list[str]) -> str:
    paths = ", ".join(f"'{u[len('file://'):] if u.startswith('file://') else u}'" for u in uris)
    return f"read_parquet([{paths}], union_by_name = true)"

"""What a downstream asset asks of an upstream table: its type (from the input's annotation) and its input metadata.

The type picks the reader, as Dagster's database IO managers pick a type handler: a Spark DataFrame (the
default) is read by Spark; a pyarrow Table, a pandas DataFrame, a Polars DataFrame or LazyFrame is read by
pyiceberg and pyarrow without starting a Spark job (core/read/arrow_reader.py).

Input metadata (`AssetIn(metadata={...})`):

    columns      list of column names to read (a projection)
    row_filter   a predicate, e.g. "region = 'eu' and amount > 10" (pyiceberg's syntax): prunes files by
                 partition and statistics, then filters the rows
    snapshot_id  an Iceberg snapshot id: the table as of that snapshot
    as_of        a timestamp (datetime or ISO 8601 text): the table as of that time
    as_of_run    a Dagster run id: the table as that run left it
    changes      True: only the rows changed since this asset last consumed the table, once (incremental.py)
"""

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ..core.errors import SpecError

KINDS = ("spark", "arrow", "pandas", "polars", "polars_lazy")
TIME_TRAVEL_KEYS = ("snapshot_id", "as_of", "as_of_run")


def input_kind(typing_type: Any) -> str:
    """Which reader an input annotated with `typing_type` gets ("spark" for a Spark DataFrame, no annotation or Any)."""
    module = getattr(typing_type, "__module__", "") or ""
    name = getattr(typing_type, "__name__", "")
    if module.startswith("pyarrow") and name == "Table":
        return "arrow"
    if module.startswith("pandas") and name == "DataFrame":
        return "pandas"
    if module.startswith("polars") and name == "DataFrame":
        return "polars"
    if module.startswith("polars") and name == "LazyFrame":
        return "polars_lazy"
    return "spark"


@dataclass(frozen=True)
class InputRequest:
    columns: Optional[Sequence[str]] = None
    row_filter: Optional[str] = None
    snapshot_id: Optional[int] = None
    as_of: Optional[dt.datetime] = None
    as_of_run: Optional[str] = None
    changes: bool = False

    @classmethod
    def from_metadata(cls, asset: str, metadata: Mapping[str, Any]) -> "InputRequest":
        given = [k for k in TIME_TRAVEL_KEYS if metadata.get(k) is not None]
        if len(given) > 1:
            raise SpecError(f"Input {asset}: give at most one of {', '.join(TIME_TRAVEL_KEYS)} in its metadata, not {given}.")
        columns = metadata.get("columns")
        if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
            raise SpecError(f"Input {asset}: 'columns' must be a list of column names, e.g. ['id', 'amount'], not {columns!r}.")
        as_of = metadata.get("as_of")
        if isinstance(as_of, str):
            try:
                as_of = dt.datetime.fromisoformat(as_of)
            except ValueError:
                raise SpecError(f"Input {asset}: 'as_of' must be a datetime or ISO 8601 text such as '2024-05-01T12:00:00+00:00', not {as_of!r}.") from None
        if as_of is not None and as_of.tzinfo is None:
            as_of = as_of.replace(tzinfo=dt.timezone.utc)
        snapshot_id = metadata.get("snapshot_id")
        changes = metadata.get("changes", False)
        if not isinstance(changes, bool):
            raise SpecError(f"Input {asset}: 'changes' must be True or False, not {changes!r}.")
        if changes and (given or metadata.get("row_filter") is not None):
            raise SpecError(
                f"Input {asset}: 'changes' reads the rows changed since the last run and cannot be combined with "
                f"{[*given, *(['row_filter'] if metadata.get('row_filter') is not None else [])]}; filter the changes in the asset."
            )
        return cls(
            columns=list(columns) if columns is not None else None,
            row_filter=metadata.get("row_filter"),
            snapshot_id=int(snapshot_id) if snapshot_id is not None else None,
            as_of=as_of,
            as_of_run=metadata.get("as_of_run"),
            changes=changes,
        )


def from_arrow(table, kind: str):
    """The pyarrow Table as the type the input asked for."""
    if kind == "arrow":
        return table
    if kind == "pandas":
        return table.to_pandas()
    import polars as pl

    frame = pl.from_arrow(table)
    return frame.lazy() if kind == "polars_lazy" else frame

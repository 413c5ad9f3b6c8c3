"""Incremental inputs: a downstream asset reads only the upstream rows changed since it last consumed them, once.

An input with `AssetIn(metadata={"changes": True})` receives `Lakehouse.changes(upstream, after, through)`:
`after` is the upstream snapshot the downstream table's data already includes (recorded in the downstream
table's own commits, `lakehouse.consumed.<upstream>`), `through` the upstream's current snapshot. The first run
reads the upstream as it is at `through`, every row an insert (`Lakehouse.rows_as_changes`). When the
asset's output is written, `through` is recorded in that same Iceberg commit (and its Delta version), so:

* a run that fails before its write commits records nothing: the next run reads the same range again;
* a retried step writes with the same idempotency key as the first attempt: a change is never written twice;
* the next successful run starts right after `through`.

Between loading the input and writing the output (one step, one process) the range waits here, keyed by the
run and the downstream table.
"""

from __future__ import annotations

from typing import Any

from dagster import MetadataValue

from ..core.errors import SpecError
from ..core.properties import SummaryKeys

_PENDING: dict[tuple[str, str], dict[str, tuple[int | None, int | None]]] = {}  # (run id, downstream) -> upstream -> (after, through)


def downstream_asset_key(context):
    """The asset whose step loads this input (one asset per op: multi-assets cannot consume changes)."""
    keys = sorted(context.step_context.get_output_asset_keys(), key=lambda k: k.path)
    if len(keys) != 1:
        raise SpecError(
            f"Input {context.asset_key.to_user_string()}: 'changes' inputs need an asset of its own (one output); this op produces "
            f"{[k.to_user_string() for k in keys]}. Split it into one asset per table."
        )
    return keys[0]


def load_changes(lh, spark, run_id: str, downstream: str, upstream: str):
    """The upstream's changes the downstream table does not include yet, remembered for the output's write."""
    after = lh.consumed_snapshot(downstream, upstream)
    current = lh.load(upstream).current_snapshot()
    through = current.snapshot_id if current is not None else after
    _PENDING.setdefault((run_id, downstream), {})[upstream] = (after, through)
    if after is None and through is not None:
        # First run: the table as it is now (its early history may be expired), every row an insert.
        return lh.rows_as_changes(upstream, through, spark=spark)
    return lh.changes(upstream, after, through, spark=spark)


def consumed(run_id: str, downstream: str) -> dict[str, tuple[int | None, int | None]]:
    """What the step's 'changes' inputs read (upstream -> (after, through)), forgotten once handed out."""
    return _PENDING.pop((run_id, downstream), {})


def snapshot_properties(ranges: dict[str, tuple[int | None, int | None]]) -> dict[str, str]:
    return {SummaryKeys.CONSUMED_PREFIX + up: str(through) for up, (_, through) in ranges.items() if through is not None}


def metadata(ranges: dict[str, tuple[int | None, int | None]]) -> dict[str, Any]:
    """`lakehouse/consumed_snapshots` for the materialization: per upstream table, the snapshots read after and through."""
    return {"lakehouse/consumed_snapshots": MetadataValue.json({up: {"after": a, "through": t} for up, (a, t) in sorted(ranges.items())})}

"""Repair: bring a table's Delta log up to its Iceberg history, and the optional fixes that make that possible.

Mirroring is idempotent: every Iceberg snapshot Delta has not seen becomes one Delta version (the commit
pipeline's `sync_delta`). Some snapshots have no exact Delta equivalent yet; the options fix them first:
other engines' delete files applied (`apply_deletes.py`), other engines' misnamed files of a column-mapped
table rewritten (`rewrite_files.py`), Delta versions another engine wrote adopted into Iceberg or reverted
(core/formats/delta/foreign_versions.py, core/formats/delta/adoption.py). Without those options, foreign Delta
versions are never mirrored over: the report says which and why.
"""

from __future__ import annotations

from typing import Any

from ..formats.delta import adoption as delta_adoption
from ..formats.delta import foreign_versions as foreign_delta
from ..formats.delta import glue as delta_glue
from ..table.context import TableContext
from ..write import transaction
from ..write.adoption import adoption_rewrite
from .apply_deletes import apply_deletes as apply
from .rewrite_files import rewrite_misnamed_files


def repair_table(
    ctx: TableContext, identifier: str, *, apply_deletes: bool = False, adopt_delta: bool = False, revert_delta: bool = False, rewrite_files: bool = False, spark=None
) -> dict[str, Any]:
    """`Lakehouse.repair` (see its docstring): the report of what was done."""
    if adopt_delta and revert_delta:
        raise ValueError(f"Table {identifier}: repair takes adopt_delta or revert_delta, not both.")
    out: dict[str, Any] = {"table": identifier}
    if apply_deletes:
        out["apply_deletes"] = apply(ctx, identifier, spark)
    if rewrite_files:
        out["rewrite_files"] = rewrite_misnamed_files(ctx, identifier, spark)
    table = ctx.load(identifier)
    if not ctx.delta_enabled(table):
        return {**out, "delta_version": None, "repaired": False, "reason": "Delta is not enabled for this table"}
    mirror = ctx.mirror(table)
    before = mirror.load()
    before_version = before.version() if before is not None else None
    if before is not None and (adopt_delta or revert_delta) and foreign_delta.foreign_versions(before):
        if adopt_delta:
            out["adopt_delta"] = delta_adoption.adopt(identifier, table, mirror, adoption_rewrite(ctx.storage, identifier, spark))
            table = ctx.load(identifier)
        else:
            out["revert_delta"] = foreign_delta.revert(identifier, mirror.load())
        version = transaction.sync_delta(mirror, table)
        return {**out, "delta_version_before": before_version, "delta_version": version, "repaired": version != before_version}
    if before is not None and (foreign := foreign_delta.foreign_versions(before)):
        # Mirroring on top would hide the divergence: say which versions and how to get out.
        return {
            **out,
            "delta_version_before": before_version,
            "delta_version": before_version,
            "repaired": False,
            "reason": foreign_delta.explain(identifier, foreign),
            "delta_foreign_versions": [v.to_dict() for v in foreign],
        }
    if mirror.glue is not None:
        delta_glue.forget(mirror.glue)  # ask Glue itself: the entry may have been deleted or edited since this process synced it
    version = transaction.sync_delta(mirror, table)
    glue = _glue_report(mirror)
    repaired = version != before_version or glue.get("delta_glue_action") in ("created", "updated")
    return {**out, "delta_version_before": before_version, "delta_version": version, **glue, "repaired": repaired}


def _glue_report(mirror) -> dict[str, Any]:
    """What the sync did to the Glue entry of the Delta side, and why it failed if it did."""
    if mirror.glue is None:
        return {}
    report = {"delta_glue_table": mirror.glue.qualified, "delta_glue_action": mirror.glue_action}
    return {**report, "reason": mirror.glue_warning} if mirror.glue_warning else report

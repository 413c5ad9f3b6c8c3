"""The formats-agree check while writers commit: a commit in flight is not a divergence.

A writer of this project commits its Iceberg snapshot, then its Delta version, holding the table's commit lock
(core/table/commit_lock.py). A check reading the table between the two sees Iceberg a snapshot ahead of Delta (a
file live only in Iceberg, the row counts apart): what every commit passes through for a few milliseconds, and what a
backfill's checks, each run's after its own write, meet while the other runs commit. So a check that finds a
difference looks again once no writer of the project is committing: it queues on the commit lock behind the commits
ahead of it and checks again while holding it, so that neither log moves while it reads them. What it finds then is
the table's state, and a real difference (a writer killed between its two commits, another engine's change) is
reported as found.

On a catalog without the lock (REST, Glue) the check looks again after the time a commit takes, a few times, and
reports what it finds on the last look.
"""

from __future__ import annotations

import time
from typing import Any

from ...table import commit_lock
from ...table.context import TableContext
from .changes import VerifiedPair
from .formats_agree import verify_table

LOOKS_WITHOUT_LOCK = (0.5, 1.0, 2.0)  # seconds before each look again where the catalog has no commit lock


def verify_settled(ctx: TableContext, identifier: str, *, deep: bool = False, since: VerifiedPair | None = None) -> dict[str, Any]:
    """`verify_table` of the table as it is when no writer of this project is halfway through a commit."""
    report = _verify(ctx, identifier, deep, since)
    if report["agree"]:
        return report
    with commit_lock.holding(ctx.catalog, identifier) as locked:
        if locked:
            return _verify(ctx, identifier, deep, since)
    for wait in LOOKS_WITHOUT_LOCK:
        time.sleep(wait)
        report = _verify(ctx, identifier, deep, since)
        if report["agree"]:
            break
    return report


def _verify(ctx: TableContext, identifier: str, deep: bool, since: VerifiedPair | None) -> dict[str, Any]:
    table = ctx.load(identifier)
    return verify_table(table, ctx.mirror(table) if ctx.delta_enabled(table) else None, deep=deep, since=since)

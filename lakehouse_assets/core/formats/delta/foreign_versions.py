"""Delta versions the mirror did not write: find them, name them, and refuse to build on top of them.

Other engines (a Databricks job, a delta-rs script, a DuckDB or Polars append) can write the Delta side of a
table. Iceberg is the source of truth, so a Delta version that did not come from the mirror is a divergence:
mirroring the next Iceberg snapshot on top of it would hide it and let it grow with every write. Every version
the mirror writes carries `lakehouse.*` keys in its commitInfo (the Iceberg snapshot id on data versions,
`lakehouse.operation` on schema-change and repair versions) and version 0 is the mirror's own creation; any
other version is foreign.

Detection walks the log from the newest version back to the newest version of ours, so its cost grows with the
number of versions written since the last mirrored one, not with the table's history (checkpoints are not
versions and never show up in `DeltaTable.history`).

The policy is the table property `lakehouse.delta.foreign-commits` (`refuse`, the default, or a resource-wide
default passed by the caller). Under `refuse`, a project write fails before writing anything and the
formats-agree check fails with the same explanation. The two ways out: `revert` (here) and adoption into
Iceberg (core/formats/delta/adoption.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable

from ...errors import ForeignDeltaCommits, LakehouseError
from ...memo import ByImmutableFiles
from ...properties import DeltaCommitKeys, Operation, SummaryKeys, TableProperties

REVERTED_VERSIONS = "lakehouse.delta.reverted-versions"

REFUSE = "refuse"
ADOPT = "adopt"
POLICIES = (REFUSE, ADOPT)
_OURS = (DeltaCommitKeys.ICEBERG_SNAPSHOT_ID, SummaryKeys.OPERATION, DeltaCommitKeys.REPLACED_FOR)


@dataclass(frozen=True)
class ForeignVersion:
    version: int
    operation: str
    engine: str
    files_added: int | None
    files_removed: int | None
    timestamp_ms: int | None

    def describe(self) -> str:
        added = "?" if self.files_added is None else self.files_added
        removed = "?" if self.files_removed is None else self.files_removed
        return f"version {self.version} ({self.operation} by {self.engine}: {added} file(s) added, {removed} removed)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operation": self.operation,
            "engine": self.engine,
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "timestamp_ms": self.timestamp_ms,
        }


def is_ours(commit: dict[str, Any]) -> bool:
    """A commit the mirror wrote: it carries one of our commitInfo keys, or it is the log's creation."""
    return commit.get("version") == 0 or any(k in commit for k in _OURS)


# A Delta log's commits up to a version never change (each is put once), so which versions are foreign is known
# from the table's id and its version: a write checks the log before its job, before its Iceberg commit and before
# its Delta commit, and reads the log's history again only when a version landed in between.
_FOREIGN = ByImmutableFiles(max_weight=1024)


def foreign_versions(delta: DeltaTable) -> list[ForeignVersion]:
    """Versions newer than the newest version of ours that the mirror did not write, oldest first."""
    key = (delta.table_uri, delta.metadata().id, delta.version())
    return list(_FOREIGN.get(key, lambda: tuple(_read_foreign_versions(delta))))


def _read_foreign_versions(delta: DeltaTable) -> list[ForeignVersion]:
    limit = 2  # the newest version is the mirror's own, as a rule
    while True:
        commits = delta.history(limit)
        newest_first = sorted(commits, key=lambda c: c["version"], reverse=True)
        foreign: list[ForeignVersion] = []
        for c in newest_first:
            if is_ours(c):
                return list(reversed(foreign))
            foreign.append(_foreign(c))
        if len(commits) < limit:  # history ran out (log cleaned up to here): everything seen is foreign
            return list(reversed(foreign))
        limit *= 4


def _foreign(c: dict[str, Any]) -> ForeignVersion:
    metrics = c.get("operationMetrics") or {}

    def metric(*names: str) -> int | None:
        for n in names:
            if n in metrics and metrics[n] is not None:
                return int(metrics[n])
        return None

    engine = c.get("engineInfo") or c.get("clientVersion") or "an unknown engine"
    return ForeignVersion(
        version=int(c["version"]),
        operation=str(c.get("operation") or "unknown operation"),
        engine=str(engine),
        files_added=metric("num_added_files", "numAddedFiles", "numFiles", "numOutputFiles"),
        files_removed=metric("num_removed_files", "numRemovedFiles"),
        timestamp_ms=c.get("timestamp"),
    )


def policy_of(properties: dict[str, str], default: str = REFUSE) -> str:
    value = (properties.get(TableProperties.DELTA_FOREIGN_COMMITS) or default).strip().lower()
    if value not in POLICIES:
        raise LakehouseError(
            f"Table property {TableProperties.DELTA_FOREIGN_COMMITS}={value!r} is not a policy: expected one of {', '.join(POLICIES)}. "
            f"Set it with ALTER TABLE ... SET TBLPROPERTIES or pyiceberg's `transaction().set_properties(...)`."
        )
    return value


def explain(identifier: str, versions: list[ForeignVersion]) -> str:
    """Why the table is refused, which versions, and the two ways out."""
    listed = "; ".join(v.describe() for v in versions)
    return (
        f"Table {identifier}: the Delta log holds {len(versions)} version(s) the Iceberg mirror did not write ({listed}). "
        f"Iceberg is the source of truth, so mirroring on top of them would hide the divergence. Ways out: "
        f"`lakehouse repair {identifier} --revert-delta` undoes them with a new Delta version (their rows leave Delta), or "
        f"`lakehouse repair {identifier} --adopt-delta` brings them into Iceberg as one snapshot (set the table property "
        f"{TableProperties.DELTA_FOREIGN_COMMITS}=adopt to do that at every write). Nothing was written."
    )


def refuse_if_foreign(identifier: str, delta: DeltaTable | None, policy: str) -> list[ForeignVersion]:
    """Raise ForeignDeltaCommits under `refuse` when there are foreign versions; return them otherwise."""
    if delta is None:
        return []
    versions = foreign_versions(delta)
    if versions and policy == REFUSE:
        raise ForeignDeltaCommits(explain(identifier, versions), versions)
    return versions


def refuse_to_mirror_over(identifier: str, delta: DeltaTable) -> None:
    """Before a mirror step, on the log as just brought up to date: a foreign version that landed since the write
    checked (a race) stops it. Raised as MirrorRefused, so the Iceberg write stands, Delta lags, and the warning
    names the versions."""
    from ...errors import MirrorRefused

    if versions := foreign_versions(delta):
        raise MirrorRefused(explain(identifier, versions).replace("Nothing was written.", "Delta was left as it was."))


# ---------------------------------------------------------------- the ways out


def revert(identifier: str, delta: DeltaTable) -> dict[str, Any]:
    """Undo the foreign versions with one new Delta version: their adds removed, their removes restored (`delta`: the
    log as the mirror loads it, whose history labels every version exactly).

    delta-rs's `restore` to the version before them writes exactly that commit (the Iceberg side never saw them);
    the commitInfo marks it as ours so it is not foreign itself.
    """
    from deltalake.transaction import CommitProperties

    versions = foreign_versions(delta)
    if not versions:
        return {"reverted_versions": [], "reason": "no foreign Delta versions"}
    target = versions[0].version - 1
    metrics = delta.restore(
        target,
        commit_properties=CommitProperties(
            custom_metadata={SummaryKeys.OPERATION: Operation.REVERT_DELTA, REVERTED_VERSIONS: ",".join(str(v.version) for v in versions)}
        ),
    )
    return {"reverted_versions": [v.to_dict() for v in versions], "restored_to": target, "delta_metrics": metrics}

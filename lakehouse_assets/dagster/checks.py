"""Asset checks: the Iceberg and Delta states of a table agree.

After every materialization the blocking `formats_agree` check compares what changed since the pair of versions
its last passing evaluation recorded (`iceberg_snapshot_id`, `delta_version`): its cost follows the write, not
the table (core/maintenance/verify/changes.py). Without such an evaluation, or when the logs do not confirm the
pair, it compares every live file.
"""

import logging
from typing import Iterable, Sequence

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    MetadataValue,
    asset_check,
)

from .io_manager import table_identifier
from .resources import LakehouseResource

log = logging.getLogger("lakehouse.checks")
CHECK_NAME = "formats_agree"
RECENT_EVALUATIONS = 10  # looked through for the last passing one (a failing one records a pair that disagreed)


def verify_metadata(report: dict) -> dict:
    md = {
        "iceberg_snapshot_id": MetadataValue.int(report["iceberg_snapshot_id"]) if report.get("iceberg_snapshot_id") is not None else MetadataValue.null(),
        "delta_version": MetadataValue.int(report["delta_version"]) if report.get("delta_version") is not None else MetadataValue.null(),
        "iceberg_files": MetadataValue.int(report.get("iceberg_files", 0)),
        "delta_files": MetadataValue.int(report.get("delta_files", 0)),
        "iceberg_rows": MetadataValue.int(report.get("iceberg_rows", 0)),
        "delta_rows": MetadataValue.int(report.get("delta_rows", 0)),
        # Plain text reads inline in the UI's metadata table: "none", or every difference.
        "differences": MetadataValue.text("; ".join(report["differences"]) or "none"),
    }
    if report.get("compared"):
        md["compared"] = MetadataValue.text(report["compared"])
    if report.get("delta_files_without_row_count"):  # older writers' adds without stats: their rows are not in delta_rows
        md["delta_files_without_row_count"] = MetadataValue.int(report["delta_files_without_row_count"])
    if report.get("delta_lag_snapshots") is not None:
        md["delta_lag_snapshots"] = MetadataValue.int(report["delta_lag_snapshots"])
    if report.get("columns"):
        md["columns"] = MetadataValue.json(report["columns"])
    return md


def build_formats_agree_check(asset_key: AssetKey) -> AssetChecksDefinition:
    identifier = table_identifier(asset_key)

    @asset_check(
        asset=asset_key,
        name=CHECK_NAME,
        blocking=True,
        description=f"Iceberg and Delta list the same live files, rows and columns for {identifier}.",
    )
    def _check(context: AssetCheckExecutionContext, lakehouse: LakehouseResource) -> AssetCheckResult:
        report = lakehouse.get().verify(identifier, since=last_agreeing_pair(context, asset_key))
        agree = bool(report["agree"])
        description = (
            f"Iceberg snapshot {report.get('iceberg_snapshot_id')} and Delta version {report.get('delta_version')} agree."
            if agree
            else f"Iceberg and Delta disagree on {identifier}: " + "; ".join(report["differences"])
        )
        return AssetCheckResult(passed=agree, severity=AssetCheckSeverity.ERROR, metadata=verify_metadata(report), description=description)

    return _check


def last_agreeing_pair(context: AssetCheckExecutionContext, asset_key: AssetKey):
    """The Iceberg snapshot and Delta version the last passing `formats_agree` evaluation of `asset_key` recorded, or
    None (never passed, or the instance cannot tell: the check then compares everything)."""
    from ..core.maintenance.verify.changes import VerifiedPair

    try:
        records = context.instance.event_log_storage.get_asset_check_execution_history(AssetCheckKey(asset_key, CHECK_NAME), limit=RECENT_EVALUATIONS)
        for record in records:
            evaluation = record.evaluation  # (the running evaluation's record holds its plan)
            if not isinstance(evaluation, AssetCheckEvaluation) or not evaluation.passed:
                continue
            snapshot, version = evaluation.metadata.get("iceberg_snapshot_id"), evaluation.metadata.get("delta_version")
            if snapshot is None or version is None or snapshot.value is None or version.value is None:
                return None
            return VerifiedPair(int(snapshot.value), int(version.value))
    except Exception as e:  # noqa: BLE001 - the full comparison is always right, only slower
        log.debug("no earlier formats_agree evaluation of %s: %s", asset_key.to_user_string(), e)
    return None


def build_formats_agree_checks(asset_keys: Iterable[AssetKey]) -> Sequence[AssetChecksDefinition]:
    return [build_formats_agree_check(k) for k in asset_keys]

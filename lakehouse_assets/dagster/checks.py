"""Asset checks: the Iceberg and Delta states of a table agree."""


from typing import Iterable, Sequence

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetChecksDefinition, AssetCheckSeverity, AssetKey, MetadataValue, asset_check

from .io_manager import table_identifier
from .resources import LakehouseResource


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
        name="formats_agree",
        blocking=True,
        description=f"Iceberg and Delta list the same live files, rows and columns for {identifier}.",
    )
    def _check(context: AssetCheckExecutionContext, lakehouse: LakehouseResource) -> AssetCheckResult:
        report = lakehouse.get().verify(identifier)
        agree = bool(report["agree"])
        description = (
            f"Iceberg snapshot {report.get('iceberg_snapshot_id')} and Delta version {report.get('delta_version')} agree."
            if agree
            else f"Iceberg and Delta disagree on {identifier}: " + "; ".join(report["differences"])
        )
        return AssetCheckResult(passed=agree, severity=AssetCheckSeverity.ERROR, metadata=verify_metadata(report), description=description)

    return _check


def build_formats_agree_checks(asset_keys: Iterable[AssetKey]) -> Sequence[AssetChecksDefinition]:
    return [build_formats_agree_check(k) for k in asset_keys]

"""Data contracts on Dagster assets, in Dagster's own terms where they exist.

An asset declares its contract with its column schema (`dagster/column_schema`: a `TableSchema` whose columns carry
types and `TableColumnConstraints(nullable=False, unique=True)`, which the UI shows) plus a `contract` metadata
entry for what Dagster has no word for: `rules` (name -> SQL boolean expression), `new_columns` and `type_changes`
(dlt's modes) and `on_violation` (fail, quarantine, drop). The IO manager hands the contract to the write
(core/contracts/), which enforces it before anything lands.

Each rule, NOT NULL column and unique key is an asset check with the counts and sample rows of the asset's latest
materialization as metadata; the checks block downstream assets when the policy is `fail`. A contract that
quarantines gets `<asset>_quarantine`, the quarantine table as an asset of its own, materialized with each write
that quarantined rows.
"""


import json
from typing import Any, Iterable, Mapping, Optional

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    AssetSpec,
    MetadataValue,
    asset_check,
)

from ..core.contracts import Contract, ContractError
from ..core.contracts.enforce import not_null_check, unique_check

CONTRACT_KEY = "contract"  # asset metadata: rules, new_columns, type_changes, on_violation
REPORT_KEY = "lakehouse/contract"  # materialization metadata: the write's counts per check and sample rows
COLUMN_SCHEMA_KEY = "dagster/column_schema"


def _raw(value):
    return getattr(value, "value", value) if isinstance(value, MetadataValue) else value


def contract_of(asset: str, metadata: Mapping[str, Any]) -> Optional[Contract]:
    """The asset's contract from its metadata (None: it declares none)."""
    declared = _raw(metadata.get(CONTRACT_KEY))
    schema = _raw(metadata.get(COLUMN_SCHEMA_KEY))
    if declared is None:
        return None
    if not isinstance(declared, Mapping):
        raise ContractError(f"Asset {asset}: metadata 'contract' must be a dict (rules, new_columns, type_changes, on_violation), not {type(declared).__name__}.")
    unknown = set(declared) - {"rules", "new_columns", "type_changes", "on_violation"}
    if unknown:
        raise ContractError(f"Asset {asset}: metadata 'contract' has unknown key(s) {sorted(unknown)}; declare columns in 'dagster/column_schema'.")
    columns = list(getattr(schema, "columns", None) or [])
    return Contract(
        rules=dict(declared.get("rules") or {}),
        not_null=[c.name for c in columns if c.constraints is not None and not c.constraints.nullable],
        unique=[c.name for c in columns if c.constraints is not None and c.constraints.unique],
        types={c.name: c.type for c in columns if c.type and c.type != "unknown"},
        new_columns=declared.get("new_columns", "evolve"),
        type_changes=declared.get("type_changes", "evolve"),
        on_violation=declared.get("on_violation", "fail"),
    )


def write_metadata(report: Optional[dict]) -> dict[str, Any]:
    """The write's contract report as materialization metadata (read back by the checks)."""
    if not report:
        return {}
    return {REPORT_KEY: MetadataValue.json(report), "contract/rows_broken": MetadataValue.int(int(report.get("rows_broken") or 0))}


def quarantine_key(key: AssetKey) -> AssetKey:
    return AssetKey([*key.path[:-1], f"{key.path[-1]}_quarantine"])


def quarantine_materialization(key: AssetKey, report: Optional[dict]) -> Optional[AssetMaterialization]:
    """The quarantine asset's materialization, when the write quarantined rows."""
    if not report or not report.get("rows_quarantined"):
        return None
    return AssetMaterialization(
        asset_key=quarantine_key(key),
        description=f"Rows of {key.to_user_string()} that broke its contract",
        metadata={
            "dagster/row_count": MetadataValue.int(report["rows_quarantined"]),
            "table": MetadataValue.text(report["quarantine_table"]),
            "iceberg_snapshot_id": MetadataValue.int(report["quarantine_snapshot_id"]) if report.get("quarantine_snapshot_id") else MetadataValue.null(),
        },
    )


def _checks_of(contract: Contract) -> list[str]:
    names = list(contract.rules) + [not_null_check(c) for c in dict.fromkeys([*contract.not_null, *contract.unique])]
    return names + ([unique_check(contract.unique)] if contract.unique else [])


def build_contract_checks(assets: Iterable[AssetsDefinition]) -> list:
    """One asset check per rule, NOT NULL column and unique key of every asset that declares a contract."""
    out = []
    for assets_def in assets:
        for key in assets_def.keys:
            contract = contract_of(key.to_user_string(), assets_def.metadata_by_key.get(key) or {})
            if contract is not None:
                out += [_check(key, name, contract) for name in _checks_of(contract)]
    return out


def quarantine_specs(assets: Iterable[AssetsDefinition]) -> list[AssetSpec]:
    """The quarantine table of each asset whose contract quarantines, as an asset downstream of it."""
    out = []
    for assets_def in assets:
        for key in assets_def.keys:
            contract = contract_of(key.to_user_string(), assets_def.metadata_by_key.get(key) or {})
            if contract is not None and contract.on_violation == "quarantine":
                out.append(AssetSpec(quarantine_key(key), deps=[key], group_name=assets_def.group_names_by_key.get(key), description=f"Rows of {key.to_user_string()} that broke its contract, with the rules they broke, the run and the time."))
    return out


def _check(key: AssetKey, name: str, contract: Contract):
    blocking = contract.on_violation == "fail"

    @asset_check(asset=key, name=f"contract_{name}", blocking=blocking, description=f"Rows of the latest write that break the contract's {name!r} ({contract.on_violation}).")
    def _contract_check(context: AssetCheckExecutionContext) -> AssetCheckResult:
        event = context.instance.get_latest_materialization_event(key)
        metadata = event.asset_materialization.metadata if event is not None and event.asset_materialization is not None else {}
        report = _raw(metadata.get(REPORT_KEY)) or {}
        if isinstance(report, str):
            report = json.loads(report)
        broken = int((report.get("checks") or {}).get(name, 0))
        samples = [s.split(" ", 1)[1] for s in report.get("samples") or [] if name in s.split(" ", 1)[0].split(",")]
        return AssetCheckResult(
            passed=broken == 0,
            severity=AssetCheckSeverity.ERROR if blocking else AssetCheckSeverity.WARN,
            metadata={
                "rows_broken": MetadataValue.int(broken),
                "rows_checked": MetadataValue.int(int(report.get("rows_checked") or 0)),
                "policy": MetadataValue.text(contract.on_violation),
                "sample_rows": MetadataValue.json(samples),
                "rule": MetadataValue.text(contract.rules.get(name, name)),
            },
            description=f"{broken} row(s) broke {name!r}" + ("" if broken == 0 else f"; they were {'dropped' if contract.on_violation == 'drop' else 'quarantined'}."),
        )

    return _contract_check

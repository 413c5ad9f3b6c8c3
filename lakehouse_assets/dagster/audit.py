"""Write-audit-publish for Dagster assets: data reaches main and Delta only after the asset's blocking checks pass.

An asset with `audit: True` in its metadata (or every asset, with `LakehouseIOManager(audit=True)`) writes each
materialization to the Iceberg branch `audit-<run id>` instead of main (core/write/publish.py): main and the
Delta log do not change, so no reader of either format sees the rows yet.

- Its asset checks, and any asset that reads it, get the staged rows: an input of an audited asset reads the
  branch its materialization staged, while that branch exists (as Spark, Arrow, pandas or Polars alike).
- `publish_asset(asset)` is the publish step: an asset downstream of the audited one (key `<name>_published`)
  that publishes the branch to main (one commit, mirrored to Delta as one version) and removes it. Dagster runs
  it only after every blocking check of the audited asset passed in that run: a failed blocking check leaves
  main and Delta untouched and the staged snapshot on its branch for inspection (the run shows which check
  stopped it). Re-executing the run from the failure publishes once the checks pass; `lakehouse publish` and
  `lakehouse discard` do the same by hand.

This is Dagster's own write-audit-publish shape (a staging asset, checks, a publishing asset), with the staging
done by an Iceberg branch of the same table instead of a copy.
"""

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from dagster import AssetIn, AssetKey, AssetsDefinition, MaterializeResult, MetadataValue, asset

from ..core.errors import SpecError

AUDIT_KEY = "audit"  # asset metadata: stage each materialization on a branch until its blocking checks pass
STAGED_INPUT_KEY = "lakehouse/staged"  # input metadata of the publish step: the staged write, not its rows


def audit_branch(run_id: str) -> str:
    """The branch a run stages an audited asset's materialization on."""
    return f"audit-{run_id}"


def is_audited(asset: str, metadata: Mapping[str, Any], default: bool) -> bool:
    value = metadata.get(AUDIT_KEY, default)
    if not isinstance(value, bool):
        raise SpecError(f"Asset {asset}: 'audit' must be True or False, not {value!r}.")
    return value


@dataclass(frozen=True)
class StagedWrite:
    """What the publish step receives: the table and the branch its upstream's materialization staged."""

    table: str
    branch: str


def publish_asset(audited: Union[AssetsDefinition, AssetKey, str], *, group_name: Optional[str] = None) -> AssetsDefinition:
    """The publish step of an audited asset: `<key>_published`, downstream of it, so it runs only after the
    audited asset's blocking checks passed in the same run. Add it to the definitions next to the asset."""
    key = _key_of(audited)
    published_key = AssetKey([*key.path[:-1], f"{key.path[-1]}_published"])

    @asset(
        key=published_key,
        ins={"staged": AssetIn(key=key, metadata={STAGED_INPUT_KEY: True})},
        required_resource_keys={"lakehouse"},
        group_name=group_name,
        description=f"Publishes what {key.to_user_string()} staged in this run to main and Delta, after its blocking checks passed.",
    )
    def _publish(context, staged: StagedWrite) -> MaterializeResult:
        lh = context.resources.lakehouse.get()
        result = lh.publish(staged.table, staged.branch)
        lh.discard(staged.table, staged.branch)
        for warning in result.warnings:
            context.log.warning(warning)
        return MaterializeResult(metadata={
            "table": MetadataValue.text(staged.table),
            "published_branch": MetadataValue.text(staged.branch),
            "published": MetadataValue.text(result.published),
            "iceberg_snapshot_id": MetadataValue.int(result.iceberg_snapshot_id) if result.iceberg_snapshot_id is not None else MetadataValue.null(),
            "delta_version": MetadataValue.int(result.delta_version) if result.delta_version is not None else MetadataValue.null(),
            "delta_lagging": MetadataValue.bool(result.delta_lagging),
        })

    return _publish


def _key_of(audited: Union[AssetsDefinition, AssetKey, str]) -> AssetKey:
    if isinstance(audited, AssetsDefinition):
        return audited.key
    if isinstance(audited, AssetKey):
        return audited
    return AssetKey.from_user_string(audited)

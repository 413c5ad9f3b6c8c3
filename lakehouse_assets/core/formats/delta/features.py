"""Delta table features: which ones an imported Delta table may have, and the refusal of the others, by name.

After an import the table's Delta versions are committed through delta-rs 1.6.6 (its `ProtocolChecker` refuses a
commit to a table with a writer feature it lacks: `CommitFailedError: Unsupported table features required`), its
rows are read by delta-rs, DuckDB and Spark, and the project's own writes add files without running Delta's
write-time checks. So a feature is imported only where delta-rs can write the table, every reader reads it, and the
project's later writes keep its promise; every other feature is refused before any work, naming it, saying what it
is and what to do. One table (`FEATURES`) holds the decision for each name; a name not in it is refused.

Features that only constrain what may be written (invariants, generated columns) are imported when the table declares
none of them: the project's writes do not evaluate Delta expressions, so a table that declares one is refused rather
than silently accepting rows that break it. CHECK constraints in the portable rule subset (core/contracts/rules.py)
are the exception: they become the imported table's contract rules, which every later write checks (the others
are refused by name, core/contracts/table_contract.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from deltalake import DeltaTable

from ...errors import ImportRefused

# Legacy protocol versions (before table features) imply the features of their version and below.
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}
_LEGACY_READER = {2: ("columnMapping",)}

_DROP = "drop it with the engine that wrote the table (Delta Lake 3.x, Databricks: `ALTER TABLE ... DROP FEATURE {name}`) and import again, or "
_COPY = "copy the table without it (e.g. Spark's `CREATE TABLE ... AS SELECT`) and import the copy"


@dataclass(frozen=True)
class Feature:
    what: str  # what the feature is
    why: str | None = None  # why the import refuses it (None: imported)
    fix: str = ""  # what to do when refused
    in_use: Callable[[dict, list[dict]], list[str]] | None = None  # (configuration, schema fields) -> what uses it


def _field_metadata(key: str) -> Callable[[dict, list[dict]], list[str]]:
    return lambda configuration, fields: [f"column {f['name']!r}" for f in fields if key in (f.get("metadata") or {})]


_NOT_ENFORCED = "the lakehouse's writes add files without evaluating Delta expressions, so later writes could break it"
_DELTA_RS = "delta-rs 1.6.6, which commits every later Delta version of the table, cannot write a table with this feature"

FEATURES: dict[str, Feature] = {
    "appendOnly": Feature("`delta.appendOnly`: files are never removed with a data change"),
    "invariants": Feature(
        "column invariants (`delta.invariants` expressions)", _NOT_ENFORCED,
        f"drop the invariants with the engine that wrote the table, or {_COPY}", _field_metadata("delta.invariants"),
    ),
    # Each CHECK constraint becomes a contract rule, or is refused by name (core/contracts/table_contract.adoptable).
    "checkConstraints": Feature("CHECK constraints (`delta.constraints.*`), kept as the table's contract rules"),
    "changeDataFeed": Feature("the change data feed (`_change_data/` files, not live data)"),
    "generatedColumns": Feature(
        "generated columns (`delta.generationExpression`)", _NOT_ENFORCED,
        f"{_COPY} (its generated columns become plain columns; compute them in your pipeline)",
        _field_metadata("delta.generationExpression"),
    ),
    "columnMapping": Feature("column mapping (physical column names in the files)"),
    "identityColumns": Feature("identity columns (`delta.identity.*`: generated ids with a high-water mark)", _DELTA_RS, f"{_COPY} (its identity columns become plain columns; generate ids in your pipeline)"),
    "deletionVectors": Feature("deletion vectors (rows deleted by marking them); kept as position deletes when `delta.enableDeletionVectors=true`, else files carrying vectors need `--apply-deletes`"),
    "timestampNtz": Feature("`timestamp_ntz` columns"),
    "domainMetadata": Feature("domain metadata (named configuration blobs in the log)", _DELTA_RS, _COPY),
    "v2Checkpoint": Feature(
        "V2 checkpoints (checkpoint manifests with sidecar files)", "delta-rs 1.6.6's pyarrow reader (and Polars) refuse to read it",
        f"{_DROP}{_COPY}",
    ),
    "icebergCompatV1": Feature("UniForm Iceberg compatibility, version 1", _DELTA_RS, f"{_COPY} (the lakehouse writes the Iceberg side itself)"),
    "icebergCompatV2": Feature("UniForm Iceberg compatibility, version 2", _DELTA_RS, f"{_COPY} (the lakehouse writes the Iceberg side itself)"),
    "rowTracking": Feature("row tracking (stable row ids: `baseRowId` on every file)", _DELTA_RS, f"{_DROP}{_COPY}"),
    "clustering": Feature("liquid clustering (`CLUSTER BY`, a clustering domain in the log)", _DELTA_RS, f"{_COPY} (partition it, or leave it unpartitioned)"),
    "typeWidening": Feature("type widening (column types changed in place)", _DELTA_RS + " or read it with its pyarrow reader", f"{_DROP}{_COPY}"),
    "variantType": Feature("`variant` columns"),
    "vacuumProtocolCheck": Feature("the vacuum protocol check", _DELTA_RS, f"{_DROP}{_COPY}"),
    "inCommitTimestamp": Feature("in-commit timestamps (`inCommitTimestamp` in every commitInfo)", _DELTA_RS, f"{_DROP}{_COPY}"),
    "catalogOwned": Feature("a catalog-owned table (commits go through its catalog)", _DELTA_RS + " (nor read it)", _COPY),
}
for _preview, _name in (("typeWidening-preview", "typeWidening"), ("variantType-preview", "variantType"), ("catalogOwned-preview", "catalogOwned"),
                        ("catalogManaged", "catalogOwned"), ("domainMetadata-preview", "domainMetadata")):  # fmt: skip
    FEATURES[_preview] = FEATURES[_name]

_UNKNOWN = Feature("a table feature this import does not know", "its promises cannot be kept by a writer that does not know them", _COPY)


def required(delta: DeltaTable) -> list[str]:
    """Every reader and writer feature the table's protocol requires, legacy versions' implied ones included."""
    p = delta.protocol()
    names = list(p.reader_features or []) + list(p.writer_features or [])
    names += [n for v, implied in _LEGACY_WRITER.items() if p.min_writer_version < 7 and p.min_writer_version >= v for n in implied]
    names += [n for v, implied in _LEGACY_READER.items() if p.min_reader_version < 3 and p.min_reader_version >= v for n in implied]
    return list(dict.fromkeys(names))


def refusals(delta: DeltaTable) -> list[str]:
    """Why each refused feature of the table's protocol is refused (empty: every feature can be imported)."""
    configuration = dict(delta.metadata().configuration or {})
    fields = json.loads(delta.schema().to_json())["fields"]
    out = []
    for name in required(delta):
        feature = FEATURES.get(name, _UNKNOWN)
        if feature.why is None:
            continue
        if feature.in_use is not None:
            used = feature.in_use(configuration, fields)
            if not used:
                continue  # declared, nothing uses it: no promise to keep
            out.append(f"feature {name!r} ({feature.what}; the table has {', '.join(used)}): {feature.why}. Fix: {feature.fix}")
        else:
            out.append(f"feature {name!r} ({feature.what}): {feature.why}. Fix: {feature.fix.format(name=name)}")
    return out


def refuse_unsupported(identifier: str, delta: DeltaTable, location: str) -> None:
    """Raise ImportRefused (nothing changed) naming every table feature the import cannot keep."""
    if reasons := refusals(delta):
        raise ImportRefused(f"Table {identifier}: the Delta table at {location} uses table features the import cannot keep: " + "; ".join(reasons) + ". Nothing was imported.")


def unreadable(identifier: str, location: str, error: Exception) -> ImportRefused | None:
    """The refusal for a table delta-rs cannot even load because of a feature its kernel lacks (None: another error)."""
    if not (m := re.search(r"Feature '([^']+)' is not supported", str(error))):
        return None
    name = m.group(1)
    feature = FEATURES.get(name, _UNKNOWN)
    return ImportRefused(
        f"Table {identifier}: the Delta table at {location} uses table feature {name!r} ({feature.what}), which delta-rs 1.6.6 cannot "
        f"read. Nothing was imported. Fix: {(feature.fix or _UNKNOWN.fix).format(name=name)}."
    )

"""Maintenance of merge-on-read tables: compaction folds position deletes back in past its thresholds, health reports
what the deletes cost readers until then, the compaction sensor counts deleted rows, and expiry and orphan cleanup
keep every delete file a retained snapshot or version references (and remove the ones none does)."""

from __future__ import annotations

import pytest
from dagster import SkipReason, build_sensor_context

from lakehouse_assets import TableOptions
from lakehouse_assets.core import maintenance
from lakehouse_assets.core.errors import SpecError
from lakehouse_assets.core.formats.deletes import table_files
from lakehouse_assets.core.formats.delta.logged_vectors import live_vectors, vector_file_uris
from lakehouse_assets.core.formats.position_deletes import referenced_data_file
from lakehouse_assets.dagster.maintenance import OP_NAME, compaction_sensor
from lakehouse_assets.dagster.resources import LakehouseResource

from .mor_tables import MERGE_ON_READ, data_files, delete_positions

NO_SMALL_FILES = {"compaction_target_mb": 0.00001}  # every file is "large": only deletes make compaction rewrite one


def ids(lh, spark, t, **kw) -> list[int]:
    return sorted(r["id"] for r in lh.read(spark, t, **kw).collect())


def _table(lh, spark, t: str, properties: dict | None = None):
    opts = TableOptions(properties={**MERGE_ON_READ, **(properties or {})})
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name FROM range(10)"), t, table=opts)
    lh.write(spark.sql("SELECT id, CONCAT('n', id) AS name FROM range(10, 15)"), t)
    return list(data_files(lh, t))


def test_compaction_folds_the_files_whose_deletes_pass_a_threshold(lh, spark, warehouse):
    t = "mm.fold"
    ten, five = _table(lh, spark, t)
    delete_positions(lh, t, {ten: [0], five: [0, 1, 2]})  # 10% of the first file, 60% of the second
    expected = [*range(1, 10), 13, 14]
    assert ids(lh, spark, t) == expected

    health = maintenance.table_health(lh.context, t)
    assert (health["files_with_deletes"], health["delete_files"], health["deleted_rows"]) == (2, 2, 4)
    assert (health["delete_files_per_file"], health["deleted_rows_per_file"], health["foldable_files"]) == (1.0, 2.0, 1)
    with build_sensor_context(resources={"lakehouse": LakehouseResource(warehouse=warehouse)}) as context:
        (request,) = compaction_sensor(context)
    assert request.run_config["ops"][OP_NAME]["config"]["tables"] == [t]

    report = lh.maintain(t, "compaction", spark=spark, **NO_SMALL_FILES)
    assert (report["files_rewritten"], report["files_with_deletes_folded"], report["deleted_rows_folded"]) == (1, 1, 3)
    assert ids(lh, spark, t) == expected == sorted(lh.read_arrow(t).column("id").to_pylist())
    live = data_files(lh, t)
    assert ten in live and five not in live and sum(f.record_count for f in live.values()) == 12
    assert [referenced_data_file(e.data_file) for e in table_files(lh.load(t)).deletes] == [ten]  # its delete file went with it
    assert lh.maintain(t, "compaction", spark=spark, **NO_SMALL_FILES)["files_rewritten"] == 0  # nothing past a threshold

    # A lower threshold folds the other file too; no delete file is left, and the sensor has nothing to ask.
    report = lh.maintain(t, "compaction", spark=spark, compaction_deleted_fraction=0.05, **NO_SMALL_FILES)
    assert (report["files_with_deletes_folded"], report["deleted_rows_folded"]) == (1, 1)
    assert ids(lh, spark, t) == expected and table_files(lh.load(t)).deletes == []
    health = maintenance.table_health(lh.context, t)
    assert (health["files_with_deletes"], health["deleted_rows"], health["foldable_files"]) == (0, 0, 0)
    with build_sensor_context(resources={"lakehouse": LakehouseResource(warehouse=warehouse)}) as context:
        assert isinstance(compaction_sensor(context), SkipReason)


def test_small_file_compaction_reads_its_files_without_their_deleted_rows(lh, spark):
    t = "mm.small"
    ten, five = _table(lh, spark, t, {"lakehouse.maintenance.compaction-deleted-fraction": "0.9"})
    delete_positions(lh, t, {ten: [9]})  # 10%: below the table's threshold, but the file is small
    report = lh.maintain(t, "compaction", spark=spark)
    assert (report["files_rewritten"], report["files_with_deletes_folded"], report["deleted_rows_folded"]) == (2, 1, 1)
    assert ids(lh, spark, t) == [i for i in range(15) if i != 9]
    assert len(data_files(lh, t)) == 1 and table_files(lh.load(t)).deletes == []


def test_a_long_run_of_deletes_without_compaction_reads_correctly_and_reports_its_cost(lh, spark):
    t = "mm.paused"
    ten, five = _table(lh, spark, t)
    gone: set[int] = set()
    for i in range(6):  # a stream of merge-on-read deletes, compaction not run
        delete_positions(lh, t, {ten: [i]} if i % 2 == 0 else {ten: [i], five: [i // 2]})
        gone |= {i} | ({10 + i // 2} if i % 2 else set())
        assert ids(lh, spark, t) == [i for i in range(15) if i not in gone]
    health = maintenance.table_health(lh.context, t)
    assert (health["files_with_deletes"], health["delete_files"], health["deleted_rows"], health["deleted_rows_per_file"]) == (2, 2, 9, 4.5)
    assert len(table_files(lh.load(t)).deletes) == 2  # one delete file per data file, however many deletes


def test_compaction_folds_another_engines_position_deletes(lh, spark):
    from . import foreign_writer as fw

    t = "mm.foreign"
    ten, _ = _table(lh, spark, t)
    table = lh.load(t)
    fw.commit_deletes(table, [fw.position_deletes(table, data_files(lh, t)[ten], [4, 5, 6])])
    report = lh.maintain(t, "compaction", spark=spark, **NO_SMALL_FILES)
    assert (report["files_with_deletes_folded"], report["deleted_rows_folded"]) == (1, 3)
    assert ids(lh, spark, t) == [i for i in range(15) if i not in (4, 5, 6)] and table_files(lh.load(t)).deletes == []


def test_folding_thresholds_are_checked(lh, spark):
    _table(lh, spark, "mm.bad")
    with pytest.raises(SpecError, match=r"mm\.bad: compaction_deleted_fraction must be above 0 and at most 1"):
        lh.maintain("mm.bad", "compaction", spark=spark, compaction_deleted_fraction=1.5)


def _files_in(lh, t: str, folder: str) -> set[str]:
    import os

    root = lh.load(t).location().removeprefix("file://")
    return set(os.listdir(os.path.join(root, folder))) if os.path.isdir(os.path.join(root, folder)) else set()


def test_expiry_and_orphan_cleanup_keep_the_delete_files_retained_snapshots_reference(lh, spark):
    import os

    t = "mm.retention"
    ten, five = _table(lh, spark, t)
    delete_positions(lh, t, {ten: [1]})
    first = {os.path.basename(e.data_file.file_path) for e in table_files(lh.load(t)).deletes}
    assert len([f for f in _files_in(lh, t, "_deletes") if f.endswith(".bin")]) == 1  # the Delta mirror's vector
    delete_positions(lh, t, {ten: [2], five: [0]})  # replaces the first delete file
    live = {os.path.basename(e.data_file.file_path) for e in table_files(lh.load(t)).deletes}
    assert first <= _files_in(lh, t, "_deletes") and not first & live

    # Orphan cleanup: a stray delete file (a failed write's) goes; the replaced one stays while a snapshot lists it.
    stray = os.path.join(lh.load(t).location().removeprefix("file://"), "_deletes", "stray-deletes.parquet")
    open(stray, "wb").write(b"x")
    report = lh.maintain(t, "orphan_cleanup", orphan_grace_hours=0)
    assert report["orphan_paths"] == ["_deletes/stray-deletes.parquet"]
    assert _files_in(lh, t, "_deletes") >= first | live and not os.path.exists(stray)

    # Expiry: the replaced delete file goes with the last snapshot that listed it; the live ones stay.
    expired = lh.maintain(t, "snapshot_expiry", snapshot_retention_days=0, min_snapshots_to_keep=1)
    assert expired["snapshots_expired"] == 3
    delete_files = {f for f in _files_in(lh, t, "_deletes") if f.endswith("-deletes.parquet")}
    assert delete_files == live
    # Delta's vector files: those of the retained versions' live files stay, the replaced one went.
    mirror = lh.mirror(lh.load(t))
    retained = lh.load(t).properties["lakehouse.retention.delta-min-version"]
    wanted = {os.path.basename(u) for u in vector_file_uris(lh.storage, mirror.root_uri, mirror.load(int(retained)), mirror.load().version())}
    assert {f for f in _files_in(lh, t, "_deletes") if f.endswith(".bin")} == wanted and len(wanted) == 2
    assert wanted == {os.path.basename(d.file_uri(mirror.root_uri)) for d in live_vectors(lh.storage, mirror.root_uri, mirror.load()).values()}
    assert ids(lh, spark, t) == [0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14]
    orphans = lh.maintain(t, "orphan_cleanup", orphan_grace_hours=0)["orphan_paths"]
    assert not [p for p in orphans if p.startswith("_deletes/")]  # (the expired versions' change data goes, as in VACUUM)
    assert ids(lh, spark, t) == [0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14] and lh.verify(t)["agree"]

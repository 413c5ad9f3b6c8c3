"""Other engines write to the Iceberg side (pyiceberg here, see foreign_writer.py): mirrored when Delta
can express it, refused loudly when it cannot, and never ignored by a project operation."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import DeleteFilesError, MergeOptions, MirrorRefused, SchemaError, Slice

from . import foreign_writer as fw
from .conftest import assert_all_readers_agree

COLS = ["country", "id", "name"]


def start(lh, spark, name, n=10, **kw):
    """A project table: ids 0..n-1, country US for odd ids, DE for even ids, one file per country."""
    rows = [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(n)]
    lh.write(spark.createDataFrame(rows, "id long, name string, country string").coalesce(1), name, partition_by=["country"], **kw)
    return {i: (c, i, nm) for i, nm, c in rows}


def arrow(table, rows):
    """Rows (id, name, country) in the table's current Arrow schema."""
    schema = table.schema().as_arrow()
    data = {f.name: [] for f in schema}
    for r in rows:
        for f in schema:
            data[f.name].append(r.get(f.name))
    return pa.Table.from_pydict(data, schema=schema)


def want(model):
    return sorted(model.values())


def delta_version(lh, name):
    return DeltaTable(lh.load(name).location()).version()


# ---------------------------------------------------------------- mirrored


def test_foreign_append_under_percent_encoded_folders_is_mirrored_and_verify_agrees(lh, spark, duck):
    model = start(lh, spark, "fw.enc")
    t = lh.load("fw.enc")
    t.append(arrow(t, [{"id": 100, "name": "s", "country": "x/y"}, {"id": 101, "name": "p", "country": "a b%"}]))
    paths = [f.file_path for f in fw.data_files(lh.load("fw.enc"))]
    assert any("country=x%2Fy/" in p for p in paths) and any("country=a+b%25/" in p for p in paths)  # as pyiceberg names them
    report = lh.verify("fw.enc")
    assert not report["agree"] and report["delta_lag_snapshots"] == 1
    repaired = lh.repair("fw.enc")
    assert repaired["repaired"]
    report = lh.verify("fw.enc")
    assert report["agree"], report["differences"]  # no false alarm on the encoded paths
    model[100], model[101] = ("x/y", 100, "s"), ("a b%", 101, "p")
    assert_all_readers_agree(lh, spark, duck, "fw.enc", want(model))
    # The Delta log holds the URI-encoded form, which delta-rs and DuckDB both decode to the real files.
    adds = pa.table(DeltaTable(lh.load("fw.enc").location()).get_add_actions(flatten=True)).column("path").to_pylist()
    assert any("country=x%252Fy/" in p for p in adds)
    us = lh.read(spark, "fw.enc", row_filter="country = 'x/y'").collect()
    assert [r["id"] for r in us] == [100]


def test_foreign_append_overwrite_and_copy_on_write_delete_are_mirrored_by_the_next_project_write(lh, spark, duck):
    model = start(lh, spark, "fw.next")
    t = lh.load("fw.next")
    t.append(arrow(t, [{"id": 50, "name": "f", "country": "FR"}]))
    t = lh.load("fw.next")
    t.delete("id = 3")  # copy-on-write: rewrites the US file, adds and removes data files only
    t = lh.load("fw.next")
    t.overwrite(arrow(t, [{"id": 60, "name": "g", "country": "FR"}]), overwrite_filter="country = 'FR'")
    model.pop(3)
    model[60] = ("FR", 60, "g")
    result = lh.write(spark.createDataFrame([(70, "h", "DE")], "id long, name string, country string"), "fw.next")
    model[70] = ("DE", 70, "h")
    assert not result.delta_lagging, result.delta_error
    assert lh.verify("fw.next")["agree"]
    assert_all_readers_agree(lh, spark, duck, "fw.next", want(model))


def test_foreign_add_column_is_mirrored_by_repair_without_a_new_snapshot(lh, spark, duck):
    start(lh, spark, "fw.col")
    t = lh.load("fw.col")
    with t.update_schema() as update:
        from pyiceberg.types import StringType

        update.add_column("email", StringType())
    report = lh.verify("fw.col")
    assert not report["agree"] and any("email" in d for d in report["differences"])  # the check sees it
    lh.repair("fw.col")
    assert "email" in [f.name for f in DeltaTable(lh.load("fw.col").location()).schema().fields]
    assert lh.verify("fw.col")["agree"]
    t = lh.load("fw.col")
    t.append(arrow(t, [{"id": 99, "name": "z", "country": "US", "email": "z@x"}]))
    lh.repair("fw.col")
    assert lh.verify("fw.col")["agree"]
    rows = {r["id"]: r["email"] for r in lh.read(spark, "fw.col").collect()}
    assert rows[99] == "z@x" and rows[0] is None
    assert_all_readers_agree(lh, spark, duck, "fw.col")


# ---------------------------------------------------------------- refused


def test_foreign_rename_is_refused_loudly_and_the_next_write_reports_delta_lagging(lh, spark):
    start(lh, spark, "fw.ren")
    before = delta_version(lh, "fw.ren")
    t = lh.load("fw.ren")
    with t.update_schema() as update:
        update.rename_column("name", "full_name")
    report = lh.verify("fw.ren")
    assert not report["agree"] and any("full_name" in d for d in report["differences"])
    with pytest.raises(MirrorRefused, match=r"Table fw\.ren: Delta cannot mirror Iceberg .*'name' renamed to 'full_name'.*run `lakehouse upgrade fw\.ren`"):
        lh.repair("fw.ren")
    assert delta_version(lh, "fw.ren") == before  # nothing half-mirrored
    snapshot = lh.load("fw.ren").current_snapshot().snapshot_id
    with pytest.raises(SchemaError, match=r"fw\.ren: another engine changed the columns in Iceberg.*'name' renamed to 'full_name'.*lakehouse upgrade fw\.ren.*Nothing was written"):
        lh.write(spark.createDataFrame([(20, "q", "US")], "id long, full_name string, country string"), "fw.ren")
    assert lh.load("fw.ren").current_snapshot().snapshot_id == snapshot and delta_version(lh, "fw.ren") == before
    # The way out the messages name: the upgrade follows the rename in Delta, and writes proceed.
    lh.upgrade("fw.ren")
    assert [f.name for f in DeltaTable(lh.load("fw.ren").location()).schema().fields][:2] == ["id", "full_name"]
    result = lh.write(spark.createDataFrame([(20, "q", "US")], "id long, full_name string, country string"), "fw.ren")
    assert not result.delta_lagging and lh.verify("fw.ren")["agree"]


def test_foreign_partition_spec_change_is_refused(lh, spark):
    start(lh, spark, "fw.spec")
    before = delta_version(lh, "fw.spec")
    t = lh.load("fw.spec")
    with t.update_spec() as update:
        update.add_identity("name")
    t = lh.load("fw.spec")
    t.append(arrow(t, [{"id": 30, "name": "w", "country": "US"}]))
    with pytest.raises(MirrorRefused, match=r"Table fw\.spec: .*partition spec.*partition evolution is not supported"):
        lh.repair("fw.spec")
    assert delta_version(lh, "fw.spec") == before
    assert not lh.verify("fw.spec")["agree"]


def test_position_deletes_are_refused_by_every_operation_then_applied_by_repair(lh, spark, duck):
    from lakehouse_assets.core import maintenance

    model = start(lh, spark, "fw.pos")
    t = lh.load("fw.pos")
    us = next(f for f in fw.data_files(t) if "country=US" in f.file_path)  # ids 1,3,5,7,9 in this order
    fw.commit_deletes(t, [fw.position_deletes(t, us, [0, 2])])  # ids 1 and 5
    del model[1], model[5]
    t = lh.load("fw.pos")
    assert sorted(r["id"] for r in t.scan().to_arrow().to_pylist()) == sorted(model)  # pyiceberg applies them
    before = delta_version(lh, "fw.pos")

    report = lh.verify("fw.pos")
    assert not report["agree"] and any("1 position-delete file(s)" in d for d in report["differences"])
    with pytest.raises(MirrorRefused, match=r"Table fw\.pos: .*delete file.*--apply-deletes"):
        lh.repair("fw.pos")
    assert delta_version(lh, "fw.pos") == before
    assert sorted(r["id"] for r in lh.read(spark, "fw.pos").collect()) == sorted(model)  # the Spark reader applies them too
    batch = spark.createDataFrame([(1, "back", "US"), (7, "upd", "US")], "id long, name string, country string")
    with pytest.raises(DeleteFilesError, match=r"Table fw\.pos: .*A merge .*bring the deleted rows back"):
        lh.write(batch, "fw.pos", mode="merge", merge=MergeOptions(keys=["id"]))
    planned = lh.maintain("fw.pos", "compaction", spark=spark, dry_run=True, compaction_min_input_files=1)
    assert (planned["files_with_deletes_folded"], planned["deleted_rows_folded"]) == (1, 2)  # compaction folds them in (test_mor_maintenance.py)
    assert lh.load("fw.pos").current_snapshot().snapshot_id == t.current_snapshot().snapshot_id  # nothing committed

    # Orphan cleanup and expiry keep the delete files: removing one would bring rows back.
    lh.maintain("fw.pos", "orphan_cleanup", orphan_grace_hours=0)
    assert sorted(r["id"] for r in lh.load("fw.pos").scan().to_arrow().to_pylist()) == sorted(model)

    # A project append still lands in Iceberg; Delta reports the lag with the reason.
    result = lh.write(spark.createDataFrame([(40, "a", "DE")], "id long, name string, country string"), "fw.pos")
    model[40] = ("DE", 40, "a")
    assert result.delta_lagging and "--apply-deletes" in result.delta_error
    assert delta_version(lh, "fw.pos") == before

    repaired = lh.repair("fw.pos", apply_deletes=True, spark=spark)
    assert repaired["apply_deletes"]["rows_deleted"] == 2 and repaired["apply_deletes"]["data_files_rewritten"] == 1
    assert fw.delete_files(lh.load("fw.pos")) == []
    summary = lh.load("fw.pos").current_snapshot().summary
    assert (summary["lakehouse.operation"], summary["total-delete-files"], summary["removed-position-delete-files"]) == ("apply-deletes", "0", "1")
    assert summary["total-records"] == str(len(model))
    assert lh.verify("fw.pos")["agree"]
    assert_all_readers_agree(lh, spark, duck, "fw.pos", want(model))
    # Now every operation works again, and compaction cannot resurrect anything.
    lh.write(batch, "fw.pos", mode="merge", merge=MergeOptions(keys=["id"]))
    model[1], model[7] = ("US", 1, "back"), ("US", 7, "upd")
    maintenance.run(lh.context, "fw.pos", "compaction", spark=spark, compaction_min_input_files=1)
    assert_all_readers_agree(lh, spark, duck, "fw.pos", want(model))


def test_equality_deletes_follow_sequence_numbers_and_partitions(lh, spark, duck):
    model = start(lh, spark, "fw.eq")
    t = lh.load("fw.eq")
    files = fw.data_files(t)
    us = next(f for f in files if "country=US" in f.file_path)
    de = next(f for f in files if "country=DE" in f.file_path)
    # In the US partition delete name 'n3'; in DE delete id 3 (no such row there: DE holds even ids).
    fw.commit_deletes(t, [fw.equality_deletes(t, pa.table({"name": pa.array(["n3"])}), us), fw.equality_deletes(t, pa.table({"id": pa.array([3, 4], pa.int64())}), de)])
    del model[3], model[4]
    t = lh.load("fw.eq")
    # Appended after the delete (higher sequence number): an equality delete never applies to it.
    t.append(arrow(t, [{"id": 4, "name": "n3", "country": "US"}, {"id": 3, "name": "again", "country": "DE"}]))
    model[-1], model[-2] = ("US", 4, "n3"), ("DE", 3, "again")

    report = lh.verify("fw.eq")  # no crash in pyiceberg's planning
    assert not report["agree"] and any("2 equality-delete file(s)" in d for d in report["differences"])
    with pytest.raises(DeleteFilesError, match=r"Table fw\.eq: .*equality-delete"):
        lh.read(spark, "fw.eq")
    with pytest.raises(MirrorRefused, match=r"equality-deletes"):
        lh.repair("fw.eq")
    with pytest.raises(DeleteFilesError, match=r"Table fw\.eq: .*A window overwrite"):
        # A slice of id values (a window needs a date/timestamp column, which this table has none of).
        lh.write(spark.createDataFrame([], "id long, name string, country string"), "fw.eq", mode="overwrite", window=Slice(values={"id": [0]}))

    repaired = lh.repair("fw.eq", apply_deletes=True, spark=spark)
    assert repaired["apply_deletes"]["rows_deleted"] == 2
    assert lh.verify("fw.eq")["agree"]
    assert_all_readers_agree(lh, spark, duck, "fw.eq", want(model))


def test_a_full_overwrite_removes_foreign_delete_files_and_delta_follows(lh, spark, duck):
    start(lh, spark, "fw.ow")
    t = lh.load("fw.ow")
    us = next(f for f in fw.data_files(t) if "country=US" in f.file_path)
    fw.commit_deletes(t, [fw.position_deletes(t, us, [1])])
    result = lh.write(spark.createDataFrame([(1, "one", "FR")], "id long, name string, country string"), "fw.ow", mode="overwrite")
    assert not result.delta_lagging, result.delta_error
    assert fw.delete_files(lh.load("fw.ow")) == []
    assert lh.verify("fw.ow")["agree"]
    assert_all_readers_agree(lh, spark, duck, "fw.ow", [("FR", 1, "one")])


def test_widening_refuses_delete_files(lh, spark):
    lh.write(spark.createDataFrame([(i, "US") for i in range(4)], "n int, country string").coalesce(1), "fw.wide", partition_by=["country"])
    t = lh.load("fw.wide")
    fw.commit_deletes(t, [fw.position_deletes(t, fw.data_files(t)[0], [0])])
    before = lh.load("fw.wide").current_snapshot().snapshot_id
    with pytest.raises(DeleteFilesError, match=r"Table fw\.wide: .*Widening a column"):
        lh.write(spark.createDataFrame([(2**40, "US")], "n long, country string"), "fw.wide")
    t = lh.load("fw.wide")
    assert t.current_snapshot().snapshot_id == before and str(t.schema().find_field("n").field_type) == "int"


def test_cli_repair_explains_the_refusal_and_applies_deletes(lh, spark, warehouse):
    from .test_cli import run

    model = start(lh, spark, "fw.cli")
    t = lh.load("fw.cli")
    de = next(f for f in fw.data_files(t) if "country=DE" in f.file_path)  # ids 0,2,4,6,8
    fw.commit_deletes(t, [fw.position_deletes(t, de, [4])])
    del model[8]
    refused = run("repair", "fw.cli", warehouse=warehouse, check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "Delta cannot mirror Iceberg" in refused.stderr and "--apply-deletes" in refused.stderr
    verify = run("verify", "fw.cli", warehouse=warehouse, check=False)
    assert verify.returncode == 1 and "position-delete" in verify.stdout
    # In process (click's runner), so the command reuses the test session's Spark instead of starting a JVM.
    from click.testing import CliRunner

    from lakehouse_assets.cli import cli

    done = CliRunner().invoke(cli, ["--warehouse", warehouse, "repair", "fw.cli", "--apply-deletes"], catch_exceptions=False)
    assert done.exit_code == 0
    assert "fw.cli: applied 1 delete file(s): 1 row(s) removed, 1 data file(s) rewritten" in done.output
    run("verify", "fw.cli", warehouse=warehouse)
    assert sorted(r["id"] for r in lh.read(spark, "fw.cli").collect()) == sorted(model)


def test_a_foreign_data_file_outside_the_table_root_is_refused(lh, spark, tmp_path):
    import pyarrow.parquet as pq

    start(lh, spark, "fw.out")
    before = delta_version(lh, "fw.out")
    t = lh.load("fw.out")
    outside = tmp_path / "elsewhere" / "country=US" / "f.parquet"
    outside.parent.mkdir(parents=True)
    pq.write_table(arrow(t, [{"id": 77, "name": "o", "country": "US"}]), outside)
    t.add_files([f"file://{outside}"])  # Iceberg may reference any URI; a Delta log only files under its root
    with pytest.raises(MirrorRefused, match=r"Table fw\.out: .*1 data file\(s\) lie outside the table root"):
        lh.repair("fw.out")
    assert delta_version(lh, "fw.out") == before
    report = lh.verify("fw.out")
    assert not report["agree"] and any("live only in Iceberg" in d for d in report["differences"])

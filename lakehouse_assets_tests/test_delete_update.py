"""DELETE and UPDATE by condition: every reader of both formats agrees after each, with the change feed, time travel and
the refusals a user meets (unknown column, not SQL, wrong type, append-only Delta), on copy-on-write and merge-on-read."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import Lakehouse, TableOptions
from lakehouse_assets.core.contracts.model import Contract
from lakehouse_assets.core.errors import InputError, MirrorRefused, SchemaError
from lakehouse_assets.core.write.condition import _pruning

from .conftest import assert_all_readers_agree, assert_the_deep_check_finds_planted_change_data, rows_of

pytestmark = pytest.mark.smoke

T = "db.people"
COLUMNS = ("id", "name", "day", "amount", "status")


def _as_read(rows) -> list[tuple]:
    """`rows` (tuples in COLUMNS order) as the readers' helper gives them: columns sorted by name, values normalised."""
    return rows_of([dict(zip(COLUMNS, r)) for r in rows])


def _people(spark, lh: Lakehouse, mode: str = "copy-on-write", rows=None):
    rows = rows or [(i, f"p{i}", dt.date(2024, 1, 1 + i % 3), i * 10, "open") for i in range(1, 31)]
    df = spark.createDataFrame(rows, "id long, name string, day date, amount int, status string")
    lh.write(df.repartition(3), T, "overwrite", partition_by=["day"], table=TableOptions(properties={p: mode for p in ("write.delete.mode", "write.update.mode")}))
    return rows


def _changes(lh, spark, start, end=None):
    rows = lh.changes(T, start, end, spark=spark).select("id", "amount", "status", "_change_type").collect()
    return sorted((r["id"], r["amount"], r["status"], r["_change_type"]) for r in rows)


def _delta_feed(lh, version):
    delta = DeltaTable(lh.load(T).location()[len("file://"):])
    rows = pa.table(delta.load_cdf(starting_version=version, ending_version=version).read_all()).to_pylist()
    return sorted((r["id"], r["amount"], r["status"], r["_change_type"]) for r in rows)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_delete_and_update_by_condition_agree_in_every_reader(spark, lh, duck, mode):
    rows = _people(spark, lh, mode)
    before = lh.load(T).current_snapshot().snapshot_id

    deleted = lh.delete(T, "id % 7 = 0 AND name <> 'p14'")
    expected = [r for r in rows if not (r[0] % 7 == 0 and r[1] != "p14")]
    assert deleted.rows_removed == 3 and deleted.delta_version is not None
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    assert _changes(lh, spark, before) == sorted((r[0], r[3], r[4], "delete") for r in rows if r not in expected)
    assert _delta_feed(lh, deleted.delta_version) == sorted((r[0], r[3], r[4], "delete") for r in rows if r not in expected)

    after_delete = lh.load(T).current_snapshot().snapshot_id
    updated = lh.update(T, {"status": "'closed'", "amount": "amount + 1"}, "day = '2024-01-02' AND amount > 100")
    hit = [r for r in expected if r[2] == dt.date(2024, 1, 2) and r[3] > 100]
    assert updated.rows_written == len(hit) > 0
    expected = [(i, n, d, a + 1, "closed") if (i, n, d, a, s) in hit else (i, n, d, a, s) for i, n, d, a, s in expected]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    pre = [(r[0], r[3], r[4], "update_preimage") for r in hit]
    post = [(r[0], r[3] + 1, "closed", "update_postimage") for r in hit]
    assert _changes(lh, spark, after_delete) == sorted(pre + post)
    assert _delta_feed(lh, updated.delta_version) == sorted(pre + post)
    summary = lh.load(T).snapshot_by_id(updated.iceberg_snapshot_id).summary
    assert summary["lakehouse.operation"] == "update" and summary["lakehouse.condition"] == "day = '2024-01-02' AND amount > 100"

    # An update that leaves every matched row as it was changes no row in either feed.
    unchanged = lh.update(T, {"status": "'closed'"}, "status = 'closed'")
    assert unchanged.rows_written == len(hit)
    assert _changes(lh, spark, updated.iceberg_snapshot_id) == [] and _delta_feed(lh, unchanged.delta_version) == []
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))

    # Time travel in both formats still sees the rows as they were.
    assert_all_readers_agree(lh, spark, duck, T, _as_read(rows), snapshot_id=before, delta_version=deleted.delta_version - 1)
    # A merge-on-read table deleted by position; a copy-on-write one rewrote files.
    if mode == "merge-on-read":
        assert int(summary.get("total-position-deletes", "0")) > 0
    else:
        assert int(summary.get("total-position-deletes", "0")) == 0


def test_a_delete_whose_condition_covers_whole_files_reads_none(spark, lh, duck):
    rows = _people(spark, lh)
    result = lh.delete(T, "day = '2024-01-01'")  # whole partitions: dropped by their statistics
    expected = [r for r in rows if r[2] != dt.date(2024, 1, 1)]
    assert result.files_added == 0 and result.files_removed > 0
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))


def _rewrites_by_position(monkeypatch) -> list[int]:
    """The files each copy-on-write delete handed to the pyarrow rewrite (core/write/position_rewrite.py)."""
    from lakehouse_assets.core.write import position_rewrite

    calls, real = [], position_rewrite.rewrite_without
    monkeypatch.setattr(position_rewrite, "rewrite_without", lambda spark, target, files, *a, **kw: calls.append(len(files)) or real(spark, target, files, *a, **kw))
    return calls


def test_a_copy_on_write_delete_rewrites_each_file_by_position_and_through_spark_alike(spark, lh, duck, monkeypatch):
    """Each file holding a match is rewritten once without it by pyarrow tasks, one file for one, and a file left
    with no row is dropped; above the positions' bound Spark rewrites the files instead, with the same rows and feed."""
    from lakehouse_assets.core.write import position_rewrite

    rows = _people(spark, lh)
    calls = _rewrites_by_position(monkeypatch)
    first = lh.delete(T, "id % 7 = 0 AND name <> 'p14'")
    assert calls == [first.files_removed] and first.files_added == first.files_removed > 0
    expected = [r for r in rows if not (r[0] % 7 == 0 and r[1] != "p14")]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    assert _delta_feed(lh, first.delta_version) == sorted((r[0], r[3], r[4], "delete") for r in rows if r not in expected)

    # Files dropped whole by their statistics (the day) and a file rewritten (id 2) in one delete: one feed of both.
    mixed = lh.delete(T, "day = '2024-01-01' OR id = 2")
    gone = [r for r in expected if r[2] == dt.date(2024, 1, 1) or r[0] == 2]
    assert calls[-1] == 1 and mixed.files_removed > 1 and mixed.files_added == 1
    expected = [r for r in expected if r not in gone]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    assert _delta_feed(lh, mixed.delta_version) == sorted((r[0], r[3], r[4], "delete") for r in gone)

    # Every row of the day's files matches, which no statistic can tell (concat): read, and rewritten to nothing.
    whole_day = lh.delete(T, "concat(name, '') = name AND day = '2024-01-03'")
    assert calls[-1] == whole_day.files_removed > 0 and whole_day.files_added == 0
    gone = [r for r in expected if r[2] == dt.date(2024, 1, 3)]
    expected = [r for r in expected if r not in gone]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    assert _delta_feed(lh, whole_day.delta_version) == sorted((r[0], r[3], r[4], "delete") for r in gone)

    monkeypatch.setattr(position_rewrite, "MAX_POSITIONS", 1)  # more matched rows than that: no position leaves Spark
    before = len(calls)
    spark_side = lh.delete(T, "amount % 20 = 0")
    assert len(calls) == before and spark_side.files_removed > 0
    dropped = [r for r in expected if r[3] % 20 == 0]
    assert spark_side.rows_removed == len(dropped) > 1
    expected = [r for r in expected if r not in dropped]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    assert _delta_feed(lh, spark_side.delta_version) == sorted((r[0], r[3], r[4], "delete") for r in dropped)


def test_the_deep_check_finds_a_wrong_or_missing_row_in_the_change_data_the_delete_tasks_write(spark, lh, monkeypatch):
    """The change data of a position delete comes from its pyarrow tasks (rows left out of rewritten files, every row
    of files dropped whole): `verify --deep` recomputes it from the files the snapshot replaced, and a row changed,
    dropped or added in one of those cdc files is a difference, each alone."""
    from .test_delta_change_feed import referenced_cdc_files

    _people(spark, lh)
    calls = _rewrites_by_position(monkeypatch)
    result = lh.delete(T, "day = '2024-01-01' OR id = 2")  # whole files of the day and one file rewritten by position
    assert calls == [1] and result.files_removed > 1
    report = lh.verify(T, deep=True)
    assert report["agree"], report["differences"]
    assert report["content"]["change_data"]["cdc_rows"] == result.rows_removed == 11
    root = lh.load(T).location().removeprefix("file://")
    path = os.path.join(root, sorted(referenced_cdc_files(root) - _cdc_before(root, result.delta_version))[0])
    assert_the_deep_check_finds_planted_change_data(lh, T, path, "name")


def _cdc_before(root: str, version: int) -> set[str]:
    """The cdc files the Delta versions before `version` reference."""
    import json

    log = os.path.join(root, "_delta_log")
    return {json.loads(line)["cdc"]["path"] for v in range(version) if os.path.exists(p := os.path.join(log, f"{v:020d}.json"))
            for line in open(p) if '"cdc"' in line}


def _rewrites(monkeypatch) -> list[tuple[int, bool]]:
    """Each call of the copy-on-write update's rewrite: (the files it was given, whether one job scanned and rewrote)."""
    from lakehouse_assets.core.write import position_rewrite

    calls, real = [], position_rewrite.rewrite_with_updates
    monkeypatch.setattr(position_rewrite, "rewrite_with_updates", lambda spark, target, files, positions, *a: calls.append((len(files), positions is None)) or real(spark, target, files, positions, *a))
    return calls


def test_a_copy_on_write_update_rewrites_each_file_with_its_new_values_unless_rows_change_partition(spark, lh, duck, monkeypatch):
    rows = _people(spark, lh)
    calls = _rewrites(monkeypatch)
    updated = lh.update(T, {"status": "'closed'", "amount": "amount + 1"}, "id % 4 = 0")
    assert calls == [(updated.files_removed, True)] and updated.files_added == updated.files_removed > 0  # one file for one, one job
    hit = [r for r in rows if r[0] % 4 == 0]
    expected = [(i, n, d, a + 1, "closed") if i % 4 == 0 else (i, n, d, a, s) for i, n, d, a, s in rows]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    pre, post = [(r[0], r[3], r[4], "update_preimage") for r in hit], [(r[0], r[3] + 1, "closed", "update_postimage") for r in hit]
    assert _delta_feed(lh, updated.delta_version) == sorted(pre + post)

    # Setting the partition's column moves the row to another partition: Spark rewrites it.
    moved = lh.update(T, {"day": "DATE'2024-01-05'"}, "id = 5")
    assert len(calls) == 1 and moved.rows_written == 1
    expected = [(i, n, dt.date(2024, 1, 5), a, s) if i == 5 else (i, n, d, a, s) for i, n, d, a, s in expected]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))


def test_a_copy_on_write_update_in_one_job_leaves_files_without_a_match_and_commits_nothing_when_none_matches(spark, lh, duck, monkeypatch):
    """The scan feeds the rewrite's tasks directly (no count, no positions on the driver): a file whose statistics
    admit the condition but which holds no matching row gets no task work and stays; no match at all, no commit."""
    rows = _people(spark, lh)
    files = {t.file.file_path for t in lh.load(T).scan().plan_files()}
    calls = _rewrites(monkeypatch)
    updated = lh.update(T, {"status": "'vip'"}, "name = 'p7'")  # the name bounds of several files admit 'p7'; one holds it
    (given, one_job), = calls
    assert one_job and given > 1 and updated.rows_written == 1 and updated.files_removed == updated.files_added == 1
    left = {t.file.file_path for t in lh.load(T).scan().plan_files()}
    assert len(files - left) == 1 and len(files & left) == len(files) - 1
    expected = [(i, n, d, a, "vip" if i == 7 else s) for i, n, d, a, s in rows]
    assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
    assert _delta_feed(lh, updated.delta_version) == [(7, 70, "open", "update_preimage"), (7, 70, "vip", "update_postimage")]

    head, version = lh.load(T).current_snapshot().snapshot_id, DeltaTable(lh.load(T).location()[len("file://"):]).version()
    nothing = lh.update(T, {"status": "'vip'"}, "name = 'nobody'")
    assert nothing.iceberg_snapshot_id == head and nothing.rows_written == 0
    assert DeltaTable(lh.load(T).location()[len("file://"):]).version() == version
    root = lh.load(T).location()[len("file://"):]
    assert not [f for f in os.listdir(os.path.join(root, "_change_data"))
                if os.path.getmtime(os.path.join(root, "_change_data", f)) > os.path.getmtime(os.path.join(root, "_delta_log", f"{version:020d}.json"))]


TYPED = """SELECT id, CAST(id % 2 AS INT) AS part, named_struct('a', id, 'b', CAST(id AS STRING)) AS s,
                  CASE WHEN id % 3 = 0 THEN double('NaN') ELSE id * 1.5 END AS x, CASE WHEN id % 4 = 0 THEN NULL ELSE 'n' END AS note,
                  TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id AS INT), 0, 0) AS at,
                  CAST(id AS DECIMAL(10, 2)) AS price FROM range(24)"""


def test_a_copy_on_write_update_by_position_keeps_each_type_and_a_renamed_column_and_feeds_changed_rows_only(spark, lh, monkeypatch):
    """The tasks put Spark's new values into the rows they read: a struct, NaN, NULL, a timestamp and a decimal come
    back as written, under column mapping after a rename; rows whose values stay (NaN as NaN, NULL as NULL) are no
    change in the feed, as Spark's null-safe comparison says."""
    from lakehouse_assets.core.formats.delta import column_mapping as cm
    from lakehouse_assets.core.write import position_rewrite

    name = "db.typed"
    lh.write(spark.sql(TYPED).repartition(2), name, partition_by=["part"], table=TableOptions(properties={cm.MODE: "name"}))
    lh.alter(name, rename={"note": "remark"})
    calls = _rewrites(monkeypatch)

    same = lh.update(name, {"x": "x", "remark": "remark", "s": "s"}, "id < 12")  # NaN stays NaN, NULL NULL, a struct itself
    # `s` is required (a named_struct is never NULL): the new rows are checked first, so the scan is kept for the rewrite.
    assert calls == [(same.files_removed, False)] and same.rows_written == 12
    assert _cdc_rows(lh, name, same.delta_version) == []

    sets = {"s": "named_struct('a', s.a + 100, 'b', upper(s.b))", "remark": "concat('r', id)", "at": "at + INTERVAL 1 DAY",
            "price": "CAST(price * 2 AS DECIMAL(10, 2))", "x": "CASE WHEN isnan(x) THEN 0.0 ELSE x END"}
    changed = lh.update(name, sets, "id % 5 = 0")
    assert len(calls) == 2 and changed.rows_written == 5
    expected = spark.sql(TYPED).withColumnRenamed("note", "remark").selectExpr(
        "id", "part", *[f"CASE WHEN id % 5 = 0 THEN {sets[c]} ELSE {c} END AS {c}" if c in sets else c for c in ("s", "x", "remark", "at", "price")])
    ours = lh.read(spark, name).select(*expected.columns)
    assert ours.exceptAll(expected).count() == 0 and expected.exceptAll(ours).count() == 0
    feed = _cdc_rows(lh, name, changed.delta_version)
    assert sorted((r["id"], r["_change_type"]) for r in feed) == sorted((i, t) for i in (0, 5, 10, 15, 20) for t in ("update_preimage", "update_postimage"))
    post = {r["id"]: r for r in feed if r["_change_type"] == "update_postimage"}
    assert post[15]["s"] == {"a": 115, "b": "15"} and post[15]["remark"] == "r15" and post[15]["x"] == 0.0 and str(post[15]["price"]) == "30.00"
    report = lh.verify(name, deep=True)  # both formats' rows, and the change data against the files replaced
    assert report["agree"] and report["content"]["change_data"]["cdc_rows"] == 10, report


def _cdc_rows(lh, name: str, version: int) -> list[dict]:
    """The rows of the cdc files of Delta `version`, by the columns' names (delta-rs reads no change feed of a
    column-mapped table: the files, read here, name columns physically)."""
    import pyarrow.parquet as pq

    from lakehouse_assets.core.formats.delta import column_mapping as cm
    from lakehouse_assets.core.formats.delta.log_commit import cdc_actions

    table = lh.load(name)
    root = table.location().removeprefix("file://")
    names = {physical: table.schema().find_field(field_id).name for field_id, physical in cm.physical_names(DeltaTable(root)).items()}
    files = [pq.read_table(os.path.join(root, a["path"])) for a in cdc_actions(lh.storage, table.location(), version)]
    return [{names.get(k, k): v for k, v in r.items()} for f in files for r in f.to_pylist()]


def test_a_copy_on_write_delete_of_files_of_an_older_partition_spec_rewrites_them_through_spark(spark, lh, monkeypatch):
    name = "db.old_spec"
    lh.write(spark.sql("SELECT id, CAST(id % 2 AS INT) AS part, CONCAT('n', id % 3) AS name FROM range(12)").coalesce(1), name,
             partition_by=["part"], table=TableOptions(formats=["iceberg"]))
    with lh.load(name).update_spec() as update:  # as another engine evolves it: the old files stay in the old spec
        update.add_identity("name")
    calls = _rewrites_by_position(monkeypatch)
    result = lh.delete(name, "id % 5 = 0")
    assert calls == [] and result.rows_removed == 3  # not of the current spec: Spark rewrote them
    table = lh.load(name)
    assert sorted(r.id for r in lh.read(spark, name).collect()) == [i for i in range(12) if i % 5]
    assert {t.file.spec_id for t in table.scan().plan_files()} == {table.spec().spec_id}  # new files in the new spec


def test_nothing_matched_commits_nothing_and_write_id_makes_it_idempotent(spark, lh):
    _people(spark, lh)
    head = lh.load(T).current_snapshot().snapshot_id
    assert lh.delete(T, "id > 1000").iceberg_snapshot_id == head
    first = lh.delete(T, "id = 3", write_id="erase-3")
    again = lh.delete(T, "id = 3", write_id="erase-3")
    assert again.duplicate_of_earlier_write and again.iceberg_snapshot_id == first.iceberg_snapshot_id
    assert len(lh.history(T)) == 2


def test_bad_input_is_refused_naming_table_and_column_and_nothing_changes(spark, lh):
    _people(spark, lh)
    head = lh.load(T).current_snapshot().snapshot_id
    with pytest.raises(InputError, match=r"db\.people.*nope"):
        lh.delete(T, "nope = 1")
    with pytest.raises(InputError, match=r"db\.people.*not valid Spark SQL"):
        lh.delete(T, "id = = 1")
    with pytest.raises(InputError, match=r"not a boolean"):
        lh.delete(T, "amount + 1")
    with pytest.raises(InputError, match=r"rand\(\)"):
        lh.delete(T, "rand() < 0.5")
    with pytest.raises(InputError, match=r"column 'missing'"):
        lh.update(T, {"missing": "1"}, "id = 1")
    with pytest.raises(SchemaError, match=r"column 'amount' \(int\).*string.*CAST"):
        lh.update(T, {"amount": "'many'"}, "id = 1")
    assert lh.load(T).current_snapshot().snapshot_id == head


def test_an_append_only_delta_table_refuses_a_delete_and_an_update(spark, lh, tmp_path):
    from deltalake import write_deltalake

    root = str(tmp_path / "append_only")
    write_deltalake(root, pa.table({"id": [1, 2], "name": ["a", "b"]}), configuration={"delta.appendOnly": "true"})
    lh.import_table(T, root)
    head, version = lh.load(T).current_snapshot().snapshot_id, DeltaTable(root).version()
    with pytest.raises(MirrorRefused, match=r"db\.people: its Delta table sets delta\.appendOnly=true.*no delete.*Nothing was changed"):
        lh.delete(T, "id = 1")
    with pytest.raises(MirrorRefused, match=r"db\.people: its Delta table sets delta\.appendOnly=true.*no update"):
        lh.update(T, {"name": "'z'"}, "id = 1")
    assert lh.load(T).current_snapshot().snapshot_id == head and DeltaTable(root).version() == version


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_an_update_that_breaks_the_contract_is_refused_whole(spark, lh, mode):
    df = spark.createDataFrame([(1, 5), (2, 7)], "id long, amount int")
    properties = {"write.update.mode": mode}
    lh.write(df, T, table=TableOptions(contract=Contract(rules={"positive": "amount > 0"}, not_null=["amount"]), properties=properties))
    with pytest.raises(InputError, match=r"rule 'positive'.*1 row"):
        lh.update(T, {"amount": "amount - 6"}, "id = 1")
    assert sorted(r["amount"] for r in lh.read(spark, T).collect()) == [5, 7]
    lh.update(T, {"amount": "amount * 2"}, "id = 2")
    assert sorted(r["amount"] for r in lh.read(spark, T).collect()) == [5, 14]


def test_a_delete_on_a_branch_leaves_main_until_published(spark, lh, duck):
    rows = _people(spark, lh)
    lh.delete(T, "id <= 10", branch="audit")
    assert lh.read(spark, T).count() == len(rows)
    assert lh.read(spark, T, branch="audit").count() == len(rows) - 10
    lh.publish(T, "audit", spark=spark)
    assert_all_readers_agree(lh, spark, duck, T, _as_read([r for r in rows if r[0] > 10]))


def test_a_second_delete_on_merge_on_read_does_not_count_rows_twice(spark, lh, duck):
    rows = _people(spark, lh, "merge-on-read")
    first = lh.delete(T, "id <= 5")
    result = lh.delete(T, "id <= 8")  # rows 1-5 still sit in the files, hidden: matched again, not deleted again
    assert result.rows_removed == 3
    assert_all_readers_agree(lh, spark, duck, T, _as_read([r for r in rows if r[0] > 8]))
    assert _changes(lh, spark, first.iceberg_snapshot_id) == _delta_feed(lh, result.delta_version) == sorted((i, i * 10, "open", "delete") for i in (6, 7, 8))
    # An update whose condition also matches hidden rows, and one that matches none: each row's images once.
    overlapping = lh.update(T, {"status": "'x'"}, "id <= 10")
    assert overlapping.rows_written == 2 and _delta_feed(lh, overlapping.delta_version) == sorted(
        [(i, i * 10, "open", "update_preimage") for i in (9, 10)] + [(i, i * 10, "x", "update_postimage") for i in (9, 10)])
    apart = lh.update(T, {"status": "'y'"}, "id >= 29")
    assert apart.rows_written == 2 and _delta_feed(lh, apart.delta_version) == sorted(
        [(i, i * 10, "open", "update_preimage") for i in (29, 30)] + [(i, i * 10, "y", "update_postimage") for i in (29, 30)])
    assert lh.verify(T)["agree"]


def test_merge_on_read_deletes_and_updates_read_what_they_need_and_leave_hidden_rows_alone(spark, tmp_path, duck, monkeypatch):
    """A merge-on-read delete scans the columns its condition names for the positions, and with the change feed its
    tasks write the rows at them (core/write/delete_scan.py); an update's tasks write its new rows and their images
    (core/write/position_updates.py). Rows a delete file hides already are neither deleted nor updated again."""
    from lakehouse_assets.core.write import position_updates
    from lakehouse_assets.core.write.target import WriteTarget

    reads, real_read = [], WriteTarget.read
    monkeypatch.setattr(WriteTarget, "read", lambda self, spark, files, **kw: reads.append(kw.get("columns")) or real_read(self, spark, files, **kw))
    written, real_write = [], position_updates.write_new_rows
    monkeypatch.setattr(position_updates, "write_new_rows", lambda *a: (lambda out: written.append(sum(map(len, out.values()))) or out)(real_write(*a)))
    for feed in ("true", "false"):
        lh = Lakehouse(warehouse=str(tmp_path / feed), delta_configuration={"delta.enableChangeDataFeed": feed})
        rows = _people(spark, lh, "merge-on-read")
        first = lh.delete(T, "id <= 5")
        reads.clear()
        result = lh.delete(T, "amount <= 80")  # ids 1 to 8, of which 1 to 5 are hidden already
        assert result.rows_removed == 3 and reads == [["amount"]]
        assert_all_readers_agree(lh, spark, duck, T, _as_read([r for r in rows if r[0] > 8]))
        if feed == "true":
            assert _changes(lh, spark, first.iceberg_snapshot_id) == _delta_feed(lh, result.delta_version) == sorted((i, i * 10, "open", "delete") for i in (6, 7, 8))
            _the_deep_check_finds_planted_change_data_of(lh, result.delta_version)
        assert lh.verify(T)["agree"]

        # An update: its tasks write the new rows and their images (position_updates.py), hidden rows left alone.
        written.clear()
        updated = lh.update(T, {"status": "'x'", "amount": "amount + 1"}, "amount <= 100")  # ids 9 and 10 of 1 to 10
        assert updated.rows_written == 2 and written == [2]
        expected = [(i, n, d, a + 1, "x") if i in (9, 10) else (i, n, d, a, s) for i, n, d, a, s in rows if i > 8]
        assert_all_readers_agree(lh, spark, duck, T, _as_read(expected))
        if feed == "true":
            assert _delta_feed(lh, updated.delta_version) == sorted(
                [(i, i * 10, "open", "update_preimage") for i in (9, 10)] + [(i, i * 10 + 1, "x", "update_postimage") for i in (9, 10)])
            _the_deep_check_finds_planted_change_data_of(lh, updated.delta_version)
        assert lh.verify(T)["agree"]


def _the_deep_check_finds_planted_change_data_of(lh, version: int) -> None:
    from .test_delta_change_feed import referenced_cdc_files

    root = lh.load(T).location().removeprefix("file://")
    written = sorted(referenced_cdc_files(root) - _cdc_before(root, version))
    assert written
    assert_the_deep_check_finds_planted_change_data(lh, T, os.path.join(root, written[0]), "name")


@pytest.mark.parametrize(
    "text, prunes, strict",
    [
        ("id = 5", True, True),
        ("id = 1.5", False, False),  # pyiceberg would bind it to id = 2
        ("id < 99999999999999999999", False, False),  # folded to always true, nulls included
        ("id <> 3", True, False),  # Iceberg's != keeps nulls: never a metadata-only delete
        ("name like 'a_b%'", False, False),  # LIKE's _ is a wildcard, a plain character to pyiceberg
        ("lower(name) = 'a'", False, False),
        ("id = 5 and amount * 2 > 3", True, False),  # the term pyiceberg reads prunes; the other is Spark's alone
        ("name = 'it''s'", False, False),  # Spark reads 'it''s' as 'its', pyiceberg as "it's"
        ("day = DATE'2024-01-01' and id = 5", True, True),  # Spark's typed date literal, read as the date it names
        ("day between date '2024-01-01' and DATE'2024-01-03'", True, True),
        ("ts >= DATE'2024-01-01'", False, False),  # Spark makes it a timestamp in the session's time zone
        ("day = DATE'2024-01-01' or id = 3", False, False),  # a term mixing it with other columns: Spark's alone
    ],
)
def test_conditions_prune_only_where_pyiceberg_reads_them_as_spark_does(text, prunes, strict):
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, IntegerType, LongType, NestedField, StringType, TimestamptzType

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "name", StringType()), NestedField(3, "amount", IntegerType()),
                    NestedField(4, "day", DateType()), NestedField(5, "ts", TimestamptzType()))
    prune, exact, null_rejecting = _pruning(text, schema)
    assert (prune != AlwaysTrue()) == prunes
    assert (exact and null_rejecting) == strict



def test_the_dagster_jobs_delete_and_update_with_the_condition_as_config(spark, lh, dagster_resources):
    from lakehouse_assets.dagster.row_changes import delete_run_config, lakehouse_delete_job, lakehouse_update_job, update_run_config

    rows = _people(spark, lh)
    resources = {"lakehouse": dagster_resources["lakehouse"], "pyspark": dagster_resources["pyspark"]}
    updated = lakehouse_update_job.execute_in_process(run_config=update_run_config(T, {"status": "'closed'"}, "id <= 4"), resources=resources)
    deleted = lakehouse_delete_job.execute_in_process(run_config=delete_run_config(T, "id > 20", write_id="tidy"), resources=resources)
    assert updated.success and deleted.success
    (materialized,) = deleted.asset_materializations_for_node("lakehouse_delete")
    assert materialized.asset_key.path == ["db", "people"] and materialized.metadata["rows"].value == 10
    assert lh.history(T)[0]["writer"] == {"dagster_run_id": deleted.run_id}
    assert sorted((r["id"], r["status"]) for r in lh.read(spark, T).collect()) == [(r[0], "closed" if r[0] <= 4 else "open") for r in rows if r[0] <= 20]
    assert lh.verify(T)["agree"]

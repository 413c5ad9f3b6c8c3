"""A Delta log followed commit by commit (core/formats/delta/followed_log.py) says what delta-rs says of the same log:
its version, the mirror's transaction version, the newest commits, the live totals and, once metadata changes, the
schema, whoever wrote the commits, whether it was read by delta-rs or from its checkpoint by pyarrow
(checkpoint_state.py); and a write followed that way touches no live file's entry."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets import VerifiedPair
from lakehouse_assets.core.formats.delta import followed_log
from lakehouse_assets.core.formats.delta.followed_log import FollowedLog
from lakehouse_assets.core.formats.delta.kept_logs import KEPT
from lakehouse_assets.core.properties import DELTA_APP_ID


def _rows(ids) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"n{i}" for i in ids]})


def _same_as_delta_rs(followed: FollowedLog, location: str) -> None:
    fresh = DeltaTable(location)
    adds = pa.table(fresh.get_add_actions(flatten=False))
    totals = followed.live_totals()
    assert followed.version() == fresh.version()
    assert followed.transaction_version(DELTA_APP_ID) == fresh.transaction_version(DELTA_APP_ID)
    assert (totals.files, totals.rows, totals.files_without_row_count) == (adds.num_rows, pc.sum(adds.column("num_records")).as_py(), 0)
    assert [(c["version"], c.get("operation")) for c in followed.history()] == [(c["version"], c.get("operation")) for c in fresh.history()]
    assert followed.schema() == fresh.schema()


def _lookups(monkeypatch) -> list[int]:
    """The sizes of the value sets the followed log looks up among its base's files (each a scan of all of them)."""
    looked_up: list[int] = []
    real = followed_log.pc.is_in
    monkeypatch.setattr(followed_log.pc, "is_in", lambda values, value_set: looked_up.append(len(value_set)) or real(values, value_set=value_set))
    return looked_up


def test_a_followed_log_says_what_a_fresh_read_says_after_appends_overwrites_and_deletes(lh, monkeypatch):
    """The mirror's remove actions carry their file's row count (numRecords alone: no column value is written), so the
    live totals of a log followed across overwrites and deletes never look the removed files up among the base's."""
    lh.write(_rows(range(10)), "fl.t")
    location = lh.table_location("fl.t")
    followed = lh.mirror(lh.load("fl.t")).follow()
    lh.write(_rows(range(10, 20)), "fl.t")
    lh.write(_rows(range(20)), "fl.t", mode="overwrite")
    lh.delete("fl.t", "id < 3")
    removes = [json.loads(line)["remove"] for v in range(DeltaTable(location).version() + 1)
               for line in open(f"{location.removeprefix('file://')}/_delta_log/{v:020d}.json") if '"remove"' in line]
    assert removes and all(json.loads(r["stats"]) in ({"numRecords": 10}, {"numRecords": 20}) for r in removes), removes
    looked_up = _lookups(monkeypatch)
    followed.update_incremental()
    assert followed.base_version() < followed.version(), "the commits were read from their files, not merged by delta-rs"
    _same_as_delta_rs(followed, location)
    assert followed.live_totals().rows == 17
    assert looked_up == []


def test_removes_without_a_row_count_are_looked_up_among_the_bases_files(lh, monkeypatch):
    """Another writer's removes may carry no statistics: those files' rows come from the base's adds, exactly."""
    lh.write(_rows(range(10)), "fl.u")
    lh.write(_rows(range(10, 20)), "fl.u")
    location = lh.table_location("fl.u")
    followed = lh.mirror(lh.load("fl.u")).follow()
    DeltaTable(location).delete("id < 10")  # delta-rs's remove of the first file carries no statistics
    looked_up = _lookups(monkeypatch)
    followed.update_incremental()
    assert followed.live_totals().rows == 10
    assert looked_up == [1]  # the one removed file, looked up
    _same_as_delta_rs(followed, location)


def test_a_base_with_files_without_a_row_count_looks_up_every_removed_file(lh, tmp_path, monkeypatch):
    """An imported log whose adds record no row count: removing such a file must take it out of the files without one,
    which only its add in the base can say, so every removed file is looked up, counted or not."""
    from .test_import_statistics import rewrite_stats

    root = tmp_path / "no_counts"
    write_deltalake(str(root), _rows(range(5)))
    write_deltalake(str(root), _rows(range(5, 10)), mode="append")
    rewrite_stats(root, lambda add, stats: None, versions={0})
    lh.import_table("fl.n", str(root))
    followed = lh.mirror(lh.load("fl.n")).follow()
    assert followed.live_totals().files_without_row_count == 1
    lh.delete("fl.n", "id < 5")  # the mirror's remove of the file without a row count carries its count
    looked_up = _lookups(monkeypatch)
    followed.update_incremental()
    totals = followed.live_totals()
    assert looked_up == [1] and (totals.files, totals.rows, totals.files_without_row_count) == (1, 5, 0)
    _same_as_delta_rs(followed, str(root))


def test_a_commit_that_changes_the_schema_is_merged_and_the_schema_is_current(lh):
    lh.write(_rows(range(5)), "fl.s")
    location = lh.table_location("fl.s")
    followed = lh.mirror(lh.load("fl.s")).follow()
    lh.write(pa.table({"id": pa.array([7], pa.int64()), "name": ["x"], "extra": [1.5]}), "fl.s")
    followed.update_incremental()
    assert "extra" in [f.name for f in followed.schema().fields]
    _same_as_delta_rs(followed, location)


def test_a_foreign_writers_commits_are_followed_too(lh):
    lh.write(_rows(range(5)), "fl.f")
    location = lh.table_location("fl.f")
    followed = lh.mirror(lh.load("fl.f")).follow()
    write_deltalake(location, _rows(range(100, 103)), mode="append")
    followed.update_incremental()
    _same_as_delta_rs(followed, location)
    assert followed.history(1)[0]["version"] == DeltaTable(location).version()


def test_writes_and_their_checks_in_one_process_never_merge_the_log_with_delta_rs(lh, monkeypatch):
    """The cost of a write and its check follows the change: delta-rs's update over every live file never runs."""
    lh.write(_rows(range(10)), "fl.w")
    report = lh.verify("fl.w")
    pair = VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])
    merged: list[int] = []
    original = FollowedLog._merge
    monkeypatch.setattr(FollowedLog, "_merge", lambda self: (merged.append(self.version()), original(self)))
    for start in (10, 20, 30):
        lh.write(_rows(range(start, start + 10)), "fl.w")
        report = lh.verify("fl.w", since=pair)
        assert report["agree"], report["differences"]
        assert report["compared"].startswith("what changed since")
        pair = VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])
    assert merged == []
    assert report["delta_files"] == report["iceberg_files"] and report["delta_rows"] == 40
    KEPT.clear()


def test_a_tail_longer_than_its_bound_is_merged_by_delta_rs(lh, monkeypatch):
    monkeypatch.setattr(followed_log, "MAX_TAIL", 2)
    lh.write(_rows(range(3)), "fl.m")
    location = lh.table_location("fl.m")
    followed = lh.mirror(lh.load("fl.m")).follow()
    for start in (10, 20, 30):
        lh.write(_rows(range(start, start + 3)), "fl.m")
    followed.update_incremental()
    assert followed.version() - followed.base_version() <= 2
    _same_as_delta_rs(followed, location)


def test_a_commit_touching_more_files_than_the_tail_holds_is_merged_and_the_totals_stay_exact(lh, monkeypatch):
    """An import or a rewrite of the whole table lists every file: the tail would make each check walk them all."""
    monkeypatch.setattr(followed_log, "MAX_TAIL_FILES", 2)
    lh.write(_rows(range(3)), "fl.b")
    location = lh.table_location("fl.b")
    followed = lh.mirror(lh.load("fl.b")).follow()
    lh.write(_rows(range(10, 12)), "fl.b")
    followed.update_incremental()
    assert followed.base_version() < followed.version(), "a small commit stays in the tail"
    lh.write(_rows(range(20, 25)), "fl.b", mode="overwrite")  # removes both files, adds one: past the bound
    followed.update_incremental()
    assert followed.base_version() == followed.version(), "the tail past its bound of files was merged by delta-rs"
    _same_as_delta_rs(followed, location)
    assert followed.live_totals().rows == 5


def test_the_history_of_an_imports_version_decodes_its_commit_info_alone(lh, tmp_path, monkeypatch):
    """An import's version lists every file of the table: reading its commitInfo (a write's foreign-version gate does)
    must not decode them."""
    import pyarrow.parquet as pq

    for part in range(20):
        pq.write_to_dataset(_rows(range(part * 3, part * 3 + 3)), str(tmp_path / "t"), basename_template=f"part-{part}-{{i}}.parquet")
    lh.import_table("fl.i", str(tmp_path / "t"))
    KEPT.clear()
    followed = lh.mirror(lh.load("fl.i")).follow()
    decoded: list[str] = []
    real = json.loads
    monkeypatch.setattr(followed_log.json, "loads", lambda text, *a, **k: (decoded.append(text), real(text, *a, **k))[1])
    history = followed.history()
    monkeypatch.undo()
    assert [c["version"] for c in history] == [1, 0] and len(decoded) <= len(history), decoded
    assert [(c["version"], c.get("operation")) for c in history] == [(c["version"], c.get("operation")) for c in DeltaTable(followed.root_uri).history()]


def test_a_commits_info_is_found_wherever_its_writer_put_it(tmp_path, monkeypatch):
    """Writers put the commitInfo first, and the read stops there; one put last, past the first blocks, is found too."""
    from lakehouse_assets.core.io.storage import StorageConfig

    monkeypatch.setattr(followed_log, "_INFO_BLOCK", 100)
    log = tmp_path / "_delta_log"
    log.mkdir()
    adds = [json.dumps({"add": {"path": f"part-{i}-commitInfo.parquet", "size": 1}}) for i in range(50)]  # the word in a path too
    info = json.dumps({"commitInfo": {"operation": "WRITE", "note": "é" * 40}})
    (log / f"{0:020d}.json").write_text("\n".join([info, *adds]) + "\n", encoding="utf-8")
    (log / f"{1:020d}.json").write_text("\n".join([*adds, info]), encoding="utf-8")  # last, without a final newline
    (log / f"{2:020d}.json").write_text("\n".join(adds) + "\n", encoding="utf-8")
    read = [followed_log.read_commit_info(StorageConfig(), str(tmp_path), v) for v in range(4)]
    assert read == [{"operation": "WRITE", "note": "é" * 40}] * 2 + [{}, None]


def test_a_changed_statistic_in_a_followed_commit_is_still_a_difference(lh):
    """An add that is not the one the mirror derives is compared as Delta readers parse it: a planted wrong max is found."""
    lh.write(_rows(range(10)), "fl.d")
    report = lh.verify("fl.d")
    pair = VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])
    lh.write(_rows(range(10, 20)), "fl.d")
    location = lh.table_location("fl.d")
    commit = f"{location.removeprefix('file://')}/_delta_log/{DeltaTable(location).version():020d}.json"
    lines = [json.loads(line) for line in open(commit, encoding="utf-8").read().splitlines() if line]
    for a in lines:
        if "add" in a:
            stats = json.loads(a["add"]["stats"])
            stats["maxValues"]["id"] = 12
            a["add"]["stats"] = json.dumps(stats)
    with open(commit, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(a) + "\n" for a in lines))
    KEPT.clear()
    report = lh.verify("fl.d", since=pair)
    assert report["compared"].startswith("what changed since")
    assert not report["agree"] and any("stats" in d and "'id'" in d for d in report["differences"]), report["differences"]


@pytest.fixture(autouse=True)
def _nothing_kept():
    KEPT.clear()
    yield
    KEPT.clear()



def _plain_delta_table(tmp_path) -> tuple[str, FollowedLog]:
    from lakehouse_assets.core.io.storage import StorageConfig

    location = str(tmp_path / "plain")
    write_deltalake(location, _rows(range(3)))
    return location, FollowedLog(DeltaTable(location), location, StorageConfig())


def test_the_commit_writer_refuses_a_data_changing_remove_on_an_append_only_table(tmp_path):
    from deltalake.transaction import RemoveAction

    from lakehouse_assets import MirrorRefused
    from lakehouse_assets.core.formats.delta import log_commit

    location, followed = _plain_delta_table(tmp_path)
    DeltaTable(location).alter.set_table_properties({"delta.appendOnly": "true"})
    followed.update_incremental()
    path = DeltaTable(location).file_uris()[0].rsplit("/", 1)[-1]
    remove = RemoveAction(path=path, data_change=True, deletion_timestamp=0, size=None, partition_values={})
    with pytest.raises(MirrorRefused, match="delta.appendOnly=true, and this version would remove data files"):
        log_commit.commit(location, followed.storage, followed, [remove], [], [], {})
    assert DeltaTable(location).version() == 1, "nothing was written"


def test_the_commit_writer_refuses_a_table_feature_it_cannot_keep(tmp_path):
    from deltalake.table import TableFeatures

    from lakehouse_assets import MirrorRefused
    from lakehouse_assets.core.formats.delta import log_commit

    location, followed = _plain_delta_table(tmp_path)
    DeltaTable(location).alter.add_feature(TableFeatures.RowTracking, allow_protocol_versions_increase=True)
    followed.update_incremental()
    with pytest.raises(MirrorRefused, match="declares table features the mirror cannot write: feature 'rowTracking'"):
        log_commit.commit(location, followed.storage, followed, [], [], [], {})
    assert DeltaTable(location).version() == 1, "nothing was written"



def test_the_mirrors_log_labels_each_version_exactly_when_another_writer_commits_after_it_was_loaded(lh):
    """delta-rs 1.6.6's `history` on a DeltaTable loaded at version N, after another writer committed N+1, returns N+2
    commits labelled N down to -1: the mirror's load reads each version's commitInfo from its commit file instead,
    so a snapshot's Delta version and the log's oldest version stay right while other writers commit."""
    from lakehouse_assets.core.formats import history

    t = "fl.labels"
    lh.write(_rows(range(3)), t)
    lh.write(_rows(range(3, 5)), t)
    table = lh.load(t)
    location = table.location().removeprefix("file://")
    loaded, raw = lh.mirror(table).load(), DeltaTable(location)
    later = lh.write(_rows(range(5, 7)), t)  # another writer's version, after both were loaded
    n = loaded.version()
    assert raw.version() == n and later.delta_version == n + 1
    assert [c["version"] for c in raw.history()] == list(range(n, -2, -1))  # delta-rs's labels: shifted by the commit since
    assert [c["version"] for c in loaded.history()] == list(range(n, -1, -1)) and history.oldest_delta_version(loaded) == 0
    mirrored = history.delta_versions_by_snapshot(loaded)
    assert [mirrored[s.snapshot_id] for s in table.snapshots()] == [n - 1, n]  # each write's snapshot, its version
    assert history.delta_version_of(lh.mirror(lh.load(t)).load(), later.iceberg_snapshot_id) == n + 1


def _checkpointed(lh, identifier: str) -> str:
    """The table's Delta log with a checkpoint at its current version (maintenance writes them); its location."""
    location = lh.table_location(identifier)
    DeltaTable(location).create_checkpoint()
    KEPT.clear()
    return location


def test_a_log_followed_from_its_checkpoint_holds_no_file_entries_and_says_what_delta_rs_says(lh):
    """From a checkpoint the base is pyarrow's read of it (metadata, protocol, transactions, paths and row counts),
    not delta-rs's state of every live file; followed through overwrites, a delete, a schema change and another
    writer's commit, it says what a fresh delta-rs read says."""
    lh.write(_rows(range(10)), "fl.c")
    lh.write(_rows(range(10, 20)), "fl.c")
    location = _checkpointed(lh, "fl.c")
    followed = lh.mirror(lh.load("fl.c")).follow()
    assert not followed.holds_every_file() and followed.base_version() == followed.version()
    _same_as_delta_rs(followed, location)
    lh.write(_rows(range(20)), "fl.c", mode="overwrite")
    lh.delete("fl.c", "id < 3")
    followed.update_incremental()
    assert followed.base_version() < followed.version(), "the commits after the checkpoint are in the tail"
    _same_as_delta_rs(followed, location)
    before = followed.version()
    lh.write(pa.table({"id": pa.array([7], pa.int64()), "name": ["x"], "extra": [1.5]}), "fl.c")  # a schema version, then the data
    followed.update_incremental()
    assert followed.base_version() == before + 1 and followed.version() == before + 2, "the schema's version was taken into the read"
    assert not followed.holds_every_file() and "extra" in [f.name for f in followed.schema().fields]
    _same_as_delta_rs(followed, location)
    write_deltalake(location, pa.table({"id": pa.array([100, 101, 102], pa.int64()), "name": ["a", "b", "c"], "extra": [0.5] * 3}), mode="append")
    followed.update_incremental()  # another writer's commit, in the tail
    _same_as_delta_rs(followed, location)
    fresh = DeltaTable(location)
    assert followed.protocol() == fresh.protocol()
    mine, theirs = followed.metadata(), fresh.metadata()
    assert (mine.id, mine.partition_columns, mine.configuration) == (theirs.id, theirs.partition_columns, theirs.configuration)
    assert followed.live_totals().rows == 21


def test_a_call_needing_every_file_gives_the_checkpoints_read_way_to_delta_rs(lh):
    lh.write(_rows(range(5)), "fl.g")
    location = _checkpointed(lh, "fl.g")
    followed = lh.mirror(lh.load("fl.g")).follow()
    lh.write(_rows(range(5, 8)), "fl.g")
    followed.update_incremental()
    adds = pa.table(followed.get_add_actions(flatten=False))  # a DeltaTable method: delta-rs's state at the followed version
    assert followed.holds_every_file() and followed.version() == DeltaTable(location).version() and adds.num_rows == 2
    _same_as_delta_rs(followed, location)


def test_writes_and_their_checks_from_a_checkpoint_never_load_delta_rs_state(lh, monkeypatch):
    """What an append, an overwrite, a delete and their checks need of the log comes from the checkpoint's read and
    the commits since: delta-rs's state of every live file (550 MB at 1,000,000 files) is never loaded, the writes
    read none of the checkpoint's adds, and the first check reads their row counts once and no path (the mirror's
    removes carry their files' row counts, and the lakehouse's tables keep the counts as a struct column)."""
    lh.write(_rows(range(10)), "fl.n")
    report = lh.verify("fl.n")
    pair = VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])
    _checkpointed(lh, "fl.n")
    from lakehouse_assets.core.formats.delta import checkpoint_state

    loads: list[str] = []
    original = followed_log.LoadedDeltaTable.__init__
    monkeypatch.setattr(followed_log.LoadedDeltaTable, "__init__", lambda self, *a, **k: (loads.append(repr(a)), original(self, *a, **k))[1])
    reads: list[str] = []
    for name in ("read_adds", "read_totals", "_num_records"):
        original_read = getattr(checkpoint_state, name)
        monkeypatch.setattr(checkpoint_state, name, lambda *a, _name=name, _read=original_read, **k: (reads.append(_name), _read(*a, **k))[1])
    for step in range(3):
        lh.write(_rows(range(10 * step + 10, 10 * step + 20)), "fl.n")
        lh.write(_rows(range(10 * step + 10)), "fl.n", mode="overwrite")
        lh.delete("fl.n", f"id = {10 * step + 9}")
        assert reads == ["read_totals"] * min(step, 1), "a write reads no live file's entry; the first check reads the checkpoint's row counts once"
        report = lh.verify("fl.n", since=pair)
        assert report["agree"], report["differences"]
        assert report["compared"].startswith("what changed since")
        pair = VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])
    assert loads == []
    assert report["delta_rows"] == 29


def test_a_checkpoints_row_counts_come_from_statistics_of_any_shape():
    from lakehouse_assets.core.formats.delta.checkpoint_state import _num_records

    stats = ['{"numRecords":2,"minValues":{"id":1}}', None, '{"minValues":{"numRecords":5},"numRecords":7}', '{"numRecords":3}', "not json", "{}"]
    assert _num_records(pa.array(stats, pa.string())).to_pylist() == [2, None, 7, 3, None, None]


def _checkpoint_file(path, adds: list[dict], sidecar: bool = False) -> str:
    """A classic checkpoint as Spark may write it: statistics as a struct only (`stats_parsed`), or a V2 one's sidecar."""
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])),
        ("metaData", pa.struct([("id", pa.string()), ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                                ("configuration", pa.map_(pa.string(), pa.string()))])),
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
        ("add", pa.struct([("path", pa.string()), ("stats_parsed", pa.struct([("numRecords", pa.int64())]))])),
        ("sidecar", pa.struct([("path", pa.string())])),
    ])
    schema_string = json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    rows = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
            {"metaData": {"id": "t-1", "schemaString": schema_string, "partitionColumns": ["id"], "configuration": [("delta.appendOnly", "true")]}},
            {"txn": {"appId": "app", "version": 7}}, *({"add": a} for a in adds), *([{"sidecar": {"path": "s.parquet"}}] if sidecar else [])]
    pq.write_table(pa.Table.from_pylist(rows, schema), str(path))
    return str(path)


def test_a_checkpoint_read_takes_row_counts_from_statistics_as_a_struct_and_leaves_v2_checkpoints_to_delta_rs(tmp_path):
    from lakehouse_assets.core.formats.delta.checkpoint_state import read_checkpoint
    from lakehouse_assets.core.io.storage import StorageConfig

    adds = [{"path": "id=1/a.parquet", "stats_parsed": {"numRecords": 4}}, {"path": "id=2/b.parquet", "stats_parsed": None}]
    state = read_checkpoint(StorageConfig(), _checkpoint_file(tmp_path / "c.parquet", adds), 3)
    assert state.totals() == (2, 4, 1)
    assert state.adds.to_pylist() == [{"path": "id=1/a.parquet", "num_records": 4}, {"path": "id=2/b.parquet", "num_records": None}]
    assert (state.version(), state.transaction_version("app"), state.protocol().min_writer_version) == (3, 7, 2)
    assert (state.metadata().id, state.metadata().partition_columns, state.metadata().configuration) == ("t-1", ["id"], {"delta.appendOnly": "true"})
    assert [f.name for f in state.schema().fields] == ["id"]
    assert read_checkpoint(StorageConfig(), _checkpoint_file(tmp_path / "v2.parquet", adds, sidecar=True), 3) is None


def test_a_checkpoint_read_parses_statistics_json_only_where_no_struct_count(tmp_path, monkeypatch):
    """The live totals read the adds' struct row counts, and the statistics JSON only when some add has none there.
    The metadata, protocol and transactions are found wherever the writer put them (delta-rs 1.6.6: the transactions
    first, the protocol and metadata after the adds)."""
    import pyarrow.parquet as pq

    from lakehouse_assets.core.formats.delta import checkpoint_state
    from lakehouse_assets.core.io.storage import StorageConfig

    schema = pa.schema([
        ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])),
        ("metaData", pa.struct([("id", pa.string()), ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
                                ("configuration", pa.map_(pa.string(), pa.string()))])),
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
        ("add", pa.struct([("path", pa.string()), ("size", pa.int64()), ("stats", pa.string()),
                           ("stats_parsed", pa.struct([("numRecords", pa.int64())]))])),
    ])
    schema_string = json.dumps({"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]})
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": "t-1", "schemaString": schema_string, "partitionColumns": [], "configuration": []}}]
    adds = [{"add": {"path": f"f{i}.parquet", "size": 100, "stats": f'{{"numRecords":{i}}}', "stats_parsed": {"numRecords": i}}} for i in range(1, 21)]
    json_parsed: list[int] = []
    original = checkpoint_state._num_records
    monkeypatch.setattr(checkpoint_state, "_num_records", lambda stats: (json_parsed.append(len(stats)), original(stats))[1])
    monkeypatch.setattr(checkpoint_state, "_BATCH", 4)

    def read(name: str, rows: list[dict]) -> checkpoint_state.CheckpointState:
        pq.write_table(pa.Table.from_pylist(rows, schema), tmp_path / name)
        json_parsed.clear()
        return checkpoint_state.read_checkpoint(StorageConfig(), str(tmp_path / name), 9)

    state = read("c.parquet", [{"txn": {"appId": "app", "version": 7}}, *adds, *actions])
    assert state.transaction_version("app") == 7 and state.metadata().id == "t-1" and state.protocol().min_writer_version == 2
    assert state.totals() == (20, 210, 0) and json_parsed == [], "every add has a struct count: no JSON parsed"
    assert state.adds.column("num_records").to_pylist() == list(range(1, 21)) and json_parsed == []
    adds[3]["add"]["stats_parsed"] = None  # an add whose count only its JSON holds
    adds[5]["add"]["stats_parsed"] = adds[5]["add"]["stats"] = None  # one with no count at all
    mixed = read("mixed.parquet", [*actions, *adds])
    assert mixed.totals() == (20, 210 - 6, 1) and sum(json_parsed) == 20, "the JSON read once, since some add has no struct count"
    assert mixed.adds.column("num_records").to_pylist()[3:6] == [4, 5, None]


@pytest.mark.parametrize("kept_as", ["json-and-struct", "json"])
def test_a_row_count_planted_in_the_checkpoint_is_a_difference_the_check_finds(lh, kept_as):
    """The check's live totals come from the checkpoint's read: an add whose row count there is not its file's (a Delta
    reader would count that many rows) makes the check fail, as it does from delta-rs's read."""
    import re

    import pyarrow.parquet as pq

    identifier = f"fl.p_{kept_as.replace('-', '_')}"
    lh.write(_rows(range(10)), identifier)
    report = lh.verify(identifier)
    pair = VerifiedPair(report["iceberg_snapshot_id"], report["delta_version"])
    location = _checkpointed(lh, identifier)
    checkpoint = f"{location.removeprefix('file://')}/_delta_log/{DeltaTable(location).version():020d}.checkpoint.parquet"
    table = pq.read_table(checkpoint)
    rows = table.to_pylist()
    for row in rows:
        if row["add"] is not None:  # the lakehouse's tables keep the statistics as a struct too; other writers' JSON alone
            row["add"]["stats"] = re.sub(r'("numRecords"\s*:\s*)10\b', r"\g<1>11", row["add"]["stats"], count=1)
            row["add"]["stats_parsed"] = {**row["add"]["stats_parsed"], "numRecords": 11} if kept_as == "json-and-struct" else None
    pq.write_table(pa.Table.from_pylist(rows, table.schema), checkpoint)
    lh.write(_rows(range(10, 15)), identifier)
    KEPT.clear()
    followed = lh.mirror(lh.load(identifier)).follow()
    assert not followed.holds_every_file() and followed.live_totals().rows == 16
    report = lh.verify(identifier, since=pair)
    assert not report["agree"], report


def test_the_adds_of_some_paths_are_read_from_a_checkpoint_whole_and_decoded(tmp_path, monkeypatch):
    """`read_adds_of` (the deletion-vector mirror's and the readers' replay of the log) picks its paths' adds in Arrow,
    a batch at a time: the same actions as decoding every add of the checkpoint, paths stored URL-encoded too."""
    from urllib.parse import unquote

    import pyarrow.parquet as pq

    from lakehouse_assets.core.formats.delta import checkpoint_state
    from lakehouse_assets.core.io.storage import StorageConfig

    location = str(tmp_path / "t")
    for part in ("plain", "with space", "50%/sure"):
        write_deltalake(location, pa.table({"id": [1, 2], "part": [part, part]}), partition_by=["part"], mode="append")
    DeltaTable(location).create_checkpoint()
    uri = f"file://{location}/_delta_log/{DeltaTable(location).version():020d}.checkpoint.parquet"
    every = [a for a in pq.read_table(uri.removeprefix("file://"), columns=["add"]).column("add").to_pylist() if a is not None]
    assert any("%" in a["path"] for a in every)  # partition values stored encoded in the path
    expected = {unquote(a["path"]): {**a, "partitionValues": dict(a["partitionValues"] or [])} for a in every}
    monkeypatch.setattr(checkpoint_state, "_BATCH", 2)  # several batches
    wanted = set(list(expected)[::2]) | {"part=absent/x.parquet"}
    assert checkpoint_state.read_adds_of(StorageConfig(), uri, wanted) == {p: a for p, a in expected.items() if p in wanted}
    assert checkpoint_state.read_adds_of(StorageConfig(), uri, set(expected)) == expected
    assert checkpoint_state.read_adds_of(StorageConfig(), uri, set(expected), vectors_only=True) == {}  # no add carries a vector

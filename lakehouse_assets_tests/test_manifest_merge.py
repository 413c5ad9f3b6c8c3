"""Appends merge manifests (Java Iceberg's default), so the manifest list does not grow with every commit."""

from __future__ import annotations

from pyspark.sql import functions as F

from lakehouse_assets import TableOptions

from .conftest import assert_all_readers_agree, rows_of


def _rows(spark, lo, hi):
    return spark.range(lo, hi, numPartitions=1).select(F.col("id"), (F.col("id") % 3).cast("int").alias("part"))


def test_appends_merge_manifests_and_every_reader_agrees(lh, spark, duck):
    # A low merge threshold shows the behaviour in a few commits (the default merges at 100 manifests).
    lh.write(_rows(spark, 0, 10), "m.small", partition_by=["part"], table=TableOptions(properties={"commit.manifest.min-count-to-merge": "4"}))
    table = lh.load("m.small")
    assert table.properties["commit.manifest-merge.enabled"] == "true"
    counts = []
    for i in range(1, 9):
        lh.write(_rows(spark, i * 10, i * 10 + 10), "m.small")
        table = lh.load("m.small")
        counts.append(len(table.current_snapshot().manifests(table.io)))
    assert max(counts) < 4 + 1, counts  # bounded by the threshold, not by the 9 commits
    assert counts[-1] < 9
    expected = [(i, i % 3) for i in range(90)]
    assert_all_readers_agree(lh, spark, duck, "m.small", expected)


def test_manifest_merge_can_be_turned_off(lh, spark):
    lh.write(_rows(spark, 0, 10), "m.fast", table=TableOptions(properties={"commit.manifest-merge.enabled": "false", "commit.manifest.min-count-to-merge": "2"}))
    for i in range(1, 4):
        lh.write(_rows(spark, i * 10, i * 10 + 10), "m.fast")
    table = lh.load("m.fast")
    assert len(table.current_snapshot().manifests(table.io)) == 4  # one per append


def test_an_append_of_more_files_than_a_manifest_holds_lists_them_by_partition_and_an_overwrite_rewrites_one(lh, spark, duck, monkeypatch):
    """A first load of history across partitions: its manifests each hold whole partitions, so an overwrite of one
    partition afterwards rewrites only the manifest that holds it (one manifest spanning all would be rewritten whole)."""
    from lakehouse_assets import Slice
    from lakehouse_assets.core.formats.iceberg import clustered_manifests

    monkeypatch.setattr(clustered_manifests, "MANIFEST_ENTRIES", 1)
    lh.write(_rows(spark, 0, 30).repartition(3, "part"), "m.history", partition_by=["part"])
    table = lh.load("m.history")
    before = {m.manifest_path: {e.data_file.partition[0] for e in m.fetch_manifest_entry(table.io)} for m in table.current_snapshot().manifests(table.io)}
    assert all(len(parts) == 1 for parts in before.values()) and set().union(*before.values()) == {0, 1, 2}, before
    lh.write(_rows(spark, 100, 103).where("part = 1"), "m.history", mode="overwrite", window=Slice(values={"part": [1]}))
    table = lh.load("m.history")
    after = {m.manifest_path for m in table.current_snapshot().manifests(table.io)}
    assert {path for path, parts in before.items() if parts != {1}} <= after, "the overwrite of part 1 rewrote other partitions' manifests"
    expected = [(i, i % 3) for i in range(30) if i % 3 != 1] + [(i, i % 3) for i in range(100, 103) if i % 3 == 1]
    assert_all_readers_agree(lh, spark, duck, "m.history", sorted(expected))


def _added_manifests_partitions(table) -> list[set]:
    """The partitions each data manifest that the current snapshot added holds."""
    snapshot = table.current_snapshot()
    return [{e.data_file.partition[0] for e in m.fetch_manifest_entry(table.io)} for m in snapshot.manifests(table.io)
            if m.added_snapshot_id == snapshot.snapshot_id and m.content == 0 and m.added_files_count]


def test_an_overwrite_and_a_merge_on_read_merge_of_more_files_than_a_manifest_holds_list_them_by_partition(lh, spark, duck, monkeypatch):
    """The files an overwrite or a row delta (a merge-on-read merge, which adds delete files too) adds are clustered as
    an append's are, so a later change to one partition rewrites only the manifests that hold it."""
    from lakehouse_assets import MergeOptions
    from lakehouse_assets.core.formats.iceberg import clustered_manifests

    monkeypatch.setattr(clustered_manifests, "MANIFEST_ENTRIES", 1)
    rows = spark.range(0, 30, numPartitions=1).select(F.col("id"), (F.col("id") % 3).cast("int").alias("part"), F.lit("a").alias("v"))
    lh.write(rows, "m.rewritten", partition_by=["part"])
    lh.write(rows.repartition(3, "part"), "m.rewritten", mode="overwrite")
    table = lh.load("m.rewritten")
    assert sorted(map(sorted, _added_manifests_partitions(table))) == [[0], [1], [2]]
    lh.alter("m.rewritten", write_mode="merge-on-read")
    batch = spark.createDataFrame([(1, 1, "b"), (2, 2, "b"), (100, 1, "new"), (101, 2, "new")], "id long, part int, v string")
    lh.write(batch, "m.rewritten", mode="merge", merge=MergeOptions(keys=["id"]))
    table = lh.load("m.rewritten")
    assert int(table.current_snapshot().summary.additional_properties["added-position-delete-files"]) >= 1
    assert sorted(map(sorted, _added_manifests_partitions(table))) == [[1], [2]]
    expected = sorted([(i, i % 3, "b" if i in (1, 2) else "a") for i in range(30)] + [(100, 1, "new"), (101, 2, "new")])
    assert_all_readers_agree(lh, spark, duck, "m.rewritten", expected)


def test_an_append_merges_small_manifests_only_and_leaves_clustered_ones_as_written(lh, spark, duck, monkeypatch):
    """After a load of history in clustered manifests, appends merge their own small manifests as before, and never
    the clustered ones (at a million files, rewriting them all took the first append minutes)."""
    from lakehouse_assets.core.formats.iceberg import clustered_manifests

    monkeypatch.setattr(clustered_manifests, "MANIFEST_ENTRIES", 4)  # manifests of 2 files or more stay as written
    history = spark.range(0, 60, numPartitions=1).select(F.col("id"), (F.col("id") % 6).cast("int").alias("part")).repartition(6, "part")
    lh.write(history, "m.loaded", partition_by=["part"], table=TableOptions(properties={"commit.manifest.min-count-to-merge": "2"}))
    table = lh.load("m.loaded")
    clustered = {m.manifest_path for m in table.current_snapshot().manifests(table.io)}
    assert len(clustered) == 2  # 4 + 2 files, cut where a partition ends
    for i in range(4):  # one file each: small manifests
        lh.write(_rows(spark, 100 + i * 10, 110 + i * 10).where("part = 0"), "m.loaded")
    table = lh.load("m.loaded")
    manifests = table.current_snapshot().manifests(table.io)
    assert clustered <= {m.manifest_path for m in manifests}
    small = [m for m in manifests if m.manifest_path not in clustered]
    assert len(small) < 4 and sum(m.added_files_count + m.existing_files_count for m in small) == 4  # merged, not one per append
    expected = sorted([(i, i % 6) for i in range(60)] + [(i, 0) for i in range(100, 140) if i % 3 == 0])
    assert_all_readers_agree(lh, spark, duck, "m.loaded", expected)


def test_small_manifests_merge_with_their_partitions_neighbours_into_manifests_a_change_of_one_partition_reads_whole(lh, spark, duck, monkeypatch):
    """Small manifests, once there are `commit.manifest.min-count-to-merge` of them, merge in the order of their
    partitions into manifests of MANIFEST_ENTRIES entries at most: a later read or change of one partition reads a
    bounded manifest of its neighbours, not one merged from every partition (pyiceberg packs them by size alone)."""
    import pyarrow as pa

    from lakehouse_assets.core.formats.iceberg import clustered_manifests

    monkeypatch.setattr(clustered_manifests, "MANIFEST_ENTRIES", 4)  # manifests of 1 file are small
    order = [5, 1, 4, 0, 3, 2, 6]  # the last append's own manifest waits for the next one to merge
    for n, part in enumerate(order):
        rows = pa.table({"id": pa.array([part * 10], pa.int64()), "part": pa.array([part], pa.int32())})
        lh.write(rows, "m.neighbours", **({"partition_by": ["part"], "table": TableOptions(properties={"commit.manifest.min-count-to-merge": "6"})} if n == 0 else {}))
        table = lh.load("m.neighbours")
        manifests = table.current_snapshot().manifests(table.io)
        if n < len(order) - 1:
            assert len(manifests) == n + 1  # fewer small manifests than the count to merge: each append adds one
    spans = sorted(sorted(e.data_file.partition[0] for e in m.fetch_manifest_entry(table.io)) for m in manifests)
    assert spans == [[0, 1, 2, 3], [4, 5], [6]], spans
    assert lh.read(spark, "m.neighbours", row_filter="part = 4").count() == 1
    assert_all_readers_agree(lh, spark, duck, "m.neighbours", [(p * 10, p) for p in sorted(order)])


def test_overwrites_and_deletes_leave_no_manifest_of_deleted_entries_only_for_later_snapshots(lh, spark, duck):
    """Each overwrite or delete writes its DELETED entries into a manifest of its own snapshot; the next commit leaves
    that manifest out of its list (as an append does), so the list holds what is live, not the table's history.
    Time travel to a snapshot still reads its own list."""
    import datetime as dt

    import pyarrow as pa

    from lakehouse_assets import Window

    def day_rows(day: int, version: int) -> pa.Table:
        ids = list(range(day * 100, day * 100 + 10))
        return pa.table({"id": pa.array(ids, pa.int64()), "day": pa.array([dt.date(2024, 1, day)] * 10, pa.date32()),
                         "v": pa.array([version] * 10, pa.int64())})

    name = "m.history"
    lh.write(pa.concat_tables([day_rows(d, 0) for d in (1, 2, 3)]), name, partition_by=["day"])
    first = lh.load(name).current_snapshot().snapshot_id
    for version in range(1, 7):
        lh.write(day_rows(1, version), name, mode="overwrite", window=Window("day", dt.date(2024, 1, 1), dt.date(2024, 1, 2)))
        lh.delete(name, f"day = DATE'2024-01-02' AND id = {200 + version}", spark=spark)
    table = lh.load(name)
    current = table.current_snapshot()
    manifests = current.manifests(table.io)
    stale = [m.manifest_path for m in manifests if not m.added_files_count and not m.existing_files_count and m.added_snapshot_id != current.snapshot_id]
    assert stale == [] and len(manifests) <= 6, [(m.added_files_count, m.existing_files_count, m.deleted_files_count) for m in manifests]
    expected = [(i, dt.date(2024, 1, 1), 6) for i in range(100, 110)] + [(i, dt.date(2024, 1, 2), 0) for i in range(200, 210) if not 200 < i < 207] + [
        (i, dt.date(2024, 1, 3), 0) for i in range(300, 310)]
    assert_all_readers_agree(lh, spark, duck, name, rows_of([dict(zip(("id", "day", "v"), r)) for r in expected]))
    assert lh.read(spark, name, snapshot_id=first).count() == 30
    assert lh.verify(name, deep=True)["agree"]


def test_an_overwrite_decodes_and_writes_each_manifest_that_may_hold_a_removed_file_once(lh, spark, monkeypatch):
    """The manifests an overwrite may rewrite are read once per commit (pyiceberg's producer reads them twice, for the
    DELETED entries and for the rewrite), and each one holding a removed file is written again once, with the removed
    file as a DELETED entry (pyiceberg writes those entries into a manifest of their own): the snapshot lists the same
    live files and DELETED entries as pyiceberg's, in one manifest fewer."""
    import collections

    from pyiceberg.manifest import ManifestEntryStatus, ManifestFile
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    from lakehouse_assets.core.formats.iceberg.clustered_manifests import clustered_overwrite
    from lakehouse_assets.core.formats.iceberg.committer import live_data_files
    from lakehouse_assets.core.formats.iceberg.one_read_overwrite import OneReadOverwrite

    reads: collections.Counter = collections.Counter()
    fetch = ManifestFile.fetch_manifest_entry

    def counted(self, io, discard_deleted=True):
        reads[self.manifest_path] += 1
        return fetch(self, io, discard_deleted)

    def remove_a_file_of_part_0(name: str, kind) -> tuple[dict, tuple, int]:
        for lo in (0, 30, 60):
            lh.write(_rows(spark, lo, lo + 30), name, **({"partition_by": ["part"]} if lo == 0 else {}))
        lh.write(_rows(spark, 90, 120).where("part = 1"), name)  # a manifest the removal cannot touch
        table = lh.load(name)
        before = table.current_snapshot().manifests(table.io)
        first = min(before, key=lambda m: m.sequence_number)  # the same manifest of both tables: the first write's
        victim = min((e.data_file for e in first.fetch_manifest_entry(table.io) if e.data_file.partition[0] == 0), key=lambda f: f.file_path)
        reads.clear()
        with monkeypatch.context() as m:
            m.setattr(ManifestFile, "fetch_manifest_entry", counted)
            with table.transaction() as tx, clustered_overwrite(tx, {}, None, kind) as producer:
                producer.delete_data_file(victim)
        by_path = {m.manifest_path: i for i, m in enumerate(before)}
        table = lh.load(name)
        after = table.current_snapshot()
        written = [m for m in after.manifests(table.io) if m.manifest_path not in by_path]
        shape = (
            sorted(by_path[m.manifest_path] for m in after.manifests(table.io) if m.manifest_path in by_path),  # reused as they were
            sorted((e.status.name, e.snapshot_id == after.snapshot_id, e.data_file.file_path == victim.file_path)  # in the manifests written
                   for m in written for e in m.fetch_manifest_entry(table.io, discard_deleted=False)),
        )
        deleted = [e.data_file.file_path for m in after.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=False)
                   if e.status == ManifestEntryStatus.DELETED]
        assert deleted == [victim.file_path] and len(live_data_files(table)) == len(live_data_files(table, after.parent_snapshot_id)) - 1
        return {by_path[p]: n for p, n in reads.items()}, shape, len(written)

    ours, ours_shape, ours_written = remove_a_file_of_part_0("m.once", OneReadOverwrite)
    theirs, theirs_shape, theirs_written = remove_a_file_of_part_0("m.twice", _OverwriteFiles)
    assert ours_shape == theirs_shape  # the same manifests reused, the same entries written, entry for entry
    assert (ours_written, theirs_written) == (1, 2)  # the part-0 manifest again; pyiceberg adds one for the DELETED entry
    assert set(theirs.values()) == {2} and ours == {i: 1 for i in theirs}, (ours, theirs)  # the part-1-only manifest: never read
    assert len(ours) == 3


def test_a_commit_keeps_the_manifest_list_it_wrote_as_a_reader_reads_it_back(lh, spark, monkeypatch):
    """The project's commits keep the list of manifests they write (manifest_lists.remember), so the check after a
    write and the next write read none back: every field of every manifest, sequence numbers included, is what a
    reader of the list finds, after appends that merge manifests, an overwrite, a merge-on-read merge (delete files)
    and a delete by condition."""
    import pyiceberg.manifest

    from lakehouse_assets import MergeOptions, Slice
    from lakehouse_assets.core.formats import manifest_lists

    name = "m.kept_lists"
    lh.write(_rows(spark, 0, 6), name, partition_by=["part"], table=TableOptions(properties={"commit.manifest.min-count-to-merge": "3"}))
    writes = [
        lambda: lh.write(_rows(spark, 10, 16), name),
        lambda: lh.write(_rows(spark, 20, 26), name),
        lambda: lh.write(_rows(spark, 30, 36), name),  # the third small manifest: the append merges them
        lambda: lh.write(_rows(spark, 40, 43).where("part = 1"), name, mode="overwrite", window=Slice(values={"part": [1]})),
        lambda: lh.alter(name, write_mode="merge-on-read"),
        lambda: lh.write(spark.createDataFrame([(0, 0), (200, 2)], "id long, part int"), name, mode="merge", merge=MergeOptions(keys=["id"])),
        lambda: lh.delete(name, "id = 3"),
    ]
    reads = []
    real_read = pyiceberg.manifest.read_manifest_list
    monkeypatch.setattr(pyiceberg.manifest, "read_manifest_list", lambda f: reads.append(f.location) or real_read(f))
    for write in writes:
        write()
        table = lh.load(name)
        snapshot = table.current_snapshot()
        reads.clear()
        kept = manifest_lists.manifests(table.io, snapshot)
        assert reads == [], f"{snapshot.summary.operation}: the list was read back, not kept"
        read_back = list(snapshot.manifests(table.io))
        assert [m.manifest_path for m in kept] == [m.manifest_path for m in read_back]
        for k, r in zip(kept, read_back):
            fields = [f.name for f in pyiceberg.manifest.MANIFEST_LIST_FILE_SCHEMAS[2].fields]
            assert {f: getattr(k, f) for f in fields} == {f: getattr(r, f) for f in fields}, (snapshot.summary.operation, k.manifest_path)
    assert int(lh.load(name).current_snapshot().summary.additional_properties.get("total-position-deletes", "0")) >= 1

"""Imported tables whose statistics other writers recorded differently, judged by what the files hold.

Real Delta tables come with `add` actions without `stats` (optional in the protocol; older Spark writers leave them
out) and with string statistics truncated to a prefix (Spark: 32 characters, its max followed by a tie-breaker
character); Iceberg truncates string bounds to 16 characters. None of those is a divergence: each table here is
imported, read by every reader of both formats, verified deeply, then written, merged and compacted. A count or a
bound the file's own data contradicts is one, on either side, and `verify` names the file.

delta-rs writes full statistics; the logs without stats and with Spark's truncation are rewritten by the test from
the protocol's spec (no engine here writes them), over the files delta-rs wrote.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets.cli import cli

from . import foreign_writer as fw
from .conftest import assert_all_readers_agree
from .test_import import delete_ids_2_and_4_with_a_vector, still_agrees_after_writes, tree_digest

LONG = "x" * 30  # names of 42 characters: longer than Iceberg's 16 and Spark's 32


def long_rows(n=12):
    return [(i, f"customer-{i:02d}-{LONG}", "US" if i % 2 else "DE") for i in range(n)]


def arrow_of(rows) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "name": [r[1] for r in rows], "country": [r[2] for r in rows]})


def rewrite_stats(root, edit, versions=None) -> None:
    """Rewrite the `stats` of each add in the commits (all, or `versions`): `edit(add, stats) -> stats`, None to leave
    the field out, as a writer that records none does."""
    for path in sorted((root / "_delta_log").glob("*.json")):
        if versions is not None and int(path.stem) not in versions:
            continue
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for action in actions:
            if "add" in action:
                stats = edit(action["add"], json.loads(action["add"]["stats"]))
                if stats is None:
                    del action["add"]["stats"]
                else:
                    action["add"]["stats"] = json.dumps(stats)
        path.write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def differences(report) -> str:
    assert not report["agree"]
    return " | ".join(report["differences"])


# ---------------------------------------------------------------- absent and truncated: no divergence


def test_a_delta_log_without_stats_is_imported_and_verifies(lh, spark, duck, tmp_path, warehouse):
    """Version 0's adds carry no `stats` at all, version 1's do: counts and bounds Delta does not record are unknown,
    the Iceberg side has them from the footers, and every reader reads the same rows."""
    root = tmp_path / "no_stats"
    rows = long_rows()
    write_deltalake(str(root), arrow_of(rows[:6]), partition_by=["country"])
    write_deltalake(str(root), arrow_of(rows[6:]), mode="append", partition_by=["country"])
    rewrite_stats(root, lambda add, stats: None, versions={0})
    assert pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).column("num_records").null_count == 2

    report = lh.import_table("st.no_stats", str(root))

    assert report["rows"] == 12
    verified = lh.verify("st.no_stats", deep=True)
    assert verified["agree"], verified["differences"]
    assert verified["delta_files_without_row_count"] == 2 and verified["iceberg_rows"] == 12
    shown = CliRunner().invoke(cli, ["--warehouse", warehouse, "verify", "st.no_stats", "--deep"])
    assert shown.exit_code == 0 and "rows: Iceberg 12, Delta 6 (2 Delta add(s) record no row count)" in shown.output, shown.output
    assert_all_readers_agree(lh, spark, duck, "st.no_stats", [(c, i, n) for i, n, c in rows], columns=["country", "id", "name"])
    still_agrees_after_writes(lh, spark, duck, "st.no_stats", rows)


def test_spark_truncated_string_stats_and_long_delta_rs_strings_are_bounds_not_divergences(lh, spark, duck, tmp_path):
    """Iceberg keeps 16 characters of the names (its upper bound incremented), delta-rs all 42, and the files of the
    second version Spark's 32-character prefixes: the min a prefix, the max a prefix and a tie-breaker character
    (U+FFFD as Delta Lake 2 appends it, U+007F as Delta Lake 3 does where the cut character is below it)."""
    root = tmp_path / "truncated"
    rows = long_rows()
    write_deltalake(str(root), arrow_of(rows[:6]), partition_by=["country"])
    write_deltalake(str(root), arrow_of(rows[6:]), mode="append", partition_by=["country"])

    def spark_prefixes(add, stats):
        tie = "\ufffd" if add["partitionValues"]["country"] == "DE" else "\x7f"
        stats["minValues"]["name"] = stats["minValues"]["name"][:32]
        stats["maxValues"]["name"] = stats["maxValues"]["name"][:32] + tie
        return stats

    rewrite_stats(root, spark_prefixes, versions={1})
    maxima = {a["partition.country"]: a["max.name"] for a in pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).to_pylist() if len(a["max.name"]) == 33}
    assert maxima == {"DE": rows[10][1][:32] + "\ufffd", "US": rows[11][1][:32] + "\x7f"}

    lh.import_table("st.truncated", str(root))

    verified = lh.verify("st.truncated", deep=True)
    assert verified["agree"], verified["differences"]
    assert_all_readers_agree(lh, spark, duck, "st.truncated", [(c, i, n) for i, n, c in rows], columns=["country", "id", "name"])
    still_agrees_after_writes(lh, spark, duck, "st.truncated", rows)


def test_long_strings_through_apply_deletes_of_a_delta_import(lh, spark, duck, tmp_path):
    """delta-rs rewrites the file with a deletion vector (full-length string statistics); Iceberg's bounds of the
    same file are truncated to 16 characters: bounds of one file, not a divergence."""
    root = tmp_path / "dv_long"
    rows = long_rows()
    delete_ids_2_and_4_with_a_vector(root, arrow_of(rows))

    report = lh.import_table("st.dv_long", str(root), apply_deletes=True)

    assert report["deletion_vectors_purged"] == 1 and report["rows"] == 10
    kept = [r for r in rows if r[0] not in (2, 4)]
    assert_all_readers_agree(lh, spark, duck, "st.dv_long", [(c, i, n) for i, n, c in kept], columns=["country", "id", "name"])
    still_agrees_after_writes(lh, spark, duck, "st.dv_long", kept)


def test_long_strings_through_apply_deletes_of_an_iceberg_import(lh, spark, duck):
    """An Iceberg table with equality deletes (as Flink and Trino write them), imported with apply_deletes: the
    rewritten files' bounds and the untouched ones' agree with their Delta statistics."""
    lh.catalog.create_namespace("eqlong")
    rows = long_rows()
    table = lh.catalog.create_table("eqlong.people", schema=arrow_of(rows).schema)
    table.append(arrow_of(rows[:6]))
    table.append(arrow_of(rows[6:]))
    fw.commit_deletes(table, [fw.equality_deletes(table, pa.table({"id": pa.array([3], pa.int64())}))])

    report = lh.import_table("eqlong.people", apply_deletes=True, spark=spark)

    assert report["apply_deletes"]["delete_files"] == 1 and report["rows"] == 11
    kept = [r for r in rows if r[0] != 3]
    assert_all_readers_agree(lh, spark, duck, "eqlong.people", [(c, i, n) for i, n, c in kept], columns=["country", "id", "name"])
    still_agrees_after_writes(lh, spark, duck, "eqlong.people", kept)


# ---------------------------------------------------------------- contradicted by the file: a divergence


def planted_delta(tmp_path, name, edit):
    """A delta-rs table of one file (3 rows, ids 1..3, names up to 61 characters) whose stats `edit` rewrote: (root, the
    file's path)."""
    root = tmp_path / name
    write_deltalake(str(root), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": [f"a{LONG * 2}", "m", f"z{LONG * 2}"]}))
    rewrite_stats(root, edit)
    (add,) = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).to_pylist()
    return root, add["path"]


def test_a_delta_row_count_the_file_contradicts_fails_naming_the_file(lh, tmp_path):
    def five(add, stats):
        stats["numRecords"] = 5
        return stats

    root, path = planted_delta(tmp_path, "count", five)
    lh.import_table("st.count", str(root))
    found = differences(lh.verify("st.count"))
    assert f"{path}: Iceberg 3, Delta 5" in found and "row counts differ: Iceberg 3, Delta 5" in found
    assert f"{path}: Delta records 5 rows, the file holds 3" in differences(lh.verify("st.count", deep=True))


def test_delta_bounds_that_exclude_a_value_the_file_holds_fail_naming_the_file(lh, tmp_path):
    def excluding(add, stats):
        stats["minValues"]["id"] = 2  # the file holds 1
        stats["maxValues"]["name"] = "b"  # the file holds 'z...', and 'b' is no prefix of any truncation of it
        return stats

    root, path = planted_delta(tmp_path, "bounds", excluding)
    lh.import_table("st.bounds", str(root))
    found = differences(lh.verify("st.bounds"))
    assert f"{path}: Delta min of 'id' is 2, expected 1" in found
    assert f"{path}: Delta max of 'name' is 'b', which cannot bound the rows Iceberg bounds by" in found
    deep = differences(lh.verify("st.bounds", deep=True))
    assert f"{path}: Delta's min of 'id' is 2, the file holds 1" in deep and f"{path}: Delta's max of 'name' is 'b', the file holds 'z{LONG * 2}'" in deep


def test_a_truncated_delta_max_below_the_files_prefix_fails(lh, tmp_path):
    """A Spark-style max cut at 32 characters but without its tie-breaker is below the value it should bound: only
    the footer can tell (it is compatible with Iceberg's 16-character bound), so `verify --deep` does."""
    def cut(add, stats):
        stats["maxValues"]["name"] = stats["maxValues"]["name"][:32]
        return stats

    root, path = planted_delta(tmp_path, "cut", cut)
    lh.import_table("st.cut", str(root))
    assert lh.verify("st.cut")["agree"]
    assert f"{path}: Delta's max of 'name' is 'z{(LONG * 2)[:31]}', the file holds 'z{LONG * 2}'" in differences(lh.verify("st.cut", deep=True))


def test_iceberg_bounds_and_counts_the_file_contradicts_fail_deeply_naming_the_file(lh):
    """Another engine's Iceberg commit with a lower bound above the file's minimum and a wrong record count: the Delta
    log the import creates derives its stats from them, so the two logs agree with each other, and only the file
    tells (`verify --deep`)."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile
    from pyiceberg.types import LongType

    lh.catalog.create_namespace("wrong")
    table = lh.catalog.create_table("wrong.ids", schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    (good,) = fw.data_files(table)
    bad = DataFile.from_args(**{k: getattr(good, k) for k in ("content", "file_path", "file_format", "partition", "file_size_in_bytes",
                                                              "column_sizes", "value_counts", "null_value_counts", "nan_value_counts",
                                                              "upper_bounds", "split_offsets")},
                             record_count=4, lower_bounds={1: to_bytes(LongType(), 2)})  # fmt: skip
    bad.spec_id = good.spec_id
    with table.transaction() as tx:
        with tx.update_snapshot().overwrite() as producer:
            producer.delete_data_file(good)
            producer.append_data_file(bad)
    lh.import_table("wrong.ids")
    path = os.path.basename(good.file_path.split("://", 1)[-1])

    assert lh.verify("wrong.ids")["agree"]
    deep = differences(lh.verify("wrong.ids", deep=True))
    assert f"{path}: Iceberg records 4 rows, the file holds 3" in deep
    assert f"{path}: Iceberg's lower bound of 'id' is 2, the file holds 1" in deep and f"{path}: Delta's min of 'id' is 2, the file holds 1" in deep


def test_a_stats_less_import_leaves_its_source_log_as_it_was(lh, tmp_path):
    """Nothing is written back into the source's adds: the missing statistics stay missing in Delta, unknown to verify."""
    root = tmp_path / "untouched"
    write_deltalake(str(root), arrow_of(long_rows(4)))
    rewrite_stats(root, lambda add, stats: None)
    before = tree_digest(root / "_delta_log")
    lh.import_table("st.untouched", str(root))
    after = tree_digest(root / "_delta_log")
    assert {k: v for k, v in after.items() if k in before} == before
    assert lh.verify("st.untouched", deep=True)["agree"]


def test_a_statistic_the_writer_left_out_is_unknown_one_it_cannot_parse_is_a_difference(lh, tmp_path):
    """Spark keeps no min/max of booleans: left out, unknown. A date spelled `20-01-01` is NULL to delta-rs but still
    in the log (here in a checkpoint, as delta-rs writes it from the raw stats), where another reader may misread it."""
    import datetime as dt

    def spark_like(unreadable):
        def edit(add, stats):
            del stats["minValues"]["flag"], stats["maxValues"]["flag"]
            if unreadable:
                stats["minValues"]["d"] = "20-01-01"
            return stats

        return edit

    data = pa.table({"id": pa.array([1, 2], pa.int64()), "flag": [True, False], "d": [dt.date(2020, 1, 1), dt.date(2021, 1, 1)]})
    for name, unreadable in (("left_out", False), ("unreadable", True)):
        root = tmp_path / name
        write_deltalake(str(root), data)
        rewrite_stats(root, spark_like(unreadable))
        DeltaTable(str(root)).create_checkpoint()
        lh.import_table(f"st.{name}", str(root))
    verified = lh.verify("st.left_out", deep=True)
    assert verified["agree"], verified["differences"]
    (path,) = [a["path"] for a in pa.table(DeltaTable(str(tmp_path / "unreadable")).get_add_actions(flatten=True)).to_pylist()]
    found = differences(lh.verify("st.unreadable"))
    assert f"{path}: Delta min of 'd' is missing or unreadable, expected '2020-01-01' (the log holds '20-01-01')" in found
    assert "'flag'" not in found


def test_delta_timestamp_maxima_truncated_to_milliseconds_are_bounds_not_divergences(lh, spark, duck, tmp_path):
    """delta-rs (like Spark) logs a timestamp max truncated down to milliseconds, as the Delta protocol says; Delta
    readers widen it by the lost millisecond. Such a table verifies, and every reader finds the row at its max; a max
    below that millisecond is still a difference, naming the file."""
    import datetime as dt

    from deltalake import QueryBuilder

    from lakehouse_assets import MergeOptions
    from lakehouse_assets.core.read import duckdb_readers

    utc = dt.timezone.utc
    top = dt.datetime(2024, 1, 1, 1, 2, 3, 456789)
    root = tmp_path / "events"
    write_deltalake(root, pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=utc), top.replace(tzinfo=utc)], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([dt.datetime(2024, 1, 1), top], pa.timestamp("us")),
    }))  # fmt: skip
    logged = json.loads(json.loads((root / "_delta_log" / f"{0:020d}.json").read_text().splitlines()[-1])["add"]["stats"])
    assert logged["maxValues"]["ntz"].startswith("2024-01-01") and logged["maxValues"]["ntz"].endswith("03.456")  # truncated down
    lh.import_table("st.events", str(root))
    for deep in (False, True):
        report = lh.verify("st.events", deep=deep)
        assert report["agree"], report["differences"]
    assert_all_readers_agree(lh, spark, duck, "st.events")
    table = lh.load("st.events")
    where = "ntz = TIMESTAMP '2024-01-01 01:02:03.456789'"
    assert duck.execute(f"SELECT count(*) FROM {duckdb_readers.delta_scan_sql(table.location())} WHERE {where}").fetchone()[0] == 1
    assert duck.execute(f"SELECT count(*) FROM {duckdb_readers.iceberg_scan_sql(table.metadata_location)} WHERE {where}").fetchone()[0] == 1
    found = QueryBuilder().register("t", DeltaTable(str(root))).execute(f"SELECT id FROM t WHERE {where}").read_all()
    assert len(found) == 1
    later = spark.sql("SELECT 3L AS id, TIMESTAMP'2024-01-02 00:00:00.000001' AS ts, TIMESTAMP_NTZ'2024-01-02 00:00:00.000001' AS ntz")
    lh.write(later, "st.events", mode="append")
    changed = spark.sql("SELECT 2L AS id, TIMESTAMP'2024-01-03 00:00:00.5' AS ts, TIMESTAMP_NTZ'2024-01-03 00:00:00.5' AS ntz")
    lh.write(changed, "st.events", mode="merge", merge=MergeOptions(keys=["id"]))
    assert lh.maintain("st.events", "compaction", spark=spark, compaction_min_input_files=2)["committed"]
    assert_all_readers_agree(lh, spark, duck, "st.events")
    assert lh.verify("st.events", deep=True)["agree"]

    other = tmp_path / "below"
    write_deltalake(other, pa.table({"id": pa.array([1], pa.int64()), "ntz": pa.array([top], pa.timestamp("us"))}))
    lh.import_table("st.below", str(other))

    def below(add, stats):
        stats["maxValues"]["ntz"] = "2024-01-01T01:02:03.455000"  # below the max's own millisecond: readers would skip it
        return stats

    rewrite_stats(other, below)
    assert "Delta max of 'ntz'" in differences(lh.verify("st.below"))

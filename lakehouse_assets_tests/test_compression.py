"""A table's Parquet codec and level come from its Iceberg properties, read as Java Iceberg reads them.

`write.parquet.compression-codec` takes Iceberg's names (`uncompressed`, not pyarrow's `none`), and
`write.parquet.compression-level` applies to zstd and gzip only: Java Iceberg ignores it for the codecs
without levels, and new tables carry level 3 whatever their codec. Brotli (Spark cannot read it) and LZO
(pyarrow cannot write it) are refused. Every writer of a table (appends, merges, compaction) uses the same settings, and a property another engine changed counts from the next write.
"""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from lakehouse_assets import MergeOptions, TableOptions
from lakehouse_assets.core.errors import SpecError
from lakehouse_assets.core.schema.spec import parquet_compression

from .conftest import assert_all_readers_agree, rows_of
from .test_write_modes import events

COLUMNS = ["amount", "event_id", "event_time", "kind", "user_id"]


def file_codecs(lh, duck, identifier: str) -> set[str]:
    """The codec of every column chunk of the table's live data files, as their footers name it (DuckDB reads the
    footer's own codec: pyarrow calls both LZ4 and LZ4_RAW "LZ4")."""
    paths = [pafs.FileSystem.from_uri(task.file.file_path)[1] for task in lh.load(identifier).scan().plan_files()]
    rows = duck.execute("SELECT DISTINCT compression FROM parquet_metadata(?)", [paths]).fetchall()
    return {r[0] for r in rows}


@pytest.mark.parametrize(
    "codec, in_footer",
    [("snappy", "SNAPPY"), ("uncompressed", "UNCOMPRESSED"), ("gzip", "GZIP"), ("lz4", "LZ4_RAW"), ("ZSTD", "ZSTD")],
)
def test_every_iceberg_codec_writes_and_merges_and_every_reader_agrees(lh, spark, duck, codec, in_footer):
    lh.write(events(spark, 0, 300), "c.events", table=TableOptions(properties={"write.parquet.compression-codec": codec}))
    assert lh.load("c.events").properties["write.parquet.compression-level"] == "3"  # ignored for codecs without levels
    changed = events(spark, 250, 100)  # 50 keys again (the merge rewrites their files) and 50 new ones
    lh.write(changed, "c.events", mode="merge", merge=MergeOptions(keys=["event_id"]))
    assert file_codecs(lh, duck, "c.events") == {in_footer}
    expected = {r[1]: r for r in rows_of(events(spark, 0, 300).collect(), COLUMNS)}
    expected.update({r[1]: r for r in rows_of(changed.collect(), COLUMNS)})
    assert_all_readers_agree(lh, spark, duck, "c.events", list(expected.values()))


def test_a_codec_another_engine_sets_counts_from_the_next_write(lh, spark, duck):
    lh.write(events(spark, 0, 200), "c.altered")
    assert file_codecs(lh, duck, "c.altered") == {"ZSTD"}
    with lh.load("c.altered").transaction() as tx:  # what ALTER TABLE ... SET TBLPROPERTIES commits
        tx.set_properties({"write.parquet.compression-codec": "snappy"})
    lh.write(events(spark, 200, 200), "c.altered")
    assert file_codecs(lh, duck, "c.altered") == {"ZSTD", "SNAPPY"}
    assert_all_readers_agree(lh, spark, duck, "c.altered", rows_of(events(spark, 0, 400).collect(), COLUMNS))


def test_codec_and_level_are_read_as_java_iceberg_reads_them():
    codec, level = "write.parquet.compression-codec", "write.parquet.compression-level"
    assert parquet_compression({}, "c.t") == ("zstd", 3)  # Java's Parquet writer's default level
    assert parquet_compression({level: " "}, "c.t") == ("zstd", 3)
    assert parquet_compression({codec: "zstd", level: "9"}, "c.t") == ("zstd", 9)
    assert parquet_compression({codec: "gzip"}, "c.t") == ("gzip", 6)  # zlib's default, as Java's
    assert parquet_compression({codec: " Snappy ", level: "3"}, "c.t") == ("snappy", None)  # no levels: ignored
    assert parquet_compression({codec: "lz4_raw", level: "3"}, "c.t") == ("lz4", None)
    assert parquet_compression({codec: "uncompressed"}, "c.t") == ("none", None)


@pytest.mark.parametrize(
    "properties, message",
    [
        ({"write.parquet.compression-codec": "brotli"}, "'brotli' is not a codec this writer can use (Spark's Parquet reader needs a Brotli codec"),
        ({"write.parquet.compression-level": "23"}, "write.parquet.compression-level='23' is not a level of zstd: use an integer from -131072 to 22 (3 when unset)"),
        ({"write.parquet.compression-codec": "gzip", "write.parquet.compression-level": "10"}, "'10' is not a level of gzip: use an integer from 1 to 9 (6 when unset)"),
    ],
)
def test_a_codec_spark_cannot_read_or_a_level_out_of_range_is_refused(properties, message):
    with pytest.raises(SpecError) as info:
        parquet_compression(properties, "c.t")
    assert str(info.value).startswith("Table c.t: table property ") and message in str(info.value)


def test_a_higher_zstd_level_writes_smaller_files(lh, spark):
    sizes = {}
    for level in ("1", "19"):
        r = lh.write(events(spark, 0, 3000).coalesce(1), f"c.level_{level}", table=TableOptions(properties={"write.parquet.compression-level": level}))
        sizes[level] = r.bytes_written
    assert sizes["19"] < sizes["1"], sizes


def test_a_codec_this_writer_lacks_is_refused_before_the_table_exists(lh, spark):
    with pytest.raises(SpecError) as info:
        lh.write(events(spark, 0, 10), "c.lzo", table=TableOptions(properties={"write.parquet.compression-codec": "lzo"}))
    assert str(info.value).startswith("Table c.lzo: table property write.parquet.compression-codec='lzo' is not a codec this writer can use")
    assert "(pyarrow cannot write LZO); set it to zstd, snappy, gzip, lz4 (written as LZ4_RAW), lz4_raw or uncompressed" in str(info.value)
    assert not lh.catalog.table_exists("c.lzo")


def test_a_bad_codec_set_by_another_engine_fails_the_write_before_any_file(lh, spark, tmp_path):
    lh.write(events(spark, 0, 50), "c.bad")
    before = lh.load("c.bad").current_snapshot().snapshot_id
    with lh.load("c.bad").transaction() as tx:
        tx.set_properties({"write.parquet.compression-level": "high"})
    with pytest.raises(SpecError) as info:
        lh.write(events(spark, 50, 50), "c.bad")
    assert str(info.value) == (
        "Table c.bad: table property write.parquet.compression-level='high' is not a level of zstd: use an integer from -131072 to 22 "
        "(3 when unset), or remove the property."
    )
    assert lh.load("c.bad").current_snapshot().snapshot_id == before
    data = tmp_path / "warehouse" / "c" / "bad" / "data"
    assert len(list(data.rglob("*.parquet"))) == 1  # the first write's file only

"""Writes plan their own tasks and files from the data's size, however the input is partitioned."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from lakehouse_assets import MergeOptions, TableOptions
from lakehouse_assets.core.schema.spec import DEFAULT_TARGET_FILE_SIZE
from lakehouse_assets.core.spark.compat import coalesced_partitions, plan_size_bytes
from lakehouse_assets.core.spark.planning import at_most, by_key, write_tasks

from .conftest import assert_all_readers_agree, rows_of
from .test_write_modes import events

COLUMNS = ["amount", "event_id", "event_time", "kind", "user_id"]
SMALL_TARGET = 64 * 1024  # a tiny target file size, so that a few thousand rows are "several files' worth"


def many_partitions(spark, start: int, n: int, partitions: int = 200):
    """n events in `partitions` input partitions, as an upstream shuffle hands them over."""
    return events(spark, start, n).repartition(partitions)


def data_files(lh, identifier: str):
    return [t.file for t in lh.load(identifier).scan().plan_files()]


def test_a_many_partition_input_is_written_in_target_sized_files(lh, spark, duck):
    df = many_partitions(spark, 0, 3000)
    size = plan_size_bytes(df)
    assert size is not None and size > SMALL_TARGET
    r = lh.write(df, "t.planned", table=TableOptions(target_file_size=SMALL_TARGET))
    planned = write_tasks(df, SMALL_TARGET)
    assert planned < 200
    assert 1 <= r.files_added <= planned  # one file per write task at most here (each task's data is under the target)
    assert_all_readers_agree(lh, spark, duck, "t.planned", rows_of(events(spark, 0, 3000).collect(), COLUMNS))


def test_a_small_many_partition_input_is_one_file(lh, spark):
    r = lh.write(many_partitions(spark, 0, 500), "t.one_file")
    assert r.files_added == 1  # far below the default target size and below a split's worth


def test_a_partitioned_write_of_a_many_partition_input_writes_one_file_per_partition(lh, spark, duck):
    r = lh.write(many_partitions(spark, 0, 3000), "t.by_day", partition_by=["day(event_time)"])
    days = {f.partition[0] for f in data_files(lh, "t.by_day")}
    assert len(days) == 3 and r.files_added == 3  # each day's rows in one task, one file
    assert_all_readers_agree(lh, spark, duck, "t.by_day", rows_of(events(spark, 0, 3000).collect(), COLUMNS))


def keys_per_task(df, tasks: int, key_columns: tuple[str, ...], dense: bool) -> list[set]:
    placed = by_key(df, tasks, [F.col(k) for k in key_columns], dense).select(F.spark_partition_id().alias("task"), F.struct(*key_columns).alias("key"))
    return [set(r.keys) for r in placed.groupBy("task").agg(F.collect_set("key").alias("keys")).collect()]


@pytest.mark.smoke
@pytest.mark.parametrize("tasks", [2, 3, 5, 8])
def test_consecutive_keys_are_spread_evenly_over_the_write_tasks(spark, tasks):
    """14 days and a null day over `tasks` tasks: each key in exactly one task, the tasks' counts of days within one."""
    days = spark.range(1500).select(F.when(F.col("id") % 15 == 14, None).otherwise(F.col("id") % 15 + 20_000).cast("int").alias("day"))
    placed = keys_per_task(days, tasks, ("day",), dense=True)
    assert sum(len(keys) for keys in placed) == 15 and len(set().union(*placed)) == 15  # no key in two tasks
    counts = sorted(sum(1 for key in keys if key.day is not None) for keys in placed)
    assert len(placed) == tasks and counts[-1] - counts[0] <= 1


def test_day_and_bucket_keys_are_spread_evenly_and_other_keys_by_hash(spark):
    days = spark.range(14).select((F.col("id") + 20_000).cast("int").alias("day"))
    pairs = days.crossJoin(spark.range(4).select(F.col("id").cast("int").alias("b")))
    placed = keys_per_task(pairs, 2, ("day", "b"), dense=True)
    assert sorted(len(keys) for keys in placed) == [28, 28] and len(set().union(*placed)) == 56
    names = spark.range(300).select((F.col("id") % 30).cast("string").alias("name"))
    placed = keys_per_task(names, 4, ("name",), dense=False)
    assert sum(len(keys) for keys in placed) == 30 and len(set().union(*placed)) == 30


@pytest.mark.parametrize("partition_by", [[], ["day(event_time)"]])
def test_a_merge_of_a_many_partition_batch_writes_few_files(lh, spark, duck, partition_by):
    lh.write(events(spark, 0, 2000), "t.merged", partition_by=partition_by, table=TableOptions(target_file_size=SMALL_TARGET))
    before = len(data_files(lh, "t.merged"))
    batch = many_partitions(spark, 1500, 1500).withColumn("kind", F.lit("merged"))  # 500 updates, 1,000 new keys
    r = lh.write(batch, "t.merged", mode="merge", merge=MergeOptions(keys=["event_id"]))
    assert r.files_added < 20 and len(data_files(lh, "t.merged")) < before + 20
    expected = rows_of(events(spark, 0, 1500).union(events(spark, 1500, 1500).withColumn("kind", F.lit("merged"))).collect(), COLUMNS)
    assert_all_readers_agree(lh, spark, duck, "t.merged", expected)


def test_a_data_frame_without_a_jvm_plan_is_written_by_every_core(spark):
    class NoJvmPlan:  # what a Spark Connect DataFrame offers: a session, no `_jdf`
        sparkSession = spark

    assert plan_size_bytes(NoJvmPlan()) is None
    assert write_tasks(NoJvmPlan(), SMALL_TARGET) == spark.sparkContext.defaultParallelism


def test_an_input_the_caller_coalesced_keeps_its_fewer_tasks(lh, spark):
    """Spark folds `coalesce(1).coalesce(n)` into `coalesce(n)`: the writer never coalesces to more partitions than
    the input has, so a caller's `coalesce(1)` of an input of unknown size still writes one file."""
    df = spark.createDataFrame([(i, f"n{i}") for i in range(50)], "id long, name string").repartition(2).coalesce(1)
    assert plan_size_bytes(df) is None or write_tasks(df, SMALL_TARGET) >= 1
    assert lh.write(df, "t.coalesced").files_added == 1
    assert lh.write(df.repartition(3, "id"), "t.coalesced").files_added <= 3  # no more files than input partitions


def test_the_write_coalesces_to_its_tasks_but_never_to_more_than_the_input_has(spark):
    shuffled = spark.range(1000).repartition(8)
    assert coalesced_partitions(shuffled.coalesce(1)) == 1
    assert coalesced_partitions(shuffled.coalesce(1).filter("id > 3")) == 1  # the filter is pushed below the coalesce
    assert coalesced_partitions(shuffled) is None and coalesced_partitions(spark.range(10)) is None
    for df, tasks, expected in [
        (shuffled, 2, 2),  # fewer tasks than input partitions: coalesced
        (shuffled.coalesce(1), 4, 1),  # the caller's coalesce to fewer is kept (Spark would fold a second one into it)
        (shuffled.coalesce(1).select("*", (F.col("id") * 2).alias("x")), 4, 1),  # a coalesce over a projection never folds
        (shuffled.repartition(3), 4, 3),  # a coalesce over a shuffle to fewer keeps the shuffle's count
    ]:
        assert at_most(df, tasks).rdd.getNumPartitions() == expected


@pytest.mark.parametrize("partition_by", [[], ["kind"]])
def test_an_aggregated_input_computes_its_upstream_once(lh, spark, partition_by):
    """An input whose plan ends in a shuffle (an aggregation, adaptive execution on) is computed once by the write:
    planning its tasks never runs the input's shuffle just to count its partitions. Counted by an accumulator that
    every upstream row adds one to."""
    seen = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def counted(v):
        seen.add(1)
        return v

    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    df = spark.range(0, 3000, numPartitions=3).select(counted(F.col("id")).alias("id"))
    agg = df.groupBy((F.col("id") % 10).alias("bucket")).agg(F.count("*").alias("n")).withColumn("kind", F.lit("k"))
    r = lh.write(agg, f"t.aggregated_{len(partition_by)}", partition_by=partition_by)
    assert r.rows_written == 10
    assert seen.value == 3000


@pytest.mark.smoke
def test_the_shuffle_by_key_reads_its_input_in_the_writes_tasks(spark):
    """The map side of a partitioned write's shuffle runs in the write's tasks (the coalesce stays under the
    shuffle), not in every partition of an input that arrives in 200."""
    df = spark.range(2000).repartition(200)
    for dense in (True, False):
        shuffled = by_key(at_most(df, 2), 2, [(F.col("id") % 14).cast("int")], dense)
        assert shuffled.columns == ["id"]
        plan = shuffled._jdf.queryExecution().optimizedPlan().toString() if hasattr(shuffled, "_jdf") else shuffled._explain_string(mode="extended")
        assert "Repartition 2, false" in plan, plan
        assert sorted(r.id for r in shuffled.collect()) == list(range(2000))


def test_a_partitioned_write_of_one_tasks_data_runs_without_a_shuffle(lh, spark, duck, monkeypatch):
    """Data small enough for one write task needs no shuffle by key: that one task holds every key, and a small
    append (an hourly job's, a stream's micro-batch) saves a stage. Its days still land in one file each."""
    from lakehouse_assets.core.write import writer

    plans = []
    run = writer.run_write_job

    def recording(mapped, *args, **kwargs):
        plans.append(mapped._jdf.queryExecution().optimizedPlan().toString() if hasattr(mapped, "_jdf") else mapped._explain_string(mode="extended"))
        return run(mapped, *args, **kwargs)

    monkeypatch.setattr(writer, "run_write_job", recording)
    df = many_partitions(spark, 0, 3000, partitions=6)
    assert write_tasks(df, DEFAULT_TARGET_FILE_SIZE) == 1
    r = lh.write(df, "t.one_task_by_day", partition_by=["day(event_time)"])
    assert len(plans) == 1 and "RepartitionByExpression" not in plans[0], plans  # a coalesce only ("Repartition 1, false")
    assert r.files_added == len({f.partition[0] for f in data_files(lh, "t.one_task_by_day")}) == 3
    assert_all_readers_agree(lh, spark, duck, "t.one_task_by_day", rows_of(events(spark, 0, 3000).collect(), COLUMNS))

"""What differs between Spark lines and between kinds of session, in one place: the rest of the code runs unchanged.

Spark 3.5 and Spark 4; and a classic session (PySpark drives a JVM in this process through py4j) or a Spark Connect
session (`SparkSession.builder.remote(...)`, Databricks Connect, `spark.api.mode=connect`, `pyspark-client`: no JVM
here, only the DataFrame API over gRPC). Where a classic session offers something faster through its JVM, the
classic path keeps it; a Connect session gets a path through the DataFrame API alone. Every JVM access of the
project lives in this module or behind `is_connect` (the reader's relations).
"""

from __future__ import annotations

import logging
import pickle
import re
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger("lakehouse")


def is_spark3() -> bool:
    import pyspark

    return pyspark.__version__.startswith("3.")


def arrow_schema(spark_schema):
    """The Arrow schema of the batches Spark hands `mapInArrow` for `spark_schema` (timestamps in UTC microseconds).

    Spark 4's converter asks for the session time zone, which is UTC here (DEFAULT_SPARK_CONFIG); 3.5's assumes it."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema) if is_spark3() else to_arrow_schema(spark_schema, timezone="UTC")


def column_of_expression(spark, make_expression, *columns):
    """A Column of the Catalyst expression `make_expression(jvm, *their expressions)` built over `columns`.

    For the few expressions PySpark does not expose (e.g. Murmur3Hash with another seed than `hash()`'s):
    Spark 3.5's Column wraps an Expression; Spark 4's is converted by ExpressionUtils."""
    from pyspark.sql import Column

    jvm = spark._jvm
    if is_spark3():
        expressions = [c._jc.expr() for c in columns]
        return Column(jvm.org.apache.spark.sql.Column(make_expression(jvm, *expressions)))
    utils = jvm.org.apache.spark.sql.classic.ExpressionUtils
    expressions = [utils.expression(c._jc) for c in columns]
    return Column(utils.column(make_expression(jvm, *expressions)))


def cache_figures(cache_builder) -> tuple[int, int]:
    """(rows, bytes) of a filled Spark cache (a CachedRDDBuilder): 3.5 keeps them in accumulators, 4 as properties."""
    if is_spark3():
        return int(cache_builder.rowCountStats().value()), int(cache_builder.sizeInBytesStats().value())
    return int(cache_builder.materializedRowCount()), int(cache_builder.materializedSizeInBytes())


def is_connect(spark_or_df) -> bool:
    """Whether a session (or a DataFrame's session) talks Spark Connect: no JVM in this process."""
    return type(spark_or_df).__module__.startswith("pyspark.sql.connect.")


def foreach_batch_runs_here(spark) -> bool:
    """Whether a streaming query's `foreachBatch` function runs in this Python process (classic) or in the Spark
    Connect server's (a pickled copy: what it records stays there)."""
    return not is_connect(spark)


def murmur3_column(col, seed: int):
    """Spark's Murmur3Hash of `col` with `seed` (the public `hash()` fixes seed 42), or None where no Column can
    be built for it: Spark Connect has no way to name a Catalyst expression PySpark does not expose (callers then
    compute the value in Python on the executors, with pyiceberg's transform)."""
    from pyspark.sql import SparkSession

    if is_connect(col):
        return None

    def murmur3(jvm, expr):
        return jvm.org.apache.spark.sql.catalyst.expressions.Murmur3Hash(jvm.PythonUtils.toSeq([expr]), seed)

    return column_of_expression(SparkSession.getActiveSession(), murmur3, col)


_PARALLELISM: dict[str, int] = {}  # a Connect session's id -> its server's default parallelism
_PARALLELISM_LOCK = threading.Lock()


def default_parallelism(spark) -> int:
    """How many tasks the cluster runs at once by default (SparkContext.defaultParallelism).

    A Connect session has no SparkContext: `spark.default.parallelism` if the server sets it, else the number of
    tasks the server splits a range into by default (what it gives any leaf without a count of its own), found
    by one small job the first time a session asks."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    key = spark.session_id
    with _PARALLELISM_LOCK:
        if key in _PARALLELISM:
            return _PARALLELISM[key]
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        found = int(configured)
    else:
        from pyspark.sql import functions as F

        tasks = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("task"))
        found = int(tasks.agg(F.max("task")).first()[0]) + 1
    with _PARALLELISM_LOCK:
        _PARALLELISM[key] = found
    return found


_FILE_NAMES: dict[str, bool] = {}  # a Connect session's id -> whether its server has input_file_name()


def has_input_file_name(spark) -> bool:
    """Whether the session's engine has Spark's `input_file_name()`. Spark has; Sail (a Spark Connect server written
    in Rust) has not (docs/remote-spark.md). A Connect session's server is asked once, by a one-row query."""
    if not is_connect(spark):
        return True
    key = spark.session_id
    with _PARALLELISM_LOCK:
        if key in _FILE_NAMES:
            return _FILE_NAMES[key]
    from pyspark.sql import functions as F

    try:
        spark.range(1).select(F.input_file_name()).collect()
        found = True
    except Exception:  # noqa: BLE001 - the engine refuses the function: readers that need it take the pyarrow road
        found = False
    with _PARALLELISM_LOCK:
        _FILE_NAMES[key] = found
    return found


_OBSERVES: dict[str, bool] = {}  # a Connect session's id -> whether an Observation returns its metrics there


def observes(spark) -> bool:
    """Whether an `Observation` of this session's DataFrames returns its metrics with the job that runs them.

    Classic: yes. Connect: PySpark 3.5's client drops them (its Observation reads them from a JVM it has not); a
    PySpark 4 client gets them with the query's result when the server computes them (Spark does; Sail refuses the
    plan), found by one observed one-row query the first time a session asks."""
    if not is_connect(spark):
        return True
    if is_spark3():
        return False
    key = spark.session_id
    with _PARALLELISM_LOCK:
        if key in _OBSERVES:
            return _OBSERVES[key]
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    probe = Observation("lakehouse_observes")
    try:
        spark.range(1).observe(probe, F.count(F.lit(1)).alias("rows")).collect()
        found = probe.get.get("rows") == 1
    except Exception:  # noqa: BLE001 - the server refuses the plan: callers that need the metrics say so
        found = False
    with _PARALLELISM_LOCK:
        _OBSERVES[key] = found
    return found


_UDFS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # SparkContext -> {function's pickle: its Python UDF}
_UDFS_LOCK = threading.Lock()
_UDFS_PER_CONTEXT = 32


def map_in_arrow(df, fn, schema, *, reuse: bool = False):
    """`df.mapInArrow(fn, schema)`. With `reuse` on a classic session, the Python UDF of an equal `fn` (equal pickle)
    is made once per SparkContext and reused: PySpark makes a new one per call (pickles `fn` and registers it in the
    JVM, about 9 ms), which a stream of small batches would pay per batch. A reused `fn` must not hold what differs
    per write (the file writer reads its write id from the job's tag, `task_tag`). Connect: PySpark's own call."""
    if not reuse or is_connect(df):
        return df.mapInArrow(fn, schema)
    from pyspark.sql import DataFrame

    udf = _reused_udf(df.sparkSession.sparkContext, fn, schema)
    if udf is None:
        return df.mapInArrow(fn, schema)
    column = udf(*[df[name] for name in df.columns])  # what PySpark's mapInArrow passes: every column of `df`
    if is_spark3():
        return DataFrame(df._jdf.pythonMapInArrow(column._jc.expr(), False), df.sparkSession)
    return DataFrame(df._jdf.mapInArrow(column._jc, False, None), df.sparkSession)  # Spark 4: (column, barrier, resource profile)


def _reused_udf(sc, fn, schema):
    from pyspark.rdd import PythonEvalType
    from pyspark.sql.pandas.functions import pandas_udf

    try:
        key = (pickle.dumps(fn), schema.json())
    except Exception:  # noqa: BLE001 - a function plain pickle cannot key (cloudpickle still ships it): not reused
        return None
    with _UDFS_LOCK:
        udfs = _UDFS.setdefault(sc, OrderedDict())
        udf = udfs.get(key)
        if udf is None:
            udf = udfs[key] = pandas_udf(fn, returnType=schema, functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
            while len(udfs) > _UDFS_PER_CONTEXT:
                udfs.popitem(last=False)
        else:
            udfs.move_to_end(key)
    return udf


def task_tag() -> str | None:
    """In an executor task of a classic session: the tag its job carries (`tagged_jobs`), else None."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.getLocalProperty(_JOB_GROUP) if ctx is not None else None


def is_cached(df) -> bool:
    """Whether Spark's cache holds this DataFrame's plan (cached through this object or another with the same plan)."""
    level = df.storageLevel  # looked up in the session's cache manager by plan (a round trip on Connect)
    return level.useMemory or level.useDisk or level.useOffHeap


def collect_arrow(df) -> list:
    """`df`'s rows on the driver as Arrow record batches (PySpark's own Arrow collect, the one `toPandas` uses)."""
    if is_connect(df):
        return df.toArrow().to_batches()
    return df._collect_as_arrow()


def run_indexed_tasks(spark, tasks: int, fn, schema) -> list[dict]:
    """`fn`, a mapInArrow function, run in `tasks` tasks, task `i` given the one-row batch `id = i`; every row it
    yields, on the driver, as a dict (`schema`: their Spark types, for the DataFrame road).

    A classic session runs it as an RDD job: no SQL plan to analyse and optimise and no Arrow stream to open,
    about 75 ms less per job (two trivial tasks here: 0.12 s against 0.20 s through `spark.range(...).mapInArrow`),
    which a small merge or compaction pays once. A Connect session has no RDDs: the DataFrame road."""
    if is_connect(spark):
        return [r.asDict() for r in spark.range(tasks, numPartitions=tasks).mapInArrow(fn, schema).collect()]
    return spark.sparkContext.range(tasks, numSlices=tasks).mapPartitions(_ArrowTask(fn)).collect()


class _ArrowTask:
    """RDD function over task indexes: `fn` (a mapInArrow function) given them as one batch; its rows as dicts."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, indexes):
        import pyarrow as pa

        batch = pa.record_batch([pa.array(list(indexes), pa.int64())], names=["id"])
        for out in self.fn(iter([batch])):
            yield from out.to_pylist()


def filled_cache_figures(df) -> tuple[int, int] | None:
    """(rows, bytes) of the filled Spark cache `df` reads through projections only, or None (not cached, not
    filled, or not knowable).

    Classic: the cache's own counters through the JVM. Connect: the optimized plan in the server's
    `explain(mode="cost")` text, where a filled cache states its row count (three significant digits: the
    figures are for thresholds). A cache not filled yet states no row count, unless its input has one (local
    rows, small by nature): its first reader then fills it."""
    if is_connect(df):
        return _connect_cache_figures(df)
    try:  # Spark internals (InMemoryRelation / CachedRDDBuilder); any change falls back to the Spark path
        plan = df._jdf.queryExecution().optimizedPlan()
        while plan.getClass().getSimpleName() == "Project":
            plan = plan.child()
        if plan.getClass().getSimpleName() != "InMemoryRelation":
            return None
        cache = plan.cacheBuilder()
        if not cache.isCachedColumnBuffersLoaded():
            return None
        return cache_figures(cache)
    except Exception:  # noqa: BLE001
        return None


def _connect_cache_figures(df) -> tuple[int, int] | None:
    try:
        text = df._explain_string(mode="cost")
    except Exception:  # noqa: BLE001 - figures for a shortcut: without them, the general road
        return None
    plan = text.split("== Optimized Logical Plan ==", 1)[-1].split("== Physical Plan ==", 1)[0]
    for line in plan.strip().splitlines():
        node = line.lstrip(" +-:").split(" ", 1)[0]
        if node == "Project":
            continue
        m = re.search(r"Statistics\(sizeInBytes=([0-9.]+)\s*([KMGTPE]i)?B, rowCount=([0-9.E+]+)\)", line)
        if node != "InMemoryRelation" or not m:
            return None  # not a cache, or one not filled yet (it states no row count)
        size = int(float(m.group(1)) * 1024 ** " KMGTPE".index((m.group(2) or " ")[0]))
        return int(float(m.group(3))), size
    return None


def coalesced_partitions(df) -> int | None:
    """The partition count of a `coalesce` at the top of `df`'s optimized plan, or None (another plan; Connect).

    Spark folds a coalesce directly over another into the outer one (`coalesce(1).coalesce(4)` runs 4 tasks),
    while a coalesce over any other plan never raises its partition count. Reading the optimized plan, which
    the size estimate (`plan_size_bytes`) computed already, costs nothing; counting the partitions of any plan
    would plan it physically (the better part of a second for a small write in a fresh JVM)."""
    if is_connect(df):
        return None
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        if plan.getClass().getSimpleName() == "Repartition" and not plan.shuffle():
            return int(plan.numPartitions())
    except Exception:  # noqa: BLE001 - callers have a default
        return None
    return None


def plan_size_bytes(df) -> int | None:
    """The optimizer's size estimate of `df`'s output in bytes (what Spark's cost-based decisions use), or None.

    Classic: the optimized plan's statistics through the JVM. Connect: the same statistics, from the server's
    `explain(mode="cost")` text of the DataFrame."""
    try:
        if not is_connect(df):
            return _known(int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())))  # a Scala BigInt, or an int from py4j
        text = df._explain_string(mode="cost")
    except Exception:  # noqa: BLE001 - an estimate: callers have a default
        return None
    m = re.search(r"Statistics\(sizeInBytes=([0-9.]+)\s*([KMGTPE]i)?B", text)
    if not m:
        return None
    return _known(int(float(m.group(1)) * 1024 ** " KMGTPE".index((m.group(2) or " ")[0])))


_UNKNOWN_SIZE = (1 << 63) - 1  # spark.sql.defaultSizeInBytes: what Spark states for a plan it cannot size


def _known(size: int) -> int | None:
    return size if 0 <= size < _UNKNOWN_SIZE else None


_JOB_GROUP = "spark.jobGroup.id"  # what SparkContext.setJobGroup sets


@contextmanager
def tagged_jobs(spark, tag: str) -> Iterator[None]:
    """Every Spark job this thread starts inside the block carries `tag`, so `stop_tagged_jobs` can stop them:
    a job group on a classic session (the previous one is restored), an operation tag on a Connect session."""
    if is_connect(spark):
        spark.addTag(tag)
        try:
            yield
        finally:
            spark.removeTag(tag)
        return
    sc = spark.sparkContext
    previous_group = sc.getLocalProperty(_JOB_GROUP)
    sc.setLocalProperty(_JOB_GROUP, tag)
    try:
        yield
    finally:
        sc.setLocalProperty(_JOB_GROUP, previous_group)


def stop_tagged_jobs(spark, tag: str, timeout_s: float = 60.0) -> bool:
    """Cancel what is left of the jobs tagged `tag` (`tagged_jobs`) and wait until none of their tasks runs.

    When a job fails its other tasks are still running (Spark kills them asynchronously). A classic session
    watches them end through the status tracker (`_tagged_tasks_ended`) and returns True. A Connect session
    interrupts the tagged operations but cannot see tasks: it returns False, and the caller waits for them to stop
    another way (`python_task_kill_seconds`)."""
    if is_connect(spark):
        try:
            spark.interruptTag(tag)
        except Exception as e:  # noqa: BLE001 - the job already failed; the caller still cleans up
            log.warning("cannot interrupt the operations tagged %s: %s", tag, e)
        return False
    sc = spark.sparkContext
    sc.cancelJobGroup(tag)
    _status_store_caught_up(sc)
    tracker = sc.statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _tagged_tasks_ended(tracker, tag):
            return True
        time.sleep(0.05)
    log.warning("tasks of the jobs %s still run after %.0f s", tag, timeout_s)
    return True


def _status_store_caught_up(sc, timeout_ms: int = 5000) -> None:
    """Wait until Spark's listener bus has delivered the events posted so far: the status store is written by one of
    its listeners, and a job that failed at once may not be in it yet."""
    try:
        sc._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)
    except Exception as e:  # noqa: BLE001 - a bus busy past the timeout: the tracker as it is, still waited on
        log.debug("Spark's listener bus not drained: %s", e)


def _tagged_tasks_ended(tracker, tag: str) -> bool:
    """Whether every job tagged `tag` has ended and none of its tasks still runs, as the status tracker says.

    The tracker reads Spark's status store, which its listener writes behind the scheduler: a task's start reaches a
    stage's count in the store at most every `spark.ui.liveUpdate.period` (100 ms), so a job failing within that
    time can show no running task while one runs. The store is exact when a stage ends (and when its last task
    does), and a job ends after its stages: once the job has ended there, its stages' counts are exact or higher."""
    for job_id in tracker.getJobIdsForGroup(tag):
        job = tracker.getJobInfo(job_id)
        if job is None:  # no longer kept by the store: long over
            continue
        if job.status == "RUNNING":
            return False
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None and stage.numActiveTasks:
                return False
    return True


def python_task_kill_seconds(spark) -> float:
    """How long Spark lets a cancelled task's Python worker run before it kills it (`spark.python.task.killTimeout`)."""
    raw = str(spark.conf.get("spark.python.task.killTimeout", "2s") or "2s").strip().lower()
    m = re.fullmatch(r"([0-9.]+)\s*(ms|s|m|min)?", raw)
    if not m:
        return 2.0
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0}[m.group(2)]


def streaming_query_id(spark) -> str | None:
    """The id of the streaming query whose micro-batch runs on this thread (inside `foreachBatch`), else None.

    Spark sets it as the local property `sql.streaming.queryId` on the stream's thread; the id is kept in the
    query's checkpoint, so it is the same after a restart. Spark Connect has no SparkContext: None."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext on the client
        return None
    return sc.getLocalProperty("sql.streaming.queryId") or None

"""What differs between Spark 3.5 and Spark 4, in one place: the rest of the code runs unchanged on both."""

from __future__ import annotations


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


_UNKNOWN_SIZE = (1 << 63) - 1  # spark.sql.defaultSizeInBytes: what Spark states for a plan it cannot size


def plan_size_bytes(df) -> int | None:
    """Spark's estimate of `df`'s size in bytes (the statistics of its optimized plan: files' sizes for a scan,
    the measured size of a filled cache, row count times row width for generated rows), or None when Spark
    has none: a plan it cannot size, or a session without the JVM's plan at hand (Spark Connect)."""
    jdf = getattr(df, "_jdf", None)  # a Spark Connect DataFrame has no JVM handle
    if jdf is None:
        return None
    try:
        size = int(str(jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))  # a Scala BigInt (py4j may give an int)
    except Exception:  # a plan Spark cannot analyze raises later, in the write itself, with its own message
        return None
    return size if 0 <= size < _UNKNOWN_SIZE else None


def default_parallelism(spark) -> int:
    """The cores Spark runs tasks on (SparkContext.defaultParallelism); on Spark Connect, which has no
    SparkContext, the session's shuffle partitions."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))


def streaming_query_id(spark) -> str | None:
    """The id of the streaming query whose micro-batch runs on this thread (inside `foreachBatch`), else None.

    Spark sets it as the local property `sql.streaming.queryId` on the stream's thread; the id is kept in the
    query's checkpoint, so it is the same after a restart. Spark Connect has no SparkContext: None."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext on the client
        return None
    return sc.getLocalProperty("sql.streaming.queryId") or None

"""Spark's own Parquet reader over a list of data files, on a classic or a Spark Connect session: the one place the
read path reaches into Spark's JVM.

A classic session builds Spark's relation over the files once per session, schema and file list, through py4j
(`_relation`: a new read of the same snapshot reuses it); a Connect session has no JVM in this process and sends
`spark.read.parquet` to the server, which resolves the files when it runs the plan. `parquet_files` decides.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from ..memo import ByImmutableFiles
from .compat import is_connect


def parquet_files(spark, spark_schema, uris: list[str]):
    """`spark.read.schema(spark_schema).parquet(*uris)` with the proleptic-Gregorian rebase options, the classic
    session's relation reused (see the module docstring)."""
    return _connect_parquet(spark, spark_schema, uris) if is_connect(spark) else _relation(spark, spark_schema, uris)


# JVM objects reads reuse, under (the Spark session's id, what they were made from). Spark's relation over a list
# of data files (its file index) is one: data files never change once written (a commit adds new ones), so the
# relation, and the file sizes its index read, stay right for as long as the file list is what a read plans; a
# new snapshot plans a new list. Relations are weighed by their files; the rest (readers, a Pattern) are few.
_RELATIONS = ByImmutableFiles(max_weight=50_000, weight=lambda hit: len(hit[1].uris))
_JVM_OBJECTS = ByImmutableFiles(max_weight=64)


def _per_session(cache: ByImmutableFiles, spark, key: tuple, make):
    """`make()`, kept in `cache` for `spark`'s JVM session (a new session makes its own)."""
    jsession = spark._jsparkSession
    hit = cache.get((id(jsession), *key), lambda: (jsession, make()))
    if hit[0] is not jsession:  # another session that got the same id after the first was gone
        hit = (jsession, make())
    return hit[1]


@dataclass(frozen=True)
class _Relation:
    uris: tuple[str, ...]
    relation: object  # the JVM BaseRelation (a HadoopFsRelation)
    dataframe: type  # PySpark's DataFrame class for this session (Spark 4 has several)


def _relation(spark, spark_schema, uris: list[str]):
    """`spark.read.schema(spark_schema).parquet(*uris)`, its Spark relation made once per session, schema and file list.

    Making the relation is most of a small read's driver time (~5 ms for one file here: Spark looks up the Parquet
    source through Java's ServiceLoader, checks that each path exists in a new thread pool, copies the Hadoop
    configuration); reading the same files again (asset checks and several downstream assets reading one
    snapshot, the next read of an unchanged table) reuses it. Each read gets a new DataFrame over it, with columns
    of its own (as Spark gives each query of a catalog table), so two reads of one snapshot join like two tables."""

    def make() -> _Relation:
        reader = _configured_reader(spark, spark_schema)
        with _listed_on_driver(spark, len(uris)):
            df = _parquet(spark, reader, uris)
        return _Relation(tuple(uris), df._jdf.logicalPlan().relation(), type(df))

    made = _per_session(_RELATIONS, spark, (spark_schema.json(), tuple(uris)), make)
    # What DataFrameReader does with a relation it resolved: a new LogicalRelation, new column ids.
    return made.dataframe(spark._jsparkSession.baseRelationToDataFrame(made.relation), spark)


_REBASE_OPTIONS = {"datetimeRebaseMode": "CORRECTED", "int96RebaseMode": "CORRECTED"}


def _connect_parquet(spark, spark_schema, uris: list[str]):
    """`spark.read.schema(spark_schema).parquet(*uris)` with the rebase options, on a Spark Connect session: the
    plan travels to the server, which resolves the files when it runs it (no JVM objects here to reuse)."""
    return spark.read.schema(spark_schema).options(**_REBASE_OPTIONS).parquet(*uris)


def _parquet(spark, reader, uris: list[str]):
    """`reader.parquet(*uris)` in one py4j round trip for one file and a fixed number for many. PySpark converts
    the paths to a Java list one round trip per path (py4j's ListConverter): 560 of them for a compaction of 560
    files. One path goes to the reader's single-path overload; many are joined into one string that the JVM
    splits into a String[] for the reader's Java varargs overload (a URI never holds a newline; one that does
    takes PySpark's way)."""
    if any("\n" in u for u in uris):
        return reader.parquet(*uris)
    if len(uris) == 1:
        return reader._df(reader._jreader.parquet(uris[0]))
    # A JVM `Pattern` of "\n", made once (resolving the class through py4j costs a round trip per name part).
    newline = _per_session(_JVM_OBJECTS, spark, ("newline",), lambda: spark._jvm.java.util.regex.Pattern.compile("\n"))
    paths = newline.split("\n".join(uris), -1)  # -1: keep every part
    return reader._df(reader._jreader.parquet(paths))


def _configured_reader(spark, spark_schema):
    """A DataFrameReader of `spark` with `spark_schema` and the rebase options set, made once per session and schema.

    Setting them costs five py4j round trips (~0.6 ms each here). `parquet(...)` reads the reader's settings and
    never changes them (it sets the format to parquet, the same every time), so one reader serves every read with
    that schema, from any thread. The schema is parsed by `spark` itself: PySpark's `schema()` would look up the
    active session first (a new Python SparkSession wrapper and several JVM round trips)."""
    schema_json = spark_schema.json()

    def make():
        reader = spark.read
        jreader = reader._jreader.schema(spark._jsparkSession.parseDataType(schema_json))
        for key, value in _REBASE_OPTIONS.items():
            jreader = jreader.option(key, value)
        reader._jreader = jreader
        return reader

    return _per_session(_JVM_OBJECTS, spark, ("reader", schema_json), make)


# Spark lists more than this many paths with a Spark job (one task per path): a job per read.
LISTING_THRESHOLD_KEY = "spark.sql.sources.parallelPartitionDiscovery.threshold"
SPARK_DEFAULT_LISTING_THRESHOLD = 32


@contextmanager
def _listed_on_driver(spark, paths: int):
    """Let Spark stat the given files on the driver instead of launching a listing job.

    The paths are files Iceberg or Delta already listed (no directory to walk): above the threshold
    (32) Spark would run a whole job of one task per path just to stat them, which costs more than
    the stats. `read.parquet` builds its file index eagerly, so the setting is only needed for the call.
    """
    if paths <= SPARK_DEFAULT_LISTING_THRESHOLD:
        # Within Spark's default: no conf round trips (a session that lowered the threshold lists with a job, as before).
        yield
        return
    previous = spark.conf.get(LISTING_THRESHOLD_KEY, None)
    if previous is not None and int(previous) >= paths:
        yield
        return
    spark.conf.set(LISTING_THRESHOLD_KEY, str(paths))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(LISTING_THRESHOLD_KEY)
        else:
            spark.conf.set(LISTING_THRESHOLD_KEY, previous)

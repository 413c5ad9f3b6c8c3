"""Spark + Java Iceberg (the reference implementation) writes to a project table through the project's own catalog.

Java commits with Iceberg's own `JdbcCatalog` to the warehouse's embedded SQLite catalog (`catalog.db`, the
same `iceberg_tables` row pyiceberg's SqlCatalog reads; the JDBC driver is Debian's sqlite-jdbc, see
`java_iceberg.jdbc_catalog_conf`). After each Java operation: what Delta can express is mirrored by
`lakehouse repair` and both formats agree (verify, `--deep`, DuckDB on both formats, delta-rs, pyiceberg,
Spark through the project, and Java itself); a merge-on-read DELETE's position-delete files reach Delta as a deletion
vector, the project operations that cannot apply them refuse, and `repair --apply-deletes` makes the table whole.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakehouse_assets import DeleteFilesError, MergeOptions
from lakehouse_assets.core.formats.deletes import table_files

from . import java_iceberg
from .conftest import assert_all_readers_agree, rows_of

# The Java Iceberg runtime exists here for Spark 3.5 only (java_iceberg.available).
pytestmark = pytest.mark.java_iceberg

CATALOG = "javaw"  # the lakehouse's catalog name in this test = the Spark catalog's name (catalog_name column)
NAME = "jw.events"
JAVA = f"{CATALOG}.{NAME}"


@pytest.fixture
def lh_java(warehouse, monkeypatch, spark):
    from lakehouse_assets import Lakehouse

    monkeypatch.setenv("LAKEHOUSE_CATALOG", CATALOG)
    for key, value in java_iceberg.jdbc_catalog_conf(CATALOG, warehouse).items():
        spark.conf.set(key, value)
    return Lakehouse(warehouse)


def columns(lh) -> list[str]:
    return sorted(f.name for f in lh.load(NAME).schema().fields)


def want(lh, model: dict) -> list[tuple]:
    cols = columns(lh)
    return sorted((tuple(r.get(c) for c in cols) for r in model.values()), key=repr)


def java_rows(lh, spark) -> list[tuple]:
    return rows_of(spark.table(JAVA).collect(), columns(lh))


def snapshot_summary(lh) -> dict:
    return lh.load(NAME).current_snapshot().summary.additional_properties


def mirrored_and_agreeing(lh, spark, duck, model: dict, *, all_readers: bool = True) -> None:
    """repair mirrors the Java snapshot(s); both formats and Java read the model: verify --deep (DuckDB reads
    each format) always, and with `all_readers` also DuckDB, delta-rs, pyiceberg and Spark through the project."""
    assert not lh.verify(NAME)["agree"]  # Java's commit is seen before the mirror runs
    assert lh.repair(NAME)["repaired"]
    deep = lh.verify(NAME, deep=True)
    assert deep["agree"], deep["differences"]
    if all_readers:
        assert_all_readers_agree(lh, spark, duck, NAME, want(lh, model))
    assert java_rows(lh, spark) == want(lh, model)


def test_java_iceberg_writes_through_the_project_catalog(lh_java, spark, duck):
    lh = lh_java
    rows = [(i, f"n{i}", "US" if i % 2 else "DE") for i in range(10)]
    lh.write(spark.createDataFrame(rows, "id long, name string, country string").coalesce(1), NAME, partition_by=["country"])
    model = {i: {"id": i, "name": n, "country": c} for i, n, c in rows}
    table = lh.load(NAME)
    assert table.format_version == 2
    assert java_rows(lh, spark) == want(lh, model)  # Java loads the table from the same catalog row

    # Append.
    spark.sql(f"INSERT INTO {JAVA} VALUES (100, 'a', 'FR'), (101, 'b', 'US')")
    table = lh.load(NAME)
    # Java wrote its metadata JSON where the table says (`write.metadata.path`), and the catalog points at it.
    assert "/_iceberg/" in table.metadata_location and table.metadata_location.endswith(".metadata.json")
    summary = snapshot_summary(lh)
    assert (summary["engine-name"], table.current_snapshot().summary.operation.value, summary["added-data-files"]) == ("spark", "append", "2")
    model[100], model[101] = {"id": 100, "name": "a", "country": "FR"}, {"id": 101, "name": "b", "country": "US"}
    mirrored_and_agreeing(lh, spark, duck, model, all_readers=False)

    # DELETE, copy-on-write (Iceberg's default mode): the US file holding id 3 is rewritten without it.
    spark.sql(f"DELETE FROM {JAVA} WHERE id = 3")
    summary = snapshot_summary(lh)
    assert (lh.load(NAME).current_snapshot().summary.operation.value, summary["deleted-data-files"], summary["added-data-files"]) == ("overwrite", "1", "1")
    del model[3]
    # and a delete of a whole partition: metadata only (operation `delete`, files removed, none added).
    spark.sql(f"DELETE FROM {JAVA} WHERE country = 'FR'")
    assert lh.load(NAME).current_snapshot().summary.operation.value == "delete"
    del model[100]
    mirrored_and_agreeing(lh, spark, duck, model, all_readers=False)

    # UPDATE, copy-on-write.
    spark.sql(f"UPDATE {JAVA} SET name = 'upd' WHERE id IN (4, 7)")
    model[4]["name"] = model[7]["name"] = "upd"
    assert lh.load(NAME).current_snapshot().summary.operation.value == "overwrite"
    assert snapshot_summary(lh)["total-delete-files"] == "0"
    mirrored_and_agreeing(lh, spark, duck, model, all_readers=False)

    # MERGE INTO, copy-on-write.
    spark.sql(
        f"MERGE INTO {JAVA} t USING (SELECT * FROM VALUES (0L, 'm0', 'DE'), (200L, 'new', 'NL') AS s(id, name, country)) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.name = s.name WHEN NOT MATCHED THEN INSERT *"
    )
    model[0]["name"] = "m0"
    model[200] = {"id": 200, "name": "new", "country": "NL"}
    assert lh.load(NAME).current_snapshot().summary.operation.value == "overwrite"
    assert snapshot_summary(lh)["total-delete-files"] == "0"
    mirrored_and_agreeing(lh, spark, duck, model, all_readers=False)

    # ALTER TABLE ADD COLUMN (metadata only), then rows that use it.
    spark.sql(f"ALTER TABLE {JAVA} ADD COLUMN email string")
    report = lh.verify(NAME)
    assert not report["agree"] and any("email" in d for d in report["differences"])
    lh.repair(NAME)
    assert "email" in [f.name for f in DeltaTable(lh.load(NAME).location()).schema().fields]
    spark.sql(f"INSERT INTO {JAVA} VALUES (300, 'e', 'US', 'e@x')")
    for r in model.values():
        r["email"] = None
    model[300] = {"id": 300, "name": "e", "country": "US", "email": "e@x"}
    mirrored_and_agreeing(lh, spark, duck, model)

    # DELETE, merge-on-read: Java writes position-delete files. The property opts the table in to merge-on-read, so
    # the mirror carries them to Delta as a deletion vector.
    spark.sql(f"ALTER TABLE {JAVA} SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    before_delta = DeltaTable(lh.load(NAME).location()).version()
    spark.sql(f"DELETE FROM {JAVA} WHERE id IN (5, 9)")
    del model[5], model[9]
    files = table_files(lh.load(NAME))
    # Format v2: a Parquet position-delete file (deletion vectors are v3 only), no equality deletes.
    assert len(files.position_deletes) == 1 and not files.equality_deletes
    assert files.position_deletes[0].data_file.file_path.endswith(".parquet")
    assert snapshot_summary(lh)["added-position-deletes"] == "2"
    assert java_rows(lh, spark) == want(lh, model)  # Java applies them
    assert rows_of(lh.load(NAME).scan().to_arrow().to_pylist(), columns(lh)) == want(lh, model)  # pyiceberg too

    # The ALTER opted the table in to merge-on-read: Delta expresses Java's deletes as deletion vectors once it mirrors them.
    report = lh.verify(NAME)
    assert not report["agree"] and report["differences"] == [f"Delta lags Iceberg by 1 snapshot(s); run `lakehouse repair {NAME}`"]
    lh.repair(NAME)
    root = lh.load(NAME).location()
    assert DeltaTable(root).version() == before_delta + 1 and lh.delta_lag(NAME) == 0  # the snapshot's one version
    (vector,) = pa.table(DeltaTable(root).deletion_vectors()).column("selection_vector").to_pylist()
    assert vector.count(False) == 2
    assert sorted(duck.execute(f"SELECT id FROM delta_scan('{root}')").fetchall()) == sorted((i,) for i in model)
    report = lh.verify(NAME)
    assert report["agree"] and report["iceberg_deleted_rows"] == report["delta_deleted_rows"] == 2, report["differences"]
    assert rows_of(lh.read(spark, NAME).collect(), columns(lh)) == want(lh, model)  # and the project's Spark reader
    batch = spark.createDataFrame([(5, "back", "US", None)], "id long, name string, country string, email string")
    with pytest.raises(DeleteFilesError, match=r"Table jw\.events: .*A merge"):
        lh.write(batch, NAME, mode="merge", merge=MergeOptions(keys=["id"]))
    planned = lh.maintain(NAME, "compaction", spark=spark, dry_run=True, compaction_min_input_files=1)
    assert (planned["files_with_deletes_folded"], planned["deleted_rows_folded"]) == (1, 2)  # compaction folds them in

    repaired = lh.repair(NAME, apply_deletes=True, spark=spark)
    assert repaired["apply_deletes"]["rows_deleted"] == 2
    assert table_files(lh.load(NAME)).deletes == []
    deep = lh.verify(NAME, deep=True)
    assert deep["agree"], deep["differences"]
    assert_all_readers_agree(lh, spark, duck, NAME, want(lh, model))
    assert java_rows(lh, spark) == want(lh, model)

    # The project and Java keep writing to the same table.
    lh.write(batch, NAME, mode="merge", merge=MergeOptions(keys=["id"]))
    model[5] = {"id": 5, "name": "back", "country": "US", "email": None}
    spark.sql(f"INSERT INTO {JAVA} VALUES (400, 'j', 'DE', NULL)")
    model[400] = {"id": 400, "name": "j", "country": "DE", "email": None}
    mirrored_and_agreeing(lh, spark, duck, model, all_readers=False)


def test_a_java_catalog_that_keeps_catalog_db_locked_is_named_in_the_commit_error(warehouse, monkeypatch, spark):
    """Java Iceberg 1.10's JdbcCatalog, left to check for its tables, leaves a ResultSet open: sqlite-jdbc keeps a
    read lock on catalog.db, so no other writer can commit. The project's commit fails cleanly and says why."""
    from lakehouse_assets import Lakehouse
    from lakehouse_assets.core.errors import CommitError

    name = "javaw_locking"  # its own Spark catalog: the leaked connection lives as long as the session
    monkeypatch.setenv("LAKEHOUSE_CATALOG", name)
    lh = Lakehouse(warehouse)
    lh.write(spark.createDataFrame([(1, "US")], "id long, country string"), "jl.t")
    before = lh.load("jl.t").current_snapshot().snapshot_id
    conf = java_iceberg.jdbc_catalog_conf(name, warehouse)
    conf.pop(f"spark.sql.catalog.{name}.jdbc.init-catalog-tables")  # Java's default: check (and create) the tables
    for key, value in conf.items():
        spark.conf.set(key, value)
    assert spark.table(f"{name}.jl.t").count() == 1
    with pytest.raises(CommitError, match=r"(?s)Table jl\.t: .*database is locked.*JdbcCatalog.*jdbc\.init-catalog-tables=false"):
        lh.write(spark.createDataFrame([(2, "DE")], "id long, country string"), "jl.t")
    assert lh.load("jl.t").current_snapshot().snapshot_id == before

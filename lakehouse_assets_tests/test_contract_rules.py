"""The portable rule subset means the same in Spark (our writes), delta-rs (its own writes and the text it stores as the
Delta CHECK constraint) and Spark reading that stored text back (what Spark's Delta writer evaluates)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse_assets.core.contracts.rules import RuleRefused, category, check_rule

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("status", pa.string()), ("flag", pa.bool_()), ("n", pa.int32())])
ROWS = [
    {"id": 1, "amount": 10.0, "status": "new", "flag": True, "n": 1},
    {"id": 2, "amount": -1.5, "status": "paid", "flag": False, "n": 2},
    {"id": 3, "amount": None, "status": " Lost ", "flag": None, "n": None},
    {"id": -4, "amount": 0.0, "status": None, "flag": True, "n": 7},
    {"id": 5, "amount": 1e9, "status": "new_", "flag": False, "n": -3},
]
COLUMNS = {f.name: category({"int64": "bigint", "double": "double", "string": "string", "bool": "boolean", "int32": "int"}[str(f.type)]) for f in SCHEMA}
PORTABLE = [
    "amount >= 0",
    "amount IS NULL OR amount >= 0",
    "status IN ('new', 'paid')",
    "status NOT IN ('new', 'paid')",
    "amount BETWEEN 0 AND 100",
    "amount NOT BETWEEN 0 AND 100",
    "status LIKE 'n%'",
    "status NOT LIKE '%a%'",
    "status IS NOT NULL AND flag",
    "NOT flag = false",
    "id % 2 = 1",
    "amount * 2 - 1 > -5 AND n + 1 < 5",
    "upper(status) <> 'NEW' OR lower(status) = 'paid'",
    "trim(status) = 'Lost'",
    "substring(status, 1, 1) = 'n'",
    "abs(id) > 3",
    "status || 'x' = 'newx'",
    "-amount < 0",
]


@pytest.mark.parametrize("rule", PORTABLE)
def test_portable_rules_mean_the_same_everywhere(spark, tmp_path, rule):
    from pyspark.sql import functions as F

    sql, _ = check_rule(rule, COLUMNS)
    root = str(tmp_path / "t")
    write_deltalake(root, pa.Table.from_pylist([ROWS[0]], schema=SCHEMA).slice(0, 0))
    delta = DeltaTable(root)
    delta.alter.add_constraint({"r": sql})
    stored = DeltaTable(root).metadata().configuration["delta.constraints.r"]
    check_rule(stored, COLUMNS)  # what delta-rs stored is portable SQL too
    df = spark.createDataFrame(pa.Table.from_pylist(ROWS, schema=SCHEMA).to_pandas())
    ours = [bool(r[0]) for r in df.select(F.coalesce(F.expr(sql), F.lit(False))).orderBy(F.col("id")).collect()]
    spark_reads_delta = [bool(r[0]) for r in df.select(F.coalesce(F.expr(stored), F.lit(False))).orderBy(F.col("id")).collect()]
    by_delta_rs = []
    for row in sorted(ROWS, key=lambda r: r["id"]):
        try:
            write_deltalake(root, pa.Table.from_pylist([row], schema=SCHEMA), mode="append")
            by_delta_rs.append(True)
        except Exception as e:  # noqa: BLE001 - delta-rs's refusal of a row that breaks the constraint
            assert "failed validation" in str(e)
            by_delta_rs.append(False)
    assert ours == spark_reads_delta == by_delta_rs, (rule, stored)


@pytest.mark.parametrize(
    "rule, construct",
    [
        ("", "an empty expression"),
        ("amount >= 0 AND", "not a valid SQL boolean expression"),
        ("amount", "not a boolean"),
        ("missing > 1", "unknown column 'missing'"),
        ("now() > 0", "not deterministic"),
        ("uuid() = 'x'", "not deterministic"),
        ("regexp_like(status, 'a')", "RLIKE"),
        ("status RLIKE 'a'", "RLIKE"),
        ("CASE WHEN flag THEN true ELSE false END", "CASE"),
        ("CAST(id AS STRING) = '1'", "arrow_cast"),
        ("id / 2 > 1", "division"),
        ("length(status) > 1", "cannot store it"),
        ("coalesce(amount, 0) >= 0", "coalesce()"),
        ('"status" = \'new\'', "double-quoted"),
        ("status = 1", "convert between types"),
        ("amount = NULL", "use IS NULL"),
        ("status LIKE 'a\\_b'", "backslash"),
        ("amount >= 0; DROP TABLE t", "';'"),
        ("md5(status) = 'x'", "not in the portable subset"),
    ],
)
def test_constructs_outside_the_subset_are_named(rule, construct):
    with pytest.raises(RuleRefused, match=None) as e:
        check_rule(rule, COLUMNS)
    assert construct in str(e.value)


def test_mixed_case_columns_are_not_portable():
    with pytest.raises(RuleRefused, match="double quotes, a string literal in Spark SQL"):
        check_rule("Amount >= 0", {"Amount": "float"})
    with pytest.raises(RuleRefused, match="decimal"):
        check_rule("price >= 0", {"price": "decimal"})

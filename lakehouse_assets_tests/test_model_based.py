"""Model-based test: 30 seeded random operations against a plain-Python reference model.

Operations: appends, partition-window overwrites, merges (updates, inserts, CDC deletes, keys moving
between partitions) and schema additions. After every operation DuckDB reads the table from the
Iceberg metadata (iceberg_scan) and from the Delta log (delta_scan) and both must equal the model; at
the end every earlier version is read again by time travel in both formats (DuckDB, with pyiceberg,
delta-rs and our Spark reader at a sample of versions).
"""

from __future__ import annotations

import datetime as dt
import random

import pytest

from lakehouse_assets import MergeOptions, Window
from lakehouse_assets.core.read import duckdb_readers

from .conftest import _norm
from .versions import assert_same_at

pytestmark = pytest.mark.slow  # minutes: scheduled first (conftest.py)

SEED = 20240611
N_OPS = 30
DAYS = [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(4)]
TABLE = "mb.t"


class Model:
    """The table as a list of rows (dicts) plus its column list, in write order."""

    def __init__(self):
        self.rows: list[dict] = []
        self.columns: list[str] = []

    def snapshot(self) -> tuple[list[str], list[tuple]]:
        cols = sorted(self.columns)
        return cols, sorted((tuple(_norm(r.get(c)) for c in cols) for r in self.rows), key=repr)


def _batch(spark, rows: list[dict], columns: list[str], extra: dict[str, str] | None = None):
    types = {"k": "long", "d": "date", "v": "long", "s": "string", **{c: "long" for c in columns if c.startswith("x")}, **(extra or {})}
    cols = [*columns, *(extra or {})]
    ddl = ", ".join(f"{c} {types[c]}" for c in cols)
    return spark.createDataFrame([tuple(r.get(c) for c in cols) for r in rows], ddl)


def _duck_rows(duck, sql: str, cols: list[str]) -> list[tuple]:
    res = duck.execute(f"SELECT {', '.join(cols)} FROM {sql}")
    return sorted((tuple(_norm(v) for v in row) for row in res.fetchall()), key=repr)


def test_thirty_random_operations_match_the_model_in_both_formats(lh, spark, duck):
    rnd = random.Random(SEED)
    model = Model()
    next_key = 0
    extra_cols: list[str] = []
    history: list[tuple[int, int, list[str], list[tuple]]] = []  # snapshot id, Delta version, model columns, rows
    kinds = []

    def fresh_rows(n, day=None):
        nonlocal next_key
        out = []
        for _ in range(n):
            row = {"k": next_key, "d": day or rnd.choice(DAYS), "v": rnd.randrange(1000), "s": rnd.choice(["a", "b", None])}
            for c in extra_cols:
                row[c] = rnd.choice([None, rnd.randrange(100)])
            out.append(row)
            next_key += 1
        return out

    for step in range(N_OPS):
        # The first op creates the table; a schema addition at least once in the first ten.
        kind = "append" if step == 0 else ("add_column" if step == 4 else rnd.choice(["append", "append", "window", "merge", "merge", "add_column"]))
        kinds.append(kind)
        columns = ["k", "d", "v", "s", *extra_cols]
        if kind == "append":
            rows = fresh_rows(rnd.randint(3, 12))
            r = lh.write(_batch(spark, rows, columns), TABLE, partition_by=["d"])
            model.rows += rows
        elif kind == "add_column":
            extra_cols.append(f"x{len(extra_cols)}")
            columns = ["k", "d", "v", "s", *extra_cols]
            rows = fresh_rows(rnd.randint(2, 6))
            r = lh.write(_batch(spark, rows, columns), TABLE)
            model.rows += rows
        elif kind == "window":
            day = rnd.choice(DAYS)
            rows = fresh_rows(rnd.randint(0, 5), day=day)
            window = Window("d", day, day + dt.timedelta(days=1))
            r = lh.write(_batch(spark, rows, columns), TABLE, mode="overwrite", window=window)
            model.rows = [x for x in model.rows if x["d"] != day] + rows
        else:  # merge: updates (some moving to another day), deletes, inserts; the batch may omit newer columns
            existing = [x["k"] for x in model.rows]
            touched = rnd.sample(existing, min(len(existing), rnd.randint(1, 6)))
            deletes = set(rnd.sample(touched, len(touched) // 3))
            batch_cols = columns if rnd.random() < 0.7 else ["k", "d", "v", "s"]
            batch = []
            for k in touched:
                old = next(x for x in model.rows if x["k"] == k)
                new = {**old, "v": rnd.randrange(1000), "d": rnd.choice(DAYS) if rnd.random() < 0.5 else old["d"]}
                for c in extra_cols:
                    new[c] = rnd.randrange(100) if c in batch_cols else None
                new["op"] = "D" if k in deletes else "U"
                batch.append(new)
            for row in fresh_rows(rnd.randint(0, 4)):
                batch.append({**{c: (row[c] if c in batch_cols else None) for c in row}, "op": "I"})
            r = lh.write(
                _batch(spark, batch, batch_cols, {"op": "string"}), TABLE, mode="merge", merge=MergeOptions(keys=["k"], operation_column="op", delete_values=["D"])
            )
            keys = {x["k"] for x in batch}
            model.rows = [x for x in model.rows if x["k"] not in keys]
            model.rows += [{c: (x[c] if c in batch_cols else None) for c in ["k", "d", "v", "s", *extra_cols]} for x in batch if x["op"] != "D"]
        model.columns = ["k", "d", "v", "s", *extra_cols]
        cols, want = model.snapshot()
        table = lh.load(TABLE)
        # Now: DuckDB over the Iceberg metadata and over the Delta log, both equal to the model.
        got_iceberg = _duck_rows(duck, duckdb_readers.iceberg_scan_sql(table.metadata_location), cols)
        got_delta = _duck_rows(duck, duckdb_readers.delta_scan_sql(table.location()), cols)
        assert got_iceberg == want, f"step {step} ({kind}): Iceberg differs from the model"
        assert got_delta == want, f"step {step} ({kind}): Delta differs from the model"
        assert lh.verify(TABLE)["agree"]
        history.append((r.iceberg_snapshot_id, r.delta_version, cols, want))

    assert {"append", "window", "merge", "add_column"} <= set(kinds), kinds
    # Time travel: every earlier version, in both formats, still equals the model at that time.
    table = lh.load(TABLE)
    meta = duckdb_readers.iceberg_scan_sql(table.metadata_location)[:-1]
    root = duckdb_readers.delta_scan_sql(table.location())[:-1]
    for i, (snapshot_id, delta_version, cols, want) in enumerate(history):
        assert _duck_rows(duck, f"{meta}, snapshot_from_id={snapshot_id})", cols) == want, f"Iceberg snapshot of step {i}"
        assert _duck_rows(duck, f"{root}, version={delta_version})", cols) == want, f"Delta version of step {i}"
        assert lh.point_in_time(TABLE, snapshot_id=snapshot_id).delta_version == delta_version
    # Every reader of both formats at a sample of versions (Spark reads are the slow part).
    for i in (0, 5, 17, N_OPS - 1):
        snapshot_id, delta_version, cols, want = history[i]
        assert_same_at(lh, spark, duck, TABLE, snapshot_id, delta_version, want)

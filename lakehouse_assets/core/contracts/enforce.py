"""The contract on the rows of a write, inside the write's own Spark job: expressions added to the DataFrame the
writer consumes, so the rows are checked as they are written, never read twice.

* Every check becomes a name in one array column of broken checks: each rule (broken unless TRUE), each NOT NULL
  column, and the unique key (a window count over the batch; for a merge, also the keys of the table rows the merge
  keeps, `TAKEN`, joined in by guard.py). A merge row that deletes its key is checked by nothing.
* `fail`: a row with a broken check stops the job with Spark's `raise_error` (the writer removes every file it
  wrote): nothing lands. Only then are the broken rows counted, by the error path (`describe_failure`).
* `drop` and `quarantine`: an `Observation` counts the rows per check and keeps sample rows while the write's job
  runs; the broken rows are filtered out of what is written. Quarantined rows are the same DataFrame's other half,
  from a cache of the batch, so the input is scanned once.
* The schema-change modes act on columns before the checks (`apply_schema_policy`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

from ..errors import SchemaError
from .model import Contract, ContractViolation

BROKEN = "_lakehouse contract broken"  # a space: no user column can be named so (spec._check_names)
KEY_COUNT = "_lakehouse contract key rows"  # rows of the batch with the row's unique key (a window count)
TAKEN = "_lakehouse contract key taken"  # a merge row's unique key is held by a table row the merge keeps
HELPERS = (BROKEN, KEY_COUNT, TAKEN)
MARKER = "LakehouseContractViolation:"
RULES_COLUMN, RUN_COLUMN, TIME_COLUMN = "_contract_rules", "_contract_run_id", "_contract_quarantined_at"
SAMPLES = 3


def not_null_check(column: str) -> str:
    return f"not_null_{column}"


def unique_check(columns) -> str:
    return "unique_" + "_".join(columns)


@dataclass
class Checks:
    """What one write checks: check name -> a Spark Column that is TRUE when a row breaks it, made from its SQL text
    (`sql`) by one `F.expr`: each Column built piece by piece is a round trip to the JVM, a cost every write pays."""

    broken: dict = field(default_factory=dict)
    sql: dict = field(default_factory=dict)
    discarded: dict = field(default_factory=dict)  # schema-mode drops: name -> Column TRUE when the row is discarded
    discard_observations: list = field(default_factory=list)  # count `discarded` while the write runs


def _spark_type_name(t) -> str:
    return t.simpleString()


def apply_schema_policy(identifier: str, df, contract: Contract, table_types: dict[str, str] | None, checks: Checks, exempt=()):
    """The DataFrame after the contract's schema-change modes: new columns (not in the table, nor declared) and values of
    another type than declared (or than the table's). `freeze` raises naming the column and the mode. `exempt`: columns
    that are not data (a merge's operation and deleted-at columns)."""
    from pyspark.sql import functions as F

    known = dict(table_types or {}) | dict(contract.types)
    declared_any = bool(table_types) or bool(contract.types)
    for f in list(df.schema.fields):
        if f.name == BROKEN or f.name in exempt:
            continue
        if f.name not in known:
            if not declared_any or contract.new_columns == "evolve":
                continue
            if contract.new_columns == "freeze":
                raise SchemaError(
                    f"Table {identifier}: column {f.name!r} is new and the contract's new_columns mode is 'freeze'. Nothing was written. "
                    "Declare the column in the contract (or the asset's column schema), drop it from the data, or set new_columns to "
                    "'evolve', 'discard_row' or 'discard_value'."
                )
            if contract.new_columns == "discard_row":
                df = _discard(df, checks, f"new_column_{f.name}", F.col(f"`{f.name}`").isNotNull())
            df = df.drop(f.name)
            continue
        wanted, actual = known[f.name], _spark_type_name(f.dataType)
        if _same_type(wanted, actual) or contract.type_changes == "evolve":
            continue
        if contract.type_changes == "freeze":
            raise SchemaError(
                f"Table {identifier}: column {f.name!r} is {actual} in the data but {wanted} in the contract, and the contract's "
                f"type_changes mode is 'freeze'. Nothing was written. Cast the column to {wanted}, or set type_changes to 'evolve', "
                "'discard_row' or 'discard_value'."
            )
        converted = F.expr(f"try_cast(`{f.name}` AS {wanted})")
        if contract.type_changes == "discard_row":
            df = _discard(df, checks, f"type_{f.name}", F.col(f"`{f.name}`").isNotNull() & converted.isNull())
        df = df.withColumn(f.name, converted)
    return df


def _discard(df, checks: Checks, name: str, condition):
    """Rows a schema mode discards: counted while the write runs, then filtered out."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    checks.discarded[name] = condition
    observation = Observation(f"lakehouse_discard_{uuid.uuid4().hex[:12]}")
    checks.discard_observations.append(observation)
    return df.observe(observation, F.sum(condition.cast("long")).alias(name), F.count(F.lit(1)).alias("rows")).filter(~condition)


_ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "real": "float", "timestamp_ltz": "timestamp"}


def _same_type(a: str, b: str) -> bool:
    norm = lambda t: _ALIASES.get(t.lower().replace(" ", ""), t.lower().replace(" ", ""))  # noqa: E731
    return norm(a) == norm(b)


def quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def add_checks(df, contract: Contract, rules_sql: dict[str, str], checks: Checks, *, merge_deletes=None, merge_keys=(), check_unique: bool = True):
    """Fill `checks` for the rows of `df`: the rules, NOT NULL columns (unique keys are NOT NULL too), unique keys.
    `merge_deletes`: SQL TRUE for a merge row that deletes its key; such rows keep no rule, but their `merge_keys` must
    not be NULL either: the key names the row to delete. Returns `df`, with the unique key's row count as a column when
    there is one (a window cannot sit in a filter)."""
    from pyspark.sql import functions as F

    kept = f"NOT ({merge_deletes})" if merge_deletes is not None else "true"
    sql = {name: f"{kept} AND NOT coalesce({rule}, false)" for name, rule in rules_sql.items()}
    for column in dict.fromkeys([*contract.not_null, *contract.unique]):
        sql[not_null_check(column)] = f"{'true' if column in merge_keys else kept} AND {quoted(column)} IS NULL"
    if contract.unique and check_unique:
        window = f"OVER (PARTITION BY {', '.join(quoted(c) for c in contract.unique)})"
        if merge_deletes is None:
            count = f"count(1) {window}"
        else:  # the merge keeps one row per merge key (it resolves repeats): distinct merge keys of the upserts count
            count = f"size(collect_set(CASE WHEN {kept} THEN struct({', '.join(quoted(c) for c in merge_keys)}) END) {window})"
        df = df.withColumn(KEY_COUNT, F.expr(count))
        taken = f" OR coalesce({quoted(TAKEN)}, false)" if TAKEN in df.columns else ""
        sql[unique_check(contract.unique)] = f"{kept} AND ({quoted(KEY_COUNT)} > 1{taken})"
    checks.sql |= sql
    checks.broken |= {name: F.expr(text) for name, text in sql.items()}
    return df


def _names_sql(checks: Checks) -> str:
    """The names of the checks a row breaks, comma-separated ("" when it keeps them all). Plain expressions that
    Spark compiles with the rest of the row's projection (an array filter would not be)."""
    return "concat_ws(',', " + ", ".join(f"CASE WHEN {text} THEN {literal(name)} END" for name, text in checks.sql.items()) + ")"


def _any(checks: Checks):
    from functools import reduce

    return reduce(lambda a, b: a | b, checks.broken.values())


def flagged(df, checks: Checks):
    """`df` with the BROKEN column: the names of the checks each row breaks ("" when it keeps them all)."""
    from pyspark.sql import functions as F

    return df.withColumn(BROKEN, F.expr(_names_sql(checks)))


def _row_json_sql(columns) -> str:
    return f"to_json(struct({', '.join(quoted(c) for c in columns if c not in HELPERS)}), map('ignoreNullFields', 'false'))"


def row_json(df):
    from pyspark.sql import functions as F

    return F.expr(_row_json_sql(df.columns))


def failing(df, checks: Checks):
    """`df` whose job stops at the first row breaking a check, naming the checks and the row (the message is built
    for that row only: a row that keeps every check costs the checks' comparisons and nothing else)."""
    from pyspark.sql import functions as F

    columns = df.columns
    message = f"concat({literal(MARKER + ' ')}, {_names_sql(checks)}, ' ', {_row_json_sql(columns)})"
    any_broken = " OR ".join(f"({text})" for text in checks.sql.values())
    df = df.filter(F.expr(f"CASE WHEN coalesce({any_broken}, false) THEN raise_error({message}) ELSE true END"))
    return df.drop(*[c for c in HELPERS if c in columns])


def observed(df, checks: Checks):
    """(`df` flagged and observed, the Observation): rows per check, rows broken, a few sample rows of broken ones."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"lakehouse_contract_{uuid.uuid4().hex[:12]}")
    broken = F.col(f"`{BROKEN}`") != F.lit("")
    sample = F.when(broken, F.concat(F.col(f"`{BROKEN}`"), F.lit(" "), row_json(df)))
    metrics = [F.count(F.lit(1)).alias("rows"), F.sum(broken.cast("long")).alias("broken")]
    metrics += [F.sum(F.coalesce(cond, F.lit(False)).cast("long")).alias(f"check {name}") for name, cond in checks.broken.items()]
    metrics += [F.first(sample, ignorenulls=True).alias("sample 0"), F.last(sample, ignorenulls=True).alias("sample 1")]
    return df.observe(observation, *metrics), observation


def discarded_counts(checks: Checks) -> dict[str, int]:
    """Rows each schema mode discarded (read after the write's job ran)."""
    return {k: int(v or 0) for o in checks.discard_observations for k, v in o.get.items() if k != "rows"}


def report(observation, checks: Checks, policy: str) -> dict:
    """The contract's part of the WriteResult: rows per check, rows dropped or quarantined, sample rows."""
    metrics = observation.get if observation is not None else {}
    samples = list(dict.fromkeys(s for s in (metrics.get("sample 0"), metrics.get("sample 1")) if s))
    return {
        "policy": policy,
        "rows_checked": int(metrics.get("rows") or 0),
        "rows_broken": int(metrics.get("broken") or 0),
        "checks": {name: int(metrics.get(f"check {name}") or 0) for name in checks.broken},
        "discarded": discarded_counts(checks),
        "samples": samples[:SAMPLES],
    }


def quarantine_rows(df, run_id: str):
    """The broken rows of a flagged `df` as quarantine rows: the row, the checks it broke, the run and the time."""
    from pyspark.sql import functions as F

    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    return (
        df.filter(F.col(f"`{BROKEN}`") != F.lit(""))
        .withColumn(RULES_COLUMN, F.split(F.col(f"`{BROKEN}`"), ","))
        .withColumn(RUN_COLUMN, F.lit(run_id))
        .withColumn(TIME_COLUMN, F.lit(now).cast("timestamp"))
        .drop(*HELPERS)
    )


def kept_rows(df, columns):
    """The rows of a flagged `df` that keep every check, `columns` declared non-nullable to Spark (so a new
    table's Iceberg fields are required and its Delta columns NOT NULL)."""
    from pyspark.sql import functions as F

    df = df.filter(F.col(f"`{BROKEN}`") == F.lit("")).drop(*HELPERS)
    return not_nullable(df, columns)


def not_nullable(df, columns):
    """Columns Spark then knows hold no NULL: coalesced with a constant of their type, which no row ever takes (the
    rows with NULL there were removed or stopped the job)."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in df.schema.fields}
    zeros = {column: _zero(types[column]) for column in dict.fromkeys(columns) if column in types}
    coalesced = {column: F.coalesce(F.col(quoted(column)), zero) for column, zero in zeros.items() if zero is not None}
    return df.withColumns(coalesced) if coalesced else df


def _zero(data_type):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)):
        return F.lit(0).cast(data_type)
    if isinstance(data_type, T.StringType):
        return F.lit("")
    if isinstance(data_type, T.BooleanType):
        return F.lit(False)
    if isinstance(data_type, T.DateType):
        return F.make_date(F.lit(1970), F.lit(1), F.lit(1))
    if isinstance(data_type, T.BinaryType):
        return F.lit(bytearray())
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        return F.lit(dt.datetime(1970, 1, 1)).cast(data_type)
    return None  # nested columns stay nullable in Spark's eyes; their NOT NULL is still checked on every row


def describe_failure(identifier: str, df, checks: Checks, error: BaseException) -> ContractViolation:
    """The `fail` policy's error, after the job stopped: the broken checks with their counts and a few rows. Counting
    reads the batch again, on this error path only."""
    from pyspark.sql import functions as F

    counts = df.select(*[F.sum(F.coalesce(cond, F.lit(False)).cast("long")).alias(n) for n, cond in checks.broken.items()]).collect()[0]
    broken = {n: int(counts[n] or 0) for n in checks.broken if counts[n]}
    rows = [r[0] for r in df.filter(F.coalesce(_any(checks), F.lit(False))).select(row_json(df)).limit(SAMPLES).collect()]
    if not broken:  # the batch changed between the two reads (a nondeterministic input): report what the job saw
        rows = [_seen_row(error)]
        broken = {name: 1 for name in _seen_checks(error)}
    listed = "; ".join(f"{name}: {count} row(s)" for name, count in broken.items())
    violation = ContractViolation(
        f"Table {identifier}: the data breaks the contract ({listed}), and its on_violation policy is 'fail'. Nothing was written "
        f"to either format. Offending rows: {' '.join(rows)}. Fix the rows, or set on_violation to 'quarantine' or 'drop'."
    )
    violation.broken, violation.samples = broken, rows
    return violation


def is_violation(error: BaseException) -> bool:
    seen = error
    while seen is not None:
        if MARKER in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _seen_text(error: BaseException) -> str:
    seen = error
    while seen is not None and MARKER not in str(seen):
        seen = seen.__cause__ or seen.__context__
    text = str(seen or "")
    return text[text.index(MARKER) + len(MARKER):].strip().splitlines()[0] if MARKER in text else ""


def _seen_checks(error: BaseException) -> list[str]:
    return _seen_text(error).split(" ", 1)[0].split(",")


def _seen_row(error: BaseException) -> str:
    parts = _seen_text(error).split(" ", 1)
    return parts[1] if len(parts) > 1 else ""


"""The erasure proof: no file under a table's root, in either format, still holds a row a condition matches, or a
value only such a row could have given it.

Every file is decoded, never byte-searched (compressed Avro blocks and Parquet pages hide values):

    Parquet              data, change-data and delete files: the condition, in Spark, over every row (a delete
                         file's optional `row` column too); every column chunk's min/max in each footer
    Delta checkpoints    every action: statistics, partition values, text
    Avro                 manifests (each entry's column bounds and partition values, decoded with the schema and
                         partition spec in the file's header) and manifest lists (each manifest's partition summaries)
    JSON                 Iceberg table metadata (snapshot summaries, properties), Delta commits (statistics,
                         partition values, commitInfo)
    other files          as text; a deletion vector holds row positions only

A remnant is a row the condition matches; a column's value (a bound, a statistic, a partition value) that satisfies
the condition on its own, when the condition names one column; in any text or string value, the condition itself or
one of its string literals; or a string bound cut from a literal (Iceberg keeps 16 characters, Spark's Delta
statistics 32) that no row the condition leaves starts with. The report names each file and place, never a value.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import PrimitiveType

from ...formats.delta.values import from_internal
from ...io.storage import join_uri, normalize_uri
from ...write.condition import Condition

MAX_LISTED = 20  # remnants listed in the report (all are counted)
_PARQUET_FIELD_ID = b"PARQUET:field_id"
_STRING_LITERAL = re.compile(r"'((?:[^'\\]|''|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")


@dataclass
class Findings:
    """What the proof has decoded so far: remnants found, and the column values still to test against the condition."""

    column: str | None  # the one column the condition names (None: it names several, so values are not tested alone)
    literals: list[str]  # the condition's text and string literals: no text may hold them
    checked: dict[str, int] = field(default_factory=dict)
    remnants: list[dict] = field(default_factory=list)
    values: dict[str, set[str]] = field(default_factory=dict)  # {value as text: places}
    # Where a string literal, or a bound cut from one, was found: {(column or None, the text): places}. Each is a
    # remnant unless a row the condition leaves holds it too (`country = 'DE' AND id = 7` leaves other rows of DE):
    # then the place may be that row's.
    hits: dict[tuple[str | None, str], set[str]] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.checked[kind] = self.checked.get(kind, 0) + 1

    def found(self, file: str, where: str) -> None:
        self.remnants.append({"file": file, "where": where})

    def value(self, column: str | None, value, file: str, where: str) -> None:
        """A column's value (a bound, a statistic, a partition value): equal to a literal, cut from one, or (a
        condition on one column) to be tested by the condition."""
        if value is None:
            return
        if isinstance(value, str) and column is not None:
            for literal in self.literals[1:]:
                if value == literal:
                    self._hit(None, literal, file, where)
                elif _truncated(value, literal):
                    self._hit(column, literal[: len(value)], file, where)
        if column is not None and column == self.column:
            self.values.setdefault(_as_text(value), set()).add(f"{file}: {where}")

    def text(self, text: str, file: str, where: str) -> None:
        """Free text (a summary, commit info, a header, a path): the condition itself, or a literal as a whole word."""
        if self.literals[0] in text:
            self.found(file, f"{where} holds the condition's text")
        for literal, pattern in self._patterns().items():
            if pattern.search(text):
                self._hit(None, literal, file, where)

    def _hit(self, column: str | None, text: str, file: str, where: str) -> None:
        self.hits.setdefault((column, text), set()).add(f"{file}: {where}")

    def _patterns(self) -> dict:
        if not hasattr(self, "_compiled"):
            self._compiled = {lit: re.compile(rf"(?<![0-9A-Za-z]){re.escape(lit)}(?![0-9A-Za-z])") for lit in self.literals[1:]}
        return self._compiled


def prove_erased(
    spark, table: Table, identifier: str, condition: Condition, spark_schema, storage, names: dict[str, str], files: list[str],
    read_options: dict | None = None,
) -> dict:
    """Decode every file under the table's root; the report's `erased` is True when no remnant is found. `spark_schema`:
    the table's columns for Spark (with field ids); `names`: {a name a file or log may use for a column (an earlier
    name, a Delta physical name, "#<field id>"): the column's name today}; `files`: every file under the root,
    relative to it; `read_options`: how to read the table's files (`read_parquet_files`' cast_files, constants)."""
    root = normalize_uri(table.location())
    columns = condition.columns(spark_schema.fieldNames())
    findings = Findings(columns[0] if len(columns) == 1 else None, literals(condition.sql))
    row_files, delete_rows = [], []
    for rel in files:
        uri = join_uri(root, rel)
        findings.text(unquote(rel), rel, "its path")  # a partition folder's name holds its value
        try:
            kind = _decode(uri, rel, storage, table, findings, names)
        except FileNotFoundError:  # deleted since the listing (another writer's commit let old metadata go): holds nothing
            findings.count("files deleted before they were read")
            continue
        if kind == "rows":
            row_files.append((uri, rel))
        elif kind == "delete rows":
            delete_rows.append((uri, rel))
    _matching_rows(spark, row_files, delete_rows, spark_schema, storage, condition, findings, read_options or {})
    _matching_values(spark, spark_schema, condition, findings)
    return {
        "table": identifier,
        "erased": not findings.remnants,
        "files_checked": dict(sorted(findings.checked.items())),
        "remnants_found": len(findings.remnants),
        "remnants": findings.remnants[:MAX_LISTED],
        "values_tested_alone": findings.column is not None,
    }


def literals(sql: str) -> list[str]:
    """The condition's text and its string literals as Spark reads them (backslash escapes; `'a''b'` is two adjacent
    literals, `ab`); two characters or more: shorter ones are everywhere."""
    out = [sql]
    for single, double in _STRING_LITERAL.findall(sql):
        text = single.replace("''", "") if single else double
        text = re.sub(r"\\(.)", r"\1", text)
        if len(text) >= 2:
            out.append(text)
    return out


def _truncated(value: str, literal: str) -> bool:
    """Whether `value` is a bound cut from `literal`: Iceberg keeps a string's first 16 characters (the upper bound with
    its last one incremented), Spark's Delta statistics the first 32. Shorter values are whole values, not cuts."""
    n = len(value)
    if n < 16 or n >= len(literal):
        return False
    return literal.startswith(value) or (literal.startswith(value[:-1]) and ord(value[-1]) == ord(literal[n - 1]) + 1)


def _decode(uri: str, rel: str, storage, table: Table, findings: Findings, names: dict[str, str]) -> str:
    """Decode one file into `findings`; returns "rows" / "delete rows" for a Parquet file whose rows Spark must test."""
    fs, path = storage.filesystem(uri)
    name = rel.rsplit("/", 1)[-1]
    if name.endswith(".parquet"):
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            _footer(parquet, rel, findings, names)
            if rel.startswith("_delta_log/"):
                findings.count("Delta checkpoints")
                for row in parquet.read().to_pylist():
                    _delta_action(row, rel, findings, names)
                return "checkpoint"
            fields = set(parquet.schema_arrow.names)
        if {"file_path", "pos"} <= fields:
            findings.count("delete files")
            return "delete rows" if "row" in fields else "positions"
        findings.count("change data files" if "_change_type" in fields else "data files")
        return "rows"
    with fs.open_input_stream(path) as f:
        data = f.read()
    if name.endswith(".avro"):
        findings.count("Avro manifests and manifest lists")
        _avro(uri, rel, table, findings, names)
    elif name.endswith(".json") and rel.startswith("_delta_log/"):
        findings.count("Delta commits")
        for line in data.decode().splitlines():
            if line.strip():
                _delta_action(json.loads(line), rel, findings, names)
    elif name.endswith(".json"):
        findings.count("Iceberg metadata JSON")
        _walk_json(json.loads(data), rel, "metadata", findings)
    else:
        findings.count("other files")
        findings.text(data.decode("utf-8", errors="replace"), rel, "its text")
    return "other"


def _footer(parquet: pq.ParquetFile, rel: str, findings: Findings, names: dict[str, str]) -> None:
    """Every column chunk's min and max, as the footer's statistics hold them (a page index repeats them per page)."""
    meta = parquet.metadata
    schema = parquet.schema_arrow
    by_path = {}
    for f in schema:
        fid = (f.metadata or {}).get(_PARQUET_FIELD_ID)
        by_path[f.name] = names.get(f"#{fid.decode()}") if fid else names.get(f.name)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            stats = chunk.statistics
            if stats is None or not stats.has_min_max:
                continue
            column = by_path.get(chunk.path_in_schema)
            for bound in ("min", "max"):
                findings.value(column, getattr(stats, bound), rel, f"footer {bound} of column {chunk.path_in_schema}")


def _delta_action(action: dict, rel: str, findings: Findings, names: dict[str, str]) -> None:
    """One Delta action (a commit line, a checkpoint row): its statistics and partition values by column, all text."""
    for kind in ("add", "remove", "cdc"):
        body = action.get(kind)
        if not body:
            continue
        for column, value in (body.get("partitionValues") or {}).items() if isinstance(body.get("partitionValues"), dict) else _pairs(body.get("partitionValues")):
            findings.value(names.get(column, column), value, rel, f"{kind} partition value of {column}")
        stats = body.get("stats")
        if isinstance(stats, str) and stats:
            stats = json.loads(stats)
            for bound in ("minValues", "maxValues"):
                for column, value in (stats.get(bound) or {}).items():
                    if not isinstance(value, dict):
                        findings.value(names.get(column, column), value, rel, f"{kind} {bound} of {column}")
    _walk_json(action, rel, "an action", findings)


def _pairs(value) -> list[tuple]:
    """A checkpoint's partitionValues (a map read by pyarrow as key/value pairs)."""
    return [tuple(p) for p in value] if isinstance(value, list) else []


def _walk_json(value, rel: str, where: str, findings: Findings) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            findings.text(str(k), rel, where)
            _walk_json(v, rel, where, findings)
    elif isinstance(value, list):
        for v in value:
            _walk_json(v, rel, where, findings)
    elif isinstance(value, str):
        findings.text(value, rel, where)


def _avro(uri: str, rel: str, table: Table, findings: Findings, names: dict[str, str]) -> None:
    """A manifest or a manifest list, every record decoded (blocks inflated) with the schema in its header."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.typedef import Record

    with AvroFile[Record](table.io.new_input(uri)) as reader:
        meta = reader.header.meta
        schema = Schema.model_validate_json(meta["schema"]) if "schema" in meta else None
        spec = json.loads(meta["partition-spec"]) if "partition-spec" in meta else None
        for k, v in meta.items():
            if not k.startswith("avro."):
                findings.text(v, rel, f"header {k}")
        for record in reader:
            if schema is not None:
                _manifest_entry(record, reader.schema, schema, spec, rel, findings, names)
            else:
                _manifest_list_entry(record, reader.schema, table, rel, findings)


def _fields(record, struct) -> dict:
    return {f.name: record[i] for i, f in enumerate(struct.fields)}


def _manifest_entry(record, file_schema, schema: Schema, spec: list | None, rel: str, findings: Findings, names: dict[str, str]) -> None:
    entry = _fields(record, file_schema.as_struct())
    data_file_type = file_schema.find_field("data_file").field_type
    data_file = _fields(entry["data_file"], data_file_type)
    findings.text(str(data_file.get("file_path", "")), rel, "a file path")
    for bound in ("lower_bounds", "upper_bounds"):
        for field_id, raw in (data_file.get(bound) or {}).items():
            try:
                column = names.get(f"#{field_id}") or schema.find_column_name(field_id)  # today's name: renames keep the id
                value = _decoded(schema.find_type(field_id), raw)
            except ValueError:
                continue
            findings.value(column, value, rel, f"manifest entry {bound[:5]} bound of {column}")
    partition = data_file.get("partition")
    for pos, pf in enumerate(spec or []):
        if pf.get("transform") == "identity" and partition is not None:
            column = names.get(f"#{pf['source-id']}") or schema.find_column_name(pf["source-id"])
            findings.value(column, from_internal(schema.find_type(pf["source-id"]), partition[pos]), rel, f"manifest entry partition value of {column}")


def _manifest_list_entry(record, file_schema, table: Table, rel: str, findings: Findings) -> None:
    entry = _fields(record, file_schema.as_struct())
    spec = table.specs().get(entry.get("partition_spec_id"))
    summaries = entry.get("partitions") or []
    schema = table.schema()
    summary_type = file_schema.find_field("partitions").field_type.element_type
    for pf, summary in zip(spec.fields if spec else [], summaries):
        if not isinstance(pf.transform, IdentityTransform):
            continue
        column = schema.find_column_name(pf.source_id)
        values = _fields(summary, summary_type)
        for bound in ("lower_bound", "upper_bound"):
            if values.get(bound) is not None:
                findings.value(column, _decoded(schema.find_type(pf.source_id), values[bound]), rel, f"manifest list partition {bound[:5]} bound of {column}")


def _decoded(field_type, raw: bytes):
    if not isinstance(field_type, PrimitiveType):
        return None
    return from_internal(field_type, from_bytes(field_type, raw))


def _as_text(value) -> str:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value).lower() if isinstance(value, bool) else str(value)


def _matching_rows(spark, row_files, delete_rows, spark_schema, storage, condition: Condition, findings: Findings, read_options: dict) -> None:
    """One Spark job over every row-holding file (columns by field id, as the table reads them); only the names of
    files with a matching row, and their counts, reach the driver."""
    from pyspark.sql import functions as F

    from ...read.reader import file_uris, read_parquet_files

    path = "_lakehouse_file"
    rows = None
    if row_files:
        uris = [u for u, _ in row_files]
        rows = read_parquet_files(spark, uris, spark_schema, storage, path_column=path, **read_options)
        hits = rows.filter(F.expr(condition.matches)).groupBy(path).count().collect()
        by_uri = dict(row_files)
        for uri, r in zip(file_uris([r[path] for r in hits], uris), hits):
            findings.found(by_uri.get(uri, uri), f"{r['count']} row(s) the condition matches")
    _unexplained(rows, condition, spark_schema, findings)
    for uri, rel in delete_rows:
        found = spark.read.parquet(uri).select("row.*").filter(F.expr(condition.matches)).count()
        if found:
            findings.found(rel, f"{found} deleted row(s) in its `row` column that the condition matches")


def _unexplained(rows, condition: Condition, spark_schema, findings: Findings) -> None:
    """The literal hits no row the condition leaves explains (one aggregate over those rows, a count per hit): a bound
    cut from a literal, unless such a row's column starts with the same characters; a literal, unless such a row holds
    it in a string column."""
    if not findings.hits:
        return
    from pyspark.sql import functions as F

    hits = sorted(findings.hits, key=repr)
    counts = [0] * len(hits)
    if rows is not None:
        strings = [f.name for f in spark_schema.fields if f.dataType.simpleString() == "string"]
        kept = rows.filter(~F.expr(condition.matches))

        def holds(column, text):
            if column is not None:
                return F.col(f"`{column}`").startswith(F.lit(text))
            return F.lit(False) if not strings else F.greatest(*[F.coalesce(F.col(f"`{c}`") == F.lit(text), F.lit(False)) for c in strings], F.lit(False))

        first = kept.agg(*[F.sum(holds(c, t).cast("int")).alias(f"h{i}") for i, (c, t) in enumerate(hits)]).first()
        counts = [first[f"h{i}"] or 0 for i in range(len(hits))]
    for (column, text), count in zip(hits, counts):
        if count:
            continue
        what = "the start of one of the condition's string literals (a truncated bound)" if column else "one of the condition's string literals"
        for place in sorted(findings.hits[(column, text)]):
            file, _, where = place.partition(": ")
            findings.found(file, f"{where}: {what}, which no remaining row holds")


def _matching_values(spark, spark_schema, condition: Condition, findings: Findings) -> None:
    """The values the metadata holds for the condition's one column, each tested by the condition alone (metadata
    sized: two bounds a file at most, distinct)."""
    if findings.column is None or not findings.values:
        return
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    column = findings.column
    data_type = spark_schema[column].dataType
    texts = sorted(findings.values)
    frame = spark.createDataFrame([(t,) for t in texts], StructType([StructField("_value", StringType())]))
    others = [F.lit(None).cast(f.dataType).alias(f.name) for f in spark_schema.fields if f.name != column]
    typed = frame.select(F.col("_value"), F.col("_value").cast(data_type).alias(column), *others)
    for r in typed.filter(F.expr(condition.matches)).select("_value").collect():
        for place in sorted(findings.values[r["_value"]]):
            file, _, where = place.partition(": ")
            findings.found(file, f"{where}: a value the condition matches")

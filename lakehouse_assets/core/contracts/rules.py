"""Row rules as the portable SQL both engines evaluate alike: parsed, type-checked and refused here, before any file.

A rule is one SQL boolean expression over a row's columns. The same text is evaluated by Spark (our writes) and,
as a Delta CHECK constraint, by every Delta writer: delta-rs (DataFusion) and Spark's Delta writer. The three agree
only on a subset of SQL, measured on delta-rs 1.6.6 (which stores its own rendering of the expression, the text a
Spark Delta writer then parses):

* `CAST` is stored as DataFusion's `arrow_cast(...)` and `DATE '...'` / `TIMESTAMP '...'` literals as `'...'::date` or
  `arrow_cast`, and a literal compared with a decimal column as `'0'::decimal(p, s)`: Spark 3.5 cannot parse any of them;
* `RLIKE` does not parse in DataFusion, and `regexp_like` is stored as the `~` operator, which Spark cannot parse;
* `CASE` constraints are evaluated wrongly by delta-rs (a row whose CASE is true fails its check);
* `/` divides integers to an integer in DataFusion and to a fraction in Spark;
* `length`, `char_length` cannot be stored by delta-rs ("Unable to convert expression to string");
* a column name with capitals or other characters is stored in double quotes, a string literal in Spark SQL;
* comparing a string with a number converts differently in the two engines.

A rule holds for a row when it evaluates to TRUE: NULL breaks it, as in Delta (Spark's writer and delta-rs alike).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NONDETERMINISTIC = {
    "rand", "random", "randn", "uuid", "now", "current_date", "current_timestamp", "current_time", "localtimestamp",
    "monotonically_increasing_id", "shuffle", "spark_partition_id", "input_file_name", "today", "unix_timestamp",
}
# name -> (argument categories, result category; "arg": the first argument's)
FUNCTIONS = {
    "lower": (("string",), "string"),
    "upper": (("string",), "string"),
    "trim": (("string",), "string"),
    "btrim": (("string",), "string"),  # delta-rs stores trim() as btrim(), which Spark has too
    "abs": (("number",), "arg"),
    "substring": (("string", "int", "int"), "string"),
    "substr": (("string", "int", "int"), "string"),
}
REFUSED_KEYWORDS = {
    "rlike": "RLIKE (DataFusion has no RLIKE, and delta-rs stores regexp_like as the `~` operator, which Spark cannot parse)",
    "regexp": "REGEXP (DataFusion has no REGEXP, and delta-rs stores regexp_like as the `~` operator, which Spark cannot parse)",
    "ilike": "ILIKE (Spark 3.5 and DataFusion disagree on it)",
    "case": "CASE (delta-rs 1.6.6 evaluates CASE constraints wrongly: a row whose CASE is true fails its check)",
    "cast": "CAST (delta-rs stores it as DataFusion's arrow_cast(...), which Spark cannot parse)",
    "date": "a DATE '...' literal (delta-rs stores it as '...'::date, which Spark 3.5 cannot parse; compare with another column)",
    "timestamp": "a TIMESTAMP '...' literal (delta-rs stores it as arrow_cast(...), which Spark cannot parse; compare with another column)",
    "interval": "an INTERVAL literal (not in the portable subset)",
    "select": "a subquery (a rule sees one row)",
    "exists": "a subquery (a rule sees one row)",
    "over": "a window function (a rule sees one row)",
}
REFUSED_FUNCTIONS = {
    "regexp_like": REFUSED_KEYWORDS["rlike"],
    "length": "length() (delta-rs 1.6.6 cannot store it as a constraint)",
    "char_length": "char_length() (delta-rs 1.6.6 cannot store it as a constraint)",
    "coalesce": "coalesce() (delta-rs stores it as a CASE expression, which it then evaluates wrongly; write `x IS NULL OR ...`)",
    "round": "round() (Spark rounds the decimal value of a double, DataFusion the double itself)",
}
_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|(?P<string>'(?:[^']|'')*')"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<quoted>`(?:[^`]|``)+`)|(?P<dquoted>\"[^\"]*\")"
    r"|(?P<op><=|>=|<>|!=|\|\||::|[=<>+\-*/%(),]))"
)
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "true", "false", "between", "like"}
SIMPLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


class RuleRefused(ValueError):
    """A rule outside the portable subset; the message names the construct."""


@dataclass(frozen=True)
class Node:
    sql: str  # fully parenthesized: the same tree in every engine, whatever its precedence rules
    category: str  # int, float, decimal, string, boolean, date, timestamp, other, null
    literal: bool = False


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise RuleRefused(f"the character {text[pos:].lstrip()[:1]!r} at position {pos} (not in the portable SQL subset)")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class Parser:
    """Recursive descent over the portable subset, with Spark's precedence: OR < AND < NOT < predicates < + - || < * %."""

    def __init__(self, text: str, columns: dict[str, str]):
        self.toks = tokens(text)
        self.i = 0
        self.columns = columns  # column name -> category
        self.used: list[str] = []

    def parse(self) -> Node:
        if not self.toks:
            raise RuleRefused("an empty expression")
        node = self.or_()
        if self.i < len(self.toks):
            raise RuleRefused(f"unexpected {self.toks[self.i][1]!r} (not a valid SQL boolean expression)")
        if node.category != "boolean":
            raise RuleRefused(f"an expression of type {node.category}, not a boolean (a rule must be true or false for a row)")
        return node

    # ---- tokens
    def peek(self, ahead: int = 0) -> tuple[str, str]:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else ("end", "")

    def word(self, *words: str, ahead: int = 0) -> bool:
        kind, value = self.peek(ahead)
        return kind == "ident" and value.lower() in words

    def take(self, value: str) -> None:
        kind, got = self.peek()
        if (got.lower() if kind == "ident" else got) != value:
            raise RuleRefused(f"expected {value!r} but found {got or 'the end'!r} (not a valid SQL boolean expression)")
        self.i += 1

    # ---- grammar
    def or_(self) -> Node:
        node = self.and_()
        while self.word("or"):
            self.i += 1
            node = _logic("OR", node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.word("and"):
            self.i += 1
            node = _logic("AND", node, self.not_())
        return node

    def not_(self) -> Node:
        if self.word("not"):
            self.i += 1
            inner = self.not_()
            _need(inner, ("boolean",), "NOT")
            return Node(f"(NOT {inner.sql})", "boolean")
        return self.predicate()

    def predicate(self) -> Node:
        left = self.additive()
        kind, value = self.peek()
        if kind == "op" and value in ("=", "<>", "!=", "<", "<=", ">", ">="):
            self.i += 1
            right = self.additive()
            _comparable(left, right, value)
            return Node(f"({left.sql} {'<>' if value == '!=' else value} {right.sql})", "boolean")
        if self.word("is"):
            self.i += 1
            negated = self.word("not")
            self.i += negated
            self.take("null")
            return Node(f"({left.sql} IS {'NOT ' if negated else ''}NULL)", "boolean")
        negated = self.word("not") and self.word("in", "between", "like", ahead=1)
        self.i += negated
        neg = "NOT " if negated else ""
        if self.word("in"):
            self.i += 1
            self.take("(")
            items = [self.additive()]
            while self.peek() == ("op", ","):
                self.i += 1
                items.append(self.additive())
            self.take(")")
            for item in items:
                if not item.literal:
                    raise RuleRefused(f"IN with a non-literal item {item.sql} (list literal values)")
                _comparable(left, item, "IN")
            return Node(f"({left.sql} {neg}IN ({', '.join(i.sql for i in items)}))", "boolean")
        if self.word("between"):
            self.i += 1
            low = self.additive()
            self.take("and")
            high = self.additive()
            _comparable(left, low, "BETWEEN")
            _comparable(left, high, "BETWEEN")
            return Node(f"({left.sql} {neg}BETWEEN {low.sql} AND {high.sql})", "boolean")
        if self.word("like"):
            self.i += 1
            pattern = self.additive()
            _need(left, ("string",), "LIKE")
            if not pattern.literal or pattern.category != "string":
                raise RuleRefused("LIKE with a pattern that is not a string literal")
            if "\\" in pattern.sql:
                raise RuleRefused("a LIKE pattern with a backslash (Spark and DataFusion escape differently)")
            return Node(f"({left.sql} {neg}LIKE {pattern.sql})", "boolean")
        if negated:
            raise RuleRefused("NOT without IN, BETWEEN or LIKE after a value")
        if self.word(*REFUSED_KEYWORDS):
            raise RuleRefused(f"a construct outside the portable subset: {REFUSED_KEYWORDS[self.peek()[1].lower()]}")
        return left

    def additive(self) -> Node:
        node = self.multiplicative()
        while self.peek()[0] == "op" and self.peek()[1] in ("+", "-", "||"):
            op = self.peek()[1]
            self.i += 1
            right = self.multiplicative()
            if op == "||":
                _need(node, ("string",), "||")
                _need(right, ("string",), "||")
                node = Node(f"({node.sql} || {right.sql})", "string")
            else:
                node = _arithmetic(op, node, right)
        return node

    def multiplicative(self) -> Node:
        node = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/", "%"):
            op = self.peek()[1]
            if op == "/":
                raise RuleRefused("the division operator / (DataFusion divides integers to an integer, Spark to a fraction); multiply instead")
            self.i += 1
            node = _arithmetic(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek() == ("op", "-"):
            self.i += 1
            inner = self.unary()
            _need(inner, ("int", "float"), "unary -")
            return Node(f"-{inner.sql}" if inner.literal else f"(- {inner.sql})", inner.category, inner.literal)
        return self.primary()

    def primary(self) -> Node:
        kind, value = self.peek()
        self.i += 1
        if kind == "number":
            return Node(value, "int" if re.fullmatch(r"\d+", value) else "float", True)
        if kind == "string":
            return Node(value, "string", True)
        if kind == "dquoted":
            raise RuleRefused(f"the double-quoted {value} (a string literal in Spark SQL, a column name in DataFusion): use 'single quotes' for text")
        if kind == "quoted":
            return self.column(value[1:-1].replace("``", "`"), quoted=True)
        if kind == "op" and value == "(":
            node = self.or_()
            self.take(")")
            return node
        if kind == "op" and value == "::":
            raise RuleRefused("the :: cast (not in Spark 3.5)")
        if kind != "ident":
            raise RuleRefused(f"unexpected {value or 'end of the expression'!r} (not a valid SQL boolean expression)")
        lower = value.lower()
        if lower in ("true", "false"):
            return Node(lower.upper(), "boolean", True)
        if lower == "null":
            return Node("NULL", "null", True)
        if lower in REFUSED_KEYWORDS:
            raise RuleRefused(f"a construct outside the portable subset: {REFUSED_KEYWORDS[lower]}")
        if self.peek() == ("op", "("):
            return self.function(lower)
        if lower in _KEYWORDS:
            raise RuleRefused(f"unexpected keyword {value.upper()} (not a valid SQL boolean expression)")
        return self.column(value, quoted=False)

    def function(self, name: str) -> Node:
        if name in NONDETERMINISTIC:
            raise RuleRefused(f"the function {name}() (not deterministic: a rule must give a row the same answer every time)")
        if name in REFUSED_FUNCTIONS:
            raise RuleRefused(f"a construct outside the portable subset: {REFUSED_FUNCTIONS[name]}")
        if name not in FUNCTIONS:
            raise RuleRefused(f"the function {name}() (not in the portable subset: {', '.join(sorted(FUNCTIONS))})")
        self.take("(")
        args = [] if self.peek() == ("op", ")") else [self.or_()]
        while self.peek() == ("op", ","):
            self.i += 1
            args.append(self.or_())
        self.take(")")
        wanted, result = FUNCTIONS[name]
        if len(args) != len(wanted):
            raise RuleRefused(f"{name}() with {len(args)} argument(s), not {len(wanted)}")
        for a, w in zip(args, wanted):
            _need(a, ("int", "float") if w == "number" else (w,), f"{name}()")
        return Node(f"{name}({', '.join(a.sql for a in args)})", args[0].category if result == "arg" else result)

    def column(self, name: str, quoted: bool) -> Node:
        actual = name if quoted or name in self.columns else name.lower()
        if actual not in self.columns:
            raise RuleRefused(f"the unknown column {name!r} (columns: {', '.join(self.columns) or 'none'})")
        if not SIMPLE_NAME.match(actual):
            raise RuleRefused(
                f"the column {actual!r}: delta-rs stores a name with capitals or other characters in double quotes, a string literal "
                "in Spark SQL; only lowercase letters, digits and underscores are portable (rename the column to use it in a rule)"
            )
        self.used.append(actual)
        return Node(actual, self.columns[actual])


def _need(node: Node, categories: tuple[str, ...], what: str) -> None:
    if node.category not in categories:
        raise RuleRefused(f"an operand of the wrong type: {what} needs {' or '.join(categories)}, and {node.sql} is {node.category}")


def _logic(op: str, left: Node, right: Node) -> Node:
    _need(left, ("boolean",), op)
    _need(right, ("boolean",), op)
    return Node(f"({left.sql} {op} {right.sql})", "boolean")


def _arithmetic(op: str, left: Node, right: Node) -> Node:
    _need(left, ("int", "float"), op)
    _need(right, ("int", "float"), op)
    category = "float" if "float" in (left.category, right.category) else "int"
    return Node(f"({left.sql} {op} {right.sql})", category)


def _comparable(left: Node, right: Node, what: str) -> None:
    if "null" in (left.category, right.category):
        raise RuleRefused(f"{what} with NULL (always NULL, which breaks the rule): use IS NULL / IS NOT NULL")
    numbers = {"int", "float"}
    if {left.category, right.category} <= numbers or left.category == right.category:
        if "decimal" == left.category and (left.literal or right.literal):
            raise RuleRefused(f"{what} of a decimal with a literal (delta-rs stores the literal as '...'::decimal, which Spark 3.5 cannot parse)")
        if left.category == "other":
            raise RuleRefused(f"{what} of {left.sql}, a nested or binary value")
        return
    if "decimal" in (left.category, right.category):
        raise RuleRefused(
            f"{what} of {left.sql} ({left.category}) with {right.sql} ({right.category}): a decimal column compares with decimal columns only "
            "(delta-rs stores a decimal literal as '...'::decimal, which Spark 3.5 cannot parse)"
        )
    raise RuleRefused(f"{what} of {left.sql} ({left.category}) with {right.sql} ({right.category}) (Spark and DataFusion convert between types differently)")


def check_rule(text: str, columns: dict[str, str]) -> tuple[str, list[str]]:
    """The rule's portable SQL (fully parenthesized) and the columns it reads; raises RuleRefused naming the construct."""
    parser = Parser(text, columns)
    return parser.parse().sql, list(dict.fromkeys(parser.used))


def category(spark_type_name: str) -> str:
    """A Spark simpleString type's category in the rules' type check."""
    t = spark_type_name.lower()
    if t in ("tinyint", "smallint", "int", "bigint", "byte", "short", "integer", "long"):
        return "int"
    if t in ("float", "double", "real"):
        return "float"
    if t.startswith("decimal"):
        return "decimal"
    if t in ("string",) or t.startswith(("varchar", "char")):
        return "string"
    if t in ("boolean", "date"):
        return t
    if t.startswith("timestamp"):
        return "timestamp"
    return "other"

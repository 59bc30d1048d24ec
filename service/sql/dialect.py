"""The Flink dialect over sqlglot, and the small helpers every construct uses on its nodes.

sqlglot has no Flink dialect: :class:`_FlinkSQL` is Spark's grammar with Flink's lexical rules for
quotes and Flink's ``TABLE <name>`` argument of the window table functions (the *Dialect* decision
in ``joins.py``'s docstring). Here too: the texts that name the supported subset in errors, the
condition nodes the condition compiler evaluates, reading one SELECT statement and its clauses,
and reading an ``INTERVAL`` literal."""

from __future__ import annotations

import re
from typing import NoReturn

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Tokenizer

from expressions.dialect import FlinkSQL
from expressions.parse import Refused, translate

from .model import QueryError


# The Flink dialect over sqlglot is the expressions' (every SQL text of changejoin is read in it).
_FlinkSQL = FlinkSQL


_DIALECT = _FlinkSQL()
_OUT_DIALECT = None  # condition_sql: sqlglot's default dialect, as operators.condition parses it

# A refusal is three lines (each constant below is the last two): what is wrong, what is supported
# instead, and the section of docs/sql.md that says it all (tests/service/test_query.py).
SQL_DOC = "docs/sql.md"


def _supported(what: str, section: str) -> str:
    return f"\n{what}\nSee {SQL_DOC}#{section}"


_FORMS = ("one SELECT of columns from two tables: [INNER|LEFT|RIGHT|FULL] JOIN <right> ON a.k = b.k "
          "[AND ...], also FOR SYSTEM_TIME AS OF (temporal and lookup joins), time ranges (interval joins), "
          "TUMBLE, HOP, CUMULATE (window joins), [NOT] IN / [NOT] EXISTS (semi and anti joins)")
_SUPPORTED = _supported(f"Supported queries: {_FORMS}", "supported-forms")
# Where a construct outside the join itself is refused (aggregation, sorting, more tables).
_REFUSED = _supported(f"Supported queries: {_FORMS}", "refused")
_SUPPORTED_SELECT = _supported(
    "The select list may contain column references (a.col or col) and expressions, each with an optional "
    "AS <name>, a.* and *", "expressions")
# Where an expression (in the select list, ON, WHERE or an input subquery) is refused.
_SUPPORTED_EXPRESSION = _supported(
    "Expressions may use Flink SQL 2.3's operators and deterministic functions that docs/sql.md lists, "
    "on columns of the two inputs", "functions")

_CLAUSE_NAMES = {
    "with": "WITH (common table expressions)",
    "with_": "WITH (common table expressions)",
    "distinct": "SELECT DISTINCT",
    "group": "GROUP BY (aggregation)",
    "having": "HAVING",
    "order": "ORDER BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "laterals": "LATERAL VIEW",
    "pivots": "PIVOT",
    "sample": "TABLESAMPLE",
    "kind": "SELECT AS STRUCT/VALUE",
    "into": "SELECT INTO",
    "hint": "query hints",
    "locks": "locking clauses",
}

_PROCTIME_NAMES = ("proctime", "proc_time")
_SAFE_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIDE_WORD = {"L": "left", "R": "right"}


def _fail(message: str) -> NoReturn:
    """The one way the SQL front end refuses a query: what is wrong, and where the message holds a
    line break, what is supported and the docs/sql.md section (the constants above)."""
    # What is wrong ends its line where the supported forms begin.
    raise QueryError(re.sub(r"[ ;,.]*\n", ".\n", message, count=1) if "\n" in message else message)


def _translate(node: exp.Expression, resolve) -> list:
    """An expression as a typed node of ``expressions`` (its columns by ``resolve``), or a refusal."""
    try:
        return translate(node, resolve)
    except Refused as err:
        _fail(f"{err}{_SUPPORTED_EXPRESSION}")


def _arg(node: exp.Expression, *names: str):
    """First present argument among ``names`` (sqlglot renamed e.g. ``from`` to ``from_``)."""
    for name in names:
        value = node.args.get(name)
        if value:
            return value
    return None


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect=_DIALECT)


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    node = _unparen(node)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _quote_name(name: str) -> exp.Identifier:
    keyword = name.upper() in _FlinkSQL.tokenizer_class.KEYWORDS or name.upper() in Tokenizer.KEYWORDS
    return exp.Identifier(this=name, quoted=keyword or not _SAFE_IDENTIFIER.match(name))


def _lookup(name: str, candidates: list[str]) -> list[str]:
    """Case-sensitive match, else all case-insensitive matches."""
    if name in candidates:
        return [name]
    folded = name.casefold()
    return [c for c in candidates if c.casefold() == folded]


#: How deeply JOIN_SQL may nest parentheses (the parser and the condition's compiler recurse).
MAX_NESTING = 100


def _nesting(sql: str) -> int:
    """The deepest nesting of parentheses in ``sql`` outside quoted strings and identifiers."""
    depth = deepest = 0
    quote = None
    for c in sql:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"`":
            quote = c
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    return deepest


def _parse_statement(sql: str) -> exp.Expression:
    if not sql or not sql.strip():
        _fail(f"it is empty. {_SUPPORTED}")
    if _nesting(sql) > MAX_NESTING:
        _fail(f"its parentheses nest {_nesting(sql)} deep; at most {MAX_NESTING}")
    try:
        statements = [s for s in sqlglot.parse(sql, read=_DIALECT) if s is not None]
    except ParseError as e:
        details = []
        for err in e.errors[:1]:
            desc = re.sub(r"<Token token_type: [^,]+, text: (.*?), line: .*?>", r"'\1'", err.get("description", ""))
            near = (err.get("start_context") or "")[-30:] + (err.get("highlight") or "")
            details.append(f"{desc} at line {err.get('line')}, column {err.get('col')} (near '{near}')")
        _fail(f"not valid SQL: {'; '.join(details) or e}. {_SUPPORTED}")
    except TokenError as e:
        _fail(f"not valid SQL ({e}; check quotes: strings use '...', identifiers `...` or \"...\"). {_SUPPORTED}")
    except RecursionError:
        _fail("too long or too deeply nested to parse; simplify the condition")
    if not statements:
        _fail(f"it is empty. {_SUPPORTED}")
    if len(statements) > 1:
        _fail(f"it must be a single SELECT statement, found {len(statements)} statements. {_SUPPORTED}")
    stmt = statements[0]
    if isinstance(stmt, exp.Insert):
        _fail(f"give only the SELECT query in JOIN_SQL, without INSERT INTO (the output topic is configured separately). {_SUPPORTED}")
    if isinstance(stmt, exp.SetOperation if hasattr(exp, "SetOperation") else exp.Union):
        _fail(f"UNION / INTERSECT / EXCEPT are not supported; JOIN_SQL must be one SELECT. {_SUPPORTED}")
    if not isinstance(stmt, exp.Select):
        _fail(f"it must be a SELECT query, got {stmt.key.upper()}. {_SUPPORTED}")
    return stmt


def _check_clauses(select: exp.Select, context: str, allowed: set[str]) -> None:
    for key, value in select.args.items():
        if key in allowed or not value:
            continue
        clause = _CLAUSE_NAMES.get(key, key.rstrip("_").upper())
        _fail(
            f"{clause} is not supported in {context}: this service only joins the two tables "
            f"(no aggregation, de-duplication, sorting or limiting). {_REFUSED}"
        )


def _from_table(select: exp.Select, context: str) -> exp.Expression:
    from_ = _arg(select, "from_", "from")
    if from_ is None:
        _fail(f"{context} has no FROM clause. {_SUPPORTED}")
    return from_.this


_INTERVAL_UNIT_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": 86_400_000}


def _interval_ms(node: exp.Expression, context: str) -> int:
    """Milliseconds of ``INTERVAL 'n' <unit>`` (n may be negative or have a fraction that gives
    whole milliseconds; plural units are accepted, as Flink does)."""
    node = _unparen(node)
    usage = "write INTERVAL 'n' MILLISECOND, SECOND, MINUTE, HOUR or DAY"
    if not isinstance(node, exp.Interval):
        _fail(f"'{_sql(node)}' in {context} is not an interval; {usage}")
    unit = node.args.get("unit")
    name = unit.name.upper() if isinstance(unit, exp.Var) else ""
    if name.endswith("S") and name[:-1] in _INTERVAL_UNIT_MS:
        name = name[:-1]
    value = node.this
    if name not in _INTERVAL_UNIT_MS or not isinstance(value, exp.Literal):
        _fail(f"unsupported interval '{_sql(node)}' in {context}; {usage}")
    from decimal import Decimal, InvalidOperation

    try:
        ms = Decimal(value.this.strip()) * _INTERVAL_UNIT_MS[name]
    except InvalidOperation:
        _fail(f"unsupported interval '{_sql(node)}' in {context}; {usage}")
    if ms != ms.to_integral_value():
        _fail(f"interval '{_sql(node)}' in {context} is not a whole number of milliseconds")
    return int(ms)

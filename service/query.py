"""Parse the user's ``JOIN_SQL`` (a Flink-style SQL query) into a join plan.

The service joins exactly two Kafka topics, the configured *left* and *right*
tables.  The user describes the join with one Flink SQL query; this module turns
it into a :class:`JoinQuery` that the runtime executes.  Only a small subset of
Flink SQL is accepted, and everything else is rejected with a :class:`QueryError`
that says what is wrong and what is supported.

Supported forms (keywords are case-insensitive, table aliases are optional)::

    -- regular joins; JOIN alone means INNER
    SELECT <cols> FROM L [[AS] a] [INNER | LEFT [OUTER] | RIGHT [OUTER] | FULL [OUTER]]
        JOIN R [[AS] b] ON <condition> [WHERE <condition>  -- INNER joins only]

    -- temporal joins (INNER or LEFT only)
    ... FROM L AS a [LEFT] JOIN R FOR SYSTEM_TIME AS OF a.<left time column> AS b ON ...
    ... FROM L AS a [LEFT] JOIN R FOR SYSTEM_TIME AS OF PROCTIME() AS b ON ...

    -- LEFT SEMI / LEFT ANTI joins
    SELECT <left cols> FROM L [AS a] WHERE a.k [NOT] IN (SELECT b.k FROM R [AS b] [WHERE ...])
    SELECT <left cols> FROM L [AS a] WHERE (a.k1, a.k2) [NOT] IN (SELECT b.k1, b.k2 FROM R b ...)
    SELECT <left cols> FROM L [AS a] WHERE [NOT] EXISTS (SELECT 1 FROM R [AS b] WHERE b.k = a.k ...)

Conditions (ON, the INNER-join WHERE, the subquery WHERE) are split into
conjuncts.  Every conjunct ``x = y`` / ``x IS NOT DISTINCT FROM y`` (``<=>`` too)
where one side is a bare left column and the other a bare right column becomes
an equi key (in source order); all other conjuncts form the residual condition,
which is re-rendered over ``l.<col>`` / ``r.<col>`` (the table aliases
replaced by ``l`` and ``r``, column names resolved to their schema spelling and
double-quoted when needed) and ANDed in source order, with ``OR`` conjuncts
parenthesised.  It is rendered in sqlglot's default dialect, which is what
``operators.condition.compile_condition`` parses (``IS DISTINCT FROM`` is
rendered as ``NOT (.. IS NOT DISTINCT FROM ..)`` for it).  Residual conditions
may use column references, string / number / boolean / NULL literals,
comparisons, ``IS [NOT] DISTINCT FROM``, ``AND`` / ``OR`` / ``NOT``,
``IS [NOT] NULL``, ``[NOT] LIKE [ESCAPE 'c']``, ``[NOT] BETWEEN``,
``[NOT] IN (<values>)``, unary minus, ``+ - * / %`` and parentheses; no functions
or subqueries (the same subset the condition compiler evaluates).  At least one equi key
is required (Flink has the same restriction for streaming regular, temporal and
semi/anti joins: they need an equality predicate to partition state).

Decisions on ambiguous points:

* **Dialect.**  sqlglot has no Flink dialect.  Its Spark grammar parses
  ``FOR SYSTEM_TIME AS OF <expr>`` into an ``exp.Version`` on the table (no
  pre-processing of the SQL text is needed), ``IS NOT DISTINCT FROM`` and
  ``(a, b) IN (SELECT ...)``.  We use a private dialect derived from Spark whose
  tokenizer follows Flink's lexical rules: string literals in single quotes only
  (``''`` escapes a quote; backslash is not special), identifiers quoted with back
  quotes (Flink style) or double quotes.
* **Names.**  Table names, aliases and column names are matched case-sensitively
  first, then case-insensitively if that gives a unique match.  Equi keys, the
  residual condition and :attr:`OutputColumn.column` use the schema spelling; an
  output name without ``AS`` keeps the user's spelling.  With an alias, columns
  must be qualified by the alias (as in SQL); without one, by the table name.
  Unqualified columns resolve when exactly one table in scope has them; inside a
  semi/anti subquery the subquery's (right) table is searched before the outer
  (left) table, as in SQL.  ``left_alias`` / ``right_alias`` hold the alias, or the
  table name as written when there is no alias.
* **Output names** must be unique case-insensitively (Spark resolves column
  names case-insensitively, so ``ID`` and ``id`` would collide downstream).
* **WHERE** is merged into the join condition only for INNER joins (regular or
  temporal), where that is equivalent.  For a SEMI join, extra left-only
  conjuncts in the outer WHERE are merged into the condition as well (equivalent
  for a semi join); for an ANTI join they are rejected (filtering the left input
  is not the same as adding to the anti-join's match condition).
* **NOT IN** is planned exactly like ``NOT EXISTS`` with ``=`` keys.  This is the
  SQL result whenever the key columns are never NULL.  With NULLs SQL differs: a
  NULL key in the subquery makes ``NOT IN`` reject every left row, and a left row
  with a NULL key is only kept when the subquery is empty; here right rows with a
  NULL key never match and left rows with a NULL key are always emitted.  Use
  ``NOT EXISTS`` to state the semantics that is actually executed.
* **Processing time.**  ``FOR SYSTEM_TIME AS OF PROCTIME()`` is accepted, and so
  is ``a.proctime`` / ``a.proc_time`` when that name is *not* a column of the left
  table: Flink users write that form (its docs declare ``proctime AS PROCTIME()``
  as a computed column), while Kafka topic schemas have no such virtual column.
  A real left column is always taken as an event-time column.
* **Temporal keys.**  The right table's primary key is not known here; a
  temporal join just needs at least one equi key, and every left/right equality
  becomes an equi key.  The runtime decides which of them form the versioned
  table's key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Tokenizer

from operators import JoinType, TemporalKind
from operators.condition import SUPPORTED as CONDITION_SUPPORTED
from operators.condition import SUPPORTED_NODES

__all__ = ["JoinQuery", "OutputColumn", "QueryError", "describe", "parse_join_sql"]


class QueryError(ValueError):
    """The JOIN_SQL query is invalid or outside the supported subset."""


@dataclass(frozen=True)
class OutputColumn:
    name: str  # output field name (alias or the column name)
    side: str  # "L" or "R"
    column: str  # source column name on that side


@dataclass(frozen=True)
class JoinQuery:
    join_type: JoinType
    temporal: TemporalKind | None  # None for a regular or semi/anti join
    left_table: str
    left_alias: str
    right_table: str
    right_alias: str
    equi_keys: tuple[tuple[str, str], ...]  # (left column, right column), in ON order
    null_safe_keys: tuple[bool, ...]  # per key: True for IS NOT DISTINCT FROM
    condition_sql: str | None  # residual condition over l.<col> / r.<col>, or None
    left_time_column: str | None  # event-time temporal: the FOR SYSTEM_TIME AS OF column
    projection: tuple[OutputColumn, ...]


# --------------------------------------------------------------------------- dialect


class _FlinkSQL(Spark):
    """Spark's grammar with Flink's lexical rules for quotes (see module docstring)."""

    class Tokenizer(Spark.Tokenizer):
        QUOTES = ["'"]
        IDENTIFIERS = ["`", '"']
        STRING_ESCAPES = ["'"]


_DIALECT = _FlinkSQL()
_OUT_DIALECT = None  # condition_sql: sqlglot's default dialect, as operators.condition parses it

_SUPPORTED = (
    "Supported queries: SELECT <columns> FROM <left> [AS a] "
    "[INNER|LEFT [OUTER]|RIGHT [OUTER]|FULL [OUTER]] JOIN <right> "
    "[FOR SYSTEM_TIME AS OF a.<time column> | PROCTIME()] [AS b] ON a.k = b.k [AND ...]; "
    "or SELECT <left columns> FROM <left> [AS a] WHERE a.k [NOT] IN (SELECT b.k FROM <right> [AS b] ...) "
    "/ [NOT] EXISTS (SELECT 1 FROM <right> [AS b] WHERE b.k = a.k ...)."
)
_SUPPORTED_CONDITION = f"conditions may use {CONDITION_SUPPORTED}"
_SUPPORTED_SELECT = (
    "the select list may contain column references (a.col or col) with optional AS <name>, "
    "a.* and *"
)

# IS NOT DISTINCT FROM's negation is rewritten into NOT (... IS NOT DISTINCT FROM ...) for the compiler.
_CONDITION_NODES = tuple(getattr(exp, name) for name in SUPPORTED_NODES) + (exp.NullSafeNEQ,)

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
    raise QueryError(message)


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


# --------------------------------------------------------------------------- scopes


@dataclass
class _Side:
    code: str  # "L" | "R"
    table: str  # configured table name
    columns: list[str]
    written: str = ""  # table name as written in the query
    alias: str | None = None

    @property
    def qualifier(self) -> str:
        return self.alias if self.alias is not None else self.written

    def label(self) -> str:
        if self.alias is not None:
            return f"{self.table} (alias {self.alias})"
        return self.table

    def column(self, name: str) -> str:
        """Resolve ``name`` among this table's columns or raise."""
        found = _lookup(name, self.columns)
        if len(found) == 1:
            return found[0]
        if found:
            _fail(
                f"column '{name}' of {_SIDE_WORD[self.code]} table {self.label()} matches "
                f"{', '.join(found)} case-insensitively; write the exact spelling"
            )
        _fail(
            f"unknown column '{name}' in {_SIDE_WORD[self.code]} table {self.label()}; "
            f"its columns are: {', '.join(self.columns) or '(none)'}"
        )


class _Resolver:
    """Resolves column references of the query against the two table schemas."""

    def __init__(self, left: _Side, right: _Side):
        self.sides = {"L": left, "R": right}

    def side_for_qualifier(self, qualifier: str, scope: list[list[str]]) -> _Side:
        in_scope = [self.sides[c] for level in scope for c in level]
        found = [s for s in in_scope if s.qualifier == qualifier]
        if not found:
            folded = qualifier.casefold()
            found = [s for s in in_scope if s.qualifier.casefold() == folded]
        if not found:
            # SQL lets a multi-part table name (db.t) be referred to by its last part.
            found = [
                s
                for s in in_scope
                if s.alias is None and "." in s.written and s.written.rsplit(".", 1)[1] == qualifier
            ]
        if len(found) == 1:
            return found[0]
        known = ", ".join(f"{s.qualifier} ({s.table})" for s in in_scope)
        if found:
            _fail(f"table qualifier '{qualifier}' is ambiguous; give the tables distinct aliases (known: {known})")
        aliased = [s for s in in_scope if s.alias is not None and s.written.casefold() == qualifier.casefold()]
        if aliased:
            s = aliased[0]
            _fail(
                f"table '{qualifier}' is aliased as '{s.alias}' in this query; "
                f"qualify its columns with {s.alias}.<column>"
            )
        _fail(f"unknown table or alias '{qualifier}'; the tables here are referred to as: {known}")

    def resolve(self, col: exp.Column, scope: list[list[str]]) -> tuple[str, str]:
        """Return (side, schema column name) for a column reference."""
        if isinstance(col.this, exp.Star):
            _fail(f"'{_sql(col)}' is only allowed in the select list")
        name = col.name
        qualifier = ".".join(p.name for p in col.parts[:-1])
        if qualifier:
            side = self.side_for_qualifier(qualifier, scope)
            return side.code, side.column(name)
        for level in scope:
            exact = [self.sides[c] for c in level if name in self.sides[c].columns]
            if not exact:
                exact = [self.sides[c] for c in level if _lookup(name, self.sides[c].columns)]
            if len(exact) > 1:
                options = " or ".join(f"{s.qualifier}.{s.column(name)}" for s in exact)
                _fail(f"column '{name}' is ambiguous (it exists in both tables); qualify it as {options}")
            if exact:
                return exact[0].code, exact[0].column(name)
        tables = "; ".join(
            f"{_SIDE_WORD[c]} table {self.sides[c].label()}: {', '.join(self.sides[c].columns) or '(none)'}"
            for level in scope
            for c in level
        )
        _fail(f"unknown column '{name}'; available columns are {tables}")

    # ---------------------------------------------------------------- conditions

    def render(self, node: exp.Expression, scope: list[list[str]], context: str) -> exp.Expression:
        """Validate a residual conjunct and rewrite its columns to l.<col> / r.<col>."""
        self._check_condition(node, scope, context)

        def rewrite(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column):
                side, column = self.resolve(n, scope)
                return exp.Column(this=_quote_name(column), table=exp.to_identifier(side.lower()))
            if isinstance(n, exp.Div):
                # Spark's grammar marks `/` as "safe" (x / 0 is NULL), which other dialects render
                # as x / NULLIF(y, 0); keep the plain operator: the condition evaluator defines `/`.
                return exp.Div(this=n.this, expression=n.expression)
            if isinstance(n, exp.NullSafeNEQ):  # the condition compiler knows only the positive form
                return exp.Not(this=exp.Paren(this=exp.NullSafeEQ(this=n.this, expression=n.expression)))
            return n

        return _rewrite_bottom_up(node.copy(), rewrite)

    def _check_condition(self, node: exp.Expression, scope: list[list[str]], context: str) -> None:
        if isinstance(node, exp.Column):
            self.resolve(node, scope)
            return
        if isinstance(node, (exp.Subquery, exp.Exists, exp.Select)) or (
            isinstance(node, exp.In) and _arg(node, "query", "unnest", "field")
        ):
            _fail(
                f"subquery in {context} is not supported: subqueries are only allowed as the single "
                f"WHERE [NOT] IN / [NOT] EXISTS predicate of a semi/anti join. {_SUPPORTED}"
            )
        if (
            not isinstance(node, _CONDITION_NODES)
            or (isinstance(node, exp.Literal) and not (node.is_string or node.is_number))
            or (isinstance(node, exp.Is) and not isinstance(node.expression, exp.Null))
            or (isinstance(node, exp.Escape) and not isinstance(node.this, (exp.Like, exp.ILike)))
        ):
            what = "function" if isinstance(node, exp.Func) else "expression"
            _fail(f"unsupported {what} '{_sql(node)}' in {context}; {_SUPPORTED_CONDITION}")
        for child in node.iter_expressions():
            self._check_condition(child, scope, context)

    def split(
        self, conditions: list[exp.Expression], scope: list[list[str]], context: str
    ) -> tuple[list[tuple[str, str]], list[bool], list[exp.Expression]]:
        """Split conjuncts into equi keys (left col, right col), null-safety, and residual."""
        keys: list[tuple[str, str]] = []
        null_safe: list[bool] = []
        residual: list[exp.Expression] = []
        for conjunct in conditions:
            if isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
                a, b = _unparen(conjunct.this), _unparen(conjunct.expression)
                if isinstance(a, exp.Column) and isinstance(b, exp.Column):
                    ra, rb = self.resolve(a, scope), self.resolve(b, scope)
                    if {ra[0], rb[0]} == {"L", "R"}:
                        left, right = (ra, rb) if ra[0] == "L" else (rb, ra)
                        keys.append((left[1], right[1]))
                        null_safe.append(isinstance(conjunct, exp.NullSafeEQ))
                        continue
            residual.append(self.render(conjunct, scope, context))
        return keys, null_safe, residual


def _rewrite_bottom_up(node: exp.Expression, fn) -> exp.Expression:
    """Apply ``fn`` to every node, children first (so replacements see rewritten children)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _rewrite_bottom_up(value, fn))
        elif isinstance(value, list):
            node.set(key, [_rewrite_bottom_up(v, fn) if isinstance(v, exp.Expression) else v for v in value])
    return fn(node)


def _condition_sql(residual: list[exp.Expression]) -> str | None:
    if not residual:
        return None
    if len(residual) == 1:
        return residual[0].sql(dialect=_OUT_DIALECT)
    parts = []
    for node in residual:
        if isinstance(node, (exp.Or, exp.Xor)):  # looser than AND: keep its meaning
            node = exp.Paren(this=node)
        parts.append(node.sql(dialect=_OUT_DIALECT))
    return " AND ".join(parts)


# --------------------------------------------------------------------------- query parts


def _parse_statement(sql: str) -> exp.Expression:
    if not sql or not sql.strip():
        _fail(f"JOIN_SQL is empty. {_SUPPORTED}")
    try:
        statements = [s for s in sqlglot.parse(sql, read=_DIALECT) if s is not None]
    except ParseError as e:
        details = []
        for err in e.errors[:1]:
            desc = re.sub(r"<Token token_type: [^,]+, text: (.*?), line: .*?>", r"'\1'", err.get("description", ""))
            near = (err.get("start_context") or "")[-30:] + (err.get("highlight") or "")
            details.append(f"{desc} at line {err.get('line')}, column {err.get('col')} (near '{near}')")
        _fail(f"JOIN_SQL is not valid SQL: {'; '.join(details) or e}. {_SUPPORTED}")
    except TokenError as e:
        _fail(f"JOIN_SQL is not valid SQL ({e}; check quotes: strings use '...', identifiers `...` or \"...\"). {_SUPPORTED}")
    if not statements:
        _fail(f"JOIN_SQL is empty. {_SUPPORTED}")
    if len(statements) > 1:
        _fail(f"JOIN_SQL must be a single SELECT statement, found {len(statements)} statements. {_SUPPORTED}")
    stmt = statements[0]
    if isinstance(stmt, exp.Insert):
        _fail(f"give only the SELECT query in JOIN_SQL, without INSERT INTO (the output topic is configured separately). {_SUPPORTED}")
    if isinstance(stmt, exp.SetOperation if hasattr(exp, "SetOperation") else exp.Union):
        _fail(f"UNION / INTERSECT / EXCEPT are not supported; JOIN_SQL must be one SELECT. {_SUPPORTED}")
    if not isinstance(stmt, exp.Select):
        _fail(f"JOIN_SQL must be a SELECT query, got {stmt.key.upper()}. {_SUPPORTED}")
    return stmt


def _check_clauses(select: exp.Select, context: str, allowed: set[str]) -> None:
    for key, value in select.args.items():
        if key in allowed or not value:
            continue
        clause = _CLAUSE_NAMES.get(key, key.rstrip("_").upper())
        _fail(
            f"{clause} is not supported in {context}: this service only joins the two tables "
            f"(no aggregation, de-duplication, sorting or limiting). {_SUPPORTED}"
        )


def _from_table(select: exp.Select, context: str) -> exp.Expression:
    from_ = _arg(select, "from_", "from")
    if from_ is None:
        _fail(f"{context} has no FROM clause. {_SUPPORTED}")
    return from_.this


def _bind_table(
    node: exp.Expression, side: _Side, other: _Side, where: str, allow_version: bool = False
) -> exp.Version | None:
    """Check that ``node`` names the configured table of ``side``; record its alias."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        _fail(
            f"{where} must name the {_SIDE_WORD[side.code]} table '{side.table}' directly; "
            f"subqueries, derived tables and table functions are not supported. {_SUPPORTED}"
        )
    for key, value in node.args.items():
        if value and key not in ("this", "db", "catalog", "alias", "version"):
            _fail(f"unsupported table modifier '{_sql(node)}' in {where}. {_SUPPORTED}")
    name = ".".join(p.name for p in node.parts)
    left, right = _left_of(side, other), _right_of(side, other)
    # exact spelling first (the two tables may differ only by case), then case-insensitive
    for match in (lambda a, b: a == b, lambda a, b: a.casefold() == b.casefold()):
        if match(name, side.table):
            break
        if match(name, other.table):
            _fail(
                f"table '{name}' in {where} is the configured {_SIDE_WORD[other.code]} table; the left "
                f"table ('{left.table}') must be in FROM and the right table ('{right.table}') in the "
                "JOIN (or in the IN/EXISTS subquery) - swap them (a LEFT join becomes a RIGHT join)"
            )
    else:
        _fail(
            f"unknown table '{name}' in {where}; the configured tables are '{left.table}' (left, "
            f"in FROM) and '{right.table}' (right, in the JOIN or the IN/EXISTS subquery)"
        )
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        _fail(f"column aliases in '{_sql(alias)}' are not supported; rename output columns with AS in the select list")
    side.written = name
    side.alias = alias.name if alias is not None and alias.name else None
    version = node.args.get("version")
    if version is not None and not allow_version:
        _fail(
            f"FOR SYSTEM_TIME AS OF is only supported on the right (versioned) table of a JOIN, "
            f"as in: FROM {_left_of(side, other).table} AS o JOIN {_right_of(side, other).table} "
            "FOR SYSTEM_TIME AS OF o.<time column> AS r ON ..."
        )
    return version


def _left_of(a: _Side, b: _Side) -> _Side:
    return a if a.code == "L" else b


def _right_of(a: _Side, b: _Side) -> _Side:
    return a if a.code == "R" else b


def _check_distinct_qualifiers(left: _Side, right: _Side) -> None:
    if left.qualifier.casefold() == right.qualifier.casefold():
        _fail(
            f"both tables are referred to as '{left.qualifier}'; give them different aliases, "
            f"e.g. FROM {left.written} AS l ... {right.written} AS r"
        )


def _projection(
    select: exp.Select, res: _Resolver, scope: list[list[str]], semi: bool
) -> tuple[OutputColumn, ...]:
    out: list[OutputColumn] = []
    origin: dict[str, str] = {}

    def add(name: str, side: _Side, column: str, source: str) -> None:
        folded = name.casefold()
        if folded in origin:
            _fail(
                f"duplicate output column name '{name}' (from {origin[folded]} and {source}); output names "
                f"must be unique (case-insensitively) - list the columns explicitly and rename one with AS, "
                f"e.g. {side.qualifier}.{column} AS {_SIDE_WORD[side.code]}_{column}"
            )
        origin[folded] = source
        out.append(OutputColumn(name=name, side=side.code, column=column))

    def star(side: _Side, star_sql: str) -> None:
        for column in side.columns:
            add(column, side, column, f"{side.qualifier}.{column} via {star_sql}")

    sides = [res.sides[c] for level in scope for c in level if not (semi and c == "R")]
    semi_msg = "only left-table columns may be selected in a semi/anti join (the right table only filters)"
    for item in select.expressions:
        node, alias = item, None
        if isinstance(item, exp.Alias):
            node, alias = item.this, item.alias
        if isinstance(node, exp.Star) and alias is None:
            if any(node.args.values()):
                _fail(f"'{_sql(node)}' is not supported; {_SUPPORTED_SELECT}")
            for side in sides:
                star(side, "*")
            continue
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Star) and alias is None:
            if any(node.this.args.values()):
                _fail(f"'{_sql(node)}' is not supported; {_SUPPORTED_SELECT}")
            qualifier = ".".join(p.name for p in node.parts[:-1])
            side = res.side_for_qualifier(qualifier, scope)
            if semi and side.code != "L":
                _fail(f"{semi_msg}, got '{_sql(node)}'")
            star(side, _sql(node))
            continue
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            side, column = res.resolve(node, scope)
            if semi and side != "L":
                _fail(f"{semi_msg}, got '{_sql(node)}'")
            add(alias or node.name, res.sides[side], column, _sql(node))
            continue
        if isinstance(node, exp.Subquery) or node.find(exp.Select):
            _fail(f"subquery '{_sql(item)}' in the select list is not supported; {_SUPPORTED_SELECT}")
        agg = node.find(exp.AggFunc)
        if agg is not None:
            _fail(
                f"aggregate function '{_sql(agg)}' in the select list is not supported (this service "
                f"joins, it does not aggregate); {_SUPPORTED_SELECT}"
            )
        what = "function call" if isinstance(node, exp.Func) else "expression"
        _fail(
            f"{what} '{_sql(item)}' in the select list is not supported (output columns are copied "
            f"unchanged); {_SUPPORTED_SELECT}"
        )
    return tuple(out)


def _require_keys(keys: list, what: str) -> None:
    if not keys:
        _fail(
            f"{what} has no equi-join condition: it needs at least one conjunct '<left column> = <right "
            "column>' (or IS NOT DISTINCT FROM), ANDed with any other condition. Flink has the same "
            "restriction: streaming regular, temporal and semi/anti joins need an equality between the "
            "two tables (for temporal joins, on the versioned table's primary key)"
        )


# --------------------------------------------------------------------------- entry points


def parse_join_sql(
    sql: str,
    left_table: str,
    left_columns: list[str],
    right_table: str,
    right_columns: list[str],
) -> JoinQuery:
    """Parse ``sql`` into a :class:`JoinQuery` or raise :class:`QueryError`.

    ``left_table`` must appear in FROM, ``right_table`` in the JOIN (or in the
    ``[NOT] IN`` / ``[NOT] EXISTS`` subquery of a semi/anti join).  See the module
    docstring for the supported subset and the decisions on ambiguous points;
    in short, ``NOT IN`` is planned like ``NOT EXISTS`` (identical unless the
    keys contain NULLs).
    """
    left = _Side("L", left_table, list(left_columns))
    right = _Side("R", right_table, list(right_columns))
    res = _Resolver(left, right)
    select = _parse_statement(sql)
    _check_clauses(select, "the query", {"expressions", "from", "from_", "joins", "where"})
    _bind_table(_from_table(select, "the query"), left, right, "FROM")
    joins = select.args.get("joins") or []
    if len(joins) > 1:
        _fail(
            f"the query joins {len(joins) + 1} tables; exactly two are supported (the left table "
            f"'{left_table}' and the right table '{right_table}'). {_SUPPORTED}"
        )
    if joins:
        return _regular_join(select, joins[0], res)
    return _semi_anti_join(select, res)


def _regular_join(select: exp.Select, join: exp.Join, res: _Resolver) -> JoinQuery:
    left, right = res.sides["L"], res.sides["R"]
    side = (join.side or "").upper()
    kind = (join.kind or "").upper()
    if join.args.get("using"):
        _fail(f"JOIN ... USING is not supported; write ON a.k = b.k. {_SUPPORTED}")
    if join.args.get("method"):
        _fail(f"{join.args['method']} JOIN is not supported; write the join condition with ON. {_SUPPORTED}")
    if kind in ("SEMI", "ANTI"):
        _fail(
            f"{side + ' ' if side else ''}{kind} JOIN syntax is not supported; write a semi/anti join as "
            "WHERE [NOT] EXISTS (SELECT 1 FROM <right> b WHERE b.k = a.k) or WHERE a.k [NOT] IN "
            "(SELECT b.k FROM <right> b)"
        )
    if kind == "CROSS":
        _fail(f"cross joins (CROSS JOIN or FROM a, b) are not supported; use JOIN ... ON with an equality. {_SUPPORTED}")
    for key, value in join.args.items():
        if value and key not in ("this", "on", "side", "kind"):
            _fail(f"unsupported join syntax in '{_sql(join)}'. {_SUPPORTED}")
    if kind not in ("", "INNER", "OUTER") or side not in ("", "LEFT", "RIGHT", "FULL") or (kind == "OUTER" and not side):
        _fail(f"unsupported join type '{' '.join(x for x in (side, kind) if x)} JOIN'. {_SUPPORTED}")
    join_type = side or "INNER"

    version = _bind_table(join.this, right, left, "JOIN", allow_version=True)
    _check_distinct_qualifiers(left, right)
    scope = [["L", "R"]]

    temporal, time_column = None, None
    if version is not None:
        temporal, time_column = _temporal(version, join_type, res, scope)

    on = join.args.get("on")
    if on is None or isinstance(on, exp.Boolean):  # sqlglot's Spark parser reads a missing ON as ON TRUE
        _fail(f"the JOIN has no ON condition; add ON a.k = b.k. {_SUPPORTED}")
    keys, null_safe, residual = res.split(_conjuncts(on), scope, "the ON condition")

    where = select.args.get("where")
    if where is not None:
        if join_type != "INNER":
            _fail(
                f"WHERE is not supported with a {join_type} join (it would filter the joined rows, "
                "which this service does not do); WHERE is only allowed for INNER joins, where it is "
                "merged into the join condition. Put join conditions into ON"
            )
        more_keys, more_null_safe, more_residual = res.split(_conjuncts(where.this), scope, "the WHERE clause")
        keys += more_keys
        null_safe += more_null_safe
        residual += more_residual
    _require_keys(keys, "the temporal join" if temporal else "the join")

    return JoinQuery(
        join_type=JoinType(join_type),
        temporal=TemporalKind(temporal) if temporal else None,
        left_table=left.table,
        left_alias=left.qualifier,
        right_table=right.table,
        right_alias=right.qualifier,
        equi_keys=tuple(keys),
        null_safe_keys=tuple(null_safe),
        condition_sql=_condition_sql(residual),
        left_time_column=time_column,
        projection=_projection(select, res, scope, semi=False),
    )


def _temporal(
    version: exp.Version, join_type: str, res: _Resolver, scope: list[list[str]]
) -> tuple[str, str | None]:
    left = res.sides["L"]
    usage = f"FOR SYSTEM_TIME AS OF {left.qualifier}.<left time column> or FOR SYSTEM_TIME AS OF PROCTIME()"
    if str(version.this).upper() != "TIMESTAMP" or str(version.args.get("kind")).upper() != "AS OF":
        _fail(f"unsupported time travel clause '{_sql(version)}'; temporal joins use {usage}")
    if join_type not in ("INNER", "LEFT"):
        _fail(
            f"{join_type} temporal joins are not supported: temporal joins (FOR SYSTEM_TIME AS OF) "
            "can only be INNER or LEFT joins, as in Flink"
        )
    expr = _unparen(version.expression)
    if isinstance(expr, exp.Func) and expr.name.upper() == "PROCTIME" and not any(
        expr.args.get(k) for k in expr.args if k != "this"
    ):
        return "processing_time", None
    if isinstance(expr, exp.Column) and not isinstance(expr.this, exp.Star):
        qualifier = ".".join(p.name for p in expr.parts[:-1])
        on_left = not qualifier or res.side_for_qualifier(qualifier, scope).code == "L"
        if on_left and expr.name.casefold() in _PROCTIME_NAMES and not _lookup(expr.name, left.columns):
            return "processing_time", None
        side, column = res.resolve(expr, scope)
        if side != "L":
            _fail(
                f"the time column in FOR SYSTEM_TIME AS OF must be a column of the left table "
                f"{left.label()}, got '{_sql(expr)}' from the right table; use {usage}"
            )
        return "event_time", column
    _fail(f"unsupported time expression '{_sql(expr)}' in FOR SYSTEM_TIME AS OF; use {usage}")


def _is_subquery_predicate(node: exp.Expression) -> bool:
    node = _unparen(node)
    if isinstance(node, exp.Not):
        node = _unparen(node.this)
    return isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query") is not None)


def _semi_anti_join(select: exp.Select, res: _Resolver) -> JoinQuery:
    left, right = res.sides["L"], res.sides["R"]
    where = select.args.get("where")
    form = (
        "a one-table query must be a semi/anti join: WHERE a.k [NOT] IN (SELECT b.k FROM "
        f"{right.table} b ...) or WHERE [NOT] EXISTS (SELECT 1 FROM {right.table} b WHERE b.k = a.k ...)"
    )
    if where is None:
        _fail(f"the query reads only one table and has no JOIN; {form}. {_SUPPORTED}")
    outer = _conjuncts(where.this)
    predicates = [c for c in outer if _is_subquery_predicate(c)]
    if not predicates:
        _fail(f"the query reads only one table and has no JOIN; {form}. {_SUPPORTED}")
    if len(predicates) > 1:
        _fail(f"only one [NOT] IN / [NOT] EXISTS subquery is supported in WHERE, found {len(predicates)}")
    predicate = _unparen(predicates[0])
    anti = isinstance(predicate, exp.Not)
    if anti:
        predicate = _unparen(predicate.this)
    join_type = "ANTI" if anti else "SEMI"
    others = [c for c in outer if c is not predicates[0]]
    if others and anti:
        _fail(
            "other WHERE conditions next to NOT IN / NOT EXISTS are not supported (they would filter "
            "the left input, not the anti-join match); move conditions that are part of the match into "
            "the subquery's WHERE"
        )

    if isinstance(predicate, exp.Exists):
        inner = predicate.this
    else:
        inner = predicate.args["query"]
    while isinstance(inner, exp.Subquery):
        inner = inner.this
    if not isinstance(inner, exp.Select):
        _fail(f"the IN / EXISTS subquery must be a plain SELECT from '{right.table}'. {_SUPPORTED}")
    _check_clauses(inner, "the subquery", {"expressions", "from", "from_", "where"})
    if inner.args.get("joins"):
        _fail(
            f"the subquery joins more tables; exactly two tables are supported (the left table "
            f"'{left.table}' and the right table '{right.table}' in the subquery)"
        )
    _bind_table(_from_table(inner, "the subquery"), right, left, "the subquery's FROM")
    _check_distinct_qualifiers(left, right)
    outer_scope = [["L"]]
    inner_scope = [["R"], ["L"]]  # SQL: the subquery's own table first, then the outer one

    keys: list[tuple[str, str]] = []
    null_safe: list[bool] = []
    if isinstance(predicate, exp.In):
        lhs = _unparen(predicate.this)
        lhs_items = list(lhs.expressions) if isinstance(lhs, exp.Tuple) else [lhs]
        rhs_items = [i.this if isinstance(i, exp.Alias) else i for i in inner.expressions]
        if len(lhs_items) != len(rhs_items):
            _fail(
                f"IN compares {len(lhs_items)} column(s) with a subquery selecting {len(rhs_items)}; "
                "use the same number, e.g. (a.k1, a.k2) IN (SELECT b.k1, b.k2 FROM ...)"
            )
        for l_item, r_item in zip(lhs_items, rhs_items):
            l_item, r_item = _unparen(l_item), _unparen(r_item)
            if not isinstance(l_item, exp.Column) or isinstance(l_item.this, exp.Star):
                _fail(f"the left side of IN must be left-table columns, got '{_sql(l_item)}'")
            if not isinstance(r_item, exp.Column) or isinstance(r_item.this, exp.Star):
                _fail(f"the IN subquery must select right-table columns, got '{_sql(r_item)}'")
            l_side, l_col = res.resolve(l_item, outer_scope)
            r_side, r_col = res.resolve(r_item, inner_scope)
            if r_side != "R":
                _fail(f"the IN subquery must select columns of the right table '{right.table}', got '{_sql(r_item)}'")
            keys.append((l_col, r_col))
            null_safe.append(False)
    else:
        for item in inner.expressions:
            node = item.this if isinstance(item, exp.Alias) else item
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                res.resolve(node, inner_scope)
            elif not isinstance(node, (exp.Literal, exp.Star, exp.Null, exp.Boolean, exp.Column)):
                _fail(
                    f"the EXISTS subquery may select only a constant, * or columns (e.g. SELECT 1), "
                    f"got '{_sql(item)}'"
                )

    residual: list[exp.Expression] = []
    inner_where = inner.args.get("where")
    if inner_where is not None:
        more_keys, more_null_safe, residual = res.split(
            _conjuncts(inner_where.this), inner_scope, "the subquery's WHERE clause"
        )
        keys += more_keys
        null_safe += more_null_safe
    for conjunct in others:  # SEMI only: filters on the left input = extra match conditions
        residual.append(res.render(conjunct, outer_scope, "the WHERE clause"))
    _require_keys(keys, f"the {join_type.lower()} join")

    return JoinQuery(
        join_type=JoinType(join_type),
        temporal=None,
        left_table=left.table,
        left_alias=left.qualifier,
        right_table=right.table,
        right_alias=right.qualifier,
        equi_keys=tuple(keys),
        null_safe_keys=tuple(null_safe),
        condition_sql=_condition_sql(residual),
        left_time_column=None,
        # the right table is not in scope of the outer SELECT; it is searched only to explain errors
        projection=_projection(select, res, [["L"], ["R"]], semi=True),
    )


_JOIN_LABEL = {
    "INNER": "INNER JOIN",
    "LEFT": "LEFT OUTER JOIN",
    "RIGHT": "RIGHT OUTER JOIN",
    "FULL": "FULL OUTER JOIN",
    "SEMI": "LEFT SEMI JOIN",
    "ANTI": "LEFT ANTI JOIN",
}


def describe(q: JoinQuery) -> str:
    """One-line human-readable plan, e.g. for ``changejoin check-config``."""
    label = _JOIN_LABEL.get(q.join_type, q.join_type + " JOIN")
    if q.temporal is TemporalKind.EVENT_TIME:
        label = f"event-time temporal {label} (FOR SYSTEM_TIME AS OF l.{q.left_time_column})"
    elif q.temporal is TemporalKind.PROCESSING_TIME:
        label = f"processing-time temporal {label} (FOR SYSTEM_TIME AS OF PROCTIME())"
    keys = " AND ".join(
        f"l.{lk} {'IS NOT DISTINCT FROM' if ns else '='} r.{rk}"
        for (lk, rk), ns in zip(q.equi_keys, q.null_safe_keys)
    )
    parts = [f"{label}: l = {q.left_table}, r = {q.right_table}", f"keys {keys}"]
    if q.condition_sql:
        parts.append(f"condition {q.condition_sql}")
    cols = []
    for c in q.projection:
        src = f"{c.side.lower()}.{c.column}"
        cols.append(src if c.name == c.column else f"{src} AS {c.name}")
    parts.append(f"output ({len(cols)}) {', '.join(cols)}")
    return "; ".join(parts)

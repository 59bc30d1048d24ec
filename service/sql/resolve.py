"""Scopes: the query's two tables bound to the configured inputs, and every column reference
resolved to a side and its schema spelling (the *Names* and *Output names* decisions in
``joins.py``'s docstring).

:class:`_Side` is one input (its configured table, columns, and the name or alias the query
refers to it by); :class:`_Resolver` resolves column references in a scope, checks residual
conditions against the condition compiler's subset and splits conjuncts into equi keys and the
residual condition; :func:`_bind_table` binds a FROM / JOIN table; :func:`_projection` reads the
select list."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from .dialect import (
    _CONDITION_NODES,
    _OUT_DIALECT,
    _SIDE_WORD,
    _SUPPORTED,
    _SUPPORTED_CONDITION,
    _SUPPORTED_SELECT,
    _arg,
    _fail,
    _lookup,
    _quote_name,
    _sql,
    _unparen,
)
from .model import OutputColumn


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
        self.time_columns: tuple[str | None, str | None] = (None, None)  # configured event-time columns

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

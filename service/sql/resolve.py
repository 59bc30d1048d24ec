"""Scopes: the query's two tables bound to the configured inputs, and every column reference
resolved to a side and its schema spelling (the *Names* and *Output names* decisions in
``joins.py``'s docstring).

:class:`_Side` is one input (its configured table, columns, and the name or alias the query
refers to it by); :class:`_Resolver` resolves column references in a scope, checks residual
conditions against the condition compiler's subset and splits conjuncts into equi keys and the
residual condition; :func:`_bind_table` binds a FROM / JOIN table; :func:`_projection` reads the
select list."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from expressions.parse import AGGREGATES
from expressions.types import SqlType, parse_type, timestamp
from operators.spec import WINDOW_COLUMNS

from .dialect import (
    _OUT_DIALECT,
    _SIDE_WORD,
    _SUPPORTED,
    _SUPPORTED_SELECT,
    _arg,
    _fail,
    _lookup,
    _quote_name,
    _sql,
    _translate,
    _unparen,
)
from .model import InputCalc, OutputColumn


@dataclass
class _Side:
    """One input as the query sees it.

    ``columns`` are the names the query reads (the table's, or an input subquery's output names,
    then the window columns of a window table function), ``types`` their types (None without
    types: a query parsed for its form only), ``physical`` the joined column each is: an input
    column, or a computed one (``computed``: ``(name, type, typed node over the input row, SQL)``
    of an input subquery's expressions and of computed equi-keys), evaluated before the join."""

    code: str  # "L" | "R"
    table: str  # configured table name
    columns: list[str]
    written: str = ""  # table name as written in the query
    alias: str | None = None
    types: list | None = None
    inputs: list[str] = field(default_factory=list)  # the table's columns
    input_types: list | None = None
    physical: list[str] = field(default_factory=list)
    computed: list = field(default_factory=list)
    filters: list = field(default_factory=list)  # (typed node over the input row, SQL) pushed below the join
    kept: list[str] | None = None  # input columns an input subquery keeps (None: all)
    window: bool = False  # a window table function's input: the window columns follow

    def __post_init__(self):
        self.inputs = list(self.columns)
        self.physical = list(self.columns)
        if self.types is not None:
            self.input_types = list(self.types)

    @property
    def typed(self) -> bool:
        return self.types is not None

    @property
    def qualifier(self) -> str:
        return self.alias if self.alias is not None else self.written

    def label(self) -> str:
        if self.alias is not None:
            return f"{self.table} (alias {self.alias})"
        return self.table

    def column(self, name: str) -> str:
        """Resolve ``name`` among this table's columns or raise; returns the joined column."""
        return self.physical[self.columns.index(self.visible(name))]

    def visible(self, name: str) -> str:
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

    # -- the joined row ---------------------------------------------------------------------------
    @property
    def joined(self) -> list[str]:
        """The joined row's columns: the input's, the computed ones, then the window columns."""
        return self.inputs + [c[0] for c in self.computed] + (list(WINDOW_COLUMNS) if self.window else [])

    def joined_index(self, physical: str) -> int:
        return self.joined.index(physical)

    def type_of(self, physical: str):
        """The type of a joined column (a NULL type when the query is parsed without types)."""
        if not self.typed:
            return UNTYPED
        if physical in WINDOW_COLUMNS and self.window:
            return WINDOW_TYPE
        for name, sql_type, _, _ in self.computed:
            if name == physical:
                return parse_type(sql_type)
        return self.input_types[self.inputs.index(physical)]

    def input_node(self, physical: str) -> list:
        """A joined column as a typed node over the input row ("I"): an input column, or the
        expression a computed one is."""
        for name, _, node, _ in self.computed:
            if name == physical:
                return node
        if physical in WINDOW_COLUMNS and self.window:
            _fail(f"{physical} is known only once the window table function assigned the row to its windows; "
                  "it cannot be computed before the join")
        index = self.inputs.index(physical)
        return ["col", str(self.type_of(physical)), "I", index]

    def add_computed(self, node: list, sql: str, prefix: str) -> str:
        """A column computed before the join (a computed key ``$k<n>``, a subquery's ``$c<n>``)."""
        for name, _, known, _ in self.computed:
            if known == node and name.startswith(prefix):
                return name
        name = f"{prefix}{sum(1 for c in self.computed if c[0].startswith(prefix))}"
        self.computed.append((name, node[1], node, sql))
        return name

    def add_window_columns(self) -> None:
        clash = [c for c in self.columns if c.casefold() in WINDOW_COLUMNS]
        if clash:
            _fail(
                f"the {_SIDE_WORD[self.code]} table {self.label()} has a column named {clash[0]}, which a window "
                f"table function adds itself ({', '.join(WINDOW_COLUMNS)}); rename that column"
            )
        self.window = True
        self.columns = self.columns + list(WINDOW_COLUMNS)
        self.physical = self.physical + list(WINDOW_COLUMNS)
        if self.types is not None:
            self.types = self.types + [WINDOW_TYPE] * len(WINDOW_COLUMNS)

    def calc(self) -> InputCalc | None:
        """What this input goes through before the join, or None for nothing."""
        if not self.computed and not self.filters and self.kept is None:
            return None
        condition = _conjunction([node for node, _ in self.filters]) if self.filters else None
        sql = " AND ".join(f"({sql})" if len(self.filters) > 1 else sql for _, sql in self.filters) or None
        return InputCalc(computed=tuple(self.computed), filter=condition, filter_sql=sql,
                         kept=tuple(self.kept) if self.kept is not None else None)


#: The type of every column of a query parsed without types (tests of its form): NULL takes part
#: in every operation, so only the form is checked.
UNTYPED = SqlType("NULL")
WINDOW_TYPE = timestamp(3, nullable=False)


def _conjunction(nodes: list) -> list:
    """The AND of typed conditions."""
    if len(nodes) == 1:
        return nodes[0]
    from expressions.functions import CATALOG

    return ["call", str(CATALOG["AND"].infer(nodes)), "AND", *nodes]


def _substitute(node: list, replace) -> list:
    """A typed node with every column node passed through ``replace``."""
    if node[0] == "col":
        return replace(node)
    if node[0] == "call":
        return [*node[:3], *(_substitute(o, replace) for o in node[3:])]
    return node


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
        """Return (side, joined column name) for a column reference."""
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
                options = " or ".join(f"{s.qualifier}.{s.visible(name)}" for s in exact)
                _fail(f"column '{name}' is ambiguous (it exists in both tables); qualify it as {options}")
            if exact:
                return exact[0].code, exact[0].column(name)
        tables = "; ".join(
            f"{_SIDE_WORD[c]} table {self.sides[c].label()}: {', '.join(self.sides[c].columns) or '(none)'}"
            for level in scope
            for c in level
        )
        _fail(f"unknown column '{name}'; available columns are {tables}")

    # ---------------------------------------------------------------- expressions
    def expression(self, node: exp.Expression, scope: list[list[str]], padded: frozenset = frozenset()) -> list:
        """The typed node of ``node`` over the joined rows ("L", "R": their joined columns), the
        columns of the sides in ``padded`` nullable (an outer join's result)."""
        def resolve(column: exp.Column):
            code, physical = self.resolve(column, scope)
            side = self.sides[code]
            sql_type = side.type_of(physical)
            return code, side.joined_index(physical), sql_type.with_nullable(True) if code in padded else sql_type

        return _translate(node, resolve)

    def input_expression(self, node: exp.Expression, side: _Side, scope: list[list[str]]) -> list:
        """The typed node of ``node``, which reads only ``side``, over that input's row ("I")."""
        joined = self.expression(node, scope)
        return _substitute(joined, lambda col: side.input_node(side.joined[col[3]]))

    def sides_of(self, node: exp.Expression, scope: list[list[str]]) -> set[str]:
        """The sides whose columns ``node`` reads ("L", "R")."""
        return {self.resolve(c, scope)[0] for c in node.find_all(exp.Column) if not isinstance(c.this, exp.Star)}

    # ---------------------------------------------------------------- conditions

    def render(self, node: exp.Expression, scope: list[list[str]]) -> exp.Expression:
        """A conjunct with its columns rewritten to l.<col> / r.<col> (the condition's text)."""

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

    def check(self, node: exp.Expression, scope: list[list[str]], context: str) -> None:
        """Refuse a conjunct that holds a subquery, or that does not translate (an unknown function...)."""
        if node.find(exp.Subquery, exp.Exists, exp.Select) is not None or any(
                isinstance(n, exp.In) and _arg(n, "query", "unnest", "field") for n in node.find_all(exp.In)):
            _fail(
                f"subquery in {context} is not supported: subqueries are only allowed as the single "
                f"WHERE [NOT] IN / [NOT] EXISTS predicate of a semi/anti join, and as an input "
                f"(FROM (SELECT ...) AS a). {_SUPPORTED}"
            )
        self.expression(node, scope)

    def split(
        self, conditions: list[exp.Expression], scope: list[list[str]], context: str
    ) -> tuple[list[tuple[str, str]], list[bool], list[exp.Expression]]:
        """Split conjuncts into equi keys (left col, right col), null-safety, and the residual
        conjuncts. An equality of an expression of one input with an expression of the other
        (``LOWER(a.email) = LOWER(b.email)``) is an equi key too: each side's expression becomes
        a column computed before the join (``$k<n>``)."""
        keys: list[tuple[str, str]] = []
        null_safe: list[bool] = []
        residual: list[exp.Expression] = []
        for conjunct in conditions:
            self.check(conjunct, scope, context)
            if isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
                a, b = _unparen(conjunct.this), _unparen(conjunct.expression)
                pair = self._key_pair(a, b, scope)
                if pair is not None:
                    keys.append(pair)
                    null_safe.append(isinstance(conjunct, exp.NullSafeEQ))
                    continue
            residual.append(conjunct)
        return keys, null_safe, residual

    def _key_pair(self, a: exp.Expression, b: exp.Expression, scope) -> tuple[str, str] | None:
        """(left joined column, right joined column) when ``a = b`` compares one input with the
        other, computing the sides that are expressions; None otherwise."""
        sides_a, sides_b = self.sides_of(a, scope), self.sides_of(b, scope)
        if len(sides_a) != 1 or len(sides_b) != 1 or sides_a == sides_b:
            return None
        (code_a,), (code_b,) = sides_a, sides_b
        if code_a == "R":
            a, b, code_a, code_b = b, a, code_b, code_a
        columns = []
        for node, code in ((a, code_a), (b, code_b)):
            side = self.sides[code]
            if isinstance(node, exp.Column):
                columns.append(self.resolve(node, scope)[1])
                continue
            if not side.typed:
                return None  # parsed for its form only: the equality stays in the condition
            if any(self.resolve(c, scope)[1] in WINDOW_COLUMNS and side.window for c in node.find_all(exp.Column)):
                return None  # a window column exists only in the join: the condition checks it
            columns.append(side.add_computed(self.input_expression(node, side, scope), _sql(node), "$k"))
        return columns[0], columns[1]

    def condition(self, residual: list[exp.Expression], scope: list[list[str]]) -> list | None:
        """The typed AND of the residual conjuncts (over the joined rows), None for none."""
        if not residual:
            return None
        return _conjunction([self.expression(node, scope) for node in residual])


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
    select: exp.Select, res: _Resolver, scope: list[list[str]], semi: bool, padded: frozenset = frozenset()
) -> tuple[OutputColumn, ...]:
    """The select list: columns copied from an input, and expressions over the joined row (the
    columns of the ``padded`` sides nullable); an expression without AS is named EXPR$<position>,
    as Flink names it."""
    out: list[OutputColumn] = []
    origin: dict[str, str] = {}

    def add(name: str, column: OutputColumn, source: str, hint: str) -> None:
        folded = name.casefold()
        if folded in origin:
            _fail(
                f"duplicate output column name '{name}' (from {origin[folded]} and {source}); output names "
                f"must be unique (case-insensitively) - list the columns explicitly and rename one with AS, "
                f"e.g. {hint}"
            )
        origin[folded] = source
        out.append(column)

    def star(side: _Side, star_sql: str) -> None:
        for visible, column in zip(side.columns, side.physical):
            add(visible, OutputColumn(name=visible, side=side.code, column=column),
                f"{side.qualifier}.{visible} via {star_sql}", f"{side.qualifier}.{visible} AS {_SIDE_WORD[side.code]}_{visible}")

    sides = [res.sides[c] for level in scope for c in level if not (semi and c == "R")]
    semi_msg = "only left-table columns may be selected in a semi/anti join (the right table only filters)"
    for position, item in enumerate(select.expressions):
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
            name = alias or node.name
            add(name, OutputColumn(name=name, side=side, column=column), _sql(node),
                f"{res.sides[side].qualifier}.{node.name} AS {_SIDE_WORD[side]}_{node.name}")
            continue
        if isinstance(node, exp.Subquery) or node.find(exp.Select):
            _fail(f"subquery '{_sql(item)}' in the select list is not supported; {_SUPPORTED_SELECT}")
        if semi and "R" in res.sides_of(node, scope):
            _fail(f"{semi_msg}, got '{_sql(item)}'")
        for call in node.find_all(exp.Anonymous):
            if call.name.upper() in AGGREGATES:
                _fail(f"aggregate function '{_sql(call)}' in the select list is not supported (this service joins, it "
                      f"does not aggregate); {_SUPPORTED_SELECT}")
        if not all(res.sides[c].typed for c in "LR"):
            _fail(f"'{_sql(item)}' in the select list needs the inputs' column types")
        typed = res.expression(node, scope, padded)
        name = alias or f"EXPR${position}"
        add(name, OutputColumn(name=name, side=None, column=None, expression=typed, sql=_sql(node), type=typed[1]),
            _sql(node), f"{_sql(node)} AS {name}_1")
    return tuple(out)

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

    -- interval joins (INNER, LEFT, RIGHT, FULL): equi keys plus one lower and one upper bound
    ... JOIN R b ON a.k = b.k AND b.t BETWEEN a.t - INTERVAL '10' MINUTE AND a.t + INTERVAL '1' HOUR
    ... JOIN R b ON a.k = b.k AND b.t >= a.t - INTERVAL '10' MINUTE AND b.t < a.t + INTERVAL '1' HOUR
    ... JOIN R b ON a.k = b.k AND b.proctime BETWEEN a.proctime AND a.proctime + INTERVAL '5' SECOND

    -- window joins (INNER, LEFT, RIGHT, FULL; SEMI / ANTI in the forms above): both inputs
    -- through the same window table function, joined on the window and the equi keys
    SELECT ... FROM TABLE(TUMBLE(TABLE L, DESCRIPTOR(t), INTERVAL '5' MINUTE [, <offset>])) a
        [LEFT | RIGHT | FULL] JOIN TABLE(TUMBLE(TABLE R, DESCRIPTOR(t), INTERVAL '5' MINUTE)) b
        ON a.window_start = b.window_start AND a.window_end = b.window_end AND a.k = b.k [AND ...]
    -- HOP(TABLE x, DESCRIPTOR(t), <slide>, <size> [, <offset>]),
    -- CUMULATE(TABLE x, DESCRIPTOR(t), <step>, <max size> [, <offset>]);
    -- a side may be written (SELECT * FROM TABLE(...)) a, as Flink's documentation does

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
* **Interval bounds.**  A conjunct is a bound when it compares (``BETWEEN``, ``>=``, ``>``,
  ``<=``, ``<``, ``=``) a left and a right ``<column> [+|- INTERVAL ...]`` and holds an
  INTERVAL or a ``proctime`` pseudo-column, or compares exactly the configured time columns;
  once one bound is found, other comparisons of its two columns are bounds too.  Bounds become
  ``r.t + lower_ms <= l.t <= r.t + upper_ms``; a strict bound is the inclusive one 1 ms inside,
  as Flink does.  Processing time is the pseudo-column ``<alias>.proctime`` / ``proc_time`` of
  each input (Flink's ``proctime AS PROCTIME()`` computed column; a bare ``PROCTIME()`` does not
  say whose time it is).  Whether the event-time columns are the configured time attributes is
  checked by the plan, which knows the variables.
* **Window table functions.**  sqlglot's Spark grammar cannot read ``TABLE <name>`` as a
  function argument; the private dialect's parser adds exactly that (``TABLE(...)`` as a call is
  left alone).  Named arguments (``DATA => TABLE t``) do not parse and are rejected with the
  supported forms.  A windowed side's columns are its table's plus ``window_start``,
  ``window_end`` and ``window_time``; the window equalities are not join keys.
* **Temporal keys.**  The right table's primary key is not known here; a
  temporal join just needs at least one equi key, and every left/right equality
  becomes an equi key.  The runtime decides which of them form the versioned
  table's key.
"""

from __future__ import annotations

from sqlglot import exp

from operators import JoinType, TemporalKind
from operators.spec import WINDOW_COLUMNS

from .dialect import (
    _PROCTIME_NAMES,
    _REFUSED,
    _SUPPORTED,
    _check_clauses,
    _conjuncts,
    _fail,
    _from_table,
    _lookup,
    _parse_statement,
    _sql,
    _unparen,
)
from .inputs import _input_source
from .intervals import _interval, _take_bounds
from .model import JoinQuery
from .resolve import _bind_table, _check_distinct_qualifiers, _condition_sql, _conjunction, _projection, _Resolver, _Side
from .where import describe_where, place_where
from .windows import _window, _window_keys, _window_source

__all__ = ["describe", "parse_join_sql"]


def _require_keys(keys: list, what: str) -> None:
    if not keys:
        _fail(
            f"{what} has no equi-join condition: it needs at least one conjunct '<left column> = <right "
            "column>' (or IS NOT DISTINCT FROM), ANDed with any other condition. Flink has the same "
            "restriction: streaming regular, temporal and semi/anti joins need an equality between the "
            "two tables (for temporal joins, on the versioned table's primary key)"
        )


def parse_join_sql(
    sql: str,
    left_table: str,
    left_columns: list[str],
    right_table: str,
    right_columns: list[str],
    time_columns: tuple[str | None, str | None] = (None, None),
    left_types: list | None = None,
    right_types: list | None = None,
) -> JoinQuery:
    """Parse ``sql`` into a :class:`JoinQuery` or raise :class:`QueryError`.

    ``left_table`` must appear in FROM, ``right_table`` in the JOIN (or in the
    ``[NOT] IN`` / ``[NOT] EXISTS`` subquery of a semi/anti join), either directly or as the
    table argument of a window table function.  ``time_columns`` are the inputs' configured
    event-time columns (``LEFT_EVENT_TIME_COLUMN``, ``RIGHT_EVENT_TIME_COLUMN``): a comparison
    of exactly these two columns in ON is an interval join's bound even without an INTERVAL.
    See the module docstring for the supported subset and the decisions on ambiguous points;
    in short, ``NOT IN`` is planned like ``NOT EXISTS`` (identical unless the keys contain NULLs).
    ``left_types`` / ``right_types`` are the columns' types (``expressions.SqlType``); without
    them only the query's form is checked (every column takes part in every operation), and
    what needs the types (expressions in the select list, input subqueries, computed keys) is
    refused.
    """
    left = _Side("L", left_table, list(left_columns), types=list(left_types) if left_types is not None else None)
    right = _Side("R", right_table, list(right_columns), types=list(right_types) if right_types is not None else None)
    res = _Resolver(left, right)
    res.time_columns = time_columns
    select = _parse_statement(sql)
    _check_clauses(select, "the query", {"expressions", "from", "from_", "joins", "where"})
    source = _from_table(select, "the query")
    left_window = _window_source(source, left, right, "FROM")
    if left_window is None and not _input_source(source, res, left, right, "FROM"):
        _bind_table(source, left, right, "FROM")
    joins = select.args.get("joins") or []
    if len(joins) > 1:
        _fail(
            f"the query joins {len(joins) + 1} tables; exactly two are supported (the left table "
            f"'{left_table}' and the right table '{right_table}'). {_REFUSED}"
        )
    if joins:
        return _regular_join(select, joins[0], res, left_window)
    return _semi_anti_join(select, res, left_window)


def _regular_join(select: exp.Select, join: exp.Join, res: _Resolver, left_window: dict | None) -> JoinQuery:
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

    version = None
    right_window = _window_source(join.this, right, left, "JOIN")
    if right_window is None and not _input_source(join.this, res, right, left, "the JOIN"):
        version = _bind_table(join.this, right, left, "JOIN", allow_version=True)
    if (left_window is None) != (right_window is None):
        _fail(
            "a window join needs a window table function on both inputs, e.g. FROM TABLE(TUMBLE(TABLE "
            f"{left.table}, DESCRIPTOR(<time>), INTERVAL '5' MINUTE)) a JOIN TABLE(TUMBLE(TABLE {right.table}, "
            f"DESCRIPTOR(<time>), INTERVAL '5' MINUTE)) b ON ... {_SUPPORTED}"
        )
    _check_distinct_qualifiers(left, right)
    scope = [["L", "R"]]

    temporal, time_column = None, None
    if version is not None:
        temporal, time_column = _temporal(version, join_type, res, scope)

    on = join.args.get("on")
    if on is None or isinstance(on, exp.Boolean):  # sqlglot's Spark parser reads a missing ON as ON TRUE
        _fail(f"the JOIN has no ON condition; add ON a.k = b.k. {_SUPPORTED}")
    where = select.args.get("where")
    on_conjuncts = _conjuncts(on)
    where_conjuncts = _conjuncts(where.this) if where is not None else []
    # An interval join's time bounds are not part of the extra condition: take them out first
    # (from WHERE too on an inner join, where WHERE is the condition's).
    bounds: list = []
    if version is None and left_window is None:
        groups = [on_conjuncts, where_conjuncts] if join_type == "INNER" else [on_conjuncts]
        taken, bounds = _take_bounds(groups, res, scope)
        on_conjuncts = taken[0]
        if join_type == "INNER":
            where_conjuncts = taken[1]
    after: list = []
    if where_conjuncts:
        placement = place_where(where_conjuncts, res, scope, join_type, temporal=version is not None,
                                windowed=left_window is not None)
        join_type = placement.join_type
        if temporal and join_type not in ("INNER", "LEFT"):
            join_type = "INNER"
        on_conjuncts = on_conjuncts + placement.on
        _push(res, left, placement.left, scope)
        _push(res, right, placement.right, scope)
        after = placement.after
    keys, null_safe, residual = res.split(on_conjuncts, scope, "the ON condition")
    window = None
    if left_window is not None:
        keys, null_safe = _window_keys(keys, null_safe, "the window join")
        window = _window(left_window, right_window)
    interval = _interval(bounds) if bounds else None
    what = ("the temporal join" if temporal else "the window join" if window
            else "the interval join" if interval else "the join")
    _require_keys(keys, what)
    if temporal and right.computed:
        _fail(f"the temporal join's equalities must compare columns of the versioned table {right.label()} (its "
              f"primary key), not expressions of them ({', '.join(c[3] for c in right.computed)}), as in Flink")
    typed = left.typed and right.typed
    padded = frozenset({"LEFT": "R", "RIGHT": "L", "FULL": "LR"}.get(join_type, ""))
    for conjunct in after:
        res.check(conjunct, scope, "the WHERE clause")

    return JoinQuery(
        join_type=JoinType(join_type),
        temporal=TemporalKind(temporal) if temporal else None,
        left_table=left.table,
        left_alias=left.qualifier,
        right_table=right.table,
        right_alias=right.qualifier,
        equi_keys=tuple(keys),
        null_safe_keys=tuple(null_safe),
        condition_sql=_condition_sql([res.render(c, scope) for c in residual]),
        left_time_column=time_column,
        projection=_projection(select, res, scope, semi=False, padded=padded),
        interval=interval,
        window=window,
        condition=res.condition(residual, scope) if typed else None,
        where=_conjunction([res.expression(c, scope, padded) for c in after]) if after and typed else None,
        where_sql=describe_where(after) if after else None,
        inputs=(left.calc(), right.calc()),
    )


def _in_key(res: _Resolver, side: _Side, item: exp.Expression, scope) -> str:
    """The joined column an ``IN`` compares: a column, or an expression computed before the join."""
    if isinstance(item, exp.Column):
        code, column = res.resolve(item, scope)
        if code != side.code:
            _fail(f"the {'left side of IN' if side.code == 'L' else 'IN subquery'} must be of the "
                  f"{'left' if side.code == 'L' else 'right'} table, got '{_sql(item)}'")
        return column
    if not side.typed:
        _fail(f"'{_sql(item)}' in IN needs the inputs' column types")
    if res.sides_of(item, scope) != {side.code}:
        _fail(f"'{_sql(item)}' in IN must read the {'left' if side.code == 'L' else 'right'} table only")
    return side.add_computed(res.input_expression(item, side, scope), _sql(item), "$k")


def _push(res: _Resolver, side: _Side, conjuncts: list, scope) -> None:
    """WHERE conjuncts that filter ``side`` before the join."""
    for conjunct in conjuncts:
        res.check(conjunct, scope, "the WHERE clause")
        if side.typed:
            side.filters.append((res.input_expression(conjunct, side, scope), _sql(conjunct)))
        else:
            side.filters.append((["lit", "BOOLEAN", True], _sql(conjunct)))


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


def _semi_anti_join(select: exp.Select, res: _Resolver, left_window: dict | None) -> JoinQuery:
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
    inner_source = _from_table(inner, "the subquery")
    right_window = _window_source(inner_source, right, left, "the subquery's FROM")
    if right_window is None and not _input_source(inner_source, res, right, left, "the subquery's FROM"):
        _bind_table(inner_source, right, left, "the subquery's FROM")
    if (left_window is None) != (right_window is None):
        _fail(
            "a window semi/anti join needs a window table function on both inputs, e.g. FROM TABLE(TUMBLE(TABLE "
            f"{left.table}, DESCRIPTOR(<time>), INTERVAL '5' MINUTE)) a WHERE a.k IN (SELECT b.k FROM "
            f"TABLE(TUMBLE(TABLE {right.table}, DESCRIPTOR(<time>), INTERVAL '5' MINUTE)) b WHERE "
            f"a.window_start = b.window_start AND a.window_end = b.window_end). {_SUPPORTED}"
        )
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
            if isinstance(l_item, exp.Star) or isinstance(l_item, exp.Column) and isinstance(l_item.this, exp.Star):
                _fail(f"the left side of IN must be left-table columns or expressions, got '{_sql(l_item)}'")
            if isinstance(r_item, exp.Star) or isinstance(r_item, exp.Column) and isinstance(r_item.this, exp.Star):
                _fail(f"the IN subquery must select right-table columns or expressions, got '{_sql(r_item)}'")
            if res.sides_of(r_item, inner_scope) - {"R"}:
                _fail(f"the IN subquery must select columns of the right table '{right.table}', got '{_sql(r_item)}'")
            keys.append((_in_key(res, left, l_item, outer_scope), _in_key(res, right, r_item, inner_scope)))
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

    residual: list[tuple[exp.Expression, list]] = []
    inner_where = inner.args.get("where")
    if inner_where is not None:
        more_keys, more_null_safe, inner_residual = res.split(
            _conjuncts(inner_where.this), inner_scope, "the subquery's WHERE clause"
        )
        keys += more_keys
        null_safe += more_null_safe
        residual += [(c, inner_scope) for c in inner_residual]
    # The outer WHERE's other conjuncts: for a semi join part of the match (as they always were
    # in changejoin: the same rows); for an anti join a filter of the left input before the join
    # (not part of the match, which NOT would turn around).
    for conjunct in others:
        res.check(conjunct, outer_scope, "the WHERE clause")
        windowed = left_window is not None and any(
            res.resolve(c, outer_scope)[1] in WINDOW_COLUMNS for c in conjunct.find_all(exp.Column)
            if not isinstance(c.this, exp.Star))
        if anti and not windowed:
            _push(res, left, [conjunct], outer_scope)
        elif anti:
            _fail(
                f"'{_sql(conjunct)}' next to NOT IN / NOT EXISTS reads the window columns, which exist only in the "
                "join: move it into the subquery's WHERE if it is part of the match"
            )
        else:
            residual.append((conjunct, outer_scope))
    window = None
    if left_window is not None:
        keys, null_safe = _window_keys(keys, null_safe, f"the window {join_type.lower()} join")
        window = _window(left_window, right_window)
    _require_keys(keys, f"the {'window ' if window else ''}{join_type.lower()} join")

    return JoinQuery(
        join_type=JoinType(join_type),
        temporal=None,
        left_table=left.table,
        left_alias=left.qualifier,
        right_table=right.table,
        right_alias=right.qualifier,
        equi_keys=tuple(keys),
        null_safe_keys=tuple(null_safe),
        condition_sql=_condition_sql([res.render(c, scope) for c, scope in residual]),
        left_time_column=None,
        # the right table is not in scope of the outer SELECT; it is searched only to explain errors
        projection=_projection(select, res, [["L"], ["R"]], semi=True),
        window=window,
        condition=_conjunction([res.expression(c, scope) for c, scope in residual])
        if residual and left.typed and right.typed else None,
        inputs=(left.calc(), right.calc()),
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
    elif q.interval is not None:
        domain = "processing-time" if q.interval.processing_time else "event-time"
        label = f"{domain} interval {label} ({q.interval.sql})"
    elif q.window is not None:
        w = q.window
        label = (f"window {label} ({w.sql(q.left_table, w.left_time_column)} with "
                 f"{w.sql(q.right_table, w.right_time_column)})")
    computed = [{c[0]: c[3] for c in (calc.computed if calc else ())} for calc in q.inputs]
    keys = " AND ".join(
        f"{computed[0].get(lk, f'l.{lk}')} {'IS NOT DISTINCT FROM' if ns else '='} {computed[1].get(rk, f'r.{rk}')}"
        for (lk, rk), ns in zip(q.equi_keys, q.null_safe_keys)
    )
    parts = [f"{label}: l = {q.left_table}, r = {q.right_table}", f"keys {keys}"]
    if q.condition_sql:
        parts.append(f"condition {q.condition_sql}")
    if q.where_sql:
        parts.append(f"then WHERE {q.where_sql}")
    cols = []
    for c in q.projection:
        if c.side is None:
            cols.append(f"{c.sql} AS {c.name}")
            continue
        src = f"{c.side.lower()}.{c.column}"
        cols.append(src if c.name == c.column else f"{src} AS {c.name}")
    parts.append(f"output ({len(cols)}) {', '.join(cols)}")
    return "; ".join(parts)

"""Input subqueries: ``FROM (SELECT ..., expr AS x FROM orders WHERE ...) AS o`` on either side,
a filter and a projection of one input before the join (the *Input subqueries* decision in
``joins.py``'s docstring).

:func:`_input_source` binds the subquery's table to its side and makes the subquery's select
list the side's columns: a column it selects is that input column (renamed with AS), an
expression a column computed before the join, its WHERE a filter before the join; the input
columns it does not select are not kept (the joined row holds NULL in them: less state)."""

from __future__ import annotations

from sqlglot import exp

from .dialect import _SIDE_WORD, _SUPPORTED, _arg, _check_clauses, _conjuncts, _fail, _sql, _unparen
from .resolve import _bind_table, _Resolver, _Side

_USAGE = "an input subquery is (SELECT <columns or expressions> FROM <table> [AS x] [WHERE ...]) AS <alias>"


def _input_source(node: exp.Expression, res: _Resolver, side: _Side, other: _Side, where: str) -> bool:
    """Bind an input subquery to ``side`` (its columns, computed columns, filter); False when
    ``node`` is not one."""
    if not isinstance(node, exp.Subquery):
        return False
    inner = node.this
    if not isinstance(inner, exp.Select):
        _fail(f"the subquery in {where} must be one SELECT; {_USAGE}. {_SUPPORTED}")
    _check_clauses(inner, f"the subquery in {where}", {"expressions", "from", "from_", "where", "joins"})
    if inner.args.get("joins"):
        _fail(f"the subquery in {where} joins tables; {_USAGE} (changejoin joins exactly two tables)")
    source = _arg(inner, "from_", "from")
    if source is None:
        _fail(f"the subquery in {where} has no FROM; {_USAGE}")
    table = source.this
    if isinstance(table, exp.Subquery):
        _fail(f"the subquery in {where} reads another subquery; {_USAGE}")
    _bind_table(table, side, other, f"the subquery in {where}")
    if not side.typed:
        _fail(f"the subquery in {where} needs the inputs' column types")
    scope = [[side.code]]
    filters = []
    inner_where = inner.args.get("where")
    if inner_where is not None:
        for conjunct in _conjuncts(inner_where.this):
            res.check(conjunct, scope, f"the WHERE of the subquery in {where}")
            filters.append((res.input_expression(conjunct, side, scope), _sql(conjunct)))
    columns, physical, types, kept = [], [], [], []
    origin: dict[str, str] = {}

    def add(name: str, column: str, sql_type, source: str) -> None:
        if name.casefold() in origin:
            _fail(f"the subquery in {where} selects two columns named '{name}' ({origin[name.casefold()]} and "
                  f"{source}); rename one with AS")
        origin[name.casefold()] = source
        columns.append(name)
        physical.append(column)
        types.append(sql_type)

    for position, item in enumerate(inner.expressions):
        expression, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        expression = _unparen(expression)
        if isinstance(expression, exp.Star) or isinstance(expression, exp.Column) and isinstance(expression.this,
                                                                                                 exp.Star):
            if alias is not None:
                _fail(f"'{_sql(item)}' in the subquery in {where} cannot be renamed")
            for name in side.inputs:
                add(name, name, side.type_of(name), f"{name} via *")
                kept.append(name)
            continue
        if isinstance(expression, exp.Column):
            _, column = res.resolve(expression, scope)
            add(alias or expression.name, column, side.type_of(column), _sql(expression))
            kept.append(column)
            continue
        node_ = res.input_expression(expression, side, scope)
        name = alias or f"EXPR${position}"
        computed = side.add_computed(node_, _sql(expression), "$c")
        add(name, computed, side.type_of(computed), _sql(expression))
    side.columns, side.physical, side.types = columns, physical, types
    side.filters += filters
    kept_set = set(kept)
    side.kept = [c for c in side.inputs if c in kept_set]
    # The subquery's alias names the side in the outer query; its inner alias named it inside.
    alias = node.args.get("alias")
    if alias is None or not alias.name:
        _fail(f"the subquery in {where} needs an alias: (SELECT ...) AS <alias>")
    if alias.args.get("columns"):
        _fail(f"column aliases in '{_sql(alias)}' are not supported; rename the columns with AS inside the subquery")
    side.alias = alias.name
    side.written = side.table
    return True


def _side_word(side: _Side) -> str:
    return _SIDE_WORD[side.code]

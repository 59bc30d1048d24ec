"""WHERE on a join: a filter on the join's result, placed where it means the same (the *WHERE*
decision in ``joins.py``'s docstring), as Flink's planner places it.

1. A conjunct that no row padded with NULLs on one side can pass (``r.price > 10`` after a LEFT
   join: NULL > 10 is not TRUE) removes every padded row of that side: the outer join is the
   inner one (or the one-sided one, for FULL), as Flink's planner turns it.
2. On an inner join (written so, or turned into one by 1.), WHERE joins the join condition
   (``ON``), as it always has in changejoin (a checkpoint's join condition stays what it was).
3. On an outer join, a conjunct that reads only an input the join does not pad filters that
   input before the join (fewer rows kept as state): the same rows result.
4. What remains is applied to the join's output changelog, each change kept when it is TRUE; a
   retraction is filtered as the row it retracts was, so the output stays a valid changelog.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from operators.spec import WINDOW_COLUMNS

from .dialect import _sql
from .resolve import _Resolver

#: Functions whose result is NULL when an operand is NULL, beyond the catalog's strict ones.
_NOT_STRICT = frozenset({"IS NULL", "IS TRUE", "IS FALSE", "IS NOT DISTINCT FROM", "COALESCE", "IFNULL", "CASE",
                         "IF", "NULLIF", "CONCAT_WS", "TRY_CAST", "AND", "OR", "NOT", "IN", "BETWEEN"})


@dataclass
class Placement:
    join_type: str
    on: list  # conjuncts that join the condition (inner joins)
    left: list  # conjuncts that filter the left input
    right: list  # conjuncts that filter the right input
    after: list  # conjuncts on the join's output


def _strong(node: list, code: str) -> bool:
    """The value is NULL whenever every column of side ``code`` is NULL."""
    if node[0] == "col":
        return node[2] == code
    if node[0] != "call":
        return False
    name = node[2]
    if name in _NOT_STRICT:
        if name in ("IN", "BETWEEN"):
            return _strong(node[3], code)
        return False
    from expressions.functions import CATALOG

    return CATALOG[name].strict and any(_strong(o, code) for o in node[3:])


def rejects_padding(node: list, code: str) -> bool:
    """A condition that is not TRUE for a row whose side ``code`` is all NULL (a padded row)."""
    if node[0] != "call":
        return False
    name = node[2]
    if name == "AND":
        return any(rejects_padding(o, code) for o in node[3:])
    if name == "OR":
        return all(rejects_padding(o, code) for o in node[3:])
    if name == "NOT":
        inner = node[3]
        if inner[0] == "call" and inner[2] == "IS NULL":
            return _strong(inner[3], code)
        return _strong(inner, code)
    if name == "IS TRUE":
        return rejects_padding(node[3], code)
    return _strong(node, code)


def _padded(join_type: str) -> set[str]:
    """The sides a join pads with NULLs."""
    return {"LEFT": {"R"}, "RIGHT": {"L"}, "FULL": {"L", "R"}}.get(join_type, set())


def _join_padding(join_type: str, padded: set[str]) -> str:
    """The join that pads exactly ``padded`` (a semi/anti join pads nothing and stays itself)."""
    if join_type in ("SEMI", "ANTI"):
        return join_type
    return {frozenset(): "INNER", frozenset("R"): "LEFT", frozenset("L"): "RIGHT"}.get(frozenset(padded), "FULL")


def place_where(conjuncts: list[exp.Expression], res: _Resolver, scope: list[list[str]], join_type: str,
                temporal: bool, windowed: bool) -> Placement:
    """Where each WHERE conjunct goes (the module docstring). ``temporal``: the right input is a
    versioned or lookup table, which no filter may precede (it would change which version a row
    meets). ``windowed``: the window columns exist only in the join."""
    typed = [res.expression(c, scope) for c in conjuncts]
    padded = {code for code in _padded(join_type) if not any(rejects_padding(t, code) for t in typed)}
    join_type = _join_padding(join_type, padded)
    placement = Placement(join_type, [], [], [], [])
    for conjunct in conjuncts:
        if join_type == "INNER":
            placement.on.append(conjunct)
            continue
        sides = res.sides_of(conjunct, scope)
        in_window = windowed and any(res.resolve(c, scope)[1] in WINDOW_COLUMNS for c in conjunct.find_all(exp.Column)
                                     if not isinstance(c.this, exp.Star))
        if sides == {"L"} and "L" not in padded and not in_window:
            placement.left.append(conjunct)
        elif sides == {"R"} and "R" not in padded and not temporal and not in_window:
            placement.right.append(conjunct)
        else:
            placement.after.append(conjunct)
    return placement


def describe_where(conjuncts: list[exp.Expression]) -> str:
    return " AND ".join(_sql(c) for c in conjuncts)

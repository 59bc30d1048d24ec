"""Interval bounds: the conjuncts of an interval join's ON (or WHERE) that bound one input's time
by the other's, ``r.t + lower_ms <= l.t <= r.t + upper_ms`` (the *Interval bounds* decision in
``joins.py``'s docstring).

:func:`_take_bounds` takes the bounds out of the conjuncts, before equi keys and the residual
condition are split; :func:`_interval` folds them into one :class:`IntervalBounds`."""

from __future__ import annotations

from sqlglot import exp

from .dialect import _PROCTIME_NAMES, _fail, _interval_ms, _lookup, _sql, _unparen
from .model import IntervalBounds
from .resolve import _Resolver


_COMPARISONS = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<", exp.EQ: "="}
_FLIPPED = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "=": "="}
_INTERVAL_USAGE = (
    "an interval join bounds the two time columns, e.g. b.t BETWEEN a.t - INTERVAL '10' MINUTE AND "
    "a.t + INTERVAL '1' HOUR, or b.t >= a.t - INTERVAL '10' MINUTE AND b.t < a.t + INTERVAL '1' HOUR "
    "(a.proctime and b.proctime for processing time)"
)


def _time_operand(node: exp.Expression, res: "_Resolver", scope) -> tuple[str, str | None, int, bool] | None:
    """``<column> [+|- INTERVAL ...]``: (side, column or None for the proctime pseudo-column,
    offset in ms, whether it is a time expression by its form: an INTERVAL or proctime)."""
    node = _unparen(node)
    if isinstance(node, (exp.Add, exp.Sub)):
        a, b = _unparen(node.this), _unparen(node.expression)
        if isinstance(b, exp.Interval):
            inner, ms = _time_operand(a, res, scope), _interval_ms(b, "an interval join's bound")
        elif isinstance(a, exp.Interval) and isinstance(node, exp.Add):
            inner, ms = _time_operand(b, res, scope), _interval_ms(a, "an interval join's bound")
        else:
            return None
        if inner is None:
            return None
        return inner[0], inner[1], inner[2] + (ms if isinstance(node, exp.Add) else -ms), True
    if isinstance(node, exp.Func) and node.name.upper() == "PROCTIME":
        _fail(
            f"PROCTIME() in a join condition does not say which input's arrival time it is; {_INTERVAL_USAGE}"
        )
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return None
    qualifier = ".".join(p.name for p in node.parts[:-1])
    if node.name.casefold() in _PROCTIME_NAMES:
        if qualifier:
            side = res.side_for_qualifier(qualifier, scope)
            if not _lookup(node.name, side.columns):
                return side.code, None, 0, True
        elif not any(_lookup(node.name, res.sides[c].columns) for level in scope for c in level):
            _fail(f"'{_sql(node)}' must be qualified to say whose processing time it is; {_INTERVAL_USAGE}")
    side, column = res.resolve(node, scope)
    return side, column, 0, False


def _time_bound(conjunct: exp.Expression, res: "_Resolver", scope) -> list[tuple] | None:
    """An interval join's bound as constraints ``(op, value, left column, right column)`` on
    ``l.t - r.t``; None when ``conjunct`` is not a bound between the two inputs' times."""
    node = _unparen(conjunct)
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        pairs = [(node.this, ">=", node.args["low"]), (node.this, "<=", node.args["high"])]
    elif type(node) in _COMPARISONS:
        pairs = [(node.this, _COMPARISONS[type(node)], node.expression)]
    else:
        return None
    operands = []
    for a, op, b in pairs:
        ta, tb = _time_operand(a, res, scope), _time_operand(b, res, scope)
        if ta is None or tb is None or ta[0] == tb[0]:
            return None
        operands.append((ta, op, tb))
    by_form = any(t[3] or t[1] is None for ta, _, tb in operands for t in (ta, tb))
    configured = res.time_columns
    by_config = all(configured[0 if t[0] == "L" else 1] == t[1] for ta, _, tb in operands for t in (ta, tb))
    if not by_form and not (by_config and None not in configured):
        return None
    constraints = []
    for ta, op, tb in operands:
        # l.t + cl OP r.t + cr  <=>  l.t - r.t OP cr - cl
        if ta[0] == "L":
            lhs, rhs = ta, tb
        else:
            lhs, rhs, op = tb, ta, _FLIPPED[op]
        constraints.append((op, rhs[2] - lhs[2], lhs[1], rhs[1]))
    return constraints


def _take_bounds(groups: list[list], res: "_Resolver", scope) -> tuple[list[list], list]:
    """Take the interval bounds out of the conjunct lists in ``groups``: returns the other
    conjuncts (per group) and the bounds found.

    A bound is recognised by its form (an INTERVAL or a proctime pseudo-column) or because it
    compares the configured time columns; once one bound is found by its form, its two columns
    count as the time columns for the others (``b.t >= a.t AND b.t < a.t + INTERVAL ...``)."""
    found: list = []
    configured, original = res.time_columns, groups
    for attempt in range(2):
        rest_groups = []
        for conjuncts in groups:
            rest = []
            for conjunct in conjuncts:
                bound = _time_bound(conjunct, res, scope)
                if bound is None:
                    rest.append(conjunct)
                else:
                    found.append((conjunct, bound))
            rest_groups.append(rest)
        if attempt or not found or found[0][1][0][2] is None:
            break
        groups, res.time_columns = rest_groups, (found[0][1][0][2], found[0][1][0][3])
    res.time_columns = configured
    order = {id(c): i for i, c in enumerate(c for conjuncts in original for c in conjuncts)}
    found.sort(key=lambda f: order[id(f[0])])  # as written
    return rest_groups, found


def _interval(found: list) -> IntervalBounds:
    lower, upper, left_times, right_times = [], [], set(), set()
    for _, constraints in found:
        for op, value, left_time, right_time in constraints:
            left_times.add(left_time)
            right_times.add(right_time)
            if op in (">=", ">", "="):
                lower.append(value + 1 if op == ">" else value)
            if op in ("<=", "<", "="):
                upper.append(value - 1 if op == "<" else value)
    text = " AND ".join(_sql(c) for c, _ in found)
    if len(left_times) > 1 or len(right_times) > 1:
        _fail(f"the interval join's bounds ({text}) use more than one time column of an input; {_INTERVAL_USAGE}")
    left_time, right_time = left_times.pop(), right_times.pop()
    if (left_time is None) != (right_time is None):
        _fail(
            f"the interval join's bounds ({text}) compare a processing time (proctime) with an event-time "
            f"column; both inputs must use the same time domain. {_INTERVAL_USAGE}"
        )
    if len(lower) != 1 or len(upper) != 1:
        difference = f"left {left_time or 'proctime'} - right {right_time or 'proctime'}"
        problem = (f"bound {difference} from above only" if not lower else f"bound {difference} from below only"
                   if not upper else f"bound {difference} from below more than once" if len(lower) > 1
                   else f"bound {difference} from above more than once")
        _fail(f"the interval join's bounds ({text}) {problem}; give exactly one lower and one upper bound: "
              f"{_INTERVAL_USAGE}")
    return IntervalBounds(lower_ms=lower[0], upper_ms=upper[0], left_time_column=left_time,
                          right_time_column=right_time, sql=text)

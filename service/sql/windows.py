"""Window table functions: ``TABLE(TUMBLE | HOP | CUMULATE(TABLE t, DESCRIPTOR(c), ...))`` on each
input of a window join or window semi/anti join (the *Window table functions* decision in
``joins.py``'s docstring).

:func:`_window_source` binds a window table function's table to its side and reads its window
(the side then has the window columns too), :func:`_window` checks both inputs use the same
window, and :func:`_window_keys` takes the window equalities out of the equi keys."""

from __future__ import annotations

from sqlglot import exp

from operators import ConfigurationError, WindowKind, WindowSpec
from operators.spec import WINDOW_COLUMNS

from .dialect import _SIDE_WORD, _SUPPORTED, _arg, _check_clauses, _fail, _interval_ms, _sql, _unparen
from .model import WindowTVF
from .resolve import _bind_table, _Side


# Per window table function: its interval arguments after DESCRIPTOR(...), without the offset.
_WINDOW_ARGUMENTS = {"TUMBLE": ("size",), "HOP": ("slide", "size"), "CUMULATE": ("step", "max size")}
_WINDOW_USAGE = (
    "TABLE(TUMBLE(TABLE <table>, DESCRIPTOR(<time column>), <size>[, <offset>])), "
    "TABLE(HOP(TABLE <table>, DESCRIPTOR(<time column>), <slide>, <size>[, <offset>])) or "
    "TABLE(CUMULATE(TABLE <table>, DESCRIPTOR(<time column>), <step>, <max size>[, <offset>])), "
    "with intervals written INTERVAL 'n' MILLISECOND|SECOND|MINUTE|HOUR|DAY"
)


def _window_call(node: exp.Expression) -> tuple[exp.Expression, exp.TableAlias | None] | None:
    """(the TUMBLE/HOP/CUMULATE call, the alias) when ``node`` is ``TABLE(<window function>) [AS] a``
    or ``(SELECT * FROM TABLE(<window function>)) [AS] a``; None when it is something else."""
    alias = None
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
        inner = node.this
        source = _arg(inner, "from_", "from")
        if source is None or _window_call(source.this) is None:
            return None
        _check_clauses(inner, "a window table function's subquery", {"expressions", "from", "from_"})
        if len(inner.expressions) != 1 or not isinstance(inner.expressions[0], exp.Star):
            _fail(
                f"a window table function wrapped in a subquery must be (SELECT * FROM TABLE(...)) <alias>; "
                f"select the columns in the outer query. {_SUPPORTED}"
            )
        alias = node.args.get("alias")
        node = source.this
    if not (isinstance(node, exp.Table) and isinstance(node.this, exp.Func) and node.this.name.upper() == "TABLE"):
        return None
    if alias is None:
        alias = node.args.get("alias")
    calls = node.this.expressions
    call = calls[0] if len(calls) == 1 else None
    if not isinstance(call, exp.Func) or call.name.upper() not in _WINDOW_ARGUMENTS:
        _fail(f"unsupported table function '{_sql(node.this)}'; window joins use {_WINDOW_USAGE}")
    return call, alias


def _window_source(node: exp.Expression, side: _Side, other: _Side, where: str) -> dict | None:
    """Bind a window table function's table to ``side`` and read its window; None when ``node`` is
    not a window table function. The side's columns then include the window columns."""
    found = _window_call(node)
    if found is None:
        return None
    call, alias = found
    name = call.name.upper()
    usage = f"use {_WINDOW_USAGE}"
    args = list(call.expressions)
    if any(isinstance(a, (exp.PropertyEQ, exp.Kwarg)) for a in args):
        _fail(f"named arguments in '{_sql(call)}' are not supported; pass them by position: {usage}")
    wanted = _WINDOW_ARGUMENTS[name]
    if len(args) not in (2 + len(wanted), 3 + len(wanted)):
        _fail(f"{name} takes {2 + len(wanted)} or {3 + len(wanted)} arguments, got {len(args)} in '{_sql(call)}'; {usage}")
    table, descriptor = args[0], _unparen(args[1])
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        _fail(f"the first argument of {name} must be TABLE <{_SIDE_WORD[side.code]} table>, got '{_sql(table)}'; {usage}")
    if not (isinstance(descriptor, exp.Func) and descriptor.name.upper() == "DESCRIPTOR"
            and len(descriptor.expressions) == 1 and isinstance(descriptor.expressions[0], exp.Column)):
        _fail(f"the second argument of {name} must be DESCRIPTOR(<time column>), got '{_sql(args[1])}'; {usage}")
    sizes = [_interval_ms(a, f"{name}(...)") for a in args[2:]]
    table = table.copy()
    table.set("alias", alias)
    _bind_table(table, side, other, where)
    time_column = side.column(descriptor.expressions[0].name)
    side.add_window_columns()
    return {"kind": name, "sizes": sizes, "time": time_column, "sql": _sql(call)}


def _window(left: dict, right: dict) -> WindowTVF:
    """The window both inputs are assigned to (Flink requires the same window on both)."""
    if (left["kind"], left["sizes"]) != (right["kind"], right["sizes"]):
        _fail(
            f"both inputs of a window join must use the same window, got {left['sql']} and {right['sql']} "
            "(only the table and the DESCRIPTOR column may differ)"
        )
    kind, sizes = left["kind"], left["sizes"]
    offset = sizes[len(_WINDOW_ARGUMENTS[kind])] if len(sizes) > len(_WINDOW_ARGUMENTS[kind]) else 0
    if kind == "TUMBLE":
        fields = dict(size_ms=sizes[0])
    elif kind == "HOP":
        fields = dict(slide_ms=sizes[0], size_ms=sizes[1])
    else:
        fields = dict(step_ms=sizes[0], size_ms=sizes[1])
    try:
        WindowSpec(kind=WindowKind(kind), offset_ms=offset, **fields)
    except ConfigurationError as err:
        _fail(f"{left['sql']}: {err}")
    return WindowTVF(kind=kind, size_ms=fields["size_ms"], slide_ms=fields.get("slide_ms"),
                     step_ms=fields.get("step_ms"), offset_ms=offset,
                     left_time_column=left["time"], right_time_column=right["time"])


def _window_keys(keys: list, null_safe: list, what: str) -> tuple[list, list]:
    """Take the window equalities out of the equi keys: a window join needs
    ``l.window_start = r.window_start AND l.window_end = r.window_end``."""
    found, rest_keys, rest_null_safe = set(), [], []
    for (l_col, r_col), ns in zip(keys, null_safe):
        if l_col in WINDOW_COLUMNS or r_col in WINDOW_COLUMNS:
            if l_col != r_col:
                _fail(f"{what} compares l.{l_col} with r.{r_col}; window columns can only be equal to the same "
                      "window column of the other input")
            found.add(l_col)
            continue
        rest_keys.append((l_col, r_col))
        rest_null_safe.append(ns)
    missing = [c for c in ("window_start", "window_end") if c not in found]
    if missing:
        _fail(
            f"{what} needs the window equalities a.window_start = b.window_start AND a.window_end = "
            f"b.window_end (missing: {', '.join(missing)}), as Flink's window join does. {_SUPPORTED}"
        )
    return rest_keys, rest_null_safe

"""SQL expressions (sqlglot trees in the Flink dialect) into typed nodes (``functions.py``).

:func:`translate` walks an expression the SQL front end (or a test) parsed, asks a resolver for
every column (its row, its index, its type), derives each operation's type by Flink's rules and
refuses what Flink would not take, or what changejoin does not run, with one line naming the
expression: an unknown function (with the supported function nearest its name), a
non-deterministic one (a retraction must reproduce the row it retracts), operands of types the
operation does not take.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Callable

from sqlglot import exp

from . import functions as F
from . import types as T
from .dialect import DIALECT
from .functions import CATALOG, NON_DETERMINISTIC, type_of
from .types import SqlType, TypeError_

#: A column reference -> (row code, index in that row, type). Raises for an unknown column.
Resolver = Callable[[exp.Column], tuple[str, int, SqlType]]

#: Names written in SQL for a catalog function (or an EXTRACT of one unit) that are not its name.
ALIASES = {"SUBSTR": "SUBSTRING", "CHARACTER_LENGTH": "CHAR_LENGTH", "CEILING": "CEIL", "LTRIM": "TRIM",
           "RTRIM": "TRIM", **{name: "EXTRACT" for name in F.EXTRACT_FUNCTIONS}}
AGGREGATES = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX", "LISTAGG", "COLLECT", "STDDEV_POP", "STDDEV_SAMP",
                        "VAR_POP", "VAR_SAMP", "FIRST_VALUE", "LAST_VALUE", "ARRAY_AGG", "JSON_ARRAYAGG",
                        "JSON_OBJECTAGG", "ROW_NUMBER", "RANK", "DENSE_RANK"})
_NON_DETERMINISTIC_NODES = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime)
_KEYWORD_COLUMNS = frozenset({"LOCALTIMESTAMP", "LOCALTIME", "CURRENT_ROW_TIMESTAMP", "CURRENT_TIMESTAMP",
                              "CURRENT_DATE", "CURRENT_TIME"})
MAX_DIGITS = 38


class Refused(ValueError):
    """The expression is outside what changejoin runs: the message (one line) says why."""


def sql_of(node: exp.Expression) -> str:
    """An expression as the user would write it (Flink's dialect)."""
    return node.sql(dialect=DIALECT)


def supported_names() -> list[str]:
    """Every function name a query may call (operators excepted)."""
    names = {n for n in CATALOG if n.replace("_", "").isalpha() and n not in ("AND", "OR", "NOT", "IN", "LIKE",
                                                                              "ILIKE", "BETWEEN", "CASE")}
    return sorted((names | set(ALIASES)) - {"NEGATE"})


def nearest(name: str) -> str | None:
    import difflib

    found = difflib.get_close_matches(name.upper(), supported_names(), n=1, cutoff=0.5)
    return found[0] if found else None


class _Translator:
    def __init__(self, resolve: Resolver):
        self.resolve = resolve

    def fail(self, node, why: str):
        raise Refused(f"'{sql_of(node)}' {why}")

    def call(self, node: exp.Expression, name: str, operands: list) -> list:
        fn = CATALOG[name]
        fewest, most = fn.arity
        if len(operands) < fewest or most is not None and len(operands) > most:
            expected = str(fewest) if fewest == most else f"{fewest} to {most}" if most else f"at least {fewest}"
            self.fail(node, f"takes {expected} argument(s), not {len(operands)}")
        try:
            result = fn.infer(operands)
        except TypeError_ as err:
            raise Refused(f"'{sql_of(node)}': {err}") from None
        return ["call", str(result), name, *operands]

    # -- the walk ---------------------------------------------------------------------------------
    def __call__(self, node: exp.Expression) -> list:
        while isinstance(node, exp.Paren):
            node = node.this
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node)
        if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            self.fail(node, "is a subquery: subqueries are taken only as the input of a join (FROM (SELECT ...) AS "
                            "a) and as a semi/anti join's single WHERE [NOT] IN / [NOT] EXISTS")
        if isinstance(node, _NON_DETERMINISTIC_NODES):
            self.non_deterministic(node, type(node).__name__)
        if isinstance(node, exp.Func):
            name = node.name.upper() if isinstance(node, exp.Anonymous) else (node.sql_name() or "").upper()
            return self.function(node, name)
        self.fail(node, "is not supported in an expression")

    def non_deterministic(self, node, name: str):
        self.fail(node, "is not deterministic: a retraction must reproduce the row it retracts, which a value that "
                        "changes from call to call cannot (Flink's non-deterministic update problem); compute it "
                        "before the topic, or use the event time")

    def function(self, node: exp.Expression, name: str) -> list:
        if name in NON_DETERMINISTIC:
            self.non_deterministic(node, name)
        if name in AGGREGATES:
            self.fail(node, "is an aggregate function: changejoin joins, it does not aggregate")
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else []
        special = _NAMED.get(name)
        if special is not None:
            return special(self, node, args)
        target = ALIASES.get(name, name)
        if target in CATALOG and target not in _SYNTAX_ONLY:
            return self.call(node, target, [self(a) for a in args])
        close = nearest(name)
        hint = f"; the nearest supported function is {close}" if close else ""
        self.fail(node, f"calls {name}, which changejoin does not support{hint}")

    def literal_int(self, node, what: str) -> int:
        value = self(node)
        if value[0] != "lit" or not type_of(value).is_integer:
            self.fail(node, f"{what} must be an integer literal")
        return value[2]


# -- literals -------------------------------------------------------------------------------------
def _number(t: _Translator, node: exp.Literal, negative: bool = False) -> list:
    text = node.this.strip()
    digits = sum(c.isdigit() for c in text.lower().split("e")[0])
    if digits > MAX_DIGITS:
        raise Refused(f"the numeric literal {text[:20]}... has {digits} digits; at most {MAX_DIGITS} (Flink SQL's "
                      "DECIMAL(38))")
    if "e" in text.lower():
        value = float(text)
        return ["lit", str(T.DOUBLE.not_null()), repr(-value if negative else value)]
    if "." in text:
        try:
            value = Decimal(text)
        except InvalidOperation:
            t.fail(node, "is not a number")
        if negative:
            value = -value
        # Flink types a literal by its digits as written: 0.1 is DECIMAL(2, 1), 00.10 DECIMAL(4, 2)
        scale = len(text.split(".", 1)[1])
        precision = max(digits, scale, 1)
        return ["lit", str(T.decimal(precision, scale, False)), str(value)]
    value = -int(text) if negative else int(text)
    if -(1 << 31) <= value < (1 << 31):
        return ["lit", str(T.INT.not_null()), value]
    if -(1 << 63) <= value < (1 << 63):
        return ["lit", str(T.BIGINT.not_null()), value]
    return ["lit", str(T.decimal(len(str(abs(value))), 0, False)), str(value)]


def _literal(t: _Translator, node: exp.Literal) -> list:
    if node.is_string:
        # CHAR(n): n counts the literal's UTF-16 code units, as Calcite's (a Java String's length):
        # '🍐' is a CHAR(2), though CHAR_LENGTH and a CAST to CHAR(n) count code points
        return ["lit", str(T.char(len(node.this.encode("utf-16-le")) // 2, False)), node.this]
    return _number(t, node)


def _neg(t: _Translator, node: exp.Neg) -> list:
    inner = node.this
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return _number(t, inner, negative=True)
    return t.call(node, "NEGATE", [t(inner)])


_INTERVAL_UNITS = {"YEAR": 12, "MONTH": 1, "DAY": 86_400_000, "HOUR": 3_600_000, "MINUTE": 60_000, "SECOND": 1000,
                   "MILLISECOND": 1}


def _unit(text: str) -> str:
    text = text.upper()
    if text.endswith("S") and text[:-1] in _INTERVAL_UNITS:
        text = text[:-1]
    return text


def _interval(t: _Translator, node: exp.Interval) -> list:
    """An INTERVAL literal: a day-time one in milliseconds, a year-month one in months."""
    value = node.this
    unit = node.args.get("unit")
    if not isinstance(value, exp.Literal):
        t.fail(node, "must be INTERVAL '<number>' <unit>")
    text = value.this.strip()
    if isinstance(unit, exp.IntervalSpan):
        start, end = _unit(unit.this.name), _unit(unit.expression.name)
        return _interval_span(t, node, text, start, end)
    name = _unit(unit.name if unit is not None else "")
    if name not in _INTERVAL_UNITS:
        t.fail(node, "has an unknown unit; write INTERVAL 'n' YEAR, MONTH, DAY, HOUR, MINUTE, SECOND or MILLISECOND")
    try:
        amount = Decimal(text)
    except InvalidOperation:
        t.fail(node, "is not a number of units")
    leading = text.lstrip("+-").split(".")[0]
    if len(leading.lstrip("0") or "0") > 2:
        t.fail(node, f"exceeds the precision of {name}(2): Flink's interval literal takes at most 2 digits, write "
                     f"INTERVAL '{text}' {name}(n) as a smaller unit or TIMESTAMPADD({name}, {text}, t)")
    if name in ("YEAR", "MONTH"):
        if amount != amount.to_integral_value():
            t.fail(node, "must be a whole number of years or months")
        return ["lit", str(T.INTERVAL_YEAR_MONTH.not_null()), int(amount) * _INTERVAL_UNITS[name]]
    millis = amount * _INTERVAL_UNITS[name]
    if millis != millis.to_integral_value():
        t.fail(node, "is not a whole number of milliseconds")
    return ["lit", str(T.INTERVAL_DAY_TIME.not_null()), int(millis)]


def _interval_span(t, node, text: str, start: str, end: str) -> list:
    import re

    negative = text.startswith("-")
    body = text.lstrip("+-")
    if (start, end) == ("YEAR", "MONTH"):
        match = re.fullmatch(r"(\d+)-(\d+)", body)
        if match is None:
            t.fail(node, "must be INTERVAL 'y-m' YEAR TO MONTH")
        months = int(match[1]) * 12 + int(match[2])
        return ["lit", str(T.INTERVAL_YEAR_MONTH.not_null()), -months if negative else months]
    patterns = {("DAY", "HOUR"): r"(?P<d>\d+) (?P<h>\d+)", ("DAY", "MINUTE"): r"(?P<d>\d+) (?P<h>\d+):(?P<m>\d+)",
                ("DAY", "SECOND"): r"(?P<d>\d+) (?P<h>\d+):(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)",
                ("HOUR", "MINUTE"): r"(?P<h>\d+):(?P<m>\d+)", ("HOUR", "SECOND"): r"(?P<h>\d+):(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)",
                ("MINUTE", "SECOND"): r"(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)"}
    pattern = patterns.get((start, end))
    match = re.fullmatch(pattern, body) if pattern else None
    if match is None:
        t.fail(node, f"is not an INTERVAL ... {start} TO {end} literal Flink reads")
    parts = match.groupdict()
    millis = (int(parts.get("d") or 0) * 86_400_000 + int(parts.get("h") or 0) * 3_600_000
              + int(parts.get("m") or 0) * 60_000 + Decimal(parts.get("s") or 0) * 1000)
    if millis != millis.to_integral_value():
        t.fail(node, "is not a whole number of milliseconds")
    return ["lit", str(T.INTERVAL_DAY_TIME.not_null()), -int(millis) if negative else int(millis)]


def _data_type(t: _Translator, node, dtype: exp.DataType) -> SqlType:
    D = exp.DataType.Type
    kind = dtype.this
    params = [int(p.this.this) if isinstance(p, exp.DataTypeParam) else int(p.this) for p in dtype.expressions
              if isinstance(p, exp.DataTypeParam)]
    simple = {D.BOOLEAN: "BOOLEAN", D.TINYINT: "TINYINT", D.SMALLINT: "SMALLINT", D.INT: "INT", D.BIGINT: "BIGINT",
              D.FLOAT: "FLOAT", D.DOUBLE: "DOUBLE", D.DATE: "DATE", D.TEXT: "STRING", D.VARBINARY: "BYTES"}
    try:
        if kind in simple and not params:
            return T.parse_type(simple[kind])
        if kind == D.DECIMAL:
            return T.parse_type(f"DECIMAL({', '.join(map(str, params or [10, 0]))})")
        if kind in (D.VARCHAR, D.CHAR, D.BINARY, D.VARBINARY):
            name = {D.VARCHAR: "VARCHAR", D.CHAR: "CHAR", D.BINARY: "BINARY", D.VARBINARY: "VARBINARY"}[kind]
            return T.parse_type(f"{name}({params[0] if params else (T.MAX_LENGTH if name.startswith('VAR') else 1)})")
        if kind == D.TIMESTAMP:
            return T.timestamp(params[0] if params else 6)
    except TypeError_ as err:
        raise Refused(f"'{sql_of(node)}': {err}") from None
    t.fail(node, f"casts to {dtype.sql(dialect=DIALECT)}; a CAST is to BOOLEAN, INT, BIGINT, TINYINT, SMALLINT, "
                 "FLOAT, DOUBLE, DECIMAL(p, s), CHAR(n), VARCHAR(n), STRING, BYTES, DATE or TIMESTAMP(p)")


def _cast(t: _Translator, node) -> list:
    target = _data_type(t, node, node.args["to"])
    value = node.this
    is_try = type(node) is exp.TryCast
    if not is_try and isinstance(value, exp.Literal) and value.is_string and target.root in ("DATE", "TIMESTAMP",
                                                                                              "DECIMAL"):
        return _typed_literal(t, node, value.this, target, node.args["to"])
    return t.call(node, "TRY_CAST" if is_try else "CAST", [t(value), ["sym", None, str(target)]])


def _typed_literal(t: _Translator, node, text: str, target: SqlType, dtype) -> list:
    """DATE '...', TIMESTAMP '...', DECIMAL '...' (and CASTs of a string literal to them)."""
    from . import runtime as R

    if target.root == "DATE":
        try:
            value = R.string_to_date(text)
        except R.ExpressionError:
            t.fail(node, "is not a date (yyyy-mm-dd)")
        return ["lit", str(T.DATE.not_null()), value.isoformat()]
    if target.root == "TIMESTAMP":
        explicit = bool(dtype.expressions)
        fraction = text.split(".", 1)[1] if "." in text else ""
        precision = target.precision if explicit else len(fraction)
        value = R.parse_timestamp(text.strip(), max(precision, 0))
        if value is None:
            t.fail(node, "is not a timestamp (yyyy-mm-dd hh:mm:ss[.fff])")
        return ["lit", str(T.timestamp(min(precision, 9), False)), value.replace(tzinfo=None).isoformat(sep=" ")]
    if target.root == "DECIMAL":
        try:
            value = Decimal(text.strip())
        except InvalidOperation:
            t.fail(node, "is not a number")
        sign, digit_tuple, exponent = value.as_tuple()
        scale = max(-exponent, 0)
        if dtype.expressions:
            fitted = R.dfit(value, target.precision, target.scale)
            if fitted is None:
                t.fail(node, f"does not fit {target}")
            return ["lit", str(target.not_null()), str(fitted)]
        return ["lit", str(T.decimal(max(len(digit_tuple), scale, 1), scale, False)), str(value)]
    t.fail(node, f"casts a literal to {target}, which changejoin does not take")


def _column(t: _Translator, node: exp.Column) -> list:
    if isinstance(node.this, exp.Star):
        t.fail(node, "is only allowed in the select list")
    if not node.table and node.name.upper() in _KEYWORD_COLUMNS and not node.this.quoted:
        t.non_deterministic(node, node.name.upper())
    row, index, sql_type = t.resolve(node)
    return ["col", str(sql_type), row, index]


# -- operators ------------------------------------------------------------------------------------
def _binary(name: str):
    return lambda t, node: t.call(node, name, [t(node.this), t(node.expression)])


def _chain(name: str, cls):
    def handler(t: _Translator, node) -> list:
        operands, todo = [], [node]
        while todo:
            current = todo.pop()
            while isinstance(current, exp.Paren) and isinstance(current.this, cls):
                current = current.this
            if isinstance(current, cls):
                todo += [current.expression, current.this]
            else:
                operands.append(current)
        return t.call(node, name, [t(o) for o in operands])

    return handler


def _not(t: _Translator, node: exp.Not) -> list:
    return t.call(node, "NOT", [t(node.this)])


def _is(t: _Translator, node: exp.Is) -> list:
    target = node.expression
    if isinstance(target, exp.Null):
        return t.call(node, "IS NULL", [t(node.this)])
    if isinstance(target, exp.Boolean):
        return t.call(node, "IS TRUE" if target.this else "IS FALSE", [t(node.this)])
    t.fail(node, "is not supported: IS takes NULL, TRUE, FALSE or UNKNOWN")


def _null_safe_neq(t: _Translator, node) -> list:
    inner = t.call(node, "IS NOT DISTINCT FROM", [t(node.this), t(node.expression)])
    return t.call(node, "NOT", [inner])


def _like(t: _Translator, node, escape=None) -> list:
    name = "ILIKE" if isinstance(node, exp.ILike) else "LIKE"
    operands = [t(node.this), t(node.expression)]
    if escape is not None:
        operands.append(t(escape))
    result = t.call(node, name, operands)
    return t.call(node, "NOT", [result]) if node.args.get("negate") else result


def _escape(t: _Translator, node: exp.Escape) -> list:
    if not isinstance(node.this, (exp.Like, exp.ILike)):
        t.fail(node, "is not supported: ESCAPE belongs to LIKE")
    escape = node.expression
    if not (isinstance(escape, exp.Literal) and escape.is_string and len(escape.this) == 1):
        t.fail(node, "needs a one-character string literal after ESCAPE")
    return _like(t, node.this, escape)


def _in(t: _Translator, node: exp.In) -> list:
    if node.args.get("query") is not None or node.args.get("unnest") is not None:
        t.fail(node, "is a subquery: an IN subquery is only taken as the single WHERE of a semi/anti join")
    return t.call(node, "IN", [t(node.this), *(t(e) for e in node.expressions)])


def _between(t: _Translator, node: exp.Between) -> list:
    if node.args.get("symmetric"):
        t.fail(node, "is not supported: BETWEEN SYMMETRIC")
    return t.call(node, "BETWEEN", [t(node.this), t(node.args["low"]), t(node.args["high"])])


def _case(t: _Translator, node: exp.Case) -> list:
    subject = node.this
    operands = []
    for branch in node.args.get("ifs") or []:
        condition = branch.this
        if subject is not None:
            condition = exp.EQ(this=subject.copy(), expression=condition)
        operands += [t(condition), t(branch.args["true"])]
    default = node.args.get("default")
    operands.append(t(default) if default is not None else ["lit", "NULL", None])
    return t.call(node, "CASE", operands)


def _if(t: _Translator, node: exp.If) -> list:
    false = node.args.get("false")
    return t.call(node, "IF", [t(node.this), t(node.args["true"]),
                               t(false) if false is not None else ["lit", "NULL", None]])


def _trim(t: _Translator, node: exp.Trim) -> list:
    position = (node.args.get("position") or "BOTH").upper()
    characters = node.args.get("expression")
    chars = t(characters) if characters is not None else ["lit", str(T.char(1, False)), " "]
    return t.call(node, "TRIM", [["sym", None, position], chars, t(node.this)])


def _substring(t: _Translator, node: exp.Substring) -> list:
    operands = [t(node.this), t(node.args["start"])]
    if node.args.get("length") is not None:
        operands.append(t(node.args["length"]))
    return t.call(node, "SUBSTRING", operands)


def _position(t: _Translator, node: exp.StrPosition) -> list:
    if node.args.get("position") is not None:
        t.fail(node, "is not supported with a start position")
    return t.call(node, "POSITION", [t(node.args["substr"]), t(node.this)])


def _extract(t: _Translator, node: exp.Extract) -> list:
    unit = node.this.name.upper()
    if unit not in F.EXTRACT_UNITS:
        t.fail(node, f"extracts {unit}; the units are {', '.join(F.EXTRACT_UNITS)}")
    return t.call(node, "EXTRACT", [["sym", None, unit], t(node.expression)])


def _floor_ceil(name: str):
    def handler(t: _Translator, node) -> list:
        if node.args.get("decimals") is not None:
            t.fail(node, f"is not supported: {name} takes one argument (or t TO unit)")
        to = node.args.get("to")
        operands = [t(node.this)]
        if to is not None:
            unit = _unit(to.name)
            inner = operands[0]
            if inner[0] == "call" and inner[2] == name and len(inner) == 5 and _can_roll_up(unit, inner[4][2]):
                operands[0] = inner[3]  # FLOOR(FLOOR(x TO inner) TO unit) is FLOOR(x TO unit), as Calcite has it
            operands.append(["sym", None, unit])
        return t.call(node, name, operands)

    return handler


#: Calcite's TimeUnit order, which its roll-up compares.
_TIME_UNIT_ORDER = ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "QUARTER", "ISOYEAR", "WEEK", "MILLISECOND",
                    "MICROSECOND")
_ROLL_UP_OUTER = frozenset({"YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "MILLISECOND", "MICROSECOND"})
_ROLL_UP_INNER = _ROLL_UP_OUTER | {"QUARTER"}


def _can_roll_up(outer: str, inner: str) -> bool:
    """Whether Flink's planner drops an inner FLOOR (CEIL) under an outer one of the same kind
    (Calcite's RexSimplify.simplifyCeilFloor / canRollUp, which Flink runs on every expression, once,
    from the innermost call out): the inner unit is the outer one or finer (a QUARTER only under a
    YEAR; under a QUARTER, anything from a QUARTER down); a WEEK, DECADE, CENTURY or MILLENNIUM
    never rolls up. Its value can differ from the two calls': a date before 1582-10-15 is read in
    the Julian calendar, the first day of its year written in the Gregorian one."""
    if inner not in _ROLL_UP_INNER:
        return False
    if outer == "QUARTER":
        return True
    if outer not in _ROLL_UP_OUTER:
        return False
    if inner == "QUARTER":
        return outer == "YEAR"
    return _TIME_UNIT_ORDER.index(outer) <= _TIME_UNIT_ORDER.index(inner)


def _dpipe(t: _Translator, node: exp.DPipe) -> list:
    return t.call(node, "||", [t(node.this), t(node.expression)])


def _hex(t: _Translator, node: exp.HexString) -> list:
    data = bytes.fromhex(node.this)
    return ["lit", str(SqlType("BINARY", len(data), None, False)), data.hex()]


# -- functions with their own argument rules --------------------------------------------------------
def _trim_function(t: _Translator, node, args) -> list:
    name = node.name.upper()
    if not 1 <= len(args) <= 2:
        t.fail(node, f"takes 1 or 2 arguments, not {len(args)}")
    chars = t(args[1]) if len(args) > 1 else ["lit", str(T.char(1, False)), " "]
    return t.call(node, "TRIM", [["sym", None, "LEADING" if name == "LTRIM" else "TRAILING"], chars, t(args[0])])


def _unit_argument(t: _Translator, node, arg, allowed) -> list:
    if not isinstance(arg, (exp.Column, exp.Var)) or isinstance(arg, exp.Column) and arg.table:
        t.fail(node, f"needs a time unit first ({', '.join(allowed)})")
    unit = _unit(arg.name)
    if unit == "SQL_TSI_DAY":
        unit = "DAY"
    if unit not in allowed:
        t.fail(node, f"takes the units {', '.join(allowed)}, not {arg.name}")
    return ["sym", None, unit]


def _timestampadd(t: _Translator, node, args) -> list:
    name = node.name.upper()
    if len(args) != 3:
        t.fail(node, f"takes 3 arguments ({name}(unit, ...)), not {len(args)}")
    unit = _unit_argument(t, node, args[0], F.TIMESTAMPADD_UNITS)
    return t.call(node, name, [unit, t(args[1]), t(args[2])])


def _extract_function(t: _Translator, node, args) -> list:
    name = node.name.upper()
    if len(args) != 1:
        t.fail(node, f"takes 1 argument, not {len(args)}")
    return t.call(node, "EXTRACT", [["sym", None, F.EXTRACT_FUNCTIONS[name]], t(args[0])])


def _round(t: _Translator, node, args) -> list:
    name = node.name.upper()
    if not 1 <= len(args) <= 2:
        t.fail(node, f"takes 1 or 2 arguments, not {len(args)}")
    operands = [t(args[0])]
    if len(args) == 2:
        digits = t(args[1])
        if digits[0] != "lit" or not type_of(digits).is_integer:
            t.fail(node, "needs an integer literal as its second argument (it decides the result's type)")
        operands.append(digits)
    return t.call(node, name, operands)


def _proctime(t: _Translator, node, args) -> list:
    t.non_deterministic(node, "PROCTIME")


_NAMED: dict[str, Callable] = {
    "LTRIM": _trim_function, "RTRIM": _trim_function, "TIMESTAMPADD": _timestampadd, "TIMESTAMPDIFF": _timestampadd,
    **{name: _extract_function for name in F.EXTRACT_FUNCTIONS}, "ROUND": _round, "TRUNCATE": _round,
}
# Catalog entries that are written with syntax of their own, never called by name.
_SYNTAX_ONLY = frozenset({"+", "-", "*", "/", "NEGATE", "=", "<>", "<", "<=", ">", ">=", "IS NOT DISTINCT FROM",
                          "BETWEEN", "IN", "LIKE", "ILIKE", "AND", "OR", "NOT", "IS NULL", "IS TRUE", "IS FALSE",
                          "CASE", "CAST", "TRY_CAST", "||", "TRIM", "EXTRACT", "POSITION"})

_HANDLERS: dict = {
    exp.Column: _column, exp.Literal: _literal, exp.Null: lambda t, n: ["lit", "NULL", None],
    exp.Boolean: lambda t, n: ["lit", str(T.BOOLEAN.not_null()), bool(n.this)],
    exp.Neg: _neg, exp.Interval: _interval, exp.Cast: _cast, exp.TryCast: _cast,
    exp.Add: _binary("+"), exp.Sub: _binary("-"), exp.Mul: _binary("*"), exp.Div: _binary("/"),
    exp.Mod: _binary("MOD"), exp.EQ: _binary("="), exp.NEQ: _binary("<>"), exp.LT: _binary("<"),
    exp.LTE: _binary("<="), exp.GT: _binary(">"), exp.GTE: _binary(">="),
    exp.NullSafeEQ: _binary("IS NOT DISTINCT FROM"), exp.NullSafeNEQ: _null_safe_neq,
    exp.And: _chain("AND", exp.And), exp.Or: _chain("OR", exp.Or), exp.Not: _not, exp.Is: _is,
    exp.Like: _like, exp.ILike: _like, exp.Escape: _escape, exp.In: _in, exp.Between: _between, exp.Case: _case,
    exp.If: _if, exp.Trim: _trim, exp.Substring: _substring, exp.StrPosition: _position, exp.Extract: _extract,
    exp.Floor: _floor_ceil("FLOOR"), exp.Ceil: _floor_ceil("CEIL"), exp.DPipe: _dpipe, exp.HexString: _hex,
}


def translate(node: exp.Expression, resolve: Resolver) -> list:
    """The typed node of ``node``; raises :class:`Refused` naming what is not supported."""
    try:
        return _Translator(resolve)(node)
    except RecursionError:
        raise Refused("the expression nests too deeply; simplify it") from None


def parse(sql: str) -> exp.Expression:
    """One expression in the Flink dialect (for tests and the untyped condition compiler)."""
    import sqlglot

    return sqlglot.parse_one(sql, read=DIALECT)

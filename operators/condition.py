"""Compile a join condition written in SQL into a Python callable ``cond(left_row, right_row)``.

The condition is parsed once with sqlglot and turned into Python source that is evaluated once,
so evaluating it per pair of rows costs a few function calls. SQL three-valued logic is kept:
``None`` stands for UNKNOWN, any comparison or arithmetic with NULL is UNKNOWN, and a pair
matches only when the condition is TRUE (callers test ``cond(l, r) is True``).
"""
from __future__ import annotations

import operator
import re
from typing import Any, Callable, Sequence

exp = None  # sqlglot.expressions, bound on first use by compile_condition

Condition = Callable[[Sequence[Any], Sequence[Any]], Any]


#: The most digits a numeric literal may have (Flink SQL's largest exact type is DECIMAL(38)).
MAX_LITERAL_DIGITS = 38


class ConditionError(ValueError):
    """The condition cannot be compiled: the message names what the user must fix."""


# The one list of what a join condition may contain, as sqlglot expression class names; the SQL
# front end (service/sql/) checks a query against it before compiling.
SUPPORTED_NODES = (
    "Paren", "Column", "Literal", "Null", "Boolean", "Not", "Neg", "Is", "Like", "ILike", "Escape", "In",
    "Between", "EQ", "NEQ", "LT", "LTE", "GT", "GTE", "Add", "Sub", "Mul", "Div", "Mod", "And", "Or", "NullSafeEQ",
)

SUPPORTED = (
    "column references, string/number/boolean/NULL literals, comparisons (= <> != < <= > >=, "
    "IS [NOT] DISTINCT FROM), AND/OR/NOT, IS [NOT] NULL, [NOT] LIKE / ILIKE [ESCAPE 'c'], "
    "[NOT] BETWEEN, [NOT] IN (<value list>), + - * / %, unary minus and parentheses (no functions)"
)


def _and(*operands):
    """SQL's AND of any number of operands (a chain ``a AND b AND c`` is one call)."""
    if any(o is False for o in operands):
        return False
    if any(o is None for o in operands):
        return None
    return True


def _or(*operands):
    if any(o is True for o in operands):
        return True
    if any(o is None for o in operands):
        return None
    return False


def _not(a):
    return None if a is None else not a


def _null_safe(fn):
    def apply(a, b):
        if a is None or b is None:
            return None
        return fn(a, b)

    return apply


def _divide(a, b):
    if b == 0:
        return None  # SQL engines fail the query here; a join must not, so the pair does not match
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q  # integer division truncates toward zero
    return a / b


def _modulo(a, b):
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a - b * _divide(a, b)  # sign follows the dividend, as in SQL
    import math

    return math.fmod(a, b)


def _like_regex(pattern: str, escape: str | None) -> "re.Pattern[str]":
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _like(value, regex):
    if value is None:
        return None
    return regex.fullmatch(str(value)) is not None


def _in(value, options):
    if value is None:
        return None
    found = False
    unknown = False
    for option in options:
        if option is None:
            unknown = True
        elif value == option:
            found = True
            break
    if found:
        return True
    return None if unknown else False


_RUNTIME = {
    "_and": _and,
    "_or": _or,
    "_not": _not,
    "_eq": _null_safe(operator.eq),
    "_ne": _null_safe(operator.ne),
    "_lt": _null_safe(operator.lt),
    "_le": _null_safe(operator.le),
    "_gt": _null_safe(operator.gt),
    "_ge": _null_safe(operator.ge),
    "_add": _null_safe(operator.add),
    "_sub": _null_safe(operator.sub),
    "_mul": _null_safe(operator.mul),
    "_div": _null_safe(_divide),
    "_mod": _null_safe(_modulo),
    "_neg": lambda a: None if a is None else -a,
    "_like": _like,
    "_in": _in,
    "_nse": lambda a, b: a == b,  # IS NOT DISTINCT FROM: NULL equals NULL
}

_BINARY = {
    "EQ": "_eq",
    "NEQ": "_ne",
    "LT": "_lt",
    "LTE": "_le",
    "GT": "_gt",
    "GTE": "_ge",
    "Add": "_add",
    "Sub": "_sub",
    "Mul": "_mul",
    "Div": "_div",
    "Mod": "_mod",
    "And": "_and",
    "Or": "_or",
    "NullSafeEQ": "_nse",
}


class _Compiler:
    """Walks a sqlglot tree. sqlglot is imported only here, when a join is configured: the
    operators themselves never need it while processing records."""

    def __init__(self, sides: dict[str, tuple[str, Sequence[str]]]):
        # alias (lower case) -> (Python variable holding the row, column names)
        self.sides = sides
        self.constants: dict[str, Any] = {}

    def constant(self, value: Any) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def column(self, node: exp.Column) -> str:
        table = node.table
        name = node.name
        if not table:
            owners = [alias for alias, (_, cols) in self.sides.items() if name in cols]
            if len(owners) != 1:
                raise ConditionError(
                    f"column {name!r} in the join condition must be qualified as "
                    + " or ".join(f"{a}.{name}" for a in self.sides)
                )
            table = owners[0]
        side = self.sides.get(table.lower())
        if side is None:
            raise ConditionError(
                f"unknown table alias {table!r} in the join condition; use one of {', '.join(self.sides)}"
            )
        var, columns = side
        if name not in columns:
            raise ConditionError(
                f"unknown column {table}.{name} in the join condition; {table} has columns {', '.join(columns)}"
            )
        return f"{var}[{list(columns).index(name)}]"

    def compile(self, node: exp.Expression) -> str:
        if isinstance(node, exp.Paren):
            return self.compile(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return repr(node.this)
            text = node.this
            digits = sum(c.isdigit() for c in text.split("e")[0].split("E")[0])
            if digits > MAX_LITERAL_DIGITS:
                raise ConditionError(f"the numeric literal {text[:20]}... has {digits} digits; at most "
                                     f"{MAX_LITERAL_DIGITS} (Flink SQL's DECIMAL(38))")
            return repr(float(text) if any(c in text for c in ".eE") else int(text))
        if isinstance(node, exp.Null):
            return "None"
        if isinstance(node, exp.Boolean):
            return "True" if node.this else "False"
        if isinstance(node, exp.Not):
            return f"_not({self.compile(node.this)})"
        if isinstance(node, exp.Neg):
            return f"_neg({self.compile(node.this)})"
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise ConditionError(f"only IS [NOT] NULL is supported, not {node.sql()!r}")
            return f"({self.compile(node.this)} is None)"
        if isinstance(node, (exp.Like, exp.ILike)):
            return self.like(node, escape=None)
        if isinstance(node, exp.Escape) and isinstance(node.this, (exp.Like, exp.ILike)):
            esc = node.expression
            if not (isinstance(esc, exp.Literal) and esc.is_string and len(esc.this) == 1):
                raise ConditionError("LIKE ... ESCAPE takes a one-character string literal")
            return self.like(node.this, escape=esc.this)
        if isinstance(node, exp.In):
            if node.args.get("query") is not None:
                raise ConditionError("subqueries are not supported in the join condition")
            options = ", ".join(self.compile(e) for e in node.expressions)
            return f"_in({self.compile(node.this)}, ({options},))"
        if isinstance(node, exp.Between):
            value = self.compile(node.this)
            low, high = self.compile(node.args["low"]), self.compile(node.args["high"])
            return f"_and(_ge({value}, {low}), _le({value}, {high}))"
        if isinstance(node, (exp.And, exp.Or)):
            # A chain of one connective is one call, however long: walked without recursion, so
            # neither this compiler nor Python's parser (at most 200 nested parentheses) meets its depth.
            operands, todo = [], [node]
            while todo:
                current = todo.pop()
                if type(current) is type(node):
                    todo += [current.expression, current.this]
                else:
                    operands.append(current)
            return f"{_BINARY[type(node).__name__]}({', '.join(self.compile(o) for o in operands)})"
        fn = _BINARY.get(type(node).__name__)
        if fn is not None and isinstance(node, exp.Binary):
            return f"{fn}({self.compile(node.this)}, {self.compile(node.expression)})"
        raise ConditionError(f"unsupported expression {node.sql()!r} in the join condition; supported: {SUPPORTED}")

    def like(self, node: exp.Expression, escape: str | None) -> str:
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise ConditionError(f"LIKE needs a string literal pattern: {node.sql()!r}")
        regex = _like_regex(pattern.this, escape)
        if isinstance(node, exp.ILike):
            regex = re.compile(regex.pattern, re.DOTALL | re.IGNORECASE)
        test = f"_like({self.compile(node.this)}, {self.constant(regex)})"
        # sqlglot parses `a NOT LIKE p` as a LIKE node with negate set (not as NOT over LIKE)
        return f"_not({test})" if node.args.get("negate") else test


def compile_condition(
    sql: "str | exp.Expression",
    left_columns: Sequence[str],
    right_columns: Sequence[str],
    left_alias: str = "l",
    right_alias: str = "r",
    left_types: Sequence[str] | None = None,
    right_types: Sequence[str] | None = None,
) -> Condition:
    """Compile ``sql`` (over ``<left_alias>.<col>`` and ``<right_alias>.<col>``) to ``cond(l, r)``.

    With the columns' type families (``left_types``, ``right_types``: ``integer``, ``float``,
    ``decimal``, ``string``, ``bytes``, ``boolean``, ``timestamp``, ``date``, ``time`` or
    ``other``), the condition is type-checked first: operands that SQL could not compare or
    compute with (a string with a number...) are a ConditionError, not a failure per record."""
    import sqlglot

    global exp
    from sqlglot import expressions as exp

    if isinstance(sql, str):
        try:
            tree = sqlglot.parse_one(sql)
        except sqlglot.errors.ParseError as err:
            raise ConditionError(f"cannot parse join condition {sql!r}: {err}") from None
    else:
        tree = sql
    sides = {left_alias.lower(): ("L", list(left_columns)), right_alias.lower(): ("R", list(right_columns))}
    compiler = _Compiler(sides)
    body = compiler.compile(tree)
    if left_types is not None and right_types is not None:
        _Types(compiler, {"L": list(left_types), "R": list(right_types)}).check(tree)
    namespace = dict(_RUNTIME, **compiler.constants)
    try:
        fn = eval(f"lambda L, R: {body}", namespace)  # noqa: S307 - source generated above from a parsed tree
    except (SyntaxError, RecursionError, MemoryError):  # Python's parser nests at most 200 parentheses
        raise ConditionError("the join condition nests too deeply to compile; simplify it") from None
    fn.sql = tree.sql()
    return fn


_NUMBERS = frozenset({"integer", "float", "decimal"})


def comparable(a: str | None, b: str | None) -> bool:
    """Values of these type families can be compared (None: a NULL, comparable with anything)."""
    return a is None or b is None or a == b or (a in _NUMBERS and b in _NUMBERS)


def _a(family: str | None) -> str:
    return "NULL" if family is None else ("an " if family[0] in "aeiou" else "a ") + family


class _Types:
    """Infers the type family of each node of a compiled condition and refuses what SQL would."""

    def __init__(self, compiler: _Compiler, types: dict[str, list[str]]):
        self.compiler, self.types = compiler, types

    def fail(self, node, why: str):
        raise ConditionError(f"the join condition's {node.sql()!r} {why}")

    def check(self, node) -> None:
        family = self.family(node)
        if family not in (None, "boolean"):
            self.fail(node, f"is {_a(family)}, not a condition (TRUE/FALSE)")

    def family(self, node) -> str | None:
        if isinstance(node, exp.Paren):
            return self.family(node.this)
        if isinstance(node, exp.Column):
            ref = self.compiler.column(node)  # "L[3]"
            return self.types[ref[0]][int(ref[2:-1])]
        if isinstance(node, exp.Literal):
            if node.is_string:
                return "string"
            return "float" if any(c in node.this for c in ".eE") else "integer"
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return "boolean"
        if isinstance(node, (exp.Not, exp.And, exp.Or)):
            for operand in (node.this, node.args.get("expression")):
                if operand is not None and self.family(operand) not in (None, "boolean"):
                    self.fail(node, f"applies {type(node).__name__.upper()} to {_a(self.family(operand))}")
            return "boolean"
        if isinstance(node, exp.Is):
            self.family(node.this)
            return "boolean"
        if isinstance(node, exp.Escape):
            return self.family(node.this)
        if isinstance(node, (exp.Like, exp.ILike)):
            if self.family(node.this) not in (None, "string"):
                self.fail(node, f"matches {_a(self.family(node.this))} with LIKE, which takes strings")
            return "boolean"
        if isinstance(node, (exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
            operands = [self.family(node.this)]
            if not isinstance(node, exp.Neg):
                operands.append(self.family(node.expression))
            for family in operands:
                if family not in (None, *_NUMBERS):
                    self.fail(node, f"computes with {_a(family)}; arithmetic takes numbers")
            if "decimal" in operands and "float" in operands:
                self.fail(node, "mixes a DECIMAL with a floating-point number; cast one of them in the input")
            known = [f for f in operands if f is not None]
            return "decimal" if "decimal" in known else "float" if "float" in known else known[0] if known else None
        operands = []
        if isinstance(node, exp.In):
            operands = [node.this, *node.expressions]
        elif isinstance(node, exp.Between):
            operands = [node.this, node.args["low"], node.args["high"]]
        elif isinstance(node, exp.Binary):  # comparisons
            operands = [node.this, node.expression]
        families = [self.family(o) for o in operands]
        for family in families[1:]:
            if not comparable(families[0], family):
                self.fail(node, f"compares {_a(families[0])} with {_a(family)}")
        if any(f == "other" for f in families):
            self.fail(node, "compares values of a record, array or map type")
        return "boolean"

"""Typed expressions (``functions.py``'s nodes) into one Python function, compiled once.

A plan's expressions are compiled on each worker when the plan is built (once per process), into
the source of one plain Python function per place (the extra condition of a join, an input's
filter and projection, the output's filter and projection), straight-line code with a local per
value and the NULL checks written out: evaluating it per row costs what that code costs, no tree
is walked per row. Operands that must not be evaluated unless needed (the branches of CASE,
COALESCE's later arguments, the right side of AND / OR) are under an ``if``.

A failure while computing a value (a CAST Flink fails on, an integer division by zero, a date
beyond the year 9999) is raised as :class:`ExpressionError` naming the expression as the user
wrote it and the reason; the caller dead-letters the row (the join stage lets the key's records
go to the dead-letter topic, as for any failure of the join).
"""
from __future__ import annotations

import datetime as _dt
import warnings
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Callable, Sequence

from . import runtime as _rt
from . import types as T
from .functions import CATALOG, cast_expression, coerce, compare_atoms, comparison_type, type_of
from .runtime import ExpressionError

#: The most operands a CASE may have before its code nests too deeply for Python's parser.
MAX_BRANCHES = 40


class CompileError(ValueError):
    """The expressions cannot be compiled (nested too deeply): the message says what to simplify."""


class _Gen:
    """Writes one function's body: statements into ``lines``, one local per value."""

    def __init__(self, rows: dict[str, str]):
        self.rows = rows  # a column node's row code -> the Python name of that row
        self.lines: list[str] = []
        self.depth = 1
        self.count = 0
        self.constants: dict[str, object] = {}
        self.columns: dict[tuple[str, int], str] = {}  # (row code, index) -> the local holding it

    def tmp(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def line(self, code: str) -> None:
        self.lines.append("    " * self.depth + code)

    def const(self, value) -> str:
        name = f"k{len(self.constants)}"
        self.constants[name] = value
        return name

    def may_be_null(self, node) -> bool:
        """Whether the value may be NULL when the code runs: a nullable type, or any call (a few
        functions return NULL for NOT NULL operands: a DECIMAL overflow, SUBSTRING of a negative
        length, ...; Flink writes such a NULL into its NOT NULL column, changejoin checks)."""
        kind = node[0]
        if kind == "call":
            return True
        if kind == "sym":
            return False
        return type_of(node).nullable

    # -- values -----------------------------------------------------------------------------------
    def atom(self, node) -> str:
        """A Python expression for ``node``'s value that is cheap to repeat (a local, a constant,
        a row's column), its statements written first."""
        kind = node[0]
        if kind == "col":  # read once into a local at the function's start (:func:`_build`)
            key = (node[2], node[3])
            local = self.columns.get(key)
            if local is None:
                local = self.columns[key] = f"{self.rows[node[2]]}_{node[3]}"
            return local
        if kind == "lit":
            return self.literal(node)
        if kind == "sym":
            return repr(node[2])
        return self.call(node)

    def literal(self, node) -> str:
        value = literal_value_of(node)
        if value is None or isinstance(value, (bool, int)) or isinstance(value, str) and len(value) < 40:
            return repr(value)
        return self.const(value)

    def call(self, node) -> str:
        name = node[2]
        special = _SPECIAL.get(name)
        if special is not None:
            return special(self, node)
        fn = CATALOG[name]
        operands = node[3:]
        atoms = [self.atom(o) for o in operands]
        expr = fn.emit(self, node, atoms)
        checks = [a for a, o in zip(atoms, operands) if fn.strict and o[0] != "sym" and self.may_be_null(o)]
        t = self.tmp()
        if checks:
            self.line(f"{t} = None if {' or '.join(f'{a} is None' for a in dict.fromkeys(checks))} else {expr}")
        else:
            self.line(f"{t} = {expr}")
        return t

    def indented(self):
        gen = self

        class _Block:
            def __enter__(self):
                gen.depth += 1

            def __exit__(self, *exc):
                gen.depth -= 1

        return _Block()


def literal_value_of(node):
    """The Python value of a literal node (its JSON value read by its type)."""
    t = type_of(node)
    value = node[2]
    if value is None:
        return None
    if t.is_decimal:
        return Decimal(value)
    if t.is_approximate:
        return float(value)
    if t.root == "DATE":
        return _dt.date.fromisoformat(value)
    if t.root == "TIMESTAMP":
        return _dt.datetime.fromisoformat(value).replace(tzinfo=_rt.UTC)
    if t.root == "TIME":
        return _dt.time.fromisoformat(value)
    if t.is_binary:
        return bytes.fromhex(value)
    return value


# -- special forms: evaluate their operands lazily or treat NULL themselves -------------------------
def _and_or(gen: _Gen, node) -> str:
    is_and = node[2] == "AND"
    stop = "False" if is_and else "True"
    t = gen.tmp()
    first = gen.atom(node[3])
    gen.line(f"{t} = {first}")
    for operand in node[4:]:
        gen.line(f"if {t} is not {stop}:")
        with gen.indented():
            value = gen.atom(operand)
            gen.line(f"{t} = {stop} if {value} is {stop} else (None if {t} is None or {value} is None else {is_and})")
    return t


def _case(gen: _Gen, node) -> str:
    operands = node[3:]
    if len(operands) > MAX_BRANCHES * 2 + 1:
        raise CompileError(f"a CASE with more than {MAX_BRANCHES} branches")
    result = type_of(node)
    t = gen.tmp()
    pairs = list(zip(operands[0:-1:2], operands[1:-1:2]))
    depth = 0
    for condition, value in pairs:
        c = gen.atom(condition)
        gen.line(f"if {c} is True:")
        with gen.indented():
            _assign(gen, t, value, result)
        gen.line("else:")
        gen.depth += 1
        depth += 1
    _assign(gen, t, operands[-1], result)
    gen.depth -= depth
    return t


def _assign(gen: _Gen, target: str, node, result: T.SqlType) -> None:
    value = gen.atom(node)
    source = type_of(node)
    converted = coerce(gen, value, source, result)
    if converted == value:
        gen.line(f"{target} = {value}")
    elif gen.may_be_null(node):
        gen.line(f"{target} = None if {value} is None else {converted}")
    else:
        gen.line(f"{target} = {converted}")


def _coalesce(gen: _Gen, node) -> str:
    """COALESCE / IFNULL: every operand is evaluated (Flink's are: a failing later operand fails
    the row even when an earlier one is not NULL), the first that is not NULL taken."""
    result = type_of(node)
    t = gen.tmp()
    values = [(gen.atom(o), o) for o in node[3:]]
    gen.line(f"{t} = None")
    for value, operand in values:
        converted = coerce(gen, value, type_of(operand), result)
        gen.line(f"if {t} is None and {value} is not None:")
        with gen.indented():
            gen.line(f"{t} = {converted}")
    placeholder = _PRIMITIVE_PLACEHOLDERS.get(result.root)
    if not result.nullable and placeholder is not None:
        # every operand NULL though one's type is NOT NULL (a DECIMAL cast that overflows): Flink's
        # code does not look at a NOT NULL primitive's null flag and reads the value its variable
        # was declared with (CodeGenUtils.primitiveDefaultValue: -1, -1.0, FALSE)
        gen.line(f"if {t} is None:")
        with gen.indented():
            gen.line(f"{t} = {gen.const(placeholder)}")
    return t


#: CodeGenUtils.primitiveDefaultValue: what a Java primitive of Flink's generated code holds
#: before (or instead of) a value.
_PRIMITIVE_PLACEHOLDERS = {"BOOLEAN": False, "TINYINT": -1, "SMALLINT": -1, "INT": -1, "BIGINT": -1, "FLOAT": -1.0,
                           "DOUBLE": -1.0, "DATE": _dt.date(1969, 12, 31)}


def _nullif(gen: _Gen, node) -> str:
    a_node, b_node = node[3], node[4]
    a, b = gen.atom(a_node), gen.atom(b_node)
    common = comparison_type("NULLIF", [a_node, b_node])
    x, y = compare_atoms(gen, [a_node, b_node], [a, b], common)
    t = gen.tmp()
    gen.line(f"{t} = None if {a} is None or ({b} is not None and {x} == {y}) else {a}")
    return t


def _try_cast(gen: _Gen, node) -> str:
    """TRY_CAST: NULL where the CAST fails; a value changejoin cannot hold (a date before the
    year 1, which Flink would give) still fails."""
    value = gen.atom(node[3])
    t = gen.tmp()
    expr = cast_expression(gen, value, type_of(node[3]), type_of(node))
    gen.line("try:")
    with gen.indented():
        gen.line(f"{t} = None if {value} is None else {expr}")
    gen.line("except _OutOfRange:")
    with gen.indented():
        gen.line("raise")
    gen.line("except Exception:")
    with gen.indented():
        gen.line(f"{t} = None")
    return t


def _concat_ws(gen: _Gen, node) -> str:
    atoms = [gen.atom(o) for o in node[3:]]
    t = gen.tmp()
    gen.line(f"{t} = None if {atoms[0]} is None else _rt.concat_ws({', '.join(atoms)})")
    return t


def _not_distinct(gen: _Gen, node) -> str:
    operands = node[3:]
    a, b = (gen.atom(o) for o in operands)
    x, y = compare_atoms(gen, operands, [a, b], comparison_type("IS NOT DISTINCT FROM", operands))
    t = gen.tmp()
    gen.line(f"{t} = ({a} is None and {b} is None) if {a} is None or {b} is None else {x} == {y}")
    return t


def _between(gen: _Gen, node) -> str:
    operands = node[3:]
    atoms = [gen.atom(o) for o in operands]
    x, low, high = compare_atoms(gen, operands, atoms, comparison_type("BETWEEN", operands))
    ge, le, t = gen.tmp(), gen.tmp(), gen.tmp()
    gen.line(f"{ge} = None if {atoms[0]} is None or {atoms[1]} is None else {x} >= {low}")
    gen.line(f"{le} = None if {atoms[0]} is None or {atoms[2]} is None else {x} <= {high}")
    gen.line(f"{t} = False if {ge} is False or {le} is False else (None if {ge} is None or {le} is None else True)")
    return t


def _in(gen: _Gen, node) -> str:
    operands = node[3:]
    atoms = [gen.atom(o) for o in operands]
    values = compare_atoms(gen, operands, atoms, comparison_type("IN", operands))
    first = type_of(operands[0])
    if first.root == "CHAR":
        # Flink compares a CHAR(n) literal with the list's other strings cast to CHAR(n):
        # truncated or padded to n characters.
        n = first.precision
        values = [values[0]] + [f"(None if {v} is None else _rt.pad_char({v}[:{n}], {n}))"
                                if o[0] != "lit" and type_of(o).is_string else v
                                for v, o in zip(values[1:], operands[1:])]
    t = gen.tmp()
    options = f"({', '.join(values[1:])},)"
    gen.line(f"{t} = None if {atoms[0]} is None else _rt_in({values[0]}, {options})")
    return t


def _like(gen: _Gen, node) -> str:
    operands = node[3:]
    pattern = operands[1]
    escape = operands[2] if len(operands) > 2 else None
    if pattern[0] == "lit" and pattern[2] is not None and (escape is None or escape[0] == "lit"):
        regex = _rt.like_regex(pattern[2], None if escape is None else escape[2])
        if node[2] == "ILIKE":
            import re

            regex = re.compile(regex.pattern, re.DOTALL | re.IGNORECASE)
        k = gen.const(regex)
        value = gen.atom(operands[0])
        t = gen.tmp()
        gen.line(f"{t} = None if {value} is None else {k}.fullmatch({value}) is not None")
        return t
    fn = CATALOG[node[2]]
    atoms = [gen.atom(o) for o in operands]
    t = gen.tmp()
    checks = " or ".join(f"{a} is None" for a in atoms)
    gen.line(f"{t} = None if {checks} else {fn.emit(gen, node, atoms)}")
    return t


_SPECIAL: dict[str, Callable] = {
    "AND": _and_or, "OR": _and_or, "CASE": _case, "IF": _case, "COALESCE": _coalesce, "IFNULL": _coalesce,
    "NULLIF": _nullif, "TRY_CAST": _try_cast, "CONCAT_WS": _concat_ws, "IS NOT DISTINCT FROM": _not_distinct,
    "BETWEEN": _between, "IN": _in, "LIKE": _like, "ILIKE": _like,
}


def in_list(value, options):
    """SQL's ``value IN (options)``: TRUE if one equals it, else NULL if one is NULL, else FALSE."""
    unknown = False
    for option in options:
        if option is None:
            unknown = True
        elif value == option:
            return True
    return None if unknown else False


_NAMESPACE = {"_rt": _rt, "_Decimal": Decimal, "_OutOfRange": _rt.OutOfRange, "_ROUND_HALF_UP": ROUND_HALF_UP, "_ROUND_DOWN": ROUND_DOWN,
              "_rt_in": in_list, "_ExpressionError": ExpressionError}


# -- the compiled functions --------------------------------------------------------------------------
def _failure(sql: str, err: Exception) -> ExpressionError:
    if isinstance(err, ExpressionError):
        return type(err)(f"{sql}: {err}")
    return ExpressionError(f"{sql}: {type(err).__name__}: {err}")


def _guarded(gen: _Gen, node, sql: str, failures: list, not_null: bool = False) -> str:
    """``node``'s value into a local, the statements under a ``try`` that names ``sql`` in the
    error (a plain column needs neither)."""
    if node[0] in ("col", "lit"):
        return gen.atom(node)
    failures.append(sql)
    index = len(failures) - 1
    gen.line("try:")
    gen.depth += 1
    value = gen.atom(node)
    if not_null:
        gen.line(f"if {value} is None:")
        with gen.indented():
            gen.line("raise _ExpressionError('NULL in a NOT NULL column')")
    gen.depth -= 1
    gen.line("except Exception as err:")
    with gen.indented():
        gen.line(f"raise _failure(_sqls[{index}], err) from None")
    return value


def _build(gen: _Gen, header: str, failures: list, name: str):
    # Each column the code reads is read from its row once: a local is cheaper to repeat.
    reads = [f"    {local} = {gen.rows[row]}[{index}]" for (row, index), local in gen.columns.items()]
    source = f"def {name}({header}):\n" + "\n".join(reads + gen.lines) + "\n"
    namespace = dict(_NAMESPACE, _failure=_failure, _sqls=tuple(failures), **gen.constants)
    try:
        with warnings.catch_warnings():  # "x is True" of a literal: meant, and harmless
            warnings.simplefilter("ignore", SyntaxWarning)
            code = compile(source, f"<changejoin {name}>", "exec")
        exec(code, namespace)  # noqa: S102 - generated from typed nodes
    except (SyntaxError, RecursionError, MemoryError) as err:
        raise CompileError(f"the expressions nest too deeply to compile ({err}); simplify them") from None
    fn = namespace[name]
    fn.source = source
    return fn


def compile_condition(node, sql: str, rows: Sequence[str] = ("L", "R")) -> Callable:
    """``cond(*rows) -> True | False | None`` for a BOOLEAN expression over the rows ``rows``
    (their codes in the column nodes); an error while evaluating is an ExpressionError naming
    ``sql``."""
    gen = _Gen({code: code for code in rows})
    failures: list = []
    try:
        value = _guarded(gen, node, sql, failures)
    except RecursionError:
        raise CompileError("the condition nests too deeply to compile; simplify it") from None
    gen.line(f"return {value}")
    return _build(gen, ", ".join(rows), failures, "condition")


def compile_projection(columns: Sequence, sqls: Sequence[str], where=None, where_sql: str = "",
                       rows: Sequence[str] = ("I",)) -> Callable:
    """``calc(*rows) -> tuple | None``: the values of ``columns`` (typed nodes, each named by its
    SQL in ``sqls`` for errors), None when ``where`` is given and not TRUE for the row. A computed
    value that is NULL where its type is NOT NULL is an error, as Flink's sink refuses it."""
    gen = _Gen({code: code for code in rows})
    failures: list = []
    try:
        if where is not None:
            keep = _guarded(gen, where, where_sql, failures)
            gen.line(f"if {keep} is not True:")
            with gen.indented():
                gen.line("return None")
        values = [_guarded(gen, node, sql, failures, not_null=node[0] == "call" and not type_of(node).nullable)
                  for node, sql in zip(columns, sqls)]
    except RecursionError:
        raise CompileError("the expressions nest too deeply to compile; simplify them") from None
    gen.line(f"return ({''.join(v + ', ' for v in values)})")
    return _build(gen, ", ".join(rows), failures, "projection")

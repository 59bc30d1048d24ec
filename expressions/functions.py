"""Every function and operator the expressions take: Flink 2.3's type derivation for each, and the
Python each compiles to.

One :class:`Function` per name: ``infer(args)`` derives the result type from the operands' typed
nodes (or refuses them with a :class:`~expressions.types.TypeError_` naming what is wrong), and
``emit(gen, node, atoms)`` writes the Python that computes the value from the operands' values
(``codegen.py`` evaluates the operands and, for a *strict* function, returns NULL when one is
NULL before the emitted code runs). The semantics themselves live in ``runtime.py``.

A typed node (what ``parse.py`` builds and a plan carries) is a JSON list: ``["col", type, row,
index]``, ``["lit", type, value]``, ``["sym", None, word]`` (a keyword argument: a time unit, a
TRIM side) or ``["call", type, NAME, *operands]``, ``type`` written as ``str(SqlType)``.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable

from . import types as T
from .types import SqlType, TypeError_, parse_type

#: Functions whose result changes from call to call: refused, as a retraction must reproduce the
#: row it retracts (Flink's non-deterministic update problem).
NON_DETERMINISTIC = ("NOW", "CURRENT_TIMESTAMP", "CURRENT_DATE", "CURRENT_TIME", "LOCALTIME", "LOCALTIMESTAMP",
                     "CURRENT_ROW_TIMESTAMP", "RAND", "RAND_INTEGER", "UUID", "PROCTIME", "UNIX_TIMESTAMP")

TIME_UNITS = ("MILLENNIUM", "CENTURY", "DECADE", "YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE",
              "SECOND", "MILLISECOND", "MICROSECOND", "NANOSECOND", "DOW", "ISODOW", "DOY", "ISOYEAR", "EPOCH")
EXTRACT_UNITS = TIME_UNITS
TIMESTAMPADD_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND", "MILLISECOND",
                      "MICROSECOND")
FLOOR_UNITS = ("MILLENNIUM", "CENTURY", "DECADE", "YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE",
               "SECOND", "MILLISECOND")


def type_of(node) -> SqlType:
    return _type(node[1])


_TYPES: dict = {}


def _type(text: str) -> SqlType:
    t = _TYPES.get(text)
    if t is None:
        t = _TYPES[text] = parse_type(text)
    return t


def literal_value(node):
    """The value of a literal operand (a ``lit`` node), or a ``sym``'s word; None otherwise."""
    return node[2] if node[0] in ("lit", "sym") else None


def is_literal(node) -> bool:
    return node[0] == "lit"


@dataclass(frozen=True)
class Function:
    name: str
    infer: Callable  # (operands) -> SqlType
    emit: Callable  # (gen, node, atoms) -> Python expression
    strict: bool = True  # NULL in any operand is NULL out (the generated code checks first)
    arity: tuple = (1, 1)  # (fewest, most) operands; most None: any
    signature: str = ""  # as docs/sql.md lists it


CATALOG: dict[str, Function] = {}


def _register(name: str, infer, emit, strict: bool = True, arity=(1, 1), signature: str = "") -> None:
    CATALOG[name] = Function(name, infer, emit, strict, arity, signature)


def function(name: str) -> Function | None:
    return CATALOG.get(name)


def nearest(name: str) -> str | None:
    """The supported function whose name is nearest ``name`` (for a refusal), or None."""
    names = [n for n in CATALOG if n.isalpha() or "_" in n]
    found = difflib.get_close_matches(name.upper(), names, n=1, cutoff=0.5)
    return found[0] if found else None


def _nullable(operands) -> bool:
    return any(type_of(o).nullable for o in operands)


def _fail(message: str):
    raise TypeError_(message)


def _describe(t: SqlType) -> str:
    return str(t.with_nullable(True))


# -- numeric helpers ------------------------------------------------------------------------------
def _numeric(name: str, operands) -> list[SqlType]:
    types = [type_of(o) for o in operands]
    for t in types:
        if not (t.is_numeric or t.is_null):
            _fail(f"{name} takes numbers, not {_describe(t)}")
    return types


def arithmetic_type(op: str, a: SqlType, b: SqlType) -> SqlType:
    """The type of ``a op b`` for + - * / (Flink's rules), nullable when either is."""
    nullable = a.nullable or b.nullable
    if a.is_null and b.is_null:
        return T.INT.with_nullable(True)
    a = b if a.is_null else a
    b = a if b.is_null else b
    if a.is_integer and b.is_integer:
        return SqlType(T.wider_integer(a, b), nullable=nullable)
    if a.is_exact and b.is_exact:
        rule = {"+": T.decimal_add, "-": T.decimal_add, "*": T.decimal_multiply, "/": T.decimal_divide}[op]
        p, s = rule(a, b)
        return T.decimal(p, s, nullable)
    if a.is_decimal or b.is_decimal:
        return T.DOUBLE.with_nullable(nullable)
    if a.root == "DOUBLE" and b.is_integer or b.root == "DOUBLE" and a.is_integer or "DOUBLE" in (a.root, b.root) and \
            "FLOAT" not in (a.root, b.root):
        return T.DOUBLE.with_nullable(nullable)
    return T.FLOAT.with_nullable(nullable)


def coerce(gen, atom: str, source: SqlType, target: SqlType) -> str:
    """A Python expression of ``atom`` (a non-NULL value of ``source``) as a value of ``target``,
    for the implicit conversions of arithmetic, comparisons and CASE branches. A literal is
    converted once, here (the generated code holds the converted constant)."""
    expression = _coerce(gen, atom, source, target)
    if expression != atom and gen is not None and _is_constant(gen, atom):
        from . import runtime as _rt
        from decimal import Decimal as _Decimal

        try:
            value = eval(expression, {"_rt": _rt, "_Decimal": _Decimal, "float": float, **gen.constants})  # noqa: S307
        except Exception:  # noqa: BLE001 - it fails per row then, as Flink's would
            return expression
        if value is None or isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return gen.const(value)
        return gen.const(value) if not isinstance(value, (int, float, str)) or isinstance(value, bool) else repr(value)
    return expression


def _is_constant(gen, atom: str) -> bool:
    """``atom`` is a literal: a constant of the generated code, or a Python literal it wrote."""
    if atom in gen.constants:
        return True
    import ast

    try:
        ast.literal_eval(atom)
    except (ValueError, SyntaxError):
        return False
    return True


def _coerce(gen, atom: str, source: SqlType, target: SqlType) -> str:
    if source.root == target.root or source.is_null:
        if target.is_decimal and source.is_decimal and (source.precision, source.scale) != (target.precision,
                                                                                             target.scale):
            return f"_rt.dfit({atom}, {target.precision}, {target.scale})"
        return atom
    if target.is_decimal and source.is_integer:
        return f"_rt.dfit(_Decimal({atom}), {target.precision}, {target.scale})"
    if target.root == "DOUBLE":
        if source.is_decimal:
            return f"_rt.to_double_from_decimal({atom}, {source.precision})"
        if source.is_integer or source.root == "FLOAT":
            return f"float({atom})"
    if target.root == "FLOAT":
        if source.is_decimal:
            return f"_rt.f32(_rt.to_double_from_decimal({atom}, {source.precision}))"
        if source.is_integer:
            return f"_rt.f32(float({atom}))"
        if source.root == "DOUBLE":
            return f"_rt.f32({atom})"
    if target.is_integer and source.is_integer:
        return atom
    if target.is_string and source.is_string or target.is_binary and source.is_binary:
        return atom
    if target.root == "TIMESTAMP" and source.root == "TIMESTAMP":
        return atom
    raise TypeError_(f"cannot convert {_describe(source)} to {_describe(target)}")


# -- arithmetic -----------------------------------------------------------------------------------
def _infer_arith(op: str):
    def infer(operands):
        a, b = (type_of(o) for o in operands)
        if op in "+-" and (a.is_datetime or b.is_datetime):
            return _datetime_arith(op, a, b, operands)
        _numeric(op, operands)
        if op == "*" and any(map(_boolean_literal_cast, operands)) and any(map(_reads_columns, operands)):
            # Flink's planner fails on it (an AssertionError: "cannot cast false as class
            # java.math.BigDecimal" when simplifying the product), whatever the number types
            _fail("Flink's planner fails on a CAST of a BOOLEAN literal multiplied by a value of a column; "
                  "write the number instead (0 for FALSE, 1 for TRUE)")
        return arithmetic_type(op, a, b)

    return infer


def _boolean_literal_cast(node) -> bool:
    """``node`` is a CAST (of a CAST...) of a BOOLEAN literal: CAST(FALSE AS DECIMAL(5, 3))."""
    if node[0] != "call" or node[2] != "CAST":
        return False
    while node[0] == "call" and node[2] == "CAST":
        node = node[3]
    return node[0] == "lit" and type_of(node).root == "BOOLEAN"


def _datetime_arith(op: str, a: SqlType, b: SqlType, operands) -> SqlType:
    if a.is_datetime and b.is_interval and a.root != "TIME":
        return a.with_nullable(a.nullable or b.nullable)
    if op == "+" and b.is_datetime and a.is_interval and b.root != "TIME":
        return b.with_nullable(a.nullable or b.nullable)
    _fail(f"'{op}' of {_describe(a)} and {_describe(b)}: a DATE or TIMESTAMP takes + or - an INTERVAL "
          "(TIMESTAMPDIFF subtracts two of them)")


def _emit_arith(op: str):
    def emit(gen, node, atoms):
        result = type_of(node)
        a_node, b_node = node[3], node[4]
        a_t, b_t = type_of(a_node), type_of(b_node)
        a, b = atoms
        if result.is_datetime:
            return _emit_datetime_arith(op, result, a, b, a_t, b_t)
        if result.is_integer:
            wrap = f"_rt.wrap{T.INTEGER_BITS[result.root]}"
            if op == "/":
                return f"{wrap}(_rt.idiv({a}, {b}))"
            return f"{wrap}({a} {op} {b})"
        if result.is_decimal:
            fn = {"+": "dadd", "-": "dsub", "*": "dmul", "/": "ddiv"}[op]
            return f"_rt.{fn}({a}, {b}, {result.precision}, {result.scale})"
        a, b = coerce(gen, a, a_t, result), coerce(gen, b, b_t, result)
        expr = f"_rt.fdiv({a}, {b})" if op == "/" else f"({a} {op} {b})"
        return f"_rt.f32({expr})" if result.root == "FLOAT" else expr

    return emit


def _emit_datetime_arith(op: str, result: SqlType, a: str, b: str, a_t: SqlType, b_t: SqlType) -> str:
    value, interval, interval_t = (a, b, b_t) if a_t.is_datetime else (b, a, a_t)
    amount = interval if op == "+" else f"-{interval}"
    if result.root == "DATE":
        if interval_t.root == "INTERVAL_YEAR_MONTH":
            return f"_rt.date_add_months({value}, {amount})"
        return f"_rt.date_add_millis({value}, {amount})"
    if interval_t.root == "INTERVAL_YEAR_MONTH":
        return f"_rt.add_months({value}, {amount})"
    return f"_rt.add_millis({value}, {amount})"


def _infer_mod(operands):
    a, b = _numeric("MOD", operands)
    for t in (a, b):
        if t.is_approximate:
            _fail(f"MOD takes exact numbers (integers, DECIMAL), not {_describe(t)}")
    nullable = a.nullable or b.nullable
    if a.is_integer and b.is_integer or b.is_null or a.is_null:
        return (b if not b.is_null else a).with_nullable(nullable)
    (_, s1), (_, s2) = T.as_decimal(a), T.as_decimal(b)
    if s1 == 0 and s2 == 0:  # Flink's MOD of two scale-0 numbers is of the divisor's type
        return b.with_nullable(nullable)
    p, s = T.decimal_modulo(a, b)
    return T.decimal(p, s, nullable)


def _emit_mod(gen, node, atoms):
    result = type_of(node)
    a, b = atoms
    a_t, b_t = type_of(node[3]), type_of(node[4])
    if result.is_integer:
        if a_t.is_decimal or b_t.is_decimal:
            return f"int(_rt.dmod({a}, {b}, 38, 0))"
        return f"_rt.imod({a}, {b})"
    return f"_rt.dmod({a}, {b}, {result.precision}, {result.scale})"


def _infer_negate(operands):
    t = type_of(operands[0])
    if t.is_interval:
        return t
    _numeric("unary minus", operands)
    return t


def _emit_negate(gen, node, atoms):
    t = type_of(node)
    if t.is_integer:
        return f"_rt.wrap{T.INTEGER_BITS[t.root]}(-{atoms[0]})"
    if t.is_decimal:
        return f"_rt.dneg({atoms[0]})"
    return f"(-{atoms[0]})"


_register("+", _infer_arith("+"), _emit_arith("+"), arity=(2, 2), signature="a + b")
_register("-", _infer_arith("-"), _emit_arith("-"), arity=(2, 2), signature="a - b")
_register("*", _infer_arith("*"), _emit_arith("*"), arity=(2, 2), signature="a * b")
_register("/", _infer_arith("/"), _emit_arith("/"), arity=(2, 2), signature="a / b")
_register("MOD", _infer_mod, _emit_mod, arity=(2, 2), signature="MOD(a, b), a % b")
_register("NEGATE", _infer_negate, _emit_negate, signature="-a")


# -- comparisons ----------------------------------------------------------------------------------
def comparison_type(name: str, operands) -> SqlType:
    """The type the operands of a comparison are compared in."""
    types = [type_of(o) for o in operands]
    for t in types:
        if t.root == "OTHER":
            _fail(f"{name} compares values of a record, array, map or enum type, which SQL cannot compare here")
    common = T.common_type(types)
    if common is None:
        shown = " with ".join(dict.fromkeys(_describe(t) for t in types if not t.is_null))
        _fail(f"{name} compares {shown}; cast one of them (CAST(x AS type))")
    return common


def compare_atoms(gen, operands, atoms, common: SqlType) -> list[str]:
    """The operands' values as compared in ``common``: numbers compared with a FLOAT or DOUBLE
    become doubles, as in Flink (Python compares an int and a Decimal exactly, as Flink does)."""
    out = []
    for node, atom in zip(operands, atoms):
        t = type_of(node)
        if common.is_approximate and not t.is_approximate and not t.is_null:
            out.append(coerce(gen, atom, t, T.DOUBLE))
        else:
            out.append(atom)
    return out


def _infer_compare(name: str):
    def infer(operands):
        comparison_type(name, operands)
        return T.BOOLEAN.with_nullable(_nullable(operands))

    return infer


def _emit_compare(op: str):
    def emit(gen, node, atoms):
        common = comparison_type(op, node[3:])
        a, b = compare_atoms(gen, node[3:], atoms, common)
        return f"({a} {op} {b})"

    return emit


for _name, _op in (("=", "=="), ("<>", "!="), ("<", "<"), ("<=", "<="), (">", ">"), (">=", ">=")):
    _register(_name, _infer_compare(_name), _emit_compare(_op), arity=(2, 2), signature=f"a {_name} b")


def _infer_distinct(operands):
    comparison_type("IS NOT DISTINCT FROM", operands)
    return T.BOOLEAN.not_null()


_register("IS NOT DISTINCT FROM", _infer_distinct, None, strict=False, arity=(2, 2),
          signature="a IS [NOT] DISTINCT FROM b")


def _infer_between(operands):
    comparison_type("BETWEEN", operands)
    return T.BOOLEAN.with_nullable(_nullable(operands))


_register("BETWEEN", _infer_between, None, strict=False, arity=(3, 3), signature="a [NOT] BETWEEN b AND c")


def _infer_in(operands):
    comparison_type("IN", operands)
    return T.BOOLEAN.with_nullable(_nullable(operands))


_register("IN", _infer_in, None, strict=False, arity=(2, None), signature="a [NOT] IN (b, c, ...)")


def _infer_like(operands):
    for o in operands:
        t = type_of(o)
        if not (t.is_string or t.is_null):
            _fail(f"LIKE matches strings, not {_describe(t)}")
    return T.BOOLEAN.with_nullable(_nullable(operands))


def _emit_like(case_insensitive: bool):
    def emit(gen, node, atoms):
        escape = atoms[2] if len(atoms) > 2 else "None"
        if case_insensitive:
            return f"_rt.like({atoms[0]}.lower(), {atoms[1]}.lower(), {escape})"
        return f"_rt.like({atoms[0]}, {atoms[1]}, {escape})"

    return emit


_register("LIKE", _infer_like, _emit_like(False), arity=(2, 3), signature="s [NOT] LIKE pattern [ESCAPE 'c']")
_register("ILIKE", _infer_like, _emit_like(True), arity=(2, 3), signature="s [NOT] ILIKE pattern [ESCAPE 'c']")


# -- logic ----------------------------------------------------------------------------------------
def _infer_logic(name: str):
    def infer(operands):
        for o in operands:
            t = type_of(o)
            if not (t.root == "BOOLEAN" or t.is_null):
                _fail(f"{name} takes conditions (BOOLEAN), not {_describe(t)}")
        return T.BOOLEAN.with_nullable(_nullable(operands))

    return infer


_register("AND", _infer_logic("AND"), None, strict=False, arity=(2, None), signature="a AND b")
_register("OR", _infer_logic("OR"), None, strict=False, arity=(2, None), signature="a OR b")
_register("NOT", _infer_logic("NOT"), lambda gen, node, atoms: f"(not {atoms[0]})", signature="NOT a")


def _infer_is_null(operands):
    return T.BOOLEAN.not_null()


_register("IS NULL", _infer_is_null, lambda gen, node, atoms: f"({atoms[0]} is None)", strict=False,
          signature="a IS [NOT] NULL")


def _infer_is_truth(operands):
    t = type_of(operands[0])
    if not (t.root == "BOOLEAN" or t.is_null):
        _fail(f"IS TRUE / IS FALSE take a condition (BOOLEAN), not {_describe(t)}")
    return T.BOOLEAN.not_null()


_register("IS TRUE", _infer_is_truth, lambda gen, node, atoms: f"({atoms[0]} is True)", strict=False,
          signature="a IS [NOT] TRUE")
_register("IS FALSE", _infer_is_truth, lambda gen, node, atoms: f"({atoms[0]} is False)", strict=False,
          signature="a IS [NOT] FALSE")


# -- conditional ----------------------------------------------------------------------------------
def _infer_case(operands):
    """CASE: operands are cond1, value1, cond2, value2, ..., else (a NULL literal when absent)."""
    conditions, values = operands[0:-1:2], list(operands[1:-1:2]) + [operands[-1]]
    for c in conditions:
        t = type_of(c)
        if not (t.root == "BOOLEAN" or t.is_null):
            _fail(f"CASE WHEN takes a condition (BOOLEAN), not {_describe(t)}")
    result = T.common_type([type_of(v) for v in values])
    if result is None:
        _fail("the branches of CASE / IF have no common type: " + ", ".join(_describe(type_of(v)) for v in values))
    return result


_register("CASE", _infer_case, None, strict=False, arity=(3, None),
          signature="CASE WHEN c THEN a [...] [ELSE b] END, CASE x WHEN v THEN a [...] [ELSE b] END")


def _infer_if(operands):
    """IF(c, a, b): CASE's common type of the branches, nullable also where the condition is
    (FlinkSqlOperatorTable.IF: NUMERIC_FROM_ARG1_DEFAULT1_NULLABLE, the TO_NULLABLE of every
    operand), though a NULL condition takes ``b`` as CASE's does."""
    result = _infer_case(operands)
    return result.with_nullable(result.nullable or type_of(operands[0]).nullable)


_register("IF", _infer_if, None, strict=False, arity=(3, 3), signature="IF(c, a, b)")


def _infer_coalesce(operands):
    types = [type_of(o) for o in operands]
    result = T.common_type(types)
    if result is None:
        _fail("the arguments of COALESCE have no common type: " + ", ".join(_describe(t) for t in types))
    return result.with_nullable(all(t.nullable for t in types))


_register("COALESCE", _infer_coalesce, None, strict=False, arity=(1, None), signature="COALESCE(a, b, ...)")
_register("IFNULL", _infer_coalesce, None, strict=False, arity=(2, 2), signature="IFNULL(a, b)")


def _infer_nullif(operands):
    comparison_type("NULLIF", operands)
    return type_of(operands[0]).with_nullable(True)


_register("NULLIF", _infer_nullif, None, strict=False, arity=(2, 2), signature="NULLIF(a, b)")


# -- CAST ---------------------------------------------------------------------------------------------
_CAST_TARGETS = ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL", "CHAR", "VARCHAR",
                 "BINARY", "VARBINARY", "DATE", "TIMESTAMP")


def castable(source: SqlType, target: SqlType) -> bool:
    """Whether Flink casts ``source`` to ``target``."""
    if source.is_null:
        return True
    if source.root == "OTHER":
        return False
    if target.is_string:
        return True
    if source.is_string:
        return target.root in _CAST_TARGETS
    if target.is_numeric or target.root == "BOOLEAN":
        return source.is_numeric or source.root == "BOOLEAN"
    if target.is_binary:
        return source.is_binary
    if target.root == "DATE":
        return source.root in ("DATE", "TIMESTAMP")
    if target.root == "TIMESTAMP":
        return source.root in ("DATE", "TIMESTAMP")
    return False  # TIME is read from Avro columns and cast to strings, not cast to


def _infer_cast(try_cast: bool):
    def infer(operands):
        source, target = type_of(operands[0]), _type(literal_value(operands[1]))
        if not castable(source, target):
            _fail(f"{'TRY_CAST' if try_cast else 'CAST'} from {_describe(source)} to {_describe(target)} is not "
                  "supported")
        return target.with_nullable(True if try_cast else source.nullable)

    return infer


def cast_expression(gen, atom: str, source: SqlType, target: SqlType) -> str:
    """A Python expression of ``atom`` (a non-NULL ``source`` value) cast to ``target``."""
    r = target.root
    s = source.root
    if source.is_null:
        return "None"
    if target.is_string:
        text = _to_string(atom, source)
        if r == "CHAR":
            return f"_rt.pad_char(_rt.truncate_string({text}, {target.precision}), {target.precision})"
        if target.precision < T.MAX_LENGTH:
            return f"_rt.truncate_string({text}, {target.precision})"
        return text
    if source.is_string:
        if target.is_integer:
            return f"_rt.string_to_integral({atom}, {T.INTEGER_BITS[r]})"
        return {"DOUBLE": f"_rt.string_to_double({atom})", "FLOAT": f"_rt.string_to_float({atom})",
                "DECIMAL": f"_rt.string_to_decimal({atom}, {target.precision}, {target.scale})",
                "BOOLEAN": f"_rt.string_to_boolean({atom})", "DATE": f"_rt.string_to_date({atom})",
                "TIMESTAMP": f"_rt.string_to_timestamp({atom}, {target.precision})",
                "BINARY": f"_rt.string_to_bytes({atom})", "VARBINARY": f"_rt.string_to_bytes({atom})"}[r]
    if r == "BOOLEAN":
        return atom if s == "BOOLEAN" else f"({atom} != 0)"
    if target.is_integer:
        bits = T.INTEGER_BITS[r]
        if source.is_integer:
            return atom if T.INTEGER_BITS[s] <= bits else f"_rt.wrap{bits}({atom})"
        if s == "BOOLEAN":
            return f"(1 if {atom} else 0)"
        if source.is_decimal:
            return f"_rt.decimal_to_integral({atom}, {bits})"
        return f"_rt.double_to_integral({atom}, {bits})"
    if r == "DECIMAL":
        p, sc = target.precision, target.scale
        if s == "BOOLEAN":
            return f"_rt.decimal_from_int(1 if {atom} else 0, {p}, {sc})"
        if source.is_integer:
            return f"_rt.decimal_from_int({atom}, {p}, {sc})"
        if source.is_decimal:
            return f"_rt.dfit({atom}, {p}, {sc})"
        if s == "FLOAT":
            return f"_rt.decimal_from_double(float(_rt.java_float({atom})), {p}, {sc})"
        return f"_rt.decimal_from_double({atom}, {p}, {sc})"
    if r in ("DOUBLE", "FLOAT"):
        if s == "BOOLEAN":
            return f"(1.0 if {atom} else 0.0)"
        return coerce(gen, atom, source, target)
    if r == "DATE":
        return atom if s == "DATE" else f"_rt.timestamp_to_date({atom})"
    if r == "TIMESTAMP":
        if s == "DATE":
            return f"_rt.date_to_timestamp({atom})"
        return atom if target.precision >= source.precision else f"_rt.timestamp_cast({atom}, {target.precision})"
    if target.is_binary:
        return atom
    raise TypeError_(f"CAST from {_describe(source)} to {_describe(target)} is not supported")


def _to_string(atom: str, source: SqlType) -> str:
    s = source.root
    if source.is_string:
        return atom
    if source.is_integer:
        return f"str({atom})"
    return {"DOUBLE": f"_rt.java_double({atom})", "FLOAT": f"_rt.java_float({atom})",
            "DECIMAL": f"_rt.decimal_text({atom})", "BOOLEAN": f"_rt.boolean_to_string({atom})",
            "DATE": f"_rt.date_to_string({atom})",
            "TIMESTAMP": f"_rt.timestamp_to_string({atom}, {source.precision})",
            "TIME": f"_rt.time_to_string({atom}, {source.precision})",
            "BINARY": f"_rt.bytes_to_string({atom})", "VARBINARY": f"_rt.bytes_to_string({atom})"}[s]


def _emit_cast(gen, node, atoms):
    return cast_expression(gen, atoms[0], type_of(node[3]), type_of(node))


_register("CAST", _infer_cast(False), _emit_cast, arity=(2, 2), signature="CAST(a AS type)")
_register("TRY_CAST", _infer_cast(True), None, strict=False, arity=(2, 2), signature="TRY_CAST(a AS type)")


# -- strings --------------------------------------------------------------------------------------
def _strings(name: str, operands, which=None) -> None:
    for i, o in enumerate(operands):
        if which is not None and i not in which:
            continue
        t = type_of(o)
        if not (t.is_string or t.is_null):
            _fail(f"{name} takes strings, not {_describe(t)}")


def _integers(name: str, operands, which) -> None:
    for i in which:
        if i < len(operands):
            t = type_of(operands[i])
            if not (t.is_integer or t.is_null):
                _fail(f"{name} takes an integer as its argument {i + 1}, not {_describe(t)}")


def _string_result(length_of=None, always_nullable=False):
    def infer_result(operands):
        length = T.MAX_LENGTH
        if length_of is not None:
            t = type_of(operands[length_of])
            length = t.precision if t.is_string else T.MAX_LENGTH
        return T.varchar(length, always_nullable or _nullable(operands))

    return infer_result


def _string_fn(name: str, emit, arity=(1, 1), integer_args=(), result=None, strict=True, signature=""):
    def infer(operands):
        _strings(name, operands, [i for i in range(len(operands)) if i not in integer_args])
        _integers(name, operands, integer_args)
        return (result or _string_result())(operands)

    _register(name, infer, emit, strict=strict, arity=arity, signature=signature)


def _same_string_type(operands):
    t = type_of(operands[0])
    if t.is_null:
        return T.STRING
    return t.with_nullable(_nullable(operands))


_string_fn("UPPER", lambda g, n, a: f"{a[0]}.upper()", result=_same_string_type, signature="UPPER(s)")
_string_fn("LOWER", lambda g, n, a: f"{a[0]}.lower()", result=_same_string_type, signature="LOWER(s)")
_string_fn("INITCAP", lambda g, n, a: f"_rt.initcap({a[0]})", result=_same_string_type, signature="INITCAP(s)")
# REVERSE is always a nullable STRING (FlinkSqlOperatorTable.REVERSE: VARCHAR_FORCE_NULLABLE): REVERSE('a') too
_string_fn("REVERSE", lambda g, n, a: f"{a[0]}[::-1]", result=_string_result(always_nullable=True), signature="REVERSE(s)")
_string_fn("CHAR_LENGTH", lambda g, n, a: f"len({a[0]})",
           result=lambda ops: T.INT.with_nullable(_nullable(ops)), signature="CHAR_LENGTH(s), CHARACTER_LENGTH(s)")
_string_fn("CONCAT", lambda g, n, a: "(" + " + ".join(a) + ")", arity=(1, None), signature="CONCAT(s1, s2, ...)")
_string_fn("||", lambda g, n, a: f"({a[0]} + {a[1]})", arity=(2, 2), signature="s1 || s2")
_string_fn("CONCAT_WS", None, arity=(1, None), strict=False,
           result=lambda ops: T.varchar(T.MAX_LENGTH, _nullable(ops)), signature="CONCAT_WS(separator, s1, s2, ...)")
_string_fn("REPLACE", lambda g, n, a: f"_rt.replace({a[0]}, {a[1]}, {a[2]})", arity=(3, 3),
           signature="REPLACE(s, search, replacement)")
_string_fn("POSITION", lambda g, n, a: f"({a[1]}.find({a[0]}) + 1)", arity=(2, 2),
           result=lambda ops: T.INT.with_nullable(_nullable(ops)), signature="POSITION(needle IN s)")
_string_fn("MD5", lambda g, n, a: f"_rt.md5({a[0]})", result=lambda ops: T.char(32, _nullable(ops)),
           signature="MD5(s)")
_string_fn("SHA256", lambda g, n, a: f"_rt.sha256({a[0]})", result=lambda ops: T.char(64, _nullable(ops)),
           signature="SHA256(s)")
_string_fn("REPEAT", lambda g, n, a: f"_rt.repeat({a[0]}, {a[1]})", arity=(2, 2), integer_args=(1,),
           signature="REPEAT(s, n)")
# SUBSTRING and SUBSTR (all their forms) are always nullable: FlinkSqlOperatorTable.SUBSTRING and .SUBSTR are
# ARG0_VARCHAR_FORCE_NULLABLE (a VARCHAR of the string's length, nullable also of NOT NULL operands)
_string_fn("SUBSTRING", lambda g, n, a: f"_rt.substring({', '.join(a)})", arity=(2, 3), integer_args=(1, 2),
           result=_string_result(0, always_nullable=True),
           signature="SUBSTRING(s FROM pos [FOR length]), SUBSTR(s, pos [, length])")
_string_fn("LPAD", lambda g, n, a: f"_rt.lpad({a[0]}, {a[1]}, {a[2]})", arity=(3, 3), integer_args=(1,),
           signature="LPAD(s, length, pad)")
_string_fn("RPAD", lambda g, n, a: f"_rt.rpad({a[0]}, {a[1]}, {a[2]})", arity=(3, 3), integer_args=(1,),
           signature="RPAD(s, length, pad)")
_string_fn("SPLIT_INDEX", lambda g, n, a: f"_rt.split_index({a[0]}, {a[1]}, {a[2]})", arity=(3, 3),
           integer_args=(2,), result=_string_result(always_nullable=True), signature="SPLIT_INDEX(s, separator, index)")
# REGEXP_REPLACE's type is nullable as its operands (FlinkSqlOperatorTable: VARCHAR, TO_NULLABLE),
# though an invalid pattern gives NULL; REGEXP_EXTRACT's and SPLIT_INDEX's are always nullable
_string_fn("REGEXP_REPLACE", lambda g, n, a: f"_rt.regexp_replace({a[0]}, {a[1]}, {a[2]})", arity=(3, 3),
           signature="REGEXP_REPLACE(s, regex, replacement)")
_string_fn("REGEXP_EXTRACT", lambda g, n, a: f"_rt.regexp_extract({', '.join(a)})", arity=(2, 3),
           integer_args=(2,), result=_string_result(always_nullable=True), signature="REGEXP_EXTRACT(s, regex [, group])")


def _infer_trim(operands):
    """TRIM(side, characters, s): side a ``sym`` (BOTH, LEADING, TRAILING)."""
    _strings("TRIM", operands[1:])
    t = type_of(operands[2])
    length = t.precision if t.is_string else T.MAX_LENGTH
    return T.varchar(length, _nullable(operands[1:]))


#: Functions whose string Flink makes from a Java String (StringCallGen's calls that end in
#: ``BinaryStringData.fromString``): their value carries its Java text, which TRIM's set test reads.
_JAVA_TEXT_RESULTS = frozenset({"REPLACE", "REPEAT", "LPAD", "RPAD", "REGEXP_REPLACE", "REGEXP_EXTRACT", "SPLIT_INDEX",
                                "INITCAP", "OVERLAY"})


def _reads_columns(node) -> bool:
    return node[0] == "col" or node[0] == "call" and any(_reads_columns(o) for o in node[3:] if isinstance(o, list))


def java_text_set(node) -> bool:
    """TRIM's set holds its Java text in Flink: a constant (a literal, or what the planner folds to
    one) or a string one of ``_JAVA_TEXT_RESULTS`` makes. Flink's BinaryStringDataUtil.isSpaceString
    then asks whether the set equals " ", and an empty set trims nothing. Otherwise (a column's
    value, a SUBSTRING, a CONCAT...) it reads the set's first byte: a set starting with a space
    trims spaces only, and an empty set fails (BinaryStringData.byteAt divides by its segment's
    size, 0)."""
    if not _reads_columns(node):
        return True
    return node[0] == "call" and node[2] in _JAVA_TEXT_RESULTS


def _emit_trim(gen, node, atoms):
    side = literal_value(node[3])
    java = java_text_set(node[4])
    return f"_rt.trim_chars({atoms[2]}, {atoms[1]}, {side != 'TRAILING'}, {side != 'LEADING'}, {java})"


_register("TRIM", _infer_trim, _emit_trim, arity=(3, 3),
          signature="TRIM([BOTH | LEADING | TRAILING] [characters FROM] s), LTRIM(s [, characters]), "
                    "RTRIM(s [, characters])")


# -- numbers --------------------------------------------------------------------------------------
def _infer_same_numeric(name: str):
    def infer(operands):
        _numeric(name, operands)
        return type_of(operands[0])

    return infer


def _emit_abs(gen, node, atoms):
    t = type_of(node)
    if t.is_integer:
        return f"_rt.wrap{T.INTEGER_BITS[t.root]}(abs({atoms[0]}))"
    return f"abs({atoms[0]})"


def _emit_sign(gen, node, atoms):
    t = type_of(node)
    if t.is_integer:
        return f"(({atoms[0]} > 0) - ({atoms[0]} < 0))"
    if t.is_decimal:
        return f"_rt.decimal_sign({atoms[0]}, {t.scale})"
    return f"_rt.java_signum({atoms[0]})"


_register("ABS", _infer_same_numeric("ABS"), _emit_abs, signature="ABS(x)")
_register("SIGN", _infer_same_numeric("SIGN"), _emit_sign, signature="SIGN(x)")


def _round_digits(name: str, operands) -> int:
    if len(operands) < 2:
        return 0
    digits = operands[1]
    t = type_of(digits)
    if not t.is_integer:
        _fail(f"{name}'s second argument is an integer, not {_describe(t)}")
    if not is_literal(digits) or digits[2] is None:
        _fail(f"{name}'s second argument must be an integer literal (it decides the result's type)")
    return int(digits[2])


def _infer_round(name: str):
    def infer(operands):
        _numeric(name, operands[:1])
        t = type_of(operands[0])
        digits = _round_digits(name, operands)
        if t.is_decimal:
            p, s = T.decimal_round(t.precision, t.scale, digits)
            return T.decimal(p, s, t.nullable)
        return t

    return infer


def _emit_round(rounding: str):
    def emit(gen, node, atoms):
        t = type_of(node)
        source = type_of(node[3])
        digits = int(node[4][2]) if len(node) > 4 else 0
        if t.is_integer:
            return f"_rt.integer_round({atoms[0]}, {digits}, {T.INTEGER_BITS[t.root]}, _{rounding})"
        if t.is_decimal:
            return f"_rt.decimal_round({atoms[0]}, {digits}, {t.precision}, {t.scale}, _{rounding})" \
                if digits < source.scale else atoms[0]
        if rounding == "ROUND_DOWN":  # TRUNCATE of a DOUBLE or FLOAT: through a DECIMAL(38, 18)
            return f"_rt.double_truncate({atoms[0]}, {digits}, {t.root == 'FLOAT'})"
        if t.root == "FLOAT":
            return f"_rt.float_round({atoms[0]}, {digits}, _{rounding})"
        return f"_rt.double_round({atoms[0]}, {digits}, _{rounding})"

    return emit


_register("ROUND", _infer_round("ROUND"), _emit_round("ROUND_HALF_UP"), arity=(1, 2), signature="ROUND(x [, d])")
_register("TRUNCATE", _infer_round("TRUNCATE"), _emit_round("ROUND_DOWN"), arity=(1, 2),
          signature="TRUNCATE(x [, d])")


def _infer_floor_ceil(name: str):
    def infer(operands):
        t = type_of(operands[0])
        if len(operands) == 2:
            unit = literal_value(operands[1])
            if t.root not in ("DATE", "TIMESTAMP"):
                _fail(f"{name}(x TO {unit}) takes a DATE or TIMESTAMP, not {_describe(t)}")
            if unit not in FLOOR_UNITS:
                _fail(f"{name}(x TO {unit}): the unit is one of {', '.join(FLOOR_UNITS)}")
            return t
        _numeric(name, operands)
        if t.is_decimal:
            return T.decimal(t.precision, 0, t.nullable)
        return t

    return infer


def _emit_floor_ceil(floor: bool):
    def emit(gen, node, atoms):
        t = type_of(node)
        if len(node) > 4:
            unit = literal_value(node[4])
            fn = "floor_date" if t.root == "DATE" else "floor_timestamp"
            return f"_rt.{fn}({unit!r}, {atoms[0]}, {floor})"
        if t.is_integer:
            return atoms[0]
        if t.is_decimal:
            return f"_rt.decimal_{'floor' if floor else 'ceil'}({atoms[0]}, {t.precision})"
        fn = "java_floor" if floor else "java_ceil"
        return f"_rt.f32(_rt.{fn}({atoms[0]}))" if t.root == "FLOAT" else f"_rt.{fn}({atoms[0]})"

    return emit


_register("FLOOR", _infer_floor_ceil("FLOOR"), _emit_floor_ceil(True), arity=(1, 2),
          signature="FLOOR(x), FLOOR(t TO unit)")
_register("CEIL", _infer_floor_ceil("CEIL"), _emit_floor_ceil(False), arity=(1, 2),
          signature="CEIL(x), CEILING(x), CEIL(t TO unit)")


def _double_args(gen, node, atoms) -> list[str]:
    return [coerce(gen, a, type_of(o), T.DOUBLE) for a, o in zip(atoms, node[3:])]


def _double_fn(name: str, runtime_fn: str, arity=(1, 1), signature=""):
    def infer(operands):
        _numeric(name, operands)
        return T.DOUBLE.with_nullable(_nullable(operands))

    def emit(gen, node, atoms):
        return f"_rt.{runtime_fn}({', '.join(_double_args(gen, node, atoms))})"

    _register(name, infer, emit, arity=arity, signature=signature)


_double_fn("POWER", "java_pow", arity=(2, 2), signature="POWER(x, y)")
_double_fn("SQRT", "java_sqrt", signature="SQRT(x)")
_double_fn("LN", "java_ln", signature="LN(x)")
_double_fn("LOG10", "java_log10", signature="LOG10(x)")
_double_fn("EXP", "java_exp", signature="EXP(x)")


# -- time -----------------------------------------------------------------------------------------
def _infer_extract(operands):
    unit, value = literal_value(operands[0]), type_of(operands[1])
    if value.root not in ("DATE", "TIMESTAMP", "TIME"):
        _fail(f"EXTRACT takes a DATE, TIME or TIMESTAMP, not {_describe(value)}")
    allowed = {"DATE": ("MILLENNIUM", "CENTURY", "DECADE", "YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DOW", "ISODOW",
                        "DOY", "ISOYEAR", "EPOCH"),
               "TIME": ("HOUR", "MINUTE", "SECOND", "MILLISECOND"),
               "TIMESTAMP": EXTRACT_UNITS}[value.root]
    if unit not in allowed:
        _fail(f"EXTRACT({unit} FROM a {value.root}): the unit is one of {', '.join(allowed)}")
    return T.BIGINT.with_nullable(value.nullable)


def _emit_extract(gen, node, atoms):
    unit, value = literal_value(node[3]), type_of(node[4])
    if value.root == "DATE":
        return f"_rt.extract_date({unit!r}, _rt.days_of({atoms[1]}))"
    if value.root == "TIME":
        return f"_rt.extract_time({unit!r}, {atoms[1]})"
    return f"_rt.extract_timestamp({unit!r}, {atoms[1]})"


_register("EXTRACT", _infer_extract, _emit_extract, arity=(2, 2), signature="EXTRACT(unit FROM t)")

#: Functions that are EXTRACT of one unit.
EXTRACT_FUNCTIONS = {"YEAR": "YEAR", "QUARTER": "QUARTER", "MONTH": "MONTH", "WEEK": "WEEK", "DAYOFYEAR": "DOY",
                     "DAYOFMONTH": "DAY", "DAYOFWEEK": "DOW", "HOUR": "HOUR", "MINUTE": "MINUTE", "SECOND": "SECOND"}


def _infer_date_format(operands):
    value, pattern = type_of(operands[0]), type_of(operands[1])
    if value.root != "TIMESTAMP" and not value.is_string:
        _fail(f"DATE_FORMAT takes a TIMESTAMP or a string, not {_describe(value)}")
    if not pattern.is_string:
        _fail(f"DATE_FORMAT's pattern is a string, not {_describe(pattern)}")
    _literal_pattern("DATE_FORMAT", operands[1])
    return T.STRING  # always nullable: FlinkSqlOperatorTable.DATE_FORMAT is VARCHAR_FORCE_NULLABLE


def _literal_pattern(name: str, node) -> str:
    from .runtime import RegexError, date_pattern

    if not is_literal(node) or node[2] is None:
        _fail(f"{name}'s format must be a string literal")
    try:
        date_pattern(node[2])
    except RegexError as err:
        _fail(f"{name}'s format {node[2]!r}: {err}; changejoin supports the pattern letters y M d H h m s S a E "
              "and quoted text")
    return node[2]


def _emit_date_format(gen, node, atoms):
    if type_of(node[3]).is_string:
        return f"_rt.format_string_timestamp({atoms[0]}, {atoms[1]})"
    return f"_rt.format_timestamp({atoms[0]}, {atoms[1]})"


_register("DATE_FORMAT", _infer_date_format, _emit_date_format, arity=(2, 2),
          signature="DATE_FORMAT(t, 'pattern')")


def _infer_to_time(name: str, result: SqlType):
    def infer(operands):
        _strings(name, operands)
        if len(operands) > 1:
            _literal_pattern(name, operands[1])
        return result.with_nullable(True)

    return infer


def _emit_to_timestamp(gen, node, atoms):
    if len(atoms) > 1:
        return f"_rt.parse_with_pattern({atoms[0]}, {atoms[1]})"
    return f"_rt.parse_timestamp({atoms[0]}, 3)"


def _emit_to_date(gen, node, atoms):
    if len(atoms) > 1:
        return f"_rt.to_date_with_pattern({atoms[0]}, {atoms[1]})"
    return f"_rt.to_date({atoms[0]})"


_register("TO_TIMESTAMP", _infer_to_time("TO_TIMESTAMP", T.timestamp(3)), _emit_to_timestamp, arity=(1, 2),
          signature="TO_TIMESTAMP(s [, 'pattern'])")
_register("TO_DATE", _infer_to_time("TO_DATE", T.DATE), _emit_to_date, arity=(1, 2), signature="TO_DATE(s [, 'pattern'])")


def _infer_timestampadd(operands):
    unit, amount, value = literal_value(operands[0]), type_of(operands[1]), type_of(operands[2])
    if unit not in TIMESTAMPADD_UNITS:
        _fail(f"TIMESTAMPADD({unit}, ...): the unit is one of {', '.join(TIMESTAMPADD_UNITS)}")
    if not (amount.is_integer or amount.is_null):
        _fail(f"TIMESTAMPADD's amount is an integer, not {_describe(amount)}")
    if value.root not in ("DATE", "TIMESTAMP"):
        _fail(f"TIMESTAMPADD takes a DATE or TIMESTAMP, not {_describe(value)}")
    nullable = amount.nullable or value.nullable
    if value.root == "DATE" and unit not in ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY"):
        return T.timestamp(6 if unit != "MICROSECOND" else 6, nullable)
    return value.with_nullable(nullable)


def _emit_timestampadd(gen, node, atoms):
    unit = literal_value(node[3])
    if type_of(node[5]).root == "DATE":
        return f"_rt.timestampadd_date({unit!r}, {atoms[1]}, {atoms[2]})"
    return f"_rt.timestampadd({unit!r}, {atoms[1]}, {atoms[2]})"


_register("TIMESTAMPADD", _infer_timestampadd, _emit_timestampadd, arity=(3, 3),
          signature="TIMESTAMPADD(unit, n, t)")


def _infer_timestampdiff(operands):
    unit = literal_value(operands[0])
    if unit not in TIMESTAMPADD_UNITS:
        _fail(f"TIMESTAMPDIFF({unit}, ...): the unit is one of {', '.join(TIMESTAMPADD_UNITS)}")
    for o in operands[1:]:
        t = type_of(o)
        if t.root not in ("DATE", "TIMESTAMP") and not t.is_null:
            _fail(f"TIMESTAMPDIFF takes DATE or TIMESTAMP values, not {_describe(t)}")
    return T.INT.with_nullable(_nullable(operands[1:]))


def _emit_timestampdiff(gen, node, atoms):
    unit = literal_value(node[3])
    values = [f"_rt.date_to_timestamp({a})" if type_of(o).root == "DATE" else a for a, o in zip(atoms[1:], node[4:])]
    return f"_rt.timestampdiff({unit!r}, {values[0]}, {values[1]})"


_register("TIMESTAMPDIFF", _infer_timestampdiff, _emit_timestampdiff, arity=(3, 3),
          signature="TIMESTAMPDIFF(unit, t1, t2)")


def describe_catalog() -> list[tuple[str, str]]:
    """(name, signature) of every function and operator, for docs/sql.md's test."""
    return [(f.name, f.signature) for f in CATALOG.values()]

"""What the compiled expressions call on the record path: Flink 2.3's scalar functions in Python.

The code ``codegen.py`` generates does the NULL checks and the plain arithmetic itself and calls
these helpers for the rest, with non-NULL arguments (NULL in, NULL out is the generated code's
job, except where a function says otherwise). Each helper reproduces what Flink's runtime does
for that function, including where Flink's result is odd (integer arithmetic wraps around as in
Java; ``EXTRACT`` from a timestamp before 1970 counts days toward zero, as Flink's does): the
differential test (``tests/integration/test_expressions_flink_differential.py``) holds them to
Flink itself. A value Flink fails the job on (``CAST('x' AS INT)``, an integer division by zero)
raises :class:`ExpressionError`, which the caller turns into a dead letter naming the expression.

Strings are Python ``str`` (code points), as Flink's are (UTF-8, counted in code points), except
in the few functions Flink runs on Java strings (UTF-16 code units: ``LPAD``, ``RPAD``, ``REPLACE``
with an empty search string), which do the same here.

Pure Python: listed in setup.py's ``COMPILED`` (the record path's modules run compiled in a
wheel); nothing here is pickled by Spark."""
from __future__ import annotations

import datetime as _dt
import hashlib
import math
import re
import struct
from decimal import ROUND_CEILING, ROUND_DOWN, ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal, InvalidOperation

UTC = _dt.timezone.utc
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DATE = _dt.date(1970, 1, 1)
MS_PER_DAY = 86_400_000
_ONE_MS = _dt.timedelta(milliseconds=1)
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class ExpressionError(ValueError):
    """A value the function cannot take (Flink fails the job on it): the message says what."""


class OutOfRange(ExpressionError):
    """A date or time outside the years 1 to 9999, which Python's datetime cannot hold (Flink's
    TIMESTAMP reaches the year 0; its DATE arithmetic further)."""


def fail(message: str):
    raise ExpressionError(message)


def out_of_range(message: str):
    raise OutOfRange(message)


# -- integers: Java's two's complement ------------------------------------------------------------
def wrap32(x: int) -> int:
    if _INT_MIN <= x <= _INT_MAX:
        return x
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def wrap64(x: int) -> int:
    if _LONG_MIN <= x <= _LONG_MAX:
        return x
    return ((x + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def wrap8(x: int) -> int:
    return ((x + 128) & 0xFF) - 128


def wrap16(x: int) -> int:
    return ((x + 32768) & 0xFFFF) - 32768


WRAP = {8: wrap8, 16: wrap16, 32: wrap32, 64: wrap64}


def idiv(a: int, b: int) -> int:
    """Java's integer division: toward zero; by zero an error."""
    if b == 0:
        fail("/ by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def imod(a: int, b: int) -> int:
    """Java's ``%``: the sign of the dividend; by zero an error."""
    if a >= 0 and b > 0:  # Python's % where the signs cannot differ
        return a % b
    if b == 0:
        fail("/ by zero")
    return a - b * idiv(a, b)


# -- DECIMAL: java.math.BigDecimal as Flink's DecimalData uses it ----------------------------------
_WIDE = Context(prec=160, rounding=ROUND_HALF_UP, Emax=999999, Emin=-999999)
_DIVIDE = Context(prec=38, rounding=ROUND_HALF_UP, Emax=999999, Emin=-999999)
_QUANTUM = [Decimal(1).scaleb(-s) for s in range(0, 40)]
_POW10 = [10 ** n for n in range(0, 80)]


def dfit(value: Decimal, precision: int, scale: int):
    """``value`` as a DECIMAL(precision, scale): rounded half up to the scale, None when its
    digits do not fit (Flink's ``DecimalData.fromBigDecimal``)."""
    q = value.quantize(_QUANTUM[scale], context=_WIDE)
    if abs(q.scaleb(scale, context=_WIDE)) >= _POW10[precision]:
        return None
    return q if q or not q.is_signed() else q.copy_abs()  # BigDecimal has no negative zero


def dadd(a, b, precision: int, scale: int):
    """DECIMAL +: the exact sum fitted to the result type (integers take part as they are)."""
    return dfit(_WIDE.add(a, b), precision, scale)


def dsub(a, b, precision: int, scale: int):
    return dfit(_WIDE.subtract(a, b), precision, scale)


def dmul(a, b, precision: int, scale: int):
    return dfit(_WIDE.multiply(a, b), precision, scale)


def ddiv(a, b, precision: int, scale: int):
    """DECIMAL /: the quotient to 38 significant digits (half up), then fitted, as Flink's."""
    if not b:
        fail("Division undefined" if not a else "Division by zero")
    return dfit(_DIVIDE.divide(a, b), precision, scale)


def dmod(a, b, precision: int, scale: int):
    if not b:
        fail("Division undefined" if not a else "Division by zero")
    return dfit(_WIDE.remainder(a, b), precision, scale)


def dneg(a: Decimal) -> Decimal:
    return a.copy_negate() if a else a.copy_abs()


def to_double_from_decimal(value: Decimal, precision: int) -> float:
    """DecimalData's double: its unscaled long divided by 10^scale for precision <= 18, else the
    correctly rounded value."""
    if precision <= 18:
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits))) if digits else 0
        if sign:
            unscaled = -unscaled
        return float(unscaled) / float(_POW10[-exponent]) if exponent < 0 else float(unscaled * _POW10[exponent])
    return float(value)


def decimal_from_int(value: int, precision: int, scale: int):
    return dfit(Decimal(value), precision, scale)


def decimal_from_double(value: float, precision: int, scale: int):
    """``BigDecimal.valueOf(double)`` (Java's shortest digits) fitted; NaN and infinities fail."""
    if value != value or value in (math.inf, -math.inf):
        fail(f"{java_double(value)} is not a DECIMAL")
    return dfit(Decimal(repr(value)), precision, scale)


def decimal_to_integral(value: Decimal, bits: int) -> int:
    """CAST(DECIMAL AS integer): truncated, then the low 64 bits (``BigDecimal.longValue``), then
    narrowed as Java narrows."""
    return WRAP[bits](wrap64(int(value)))


def decimal_round(value: Decimal, digits: int, precision: int, scale: int, rounding=ROUND_HALF_UP):
    """ROUND(x, d) (TRUNCATE with ROUND_DOWN) of a DECIMAL, as a DECIMAL(precision, scale)."""
    moved = value.scaleb(digits, context=_WIDE).quantize(_QUANTUM[0], rounding=rounding, context=_WIDE)
    return dfit(moved.scaleb(-digits, context=_WIDE), precision, scale)


def decimal_floor(value: Decimal, precision: int):
    return dfit(value.quantize(_QUANTUM[0], rounding=ROUND_FLOOR, context=_WIDE), 38, 0)


def decimal_ceil(value: Decimal, precision: int):
    return dfit(value.quantize(_QUANTUM[0], rounding=ROUND_CEILING, context=_WIDE), 38, 0)


def decimal_sign(value: Decimal, scale: int) -> Decimal:
    return Decimal((value > 0) - (value < 0)).quantize(_QUANTUM[scale], context=_WIDE)


# -- DOUBLE / FLOAT: Java's floating point --------------------------------------------------------
_F32 = struct.Struct("<f")


def f32(x: float) -> float:
    """``x`` rounded to single precision (FLOAT arithmetic), infinities where it overflows."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def fdiv(a: float, b: float) -> float:
    """Java's floating-point division: by zero infinity or NaN, never an error."""
    if b == 0:
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def java_pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf if a > 0 or b == int(b) and int(b) % 2 == 0 else -math.inf
    except ValueError:  # 0 ** negative, negative ** fraction
        if a == 0:
            return math.inf if math.copysign(1.0, a) > 0 or int(b) != b or int(b) % 2 == 0 else -math.inf
        return math.nan


def java_sqrt(a: float) -> float:
    return math.sqrt(a) if a >= 0 else math.nan


def java_ln(a: float) -> float:
    if a > 0:
        return math.log(a) if a != math.inf else math.inf
    return -math.inf if a == 0 else math.nan


def java_log10(a: float) -> float:
    if a > 0:
        return math.log10(a) if a != math.inf else math.inf
    return -math.inf if a == 0 else math.nan


def java_exp(a: float) -> float:
    try:
        return math.exp(a)
    except OverflowError:
        return math.inf


def java_floor(a: float) -> float:
    if a != a or a in (math.inf, -math.inf):
        return a
    return math.copysign(float(math.floor(a)), a)


def java_ceil(a: float) -> float:
    if a != a or a in (math.inf, -math.inf):
        return a
    return math.copysign(float(math.ceil(a)), a)


def java_signum(a: float) -> float:
    if a != a or a == 0:
        return a
    return 1.0 if a > 0 else -1.0


_TEXT_ROUNDINGS = (ROUND_HALF_UP, ROUND_DOWN)  # ROUND's and TRUNCATE's, which double_round does on text


def double_round(a: float, digits: int, rounding=ROUND_HALF_UP) -> float:
    """ROUND / TRUNCATE of a DOUBLE: on its shortest decimal digits (``BigDecimal.valueOf``).

    A value written without an exponent (``repr``), rounded to ``digits >= 0``, is rounded on its
    digits as text and integers, the result read back by ``float()`` (correctly rounded, as the
    decimal's ``doubleValue()`` is); others go through :func:`_double_round_decimal`. Both give the
    same doubles (a property test holds them to it).

    Most values take a shorter way (:func:`_double_round_scaled`), which gives the same doubles."""
    if rounding in _TEXT_ROUNDINGS and 0 <= digits < len(_DOUBLE_POW10):
        rounded = _double_round_scaled(a, digits, rounding is ROUND_HALF_UP)
        if rounded is not None:
            return rounded
    text = repr(a)
    if digits < 0 or "e" in text or "n" in text or rounding not in _TEXT_ROUNDINGS:  # an exponent, inf or nan
        return _double_round_decimal(a, digits, rounding)
    cut = text.index(".") + 1 + digits
    if len(text) <= cut:  # no digit past the ones kept
        return a + 0.0  # + 0.0: BigDecimal has no negative zero
    if rounding != ROUND_HALF_UP or text[cut] < "5":  # toward zero: the digits kept, as they are
        return float(text[:cut]) + 0.0
    negative = text[0] == "-"  # away from zero: one more in the last digit kept
    rounded = float(f"{int(text[negative:cut].replace('.', '')) + 1}e-{digits}")
    return (-rounded if negative else rounded) + 0.0


#: Powers of ten a double holds exactly, for :func:`_double_round_scaled`.
_DOUBLE_POW10 = tuple(float(10 ** d) for d in range(16))
#: How close to a rounding boundary a scaled value may come before the digits decide instead.
_MARGIN = 1e-6


def _double_round_scaled(a: float, digits: int, half_up: bool) -> float | None:
    """ROUND (``half_up``) or TRUNCATE of a DOUBLE by scaling it, or None when the value's digits
    must decide. With ``s = |a| * 10^digits`` below 1e9 the product is within 2.3e-7 of the shortest
    decimal's scaled value (both errors are relative 1.1e-16), so when ``s``'s fraction is farther
    than :data:`_MARGIN` from the boundary (0.5 for ROUND, an integer for TRUNCATE) it is on the
    same side as the decimal's, and the kept integer ``k`` is the one the digits give. ``k /
    10^digits`` divides two exact doubles, so it is correctly rounded, as ``float()`` of the
    kept digits is."""
    pow10 = _DOUBLE_POW10[digits]
    s = a * pow10
    negative = s < 0
    if negative:
        s = -s
    if not s < 1e9:  # large, inf or nan
        return None
    whole = int(s)
    fraction = s - whole  # exact below 2**52
    if half_up:
        if -_MARGIN < fraction - 0.5 < _MARGIN:
            return None
        if fraction > 0.5:
            whole += 1
    elif fraction < _MARGIN or fraction > 1 - _MARGIN:
        return None
    rounded = whole / pow10
    return (-rounded if negative else rounded) + 0.0  # + 0.0: BigDecimal has no negative zero


def _double_round_decimal(a: float, digits: int, rounding=ROUND_HALF_UP) -> float:
    if a != a or a in (math.inf, -math.inf):
        fail(f"{java_double(a)} cannot be rounded")
    exact = Decimal(repr(a))
    if exact.as_tuple().exponent >= -digits:  # no digit past the ones kept (1e+160 too, past _WIDE's precision)
        return a + 0.0
    moved = exact.scaleb(digits, context=_WIDE).quantize(_QUANTUM[0], rounding=rounding, context=_WIDE)
    return float(moved.scaleb(-digits, context=_WIDE)) + 0.0


def float_round(a: float, digits: int, rounding=ROUND_HALF_UP) -> float:
    """ROUND of a FLOAT: on the shortest digits of the float widened to a double
    (SqlFunctionUtils.sround(float, int) is ``BigDecimal.valueOf(b0)``, which takes a double): 0.35f
    is 0.3499999940395355, ROUND(.., 1) 0.3."""
    if a != a or a in (math.inf, -math.inf):
        fail(f"{java_float(a)} cannot be rounded")
    moved = Decimal(repr(a)).scaleb(digits, context=_WIDE).quantize(_QUANTUM[0], rounding=rounding, context=_WIDE)
    return f32(float(moved.scaleb(-digits, context=_WIDE))) + 0.0


#: TRUNCATE's DECIMAL(38, 18): its scale, and the bound of its values.
_TRUNCATE_SCALE = _QUANTUM[18]
_TRUNCATE_BOUND = 1e20


def double_truncate(a: float, digits: int, single: bool = False) -> float:
    """TRUNCATE(x, digits) of a DOUBLE (``single``: a FLOAT) as Flink 2.3 computes it: the value's
    shortest digits (``BigDecimal.valueOf``, a FLOAT widened to a double) made a DECIMAL(38, 18)
    (``castFrom(x, 38, 18)``: rounded half up to 18 places), truncated to ``digits`` places
    (``struncate(DecimalData, int)``; 18 or more: as it is), read back as the nearest double (float).

    A value of 1e20 or more in magnitude does not fit that DECIMAL: ``castFrom`` gives null and
    ``struncate`` fails on it (a NullPointerException, Flink's own bug, the same for every such
    row), so changejoin fails too; NaN and the infinities fail in ``BigDecimal.valueOf``."""
    if a != a or a in (math.inf, -math.inf):
        fail(f"TRUNCATE of {java_double(a)}: it is not a number (Flink: NumberFormatException)")
    if not -_TRUNCATE_BOUND < a < _TRUNCATE_BOUND:
        fail(f"TRUNCATE of {java_double(a)}: beyond DECIMAL(38, 18), which Flink's struncate takes it through "
             "(Flink: NullPointerException)")
    if not single and 0 <= digits <= 12:
        # the scaled way (see double_round): the rounding to 18 places moves the value by 5e-19 at most,
        # 5e-7 scaled by 10^12, so a value that near a boundary is within _MARGIN and left to the digits
        rounded = _double_round_scaled(a, digits, False)
        if rounded is not None:
            return rounded
    exact = Decimal(repr(a)).quantize(_TRUNCATE_SCALE, rounding=ROUND_HALF_UP, context=_WIDE)
    if digits < 18:
        exact = exact.scaleb(digits, context=_WIDE).quantize(_QUANTUM[0], rounding=ROUND_DOWN, context=_WIDE)
        exact = exact.scaleb(-digits, context=_WIDE)
    result = float(exact) + 0.0  # + 0.0: a DECIMAL has no negative zero
    return f32(result) + 0.0 if single else result


def integer_round(a: int, digits: int, bits: int, rounding=ROUND_HALF_UP) -> int:
    """ROUND / TRUNCATE of an integer: at 10^-digits (digits < 0 rounds to tens, hundreds...),
    wrapped as Java's longValue() and narrowing do."""
    if digits >= 0:
        return a
    moved = Decimal(a).scaleb(digits, context=_WIDE).quantize(_QUANTUM[0], rounding=rounding, context=_WIDE)
    return WRAP[bits](wrap64(int(moved.scaleb(-digits, context=_WIDE))))


def double_to_integral(a: float, bits: int) -> int:
    """Java's (long) / (int) cast of a double: toward zero, saturating, NaN 0; narrower types
    take the int's low bits."""
    if a != a:
        return 0
    if bits == 64:
        if a >= 9.223372036854775807e18:
            return _LONG_MAX
        if a <= -9.223372036854775808e18:
            return _LONG_MIN
        return int(a)
    if a >= 2147483647.0:
        value = _INT_MAX
    elif a <= -2147483648.0:
        value = _INT_MIN
    else:
        value = int(a)
    return WRAP[bits](value) if bits < 32 else value


def long_to_double(a: int) -> float:
    return float(a)


# -- Java's number formatting ---------------------------------------------------------------------
def _java_digits(digits: str, exponent: int, negative: bool) -> str:
    """Java's Double.toString/Float.toString layout of a shortest decimal ``0.digits x 10^exponent``."""
    sign = "-" if negative else ""
    point = exponent  # the decimal point sits after ``point`` digits
    if -3 < point <= 7:  # 10^-3 <= |x| < 10^7: plain
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{point - 1}"


def _shortest(text: str) -> tuple[str, int, bool]:
    """(significant digits, decimal exponent, negative) of a Python float repr or %g text."""
    negative = text.startswith("-")
    d = Decimal(text.lstrip("-"))
    sign, digits, exponent = d.normalize().as_tuple()
    digit_text = "".join(map(str, digits))
    return digit_text, len(digit_text) + exponent, negative


def java_double(a: float) -> str:
    """Java's ``Double.toString``."""
    if a != a:
        return "NaN"
    if a in (math.inf, -math.inf):
        return "Infinity" if a > 0 else "-Infinity"
    if a == 0:
        return "-0.0" if math.copysign(1.0, a) < 0 else "0.0"
    return _java_digits(*_shortest(repr(a)))


def _float_digits(a: float) -> str:
    """The shortest decimal text that reads back as the single-precision ``a``."""
    for precision in range(1, 10):
        text = f"{a:.{precision}g}"
        if f32(float(text)) == a:
            return text
    return repr(a)


def java_float(a: float) -> str:
    """Java's ``Float.toString``."""
    if a != a:
        return "NaN"
    if a in (math.inf, -math.inf):
        return "Infinity" if a > 0 else "-Infinity"
    if a == 0:
        return "-0.0" if math.copysign(1.0, a) < 0 else "0.0"
    return _java_digits(*_shortest(_float_digits(a)))


def decimal_text(value: Decimal) -> str:
    """A DECIMAL as text: its digits at its scale, never an exponent (``toPlainString``)."""
    return format(value, "f")


# -- CAST ---------------------------------------------------------------------------------------------
_JAVA_WHITESPACE = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"


def _java_trim(s: str) -> str:
    """Java's ``String.trim()``: every character up to U+0020 at both ends."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def string_to_integral(s: str, bits: int) -> int:
    """CAST(STRING AS TINYINT/SMALLINT/INT/BIGINT): trimmed, an optional sign, digits, an optional
    fraction of digits (dropped); anything else, or out of range, fails."""
    text = _java_trim(s)
    body = text[1:] if text[:1] in "+-" else text
    whole, _, fraction = body.partition(".")
    if not text or body == "" or not _ascii_digits(whole, allow_empty=bool(_)) or not _ascii_digits(fraction, True):
        fail(f"'{s}' is not a number")
    if not whole:
        whole = "0"
    value = int(whole)
    if text[0] == "-":
        value = -value
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        fail(f"'{s}' is out of range")
    return value


def _ascii_digits(text: str, allow_empty: bool = False) -> bool:
    if not text:
        return allow_empty
    return all("0" <= c <= "9" for c in text)


_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)|(0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
    r"[pP][+-]?\d+))[fFdD]?")


def string_to_double(s: str) -> float:
    """CAST(STRING AS DOUBLE): Java's ``Double.parseDouble``."""
    text = _java_trim(s)
    match = _JAVA_DOUBLE.fullmatch(text)
    if match is None:
        fail(f"'{s}' is not a DOUBLE")
    body = text.rstrip("fFdD") if not text.endswith(("NaN", "Infinity")) else text
    if match.group(5):
        negative = body.startswith("-")
        value = float.fromhex(body.lstrip("+-"))
        return -value if negative else value
    return float(body.replace("Infinity", "inf"))


def string_to_float(s: str) -> float:
    return f32(string_to_double(s))


def string_to_decimal(s: str, precision: int, scale: int):
    """CAST(STRING AS DECIMAL(p, s)) as Flink's ``BinaryStringDataUtil.toDecimal`` reads it; an
    unreadable string or a value beyond the precision fails."""
    raw = s.encode()
    if precision > 18 or len(raw) > 18:
        text = s.strip(" \n\t")
        try:
            value = Decimal(text) if _BIG_DECIMAL.fullmatch(text) else None
        except InvalidOperation:
            value = None
        result = None if value is None else dfit(value, precision, scale)
    else:
        result = _small_decimal(raw, precision, scale)
    if result is None:
        fail(f"'{s}' is not a DECIMAL({precision}, {scale})")
    return result


_BIG_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _small_decimal(raw: bytes, precision: int, scale: int):
    """Flink's fast path for short strings and precisions up to 18 (its quirks included: the
    character that ends the digits is not checked)."""
    i, n = 0, len(raw)
    b = 0
    while i < n:
        b = raw[i]
        if b not in b" \n\t":
            break
        i += 1
    if i == n:
        return None
    negative = b == 45  # '-'
    if negative or b == 43:
        i += 1
        if i == n:
            return None
    significand = 0
    length = 0
    point = -1
    while i < n:
        b = raw[i]
        i += 1
        if 48 <= b <= 57:
            significand = significand * 10 + (b - 48)
            length += 1
        elif b == 46:
            if point >= 0:
                return None
            point = length
        else:
            break
    if point < 0:
        point = length
    if negative:
        significand = -significand
    exponent = 0
    if b in b"eE" and i < n:
        b = raw[i]
        exp_negative = b == 45
        if exp_negative or b == 43:
            i += 1
            if i == n:
                return None
        digits = 0
        while i < n:
            b = raw[i]
            i += 1
            if 48 <= b <= 57:
                if digits < 40:
                    digits = digits * 10 + (b - 48)
            else:
                break
        exponent = -digits if exp_negative else digits
    exponent -= length - point
    while i < n:
        b = raw[i]
        i += 1
        if b not in b" \n\t":
            return None
    change = exponent + scale
    if length + change > precision:
        return None
    if change >= 0:
        significand *= _POW10[change]
    else:
        k = -5 if negative else 5
        numerator = significand + k * _POW10[-change - 1]
        significand = idiv(numerator, _POW10[-change])
    return Decimal(significand).scaleb(-scale, context=_WIDE).quantize(_QUANTUM[scale], context=_WIDE)


_TRUE = frozenset({"t", "true", "y", "yes", "1"})
_FALSE = frozenset({"f", "false", "n", "no", "0"})


def string_to_boolean(s: str) -> bool:
    lowered = s.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    fail(f"'{s}' is not a BOOLEAN")


def string_to_date(s: str) -> _dt.date:
    """CAST(STRING AS DATE): Flink's ``DateTimeUtils.parseDate`` (``yyyy[-m[-d]]``, each part
    trimmed, a time after a space ignored)."""
    days = parse_date_days(s)
    if days is None:
        fail(f"'{s}' is not a DATE")
    return date_of_days(days)


def parse_date_days(s: str):
    space = s.find(" ")
    if space > 0:
        s = s[:space]
    parts = s.split("-", 2)
    numbers = []
    for part in parts:
        part = _java_trim(part)
        if not _ascii_digits(part):
            return None
        numbers.append(int(part))
    if any(n > _INT_MAX for n in numbers):
        fail(f"'{s}' is not a DATE (a number out of range)")
    y, m, d = (numbers + [1, 1])[:3]
    if not _legal_date(y, m, d):
        return None
    return (_dt.date(y, m, d) - EPOCH_DATE).days if y >= 1 else _days_before_year_one(y, m, d)


def _days_before_year_one(y: int, m: int, d: int) -> int:
    out_of_range(f"year {y} is before the year 1, which changejoin cannot represent")


def _legal_date(y: int, m: int, d: int) -> bool:
    if y < 0 or y > 9999 or m < 1 or m > 12 or d < 1 or d > 31:
        return False
    if m == 2 and d > 28 and not (d == 29 and (y % 400 == 0 or (y % 4 == 0 and y % 100 != 0))):
        return False
    if d == 31 and m not in (1, 3, 5, 7, 8, 10, 12):
        return False
    return True


_DEFAULT_TIMESTAMP = re.compile(r"(\d{4,})-(\d{1,2})-(\d{1,2})(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{0,9}))?)?")


def parse_timestamp(s: str, precision: int = 3):
    """Flink's default timestamp text ``yyyy-M-d[ H:m:s[.fraction]]``, or None; the fraction cut
    to ``precision`` digits."""
    match = _DEFAULT_TIMESTAMP.fullmatch(s)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction = match.groups()
    if len(year) > 4 and year[0] == "0":
        return None
    micros = 0
    if fraction:
        nanos = int(fraction.ljust(9, "0"))
        unit = 10 ** (9 - min(precision, 6))
        micros = nanos // unit * unit // 1000
    try:
        return _dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                            micros, tzinfo=UTC)
    except ValueError:
        return None


def string_to_timestamp(s: str, precision: int = 3) -> _dt.datetime:
    value = parse_timestamp(s, precision)
    if value is None:
        fail(f"'{s}' is not a TIMESTAMP")
    return value


def boolean_to_string(b: bool) -> str:
    return "TRUE" if b else "FALSE"


def date_to_string(d: _dt.date) -> str:
    return d.isoformat()


def timestamp_to_string(ts: _dt.datetime, precision: int) -> str:
    """CAST(TIMESTAMP(p) AS STRING): ``yyyy-MM-dd HH:mm:ss`` and exactly ``p`` fraction digits."""
    text = f"{ts.year:04d}-{ts.month:02d}-{ts.day:02d} {ts.hour:02d}:{ts.minute:02d}:{ts.second:02d}"
    if precision > 0:
        text += "." + f"{ts.microsecond:06d}{'000'}"[:precision]
    return text


def time_to_string(t: _dt.time, precision: int) -> str:
    text = f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if precision > 0:
        text += "." + f"{t.microsecond:06d}000"[:precision]
    return text


def bytes_to_string(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def string_to_bytes(s: str) -> bytes:
    return s.encode("utf-8")


def timestamp_to_date(ts: _dt.datetime) -> _dt.date:
    """CAST(TIMESTAMP AS DATE): Flink divides its epoch milliseconds by a day toward zero, so a
    time before 1970 that is not midnight gives the next day."""
    return date_of_days(idiv(epoch_millis(ts), MS_PER_DAY))


def date_to_timestamp(d: _dt.date) -> _dt.datetime:
    return _dt.datetime(d.year, d.month, d.day, tzinfo=UTC)


def timestamp_cast(ts: _dt.datetime, precision: int) -> _dt.datetime:
    """A TIMESTAMP of fewer fractional digits: truncated."""
    if precision >= 6:
        return ts
    unit = 10 ** (6 - precision)
    return ts.replace(microsecond=ts.microsecond // unit * unit)


def pad_char(s: str, length: int) -> str:
    """CAST(... AS CHAR(n)) pads with spaces up to n."""
    return s if len(s) >= length else s + " " * (length - len(s))


def truncate_string(s: str, length: int) -> str:
    return s if len(s) <= length else s[:length]


# -- time -----------------------------------------------------------------------------------------
def epoch_millis(ts: _dt.datetime) -> int:
    """Epoch milliseconds of a TIMESTAMP (floored: a timestamp's millisecond)."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return (ts - EPOCH) // _ONE_MS


def sub_millis(ts: _dt.datetime) -> int:
    """The microseconds of a TIMESTAMP below its millisecond."""
    return ts.microsecond % 1000


def timestamp_of_millis(millis: int, micros: int = 0) -> _dt.datetime:
    try:
        return EPOCH + _dt.timedelta(milliseconds=millis, microseconds=micros)
    except OverflowError:
        out_of_range(f"{millis} ms since 1970 is outside the years 1 to 9999")


def date_of_days(days: int) -> _dt.date:
    try:
        return EPOCH_DATE + _dt.timedelta(days=days)
    except OverflowError:
        out_of_range(f"{days} days since 1970 is outside the years 1 to 9999")


def days_of(d: _dt.date) -> int:
    return (d - EPOCH_DATE).days


def as_timestamp(value) -> _dt.datetime:
    """A TIMESTAMP column's value as this module's TIMESTAMP (a local-timestamp column decodes naive)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _julian_fields(days: int) -> tuple[int, int, int]:
    d = date_of_days(days)
    return d.year, d.month, d.day


def _iso_week(days: int) -> int:
    return date_of_days(days).isocalendar()[1]


def extract_date(unit: str, days: int) -> int:
    """EXTRACT(unit FROM a date given as days since 1970)."""
    if unit == "EPOCH":
        return days * 86400
    d = date_of_days(days)
    if unit == "YEAR":
        return d.year
    if unit == "MONTH":
        return d.month
    if unit == "DAY":
        return d.day
    if unit == "QUARTER":
        return (d.month + 2) // 3
    if unit == "DOW":
        return (days + 4) % 7 + 1  # Sunday 1 ... Saturday 7
    if unit == "ISODOW":
        return (days + 3) % 7 + 1  # Monday 1 ... Sunday 7
    if unit == "DOY":
        return d.timetuple().tm_yday
    if unit == "WEEK":
        return d.isocalendar()[1]
    if unit == "ISOYEAR":
        return d.isocalendar()[0]
    if unit == "DECADE":
        return d.year // 10
    if unit == "CENTURY":
        return (d.year + 99) // 100
    if unit == "MILLENNIUM":
        return (d.year + 999) // 1000
    fail(f"EXTRACT({unit} FROM a DATE) is not supported")


_TIME_FACTORS = {"HOUR": (MS_PER_DAY, 3_600_000), "MINUTE": (3_600_000, 60_000), "SECOND": (60_000, 1000),
                 "MILLISECOND": (1000, 1)}
_DATE_UNITS = frozenset({"YEAR", "MONTH", "DAY", "QUARTER", "DOW", "ISODOW", "DOY", "WEEK", "ISOYEAR", "DECADE",
                         "CENTURY", "MILLENNIUM"})


def extract_timestamp(unit: str, ts: _dt.datetime) -> int:
    """EXTRACT(unit FROM a TIMESTAMP) as Flink computes it: from its epoch milliseconds, divided
    toward zero (a time before 1970 gives the next day's date fields and negative time fields)."""
    millis = epoch_millis(ts)
    if unit in _DATE_UNITS:
        return extract_date(unit, idiv(millis, MS_PER_DAY))
    if unit == "EPOCH":
        return idiv(millis, 1000)
    if unit in _TIME_FACTORS:
        factor, multiplier = _TIME_FACTORS[unit]
        return idiv(imod(millis, factor), multiplier)
    if unit == "MICROSECOND":
        return imod(millis, 1000) * 1000 + sub_millis(ts)
    if unit == "NANOSECOND":
        return imod(millis, 1000) * 1_000_000 + sub_millis(ts) * 1000
    fail(f"EXTRACT({unit} FROM a TIMESTAMP) is not supported")


def extract_time(unit: str, t: _dt.time) -> int:
    millis = ((t.hour * 60 + t.minute) * 60 + t.second) * 1000 + t.microsecond // 1000
    if unit in _TIME_FACTORS:
        factor, multiplier = _TIME_FACTORS[unit]
        return idiv(imod(millis, factor), multiplier)
    fail(f"EXTRACT({unit} FROM a TIME) is not supported")


def _floor_div(a: int, b: int) -> int:
    return a // b


_EPOCH_JULIAN = 2440588


def _meeus(julian: int) -> tuple[int, int, int]:
    """(year, month, day) of a julian day number as Flink's FLOOR / CEIL reads it (Meeus's
    algorithm: the Julian calendar up to 1582-10-04, the Gregorian one after)."""
    if julian > 2299160:
        a = julian + 32044
        b = _java_div(4 * a + 3, 146097)
        c = a - _java_div(b * 146097, 4)
    else:
        b = 0
        c = julian + 32082
    d = _java_div(4 * c + 3, 1461)
    e = c - _java_div(1461 * d, 4)
    m = _java_div(5 * e + 2, 153)
    day = e - _java_div(153 * m + 2, 5) + 1
    month = m + 3 - 12 * _java_div(m, 10)
    year = b * 100 + d - 4800 + _java_div(m, 10)
    return year, month, day


def _java_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _unix_date(y: int, m: int, d: int) -> int:
    """Days since 1970 of a proleptic Gregorian (y, m, d) (Flink's ymdToUnixDate), any y."""
    a = _java_div(14 - m, 12)
    yy = y + 4800 - a
    mm = m + 12 * a - 3
    julian = d + _java_div(153 * mm + 2, 5) + 365 * yy + _java_div(yy, 4) - _java_div(yy, 100) + _java_div(yy, 400) - 32045
    return julian - _EPOCH_JULIAN


def _julian_floor(unit: str, days: int, floor: bool) -> int:
    """The first day (floor) or the next first day (ceil) of ``unit`` around a date (days), as
    Flink's ``julianDateFloor`` (whose dates before 1582-10-15 are Julian-calendar dates)."""
    julian = days + _EPOCH_JULIAN
    year, month, day = _meeus(julian)
    quarter = (month + 2) // 3
    if unit == "YEAR":
        if not floor and (month > 1 or day > 1):
            year += 1
        return _unix_date(year, 1, 1)
    if unit == "MONTH":
        if not floor and day > 1:
            month += 1
        return _unix_date(year, month, 1)
    if unit == "QUARTER":
        if not floor and (month > 1 or day > 1):
            quarter += 1
        return _unix_date(year, quarter * 3 - 2, 1)
    if unit == "WEEK":
        offset = (julian + 1) % 7
        if not floor and offset > 0:
            offset -= 7
        return _unix_date(year, month, day) - offset
    if unit == "DAY":
        result = _unix_date(year, month, day)
        return result if floor else result + 1
    if unit == "DECADE":
        return _unix_date(10 * _java_div(year, 10) if floor else 10 * (1 + _java_div(year, 10)), 1, 1)
    if unit == "CENTURY":
        base = 100 * _java_div(year + 99, 100)
        return _unix_date(base - 99 if floor else base + 1, 1, 1)
    if unit == "MILLENNIUM":
        base = 1000 * _java_div(year + 999, 1000)
        return _unix_date(base - 999 if floor else base + 1, 1, 1)
    fail(f"FLOOR/CEIL to {unit} is not supported")


def _safe_date(y: int, m: int, d: int) -> _dt.date:
    try:
        return _dt.date(y, m, d)
    except ValueError:
        out_of_range(f"{y:04d}-{m:02d}-{d:02d} is outside the years 1 to 9999")


_TIME_UNIT_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": MS_PER_DAY}


def floor_timestamp(unit: str, ts: _dt.datetime, floor: bool = True) -> _dt.datetime:
    """FLOOR / CEIL(ts TO unit). Units up to a day round the epoch milliseconds (the fraction
    below a millisecond dropped); longer ones go through the date, which Flink takes by dividing
    toward zero (as EXTRACT does)."""
    millis = epoch_millis(ts)
    if unit in _TIME_UNIT_MS:
        size = _TIME_UNIT_MS[unit]
        r = imod(millis, size)
        if floor:
            result = millis - r - size if r < 0 else millis - r
        else:
            result = millis - r + size if r > 0 else millis - r
            if r == 0 and unit == "MILLISECOND" and sub_millis(ts):
                result += 1
        return timestamp_of_millis(result)
    return timestamp_of_millis(_julian_floor(unit, idiv(millis, MS_PER_DAY), floor) * MS_PER_DAY)


def floor_date(unit: str, d: _dt.date, floor: bool = True) -> _dt.date:
    if unit in _TIME_UNIT_MS and unit != "DAY":
        return d
    return date_of_days(_julian_floor(unit, days_of(d), floor))


def add_months_days(days: int, months: int) -> int:
    d = date_of_days(days)
    month0 = d.month + months
    year = d.year + (month0 - 1) // 12
    month = (month0 - 1) % 12 + 1
    last = _last_day(year, month)
    return days_of(_safe_date(year, month, min(d.day, last)))


def _last_day(y: int, m: int) -> int:
    if m == 2:
        return 29 if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 28
    return 30 if m in (4, 6, 9, 11) else 31


def add_months(ts: _dt.datetime, months: int) -> _dt.datetime:
    millis = epoch_millis(ts)
    within = millis % MS_PER_DAY
    days = add_months_days((millis - within) // MS_PER_DAY, months)
    return timestamp_of_millis(days * MS_PER_DAY + within, sub_millis(ts))


def add_millis(ts: _dt.datetime, millis: int) -> _dt.datetime:
    try:
        return ts + _dt.timedelta(milliseconds=millis)
    except OverflowError:
        out_of_range(f"{timestamp_to_string(ts, 3)} + {millis} ms is outside the years 1 to 9999")


def date_add_millis(d: _dt.date, millis: int) -> _dt.date:
    """DATE + a day-time INTERVAL: whole days only (toward zero), as Flink's DATE arithmetic."""
    return date_of_days(days_of(d) + idiv(millis, MS_PER_DAY))


def date_add_months(d: _dt.date, months: int) -> _dt.date:
    return date_of_days(add_months_days(days_of(d), months))


_ADD_MS = {"MILLISECOND": 1, "SECOND": 1000, "MINUTE": 60_000, "HOUR": 3_600_000, "DAY": MS_PER_DAY,
           "WEEK": 7 * MS_PER_DAY}
_ADD_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}


def timestampadd(unit: str, amount: int, ts: _dt.datetime) -> _dt.datetime:
    if unit in _ADD_MONTHS:
        return add_months(ts, wrap32(amount * _ADD_MONTHS[unit]))
    if unit == "MICROSECOND":
        return add_millis(ts, 0) + _dt.timedelta(microseconds=amount)
    return add_millis(ts, amount * _ADD_MS[unit])


def timestampadd_date(unit: str, amount: int, d: _dt.date):
    """TIMESTAMPADD on a DATE: a DATE for whole days and longer, else a TIMESTAMP."""
    if unit in _ADD_MONTHS:
        return date_add_months(d, wrap32(amount * _ADD_MONTHS[unit]))
    if unit in ("DAY", "WEEK"):
        return date_of_days(days_of(d) + amount * (7 if unit == "WEEK" else 1))
    return timestampadd(unit, amount, date_to_timestamp(d))


def _subtract_months_days(date0: int, date1: int) -> int:
    if date0 < date1:
        return -_subtract_months_days(date1, date0)
    m = (date0 - date1) // 31
    while True:
        if add_months_days(date1, m) >= date0:
            return m
        if add_months_days(date1, m + 1) > date0:
            return m
        m += 1


def timestampdiff(unit: str, start: _dt.datetime, end: _dt.datetime) -> int:
    """TIMESTAMPDIFF(unit, start, end): whole units from start to end, toward zero, an INT."""
    t0, t1 = epoch_millis(end), epoch_millis(start)
    if unit in _ADD_MONTHS:
        millis0, millis1 = t0 % MS_PER_DAY, t1 % MS_PER_DAY
        d0, d1 = (t0 - millis0) // MS_PER_DAY, (t1 - millis1) // MS_PER_DAY
        months = _subtract_months_days(d0, d1)
        if add_months_days(d1, months) == d0 and millis0 < millis1:
            months -= 1
        return wrap32(idiv(months, _ADD_MONTHS[unit]))
    if unit == "MICROSECOND":
        delta = end - start
        return wrap32((delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds))
    if unit == "WEEK":  # Flink takes the seconds as an INT first
        return idiv(wrap32(idiv(t0 - t1, 1000)), 604_800)
    return wrap32(idiv(t0 - t1, _ADD_MS[unit]))


# -- strings --------------------------------------------------------------------------------------
def _utf16(s: str) -> list[int]:
    data = s.encode("utf-16-le", "surrogatepass")
    return list(struct.unpack(f"<{len(data) // 2}H", data))


def _from_utf16(units: list[int]) -> str:
    """Java chars back to a string as Flink stores it (UTF-8): a lone surrogate becomes '?'."""
    out = []
    i, n = 0, len(units)
    while i < n:
        u = units[i]
        if 0xD800 <= u <= 0xDBFF and i + 1 < n and 0xDC00 <= units[i + 1] <= 0xDFFF:
            out.append(chr(0x10000 + ((u - 0xD800) << 10) + (units[i + 1] - 0xDC00)))
            i += 2
            continue
        out.append("?" if 0xD800 <= u <= 0xDFFF else chr(u))
        i += 1
    return "".join(out)


def _is_bmp(s: str) -> bool:
    return all(ord(c) < 0x10000 for c in s)


def lpad(s: str, length: int, pad: str):
    if length < 0 or pad == "":
        return None
    if length == 0:
        return ""
    if _is_bmp(s) and _is_bmp(pad):
        gap = max(length - len(s), 0)
        return ((pad * (gap // len(pad) + 1))[:gap] + s)[:length]
    base, fill = _utf16(s), _utf16(pad)
    gap = max(length - len(base), 0)
    out = ([*fill] * (gap // len(fill) + 1))[:gap] + base
    return _from_utf16(out[:length])


def rpad(s: str, length: int, pad: str):
    if length < 0 or pad == "":
        return None
    if length == 0:
        return ""
    if _is_bmp(s) and _is_bmp(pad):
        if len(s) >= length:
            return s[:length]
        gap = length - len(s)
        return s + (pad * (gap // len(pad) + 1))[:gap]
    base, fill = _utf16(s), _utf16(pad)
    if len(base) >= length:
        return _from_utf16(base[:length])
    gap = length - len(base)
    return _from_utf16(base + ([*fill] * (gap // len(fill) + 1))[:gap])


def replace(s: str, search: str, replacement: str) -> str:
    """Java's ``String.replace``: literal; an empty search string goes before, between and after
    the UTF-16 units (once into an empty string)."""
    if search:
        return s.replace(search, replacement)
    if not s:
        return replacement
    units = _utf16(s)
    if len(units) == len(s):
        return replacement + replacement.join(s) + replacement
    out = _utf16(replacement)
    for u in units:
        out += [u] + _utf16(replacement)
    return _from_utf16(out)


def substring(s: str, pos: int, length: int = _INT_MAX):
    """SUBSTRING(s FROM pos [FOR length]) as Flink's: 1-based, 0 as 1, a negative position
    counts from the end, a negative length is NULL."""
    if length < 0:
        return None
    n = len(s)
    if pos > 0:
        start = pos - 1
        if start >= n:
            return ""
    elif pos < 0:
        start = n + pos
        if start < 0:
            return ""
    else:
        start = 0
    end = n if n - start < length else start + length
    return s[start:end]


def trim_chars(s: str, characters: str, leading: bool = True, trailing: bool = True, java: bool = True) -> str:
    """TRIM: removes the characters of ``characters`` (a set) from the ends, as Flink's
    BinaryStringDataUtil.trim. ``java``: the set holds its Java text in Flink (a constant, or what
    functions.java_text_set names): then an empty set trims nothing. Otherwise Flink reads the
    set's first byte: a set starting with a space trims spaces only, and an empty set fails."""
    if not characters:
        if java:
            return s
        fail("/ by zero (TRIM of an empty set of characters)")
    if not java and characters[0] == " ":
        characters = " "
    start, end = 0, len(s)
    if leading:
        while start < end and s[start] in characters:
            start += 1
    if trailing:
        while end > start and s[end - 1] in characters:
            end -= 1
    return s[start:end]


def position(needle: str, haystack: str) -> int:
    return haystack.find(needle) + 1


def initcap(s: str) -> str:
    """INITCAP: words are runs of ASCII letters and digits; each starts upper case, the rest of
    its ASCII letters lower case (other characters unchanged, and they end a word)."""
    out = []
    start = True
    for c in s:
        alnum = c.isascii() and c.isalnum()
        if start:
            if alnum:
                start = False
                if "a" <= c <= "z":
                    c = c.upper()
        else:
            if "A" <= c <= "Z":
                c = c.lower()
            if not alnum:
                start = True
        out.append(c)
    return "".join(out)


def split_index(s: str, separator: str, index: int):
    """SPLIT_INDEX: the index-th (0-based) token of ``s`` split at every ``separator`` (an empty
    separator splits at spaces), None beyond the tokens; an empty string has no token."""
    if index < 0 or s == "":
        return None
    tokens = s.split(separator or " ")
    return tokens[index] if index < len(tokens) else None


def repeat(s: str, n: int) -> str:
    return s * n if n > 0 else ""


def reverse(s: str) -> str:
    return s[::-1]


def concat_ws(separator: str, *parts) -> str:
    return separator.join(p for p in parts if p is not None)


def md5(s: str) -> str:
    return hashlib.md5(s.encode("utf-8")).hexdigest()


def sha256(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def upper(s: str) -> str:
    return s.upper()


def lower(s: str) -> str:
    return s.lower()


# -- regular expressions: java.util.regex ---------------------------------------------------------
_JAVA_LINE_TERMINATORS = "\n\r\u0085\u2028\u2029"
_REGEX_CACHE: dict = {}


class RegexError(ValueError):
    """A Java regular expression this module cannot run with Python's ``re`` the same way."""


def java_regex(pattern: str) -> "re.Pattern[str]":
    """A Java regular expression as an equivalent Python pattern (cached): ``.`` excludes every
    Java line terminator; ``\\d``, ``\\w``, ``\\s`` and case-insensitive matching are ASCII, as in
    Java; named groups ``(?<n>...)``. Constructs Python would read differently are refused
    (:class:`RegexError`)."""
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is not None:
        return compiled
    out = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise RegexError("a trailing backslash")
            nxt = pattern[i + 1]
            if nxt in "pPQEGZzRXhHvVkK" or nxt.isdigit() and nxt != "0" and in_class:
                raise RegexError(f"\\{nxt} is not supported")
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "[" or (c == "&" and pattern[i:i + 2] == "&&"):
                raise RegexError("nested character classes and && are not supported")
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("\\]")
                i += 1
            continue
        if c == ".":
            out.append("[^\n\r\u0085\u2028\u2029]")
            i += 1
            continue
        if c == "(" and pattern[i:i + 3] == "(?<" and pattern[i + 3:i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        if c == "(" and pattern[i:i + 2] == "(?" and pattern[i + 2:i + 3] not in (":", "=", "!", "<"):
            raise RegexError("inline flags are not supported")
        if c in "*+?}" and i + 1 < n and pattern[i + 1] == "+":
            raise RegexError("possessive quantifiers are not supported")
        out.append(c)
        i += 1
    if in_class:
        raise RegexError("an unclosed character class")
    try:
        compiled = re.compile("".join(out), re.ASCII)
    except re.error as err:
        raise RegexError(str(err)) from None
    if len(_REGEX_CACHE) > 256:
        _REGEX_CACHE.clear()
    _REGEX_CACHE[pattern] = compiled
    return compiled


def regexp_replace(s: str, pattern: str, replacement: str):
    """REGEXP_REPLACE: every match replaced by ``replacement`` taken literally; NULL for a
    pattern Java cannot compile."""
    try:
        regex = java_regex(pattern)
    except RegexError:
        return None
    return regex.sub(lambda _: replacement, s)


def regexp_extract(s: str, pattern: str, index: int = 0):
    """REGEXP_EXTRACT: group ``index`` of the first match, NULL without a match, for a group that
    did not take part or does not exist, or for a pattern Java cannot compile."""
    try:
        regex = java_regex(pattern)
    except RegexError:
        return None
    match = regex.search(s)
    if match is None or index < 0 or index > regex.groups:
        return None
    return match.group(index)


def like_regex(pattern: str, escape: str | None = None) -> "re.Pattern[str]":
    """SQL LIKE as a regular expression: ``%`` any run, ``_`` any one character."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape:
            if i + 1 >= len(pattern):
                fail(f"LIKE pattern '{pattern}' ends with its escape character")
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


_LIKE_CACHE: dict = {}


def like(value: str, pattern: str, escape: str | None = None) -> bool:
    key = (pattern, escape)
    regex = _LIKE_CACHE.get(key)
    if regex is None:
        if len(_LIKE_CACHE) > 256:
            _LIKE_CACHE.clear()
        regex = _LIKE_CACHE[key] = like_regex(pattern, escape)
    return regex.fullmatch(value) is not None


# -- DATE_FORMAT, TO_TIMESTAMP, TO_DATE: Java date patterns -------------------------------------------
_PATTERN_LETTERS = "GuyDMLdQqYwWEecFaBhKkHmsSAnNVvzOXxZp"
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                "November", "December")
#: The pattern letters changejoin formats and parses (java.time's DateTimeFormatter meaning).
SUPPORTED_PATTERN_LETTERS = "yMdHhmsSaE"


def date_pattern(pattern: str) -> list:
    """A java.time pattern as its parts: ``(letter, count)`` fields and literal strings; a letter
    outside :data:`SUPPORTED_PATTERN_LETTERS` is a :class:`RegexError`."""
    parts: list = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "'":
            end = pattern.find("'", i + 1)
            while end != -1 and pattern[end + 1:end + 2] == "'":
                end = pattern.find("'", end + 2)
            if end == -1:
                raise RegexError("an unclosed quote")
            text = pattern[i + 1:end].replace("''", "'") if end > i + 1 else "'"
            parts.append(text)
            i = end + 1
            continue
        if c.isascii() and c.isalpha():
            j = i
            while j < n and pattern[j] == c:
                j += 1
            if c not in SUPPORTED_PATTERN_LETTERS:
                raise RegexError(f"the pattern letter {c!r} is not supported")
            count = j - i
            if c == "E" and count > 4 or c == "a" and count > 1 or c in "HhmsdD" and count > 2 or c == "M" and count > 4:
                raise RegexError(f"{c * count} is not supported")
            parts.append((c, count))
            i = j
            continue
        if c in "[]{}#":
            raise RegexError(f"{c!r} is not supported in a date pattern")
        parts.append(c)
        i += 1
    return parts


_PATTERN_CACHE: dict = {}


def _pattern(pattern: str) -> list:
    parts = _PATTERN_CACHE.get(pattern)
    if parts is None:
        if len(_PATTERN_CACHE) > 256:
            _PATTERN_CACHE.clear()
        parts = _PATTERN_CACHE[pattern] = date_pattern(pattern)
    return parts


def format_timestamp(ts: _dt.datetime, pattern: str) -> str:
    """DATE_FORMAT(ts, pattern) with java.time's pattern letters."""
    out = []
    for part in _pattern(pattern):
        if isinstance(part, str):
            out.append(part)
            continue
        c, count = part
        if c == "y":
            year = ts.year
            out.append(f"{year % 100:02d}" if count == 2 else f"{year:0{count}d}")
        elif c == "M":
            out.append(_MONTH_NAMES[ts.month - 1] if count == 4 else _MONTH_NAMES[ts.month - 1][:3] if count == 3
                       else f"{ts.month:0{count}d}")
        elif c == "d":
            out.append(f"{ts.day:0{count}d}")
        elif c == "H":
            out.append(f"{ts.hour:0{count}d}")
        elif c == "h":
            out.append(f"{(ts.hour % 12) or 12:0{count}d}")
        elif c == "m":
            out.append(f"{ts.minute:0{count}d}")
        elif c == "s":
            out.append(f"{ts.second:0{count}d}")
        elif c == "S":
            out.append(f"{ts.microsecond:06d}000"[:count] if count <= 9 else f"{ts.microsecond:06d}".ljust(count, "0"))
        elif c == "a":
            out.append("AM" if ts.hour < 12 else "PM")
        elif c == "E":
            name = _DAY_NAMES[ts.weekday()]
            out.append(name if count == 4 else name[:3])
    return "".join(out)


def format_string_timestamp(s: str, pattern: str):
    """DATE_FORMAT(string, pattern): the string read as ``yyyy-MM-dd HH:mm:ss`` by a lenient
    SimpleDateFormat (NULL if it is not), formatted in the same calendar (Flink's
    DateTimeUtils.formatTimestampString: java.util's GregorianCalendar, UTC)."""
    fields = _parse_simple(s)
    return None if fields is None else format_timestamp(fields, pattern)


#: SimpleDateFormat skips spaces and tabs before each number it reads (its subParse).
_SIMPLE_TIMESTAMP = re.compile(r"[ \t]*(-?\d+)-[ \t]*(-?\d+)-[ \t]*(-?\d+) [ \t]*(-?\d+):[ \t]*(-?\d+):[ \t]*(-?\d+)")


def _gregorian_days(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of the proleptic Gregorian (y, m, d), m in 1..12, any y and d."""
    y -= m <= 2
    era, yoe = divmod(y, 400)
    doy = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _julian_days_raw(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era, yoe = divmod(y, 4)
    return era * 1461 + yoe * 365 + (153 * ((m + 9) % 12) + 2) // 5 + d - 1


#: The Gregorian calendar's first day, 1582-10-15 (the day after the Julian 1582-10-04), in days since 1970.
_CUTOVER = _gregorian_days(1582, 10, 15)
_JULIAN_SHIFT = _CUTOVER - _julian_days_raw(1582, 10, 5)


def _julian_days(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of the proleptic Julian (y, m, d)."""
    return _julian_days_raw(y, m, d) + _JULIAN_SHIFT


def _month_day(doy: int) -> tuple[int, int, bool]:
    """(month, day, in the next year) of a day of a year that starts on March 1st."""
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return month, day, month <= 2


def _hybrid_date(days: int) -> tuple[int, int, int]:
    """(year, month, day) of days since 1970 in java.util's GregorianCalendar: Julian before 1582-10-15."""
    if days >= _CUTOVER:
        era, doe = divmod(days + 719468, 146097)
        yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
        month, day, next_year = _month_day(doe - (365 * yoe + yoe // 4 - yoe // 100))
        return era * 400 + yoe + next_year, month, day
    era, doe = divmod(days - _JULIAN_SHIFT, 1461)
    yoe = min(doe // 365, 3)
    month, day, next_year = _month_day(doe - 365 * yoe)
    return era * 4 + yoe + next_year, month, day


class _CalendarFields:
    """A date and time as java.util's GregorianCalendar holds it, for :func:`format_timestamp`:
    ``year`` is the year of its era (1 BC is 1), ``weekday()`` Monday 0."""
    __slots__ = ("year", "month", "day", "hour", "minute", "second", "microsecond", "_days")

    def __init__(self, days: int, millis: int):
        year, self.month, self.day = _hybrid_date(days)
        self.year = year if year > 0 else 1 - year
        self.hour, rest = divmod(millis, 3_600_000)
        self.minute, rest = divmod(rest, 60_000)
        self.second, rest = divmod(rest, 1000)
        self.microsecond = rest * 1000
        self._days = days

    def weekday(self) -> int:
        return (self._days + 3) % 7


def _parse_simple(s: str):
    """``yyyy-MM-dd HH:mm:ss`` as a lenient SimpleDateFormat reads it, in UTC: each field an
    optionally negative number (no ``+``), any text after the seconds ignored; fields overflow into
    the next (month 13 is January of the next year, day 30 of February a day of March, hour 25 the
    next day). As java.util's GregorianCalendar, a year before 1582 is a Julian year, a date from
    1582 on Gregorian unless that falls before 1582-10-15 (then Julian: 1582-10-10 is 1582-10-20);
    the year 0 is 1 BC, -5 6 BC. Any year: 12024 too; as Java, a field wraps as an int and the
    epoch milliseconds as a long."""
    match = _SIMPLE_TIMESTAMP.match(s)
    if match is None:
        return None
    year, month, day, hour, minute, second = (wrap32(int(g)) for g in match.groups())
    carry, month0 = divmod(month - 1, 12)
    extra_days, millis = divmod(((hour * 60 + minute) * 60 + second) * 1000, MS_PER_DAY)
    days = _gregorian_days(year + carry, month0 + 1, day) + extra_days
    if year < 1582 or days < _CUTOVER:
        days = _julian_days(year + carry, month0 + 1, day) + extra_days
    return _CalendarFields(*divmod(wrap64(days * MS_PER_DAY + millis), MS_PER_DAY))


def _pattern_regex(parts: list) -> tuple:
    out, fields = [], []
    for part in parts:
        if isinstance(part, str):
            out.append(re.escape(part))
            continue
        c, count = part
        if c in "yMdHhms" and not (c == "M" and count >= 3):
            width = count if count > 1 or c == "y" else None
            if c == "y" and count == 2:
                out.append(r"(\d{2})")
            elif c == "y":
                out.append(rf"(\d{{{count},9}})" if count >= 4 else r"(\d{1,9})")
            elif width:
                out.append(rf"(\d{{{width}}})")
            else:
                out.append(r"(\d{1,19})")
            fields.append((c, count))
        elif c == "M":
            out.append("(" + "|".join(m if count == 4 else m[:3] for m in _MONTH_NAMES) + ")")
            fields.append((c, count))
        elif c == "S":
            out.append(rf"(\d{{{count}}})")
            fields.append((c, count))
        elif c == "a":
            out.append("(AM|PM)")
            fields.append((c, count))
        elif c == "E":
            out.append("(" + "|".join(d if count == 4 else d[:3] for d in _DAY_NAMES) + ")")
            fields.append((c, count))
    return re.compile("".join(out)), fields


_PARSE_CACHE: dict = {}


def parse_with_pattern(s: str, pattern: str):
    """TO_TIMESTAMP(s, pattern): the timestamp the pattern reads in ``s`` (missing fields default
    to 1970-01-01 00:00:00), else Flink's fallback to the default text, else None."""
    parsed = _PARSE_CACHE.get(pattern)
    if parsed is None:
        if len(_PARSE_CACHE) > 256:
            _PARSE_CACHE.clear()
        parsed = _PARSE_CACHE[pattern] = _pattern_regex(_pattern(pattern))
    regex, fields = parsed
    match = regex.fullmatch(s)
    if match is not None:
        values = {"y": 1970, "M": 1, "d": 1, "H": 0, "m": 0, "s": 0, "S": 0}
        pm = None
        hour12 = None
        for (c, count), text in zip(fields, match.groups()):
            if c == "M" and count >= 3:
                values["M"] = [m if count == 4 else m[:3] for m in _MONTH_NAMES].index(text) + 1
            elif c == "y" and count == 2:
                values["y"] = 2000 + int(text)
            elif c == "S":
                values["S"] = int(text.ljust(9, "0")[:9])
            elif c == "a":
                pm = text == "PM"
            elif c == "h":
                hour12 = int(text)
            elif c != "E":
                values[c] = int(text)
        if hour12 is not None:
            values["H"] = hour12 % 12 + (12 if pm else 0)
        if values["y"] > 9999 or values["y"] < 1:
            out_of_range(f"'{s}' read as '{pattern}' is in the year {values['y']}")
        try:
            micros = values["S"] // 1000 // 1000 * 1000
            return _dt.datetime(values["y"], values["M"], values["d"], values["H"], values["m"], values["s"], micros,
                                tzinfo=UTC)
        except (ValueError, OverflowError):
            pass
    return _fallback_timestamp(s)


_SQL_TIMESTAMP = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?")
_SQL_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")


def _fallback_timestamp(s: str):
    """java.sql.Timestamp.valueOf / java.sql.Date.valueOf of the trimmed text, or None."""
    text = _java_trim(s)
    if " " in text:
        match = _SQL_TIMESTAMP.fullmatch(text)
        if match is None:
            return None
        y, mo, d, h, mi, se, fraction = match.groups()
        micros = int((fraction or "0").ljust(9, "0")) // 1_000_000 * 1000
        try:
            return _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(se), micros, tzinfo=UTC)
        except ValueError:
            return None
    match = _SQL_DATE.fullmatch(text)
    if match is None:
        return None
    try:
        return _dt.datetime(*(int(g) for g in match.groups()), tzinfo=UTC)
    except ValueError:
        return None


def to_date_with_pattern(s: str, pattern: str):
    ts = parse_with_pattern(s, pattern)
    return None if ts is None else ts.date()


def to_date(s: str):
    """TO_DATE(s): as CAST(s AS DATE), NULL for what is not a date."""
    days = parse_date_days(s)
    return None if days is None else date_of_days(days)


# -- comparisons of values of different types -----------------------------------------------------
def to_double(value) -> float:
    """A number as a DOUBLE for comparing with a DOUBLE (Flink compares in double)."""
    if isinstance(value, Decimal):
        return to_double_from_decimal(value, 18 if len(value.as_tuple().digits) <= 18 else 38)
    return float(value)

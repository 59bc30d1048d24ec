"""Keys checked in Python before they are sent, canonical forms for matching rows back to keys,
and what a returned value must be for the join to take it."""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from .catalog import TableColumn
from .connection import _DATETIME_TYPES, Unloadable
from .errors import _show

_UTC = _dt.timezone.utc


class _Invalid(Exception):
    """A key value the key column cannot hold; the message ends "<value> <message>"."""


_NAN = "NaN"  # the canonical form of a float NaN (PostgreSQL: NaN = NaN), never equal to a float
_F32 = struct.Struct("<f")
_INT_RANGES = {"int2": (-(2**15), 2**15 - 1), "int4": (-(2**31), 2**31 - 1), "int8": (-(2**63), 2**63 - 1)}
_NUMERIC_MAX_ADJUSTED = 131071  # up to 131072 digits before the decimal point
_NUMERIC_MAX_SCALE = 16383  # up to 16383 digits after it


@dataclass(frozen=True)
class _KeyKind:
    check: Callable[[Any], tuple[Any, Any]]  # a key value -> (canonical, value sent) or _Invalid
    row_canonical: Callable[[Any], Any] | None = None  # a returned value -> canonical (None: as is)


def _int_kind(cast: str) -> _KeyKind:
    lo, hi = _INT_RANGES[cast]

    def check(v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Invalid("is not an integer")
        if not lo <= v <= hi:
            raise _Invalid("is out of range")
        return v, v

    return _KeyKind(check)


def _float_canonical(single: bool) -> Callable[[Any], Any]:
    def canonical(v):
        f = float(v)
        if single:
            f = _F32.unpack(_F32.pack(f))[0]
        return _NAN if f != f else f

    return canonical


def _float_kind(single: bool) -> _KeyKind:
    canonical = _float_canonical(single)

    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
            raise _Invalid("is not a number")
        try:
            c = canonical(v)
        except (OverflowError, ValueError):
            raise _Invalid("is out of range") from None
        return c, float("nan") if c is _NAN else c

    return _KeyKind(check, canonical)


def _numeric_check(v):
    if isinstance(v, bool) or not isinstance(v, (int, decimal.Decimal)):
        raise _Invalid("is not a decimal number")
    if isinstance(v, int):
        if v.bit_length() > 435_500:  # beyond 10**131072: out of range, and slow to convert
            raise _Invalid("is out of range")
        v = decimal.Decimal(v)
    if not v.is_finite():
        raise _Invalid("is not a finite number")
    if v and v.adjusted() > _NUMERIC_MAX_ADJUSTED:
        raise _Invalid("is out of range")
    exponent = v.as_tuple().exponent
    if exponent < -_NUMERIC_MAX_SCALE:  # trailing zeros do not count
        digits = len(v.as_tuple().digits)
        v = v.normalize(decimal.Context(prec=max(1, digits)))
        if v.as_tuple().exponent < -_NUMERIC_MAX_SCALE:
            raise _Invalid("has too many digits after the decimal point")
    return v, v  # Decimal hashes and compares by value: 1.50 and 1.5 are one key


def _text_kind(strip: bool = False, lower: bool = False) -> _KeyKind:
    def canonical(v):
        if strip:
            v = v.rstrip(" ")
        return v.lower() if lower else v

    def check(v):
        if not isinstance(v, str):
            raise _Invalid("is not a string")
        if "\x00" in v:
            raise _Invalid("contains a NUL character")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise _Invalid("is not valid Unicode text") from None
        c = canonical(v)
        return c, (v.rstrip(" ") if strip else v)

    return _KeyKind(check, canonical if (strip or lower) else None)


def _uuid_check(v):
    if isinstance(v, uuid.UUID):
        text = str(v)
    elif isinstance(v, str):
        try:
            text = str(uuid.UUID(v))
        except ValueError:
            raise _Invalid("is not a UUID") from None
    else:
        raise _Invalid("is not a UUID")
    return text, text


def _date_check(v):
    if not isinstance(v, _dt.date) or isinstance(v, _dt.datetime):
        raise _Invalid("is not a date")
    return v, v


def _timestamp_kind(with_zone: bool) -> _KeyKind:
    def check(v):
        if not isinstance(v, _dt.datetime):
            raise _Invalid("is not a datetime")
        try:
            c = v.replace(tzinfo=_UTC) if v.tzinfo is None else v.astimezone(_UTC)
        except (OverflowError, ValueError):
            raise _Invalid("is out of range") from None
        return c, (c if with_zone else c.replace(tzinfo=None))

    return _KeyKind(check)


def _time_check(v):
    if not isinstance(v, _dt.time):
        raise _Invalid("is not a time")
    if v.tzinfo is not None:
        raise _Invalid("has a time zone (the column has none)")
    return v, v


def _bool_check(v):
    if not isinstance(v, bool):
        raise _Invalid("is not a boolean")
    return v, v


def _bytes_check(v):
    if not isinstance(v, bytes):
        raise _Invalid("is not bytes")
    return v, v


def _key_kind(column: TableColumn) -> _KeyKind | None:
    """How to check and compare keys of this column, or None if it cannot be a lookup key."""
    cast = column.cast
    if cast in _INT_RANGES:
        return _int_kind(cast)
    simple = {
        "float4": lambda: _float_kind(True), "float8": lambda: _float_kind(False),
        "numeric": lambda: _KeyKind(_numeric_check),
        "text": _text_kind, "varchar": _text_kind, "name": _text_kind,
        "bpchar": lambda: _text_kind(strip=True),
        "uuid": lambda: _KeyKind(_uuid_check), "date": lambda: _KeyKind(_date_check),
        "timestamp": lambda: _timestamp_kind(False), "timestamptz": lambda: _timestamp_kind(True),
        "time": lambda: _KeyKind(_time_check), "bool": lambda: _KeyKind(_bool_check),
        "bytea": lambda: _KeyKind(_bytes_check),
    }
    if cast in simple:
        return simple[cast]()
    if "." in cast and column.avro_type == "string":  # an enum or citext (labels: the database checks)
        return _text_kind(lower=cast.endswith('."citext"'))
    return None


def _row_converter(cast: str) -> Callable[[Any], Any] | None:
    """Turns a value psycopg loaded into what the Avro encoder takes (None: as it is). uuid, json
    and jsonb come as text already (loaders registered in ``_open``)."""
    if cast == "timestamptz":
        return lambda v: v if v.tzinfo is _UTC else v.astimezone(_UTC)
    if cast == "timestamp":
        return lambda v: v.replace(tzinfo=_UTC)
    return None


def _value_check(column: TableColumn) -> Callable[[Any], str | None] | None:
    """What a value of this column must be for the join to take it, as ``value -> problem or
    None``: loaded (not ``Unloadable``), not NULL where the column was NOT NULL when the join was
    planned (the output's type then has no null), and for a ``numeric(p,s)`` a finite number of
    at most p digits, s after the point: PostgreSQL allows NaN there, which the output's Avro
    decimal cannot hold. Other values are what their type maps to (the type map above)."""
    avro = column.avro_type
    decimal_type = isinstance(avro, dict) and avro.get("logicalType") == "decimal"
    if decimal_type:
        precision, scale = avro["precision"], avro.get("scale", 0)
    elif column.nullable and column.cast not in _DATETIME_TYPES:
        return None  # any value psycopg loads is one of the type's

    def check(v):
        if v is None:
            return None if column.nullable else "NULL, but the column was NOT NULL when the join was planned " \
                "(restart the service to take it as nullable)"
        if isinstance(v, Unloadable):
            return f"{_show(v.text)} cannot be read as a Python value ({v.why})"
        if decimal_type and isinstance(v, decimal.Decimal):
            if not v.is_finite():
                return f"{_show(v)} is not a number the output's Avro decimal({precision},{scale}) can hold"
            exponent = v.as_tuple().exponent
            if -exponent > scale or (v and v.adjusted() >= precision - scale):
                return f"{_show(v)} has more digits than the output's Avro decimal({precision},{scale})"
        return None

    return check

"""Flink SQL's data types as the expressions use them: what a column or an expression holds.

A :class:`SqlType` is one of Flink's logical types (``INT``, ``DECIMAL(10, 2)``, ``VARCHAR(n)``,
``TIMESTAMP(3)``...) with its nullability, written the way Flink writes it (``str(t)``:
``DECIMAL(10, 2) NOT NULL``; :func:`parse_type` reads it back, which is how types travel in a
plan). Here too: the Avro types the inputs' columns have and the output's columns get
(:func:`from_avro`, :meth:`SqlType.avro`), and the rules by which Flink derives the type of an
expression from its operands (:func:`common_type`, the ``decimal_*`` rules of
``LogicalTypeMerging``).

Values at run time: BOOLEAN a bool, the integers an int, FLOAT and DOUBLE a float, DECIMAL a
``decimal.Decimal`` of the type's scale, CHAR and VARCHAR a str, BINARY and VARBINARY bytes, DATE a
``datetime.date``, TIME a ``datetime.time``, TIMESTAMP a ``datetime.datetime`` in UTC (timezone
aware, as the Avro decoder gives it), an INTERVAL an int (milliseconds, or months), NULL None.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

MAX_PRECISION = 38  # DECIMAL
MAX_LENGTH = 2147483647  # VARCHAR(MAX) is STRING, VARBINARY(MAX) is BYTES
_MIN_ADJUSTED_SCALE = 6

# Type roots, by family.
INTEGERS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
APPROXIMATE = ("FLOAT", "DOUBLE")
CHARACTER = ("CHAR", "VARCHAR")
BINARY = ("BINARY", "VARBINARY")
#: Bits of each integer type: Flink's arithmetic on them wraps around as Java's does.
INTEGER_BITS = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}
#: The DECIMAL an integer type takes part in decimal arithmetic as.
_INTEGER_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19}


class TypeError_(ValueError):
    """Operands of types an operation does not take: the message says which (a user's error)."""


@dataclass(frozen=True)
class SqlType:
    """A Flink logical type. ``precision``: a DECIMAL's precision, a CHAR / VARCHAR / BINARY /
    VARBINARY's length, a TIME / TIMESTAMP's fractional digits; ``scale``: a DECIMAL's scale.
    ``avro`` keeps a column's own Avro type for a type Flink's types do not describe here (records,
    arrays, maps, enums keep theirs when copied): root ``OTHER``."""

    root: str
    precision: int | None = None
    scale: int | None = None
    nullable: bool = True
    avro_type: object = None  # OTHER only: the column's Avro type (JSON)

    # -- families -----------------------------------------------------------------------------
    @property
    def is_integer(self) -> bool:
        return self.root in INTEGERS

    @property
    def is_decimal(self) -> bool:
        return self.root == "DECIMAL"

    @property
    def is_exact(self) -> bool:
        return self.root in INTEGERS or self.root == "DECIMAL"

    @property
    def is_approximate(self) -> bool:
        return self.root in APPROXIMATE

    @property
    def is_numeric(self) -> bool:
        return self.is_exact or self.is_approximate

    @property
    def is_string(self) -> bool:
        return self.root in CHARACTER

    @property
    def is_binary(self) -> bool:
        return self.root in BINARY

    @property
    def is_null(self) -> bool:
        return self.root == "NULL"

    @property
    def is_interval(self) -> bool:
        return self.root in ("INTERVAL_DAY_TIME", "INTERVAL_YEAR_MONTH")

    @property
    def is_datetime(self) -> bool:
        return self.root in ("DATE", "TIME", "TIMESTAMP")

    @property
    def family(self) -> str:
        """The coarse family the join's key and condition checks use (``avro.type_family``'s words)."""
        if self.is_integer:
            return "integer"
        if self.is_approximate:
            return "float"
        return {"DECIMAL": "decimal", "CHAR": "string", "VARCHAR": "string", "BINARY": "bytes", "VARBINARY": "bytes",
                "BOOLEAN": "boolean", "DATE": "date", "TIME": "time", "TIMESTAMP": "timestamp",
                "NULL": "null"}.get(self.root, "other")

    def with_nullable(self, nullable: bool) -> "SqlType":
        return self if self.nullable == nullable else replace(self, nullable=nullable)

    def not_null(self) -> "SqlType":
        return self.with_nullable(False)

    def __str__(self) -> str:
        if self.root == "VARCHAR" and self.precision == MAX_LENGTH:
            text = "STRING"
        elif self.root == "VARBINARY" and self.precision == MAX_LENGTH:
            text = "BYTES"
        elif self.root == "DECIMAL":
            text = f"DECIMAL({self.precision}, {self.scale})"
        elif self.root in ("CHAR", "VARCHAR", "BINARY", "VARBINARY", "TIME", "TIMESTAMP"):
            text = f"{self.root}({self.precision})"
        elif self.root == "INTERVAL_DAY_TIME":
            text = "INTERVAL SECOND(3)"
        elif self.root == "INTERVAL_YEAR_MONTH":
            text = "INTERVAL MONTH"
        elif self.root == "OTHER":
            import json

            text = f"OTHER({json.dumps(self.avro_type, separators=(',', ':'))})"
        else:
            text = self.root
        return text if self.nullable or self.root == "NULL" else f"{text} NOT NULL"

    # -- Avro ---------------------------------------------------------------------------------
    def avro(self) -> object:
        """The Avro type of a column of this type, without its nullability (Flink's Avro format:
        DECIMAL as bytes with the decimal logical type, DATE as date, TIMESTAMP(p <= 3) as
        timestamp-millis, up to 6 as timestamp-micros)."""
        root = self.root
        if root == "OTHER":
            return self.avro_type
        if root == "BOOLEAN":
            return "boolean"
        if root in ("TINYINT", "SMALLINT", "INT"):
            return "int"
        if root == "BIGINT":
            return "long"
        if root == "FLOAT":
            return "float"
        if root == "DOUBLE":
            return "double"
        if root in CHARACTER:
            return "string"
        if root in BINARY:
            return "bytes"
        if root == "DECIMAL":
            return {"type": "bytes", "logicalType": "decimal", "precision": self.precision, "scale": self.scale}
        if root == "DATE":
            return {"type": "int", "logicalType": "date"}
        if root == "TIME":
            return ({"type": "int", "logicalType": "time-millis"} if self.precision <= 3
                    else {"type": "long", "logicalType": "time-micros"})
        if root == "TIMESTAMP":
            return ({"type": "long", "logicalType": "timestamp-millis"} if self.precision <= 3
                    else {"type": "long", "logicalType": "timestamp-micros"})
        raise TypeError_(f"a value of type {self} cannot be written to Avro")


# -- constructors ---------------------------------------------------------------------------------
BOOLEAN = SqlType("BOOLEAN")
INT = SqlType("INT")
BIGINT = SqlType("BIGINT")
FLOAT = SqlType("FLOAT")
DOUBLE = SqlType("DOUBLE")
STRING = SqlType("VARCHAR", MAX_LENGTH)
BYTES = SqlType("VARBINARY", MAX_LENGTH)
DATE = SqlType("DATE")
NULL = SqlType("NULL")
INTERVAL_DAY_TIME = SqlType("INTERVAL_DAY_TIME")
INTERVAL_YEAR_MONTH = SqlType("INTERVAL_YEAR_MONTH")


def decimal(precision: int, scale: int, nullable: bool = True) -> SqlType:
    return SqlType("DECIMAL", precision, scale, nullable)


def timestamp(precision: int = 3, nullable: bool = True) -> SqlType:
    return SqlType("TIMESTAMP", precision, None, nullable)


def char(length: int, nullable: bool = True) -> SqlType:
    return SqlType("CHAR", length, None, nullable)


def varchar(length: int, nullable: bool = True) -> SqlType:
    return SqlType("VARCHAR", length, None, nullable)


_TYPE = re.compile(r"^\s*(?P<root>[A-Z_]+(?: [A-Z_]+)*?)\s*(?:\((?P<args>[^)]*)\))?\s*(?P<nn>NOT NULL)?\s*$")
_ALIASES = {"INTEGER": "INT", "STRING": "VARCHAR", "BYTES": "VARBINARY", "DEC": "DECIMAL", "NUMERIC": "DECIMAL",
            "CHARACTER VARYING": "VARCHAR", "CHARACTER": "CHAR", "BINARY VARYING": "VARBINARY", "REAL": "FLOAT",
            "DOUBLE PRECISION": "DOUBLE"}


def parse_type(text: str) -> SqlType:
    """A type written as :class:`SqlType` writes it, or as a SQL ``CAST`` target: ``INT``,
    ``DECIMAL(10, 2)``, ``VARCHAR(5)``, ``STRING``, ``TIMESTAMP(3) NOT NULL``..."""
    if text.startswith("OTHER("):
        import json

        nullable = not text.endswith(" NOT NULL")
        body = text[len("OTHER("):len(text) - (len(") NOT NULL") if not nullable else 1)]
        return SqlType("OTHER", nullable=nullable, avro_type=json.loads(body))
    if text.startswith("INTERVAL"):
        nullable = not text.endswith("NOT NULL")
        root = "INTERVAL_YEAR_MONTH" if "MONTH" in text and "SECOND" not in text else "INTERVAL_DAY_TIME"
        return SqlType(root, nullable=nullable)
    match = _TYPE.match(text.upper())
    if match is None:
        raise TypeError_(f"unknown type {text!r}")
    root = match["root"].strip()
    nullable = match["nn"] is None
    args = [int(a) for a in match["args"].split(",")] if match["args"] else []
    if root in ("STRING", "BYTES"):
        return SqlType(_ALIASES[root], MAX_LENGTH, None, nullable)
    root = _ALIASES.get(root, root)
    if root == "DECIMAL":
        precision = args[0] if args else 10
        scale = args[1] if len(args) > 1 else 0
        if not 1 <= precision <= MAX_PRECISION or not 0 <= scale <= precision:
            raise TypeError_(f"DECIMAL({precision}, {scale}) is not a decimal type: precision 1 to 38, scale 0 to "
                             "the precision")
        return SqlType("DECIMAL", precision, scale, nullable)
    if root in ("CHAR", "BINARY"):
        return SqlType(root, args[0] if args else 1, None, nullable)
    if root in ("VARCHAR", "VARBINARY"):
        return SqlType(root, args[0] if args else 1, None, nullable)
    if root in ("TIMESTAMP", "TIME"):
        precision = args[0] if args else (6 if root == "TIMESTAMP" else 0)
        if not 0 <= precision <= 9:
            raise TypeError_(f"{root}({precision}): the precision is 0 to 9")
        return SqlType(root, precision, None, nullable)
    if root in ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DATE", "NULL"):
        return SqlType(root, None, None, nullable)
    raise TypeError_(f"unknown type {text!r}")


def from_avro(avro_type: object, nullable: bool) -> SqlType:
    """The Flink type of a column of Avro type ``avro_type`` (nullability given apart), as Flink's
    Avro format reads it; a type it has no scalar for (records, arrays, maps, unions of several
    types, enums, fixed) is ``OTHER``: such a column may be selected and compared for nothing."""
    core = avro_type
    if isinstance(core, list):
        branches = [b for b in core if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
        if len(branches) != 1:
            return SqlType("OTHER", nullable=nullable, avro_type=avro_type)
        core = branches[0]
    logical = None
    if isinstance(core, dict):
        logical = core.get("logicalType")
        base = core.get("type")
        if isinstance(base, (dict, list)) and logical is None:
            return from_avro(base, nullable)
    else:
        base = core
    if logical == "decimal" and base in ("bytes", "fixed"):
        return decimal(int(core["precision"]), int(core.get("scale", 0)), nullable)
    if logical == "date" and base == "int":
        return SqlType("DATE", nullable=nullable)
    if logical == "time-millis" and base == "int":
        return SqlType("TIME", 3, None, nullable)
    if logical == "time-micros" and base == "long":
        return SqlType("TIME", 6, None, nullable)
    if logical in ("timestamp-millis", "local-timestamp-millis") and base == "long":
        return timestamp(3, nullable)
    if logical in ("timestamp-micros", "local-timestamp-micros") and base == "long":
        return timestamp(6, nullable)
    simple = {"boolean": BOOLEAN, "int": INT, "long": BIGINT, "float": FLOAT, "double": DOUBLE, "string": STRING,
              "bytes": BYTES}
    if isinstance(base, str) and base in simple and (logical is None or logical not in _UNREAD_LOGICAL):
        return simple[base].with_nullable(nullable)
    return SqlType("OTHER", nullable=nullable, avro_type=avro_type)


# Logical types whose values the decoder gives as something else than the base type's (e.g. uuid:
# a str, as the base type string is, so uuid is read as STRING; duration: fixed bytes).
_UNREAD_LOGICAL = frozenset({"duration"})


# -- type derivation ------------------------------------------------------------------------------
def _adjust(precision: int, scale: int) -> tuple[int, int]:
    """Flink's scale adjustment when a result's precision is beyond 38: the integral digits are
    kept, the scale reduced, but not below min(scale, 6)."""
    if precision <= MAX_PRECISION:
        return precision, scale
    digits = precision - scale
    return MAX_PRECISION, max(MAX_PRECISION - digits, min(scale, _MIN_ADJUSTED_SCALE))


def as_decimal(t: SqlType) -> tuple[int, int]:
    """(precision, scale) of an exact numeric type in decimal arithmetic."""
    if t.is_decimal:
        return t.precision, t.scale
    return _INTEGER_DIGITS[t.root], 0


def decimal_add(a: SqlType, b: SqlType) -> tuple[int, int]:
    (p1, s1), (p2, s2) = as_decimal(a), as_decimal(b)
    scale = max(s1, s2)
    return _adjust(max(p1 - s1, p2 - s2) + scale + 1, scale)


def decimal_multiply(a: SqlType, b: SqlType) -> tuple[int, int]:
    (p1, s1), (p2, s2) = as_decimal(a), as_decimal(b)
    return _adjust(p1 + p2 + 1, s1 + s2)


def decimal_divide(a: SqlType, b: SqlType) -> tuple[int, int]:
    (p1, s1), (p2, s2) = as_decimal(a), as_decimal(b)
    scale = max(6, s1 + p2 + 1)
    return _adjust(p1 - s1 + s2 + scale, scale)


def decimal_modulo(a: SqlType, b: SqlType) -> tuple[int, int]:
    (p1, s1), (p2, s2) = as_decimal(a), as_decimal(b)
    scale = max(s1, s2)
    return _adjust(min(p1 - s1, p2 - s2) + scale, scale)


def decimal_round(precision: int, scale: int, digits: int) -> tuple[int, int]:
    """ROUND / TRUNCATE of a DECIMAL(precision, scale) to ``digits`` decimal places."""
    if digits >= scale:
        return precision, scale
    if digits < 0:
        return min(MAX_PRECISION, 1 + precision - scale), 0
    return 1 + precision - scale + digits, digits


_INTEGER_RANK = {root: i for i, root in enumerate(INTEGERS)}


def wider_integer(a: SqlType, b: SqlType) -> str:
    return a.root if _INTEGER_RANK[a.root] >= _INTEGER_RANK[b.root] else b.root


def common_type(types: list[SqlType]) -> SqlType | None:
    """The type values of ``types`` meet in (CASE's branches, COALESCE's arguments, IN's list,
    a comparison's operands): Flink's ``LogicalTypeMerging.findCommonType``, nullable when any is;
    None when there is none."""
    nullable = any(t.nullable for t in types)
    result: SqlType | None = None
    for t in types:
        if t.is_null:
            continue
        if result is None:
            result = t
            continue
        if result.root == "OTHER" or t.root == "OTHER":
            if result.avro_type != t.avro_type:
                return None
            continue
        if result.is_string and t.is_string or result.is_binary and t.is_binary:
            length = max(result.precision, t.precision)
            variable = "VARCHAR" if result.is_string else "VARBINARY"
            if result.root == variable or t.root == variable or result.precision != t.precision:
                result = SqlType(variable, length)
            else:
                result = SqlType(result.root, length)
        elif t.is_exact and result.is_exact:
            if result.is_integer and t.is_integer:
                result = SqlType(wider_integer(result, t))
            else:
                (p1, s1), (p2, s2) = as_decimal(result), as_decimal(t)
                scale = max(s1, s2)
                digits = max(p1 - s1, p2 - s2)
                result = decimal(min(MAX_PRECISION, digits + scale), scale)
        elif t.is_numeric and result.is_numeric:
            if t.is_decimal or result.is_decimal:
                result = DOUBLE
            elif t.is_approximate and result.is_approximate:
                result = DOUBLE if "DOUBLE" in (t.root, result.root) else FLOAT
            else:
                result = t if t.is_approximate else result
        elif t.root == result.root and t.root in ("BOOLEAN", "DATE"):
            result = SqlType(t.root)
        elif t.root == result.root and t.root in ("TIME", "TIMESTAMP"):
            result = SqlType(t.root, max(t.precision, result.precision))
        elif t.root == result.root and t.is_interval:
            result = SqlType(t.root)
        else:
            return None
    if result is None:
        return NULL
    return result.with_nullable(nullable)


def comparable(a: SqlType, b: SqlType) -> bool:
    """Values of ``a`` and ``b`` can be compared (=, <, IN ...), as Flink allows without a CAST."""
    if a.is_null or b.is_null:
        return True
    if a.root == "OTHER" or b.root == "OTHER":
        return False
    return common_type([a, b]) is not None

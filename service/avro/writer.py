"""Avro values out: rows encoded as plain bodies or in Confluent wire format, by a record writer
compiled once per output schema (fastavro for anything else)."""

from __future__ import annotations

import io
import struct
from typing import Callable

import fastavro

from .registry import _MAGIC, SchemaRegistry
from .schemas import _parse, record_columns


# -- a record writer compiled for one schema ---------------------------------------------------
# fastavro's writer takes a dict per record and walks the schema for every value; for the output
# schemas changejoin writes (flat records of primitives, enums and nullable primitives) a writer
# generated once per schema is several times faster. Anything else is left to fastavro.

_DOUBLE, _FLOAT = struct.Struct("<d").pack, struct.Struct("<f").pack
_TAGGED_DOUBLE, _TAGGED_FLOAT = struct.Struct("<Bd").pack, struct.Struct("<Bf").pack  # a union's branch, then the value
_SMALL_LONGS = tuple(bytes([(n << 1) ^ (n >> 63)]) for n in range(-64, 64))


def _long(n: int) -> bytes:
    """Avro's zig-zag varint of ``n``."""
    if -64 <= n < 64:
        return _SMALL_LONGS[n + 64]
    n = (n << 1) ^ (n >> 63)
    if n < 0x4000:  # two and three bytes without the loop: ids, counts and lengths mostly are
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: The varints of -8192..8191 (one or two bytes), which the compiled writers look up instead of
#: calling :func:`_long`: ``_LONGS[n + _TABLE]``, and a length's ``_LENGTHS[n]``.
_TABLE = 8192
_LONGS = tuple(_long(n) for n in range(-_TABLE, _TABLE))
_LENGTHS = _LONGS[_TABLE:]


def _varint(value: str) -> str:
    """A Python expression writing the int ``value`` (an expression without side effects) as a varint."""
    return f"(_LONGS[{value} + {_TABLE}] if {-_TABLE} <= {value} < {_TABLE} else _long({value}))"


def _sized(data: str, name: str) -> str:
    """A Python expression writing the length of ``data`` (bytes) as a varint, which it assigns to
    ``name`` (for the next part of the record to write)."""
    return f"(_LENGTHS[n_{name}] if (n_{name} := len({name} := {data})) < {_TABLE} else _long(n_{name}))"


def _primitive_writer(avro_type, value: str, constants: dict, name: str) -> list[str] | None:
    """Python expressions writing ``value`` as ``avro_type``, one after the other (a string's
    length, then its bytes, held in ``name``), or None for a type left to fastavro."""
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") is not None:
            return None
        if avro_type.get("type") == "enum":
            enum = f"_enum{len(constants)}"
            constants[enum] = {symbol: _long(i) for i, symbol in enumerate(avro_type["symbols"])}
            return [f"{enum}[{value}]"]
        avro_type = avro_type.get("type")
    if not isinstance(avro_type, str):
        return None
    if avro_type in ("string", "bytes"):
        return [_sized(f"{value}.encode()" if avro_type == "string" else value, name), name]
    simple = {
        "null": "b''",
        "boolean": f"(b'\\x01' if {value} else b'\\x00')",
        "int": _varint(value),
        "long": _varint(value),
        "double": f"_DOUBLE({value})",
        "float": f"_FLOAT({value})",
    }.get(avro_type)
    return None if simple is None else [simple]


def compile_record_writer(schema: dict):
    """``row tuple -> Avro body bytes`` for a record whose fields are primitives, enums or unions
    of ``null`` and one of those; None for any other schema (fastavro then writes it).

    The writer is one expression, ``b''.join`` of each field's parts, with no call per field for
    the common values: a varint of -8192..8191 and a length below 8192 are looked up in a table,
    a string's bytes are encoded once and kept in a local of the expression for the part after
    its length. A value of the wrong type raises (its writer then leaves it to fastavro)."""
    constants: dict = {}
    parts = []
    for i, field in enumerate(schema.get("fields", ())):
        avro_type, value = field["type"], f"row[{i}]"
        if isinstance(avro_type, list):
            if len(avro_type) != 2 or "null" not in avro_type or avro_type[0] == avro_type[1]:
                return None
            null_index = avro_type.index("null")
            inner_type = avro_type[1 - null_index]
            inner = _primitive_writer(inner_type, value, constants, f"v{i}")
            if inner is None:
                return None
            null_tag, tag = repr(_long(null_index)), repr(_long(1 - null_index))
            if inner_type in ("double", "float"):  # the branch and the value in one pack
                pack = "_TAGGED_DOUBLE" if inner_type == "double" else "_TAGGED_FLOAT"
                parts.append(f"({null_tag} if {value} is None else {pack}({_long(1 - null_index)[0]}, {value}))")
            else:
                parts.append(f"({null_tag} if {value} is None else {tag} + {' + '.join(inner)})")
        else:
            writer = _primitive_writer(avro_type, value, constants, f"v{i}")
            if writer is None:
                return None
            if avro_type != "null":
                parts.extend(writer)
    namespace = {"_long": _long, "_LONGS": _LONGS, "_LENGTHS": _LENGTHS, "_DOUBLE": _DOUBLE, "_FLOAT": _FLOAT,
                 "_TAGGED_DOUBLE": _TAGGED_DOUBLE, "_TAGGED_FLOAT": _TAGGED_FLOAT, **constants}
    body = "b''.join((" + "".join(f"{p}, " for p in parts) + "))"
    return eval(f"lambda row: {body}", namespace)  # noqa: S307 - generated from the schema's field types only


class ValueEncoder:
    """Encodes tuples (values in schema field order) as Avro: a plain body, or Confluent wire
    format when a registry is given (the schema is registered under ``subject`` on first use)."""

    def __init__(
        self, schema: dict, registry: SchemaRegistry | None = None, subject: str | None = None
    ):
        if registry is not None and not subject:
            raise ValueError("a ValueEncoder with a registry needs a subject")
        self._schema = schema
        self._registry = registry
        self._subject = subject
        self._schema_id: int | None = None
        self._setup()

    def _setup(self) -> None:
        self.columns = record_columns(self._schema)
        self._parsed = _parse(self._schema)
        self._names = tuple(c.name for c in self.columns)
        self._compiled = compile_record_writer(fastavro.parse_schema(self._schema, expand=True))
        self._header = (
            None
            if self._schema_id is None
            else bytes([_MAGIC]) + self._schema_id.to_bytes(4, "big")
        )

    def __getstate__(self):
        return {
            "schema": self._schema,
            "registry": self._registry,
            "subject": self._subject,
            "schema_id": self._schema_id,
        }

    def __setstate__(self, state):
        self._schema = state["schema"]
        self._registry = state["registry"]
        self._subject = state["subject"]
        self._schema_id = state["schema_id"]
        self._setup()

    @property
    def schema(self) -> dict:
        return self._schema

    @property
    def schema_id(self) -> int | None:
        """The registered id (registering now if needed); None without a registry."""
        if self._registry is None:
            return None
        if self._schema_id is None:
            self._schema_id = self._registry.register(self._subject, self._schema)
            self._header = bytes([_MAGIC]) + self._schema_id.to_bytes(4, "big")
        return self._schema_id

    def writer(self) -> Callable[[tuple], bytes]:
        """:meth:`encode` as one function for a hot loop: the compiled writer with the checks that
        hold for every row (registry, header) done once, here. A row the compiled writer cannot
        write goes through :meth:`encode`, which says what is wrong with it."""
        if self._compiled is None:
            return self.encode
        self.schema_id  # noqa: B018 - with a registry: registers now, sets the header
        compiled, header, width, encode = self._compiled, self._header, len(self._names), self.encode

        def write(row: tuple) -> bytes:
            if len(row) == width:
                try:
                    return header + compiled(row) if header else compiled(row)
                except Exception:  # noqa: BLE001 - a value of the wrong type: encode() reports it
                    pass
            return encode(row)

        return write

    def encode(self, row: tuple) -> bytes:
        if len(row) != len(self._names):
            raise ValueError(f"row has {len(row)} values, schema has {len(self._names)} fields")
        if self._registry is not None and self._header is None:
            self.schema_id  # noqa: B018 - registers and sets the header
        header = self._header or b""
        if self._compiled is not None:
            try:
                return header + self._compiled(row)
            except Exception:  # noqa: BLE001 - a value of the wrong type: fastavro says what is wrong
                pass
        bio = io.BytesIO()
        bio.write(header)
        try:
            fastavro.schemaless_writer(bio, self._parsed, dict(zip(self._names, row)))
        except Exception as e:
            raise ValueError(f"cannot encode row as {self._parsed.get('name')}: {e}") from e
        return bio.getvalue()

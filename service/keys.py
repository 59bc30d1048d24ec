"""Message keys of upsert topics -> primary-key values.

On an upsert topic a record with a null value (a tombstone) deletes the row of its message key.
When the join takes such a topic directly (its join key is its primary key, see ``planner.py``), the
join key of a tombstone can only come from its message key, which is decoded here, per
``LEFT_KEY_FORMAT`` / ``RIGHT_KEY_FORMAT``:

- ``avro``: with ``SCHEMA_REGISTRY_URL``, Confluent wire format with any registered key schema (a
  record whose fields include the primary-key columns, or a primitive for a one-column key);
  without, a plain Avro body of a record of the primary-key columns in ``*_PRIMARY_KEY`` order
  (for a one-column key the same bytes as the bare column). This is how changejoin writes keys.
- ``raw``: a one-column key's text (UTF-8) read as the column's type; the bytes themselves for a
  ``bytes`` column.
- ``auto`` (default): wire format when a registry is set and the key starts with the magic byte;
  otherwise a one-column key is read both ways and, where both succeed, numbers and booleans are
  taken as text ("7") and strings and bytes as Avro (a text key rarely starts with exactly its
  own Avro length byte); a key of several columns is read as Avro.

Records with a value also carry their key; :meth:`KeyDecoder.agrees` checks it against the
value's primary key, so that keys written some other way are noticed before a tombstone is lost.
"""
from __future__ import annotations

import io
import re
import uuid

import fastavro

from .avro import DecodeError, SchemaRegistry, output_schema
from .deadletters import Reason

FORMATS = ("auto", "avro", "raw")

_MAGIC, _HEADER_LEN = 0, 5
_INTEGER = re.compile(r"-?[0-9]+")
_BOOLEANS = {"true": True, "false": False}


def _base(avro_type):
    """The column's non-null type: (primitive or named kind, logical type or None)."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        avro_type = branches[0] if len(branches) == 1 else None
    if isinstance(avro_type, dict):
        kind = avro_type.get("type")
        if isinstance(kind, (dict, list)):
            return _base(kind)
        return kind, avro_type.get("logicalType")
    return avro_type, None


def raw_parser(avro_type):
    """bytes -> value for a column of ``avro_type`` read as text, or None if the type has no text form."""
    kind, logical = _base(avro_type)
    if kind in ("string", "enum"):
        if logical == "uuid":
            return lambda b: uuid.UUID(b.decode())
        return lambda b: b.decode()
    if kind in ("int", "long") and logical is None:
        def integer(b: bytes) -> int:
            text = b.decode("ascii")
            if not _INTEGER.fullmatch(text):
                raise ValueError(f"{text!r} is not an integer")
            return int(text)
        return integer
    if kind in ("float", "double"):
        return lambda b: float(b.decode("ascii"))
    if kind == "boolean":
        return lambda b: _BOOLEANS[b.decode("ascii")]
    if kind in ("bytes", "fixed") and logical is None:
        return bytes
    return None


class KeyDecoder:
    """Decodes one upsert input's message keys into its primary-key values (``*_PRIMARY_KEY`` order)."""

    def __init__(self, side_plan, key_format: str, registry: SchemaRegistry | None):
        if key_format not in FORMATS:
            raise ValueError(f"key format {key_format!r} is not one of {', '.join(FORMATS)}")
        pk = side_plan.primary_key
        self.names = tuple(side_plan.columns[i] for i in pk)
        types = [side_plan.avro_types[i] for i in pk]
        self.format = key_format
        self.registry = registry
        self.raw = raw_parser(types[0]) if len(pk) == 1 else None
        if key_format == "raw" and self.raw is None:
            raise ValueError("raw keys need a one-column primary key of a string, enum, number, boolean or bytes type")
        schema = output_schema(f"{side_plan.table}_key", [
            (name, t, side_plan.nullable[i]) for name, t, i in zip(self.names, types, pk)])
        self._plain = fastavro.parse_schema(schema)
        self._plain_names = tuple(f["name"] for f in schema["fields"])
        self._writers: dict[int, dict] = {}
        kind = _base(types[0])[0] if len(pk) == 1 else None
        self._text_first = kind in ("int", "long", "float", "double", "boolean")

    def decode(self, key: bytes) -> tuple:
        """The primary-key values of ``key``; raises DecodeError(``undecodable_key``)."""
        if key is None:
            raise DecodeError(Reason.UNDECODABLE_KEY, "no message key")
        wire = self.registry is not None and len(key) >= _HEADER_LEN and key[0] == _MAGIC
        if self.format == "raw":
            return self._text(key)
        if wire:
            return self._wire(key)
        if self.format == "avro":
            if self.registry is not None:
                raise DecodeError(Reason.UNDECODABLE_KEY, "not Confluent wire format (no magic byte)")
            return self._avro(key)
        if self.raw is None:
            return self._avro(key)
        try:
            as_text = self._text(key)
        except DecodeError:
            return self._avro(key)
        if self._text_first:
            return as_text
        try:
            return self._avro(key)
        except DecodeError:
            return as_text

    def agrees(self, key: bytes, primary_key: tuple) -> bool:
        """Whether ``key`` decodes to ``primary_key`` (the value's primary-key columns)."""
        try:
            return self.decode(key) == primary_key
        except DecodeError:
            return False

    def _text(self, key: bytes) -> tuple:
        try:
            return (self.raw(key),)
        except (ValueError, KeyError, UnicodeDecodeError) as err:
            raise DecodeError(Reason.UNDECODABLE_KEY, f"not the text of a {self.names[0]} value: {err}") from None

    def _avro(self, key: bytes) -> tuple:
        record = self._read(key, 0, self._plain)
        return tuple(record[name] for name in self._plain_names)

    def _wire(self, key: bytes) -> tuple:
        schema_id = int.from_bytes(key[1:_HEADER_LEN], "big")
        writer = self._writers.get(schema_id)
        if writer is None:
            try:
                writer = self._writers[schema_id] = fastavro.parse_schema(self.registry.schema_by_id(schema_id))
            except Exception as err:
                raise DecodeError(Reason.UNDECODABLE_KEY, f"key schema id {schema_id}: {err}") from None
        value = self._read(key, _HEADER_LEN, writer)
        if isinstance(value, dict):
            try:
                return tuple(value[name] for name in self.names)
            except KeyError as err:
                raise DecodeError(Reason.UNDECODABLE_KEY, f"key schema id {schema_id} has no field {err}") from None
        if len(self.names) != 1:
            raise DecodeError(Reason.UNDECODABLE_KEY, f"key schema id {schema_id} is not a record of {', '.join(self.names)}")
        return (value,)

    @staticmethod
    def _read(key: bytes, start: int, schema) -> object:
        bio = io.BytesIO(key)
        bio.seek(start)
        try:
            value = fastavro.schemaless_reader(bio, schema, None)
        except Exception as err:
            raise DecodeError(Reason.UNDECODABLE_KEY, f"not Avro: {type(err).__name__}: {err}") from None
        if bio.tell() != len(key):
            raise DecodeError(Reason.UNDECODABLE_KEY, f"{len(key) - bio.tell()} bytes left after the Avro key")
        return value

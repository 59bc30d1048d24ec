"""Avro values in: Kafka values (plain bodies or Confluent wire format) decoded into tuples in the
reader schema's field order, the writer's schema resolved against the reader's once per id."""

from __future__ import annotations

import io
import operator
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from ..deadletters import Reason
from .registry import _HEADER_LEN, _MAGIC, SchemaRegistry
from .schemas import _PRIMITIVES, Column, DecodeError, SchemaError, _parse, record_columns


def _tuple_getter(names: tuple[str, ...]):
    if len(names) == 0:
        return lambda d: ()
    if len(names) == 1:
        name = names[0]
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


_SIMPLE_DEFAULT_TYPES = frozenset({"null", "boolean", "int", "long", "float", "double", "string"})


def _self_contained(t: Any) -> bool:
    """True if an expanded type refers to no named type by name (no recursive references)."""
    if isinstance(t, str):
        return t in _PRIMITIVES
    if isinstance(t, list):
        return all(_self_contained(b) for b in t)
    if isinstance(t, dict):
        kind = t.get("type")
        if kind in ("record", "error"):
            return all(_self_contained(f["type"]) for f in t["fields"])
        if kind == "array":
            return _self_contained(t["items"])
        if kind == "map":
            return _self_contained(t["values"])
        return not isinstance(kind, (list, dict)) or _self_contained(kind)
    return False


def _projection(writer: dict, reader: dict, names: tuple[str, ...]):
    """A dict -> tuple function giving what fastavro's schema resolution would give, or None.

    Schema resolution costs fastavro about as much again as the decoding itself. For the common
    evolution (fields added with a default, fields dropped, fields reordered; every shared field
    of exactly the same type) the record decoded with the writer schema alone can be projected
    onto the reader's fields instead. ``writer``/``reader`` are expanded parsed schemas.
    Anything else (promotions, changed nested types, aliases, non-primitive defaults) returns
    None and is left to fastavro.
    """
    if writer.get("name") != reader.get("name"):
        return None
    writer_types = {f["name"]: f["type"] for f in writer["fields"]}
    defaults = {}
    for f in reader["fields"]:
        if f.get("aliases"):
            return None
        t = f["type"]
        if f["name"] in writer_types:
            if writer_types[f["name"]] != t or not _self_contained(t):
                return None
        else:
            first = t[0] if isinstance(t, list) and t else t
            if (
                "default" not in f
                or not isinstance(first, str)
                or first not in _SIMPLE_DEFAULT_TYPES
            ):
                return None
            defaults[f["name"]] = f["default"]  # fastavro hands defaults over as they are
    getter = _tuple_getter(names)
    if not defaults:
        return getter

    def project(record: dict) -> tuple:
        record.update(defaults)
        return getter(record)

    return project


def _not_wire_format(value: bytes) -> DecodeError:
    return DecodeError(Reason.UNDECODABLE, "not Confluent wire format (no magic byte)" if value and value[0] != _MAGIC
                       else f"too short for Confluent wire format ({len(value)} bytes)")


def schema_id_of(value: bytes) -> int:
    """The writer schema id of a Confluent wire-format value (its body starts at byte 5); a
    DecodeError for a value in no wire format. (``ValueDecoder.decode`` does the same inline.)"""
    if len(value) < _HEADER_LEN or value[0] != _MAGIC:
        raise _not_wire_format(value)
    return int.from_bytes(value[1:_HEADER_LEN], "big")


class ValueDecoder:
    """Decodes Kafka values into tuples in the reader schema's field order.

    With a registry, values must be in Confluent wire format; each writer schema is fetched once
    per id and resolved to ``reader_schema``. Without a reader schema, the first writer schema
    seen becomes the reader schema (so a decoder's tuple layout never changes); prefer passing
    one (e.g. ``ValueDecoder.for_subject``) so every Spark worker agrees on the layout.
    """

    def __init__(self, reader_schema: dict | None, registry: SchemaRegistry | None):
        if reader_schema is None and registry is None:
            raise ValueError("a ValueDecoder needs a reader schema, a registry, or both")
        self._reader_schema = reader_schema
        self._registry = registry
        self._setup()

    @classmethod
    def for_subject(cls, registry: SchemaRegistry, subject: str) -> ValueDecoder:
        """A wire-format decoder whose reader schema is the subject's latest version."""
        return cls(registry.latest(subject)[1], registry)

    def _setup(self) -> None:
        # per writer schema id: (parsed writer schema, parsed reader schema when fastavro must
        # resolve, else None; the record dict -> tuple function)
        self._plans: dict[int, tuple[dict, dict | None, Any]] = {}
        self._reader = None
        self._reader_expanded = None
        self._columns: list[Column] | None = None
        self._getter = None
        if self._reader_schema is not None:
            self._set_reader(self._reader_schema)

    def _set_reader(self, schema) -> None:
        columns = record_columns(schema)
        self._reader = _parse(schema, "reader schema")
        self._reader_expanded = fastavro.parse_schema(schema, expand=True)
        self._columns = columns
        self._names = tuple(c.name for c in columns)
        self._getter = _tuple_getter(self._names)

    def __getstate__(self):
        return {"reader_schema": self._reader_schema, "registry": self._registry}

    def __setstate__(self, state):
        self._reader_schema = state["reader_schema"]
        self._registry = state["registry"]
        self._setup()

    @property
    def columns(self) -> list[Column]:
        if self._columns is None:
            raise RuntimeError(
                "this decoder has no reader schema and has decoded nothing yet: columns unknown"
            )
        return self._columns

    @property
    def reader_schema(self) -> dict | None:
        return self._reader_schema

    def _plan(self, schema_id: int) -> tuple[dict, dict | None, Any]:
        schema = self._registry.schema_by_id(schema_id)
        try:
            writer = fastavro.parse_schema(schema)
            writer_expanded = fastavro.parse_schema(schema, expand=True)
        except Exception as e:
            raise DecodeError(
                Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id} is not valid Avro: {e}"
            ) from None
        if self._reader is None:
            try:
                self._set_reader(schema)
            except SchemaError as e:
                raise DecodeError(Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id}: {e}") from None
            self._reader_schema = schema
        if writer == self._reader:
            plan = (writer, None, self._getter)
        else:
            project = None
            if isinstance(writer_expanded, dict) and writer_expanded.get("type") == "record":
                project = _projection(writer_expanded, self._reader_expanded, self._names)
            plan = (writer, None, project) if project else (writer, self._reader, self._getter)
        self._plans[schema_id] = plan
        return plan

    def decode(self, value: bytes) -> tuple:
        if value is None:
            raise DecodeError(Reason.UNDECODABLE, "value is null")
        size = len(value)
        bio = io.BytesIO(value)
        if self._registry is None:
            try:
                record = fastavro.schemaless_reader(bio, self._reader, None)
            except Exception as e:
                raise DecodeError(Reason.UNDECODABLE, f"{type(e).__name__}: {e}") from None
            getter = self._getter
        else:
            if size < _HEADER_LEN or value[0] != _MAGIC:
                raise _not_wire_format(value)
            schema_id = int.from_bytes(value[1:_HEADER_LEN], "big")
            plan = self._plans.get(schema_id)
            if plan is None:
                plan = self._plan(schema_id)
            writer, reader, getter = plan
            bio.seek(_HEADER_LEN)
            try:
                record = fastavro.schemaless_reader(bio, writer, reader)
            except SchemaResolutionError as e:
                raise DecodeError(
                    Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id} vs reader schema: {e}"
                ) from None
            except Exception as e:
                raise DecodeError(
                    Reason.UNDECODABLE, f"schema id {schema_id}: {type(e).__name__}: {e}"
                ) from None
        if bio.tell() != size:
            raise DecodeError(Reason.UNDECODABLE, f"{size - bio.tell()} bytes left after the record")
        try:
            return getter(record)
        except (KeyError, TypeError, AttributeError) as e:
            raise DecodeError(
                Reason.SCHEMA_MISMATCH, f"record does not fit the declared columns: {e!r}"
            ) from None

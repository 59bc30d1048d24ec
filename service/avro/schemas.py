"""Avro schemas: the errors of a value or a schema, a record's columns and their type families,
schema files, field defaults, event times, and the output schema made of the inputs' columns."""

from __future__ import annotations

import copy
import datetime as _dt
import io
import json
import re
from dataclasses import dataclass
from typing import Any

import fastavro

from ..deadletters import DeadLetterError, Reason
from ..errors import ChangejoinError

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})


class DecodeError(DeadLetterError):
    """A value (or message key) that cannot be turned into a row; ``reason`` is one of ``REASONS``."""

    REASONS = frozenset({Reason.UNDECODABLE, Reason.UNKNOWN_SCHEMA_ID, Reason.SCHEMA_MISMATCH, Reason.UNDECODABLE_KEY})

    def __init__(self, reason: Reason, detail: str = ""):
        if reason not in self.REASONS:
            raise ValueError(f"unknown DecodeError reason {reason!r}")
        super().__init__(reason, detail)


class SchemaError(ValueError, ChangejoinError):
    """An Avro schema that is invalid or not usable where it was given."""


@dataclass(frozen=True)
class Column:
    name: str
    avro_type: object  # the field's Avro type JSON, named types fully qualified and inlined
    nullable: bool


def _is_null(t: object) -> bool:
    return t == "null" or (isinstance(t, dict) and t.get("type") == "null")


def type_family(avro_type: object) -> str:
    """What a column's values are, for type checks: ``integer``, ``float``, ``decimal``, ``string``,
    ``bytes``, ``boolean``, ``timestamp``, ``date``, ``time``, or ``other`` (records, arrays, maps,
    unions of several types). A nullable column has its non-null type's family."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if not _is_null(b)]
        return type_family(branches[0]) if len(branches) == 1 else "other"
    logical = None
    if isinstance(avro_type, dict):
        logical = avro_type.get("logicalType")
        avro_type = avro_type.get("type")
        if isinstance(avro_type, (dict, list)):
            return type_family(avro_type)
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        return "timestamp"
    if logical == "decimal":
        return "decimal"
    if logical == "date":
        return "date"
    if logical in ("time-millis", "time-micros"):
        return "time"
    return {"int": "integer", "long": "integer", "float": "float", "double": "float", "string": "string",
            "enum": "string", "bytes": "bytes", "fixed": "bytes", "boolean": "boolean"}.get(avro_type, "other")


def _type_nullable(t: object) -> bool:
    return _is_null(t) or (isinstance(t, list) and any(_is_null(b) for b in t))


def _parse(schema: object, what: str = "schema") -> dict:
    try:
        return fastavro.parse_schema(schema)
    except Exception as e:  # fastavro raises SchemaParseException, ValueError, TypeError, ...
        raise SchemaError(f"invalid Avro {what}: {e}") from e


def load_schema_file(path: str) -> dict:
    """Reads and validates an ``.avsc`` file; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
    except OSError as e:
        raise SchemaError(f"{path}: cannot read schema file: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path}: not valid JSON: {e}") from e
    try:
        fastavro.parse_schema(schema)
    except Exception as e:
        raise SchemaError(f"{path}: invalid Avro schema: {e}") from e
    return schema


def record_columns(schema: object) -> list[Column]:
    """The top-level record's fields, in order.

    Each column's type is self-contained: named types are fully qualified and defined inline
    where they are used (as fastavro's expanded form), so a column can be copied into another
    schema (see ``output_schema``) without the definitions elsewhere in its source schema.
    """
    try:
        expanded = fastavro.parse_schema(schema, expand=True)
    except Exception as e:
        raise SchemaError(f"invalid Avro schema: {e}") from e
    if not isinstance(expanded, dict) or expanded.get("type") not in ("record", "error"):
        kind = expanded.get("type") if isinstance(expanded, dict) else expanded
        raise SchemaError(f"expected an Avro record schema, got {kind!r}")
    return [
        Column(f["name"], copy.deepcopy(f["type"]), _type_nullable(f["type"]))
        for f in expanded["fields"]
    ]


def field_defaults(schema: dict, names) -> dict:
    """The decoded default value of each named field of a record schema, as a reader gets it for
    data written without the field (logical types applied: a ``timestamp-millis`` default is a
    datetime, a ``bytes`` default bytes). A union's default is of its first branch."""
    wanted = set(names)
    fields = [f for f in schema["fields"] if f["name"] in wanted]
    missing = wanted - {f["name"] for f in fields if "default" in f}
    if missing:
        raise SchemaError(f"no default for {', '.join(sorted(missing))}")
    # Expanded, so that a named type defined in a field left out here is inlined where it is used.
    record = {"type": "record", "name": schema["name"], "namespace": schema.get("namespace"), "fields": fields}
    expanded = fastavro.parse_schema(record, expand=True)["fields"]
    reader = {"type": "record", "name": "defaults", "fields": [
        {"name": f["name"], "type": f["type"][0] if isinstance(f["type"], list) else f["type"]} for f in expanded]}
    document = json.dumps({f["name"]: f["default"] for f in fields})
    return next(fastavro.json_reader(io.StringIO(document), reader))


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_ONE_MS = _dt.timedelta(milliseconds=1)


def to_epoch_millis(value: _dt.datetime | int | None) -> int | None:
    """Epoch milliseconds of an event-time value: an aware datetime (exact, floored to the
    millisecond), a naive datetime (local time, as ``datetime.timestamp()``), an int (already
    epoch millis) or None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("a bool is not an event time")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # naive: local wall-clock time
        return (value - _EPOCH) // _ONE_MS
    raise TypeError(f"cannot convert {type(value).__name__} to epoch millis")


# --------------------------------------------------------------------------------------------
# output schema


_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def _sanitize(name: str) -> str:
    out = _INVALID_NAME_CHARS.sub("_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def _fullname(name: str, namespace: str | None, enclosing: str | None) -> tuple[str, str | None]:
    """(full name, namespace for types nested inside it) per the Avro spec's name rules."""
    if "." in name:
        ns, _, short = name.rpartition(".")
        return name, ns or None
    ns = namespace if namespace is not None else enclosing
    return (f"{ns}.{name}" if ns else name), (ns or None)


def _expand(t: Any, enclosing: str | None, table: dict[str, dict], open_: set[str]) -> Any:
    """A copy of type ``t`` that is self-contained: named types fully qualified ("namespace" and
    "doc" keys dropped) and references to names defined earlier (in ``table``) replaced by
    their definitions; a name redefined differently is an error. References to a type from
    inside its own definition (recursive types) stay references."""
    if isinstance(t, list):
        return [_expand(b, enclosing, table, open_) for b in t]
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return t
        full, _ = _fullname(t, None, enclosing)
        return full if full in open_ else table.get(full, full)
    if not isinstance(t, dict):
        raise SchemaError(f"not an Avro type: {t!r}")
    kind = t.get("type")
    if kind in _NAMED:
        full, ns = _fullname(t["name"], t.get("namespace"), enclosing)
        out = {k: v for k, v in t.items() if k not in ("namespace", "doc", "aliases")}
        out["name"] = full
        if kind in ("record", "error"):
            open_.add(full)
            out["fields"] = [
                {
                    **{k: v for k, v in f.items() if k not in ("doc", "aliases")},
                    "type": _expand(f["type"], ns, table, open_),
                }
                for f in t["fields"]
            ]
            open_.discard(full)
        known = table.setdefault(full, out)
        if known != out:
            raise SchemaError(f"conflicting definitions of the named Avro type {full!r}")
        return known
    if kind == "array":
        return {**t, "items": _expand(t["items"], enclosing, table, open_)}
    if kind == "map":
        return {**t, "values": _expand(t["values"], enclosing, table, open_)}
    if isinstance(kind, (list, dict)):  # {"type": {...}} / {"type": [...]} wrappers
        return _expand(kind, enclosing, table, open_)
    return dict(t)


def _define_once(t: Any, emitted: set[str]) -> Any:
    """``t`` with every named type defined at its first use and referenced by name after."""
    if isinstance(t, list):
        return [_define_once(b, emitted) for b in t]
    if not isinstance(t, dict):
        return t
    kind = t.get("type")
    if kind in _NAMED:
        if t["name"] in emitted:
            return t["name"]
        emitted.add(t["name"])
        if kind in ("record", "error"):
            return {
                **t,
                "fields": [{**f, "type": _define_once(f["type"], emitted)} for f in t["fields"]],
            }
        return dict(t)
    if kind == "array":
        return {**t, "items": _define_once(t["items"], emitted)}
    if kind == "map":
        return {**t, "values": _define_once(t["values"], emitted)}
    return dict(t)


def _nullable(t: Any) -> Any:
    if _is_null(t):
        return "null"
    if isinstance(t, list):
        return ["null", *[b for b in t if not _is_null(b)]]
    return ["null", t]


def output_schema(
    name: str, fields: list[tuple[str, object, bool]], namespace: str = "changejoin"
) -> dict:
    """A record schema for the join output.

    Each field is (name, Avro type, nullable). Nullable fields become ``["null", T]`` unions with
    default null (a union T is extended, never nested; null always comes first). Field names are
    made valid Avro names ("order-id" -> "order_id", "1st" -> "_1st"); two fields that end up
    with one name are an error. Named types used by several fields (say both join sides carry
    the same enum) are defined once; two different definitions of one name are an error.
    """
    record_name = _sanitize(name)
    ns = ".".join(_sanitize(p) for p in namespace.split(".")) if namespace else None
    full_record, _ = _fullname(record_name, ns, None)
    origin: dict[str, str] = {}
    table: dict[str, dict] = {}
    expanded = []
    for field_name, avro_type, nullable in fields:
        safe = _sanitize(field_name)
        if safe in origin:
            raise SchemaError(
                f"output fields {origin[safe]!r} and {field_name!r} both become {safe!r}"
            )
        origin[safe] = field_name
        t = _expand(avro_type, ns, table, set())
        expanded.append((safe, _nullable(t) if nullable else t, nullable))
    if full_record in table:
        raise SchemaError(f"output record name {full_record!r} clashes with a field's named type")
    emitted: set[str] = set()
    out_fields = []
    for safe, t, nullable in expanded:
        field = {"name": safe, "type": _define_once(t, emitted)}
        if nullable:
            field["default"] = None
        out_fields.append(field)
    schema: dict = {"type": "record", "name": record_name}
    if ns:
        schema["namespace"] = ns
    schema["fields"] = out_fields
    try:
        fastavro.parse_schema(schema)
    except Exception as e:
        raise SchemaError(f"output schema {full_record!r} is not valid Avro: {e}") from e
    return schema

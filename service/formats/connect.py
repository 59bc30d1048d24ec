"""Kafka Connect's types as the join reads them: a Connect schema (the JSON converter's embedded
one, or what Confluent's AvroData wrote) -> the row's Avro record, and each value in its Connect
encoding -> the join's value. Shared by the Debezium formats (``debezium_json.py``, ``debezium_avro.py``).

Values: the JSON converter writes Connect's logical types in their Debezium encodings, read here
into the join's values (those Avro decoding gives):

===========================================  ========================================================
Connect / Debezium schema name               JSON value -> column
===========================================  ========================================================
``org.apache.kafka.connect.data.Decimal``     base64 of the unscaled two's-complement integer
                                              (``decimal.handling.mode=precise``, the default), a
                                              numeric string (``string``) or a number (``double``) ->
                                              ``decimal(p, s)``
``io.debezium.data.VariableScaleDecimal``     ``{"scale": s, "value": base64}`` -> ``decimal(38, 10)``
                                              (a value with more decimals is a dead letter)
``io.debezium.time.Date``,                    days since 1970-01-01 -> ``date``
``org.apache.kafka.connect.data.Date``
``io.debezium.time.Timestamp``,               epoch milliseconds -> ``timestamp-millis``
``org.apache.kafka.connect.data.Timestamp``
``io.debezium.time.MicroTimestamp``           epoch microseconds -> ``timestamp-micros``
``io.debezium.time.NanoTimestamp``            epoch nanoseconds -> ``timestamp-micros``
``io.debezium.time.ZonedTimestamp``           ISO-8601 text -> ``timestamp-micros`` (UTC)
``io.debezium.time.Time``, ``MicroTime``,     milliseconds, microseconds, nanoseconds of the day ->
``NanoTime``                                  ``time-micros``
``io.debezium.data.Json``, ``Uuid``, ``Xml``  text -> ``string``
``io.debezium.data.Enum``                     text -> ``string``
===========================================  ========================================================

and the plain types: ``int8``/``int16``/``int32`` -> ``int``, ``int64`` -> ``long``,
``float32``/``float64`` -> ``float``/``double``, ``boolean``, ``string``, ``bytes`` (base64).
Anything else (arrays, maps, nested structs, geometry) is not read: a query naming such a column
is refused at start. Without an embedded schema the row's Avro schema comes from
``*_SCHEMA_FILE``, and each value is read by its column's Avro type (a ``timestamp-millis``
column as epoch milliseconds, a ``decimal`` as base64 or a numeric string, ...).

"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import re
from decimal import Decimal
from typing import Any, Callable
from uuid import UUID

from ..errors import ChangejoinError

EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_DAY = _dt.date(1970, 1, 1)
VARIABLE_SCALE = 10  # decimals kept of a VariableScaleDecimal

# -- schemas: Connect's (embedded) -> Avro -------------------------------------------------------
_PLAIN = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float", "float64": "double",
          "boolean": "boolean", "string": "string", "bytes": "bytes"}
_LOGICAL = {
    "io.debezium.time.Date": {"type": "int", "logicalType": "date"},
    "org.apache.kafka.connect.data.Date": {"type": "int", "logicalType": "date"},
    "io.debezium.time.Timestamp": {"type": "long", "logicalType": "timestamp-millis"},
    "org.apache.kafka.connect.data.Timestamp": {"type": "long", "logicalType": "timestamp-millis"},
    "io.debezium.time.MicroTimestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "io.debezium.time.NanoTimestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "io.debezium.time.ZonedTimestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "io.debezium.time.Time": {"type": "long", "logicalType": "time-micros"},
    "io.debezium.time.MicroTime": {"type": "long", "logicalType": "time-micros"},
    "io.debezium.time.NanoTime": {"type": "long", "logicalType": "time-micros"},
    "org.apache.kafka.connect.data.Time": {"type": "long", "logicalType": "time-micros"},
    "io.debezium.data.Json": "string", "io.debezium.data.Uuid": {"type": "string", "logicalType": "uuid"},
    "io.debezium.data.Xml": "string", "io.debezium.data.Enum": "string",
    "io.debezium.data.VariableScaleDecimal": {"type": "bytes", "logicalType": "decimal", "precision": 38,
                                              "scale": VARIABLE_SCALE},
}


class FormatError(ValueError, ChangejoinError):
    """An envelope schema the format cannot read (at start)."""


def row_schema(envelope_schema: dict, name: str) -> tuple[dict, dict[str, str]]:
    """(the Avro record of the envelope's row, each field's Connect/Debezium type name) from a
    Connect JSON converter's embedded ``schema`` of a Debezium envelope. A field of a type the
    format does not read becomes a nullable ``null`` field with its reason in ``doc``."""
    fields = {f.get("field"): f for f in envelope_schema.get("fields") or ()}
    row = fields.get("after") or fields.get("before")
    if envelope_schema.get("type") != "struct" or row is None or row.get("type") != "struct":
        raise FormatError("the embedded schema is no Debezium envelope (a struct with before/after structs)")
    avro_fields = []
    for f in row.get("fields") or ():
        avro, why = _avro_of(f)
        source = {CONNECT_TYPE: f.get("name") or f.get("type")}
        if avro is None:
            avro_fields.append({"name": f["field"], "type": "null", "default": None, "doc": f"not read: {why}", **source})
        elif f.get("optional"):
            avro_fields.append({"name": f["field"], "type": ["null", avro], "default": None, **source})
        else:
            avro_fields.append({"name": f["field"], "type": avro, **source})
    schema = {"type": "record", "name": name, "fields": avro_fields}
    return schema, source_types(schema)


#: The field attribute of a :func:`row_schema` record that keeps the field's Connect type name.
CONNECT_TYPE = "connect.type"


def source_types(schema: dict) -> dict[str, str] | None:
    """Each column's Connect type name, from a record :func:`row_schema` made; None for a record
    of a schema file (whose values are read by their Avro types)."""
    names = {f["name"]: f[CONNECT_TYPE] for f in schema.get("fields") or () if CONNECT_TYPE in f}
    return names or None


def _avro_of(field: dict) -> tuple[object, str | None]:
    logical = field.get("name")
    if logical == "org.apache.kafka.connect.data.Decimal":
        params = field.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return {"type": "bytes", "logicalType": "decimal", "precision": max(precision, scale, 1), "scale": scale}, None
    if logical in _LOGICAL:
        return _LOGICAL[logical], None
    if logical and field.get("type") not in _PLAIN:
        return None, f"type {logical}"
    plain = _PLAIN.get(field.get("type"))
    if plain is None:
        return None, f"type {field.get('type')}"
    return plain, None


def unsupported_columns(schema: dict) -> dict[str, str]:
    """Columns of a :func:`row_schema` record that are not read, with why."""
    return {f["name"]: f["doc"][len("not read: "):] for f in schema["fields"] if f["type"] == "null" and "doc" in f}


# -- values --------------------------------------------------------------------------------------
def _decimal_reader(scale: int, source: str | None) -> Callable[[Any], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def read(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return Decimal(repr(v)).quantize(quantum)
        if isinstance(v, dict):  # VariableScaleDecimal: its value base64 (JSON) or bytes (Avro)
            unscaled = v["value"] if isinstance(v["value"], bytes) else base64.b64decode(v["value"])
            return exact(Decimal(int.from_bytes(unscaled, "big", signed=True)).scaleb(-int(v["scale"])))
        if isinstance(v, str):
            if source != "org.apache.kafka.connect.data.Decimal" and _NUMERIC.fullmatch(v) and (
                    "." in v or source == "string"):
                return Decimal(v).quantize(quantum)
            return Decimal(int.from_bytes(base64.b64decode(v, validate=True), "big", signed=True)).scaleb(-scale)
        if isinstance(v, Decimal):  # Avro's decimal logical type, read with the writer's scale
            return exact(v)
        if isinstance(v, bytes):  # Avro bytes without the logical type: the unscaled integer
            return Decimal(int.from_bytes(v, "big", signed=True)).scaleb(-scale)
        raise ValueError(f"{v!r} is no decimal")

    def exact(value: Decimal) -> Decimal:
        kept = value.quantize(quantum)
        if kept != value:
            raise ValueError(f"{value} has more than {scale} decimals")
        return kept

    return read


_NUMERIC = re.compile(r"-?\d+(\.\d+)?")


def _timestamp_reader(avro_unit: str, source: str | None) -> Callable[[Any], _dt.datetime]:
    per_second = {"io.debezium.time.Timestamp": 1_000, "org.apache.kafka.connect.data.Timestamp": 1_000,
                  "io.debezium.time.MicroTimestamp": 1_000_000, "io.debezium.time.NanoTimestamp": 1_000_000_000
                  }.get(source, 1_000 if avro_unit == "timestamp-millis" else 1_000_000)

    def read(v):
        if isinstance(v, str):
            parsed = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.timezone.utc)
        if isinstance(v, int) and not isinstance(v, bool):
            return EPOCH + _dt.timedelta(microseconds=v * 1_000_000 // per_second)
        if isinstance(v, _dt.datetime):  # Avro's timestamp logical types
            return v if v.tzinfo else v.replace(tzinfo=_dt.timezone.utc)
        raise ValueError(f"{v!r} is no timestamp")

    return read


def _time_reader(avro_unit: str, source: str | None) -> Callable[[Any], _dt.time]:
    per_second = {"io.debezium.time.Time": 1_000, "org.apache.kafka.connect.data.Time": 1_000,
                  "io.debezium.time.MicroTime": 1_000_000, "io.debezium.time.NanoTime": 1_000_000_000
                  }.get(source, 1_000 if avro_unit == "time-millis" else 1_000_000)

    def read(v):
        if isinstance(v, str):
            return _dt.time.fromisoformat(v)
        if isinstance(v, _dt.time):  # Avro's time logical types
            return v
        micros = v * 1_000_000 // per_second
        return (_dt.datetime.min + _dt.timedelta(microseconds=micros)).time()

    return read


def _date(v):
    if isinstance(v, str):
        return _dt.date.fromisoformat(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return _EPOCH_DAY + _dt.timedelta(days=v)
    if isinstance(v, _dt.date) and not isinstance(v, _dt.datetime):  # Avro's date logical type
        return v
    raise ValueError(f"{v!r} is no date")


def _string(v):
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    if isinstance(v, UUID):  # Avro's uuid logical type
        return str(v)
    raise ValueError(f"{v!r} is no string")


def _typed(kind, what):
    def read(v):
        if isinstance(v, kind) and not isinstance(v, bool) or (kind is bool and isinstance(v, bool)):
            return v
        raise ValueError(f"{v!r} is no {what}")

    return read


def _float(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if v in ("NaN", "Infinity", "-Infinity"):
        return float(v)
    raise ValueError(f"{v!r} is no number")


def _bytes(v):
    if isinstance(v, str):
        return base64.b64decode(v, validate=True)
    if isinstance(v, bytes):  # Avro
        return v
    raise ValueError(f"{v!r} is no base64 bytes")


def value_reader(avro_type, source: str | None) -> Callable[[Any], Any]:
    """``json value -> column value`` for a column of ``avro_type`` (non-null) whose Connect type
    name is ``source`` (None without an embedded schema). It reads the value as fastavro decodes
    it from a ``debezium-avro`` message too (bytes, a ``Decimal``, a ``datetime`` of a logical
    type): each reader tries the JSON forms first."""
    if isinstance(avro_type, dict):
        logical = avro_type.get("logicalType")
        if logical == "decimal":
            return _decimal_reader(int(avro_type.get("scale", 0)), source)
        if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
            return _timestamp_reader(logical, source)
        if logical in ("time-millis", "time-micros"):
            return _time_reader(logical, source)
        if logical == "date":
            return _date
        avro_type = avro_type.get("type")
    if avro_type in ("int", "long"):
        return _typed(int, "integer")
    if avro_type in ("float", "double"):
        return _float
    if avro_type == "boolean":
        return _typed(bool, "boolean")
    if avro_type in ("bytes", "fixed"):
        return _bytes
    if avro_type in ("string", "enum"):
        return _string
    return lambda v: v


def non_null(avro_type):
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type

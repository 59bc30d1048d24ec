"""A test helper: Debezium envelopes as Confluent's AvroConverter would write them.

Confluent's AvroConverter is not on Maven Central, so no real ``debezium-avro`` capture can be
recorded here. This module instead turns what the real capture recorded with Connect's JSON
converter (``tests/data/debezium/*.with_schema.json``: each message's Connect schema and payload)
into the Avro schema and values that AvroConverter derives from the same Connect schema and data,
following the mapping of its ``AvroData`` (written from its documented behaviour, not copied):

* a Connect ``struct`` is an Avro ``record`` named by the Connect schema's name (``...Envelope``,
  ``...Value``, ``io.debezium.connector.postgresql.Source``); a record name met again is
  referenced by its full name, as Avro requires (``after`` refers to ``before``'s ``Value``);
* an optional field is ``["null", T]`` with default null (``[T, "null"]`` with a Connect default:
  Avro's default is of a union's first branch); a required field keeps its Connect default as its
  Avro ``default``;
* ``int8``/``int16`` are ``int`` with ``connect.type``; ``int32`` ``int``; ``int64`` ``long``;
  ``float32``/``float64`` ``float``/``double``; ``boolean``, ``string``, ``bytes`` as they are;
* a named (logical) Connect type keeps its name in ``connect.name`` (with ``connect.version`` and
  ``connect.parameters``); Connect's ``Decimal`` is also Avro's ``decimal`` logical type, its
  ``Timestamp`` ``timestamp-millis``, its ``Date`` ``date``, its ``Time`` ``time-millis``.

The values: base64 text of ``bytes`` (and a ``Decimal``'s unscaled integer) becomes bytes (a
``decimal``'s a ``Decimal``, for fastavro to write), everything else stays as the JSON converter
wrote it. :func:`wire` frames an Avro body in Confluent's wire format.
"""
from __future__ import annotations

import base64
import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path

import fastavro

DATA = Path(__file__).resolve().parents[1] / "data" / "debezium"
_PRIMITIVE = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float",
              "float64": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}
_LOGICAL = {"org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
            "org.apache.kafka.connect.data.Date": "date", "org.apache.kafka.connect.data.Time": "time-millis"}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def recorded(case: str) -> dict:
    """The Connect schema and payload of a recorded JSON-converter message (``case``: ``update``, ...)."""
    record = json.loads((DATA / f"{case}.with_schema.json").read_text())
    return json.loads(record["value"])


def avro_schema(connect: dict, defined: set[str] | None = None) -> object:
    """The Avro schema AvroData writes for Connect schema ``connect`` (not made nullable)."""
    defined = set() if defined is None else defined
    kind, name = connect["type"], connect.get("name")
    if kind == "struct":
        full = name or "ConnectDefault"
        if full in defined:
            return full
        defined.add(full)
        namespace, _, short = full.rpartition(".")
        record = {"type": "record", "name": short, "fields": [_field(f, defined) for f in connect["fields"]]}
        if namespace:
            record["namespace"] = namespace
        if name:
            record["connect.name"] = name
        return record
    if kind == "array":
        return {"type": "array", "items": avro_schema(connect["items"], defined)}
    if kind not in _PRIMITIVE:
        raise ValueError(f"no Avro form here for Connect type {kind}")
    out: dict = {"type": _PRIMITIVE[kind]}
    if kind in ("int8", "int16"):
        out["connect.type"] = kind
    if name:
        out["connect.name"] = name
        if connect.get("version") is not None:
            out["connect.version"] = connect["version"]
        if connect.get("parameters"):
            out["connect.parameters"] = dict(connect["parameters"])
        if name == DECIMAL:
            out.update(logicalType="decimal", scale=int(connect["parameters"]["scale"]),
                       precision=int(connect["parameters"].get("connect.decimal.precision", 64)))
        elif name in _LOGICAL:
            out["logicalType"] = _LOGICAL[name]
    return out if len(out) > 1 else out["type"]


def _field(connect: dict, defined: set[str]) -> dict:
    t = avro_schema(connect, defined)
    if connect.get("optional"):
        if connect.get("default") is not None:  # the default's branch first, as Avro requires
            return {"name": connect["field"], "type": [t, "null"], "default": connect["default"]}
        return {"name": connect["field"], "type": ["null", t], "default": None}
    field = {"name": connect["field"], "type": t}
    if connect.get("default") is not None:
        field["default"] = connect["default"]
    return field


def avro_value(connect: dict, value):
    """``value`` as the JSON converter wrote it -> as fastavro writes it for :func:`avro_schema`."""
    if value is None:
        return None
    if connect["type"] == "struct":
        return {f["field"]: avro_value(f, value.get(f["field"])) for f in connect["fields"]}
    if connect.get("name") == DECIMAL:
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return Decimal(unscaled).scaleb(-int(connect["parameters"]["scale"]))
    if connect["type"] == "bytes":
        return base64.b64decode(value)
    if connect.get("name") == "org.apache.kafka.connect.data.Timestamp":
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=value)
    if connect.get("name") == "org.apache.kafka.connect.data.Date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    return value


def body(schema: object, value) -> bytes:
    """The Avro binary of ``value`` in ``schema``."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def wire(schema_id: int, schema: object, value) -> bytes:
    """``value`` in Confluent's wire format: magic byte 0, the schema id (4 bytes), the Avro body."""
    return b"\0" + schema_id.to_bytes(4, "big") + body(schema, value)


def connect_envelope(columns: list[dict], op_optional: bool = False) -> dict:
    """A Debezium envelope's Connect schema (as the JSON converter embeds it) around row ``columns``."""
    value = {"type": "struct", "name": "shop.public.t.Value", "fields": columns}
    return {"type": "struct", "name": "shop.public.t.Envelope", "fields": [
        {**value, "field": "before", "optional": True}, {**value, "field": "after", "optional": True},
        {"type": "struct", "name": "io.debezium.connector.postgresql.Source", "field": "source", "optional": False,
         "fields": [{"type": "string", "field": "connector", "optional": False},
                    {"type": "int64", "field": "ts_ms", "optional": False}]},
        {"type": "string", "field": "op", "optional": op_optional},
        {"type": "int64", "field": "ts_ms", "optional": True}]}

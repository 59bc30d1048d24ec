"""The ``debezium-json`` and ``debezium-avro`` input formats: Debezium's change envelopes as changelog rows.

Debezium (PostgreSQL, MySQL, SQL Server, Oracle capture through Kafka Connect) writes one message
per row change: ``{"before": {...}, "after": {...}, "op": "c" | "r" | "u" | "d" | "t", "source":
{..., "ts_ms": ...}, "ts_ms": ...}``, with Kafka Connect's JSON converter either bare or wrapped
as ``{"schema": {...}, "payload": <envelope>}`` (``value.converter.schemas.enable``), or with
Confluent's AvroConverter (``debezium-avro``: Confluent's wire format, the envelope an Avro record
whose schema the registry holds: :class:`DebeziumAvroDecoder`). Both formats share the mapping,
which is Flink's ``debezium-json`` format's:

======================  ==========================================================================
``op``                  changes
======================  ==========================================================================
``c`` (create), ``r``   ``+I`` of ``after``
(a snapshot read)
``u`` (update)          ``-U`` of ``before``, ``+U`` of ``after``
``d`` (delete)          ``-D`` of ``before``
``u``, ``d`` of an      none: a dead letter (``debezium_change_on_append_topic``)
append-only input
``t`` (truncate),       none: skipped and counted (so is the tombstone Debezium writes after a
``m`` (a message)       delete, a message with a null value)
======================  ==========================================================================

Keyed inputs (a primary key declared: ``LEFT_PRIMARY_KEY``) are read as upserts of that key
by default instead (``*_CHANGELOG_MODE`` unset, or ``upsert``): ``c``, ``r`` and ``u`` are the
key's new row, ``d`` its delete, and the normalize stage keyed by the primary key derives the
retractions from the row it keeps. So a table captured with PostgreSQL's default ``REPLICA
IDENTITY`` (an update without its before image, a delete whose before image holds only the key)
is read correctly; without a primary key the before images are the only way to retract, and a
message missing one is a dead letter whose detail names ``REPLICA IDENTITY FULL``. A keyed input
declared ``*_CHANGELOG_MODE=retract`` is read by the table above too, as Flink's
``debezium-json`` reads every topic: its before images retract (REPLICA IDENTITY FULL required),
and the planner joins it directly, without the normalize stage; a message without its before
image, or whose before image lacks a NOT NULL column (a key-only image), is a dead letter naming
REPLICA IDENTITY FULL (a key-only image of a table whose other columns are all nullable cannot be
told from a full one). An input declared insert-only (``*_CHANGELOG_MODE=append``: an event or
log table) reads ``c`` and ``r`` as ``+I`` of ``after`` whether or not it has a primary key; a
``u`` or a ``d`` is no insert, so each is a dead letter (``debezium_change_on_append_topic``), and ``t``, ``m`` and
tombstones are skipped as above. Every malformed envelope (not JSON, no ``op``, no ``after`` on a create or an
update, no ``before`` on a delete, a key that differs between before and after) is a dead letter.

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

``debezium-avro``: the registry's envelope schema gives the row's columns (:func:`avro_row_schema`:
each Avro field's ``connect.name``/``connect.type``/``connect.parameters`` are its Connect type,
mapped by the same table); the values come as fastavro decodes them (bytes, a ``Decimal``, a
``datetime`` of Connect's ``Timestamp``, a ``VariableScaleDecimal`` record with bytes), which the
same readers take.

``*_EVENT_TIME_COLUMN=source.ts_ms``: the row's last column, :data:`SOURCE_TIME`, is the
envelope's ``source.ts_ms`` as a timestamp, on every change of the message (a ``-U`` or ``-D`` of
the before image too: the time of the change).
"""
from __future__ import annotations

import base64
import binascii
import datetime as _dt
import io
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Callable
from uuid import UUID

import fastavro
from operators import RowKind

from .deadletters import DeadLetterError, Reason
from .errors import ChangejoinError

FORMATS = ("rowkind", "debezium-json", "debezium-avro")
#: ``*_EVENT_TIME_COLUMN`` naming the envelope's ``source.ts_ms`` (the time of the change in the
#: database) as a Debezium input's event time; also the name of the column that carries it, last
#: in the row. A dot is in no Avro field name, so no column of a table can be called that.
SOURCE_TIME = "source.ts_ms"
SOURCE_TIME_TYPE = {"type": "long", "logicalType": "timestamp-millis"}
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_DAY = _dt.date(1970, 1, 1)
VARIABLE_SCALE = 10  # decimals kept of a VariableScaleDecimal
_INSERT, _UPDATE_BEFORE, _UPDATE_AFTER, _DELETE = (int(k) for k in RowKind)

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


# -- schemas: Confluent's AvroConverter (the registry's) -> Connect's ------------------------------
_CONNECT_PLAIN = {"int": "int32", "long": "int64", "float": "float32", "double": "float64", "boolean": "boolean",
                  "string": "string", "bytes": "bytes", "fixed": "bytes", "enum": "string", "record": "struct",
                  "array": "array", "map": "map"}
# A logical type written without Connect's name (a writer other than Kafka Connect's AvroData).
_CONNECT_OF_LOGICAL = {"decimal": "org.apache.kafka.connect.data.Decimal", "date": "org.apache.kafka.connect.data.Date",
                       "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
                       "timestamp-micros": "io.debezium.time.MicroTimestamp", "time-millis": "org.apache.kafka.connect.data.Time",
                       "time-micros": "io.debezium.time.MicroTime", "uuid": "io.debezium.data.Uuid"}


def avro_row_schema(envelope_schema: dict, name: str) -> tuple[dict, dict[str, str]]:
    """:func:`row_schema` of a ``debezium-avro`` topic: from the Avro schema Confluent's
    AvroConverter registers for a Debezium envelope (a record with ``before``/``after`` of
    ``["null", <table>.Value]``; each field's Connect type in its ``connect.name``,
    ``connect.type`` and ``connect.parameters`` properties). A field's Avro ``default`` (other
    than null) is kept: a message written before the column existed reads it."""
    try:
        expanded = fastavro.parse_schema(envelope_schema, expand=True)
    except Exception as err:  # noqa: BLE001 - fastavro raises several kinds
        raise FormatError(f"not a valid Avro schema: {err}") from None
    if not isinstance(expanded, dict) or expanded.get("type") != "record":
        raise FormatError("the registered schema is no Debezium envelope (an Avro record with before/after records)")
    schema, types = row_schema(_connect_of(expanded), name)
    avro_fields = {f["name"]: f for f in expanded.get("fields") or ()}
    image = _non_null((avro_fields.get("after") or avro_fields.get("before") or {}).get("type"))
    image = image if isinstance(image, dict) else {}
    defaults = {f["name"]: f["default"] for f in image.get("fields") or ()
                if f.get("default") is not None and isinstance(f["default"], (int, float, str, bool))
                and _avro_kind(f["type"]) not in ("bytes", "fixed", "record", "array", "map")}
    for f in schema["fields"]:
        if f["name"] in defaults and f["type"] != "null":
            f["default"] = defaults[f["name"]]
    return schema, types


def _avro_kind(avro_type) -> str | None:
    """The Avro type name of a field's (non-null) type: a default's JSON form is kept only where
    it is the value itself (Avro writes a bytes default as a string of code points)."""
    t = _non_null(avro_type)
    t = t.get("type") if isinstance(t, dict) else t
    return t if isinstance(t, str) else None


def _connect_of(avro_type, field: str | None = None) -> dict:
    """The Connect schema (the JSON converter's form) Confluent's AvroData wrote as ``avro_type``."""
    optional = isinstance(avro_type, list) and "null" in avro_type
    t = _non_null(avro_type)
    out = {"field": field} if field is not None else {}
    if isinstance(t, list):  # a union of several types: no Connect type
        return {**out, "type": "union", "optional": optional}
    props = t if isinstance(t, dict) else {}
    kind = props.get("type", t)
    out["type"] = props.get("connect.type") or _CONNECT_PLAIN.get(kind, kind)
    out["optional"] = optional
    name = props.get("connect.name") or _CONNECT_OF_LOGICAL.get(props.get("logicalType"))
    if name:
        out["name"] = name
    parameters = dict(props.get("connect.parameters") or {})
    if props.get("logicalType") == "decimal" and "scale" not in parameters:
        parameters = {"scale": str(props.get("scale", 0)), "connect.decimal.precision": str(props.get("precision", 38))}
    if parameters:
        out["parameters"] = parameters
    if kind == "record":
        out["fields"] = [_connect_of(f["type"], f["name"]) for f in props.get("fields") or ()]
    return out


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
            return _EPOCH + _dt.timedelta(microseconds=v * 1_000_000 // per_second)
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


# -- envelopes -----------------------------------------------------------------------------------
SKIPPED = ()  # the changes of a message that carries none


class DebeziumDecoder:
    """One input's ``debezium-json`` messages -> ``[(RowKind value, row)]``.

    ``columns`` and ``avro_types`` (non-null types: see ``avro.type_family``) are the row's;
    ``sources`` each column's Connect type name where an embedded schema told it; ``key`` the
    primary key's column indexes, or None; ``upsert``: read as upserts of that key (see the module
    docstring); ``append``: the input is declared insert-only, so an update or a delete is a dead
    letter (chosen here, once: the other modes' reading is untouched). When the last column is :data:`SOURCE_TIME`, each row carries the envelope's
    ``source.ts_ms`` there (a timestamp); the images fill the columns before it.

    How a message becomes an envelope (a dict) is the format's (:meth:`envelope`); what its
    changes are (:meth:`envelope_changes`) is shared by the JSON and the Avro formats."""

    def __init__(self, columns: tuple[str, ...], avro_types: tuple, nullable: tuple[bool, ...],
                 sources: dict | None, key: tuple[int, ...] | None, upsert: bool, append: bool = False):
        if append and upsert:
            raise ValueError("an append-only Debezium input is not read as upserts")
        self.source_time = columns[-1:] == (SOURCE_TIME,)
        if self.source_time:
            columns, avro_types, nullable = columns[:-1], avro_types[:-1], nullable[:-1]
        self.columns = columns
        self.nullable = nullable
        sources = sources or {}
        self.readers = tuple(value_reader(_non_null(t), sources.get(c)) for c, t in zip(columns, avro_types))
        self.key = key
        self.upsert = upsert
        self.append = append
        # why a retracting input's message without a full before image is a dead letter (chosen here)
        self.no_before = _NO_BEFORE_KEYED if key and not upsert else _NO_BEFORE
        if append:
            self._changes = self._insert_changes

    def changes(self, value: bytes | None) -> tuple[list[tuple[int, tuple]], str | None]:
        """(changes, why skipped): the message's changes, or none and why it was skipped
        (``tombstone``, ``truncate``, ``message``); raises :class:`DeadLetterError` when malformed.
        A keyed (upsert) input's delete is the before image, of which only the key is read."""
        if value is None:
            return [], "debezium_tombstone"
        envelope = self.envelope(value)
        if envelope is None:
            return [], "debezium_tombstone"
        return self.envelope_changes(envelope)

    def envelope(self, value: bytes) -> dict | None:
        """The message's envelope, None for a null payload; a dead letter if it is none."""
        try:
            envelope = json.loads(value)
        except (ValueError, UnicodeDecodeError) as err:
            raise DeadLetterError(Reason.UNDECODABLE, f"not JSON: {err}") from None
        if isinstance(envelope, dict) and "payload" in envelope and "schema" in envelope:
            envelope = envelope["payload"]
            if envelope is None:
                return None
        if not isinstance(envelope, dict):
            raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, "not a Debezium envelope (a JSON object)")
        return envelope

    def envelope_changes(self, envelope: dict) -> tuple[list[tuple[int, tuple]], str | None]:
        """:meth:`changes` of an envelope (a dict, whichever format it came in)."""
        op = envelope.get("op")
        if op in ("t", "m"):
            return [], "debezium_truncate" if op == "t" else "debezium_message"
        changes = self._changes(op, envelope.get("before"), envelope.get("after"))
        if self.source_time:
            time = _source_time(envelope)
            changes = [(kind, row + (time,)) for kind, row in changes]
        return changes, None

    def _changes(self, op, before, after) -> list[tuple[int, tuple]]:
        if op in ("c", "r"):
            return [(_UPDATE_AFTER if self.upsert else _INSERT, self._row(after, "after", op))]
        if op == "u":
            new = self._row(after, "after", op)
            if self.upsert:
                if before is not None:
                    self._same_key(self._row(before, "before", op, key_only=True), new)
                return [(_UPDATE_AFTER, new)]
            if before is None:
                raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, self.no_before.format(op="an update"))
            old = self._row(before, "before", op)
            self._same_key(old, new)
            return [(_UPDATE_BEFORE, old), (_UPDATE_AFTER, new)]
        if op == "d":
            if before is None:
                raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, "a delete without its before image" if self.upsert
                                      else self.no_before.format(op="a delete"))
            return [(_DELETE, self._row(before, "before", op, key_only=self.upsert))]
        return self._changes_of_unknown(op)

    def _insert_changes(self, op, before, after) -> list[tuple[int, tuple]]:
        """:meth:`_changes` of an input declared insert-only (``*_CHANGELOG_MODE=append``)."""
        if op in ("c", "r"):
            return [(_INSERT, self._row(after, "after", op))]
        if op in ("u", "d"):
            raise DeadLetterError(Reason.DEBEZIUM_CHANGE_ON_APPEND_TOPIC,
                                  f"op {op!r} ({'an update' if op == 'u' else 'a delete'}) on an input declared "
                                  "append-only (*_CHANGELOG_MODE=append): only c and r are inserts; unset it to "
                                  "read the topic as a changelog")
        return self._changes_of_unknown(op)

    @staticmethod
    def _changes_of_unknown(op):
        raise DeadLetterError(Reason.DEBEZIUM_MALFORMED,
                              "no op" if op is None else f"unknown op {op!r} (expected c, r, u, d, t or m)")

    def key_of(self, row: tuple) -> tuple:
        return tuple(row[i] for i in self.key)

    def _row(self, image, which: str, op: str, key_only: bool = False) -> tuple:
        if not isinstance(image, dict):
            raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"op {op!r} without its {which} image")
        values = []
        for i, (column, read) in enumerate(zip(self.columns, self.readers)):
            v = image.get(column)
            if v is None:
                if not self.nullable[i] and not (key_only and i not in self.key):
                    why = (f"column {column} of the {which} image is {'NULL' if column in image else 'missing'}, "
                           "and the column is not nullable")
                    if which == "before" and not self.upsert:  # a before image holding only the key
                        why += "; " + self.no_before.format(op=f"op {op!r}").replace(" without its before image",
                                                                                     " without a full before image", 1)
                    raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, why)
                values.append(None)
                continue
            try:
                values.append(read(v))
            except (ValueError, TypeError, KeyError, InvalidOperation, OverflowError, binascii.Error) as err:
                raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"column {column} of the {which} image: {err}") from None
        return tuple(values)

    def _same_key(self, old: tuple, new: tuple) -> None:
        if self.key and self.key_of(old) != self.key_of(new):
            raise DeadLetterError(Reason.DEBEZIUM_MALFORMED,
                                  f"the before image's key {self.key_of(old)!r} differs from the after image's "
                                  f"{self.key_of(new)!r} (Debezium writes a key change as a delete and a create)")


_NO_BEFORE = ("{op} without its before image: without a primary key the before images are the only way to "
              "retract; capture the table with REPLICA IDENTITY FULL, or declare its primary key "
              "(*_PRIMARY_KEY) to read the topic as upserts")
_NO_BEFORE_KEYED = ("{op} without its before image: in retract mode (*_CHANGELOG_MODE=retract) the before images "
                    "retract; capture the table with REPLICA IDENTITY FULL, or unset *_CHANGELOG_MODE to read the "
                    "topic as upserts of its primary key")


def _source_time(envelope: dict) -> _dt.datetime:
    """The envelope's ``source.ts_ms`` as a timestamp (the time of the change in the database)."""
    source = envelope.get("source")
    millis = source.get("ts_ms") if isinstance(source, dict) else None
    if not isinstance(millis, int) or isinstance(millis, bool):
        raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"no source.ts_ms (the event time: {SOURCE_TIME} is its "
                              f"*_EVENT_TIME_COLUMN), got {'no source' if source is None else repr(millis)}")
    try:
        return _EPOCH + _dt.timedelta(milliseconds=millis)
    except OverflowError:
        raise DeadLetterError(Reason.INVALID_EVENT_TIME, f"source.ts_ms {millis} is not an event time") from None


class DebeziumAvroDecoder(DebeziumDecoder):
    """One input's ``debezium-avro`` messages: Confluent's wire format (a magic byte, the writer
    schema's registry id, the Avro body), each read with its own writer schema (fetched by id,
    once: ``avro.SchemaRegistry``), so a topic's schema may change mid-stream. The images' columns
    are found by name: a column the writer lacks is its default in ``reader_schema`` (the row
    schema the planner took from the registry), else NULL; columns the writer added are ignored."""

    def __init__(self, columns, avro_types, nullable, sources, key, upsert, reader_schema: dict, registry,
                 append: bool = False):
        super().__init__(columns, avro_types, nullable, sources, key, upsert, append)
        self.registry = registry
        self.defaults = {f["name"]: f["default"] for f in reader_schema.get("fields") or ()
                         if "default" in f and f["default"] is not None}
        self.writers: dict[int, tuple] = {}  # schema id -> (parsed writer schema, the defaults it lacks)

    def envelope(self, value: bytes) -> dict | None:
        from .avro import schema_id_of

        schema_id = schema_id_of(value)
        writer = self.writers.get(schema_id)
        if writer is None:
            writer = self.writers[schema_id] = self._writer(schema_id)
        schema, missing = writer
        body = io.BytesIO(value)
        body.seek(5)
        try:
            envelope = fastavro.schemaless_reader(body, schema, None)
        except Exception as err:  # noqa: BLE001 - fastavro's errors on a truncated or corrupt body
            raise DeadLetterError(Reason.UNDECODABLE, f"schema id {schema_id}: {type(err).__name__}: {err}") from None
        if body.tell() != len(value):
            raise DeadLetterError(Reason.UNDECODABLE, f"{len(value) - body.tell()} bytes left after the record")
        if missing:
            for image in (envelope.get("before"), envelope.get("after")):
                if image is not None:
                    for column, default in missing.items():
                        image.setdefault(column, default)
        return envelope

    def _writer(self, schema_id: int) -> tuple:
        schema = self.registry.schema_by_id(schema_id)  # a dead letter for an unknown id
        fields = {f.get("name"): f for f in schema.get("fields") or ()} if isinstance(schema, dict) else {}
        image = fields.get("after") or fields.get("before")
        if not isinstance(schema, dict) or schema.get("type") != "record" or "op" not in fields or image is None:
            raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"writer schema id {schema_id} is no Debezium envelope "
                                  "(an Avro record with op, before and after)")
        try:
            parsed = fastavro.parse_schema(schema)
            expanded = fastavro.parse_schema(schema, expand=True)
        except Exception as err:  # noqa: BLE001
            raise DeadLetterError(Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id} is not valid Avro: {err}") from None
        record = _non_null(next(f["type"] for f in expanded["fields"] if f["name"] in ("after", "before")))
        written = {f["name"] for f in record.get("fields") or ()} if isinstance(record, dict) else set()
        return parsed, {c: d for c, d in self.defaults.items() if c not in written}


def _non_null(avro_type):
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        return branches[0] if len(branches) == 1 else avro_type
    return avro_type

"""The ``debezium-avro`` input format: the Debezium protocol (``debezium.py``) in Confluent's wire format
(Confluent's AvroConverter: a magic byte, the writer schema's registry id, the envelope an Avro
record whose schema the registry holds).

``debezium-avro``: the registry's envelope schema gives the row's columns (:func:`avro_row_schema`:
each Avro field's ``connect.name``/``connect.type``/``connect.parameters`` are its Connect type,
mapped by the same table); the values come as fastavro decodes them (bytes, a ``Decimal``, a
``datetime`` of Connect's ``Timestamp``, a ``VariableScaleDecimal`` record with bytes), which the
same readers take.
"""
from __future__ import annotations

import io

import fastavro

from ..avro import schema_id_of
from ..deadletters import DeadLetterError, Reason
from .base import InputSide, ReaderSchemaError, SchemaSource, SchemaSources
from .connect import FormatError, non_null, row_schema
from .debezium import DebeziumChanges, DebeziumFormat

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
    image = non_null((avro_fields.get("after") or avro_fields.get("before") or {}).get("type"))
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
    t = non_null(avro_type)
    t = t.get("type") if isinstance(t, dict) else t
    return t if isinstance(t, str) else None


def _connect_of(avro_type, field: str | None = None) -> dict:
    """The Connect schema (the JSON converter's form) Confluent's AvroData wrote as ``avro_type``."""
    optional = isinstance(avro_type, list) and "null" in avro_type
    t = non_null(avro_type)
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


class DebeziumAvroDecoder(DebeziumChanges):
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
        record = non_null(next(f["type"] for f in expanded["fields"] if f["name"] in ("after", "before")))
        written = {f["name"] for f in record.get("fields") or ()} if isinstance(record, dict) else set()
        return parsed, {c: d for c, d in self.defaults.items() if c not in written}


class DebeziumAvro(DebeziumFormat):
    name = "debezium-avro"
    schema_sources = (SchemaSource.REGISTRY,)

    def config_problems(self, side: InputSide, registry_url: str | None) -> list[str]:
        problems = []
        if not registry_url:
            problems.append(f"{side.format_var}: {self.name} reads Confluent's wire format, whose schemas are a "
                            "registry's: set SCHEMA_REGISTRY_URL")
        if side.schema_file:
            problems.append(f"{side.schema_file_var}: not used with {side.format_var}={self.name} (each message's "
                            "schema is the registry's); unset it")
        return problems

    def reader_schema(self, side: InputSide, sources: SchemaSources) -> dict:
        """The row schema of the envelope schema latest registered for ``<topic>-value``
        (:func:`avro_row_schema`)."""
        subject = f"{side.topic}-value"
        try:
            envelope = sources.latest(subject)[1]
        except Exception as err:  # noqa: BLE001 - the registry's error, in one line
            raise ReaderSchemaError(f"SCHEMA_REGISTRY_URL: cannot get the latest schema of subject {subject} ({err}); "
                                    f"{side.format_var}={self.name} reads the row schema from it") from None
        try:
            return avro_row_schema(envelope, side.record_name)[0]
        except FormatError as err:
            raise ReaderSchemaError(f"{side.format_var}: subject {subject}'s latest schema is no Debezium envelope "
                                    f"({err})") from None

    def explain_schema(self, s) -> str:
        return f"the registry's latest of {s.topic}-value, each message read with its own"

    def decoder(self, s, registry, rowkind_header: str) -> DebeziumAvroDecoder:
        return DebeziumAvroDecoder(*self.decoder_args(s), s.changelog_mode == "upsert", s.reader_schema, registry,
                                   append=s.changelog_mode == "append")

"""The ``debezium-json`` input format: the Debezium protocol (``debezium.py``) in Kafka Connect's JSON
converter, bare or wrapped as ``{"schema": {...}, "payload": <envelope>}``
(``value.converter.schemas.enable``). The row schema is ``*_SCHEMA_FILE``'s, else the one the
topic's newest message embeds (Connect's types: ``connect.py``).
"""
from __future__ import annotations

import json

from ..deadletters import DeadLetterError, Reason
from .base import InputSide, ReaderSchemaError, SchemaSource, SchemaSources, schema_file
from .connect import FormatError, row_schema
from .debezium import DebeziumChanges, DebeziumFormat


class DebeziumDecoder(DebeziumChanges):
    """One input's ``debezium-json`` messages -> ``[(RowKind value, row)]`` (``DebeziumChanges``)."""

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


class DebeziumJson(DebeziumFormat):
    name = "debezium-json"
    schema_sources = (SchemaSource.FILE, SchemaSource.MESSAGES)

    def reader_schema(self, side: InputSide, sources: SchemaSources) -> dict:
        """``*_SCHEMA_FILE``'s, else the schema the topic's newest message embeds (Kafka Connect's
        JSON converter with schemas enabled): an Avro record whose fields keep their Connect type
        names (``connect.source_types``)."""
        if self.schema_source(side.schema_file) is SchemaSource.FILE:
            return schema_file(side, sources)
        var, topic = side.schema_file_var, side.topic
        try:
            values = sources.newest_values(topic)
        except Exception as err:  # noqa: BLE001 - the broker's error, in one line
            raise ReaderSchemaError(f"{var}: not set, and the schema of topic {topic} could not be read from its "
                                    f"messages ({err}); set {var} (the row's Avro record)") from None
        for value in values:
            try:
                message = json.loads(value)
            except ValueError:
                continue
            if isinstance(message, dict) and isinstance(message.get("schema"), dict):
                try:
                    return row_schema(message["schema"], side.record_name)[0]
                except FormatError as err:
                    raise ReaderSchemaError(f"{var}: not set, and topic {topic}'s newest message embeds no Debezium "
                                            f"row schema ({err}); set {var}") from None
        raise ReaderSchemaError(
            f"{var}: required for a {self.name} topic whose messages embed no schema (topic {topic} has "
            "none with one yet: value.converter.schemas.enable=false, or an empty topic); set it to the row's "
            "Avro record (the table's columns, not the envelope)")

    def explain_schema(self, s) -> str:
        return "embedded in the messages" if s.source_types is not None else "from the schema file"

    def decoder(self, s, registry, rowkind_header: str) -> DebeziumDecoder:
        return DebeziumDecoder(*self.decoder_args(s), upsert=s.changelog_mode == "upsert",
                               append=s.changelog_mode == "append")

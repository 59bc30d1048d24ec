"""The input formats' registry (``service/formats/``): what each format answers, without a server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from service import formats
from service.avro import load_schema_file
from service.config import ConfigError, load_settings
from service.formats import InputSide, ReaderSchemaError, SchemaSource, format_of
from tests.support.service_env import VALID

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
ORDERS_ENVELOPE = {"type": "struct", "fields": [
    {"field": "before", "type": "struct", "optional": True, "fields": [
        {"field": "order_id", "type": "int64", "optional": False},
        {"field": "placed", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"}]},
    {"field": "after", "type": "struct", "optional": True, "fields": [
        {"field": "order_id", "type": "int64", "optional": False},
        {"field": "placed", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"}]},
    {"field": "op", "type": "string", "optional": False}]}


class Sources:
    """The catalog's I/O as the test gives it (``formats.SchemaSources``)."""

    def __init__(self, subjects=None, messages=None, broken: Exception | None = None):
        self.subjects, self.messages, self.broken = subjects or {}, messages or [], broken
        self.asked: list[str] = []

    def schema_file(self, path):
        self.asked.append(f"file {Path(path).name}")
        return load_schema_file(path)

    def latest(self, subject):
        self.asked.append(f"subject {subject}")
        if self.broken:
            raise self.broken
        return 1, self.subjects[subject]

    def newest_values(self, topic):
        self.asked.append(f"topic {topic}")
        if self.broken:
            raise self.broken
        return self.messages


def side(schema_file=None):
    return InputSide("LEFT", "orders", schema_file, "orders")


@pytest.mark.parametrize("name, with_file, without", [
    ("rowkind", SchemaSource.FILE, SchemaSource.REGISTRY),
    ("debezium-json", SchemaSource.FILE, SchemaSource.MESSAGES),
    ("debezium-avro", SchemaSource.REGISTRY, SchemaSource.REGISTRY),
])
def test_each_format_says_where_its_reader_schema_comes_from(name, with_file, without):
    fmt = format_of(name)
    assert (fmt.schema_source("orders.avsc"), fmt.schema_source(None)) == (with_file, without)


def test_a_rowkind_schema_is_the_files_else_the_registrys():
    fmt, file = format_of("rowkind"), str(SCHEMAS / "orders.avsc")
    sources = Sources({"orders-value": {"type": "record", "name": "Order", "fields": []}})
    assert fmt.reader_schema(side(file), sources) == load_schema_file(file)
    assert fmt.reader_schema(side(), sources)["name"] == "Order"
    assert sources.asked == ["file orders.avsc", "subject orders-value"]

    class NotFound(Exception):
        kind = "content"

    with pytest.raises(ReaderSchemaError, match=r"^SCHEMA_REGISTRY_URL: cannot get the latest schema of subject "
                                                r"orders-value \(no such subject\); register it or set LEFT_SCHEMA_FILE$"):
        fmt.reader_schema(side(), Sources(broken=NotFound("no such subject")))
    with pytest.raises(ReaderSchemaError, match=r"^LEFT_SCHEMA_FILE: "):
        fmt.reader_schema(side(str(SCHEMAS / "missing.avsc")), sources)


def test_a_debezium_json_schema_is_the_one_the_newest_message_embeds():
    fmt = format_of("debezium-json")
    payload = {"op": "c", "after": {"order_id": 1, "placed": 5}}
    sources = Sources(messages=[b"not json", json.dumps({"schema": ORDERS_ENVELOPE, "payload": payload}).encode()])
    schema = fmt.reader_schema(side(), sources)
    assert [f["name"] for f in schema["fields"]] == ["order_id", "placed"] and schema["name"] == "orders"
    assert fmt.source_types(schema) == {"order_id": "int64", "placed": "io.debezium.time.MicroTimestamp"}
    assert sources.asked == ["topic orders"]
    with pytest.raises(ReaderSchemaError, match="^LEFT_SCHEMA_FILE: required for a debezium-json topic whose "
                                                "messages embed no schema"):
        fmt.reader_schema(side(), Sources(messages=[json.dumps(payload).encode()]))
    with pytest.raises(ReaderSchemaError, match=r"^LEFT_SCHEMA_FILE: not set, and the schema of topic orders could "
                                                r"not be read from its messages \(broker down\)"):
        fmt.reader_schema(side(), Sources(broken=OSError("broker down")))


def test_only_rowkind_reads_message_keys_and_only_debezium_has_an_envelope_time():
    assert [n for n, f in formats.FORMATS.items() if f.message_keys] == ["rowkind"]
    assert {n: f.envelope_time for n, f in formats.FORMATS.items()} == {
        "rowkind": None, "debezium-json": "source.ts_ms", "debezium-avro": "source.ts_ms"}
    # unset, a Debezium topic's mode follows its primary key; declared, it is the declared one
    debezium = format_of("debezium-json")
    assert [debezium.changelog_mode("retract", False, pk) for pk in ((0,), None)] == ["upsert", "retract"]
    assert debezium.changelog_mode("append", True, (0,)) == "append"
    assert format_of("rowkind").changelog_mode("retract", False, (0,)) == "retract"


def test_the_configuration_refuses_a_changelog_mode_the_format_does_not_read(monkeypatch):
    rowkind = format_of("rowkind")
    monkeypatch.setattr(type(rowkind), "changelog_modes", ("retract", "append"))
    with pytest.raises(ConfigError, match="LEFT_CHANGELOG_MODE: LEFT_FORMAT=rowkind reads retract or append topics, "
                                          "not upsert"):
        load_settings({**VALID, "LEFT_CHANGELOG_MODE": "upsert"})
    load_settings({**VALID, "LEFT_CHANGELOG_MODE": "append"})

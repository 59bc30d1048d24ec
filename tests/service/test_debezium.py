"""The debezium-json format: every op, every skipped message, each type, each malformed envelope."""
from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest

from service.deadletters import DeadLetterError
from service.formats.connect import FormatError, row_schema, unsupported_columns, value_reader
from service.formats.debezium_json import DebeziumDecoder

I, UB, UA, D = 0, 1, 2, 3
COLUMNS = ("id", "name", "balance")
TYPES = ("int", ["null", "string"], ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}])
NULLABLE = (False, True, True)


def b64(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)).decode()


def msg(op, before=None, after=None, schema=False) -> bytes:
    envelope = {"before": before, "after": after, "op": op, "source": {"ts_ms": 1_700_000_000_000}, "ts_ms": 1}
    if schema:
        envelope = {"schema": {"type": "struct"}, "payload": envelope}
    return json.dumps(envelope).encode()


def decoder(upsert=False, key=(0,)):
    return DebeziumDecoder(COLUMNS, TYPES, NULLABLE, None, key, upsert)


ALICE = {"id": 1, "name": "alice", "balance": b64(1050)}
ALICE2 = {"id": 1, "name": "alice b", "balance": b64(-5)}


@pytest.mark.parametrize("schema", [False, True])
def test_every_op_as_flink_maps_it(schema):
    d = decoder()
    assert d.changes(msg("c", after=ALICE, schema=schema)) == ([(I, (1, "alice", Decimal("10.50")))], None)
    assert d.changes(msg("r", after=ALICE, schema=schema)) == ([(I, (1, "alice", Decimal("10.50")))], None)
    assert d.changes(msg("u", ALICE, ALICE2, schema=schema)) == (
        [(UB, (1, "alice", Decimal("10.50"))), (UA, (1, "alice b", Decimal("-0.05")))], None)
    assert d.changes(msg("d", before=ALICE2, schema=schema)) == ([(D, (1, "alice b", Decimal("-0.05")))], None)


def test_keyed_inputs_are_upserts_and_need_no_before_image():
    d = decoder(upsert=True)
    assert d.changes(msg("c", after=ALICE)) == ([(UA, (1, "alice", Decimal("10.50")))], None)
    assert d.changes(msg("u", None, ALICE2)) == ([(UA, (1, "alice b", Decimal("-0.05")))], None)
    # REPLICA IDENTITY DEFAULT: the delete's before image holds the key only
    assert d.changes(msg("d", before={"id": 1, "name": None, "balance": None})) == ([(D, (1, None, None))], None)


@pytest.mark.parametrize("schema", [False, True])
def test_a_keyed_input_in_retract_mode_retracts_its_before_images_and_dead_letters_what_lacks_them(schema):
    # *_CHANGELOG_MODE=retract with a primary key: upsert False, key (0,); name NOT NULL here
    d = DebeziumDecoder(COLUMNS, TYPES, (False, False, True), None, (0,), upsert=False)
    assert d.changes(msg("c", after=ALICE, schema=schema)) == ([(I, (1, "alice", Decimal("10.50")))], None)
    assert d.changes(msg("r", after=ALICE, schema=schema)) == ([(I, (1, "alice", Decimal("10.50")))], None)
    assert d.changes(msg("u", ALICE, ALICE2, schema=schema)) == (
        [(UB, (1, "alice", Decimal("10.50"))), (UA, (1, "alice b", Decimal("-0.05")))], None)
    assert d.changes(msg("d", before=ALICE2, schema=schema)) == ([(D, (1, "alice b", Decimal("-0.05")))], None)
    assert d.changes(msg("t", schema=schema)) == ([], "debezium_truncate")
    assert d.changes(None) == ([], "debezium_tombstone")
    key_only = {"id": 1, "name": None, "balance": None}  # REPLICA IDENTITY DEFAULT's delete
    for value, detail in ((msg("u", None, ALICE2, schema=schema), "an update without its before image"),
                          (msg("d", schema=schema), "a delete without its before image"),
                          (msg("d", before=key_only, schema=schema), "op 'd' without a full before image"),
                          (msg("u", key_only, ALICE2, schema=schema), "op 'u' without a full before image"),
                          (msg("d", before={"id": 1}, schema=schema), "column name of the before image is missing")):
        with pytest.raises(DeadLetterError) as err:
            d.changes(value)
        assert err.value.reason == "debezium_malformed"
        assert detail in err.value.detail and "REPLICA IDENTITY FULL" in err.value.detail, err.value.detail
        if "missing" not in detail and "full" not in detail:
            assert "unset *_CHANGELOG_MODE to read the topic as upserts of its primary key" in err.value.detail
    with pytest.raises(DeadLetterError, match="differs from the after image"):
        d.changes(msg("u", ALICE, {**ALICE2, "id": 2}, schema=schema))
    # without a key, the advice is to declare one
    with pytest.raises(DeadLetterError, match="declare its primary key"):
        DebeziumDecoder(COLUMNS, TYPES, NULLABLE, None, None, upsert=False).changes(msg("d"))


@pytest.mark.parametrize("key", [None, (0,)])
@pytest.mark.parametrize("schema", [False, True])
def test_an_append_only_input_reads_inserts_and_dead_letters_updates_and_deletes(schema, key):
    d = DebeziumDecoder(COLUMNS, TYPES, NULLABLE, None, key, upsert=False, append=True)
    assert d.changes(msg("c", after=ALICE, schema=schema)) == ([(I, (1, "alice", Decimal("10.50")))], None)
    assert d.changes(msg("r", after=ALICE2, schema=schema)) == ([(I, (1, "alice b", Decimal("-0.05")))], None)
    for op, before, after, what in (("u", ALICE, ALICE2, "an update"), ("u", None, ALICE2, "an update"),
                                    ("d", ALICE, None, "a delete"), ("d", None, None, "a delete")):
        with pytest.raises(DeadLetterError) as err:
            d.changes(msg(op, before, after, schema=schema))
        assert err.value.reason == "debezium_change_on_append_topic"
        assert f"op {op!r} ({what})" in err.value.detail and "append-only" in err.value.detail
    assert d.changes(msg("t", schema=schema)) == ([], "debezium_truncate")
    assert d.changes(msg("m", schema=schema)) == ([], "debezium_message")
    assert d.changes(None) == ([], "debezium_tombstone")
    for value, detail in ((msg("x", after=ALICE), "unknown op 'x'"), (msg("c"), "op 'c' without its after image"),
                          (json.dumps({"after": ALICE}).encode(), "no op")):
        with pytest.raises(DeadLetterError) as err:
            d.changes(value)
        assert err.value.reason == "debezium_malformed" and detail in err.value.detail


def test_an_append_only_input_with_source_time_dates_its_inserts():
    d = DebeziumDecoder(COLUMNS + ("source.ts_ms",), TYPES + ({"type": "long", "logicalType": "timestamp-millis"},),
                        NULLABLE + (False,), None, None, upsert=False, append=True)
    changed = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert d.changes(msg("c", after=ALICE)) == ([(I, (1, "alice", Decimal("10.50"), changed))], None)


def test_the_changelog_decoders_are_not_changed_by_append_mode():
    # the append behaviour is chosen at init: the other modes keep the class's mapping
    for d in (decoder(), decoder(upsert=True)):
        assert not d.append and "_changes" not in vars(d)
    with pytest.raises(ValueError):
        DebeziumDecoder(COLUMNS, TYPES, NULLABLE, None, (0,), upsert=True, append=True)


@pytest.mark.parametrize("value, reason", [
    (None, "debezium_tombstone"),
    (json.dumps({"schema": {}, "payload": None}).encode(), "debezium_tombstone"),
    (msg("t"), "debezium_truncate"),
    (msg("m"), "debezium_message"),
])
def test_messages_without_a_row_change_are_skipped(value, reason):
    assert decoder().changes(value) == ([], reason)


@pytest.mark.parametrize("value, detail", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a Debezium envelope"),
    (json.dumps({"before": None, "after": ALICE}).encode(), "no op"),
    (msg("x", after=ALICE), "unknown op 'x'"),
    (msg("c"), "op 'c' without its after image"),
    (msg("u", before=ALICE), "op 'u' without its after image"),
    (msg("d"), "a delete without its before image"),
    (msg("u", None, ALICE2), "REPLICA IDENTITY FULL"),
    (msg("u", ALICE, {**ALICE2, "id": 2}), "differs from the after image"),
    (msg("c", after={**ALICE, "balance": "not base64!"}), "column balance of the after image"),
    (msg("c", after={**ALICE, "id": None}), "column id of the after image is NULL"),
    (msg("c", after={"name": "x"}), "column id of the after image is missing"),
    (msg("c", after={**ALICE, "id": "one"}), "is no integer"),
])
def test_malformed_envelopes_are_dead_letters(value, detail):
    with pytest.raises(DeadLetterError) as err:
        decoder().changes(value)
    assert err.value.reason == "debezium_malformed" or "not JSON" in detail
    assert detail in err.value.detail


# -- types ---------------------------------------------------------------------------------------
DEC = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
TS_MICROS = {"type": "long", "logicalType": "timestamp-micros"}
UTC = dt.timezone.utc


@pytest.mark.parametrize("avro, source, value, expected", [
    ("int", "int32", 7, 7),
    ("long", "int64", 2**40, 2**40),
    ("double", "float64", 1.5, 1.5),
    ("double", "float64", "NaN", "nan"),
    ("boolean", "boolean", True, True),
    ("string", "string", "x", "x"),
    ("string", "io.debezium.data.Json", {"a": [1]}, '{"a":[1]}'),
    ("bytes", "bytes", base64.b64encode(b"\x00\x01").decode(), b"\x00\x01"),
    (DEC, "org.apache.kafka.connect.data.Decimal", b64(-12345), Decimal("-123.45")),
    (DEC, None, "123.45", Decimal("123.45")),  # decimal.handling.mode=string
    (DEC, None, 123.45, Decimal("123.45")),  # decimal.handling.mode=double
    ({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10}, "io.debezium.data.VariableScaleDecimal",
     {"scale": 3, "value": b64(1234)}, Decimal("1.2340000000")),
    ({"type": "int", "logicalType": "date"}, "io.debezium.time.Date", 19_000, dt.date(2022, 1, 8)),
    ({"type": "long", "logicalType": "timestamp-millis"}, "io.debezium.time.Timestamp", 1_700_000_000_123,
     dt.datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC)),
    (TS_MICROS, "io.debezium.time.MicroTimestamp", 1_700_000_000_123_456,
     dt.datetime(2023, 11, 14, 22, 13, 20, 123_456, tzinfo=UTC)),
    (TS_MICROS, "io.debezium.time.NanoTimestamp", 1_700_000_000_123_456_789,
     dt.datetime(2023, 11, 14, 22, 13, 20, 123_456, tzinfo=UTC)),
    (TS_MICROS, "io.debezium.time.ZonedTimestamp", "2023-11-14T22:13:20.5Z",
     dt.datetime(2023, 11, 14, 22, 13, 20, 500_000, tzinfo=UTC)),
    ({"type": "long", "logicalType": "time-micros"}, "io.debezium.time.MicroTime", 3_600_000_001,
     dt.time(1, 0, 0, 1)),
    ({"type": "long", "logicalType": "time-micros"}, "io.debezium.time.Time", 3_600_001, dt.time(1, 0, 0, 1000)),
    ({"type": "string", "logicalType": "uuid"}, "io.debezium.data.Uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
])
def test_each_type_reads_its_debezium_encoding(avro, source, value, expected):
    got = value_reader(avro, source)(value)
    if expected == "nan":
        assert got != got
    else:
        assert got == expected


def test_a_variable_scale_decimal_with_too_many_decimals_is_refused():
    reader = value_reader({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10},
                          "io.debezium.data.VariableScaleDecimal")
    with pytest.raises(ValueError, match="more than 10 decimals"):
        reader({"scale": 12, "value": b64(123456789012345)})


ENVELOPE_SCHEMA = {
    "type": "struct", "name": "shop.public.customers.Envelope",
    "fields": [
        {"field": "before", "type": "struct", "optional": True, "fields": []},
        {"field": "after", "type": "struct", "optional": True, "name": "shop.public.customers.Value", "fields": [
            {"field": "id", "type": "int32", "optional": False},
            {"field": "balance", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
            {"field": "updated_at", "type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp"},
            {"field": "born", "type": "int32", "optional": True, "name": "io.debezium.time.Date"},
            {"field": "tags", "type": "array", "optional": True, "items": {"type": "string"}},
        ]},
        {"field": "op", "type": "string", "optional": False},
    ]}


def test_the_embedded_schema_becomes_the_rows_avro_record():
    schema, names = row_schema(ENVELOPE_SCHEMA, "customers")
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    assert fields["id"] == "int"
    assert fields["balance"] == ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]
    assert fields["updated_at"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert fields["born"] == ["null", {"type": "int", "logicalType": "date"}]
    assert unsupported_columns(schema) == {"tags": "type array"}
    assert names["updated_at"] == "io.debezium.time.ZonedTimestamp"
    with pytest.raises(FormatError):
        row_schema({"type": "struct", "fields": [{"field": "x", "type": "int32"}]}, "t")

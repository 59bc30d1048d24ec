"""The debezium-avro format: Debezium envelopes in Confluent's wire format, each read with its
writer schema from a registry. Every op, each Debezium logical type as AvroData writes it, each
malformed message, schema changes, and the real capture's messages (recorded with the JSON
converter, turned into what AvroConverter writes by tests/support/debezium_avro.py) reading the
same rows in both formats."""
from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from tests.support.debezium_avro import avro_schema, avro_value, connect_envelope, recorded, wire
# the fixtures are imported to be used by name
from tests.support.schema_registry_fake import fake_schema_registry, schema_registry_url  # noqa: F401

from service.avro import SchemaRegistry, record_columns
from service.deadletters import DeadLetterError
from service.formats.connect import row_schema, unsupported_columns
from service.formats.debezium import SOURCE_TIME, SOURCE_TIME_TYPE
from service.formats.debezium_avro import DebeziumAvroDecoder, avro_row_schema
from service.formats.debezium_json import DebeziumDecoder

I, UB, UA, D = 0, 1, 2, 3
UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
DECIMAL = "org.apache.kafka.connect.data.Decimal"


COLUMNS = [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "name", "type": "string", "optional": True},
    {"field": "balance", "type": "bytes", "optional": True, "name": DECIMAL, "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
]
CONNECT = connect_envelope(COLUMNS)
AVRO = avro_schema(CONNECT)


class Topic:
    """A topic's envelopes registered and framed: ``msg(op, before, after)`` -> wire-format bytes."""

    def __init__(self, fake, connect=CONNECT, subject="t-value"):
        self.fake, self.connect, self.subject = fake, connect, subject
        self.avro = avro_schema(connect)
        self.schema_id = fake.register(subject, self.avro)

    def msg(self, op, before=None, after=None, ts_ms=1_700_000_000_000):
        payload = {"before": before, "after": after, "op": op, "ts_ms": 5,
                   "source": {"connector": "postgresql", "ts_ms": ts_ms}}
        return wire(self.schema_id, self.avro, avro_value(self.connect, payload))


def decoder(url, schema=None, key=(0,), upsert=False, append=False):
    """The decoder the worker builds: the row schema is the registry's latest, as the planner reads it."""
    registry = SchemaRegistry(url)
    row = schema or avro_row_schema(registry.latest("t-value")[1], "t")[0]
    columns = record_columns(row)
    types = dict(avro_row_schema(registry.latest("t-value")[1], "t")[1])
    return DebeziumAvroDecoder(tuple(c.name for c in columns), tuple(c.avro_type for c in columns),
                               tuple(c.nullable for c in columns), types, key, upsert, row, registry, append=append)


def alice(**change):
    return {"id": 1, "name": "alice", "balance": "BBo=", **change}  # BBo= is 10.50, as the JSON converter writes it


ALICE = (1, "alice", Decimal("10.50"))


def test_every_op_as_the_json_format_maps_it(fake_schema_registry, schema_registry_url):
    t = Topic(fake_schema_registry)
    d = decoder(schema_registry_url)
    bob = alice(name="bob", balance="/rs=")  # -3.25
    assert d.changes(t.msg("c", after=alice())) == ([(I, ALICE)], None)
    assert d.changes(t.msg("r", after=alice())) == ([(I, ALICE)], None)
    assert d.changes(t.msg("u", alice(), bob)) == ([(UB, ALICE), (UA, (1, "bob", Decimal("-3.25")))], None)
    assert d.changes(t.msg("d", before=bob)) == ([(D, (1, "bob", Decimal("-3.25")))], None)
    assert d.changes(None) == ([], "debezium_tombstone")
    assert d.changes(t.msg("t")) == ([], "debezium_truncate")
    assert d.changes(t.msg("m")) == ([], "debezium_message")


def test_keyed_inputs_are_upserts(fake_schema_registry, schema_registry_url):
    t = Topic(fake_schema_registry)
    d = decoder(schema_registry_url, upsert=True)
    assert d.changes(t.msg("u", None, alice())) == ([(UA, ALICE)], None)
    assert d.changes(t.msg("d", before={"id": 1, "name": None, "balance": None})) == ([(D, (1, None, None))], None)


def test_a_keyed_input_in_retract_mode_retracts_its_before_images(fake_schema_registry, schema_registry_url):
    t = Topic(fake_schema_registry)
    row = avro_row_schema(SchemaRegistry(schema_registry_url).latest("t-value")[1], "t")[0]
    for f in row["fields"]:  # name NOT NULL in the reader's row schema: a key-only image is told apart
        if f["name"] == "name":
            f["type"] = "string"
            f.pop("default", None)
    d = decoder(schema_registry_url, schema=row, key=(0,), upsert=False)
    bob = alice(name="bob", balance="/rs=")  # -3.25
    assert d.changes(t.msg("c", after=alice())) == ([(I, ALICE)], None)
    assert d.changes(t.msg("r", after=alice())) == ([(I, ALICE)], None)
    assert d.changes(t.msg("u", alice(), bob)) == ([(UB, ALICE), (UA, (1, "bob", Decimal("-3.25")))], None)
    assert d.changes(t.msg("d", before=bob)) == ([(D, (1, "bob", Decimal("-3.25")))], None)
    assert d.changes(t.msg("t")) == ([], "debezium_truncate")
    for message, detail in ((t.msg("u", None, bob), "an update without its before image"),
                            (t.msg("d"), "a delete without its before image"),
                            (t.msg("d", before={"id": 1, "name": None, "balance": None}),
                             "op 'd' without a full before image")):
        with pytest.raises(DeadLetterError) as err:
            d.changes(message)
        assert err.value.reason == "debezium_malformed"
        assert detail in err.value.detail and "REPLICA IDENTITY FULL" in err.value.detail
    with pytest.raises(DeadLetterError, match="differs from the after image"):
        d.changes(t.msg("u", alice(), alice(id=2)))


@pytest.mark.parametrize("key", [None, (0,)])
def test_an_append_only_input_reads_inserts_and_dead_letters_updates_and_deletes(key, fake_schema_registry,
                                                                                  schema_registry_url):
    t = Topic(fake_schema_registry)
    d = decoder(schema_registry_url, key=key, append=True)
    bob = alice(name="bob", balance="/rs=")  # -3.25
    assert d.changes(t.msg("c", after=alice())) == ([(I, ALICE)], None)
    assert d.changes(t.msg("r", after=bob)) == ([(I, (1, "bob", Decimal("-3.25")))], None)
    for op, before, after, what in (("u", alice(), bob, "an update"), ("u", None, bob, "an update"),
                                    ("d", bob, None, "a delete"), ("d", None, None, "a delete")):
        with pytest.raises(DeadLetterError) as err:
            d.changes(t.msg(op, before, after))
        assert err.value.reason == "debezium_change_on_append_topic"
        assert f"op {op!r} ({what})" in err.value.detail and "append-only" in err.value.detail
    assert d.changes(None) == ([], "debezium_tombstone")
    assert d.changes(t.msg("t")) == ([], "debezium_truncate")
    assert d.changes(t.msg("m")) == ([], "debezium_message")
    with pytest.raises(DeadLetterError) as err:
        d.changes(t.msg("x", after=alice()))
    assert err.value.reason == "debezium_malformed"


@pytest.mark.parametrize("case", ["snapshot_read", "create", "update", "delete"])
def test_the_real_capture_reads_the_same_rows_in_avro_as_in_json(case, fake_schema_registry, schema_registry_url):
    """The recorded PostgreSQL capture's message, written as AvroConverter would, gives the row
    schema and the changes that its JSON-converter original gives."""
    message = recorded(case)
    avro = avro_schema(message["schema"])
    schema_id = fake_schema_registry.register("customers-value", avro)
    registry = SchemaRegistry(schema_registry_url)
    row, types = avro_row_schema(registry.latest("customers-value")[1], "customers")
    assert (row, types) == row_schema(message["schema"], "customers")
    columns = record_columns(row)
    shape = (tuple(c.name for c in columns), tuple(c.avro_type for c in columns), tuple(c.nullable for c in columns),
             types, (0,), False)
    in_json = DebeziumDecoder(*shape).envelope_changes(message["payload"])
    in_avro = DebeziumAvroDecoder(*shape, row, registry).changes(
        wire(schema_id, avro, avro_value(message["schema"], message["payload"])))
    assert in_avro == in_json and in_avro[0]


# -- types ---------------------------------------------------------------------------------------
def typed(field, type_, name=None, **extra):
    column = {"field": field, "type": type_, "optional": True, **extra}
    return {**column, "name": name} if name else column


TYPED = [
    {"field": "id", "type": "int32", "optional": False},
    typed("small", "int16"),
    typed("micro_ts", "int64", "io.debezium.time.MicroTimestamp", version=1),
    typed("nano_ts", "int64", "io.debezium.time.NanoTimestamp", version=1),
    typed("milli_ts", "int64", "io.debezium.time.Timestamp", version=1),
    typed("zoned_ts", "string", "io.debezium.time.ZonedTimestamp", version=1),
    typed("connect_ts", "int64", "org.apache.kafka.connect.data.Timestamp", version=1),
    typed("day", "int32", "io.debezium.time.Date", version=1),
    typed("connect_day", "int32", "org.apache.kafka.connect.data.Date", version=1),
    typed("micro_time", "int64", "io.debezium.time.MicroTime", version=1),
    typed("amount", "bytes", DECIMAL, version=1, parameters={"scale": "3", "connect.decimal.precision": "12"}),
    {"field": "any_scale", "type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
     "version": 1, "fields": [{"field": "scale", "type": "int32", "optional": False},
                              {"field": "value", "type": "bytes", "optional": False}]},
    typed("doc", "string", "io.debezium.data.Json", version=1),
    typed("uid", "string", "io.debezium.data.Uuid", version=1),
    typed("raw", "bytes"),
    typed("ratio", "float64"),
    typed("flag", "boolean"),
    {"field": "tags", "type": "array", "optional": True, "items": {"type": "string", "optional": False}},
]


def unscaled(n: int) -> str:
    import base64
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def test_each_logical_type_reads_as_the_joins_type(fake_schema_registry, schema_registry_url):
    connect = connect_envelope(TYPED)
    avro = avro_schema(connect)
    fields = {f["name"]: f["type"][1] for f in avro["fields"][0]["type"][1]["fields"] if isinstance(f["type"], list)}
    # What AvroData writes, as the brief of the format says: Connect names kept, Connect's own types logical too.
    assert fields["micro_ts"] == {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp", "connect.version": 1}
    assert fields["connect_ts"]["logicalType"] == "timestamp-millis" and fields["amount"]["logicalType"] == "decimal"
    assert fields["any_scale"]["type"] == "record" and fields["small"] == {"type": "int", "connect.type": "int16"}
    t = Topic(fake_schema_registry, connect)
    row_avro = avro_row_schema(avro, "t")[0]
    assert unsupported_columns(row_avro) == {"tags": "type array"}
    micros = 1_700_000_000_123_456
    u = uuid.uuid4()
    after = {"id": 1, "small": -3, "micro_ts": micros, "nano_ts": micros * 1000 + 789, "milli_ts": micros // 1000,
             "zoned_ts": "2023-11-14T22:13:20.123456Z", "connect_ts": micros // 1000, "day": 19_000,
             "connect_day": 19_001, "micro_time": 3_600_000_001, "amount": unscaled(-1_234_567),
             "any_scale": {"scale": 4, "value": unscaled(12_345)}, "doc": '{"a": [1]}', "uid": str(u),
             "raw": unscaled(258), "ratio": 0.25, "flag": True, "tags": ["x"]}
    [(kind, row)], _ = decoder(schema_registry_url).changes(t.msg("c", after=after))
    got = {c.name: v for c, v in zip(record_columns(row_avro), row)}
    at = EPOCH + dt.timedelta(microseconds=micros)
    assert got == {
        "id": 1, "small": -3, "micro_ts": at, "nano_ts": at, "milli_ts": at.replace(microsecond=at.microsecond // 1000 * 1000),
        "zoned_ts": at, "connect_ts": at.replace(microsecond=at.microsecond // 1000 * 1000),
        "day": dt.date(1970, 1, 1) + dt.timedelta(days=19_000), "connect_day": dt.date(1970, 1, 1) + dt.timedelta(days=19_001),
        "micro_time": dt.time(1, 0, 0, 1), "amount": Decimal(-1_234_567).scaleb(-3),
        "any_scale": Decimal(12_345).scaleb(-4).quantize(Decimal(1).scaleb(-10)), "doc": '{"a": [1]}', "uid": str(u),
        "raw": (258).to_bytes(2, "big"), "ratio": 0.25, "flag": True, "tags": ["x"]}  # tags: passed through, unread
    assert kind == I


# -- dead letters --------------------------------------------------------------------------------
def test_malformed_messages_are_dead_letters_with_their_reason(fake_schema_registry, schema_registry_url):
    t = Topic(fake_schema_registry)
    nullable_id = Topic(fake_schema_registry, connect_envelope([{**COLUMNS[0], "optional": True}, *COLUMNS[1:]]),
                        subject="other-value")
    optional_op = Topic(fake_schema_registry, connect_envelope(COLUMNS, op_optional=True), subject="other2-value")
    not_envelope = fake_schema_registry.register("x-value", {"type": "record", "name": "Row", "fields": [
        {"name": "id", "type": "int"}]})
    d = decoder(schema_registry_url)
    vsd = Topic(fake_schema_registry, connect_envelope([COLUMNS[0], TYPED[11]]), subject="vsd-value")
    good = t.msg("c", after=alice())
    cases = [
        (b"{\"op\": \"c\"}", "undecodable", "no magic byte"),
        (b"\0\0\0", "undecodable", "too short"),
        (b"\0" + (99_999).to_bytes(4, "big") + good[5:], "unknown_schema_id", "99999"),
        (good[:-2], "undecodable", f"schema id {t.schema_id}"),
        (good + b"\0", "undecodable", "1 bytes left"),
        (wire(not_envelope, {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "int"}]}, {"id": 1}),
         "debezium_malformed", "no Debezium envelope"),
        (optional_op.msg(None, after=alice()), "debezium_malformed", "no op"),
        (t.msg("x", after=alice()), "debezium_malformed", "unknown op 'x'"),
        (t.msg("c"), "debezium_malformed", "op 'c' without its after image"),
        (t.msg("u", before=alice()), "debezium_malformed", "op 'u' without its after image"),
        (t.msg("d"), "debezium_malformed", "a delete without its before image"),
        (t.msg("u", None, alice()), "debezium_malformed", "REPLICA IDENTITY FULL"),
        (t.msg("u", alice(), alice(id=2)), "debezium_malformed", "differs from the after image"),
        (nullable_id.msg("c", after=alice(id=None)), "debezium_malformed", "column id of the after image is NULL"),
    ]
    for value, reason, detail in cases:
        with pytest.raises(DeadLetterError) as err:
            d.changes(value)
        assert (err.value.reason, detail in err.value.detail) == (reason, True), (value, err.value.detail)
    # A VariableScaleDecimal with more decimals than the join keeps (10).
    vsd_decoder = decoder(schema_registry_url, schema=avro_row_schema(vsd.avro, "t")[0])
    with pytest.raises(DeadLetterError, match="more than 10 decimals"):
        vsd_decoder.changes(vsd.msg("c", after={"id": 1, "any_scale": {"scale": 12, "value": unscaled(10**12 + 1)}}))


# -- schema changes ------------------------------------------------------------------------------
def test_each_message_is_read_with_its_own_writer_schema(fake_schema_registry, schema_registry_url):
    """Messages of an older schema lack a column (its default, else NULL), a newer one adds a
    column the reader does not know (ignored): both decode, with the reader's columns."""
    old = Topic(fake_schema_registry, connect_envelope(COLUMNS[:2]))  # no balance yet
    current_columns = [*COLUMNS, {"field": "tier", "type": "string", "optional": False, "default": "basic"}]
    current = Topic(fake_schema_registry, connect_envelope(current_columns))
    d = decoder(schema_registry_url)  # the latest schema: id, name, balance, tier (default basic)
    assert d.defaults == {"tier": "basic"}
    newer = Topic(fake_schema_registry, connect_envelope([*current_columns,
                                                           {"field": "email", "type": "string", "optional": True}]))
    assert len({old.schema_id, current.schema_id, newer.schema_id}) == 3
    assert d.changes(old.msg("c", after={"id": 1, "name": "a"})) == ([(I, (1, "a", None, "basic"))], None)
    assert d.changes(current.msg("c", after=alice(tier="gold"))) == ([(I, (*ALICE, "gold"))], None)
    assert d.changes(newer.msg("c", after=alice(tier="gold", email="a@x"))) == ([(I, (*ALICE, "gold"))], None)
    # A column the reader requires and an older writer lacks, without a default: a dead letter.
    strict = {**avro_row_schema(current.avro, "t")[0]}
    strict["fields"] = [{k: v for k, v in f.items() if k != "default"} for f in strict["fields"]]
    with pytest.raises(DeadLetterError, match="column tier of the after image is missing"):
        decoder(schema_registry_url, schema=strict).changes(old.msg("c", after={"id": 1, "name": "a"}))


# -- source.ts_ms --------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_source_ts_ms_is_the_last_column_of_every_change(fmt, fake_schema_registry, schema_registry_url):
    """With the :data:`SOURCE_TIME` column, each row (a -U's and -D's too: the time of the change)
    carries the envelope's source.ts_ms as a timestamp; an envelope without it is a dead letter."""
    t = Topic(fake_schema_registry)
    row = avro_row_schema(t.avro, "t")[0]
    row = {**row, "fields": [*row["fields"], {"name": SOURCE_TIME, "type": SOURCE_TIME_TYPE}]}
    columns = record_columns(row)
    shape = (tuple(c.name for c in columns), tuple(c.avro_type for c in columns), tuple(c.nullable for c in columns),
             {"balance": DECIMAL}, (0,), False)
    d = DebeziumAvroDecoder(*shape, row, SchemaRegistry(schema_registry_url)) if fmt == "avro" else DebeziumDecoder(*shape)
    ms = 1_700_000_000_042
    at = EPOCH + dt.timedelta(milliseconds=ms)
    bob = alice(name="bob")

    def msg(op, before=None, after=None, source=True):
        if fmt == "avro":
            return t.msg(op, before, after, ts_ms=ms)
        import json
        return json.dumps({"op": op, "before": before, "after": after, **({"source": {"ts_ms": ms}} if source else {})
                           }).encode()

    assert d.changes(msg("u", alice(), bob)) == ([(UB, (*ALICE, at)), (UA, (1, "bob", Decimal("10.50"), at))], None)
    assert d.changes(msg("d", before=bob)) == ([(D, (1, "bob", Decimal("10.50"), at))], None)
    if fmt == "json":  # Avro's envelope schema requires its source
        with pytest.raises(DeadLetterError, match="no source.ts_ms"):
            d.changes(msg("c", after=alice(), source=False))


def test_only_defaults_that_are_their_values_are_kept():
    """A default of a number, string or boolean column fills a column an older message lacks; a
    bytes default (Avro's JSON form: a string of code points) is not taken for a value."""
    columns = [COLUMNS[0], {"field": "tier", "type": "string", "optional": False, "default": "basic"},
               {"field": "level", "type": "int32", "optional": False, "default": 3},
               {"field": "blob", "type": "bytes", "optional": False, "default": "\u00ff"}]
    fields = {f["name"]: f for f in avro_row_schema(avro_schema(connect_envelope(columns)), "t")[0]["fields"]}
    assert (fields["tier"]["default"], fields["level"]["default"]) == ("basic", 3)
    assert "default" not in fields["blob"] and "default" not in fields["id"]

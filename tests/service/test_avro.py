import datetime as dt
import decimal
import io
import json
import pickle
import uuid

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# the fixtures are imported to be used by name (pytest's usual way to share them without a conftest)
from tests.support.schema_registry_fake import (FakeSchemaRegistry, fake_schema_registry,  # noqa: F401
                                               schema_registry_url)

from service.avro import (
    Column,
    DecodeError,
    SchemaError,
    SchemaRegistry,
    SchemaRegistryError,
    ValueDecoder,
    ValueEncoder,
    load_schema_file,
    output_schema,
    record_columns,
    to_epoch_millis,
)

UTC = dt.timezone.utc

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "ship_on",
            "type": ["null", {"type": "int", "logicalType": "date"}],
            "default": None,
        },
    ],
}

ORDER_ROW = (
    7,
    "ada",
    None,
    decimal.Decimal("123.45"),
    dt.datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=UTC),
    dt.date(2024, 5, 3),
)


def wire(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def plain_body(schema: dict, record: dict) -> bytes:

    bio = io.BytesIO()
    fastavro.schemaless_writer(bio, fastavro.parse_schema(schema), record)
    return bio.getvalue()


def reason(decoder: ValueDecoder, value) -> str:
    with pytest.raises(DecodeError) as info:
        decoder.decode(value)
    return info.value.reason


# ---------------------------------------------------------------------------- round trips


def test_plain_round_trip_with_logical_types():
    enc = ValueEncoder(ORDER)
    dec = ValueDecoder(ORDER, None)
    value = enc.encode(ORDER_ROW)
    assert dec.decode(value) == ORDER_ROW
    assert [c.name for c in dec.columns] == [
        "id",
        "customer",
        "note",
        "amount",
        "placed_at",
        "ship_on",
    ]
    decoded = dec.decode(value)
    assert decoded[4].tzinfo is not None and decoded[4] == ORDER_ROW[4]
    assert isinstance(decoded[3], decimal.Decimal) and isinstance(decoded[5], dt.date)


def test_micros_uuid_and_naive_values_round_trip():
    schema = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {
                "name": "maybe_at",
                "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            },
        ],
    }
    at = dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    row = (at, u, dt.datetime(2030, 1, 1, tzinfo=UTC))
    assert ValueDecoder(schema, None).decode(ValueEncoder(schema).encode(row)) == row
    # epoch ints are accepted for timestamps too
    out = ValueDecoder(schema, None).decode(ValueEncoder(schema).encode((0, str(u), 1_000)))
    assert out == (
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        u,
        dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
    )


def test_wire_format_round_trip(schema_registry_url, fake_schema_registry):
    registry = SchemaRegistry(schema_registry_url)
    enc = ValueEncoder(ORDER, registry, "orders-value")
    value = enc.encode(ORDER_ROW)
    schema_id = fake_schema_registry.register("orders-value", ORDER)  # same schema -> same id
    assert enc.schema_id == schema_id
    assert value[:5] == b"\x00" + schema_id.to_bytes(4, "big")
    assert ValueDecoder(ORDER, registry).decode(value) == ORDER_ROW
    # no reader schema: the writer schema gives the layout
    dec = ValueDecoder(None, registry)
    assert dec.decode(value) == ORDER_ROW
    assert [c.name for c in dec.columns][:2] == ["id", "customer"]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-(2**63), 2**63 - 1),
    st.text(),
    st.none() | st.text(),
    st.decimals(
        min_value=-(10**9), max_value=10**9, places=2, allow_nan=False, allow_infinity=False
    ),
    st.datetimes(
        min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(UTC)
    ).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    st.none() | st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2200, 1, 1)),
)
def test_round_trip_property(i, s, note, amount, at, day):
    row = (i, s, note, amount, at, day)
    assert ValueDecoder(ORDER, None).decode(ValueEncoder(ORDER).encode(row)) == row


# ---------------------------------------------------------------------------- decode errors


def test_garbage_and_truncated_plain_values_are_undecodable():
    dec = ValueDecoder(ORDER, None)
    value = ValueEncoder(ORDER).encode(ORDER_ROW)
    assert reason(dec, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff") == "undecodable"
    assert reason(dec, b"") == "undecodable"
    assert reason(dec, value[:-1]) == "undecodable"
    assert reason(dec, value[: len(value) // 2]) == "undecodable"
    assert reason(dec, None) == "undecodable"


def test_trailing_bytes_are_undecodable(schema_registry_url):
    dec = ValueDecoder(ORDER, None)
    value = ValueEncoder(ORDER).encode(ORDER_ROW)
    with pytest.raises(DecodeError) as info:
        dec.decode(value + b"\x00")
    assert info.value.reason == "undecodable" and "1 bytes left" in info.value.detail

    registry = SchemaRegistry(schema_registry_url)
    wired = ValueEncoder(ORDER, registry, "orders-value").encode(ORDER_ROW)
    assert reason(ValueDecoder(ORDER, registry), wired + b"zz") == "undecodable"


def test_wire_format_framing_errors(schema_registry_url):
    registry = SchemaRegistry(schema_registry_url)
    dec = ValueDecoder(ORDER, registry)
    body = ValueEncoder(ORDER).encode(ORDER_ROW)
    assert reason(dec, body) == "undecodable"  # plain body where wire format is expected
    assert reason(dec, b"\x01\x00\x00\x00\x01" + body) == "undecodable"  # wrong magic byte
    assert reason(dec, b"\x00\x00\x00") == "undecodable"  # too short
    assert reason(dec, b"") == "undecodable"
    wired = ValueEncoder(ORDER, registry, "orders-value").encode(ORDER_ROW)
    assert reason(dec, wired[:-3]) == "undecodable"  # truncated body


def test_unknown_schema_id(schema_registry_url, fake_schema_registry):
    registry = SchemaRegistry(schema_registry_url)
    dec = ValueDecoder(ORDER, registry)
    value = wire(4242, ValueEncoder(ORDER).encode(ORDER_ROW))
    assert reason(dec, value) == "unknown_schema_id"
    assert reason(dec, value) == "unknown_schema_id"
    # a missing id is remembered for a while: one request for both records
    assert fake_schema_registry.count("GET", "/schemas/ids/4242") == 1


def test_incompatible_writer_schema_is_a_schema_mismatch(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    # the writer lacks the reader's "customer" field, which has no default
    writer = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}],
    }
    writer_id = fake_schema_registry.register("orders-value", writer)
    with pytest.raises(DecodeError) as info:
        ValueDecoder(ORDER, registry).decode(wire(writer_id, plain_body(writer, {"id": 1})))
    assert info.value.reason == "schema_mismatch"
    assert str(writer_id) in info.value.detail

    # a type change that no promotion allows
    retyped = json.loads(json.dumps(ORDER))
    retyped["fields"][0]["type"] = "string"
    retyped_id = fake_schema_registry.register("orders-value", retyped)
    record = dict(zip([f["name"] for f in ORDER["fields"]], ORDER_ROW), id="seven")
    assert (
        reason(ValueDecoder(ORDER, registry), wire(retyped_id, plain_body(retyped, record)))
        == "schema_mismatch"
    )


def test_non_avro_schema_id_is_a_schema_mismatch(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    proto_id = fake_schema_registry.register(
        "x-value", 'syntax = "proto3"; message M {}', "PROTOBUF"
    )
    assert reason(ValueDecoder(ORDER, registry), wire(proto_id, b"\x00")) == "schema_mismatch"


def test_evolved_compatible_writer_resolves_to_the_reader(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    reader = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "qty", "type": "double"},
            {"name": "channel", "type": "string", "default": "web"},
        ],
    }
    # an older writer: int id and float qty (promotable), no channel, an extra dropped field
    writer = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "legacy", "type": "string"},
            {"name": "qty", "type": "float"},
            {"name": "id", "type": "int"},
        ],
    }
    writer_id = fake_schema_registry.register("orders-value", writer)
    value = wire(writer_id, plain_body(writer, {"legacy": "x", "qty": 2.5, "id": 3}))
    dec = ValueDecoder(reader, registry)
    assert dec.decode(value) == (3, 2.5, "web")
    # the same decoder still reads values written with the reader schema itself
    reader_id = fake_schema_registry.register("orders-value", reader)
    assert dec.decode(
        wire(reader_id, plain_body(reader, {"id": 4, "qty": 1.0, "channel": "app"}))
    ) == (
        4,
        1.0,
        "app",
    )


def _rec(name, *fields):
    return {"type": "record", "name": name, "fields": list(fields)}


ADDRESS_V1 = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
ADDRESS_V2 = {
    "type": "record",
    "name": "Address",
    "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": "string", "default": "?"},
    ],
}
EVOLUTIONS = [
    # (writer, reader, record written, fast projection expected)
    (
        _rec(
            "R",
            {"name": "a", "type": "int"},
            {"name": "gone", "type": "string"},
            {"name": "b", "type": ["null", "string"]},
        ),
        _rec(
            "R",
            {"name": "b", "type": ["null", "string"]},
            {"name": "new", "type": "string", "default": "web"},
            {"name": "opt", "type": ["null", "long"], "default": None},
            {"name": "flag", "type": "boolean", "default": True},
            {"name": "a", "type": "int"},
        ),
        {"a": 1, "gone": "x", "b": "y"},
        True,
    ),
    (
        _rec("R", {"name": "addr", "type": ADDRESS_V1}),
        _rec("R", {"name": "addr", "type": ADDRESS_V2}),
        {"addr": {"city": "Oslo"}},
        False,
    ),
    (
        _rec("R", {"name": "a", "type": "int"}),
        _rec("R", {"name": "a", "type": "long"}),
        {"a": 5},
        False,
    ),
    (
        _rec("R", {"name": "a", "type": "int"}),
        _rec(
            "R",
            {"name": "a", "type": "int"},
            {
                "name": "at",
                "type": {"type": "long", "logicalType": "timestamp-millis"},
                "default": 0,
            },
        ),
        {"a": 5},
        False,
    ),
    (
        _rec(
            "R",
            {"name": "a", "type": "int"},
            {"name": "next", "type": ["null", "R"], "default": None},
        ),
        _rec(
            "R",
            {"name": "a", "type": "int"},
            {"name": "b", "type": "int", "default": 7},
            {"name": "next", "type": ["null", "R"], "default": None},
        ),
        {"a": 1, "next": {"a": 2, "next": None}},
        False,
    ),
]


@pytest.mark.parametrize("writer, reader, record, projected", EVOLUTIONS)
def test_evolved_writers_decode_as_fastavro_resolves_them(
    fake_schema_registry, writer, reader, record, projected
):
    registry = SchemaRegistry(fake_schema_registry.url)
    writer_id = fake_schema_registry.register("r-value", writer)
    body = plain_body(writer, record)

    expected = fastavro.schemaless_reader(
        io.BytesIO(body), fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    )
    dec = ValueDecoder(reader, registry)
    assert dec.decode(wire(writer_id, body)) == tuple(expected[f["name"]] for f in reader["fields"])
    assert (dec._plans[writer_id][1] is None) == projected  # no fastavro resolution when projected


def test_decoder_without_reader_schema_pins_the_first_writer(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    v1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    v2 = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "b", "type": "string", "default": ""}, {"name": "a", "type": "int"}],
    }
    id1 = fake_schema_registry.register("r-value", v1)
    id2 = fake_schema_registry.register("r-value", v2)
    dec = ValueDecoder(None, registry)
    with pytest.raises(RuntimeError):
        _ = dec.columns
    assert dec.decode(wire(id1, plain_body(v1, {"a": 1}))) == (1,)
    assert dec.decode(wire(id2, plain_body(v2, {"a": 2, "b": "x"}))) == (2,)
    assert [c.name for c in dec.columns] == ["a"]


def test_decode_error_is_picklable_and_validated():
    err = pickle.loads(pickle.dumps(DecodeError("schema_mismatch", "why")))
    assert (err.reason, err.detail, str(err)) == ("schema_mismatch", "why", "schema_mismatch: why")
    with pytest.raises(ValueError):
        DecodeError("bad reason")


# ---------------------------------------------------------------------------- registry


def test_registry_fetches_each_schema_id_once(fake_schema_registry):
    writer_id = fake_schema_registry.register("orders-value", ORDER)
    registry = SchemaRegistry(fake_schema_registry.url)
    value = wire(writer_id, ValueEncoder(ORDER).encode(ORDER_ROW))
    for dec in (ValueDecoder(ORDER, registry), ValueDecoder(None, registry)):
        for _ in range(50):
            assert dec.decode(value) == ORDER_ROW
    assert registry.schema_by_id(writer_id) == ORDER
    assert fake_schema_registry.count("GET", f"/schemas/ids/{writer_id}") == 1
    assert fake_schema_registry.count() == 1


def test_register_is_idempotent_and_latest_returns_newest(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    id1 = registry.register("orders-value", ORDER)
    assert registry.register("orders-value", ORDER) == id1
    assert SchemaRegistry(fake_schema_registry.url).register("orders-value", ORDER) == id1
    assert fake_schema_registry.count("POST") == 2  # the first client remembered its answer
    v2 = dict(ORDER, fields=ORDER["fields"] + [{"name": "x", "type": "int", "default": 0}])
    id2 = registry.register("orders-value", v2)
    assert id2 != id1
    assert registry.latest("orders-value") == (id2, v2)
    # a subject name that needs URL quoting
    assert registry.register("weird/subject name", ORDER) == id1
    assert registry.latest("weird/subject name") == (id1, ORDER)


def test_registry_errors(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    with pytest.raises(SchemaRegistryError) as info:
        registry.latest("no-such-subject")
    assert info.value.status == 404 and info.value.error_code == 40401
    with pytest.raises(SchemaRegistryError) as info:
        registry.register("s", {"type": "record", "name": "R", "fields": [{"name": "a"}]})
    assert info.value.status == 422
    with pytest.raises(DecodeError) as derr:
        registry.schema_by_id(99)
    assert derr.value.reason == "unknown_schema_id"
    with pytest.raises(ValueError):
        SchemaRegistry("localhost:8081")


def test_registry_unreachable_is_a_registry_error_not_a_decode_error():
    with FakeSchemaRegistry() as fake:
        url = fake.url
    registry = SchemaRegistry(url, max_retries=1, backoff_factor=0, timeout=2)
    with pytest.raises(SchemaRegistryError):
        ValueDecoder(ORDER, registry).decode(wire(1, b""))


def test_registry_retries_transient_failures(fake_schema_registry):
    schema_id = fake_schema_registry.register("orders-value", ORDER)
    registry = SchemaRegistry(fake_schema_registry.url, backoff_factor=0.01)
    fake_schema_registry.fail_next(2, 503)
    assert registry.schema_by_id(schema_id) == ORDER
    assert fake_schema_registry.count("GET") == 3
    fake_schema_registry.fail_next(1, 500)
    assert registry.register("other-value", ORDER) == schema_id
    fake_schema_registry.fail_next(10, 503)
    with pytest.raises(SchemaRegistryError) as info:
        SchemaRegistry(fake_schema_registry.url, max_retries=2, backoff_factor=0).latest(
            "orders-value"
        )
    assert info.value.status == 503


def test_registry_basic_auth():
    with FakeSchemaRegistry(basic_auth_user_info="svc:s3cret") as fake:
        schema_id = fake.register("orders-value", ORDER)
        assert SchemaRegistry(fake.url, "svc:s3cret").schema_by_id(schema_id) == ORDER
        with pytest.raises(SchemaRegistryError) as info:
            SchemaRegistry(fake.url, "svc:wrong").schema_by_id(schema_id)
        assert info.value.status == 401


# ---------------------------------------------------------------------------- pickling


def test_pickled_decoder_and_encoder_work(fake_schema_registry):
    registry = SchemaRegistry(fake_schema_registry.url)
    enc = ValueEncoder(ORDER, registry, "orders-value")
    dec = ValueDecoder(ORDER, registry)
    first = enc.encode(ORDER_ROW)
    assert dec.decode(first) == ORDER_ROW
    assert registry._session is not None

    enc2 = pickle.loads(pickle.dumps(enc))
    dec2 = pickle.loads(pickle.dumps(dec))
    assert enc2.encode(ORDER_ROW) == first
    assert dec2.decode(first) == ORDER_ROW
    assert dec2.columns == dec.columns
    # registering seeded the id cache, and that cache travelled along: one request in all
    assert fake_schema_registry.count() == 1

    # pickled before first use: registration and lookups happen lazily in the copy
    fresh_registry = SchemaRegistry(fake_schema_registry.url)
    enc3 = pickle.loads(pickle.dumps(ValueEncoder(ORDER, fresh_registry, "orders-value")))
    dec3 = pickle.loads(pickle.dumps(ValueDecoder(None, fresh_registry)))
    assert dec3.decode(enc3.encode(ORDER_ROW)) == ORDER_ROW

    plain = pickle.loads(pickle.dumps(ValueDecoder(ORDER, None)))
    assert (
        plain.decode(pickle.loads(pickle.dumps(ValueEncoder(ORDER))).encode(ORDER_ROW)) == ORDER_ROW
    )


# ---------------------------------------------------------------------------- encoder


def test_encoder_rejects_bad_rows():
    enc = ValueEncoder(ORDER)
    with pytest.raises(ValueError, match="6 fields"):
        enc.encode(ORDER_ROW[:5])
    with pytest.raises(ValueError, match="cannot encode"):
        enc.encode((None,) + ORDER_ROW[1:])
    with pytest.raises(ValueError):
        ValueEncoder(ORDER, SchemaRegistry("http://127.0.0.1:1"))  # no subject


def test_the_hot_loop_writer_writes_what_encode_writes_and_rejects_what_it_rejects(schema_registry_url,
                                                                                     fake_schema_registry):
    for enc in (ValueEncoder(ORDER), ValueEncoder(ORDER, SchemaRegistry(schema_registry_url), "orders-value")):
        write = enc.writer()
        assert write(ORDER_ROW) == enc.encode(ORDER_ROW)
        with pytest.raises(ValueError, match="6 fields"):
            write(ORDER_ROW[:5])
        with pytest.raises(ValueError, match="6 fields"):
            write(ORDER_ROW + (1,))
        with pytest.raises(ValueError, match="cannot encode"):
            write((None,) + ORDER_ROW[1:])
    # with a registry the header is the registered schema's id
    assert write(ORDER_ROW)[:5] == b"\x00" + fake_schema_registry.register("orders-value", ORDER).to_bytes(4, "big")


# ---------------------------------------------------------------------------- schemas


def test_load_schema_file(tmp_path):
    good = tmp_path / "order.avsc"
    good.write_text(json.dumps(ORDER))
    assert load_schema_file(str(good)) == ORDER

    bad_json = tmp_path / "bad.avsc"
    bad_json.write_text("{nope")
    with pytest.raises(SchemaError, match="bad.avsc.*JSON"):
        load_schema_file(str(bad_json))

    bad_avro = tmp_path / "invalid.avsc"
    bad_avro.write_text(
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]})
    )
    with pytest.raises(SchemaError, match="invalid.avsc.*invalid Avro"):
        load_schema_file(str(bad_avro))

    with pytest.raises(SchemaError, match="missing.avsc"):
        load_schema_file(str(tmp_path / "missing.avsc"))


def test_record_columns():
    cols = record_columns(ORDER)
    assert cols[0] == Column("id", "long", False)
    assert cols[2] == Column("note", ["null", "string"], True)
    assert cols[4].avro_type == {"type": "long", "logicalType": "timestamp-millis"}
    with pytest.raises(SchemaError, match="record"):
        record_columns({"type": "array", "items": "int"})
    with pytest.raises(SchemaError, match="record"):
        record_columns("string")
    with pytest.raises(SchemaError):
        ValueDecoder("string", None)


def test_record_columns_are_self_contained():
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {
                "name": "billing",
                "type": {
                    "type": "record",
                    "name": "Address",
                    "fields": [{"name": "city", "type": "string"}],
                },
            },
            {"name": "shipping", "type": ["null", "Address"], "default": None},
        ],
    }
    shipping = record_columns(schema)[1]
    assert shipping.nullable
    assert shipping.avro_type[1]["name"] == "shop.Address"  # defined inline, fully qualified
    out = output_schema("o", [(shipping.name, shipping.avro_type, True)])
    fastavro.parse_schema(out)


# ---------------------------------------------------------------------------- output_schema


def test_output_schema_nullability():
    ts = {"type": "long", "logicalType": "timestamp-millis"}
    out = output_schema(
        "orders_enriched",
        [
            ("id", "long", False),
            ("name", "string", True),
            ("note", ["null", "string"], True),  # already nullable: not wrapped again
            ("late_null", ["string", "null"], True),  # null moves first so the default is valid
            ("either", ["int", "string"], True),  # union without null: extended, not nested
            ("at", ts, True),
            ("kept", ["null", "int"], False),
        ],
    )
    assert out["name"] == "orders_enriched" and out["namespace"] == "changejoin"
    fields = {f["name"]: f for f in out["fields"]}
    assert fields["id"] == {"name": "id", "type": "long"}
    assert fields["name"] == {"name": "name", "type": ["null", "string"], "default": None}
    assert fields["note"]["type"] == ["null", "string"]
    assert fields["late_null"]["type"] == ["null", "string"]
    assert fields["either"]["type"] == ["null", "int", "string"]
    assert fields["at"]["type"] == ["null", ts]
    assert fields["kept"] == {"name": "kept", "type": ["null", "int"]}
    parsed = fastavro.parse_schema(out)
    row = (1, None, None, "x", None, dt.datetime(2024, 1, 1, tzinfo=UTC), 3)
    assert ValueDecoder(out, None).decode(ValueEncoder(out).encode(row)) == row
    assert parsed


def test_output_schema_sanitizes_names():
    out = output_schema(
        "orders-enriched",
        [
            ("order-id", "long", False),
            ("1st", "int", False),
            ("näme", "string", False),
            ("", "int", False),
            ("ok_1", "int", False),
        ],
        namespace="my-app.joins",
    )
    assert [f["name"] for f in out["fields"]] == ["order_id", "_1st", "n_me", "_", "ok_1"]
    assert out["name"] == "orders_enriched" and out["namespace"] == "my_app.joins"
    fastavro.parse_schema(out)
    # deterministic
    assert out == output_schema(
        "orders-enriched",
        [
            ("order-id", "long", False),
            ("1st", "int", False),
            ("näme", "string", False),
            ("", "int", False),
            ("ok_1", "int", False),
        ],
        namespace="my-app.joins",
    )


def test_output_schema_rejects_collisions():
    with pytest.raises(SchemaError, match="order-id.*order.id.*order_id"):
        output_schema("o", [("order-id", "long", False), ("order.id", "long", False)])
    with pytest.raises(SchemaError):
        output_schema("o", [("a", "long", False), ("a", "long", True)])


def test_output_schema_defines_shared_named_types_once():
    status = {"type": "enum", "name": "Status", "namespace": "shop", "symbols": ["NEW", "DONE"]}
    out = output_schema(
        "o",
        [
            ("left_status", status, False),
            (
                "right_status",
                {"type": "enum", "name": "shop.Status", "symbols": ["NEW", "DONE"]},
                True,
            ),
            ("history", {"type": "array", "items": status}, False),
        ],
    )
    types = [f["type"] for f in out["fields"]]
    assert types[0]["name"] == "shop.Status"
    assert types[1] == ["null", "shop.Status"]
    assert types[2] == {"type": "array", "items": "shop.Status"}
    fastavro.parse_schema(out)

    other = dict(status, symbols=["A"])
    with pytest.raises(SchemaError, match="shop.Status"):
        output_schema("o", [("l", status, False), ("r", other, False)])


def test_output_schema_keeps_recursive_types():
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "v", "type": "int"},
            {"name": "next", "type": ["null", "Node"], "default": None},
        ],
    }
    out = output_schema("o", [("head", node, True), ("tail", node, True)])
    fastavro.parse_schema(out)
    assert out["fields"][1]["type"] == ["null", "changejoin.Node"]


# ---------------------------------------------------------------------------- event time


def test_to_epoch_millis():
    assert to_epoch_millis(None) is None
    assert to_epoch_millis(1_700_000_000_123) == 1_700_000_000_123
    assert to_epoch_millis(dt.datetime(1970, 1, 1, 0, 0, 1, 999999, tzinfo=UTC)) == 1999
    assert to_epoch_millis(dt.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC)) == -1
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert to_epoch_millis(dt.datetime(1970, 1, 1, 2, tzinfo=plus2)) == 0
    naive = dt.datetime(2024, 1, 1, 12, 0)
    assert to_epoch_millis(naive) == int(naive.timestamp() * 1000)
    with pytest.raises(TypeError):
        to_epoch_millis(True)
    with pytest.raises(TypeError):
        to_epoch_millis("2024-01-01")
    # agrees with what the decoder produces
    value = ValueEncoder(ORDER).encode(ORDER_ROW)
    assert to_epoch_millis(ValueDecoder(ORDER, None).decode(value)[4]) == 1714566615123


def test_decoder_for_subject_reads_with_the_latest_schema(fake_schema_registry):
    old = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    new = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "-"}],
    }
    old_id = fake_schema_registry.register("r-value", old)
    fake_schema_registry.register("r-value", new)
    dec = ValueDecoder.for_subject(SchemaRegistry(fake_schema_registry.url), "r-value")
    assert [c.name for c in dec.columns] == ["a", "b"]
    assert dec.decode(wire(old_id, plain_body(old, {"a": 1}))) == (1, "-")

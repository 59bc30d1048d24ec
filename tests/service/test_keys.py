"""Message keys of upsert inputs -> primary-key values (keys.py), and what decode makes of them
when an upsert input is joined directly."""
import pickle
import struct
import uuid

import pytest

from operators import RowKind
from tests.support.schema_registry_fake import fake_schema_registry, schema_registry_url  # noqa: F401
from service.avro import DecodeError, SchemaRegistry
from service.catalog import plan_for
from service.config import load_settings
from service.decode import InputDecoder
from service.envelope import Tag, join_key_group
from service.explain import explain
from service.keys import KeyDecoder
from service.plan import PlanError, SidePlan
from service.source import KafkaRecord
from tests.support.service_harness import PRICES, avro, price
from tests.support.service_env import VALID


def side(types: dict, pk: tuple[str, ...], nullable=None) -> SidePlan:
    columns = tuple(types)
    return SidePlan(side=1, topic="t", table="t", columns=columns, avro_types=tuple(types.values()),
                    nullable=nullable or (False,) * len(columns), reader_schema={}, join_key=(0,),
                    primary_key=tuple(columns.index(c) for c in pk), changelog_mode="upsert")


def key_record(fields: dict, values: dict) -> bytes:
    return avro({"type": "record", "name": "K", "fields": [{"name": n, "type": t} for n, t in fields.items()]},
                values)


@pytest.mark.parametrize("avro_type, text, value", [
    ("string", b"EUR", "EUR"), ("long", b"-42", -42), ("int", b"7", 7), ("double", b"1.5", 1.5),
    ("boolean", b"true", True), ("bytes", b"\x00\xff", b"\x00\xff"),
    ({"type": "string", "logicalType": "uuid"}, b"0b7e2d4c-3f4a-4b8e-9d1e-6a0f1c2b3d4e",
     uuid.UUID("0b7e2d4c-3f4a-4b8e-9d1e-6a0f1c2b3d4e")),
    ({"type": "enum", "name": "Tier", "symbols": ["GOLD", "TIN"]}, b"TIN", "TIN"),
])
def test_raw_keys_are_the_text_of_a_one_column_key(avro_type, text, value):
    keys = KeyDecoder(side({"k": avro_type, "v": "string"}, ("k",)), "raw", None)
    assert keys.decode(text) == (value,)


def test_raw_keys_refuse_what_is_not_a_value_of_the_column():
    keys = KeyDecoder(side({"k": "long"}, ("k",)), "raw", None)
    for bad in (b"4x", b"", b"\x02", b"1.5"):
        with pytest.raises(DecodeError) as err:
            keys.decode(bad)
        assert err.value.reason == "undecodable_key"
    with pytest.raises(ValueError, match="one-column"):
        KeyDecoder(side({"a": "long", "b": "string"}, ("a", "b")), "raw", None)


def test_plain_avro_keys_are_a_record_of_the_primary_key_columns_in_declared_order():
    plan = side({"region": "string", "id": "long", "v": "string"}, ("id", "region"))
    keys = KeyDecoder(plan, "avro", None)
    assert keys.decode(key_record({"id": "long", "region": "string"}, {"id": 5, "region": "EU"})) == (5, "EU")
    with pytest.raises(DecodeError, match="left after"):
        keys.decode(key_record({"id": "long", "region": "string"}, {"id": 5, "region": "EU"}) + b"\x00")


def test_wire_format_keys_with_a_registry_take_the_fields_by_name(fake_schema_registry, schema_registry_url):
    registry = SchemaRegistry(schema_registry_url)
    record_schema = {"type": "record", "name": "PriceKey", "fields": [
        {"name": "currency", "type": "string"}, {"name": "product", "type": "string"}]}
    record_id = fake_schema_registry.register("prices-key", record_schema)
    string_id = fake_schema_registry.register("other-key", "\"string\"")
    keys = KeyDecoder(side({"product": "string", "price": "double"}, ("product",)), "avro", registry)
    wire = lambda schema_id, schema, value: b"\x00" + struct.pack(">I", schema_id) + avro(schema, value)  # noqa: E731
    assert keys.decode(wire(record_id, record_schema, {"currency": "EUR", "product": "pen"})) == ("pen",)
    assert keys.decode(wire(string_id, "string", "ink")) == ("ink",)
    with pytest.raises(DecodeError, match="magic"):
        keys.decode(b"pen")  # avro with a registry means wire format
    assert KeyDecoder(side({"product": "string"}, ("product",)), "auto", registry).decode(b"pen") == ("pen",)
    with pytest.raises(DecodeError):
        keys.decode(b"\x00\x00\x00\x27\x0f\x06pen")  # an id the registry does not know


@pytest.mark.parametrize("avro_type, key, value", [
    ("long", b"7", 7),                      # text, although b"7" is also a valid Avro long (-28)
    ("long", b"1234", 1234),
    ("long", b"\x02", 1),                   # Avro: not the text of a number
    ("string", b"book", "book"),            # text: not a valid Avro string
    ("string", b"\x08book", "book"),        # Avro
    ("string", b"\x48" + b"a" * 36, "a" * 36),  # both readable: a string key prefers Avro
])
def test_auto_keys_without_a_registry(avro_type, key, value):
    assert KeyDecoder(side({"k": avro_type}, ("k",)), "auto", None).decode(key) == (value,)


def direct_decoder(**env):
    plan = plan_for(load_settings({**VALID, "RIGHT_CHANGELOG_MODE": "upsert", **env}))
    assert plan.right.direct_upsert
    return InputDecoder(plan, 1, "rowkind", None)


def test_a_directly_joined_upsert_input_keys_rows_and_tombstones_by_join_key():
    dec = direct_decoder()
    (row,) = dec.map(KafkaRecord("prices", 0, 1, 1000, b"pen", avro(PRICES, price("pen", 1.5)), []))
    (tombstone,) = dec.map(KafkaRecord("prices", 0, 2, 1000, b"pen", None, []))
    assert row[0] == tombstone[0] == join_key_group(("pen",))
    assert (row[2], tombstone[2]) == (RowKind.UPDATE_AFTER, RowKind.DELETE)
    deleted = pickle.loads(tombstone[3])
    assert deleted[0] == "pen" and set(deleted[1:]) == {None}  # only the primary key is known


def test_an_unreadable_tombstone_key_is_a_dead_letter_and_a_disagreeing_key_a_warning(caplog):
    dec = direct_decoder(RIGHT_KEY_FORMAT="avro")
    (dead,) = dec.map(KafkaRecord("prices", 0, 2, 1000, b"pen", None, []))
    assert dead[1] == Tag.DEAD_LETTER and pickle.loads(dead[3])["reason"] == "undecodable_key"
    (row,) = dec.map(KafkaRecord("prices", 0, 3, 1000, b"pen", avro(PRICES, price("pen", 1.5)), []))
    assert row[1] == 1  # the value still counts
    assert "RIGHT_KEY_FORMAT" in caplog.text


def test_the_plan_joins_an_upsert_input_directly_only_when_its_join_key_is_its_primary_key():
    plan = plan_for(load_settings({**VALID, "LEFT_CHANGELOG_MODE": "upsert", "RIGHT_CHANGELOG_MODE": "upsert"}))
    assert (plan.left.direct_upsert, plan.left.normalized) == (False, True)   # joined on product, keyed by order_id
    assert (plan.right.direct_upsert, plan.right.normalized) == (True, False)  # keyed and joined by product
    assert "joined directly" in explain(plan) and "normalized" in explain(plan)
    with pytest.raises(PlanError, match="LEFT_KEY_FORMAT"):
        plan_for(load_settings({**VALID, "LEFT_CHANGELOG_MODE": "upsert", "LEFT_PRIMARY_KEY": "product,order_id",
                                  "LEFT_KEY_FORMAT": "raw",
                                  "JOIN_SQL": "SELECT o.order_id FROM orders o JOIN prices p "
                                              "ON o.product = p.product AND o.order_id = p.price"}))

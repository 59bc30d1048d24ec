"""Decode: Kafka record -> envelope (join key, side, RowKind, row) or dead letter."""
import pickle

import pytest

from operators import RowKind
from service.catalog import plan_for
from service.config import load_settings
from service.decode import InputDecoder
from service.envelope import Tag, join_key_group
from service.source import KafkaRecord
from tests.support.service_harness import ORDERS, avro, order
from tests.support.service_env import VALID


def decoder(**env):
    plan = plan_for(load_settings({**VALID, **env}))
    return InputDecoder(plan, 0, "rowkind", None)


def record(value, headers=(), key=None):
    return KafkaRecord("orders", 1, 42, 1000, key, value, list(headers))


def decode(dec, rec):
    (row,) = list(dec.map(rec))
    return row


@pytest.mark.parametrize("header, kind", [(b"+I", 0), (b"-U", 1), (b"+U", 2), (b"-D", 3),
                                          (b"\x00", 0), (b"\x01", 1), (b"\x02", 2), (b"\x03", 3)])
def test_rowkind_from_short_strings_or_byte_values(header, kind):
    env = decode(decoder(), record(avro(ORDERS, order(1, "book", 2)), [("rowkind", header)]))
    assert env[1] == 0 and env[2] == kind
    assert env[0] == join_key_group(("book",)) and pickle.loads(env[3]) == (1, "book", 2)


def test_append_topic_records_are_inserts_and_a_retract_header_is_a_dead_letter():
    dec = decoder(LEFT_CHANGELOG_MODE="append")
    assert decode(dec, record(avro(ORDERS, order(1, "book", 2))))[2] == RowKind.INSERT
    assert decode(dec, record(avro(ORDERS, order(1, "book", 2)), [("rowkind", b"+I")]))[2] == RowKind.INSERT
    dead = decode(dec, record(avro(ORDERS, order(1, "book", 2)), [("rowkind", b"-D")]))
    assert dead[1] == Tag.DEAD_LETTER
    letter = pickle.loads(dead[3])
    assert letter["reason"] == "rowkind_on_append_topic"
    original = letter["original"]
    assert (original["topic"], original["partition"], original["offset"]) == ("orders", 1, 42)
    assert original["headers"] == [("rowkind", b"-D")]


def test_upsert_records_are_grouped_by_message_key_and_tombstones_are_deletes():
    dec = decoder(LEFT_CHANGELOG_MODE="upsert")
    upsert = decode(dec, record(avro(ORDERS, order(1, "book", 2)), key=b"1"))
    tombstone = decode(dec, record(None, key=b"1"))
    assert upsert[0] == tombstone[0] != join_key_group(("book",))
    assert (upsert[2], tombstone[2]) == (RowKind.UPDATE_AFTER, RowKind.DELETE)
    assert pickle.loads(decode(dec, record(None))[3])["reason"] == "upsert_record_without_key"


@pytest.mark.parametrize("millis", [10**15, -(10**15), 253402300800000])
def test_an_event_time_no_calendar_can_hold_is_a_dead_letter_not_a_crash(millis):
    """rates.rate_time is a plain long (epoch millis): any value decodes, not every one is a time."""
    from tests.support.service_harness import RATES, TEMPORAL

    plan = plan_for(load_settings({**VALID, "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "rates", **TEMPORAL}))
    rates = InputDecoder(plan, 1, "rowkind", None)
    good = decode(rates, record(avro(RATES, {"currency": "EUR", "rate": 1.1, "rate_time": 1_700_000_000_000}),
                                [("rowkind", b"+I")]))
    assert good[1] == Tag.RIGHT
    dead = decode(rates, record(avro(RATES, {"currency": "EUR", "rate": 1.1, "rate_time": millis}),
                                [("rowkind", b"+I")]))
    assert dead[1] == Tag.DEAD_LETTER
    letter = pickle.loads(dead[3])
    assert letter["reason"] == "invalid_event_time" and "rate_time" in letter["detail"]


def test_a_debezium_upsert_stream_filtered_before_a_lookup_keeps_each_keys_changes_in_one_group():
    """One path for every format: an upsert input's changes go to the stage keyed by its primary
    key under that key, its row and its delete alike, after JOIN_SQL's filter (before the path was
    one, a Debezium stream of a lookup join filtered in JOIN_SQL grouped its rows by join key and
    its deletes by primary key, so a delete missed the row it deletes)."""
    import json

    from tests.support.lookup_plans import LOOKUP, PRODUCTS

    from service.envelope import JK, message_key_group

    settings = load_settings({**LOOKUP, "LEFT_FORMAT": "debezium-json",
                              "JOIN_SQL": "SELECT o.order_id, p.name FROM orders o LEFT JOIN products FOR SYSTEM_TIME "
                                          "AS OF PROCTIME() AS p ON o.product = p.product WHERE o.quantity > 1"})
    plan = plan_for(settings, table=PRODUCTS)
    assert plan.left.changelog_mode == "upsert" and plan.left.calc is not None
    dec = InputDecoder(plan, 0, "rowkind", None)
    row = {"order_id": 7, "product": "ink", "quantity": 3}
    created, deleted = (list(dec.map(record(json.dumps({"op": op, "before": b, "after": a}).encode())))
                        for op, b, a in (("c", None, row), ("d", row, None)))
    expected = message_key_group(join_key_group((7,)))
    assert [e[JK] for e in created + deleted] == [expected, expected]
    assert [e[2] for e in created + deleted] == [int(RowKind.UPDATE_AFTER), int(RowKind.DELETE)]

"""debezium-json inputs end to end on the real broker: Debezium-shaped messages (the real capture
is tests/integration/test_debezium_join.py) joined with a rowkind topic."""
from __future__ import annotations

import json

from kafka_fixture import produce
from service_harness import JoinHarness, price

ENVELOPE_SCHEMA = {"type": "struct", "fields": [
    {"field": "before", "type": "struct", "optional": True, "fields": []},
    {"field": "after", "type": "struct", "optional": True, "fields": [
        {"field": "order_id", "type": "int64", "optional": False},
        {"field": "product", "type": "string", "optional": False},
        {"field": "quantity", "type": "int32", "optional": False},
        {"field": "note", "type": "array", "optional": True, "items": {"type": "string"}}]},
    {"field": "op", "type": "string", "optional": False}]}


def envelope(op, before=None, after=None, schema=False) -> bytes:
    body = {"before": before, "after": after, "op": op, "source": {"ts_ms": 1}}
    return json.dumps({"schema": ENVELOPE_SCHEMA, "payload": body} if schema else body).encode()


def o(order_id, product, quantity):
    return {"order_id": order_id, "product": product, "quantity": quantity}


def test_keyed_debezium_orders_with_default_replica_identity(kafka_bootstrap, spark, tmp_path, new_topic):
    """Declared primary key: updates without before images and key-only deletes join correctly;
    tombstones and truncates are skipped and counted; a malformed message is a dead letter."""
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, LEFT_FORMAT="debezium-json", DELIVERY="at-least-once",
                    JOIN_SQL="SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product")
    h.send_prices([("+I", price("ink", 2.0)), ("+I", price("pen", 1.0))])
    key = lambda order_id: json.dumps({"order_id": order_id}).encode()  # noqa: E731 - as Debezium keys
    produce(kafka_bootstrap, h.orders, [
        (key(1), envelope("r", after=o(1, "ink", 1)), None, None),
        (key(2), envelope("c", after=o(2, "pen", 5)), None, None),
        (key(1), envelope("u", None, o(1, "pen", 3)), None, None),  # REPLICA IDENTITY DEFAULT: no before
        (key(2), envelope("d", {"order_id": 2, "product": None, "quantity": None}), None, None),  # key only
        (key(2), None, None, None),  # the tombstone after the delete
        (key(3), envelope("c", after=o(3, "ink", 7)), None, None),
        (None, envelope("t"), None, None),
        (key(4), envelope("c"), None, None),  # no after image: a dead letter
    ])
    service = h.run()
    assert h.retract_table() == {(1, 1.0): 1, (3, 2.0): 1}  # order 1 moved to the pen, order 2 deleted
    skipped = service.metrics.registry.get_sample_value
    assert skipped("changejoin_skipped_input_records_total", {"reason": "debezium_tombstone"}) == 1
    assert skipped("changejoin_skipped_input_records_total", {"reason": "debezium_truncate"}) == 1
    letters = h.dead_letters()
    assert [dict(r.headers)["reason"] for r in letters] == [b"debezium_malformed"]
    assert letters[0].value == envelope("c")  # the original record


def test_embedded_schema_and_before_images_without_a_key(kafka_bootstrap, spark, tmp_path, new_topic):
    """No primary key and no schema file: the row schema is the one the messages embed, and the
    before images retract."""
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, LEFT_FORMAT="debezium-json", DELIVERY="at-least-once",
                    JOIN_SQL="SELECT o.order_id, o.quantity, p.price FROM orders o JOIN prices p ON o.product = p.product")
    for variable in ("LEFT_SCHEMA_FILE", "LEFT_PRIMARY_KEY"):
        h.env.pop(variable)
    h.send_prices([("+I", price("ink", 2.0))])
    produce(kafka_bootstrap, h.orders, [
        (None, envelope("c", after=o(1, "ink", 1), schema=True), None, None),
        (None, envelope("c", after=o(2, "ink", 2), schema=True), None, None),
        (None, envelope("u", o(1, "ink", 1), o(1, "ink", 4), schema=True), None, None),
        (None, envelope("d", o(2, "ink", 2), schema=True), None, None),
        (None, envelope("u", None, o(2, "ink", 9), schema=True), None, None),  # no before, no key: dead letter
    ])
    h.run()
    assert "debezium-json" in h.service.plan.left.format and h.service.plan.left.source_types["quantity"] == "int32"
    assert h.retract_table() == {(1, 4, 2.0): 1}
    letters = h.dead_letters()
    assert [dict(r.headers)["reason"] for r in letters] == [b"debezium_malformed"]
    assert b"REPLICA IDENTITY FULL" in dict(letters[0].headers)["reason.detail"]

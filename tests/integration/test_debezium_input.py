"""debezium-json inputs end to end on the real broker: Debezium-shaped messages (the real capture
is tests/integration/test_debezium_join.py) joined with a rowkind topic."""
from __future__ import annotations

import datetime as dt
import json
from collections import Counter

from tests.support.kafka_fixture import produce
# the fixtures are imported to be used by name
from tests.support.schema_registry_fake import fake_schema_registry, schema_registry_url  # noqa: F401
from tests.support.service_harness import JoinHarness, price

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


# -- debezium-avro: Confluent's wire format and a registry ----------------------------------------
# The envelopes are what Confluent's AvroConverter writes (tests/support/debezium_avro.py), for a
# table shaped like the JSON ones above; schema v2 adds a column mid-stream.
ORDER_COLUMNS = [{"field": "order_id", "type": "int64", "optional": False},
                 {"field": "product", "type": "string", "optional": False},
                 {"field": "quantity", "type": "int32", "optional": False}]
ORDER_COLUMNS_V2 = [*ORDER_COLUMNS, {"field": "note", "type": "string", "optional": True}]


def connect_envelope(columns: list[dict], table: str = "shop.public.orders") -> dict:
    value = {"type": "struct", "name": f"{table}.Value", "fields": columns}
    return {"type": "struct", "name": f"{table}.Envelope", "fields": [
        {**value, "field": "before", "optional": True}, {**value, "field": "after", "optional": True},
        {"type": "struct", "name": "io.debezium.connector.postgresql.Source", "field": "source", "optional": False,
         "fields": [{"type": "string", "field": "connector", "optional": False},
                    {"type": "int64", "field": "ts_ms", "optional": False}]},
        {"type": "string", "field": "op", "optional": False}, {"type": "int64", "field": "ts_ms", "optional": True}]}


class AvroTopic:
    """A Debezium topic's envelope schema, registered as ``<topic>-value``; ``msg`` frames an envelope."""

    def __init__(self, registry, topic: str, columns: list[dict], table: str = "shop.public.orders"):
        from tests.support.debezium_avro import avro_schema

        self.connect = connect_envelope(columns, table)
        self.avro = avro_schema(self.connect)
        self.schema_id = registry.register(f"{topic}-value", self.avro)

    def msg(self, op, before=None, after=None, ts_ms=1) -> bytes:
        from tests.support.debezium_avro import avro_value, wire

        payload = {"before": before, "after": after, "op": op, "ts_ms": 1,
                   "source": {"connector": "postgresql", "ts_ms": ts_ms}}
        return wire(self.schema_id, self.avro, avro_value(self.connect, payload))


def registered_prices(registry, h) -> callable:
    """The right input (rowkind, wire format): its schema registered; -> a function framing a price."""
    from tests.support.debezium_avro import wire
    from tests.support.service_harness import PRICES

    prices_id = registry.register(f"{h.prices}-value", PRICES)
    return lambda product, value: wire(prices_id, PRICES, price(product, value))


def test_debezium_avro_orders_with_a_schema_change_mid_stream(kafka_bootstrap, spark, tmp_path, new_topic,
                                                              fake_schema_registry, schema_registry_url):
    """Keyed debezium-avro orders joined with rowkind prices, both in wire format: every op, a
    skipped tombstone and truncate, malformed messages as dead letters with the original record,
    and a second envelope schema (a new column) registered while the service runs."""
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, LEFT_FORMAT="debezium-avro", DELIVERY="at-least-once",
                    SCHEMA_REGISTRY_URL=schema_registry_url, LEFT_SCHEMA_FILE="", RIGHT_SCHEMA_FILE="",
                    JOIN_SQL="SELECT o.order_id, o.quantity, p.price FROM orders o JOIN prices p ON o.product = p.product")
    v1 = AvroTopic(fake_schema_registry, h.orders, ORDER_COLUMNS)
    p = registered_prices(fake_schema_registry, h)
    rk = [("rowkind", b"+I")]
    produce(kafka_bootstrap, h.prices, [(None, p("ink", 2.0), rk), (None, p("pen", 1.0), rk)])
    key = lambda order_id: json.dumps({"order_id": order_id}).encode()  # noqa: E731
    first = [
        (1, "r", None, o(1, "ink", 1)), (2, "c", None, o(2, "pen", 5)), (3, "c", None, o(3, "ink", 2)),
        (1, "u", o(1, "ink", 1), o(1, "pen", 3)), (2, "d", o(2, "pen", 5), None),
    ]
    malformed = [v1.msg("c"), v1.msg("u", o(3, "ink", 2), o(4, "ink", 2)), v1.msg("c", after=o(5, "ink", 1))[:-3]]
    produce(kafka_bootstrap, h.orders, [
        *((key(k), v1.msg(op, before, after), None, None) for k, op, before, after in first),
        (key(2), None, None, None),  # the tombstone after the delete
        (None, v1.msg("t"), None, None),
        *((None, value, None, None) for value in malformed),
    ])
    service = h.start()
    try:
        service.process_available()
        v2 = AvroTopic(fake_schema_registry, h.orders, ORDER_COLUMNS_V2)  # a new column, a new id, mid-stream
        assert v2.schema_id != v1.schema_id
        second = [(3, "u", None, {**o(3, "pen", 6), "note": "rush"}), (6, "c", None, {**o(6, "ink", 4), "note": None})]
        produce(kafka_bootstrap, h.orders, [(key(k), v2.msg(op, before, after), None, None)
                                            for k, op, before, after in second])
        service.process_available()
    finally:
        service.stop()
    # The expected output from the rules: the last row per primary key (a delete removes it), joined by product.
    rows, prices = {}, {"ink": 2.0, "pen": 1.0}
    for order_id, op, _, after in first + second:
        if op == "d":
            rows.pop(order_id)
        else:
            rows[order_id] = after
    assert h.retract_table() == Counter((r["order_id"], r["quantity"], prices[r["product"]]) for r in rows.values())
    skipped = service.metrics.registry.get_sample_value
    assert skipped("changejoin_skipped_input_records_total", {"reason": "debezium_tombstone"}) == 1
    assert skipped("changejoin_skipped_input_records_total", {"reason": "debezium_truncate"}) == 1
    letters = h.dead_letters()
    assert [dict(r.headers)["reason"] for r in letters] == [b"debezium_malformed", b"debezium_malformed",
                                                           b"undecodable"]
    assert [r.value for r in letters] == malformed  # the original records
    assert b"differs from the after image" in dict(letters[1].headers)["reason.detail"]


# -- source.ts_ms as the event time ---------------------------------------------------------------
def test_an_event_time_temporal_join_on_source_ts_ms(kafka_bootstrap, spark, tmp_path, new_topic,
                                                     fake_schema_registry, schema_registry_url):
    """Orders (debezium-json) joined with the versions of a rates table (debezium-avro, keyed by
    currency) as of each order's change time: every time is the envelopes' source.ts_ms, none is
    in a row. The expected output is each order with the rate version in force at its time."""
    orders_schema = tmp_path / "orders.avsc"
    orders_schema.write_text(json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "order_id", "type": "long"}, {"name": "currency", "type": "string"},
        {"name": "amount", "type": "double"}]}))
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, DELIVERY="at-least-once",
                    LEFT_FORMAT="debezium-json", RIGHT_FORMAT="debezium-avro", SCHEMA_REGISTRY_URL=schema_registry_url,
                    LEFT_SCHEMA_FILE=str(orders_schema), RIGHT_SCHEMA_FILE="", RIGHT_TABLE="rates",
                    RIGHT_PRIMARY_KEY="currency", LEFT_EVENT_TIME_COLUMN="source.ts_ms",
                    RIGHT_EVENT_TIME_COLUMN="source.ts_ms",
                    JOIN_SQL='SELECT o.order_id, o."source.ts_ms" AS ordered_at, r.rate FROM orders o JOIN rates FOR '
                             'SYSTEM_TIME AS OF o."source.ts_ms" AS r ON o.currency = r.currency')
    h.env.pop("LEFT_PRIMARY_KEY")
    rates = AvroTopic(fake_schema_registry, h.prices, [{"field": "currency", "type": "string", "optional": False},
                                                       {"field": "rate", "type": "float64", "optional": False}],
                      table="shop.public.rates")
    base = 1_700_000_000_000
    # (op, currency, rate, source.ts_ms): versions of each currency's rate; a delete ends them.
    versions = [("r", "USD", 1.10, base), ("r", "GBP", 0.85, base + 500), ("u", "USD", 1.20, base + 5_000),
                ("d", "GBP", 0.85, base + 7_000), ("u", "USD", 1.30, base + 9_000),
                ("c", "ZZZ", 1.0, base + 60_000)]  # moves the rates' watermark past every order
    rate_row = lambda cur, value: {"currency": cur, "rate": value}  # noqa: E731
    produce(kafka_bootstrap, h.prices, [
        (None, rates.msg(op, rate_row(cur, value) if op in ("u", "d") else None,
                         None if op == "d" else rate_row(cur, value), ts_ms=ts), None, None)
        for op, cur, value, ts in versions])
    # (order_id, currency, source.ts_ms): probe rows, each at its own change time.
    orders = [(1, "USD", base - 1), (2, "USD", base), (3, "GBP", base + 4_999), (4, "USD", base + 5_000),
              (5, "GBP", base + 8_000), (6, "USD", base + 20_000), (7, "EUR", base + 3_000),
              (99, "NONE", base + 60_000)]  # moves the orders' watermark past every order before it
    produce(kafka_bootstrap, h.orders, [
        (None, json.dumps({"before": None, "after": {"order_id": i, "currency": cur, "amount": 1.0}, "op": "c",
                           "source": {"ts_ms": ts}}).encode(), None, None) for i, cur, ts in orders])
    h.run()

    def rate_at(currency, at):
        """The rule: the version whose time is the latest at or before ``at``; none after a delete."""
        current = None
        for op, cur, value, ts in sorted(versions, key=lambda v: v[3]):
            if cur == currency and ts <= at:
                current = None if op == "d" else value
        return current

    at = lambda ms: dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)  # noqa: E731
    expected = Counter((i, at(ts), rate_at(cur, ts)) for i, cur, ts in orders if rate_at(cur, ts) is not None)
    assert len(expected) == 4  # orders 2, 3, 4, 6: 1 is before any version, 5 after GBP's delete, 7 and 99 have none
    got = Counter((order_id, ordered_at.astimezone(dt.timezone.utc), rate)
                  for (order_id, ordered_at, rate), n in h.retract_table().items() for _ in range(n))
    assert got == expected
    assert h.dead_letters() == []


# -- insert-only CDC topics (*_CHANGELOG_MODE=append) ---------------------------------------------
def test_an_interval_join_of_insert_only_cdc_topics(kafka_bootstrap, spark, tmp_path, new_topic,
                                                    fake_schema_registry, schema_registry_url):
    """Orders (debezium-json, timed by the envelopes' source.ts_ms) joined with shipments
    (debezium-avro, timed by their ship_time column, a Connect Timestamp), both declared
    insert-only: c and r are the rows; an update and a delete are dead letters with the original
    record; a tombstone and a truncate are skipped. The expected output is the interval rule
    applied to the inserted rows."""
    orders_schema = tmp_path / "orders.avsc"
    orders_schema.write_text(json.dumps({"type": "record", "name": "Order", "fields": [
        {"name": "order_id", "type": "long"}, {"name": "currency", "type": "string"}]}))
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, DELIVERY="at-least-once",
                    LEFT_FORMAT="debezium-json", RIGHT_FORMAT="debezium-avro", SCHEMA_REGISTRY_URL=schema_registry_url,
                    LEFT_SCHEMA_FILE=str(orders_schema), RIGHT_SCHEMA_FILE="", RIGHT_TABLE="shipments",
                    RIGHT_PRIMARY_KEY="", LEFT_CHANGELOG_MODE="append", RIGHT_CHANGELOG_MODE="append",
                    LEFT_EVENT_TIME_COLUMN="source.ts_ms", RIGHT_EVENT_TIME_COLUMN="ship_time",
                    JOIN_SQL='SELECT o.order_id, s.ship_id FROM orders o JOIN shipments s ON o.order_id = s.order_id '
                             'AND s.ship_time BETWEEN o."source.ts_ms" AND o."source.ts_ms" + INTERVAL \'10\' SECOND')
    shipments = AvroTopic(fake_schema_registry, h.prices, [
        {"field": "ship_id", "type": "int64", "optional": False}, {"field": "order_id", "type": "int64", "optional": False},
        {"field": "ship_time", "type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp"}],
        table="shop.public.shipments")
    base = 1_700_000_000_000
    # (op, order_id, source.ts_ms): the orders table's changes.
    orders = [("r", 1, base), ("c", 2, base + 2_000), ("c", 3, base + 4_000), ("c", 4, base + 6_000),
              ("d", 3, base + 8_000),  # a delete: no insert, a dead letter (order 3 stays joined)
              ("c", 99, base + 100_000)]
    # (op, ship_id, order_id, ship_time)
    ships = [("c", 10, 1, base + 5_000), ("c", 11, 2, base + 20_000), ("c", 12, 3, base + 4_000),
             ("c", 13, 4, base + 16_000),
             ("u", 11, 2, base + 3_000),  # an update into order 2's range: no insert, a dead letter
             ("c", 99, 99, base + 100_000)]
    order_msg = lambda op, i, ts: json.dumps({  # noqa: E731
        "before": {"order_id": i, "currency": "EUR"} if op == "d" else None,
        "after": None if op == "d" else {"order_id": i, "currency": "EUR"}, "op": op,
        "source": {"ts_ms": ts}}).encode()
    ship_row = lambda ship_id, order_id, at: {"ship_id": ship_id, "order_id": order_id, "ship_time": at}  # noqa: E731
    updated = shipments.msg("u", ship_row(11, 2, base + 20_000), ship_row(11, 2, base + 3_000), ts_ms=base + 30_000)
    produce(kafka_bootstrap, h.orders, [
        *((None, order_msg(op, i, ts), None, None) for op, i, ts in orders),
        (None, None, None, None),  # the tombstone after the delete
    ])
    produce(kafka_bootstrap, h.prices, [
        *((None, updated if op == "u" else shipments.msg(op, after=ship_row(s, i, at), ts_ms=at), None, None)
          for op, s, i, at in ships),
        (None, shipments.msg("t", ts_ms=base), None, None),
    ])
    service = h.run()
    assert service.plan.kind == "interval_event_time"
    assert [s.changelog_mode for s in service.plan.sides] == ["append", "append"]

    inserted_orders = [(i, ts) for op, i, ts in orders if op in ("c", "r")]
    inserted_ships = [(s, i, at) for op, s, i, at in ships if op in ("c", "r")]
    expected = Counter((i, s) for i, ts in inserted_orders for s, j, at in inserted_ships
                       if i == j and ts <= at <= ts + 10_000)
    assert expected == Counter({(1, 10): 1, (3, 12): 1, (4, 13): 1, (99, 99): 1})
    assert h.retract_table() == expected
    assert {kind for kind, *_ in h.changelog()} == {"+I"}
    skipped = service.metrics.registry.get_sample_value
    assert skipped("changejoin_skipped_input_records_total", {"reason": "debezium_tombstone"}) == 1
    assert skipped("changejoin_skipped_input_records_total", {"reason": "debezium_truncate"}) == 1
    letters = sorted(h.dead_letters(), key=lambda r: r.topic)
    assert {(dict(r.headers)["source.topic"], dict(r.headers)["reason"]) for r in letters} == {
        (h.orders.encode(), b"debezium_change_on_append_topic"), (h.prices.encode(), b"debezium_change_on_append_topic")}
    assert len(letters) == 2
    assert {r.value for r in letters} == {order_msg("d", 3, base + 8_000), updated}  # the original records
    details = {dict(r.headers)["reason.detail"] for r in letters}
    assert any(b"op 'u' (an update)" in d for d in details) and any(b"op 'd' (a delete)" in d for d in details)
    assert skipped("changejoin_dead_letter_records_total", {"reason": "debezium_change_on_append_topic"}) == 2

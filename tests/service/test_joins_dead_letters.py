"""Every dead-letter class in one stream, counted, with a Schema Registry; and upsert inputs,
normalized or joined directly: on the in-memory query driver (tests/support/query_driver.py).
Moved from tests/integration/test_service_dead_letters_upsert.py, which keeps the registry's
credentials reaching Spark's workers."""
import struct
from collections import Counter

from tests.support.query_driver import QueryDriver
from tests.support.schema_registry_fake import fake_schema_registry, schema_registry_url  # noqa: F401
from tests.support.service_harness import ORDERS, PRICES, avro, order, price

LEFT_JOIN = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"


def wire(schema_id: int, schema: dict, row: dict) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + avro(schema, row)


# An event-time temporal join: orders (retract, probe side, nullable time so that a NULL can be sent)
# against rates (an upsert topic keyed by currency), so that every dead-letter class can occur.
TIMED_ORDERS = {"type": "record", "name": "TimedOrder", "namespace": "changejoin.test", "fields": [
    {"name": "order_id", "type": "long"}, {"name": "currency", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "order_time", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}]}
RATES = {"type": "record", "name": "Rate", "namespace": "changejoin.test", "fields": [
    {"name": "currency", "type": "string"}, {"name": "rate", "type": "double"}, {"name": "rate_time", "type": "long"}]}
TEMPORAL_JOIN = ("SELECT o.order_id, o.currency, o.amount, r.rate FROM orders AS o LEFT JOIN prices "
                 "FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency")


def test_every_bad_record_is_dead_lettered_with_its_reason_and_the_good_ones_are_joined(fake_schema_registry,
                                                                                       schema_registry_url):
    orders_id = fake_schema_registry.register("orders-value", TIMED_ORDERS)
    rates_id = fake_schema_registry.register("prices-value", RATES)
    h = QueryDriver(JOIN_SQL=TEMPORAL_JOIN, SCHEMA_REGISTRY_URL=schema_registry_url, LEFT_SCHEMA_FILE="",
                    RIGHT_SCHEMA_FILE="", RIGHT_PRIMARY_KEY="currency", RIGHT_CHANGELOG_MODE="upsert",
                    RIGHT_EVENT_TIME_COLUMN="rate_time", MAX_OUTPUT_RECORD_BYTES="60")
    other = {"type": "record", "name": "TimedOrder", "namespace": "changejoin.test",
             "fields": [{"name": "order_id", "type": "string"}]}
    incompatible = fake_schema_registry.register("other-value", other)
    rk = lambda kind: [("rowkind", kind.encode())]  # noqa: E731
    o = lambda i, cur, amount, at: wire(orders_id, TIMED_ORDERS, {  # noqa: E731
        "order_id": i, "currency": cur, "amount": amount, "order_time": at})
    r = lambda cur, rate, at: wire(rates_id, RATES, {"currency": cur, "rate": rate, "rate_time": at})  # noqa: E731
    bad_orders = {
        "undecodable": (None, b"\x00\x00\x00", rk("+I")),
        "unknown_schema_id": (None, wire(9999, TIMED_ORDERS, {"order_id": 7, "currency": "USD", "amount": 1.0,
                                                              "order_time": 2_000}), rk("+I")),
        "schema_mismatch": (None, wire(incompatible, other, {"order_id": "x"}), rk("+I")),
        "missing_rowkind": (None, o(8, "USD", 1.0, 2_000), None),
        "unknown_rowkind": (None, o(9, "USD", 1.0, 2_000), rk("?X")),
        "tombstone_on_retract_topic": (b"k", None, rk("-D")),
        "null_in_required_column": (None, o(10, "USD", 1.0, None), rk("+I")),  # the probe's event time
    }
    h.pipe(0, [
        (None, o(1, "USD", 10.0, 2_000), rk("+I")),
        *bad_orders.values(),
        (None, o(2, "X" * 80, 20.0, 3_000), rk("+I")),     # its output row is over 60 bytes: too_large
        (None, o(3, "USD", 30.0, 6_000), rk("+I")),
        (None, o(99, "ANY", 1.0, 100_000), rk("+I")),
    ])
    h.pipe(1, [
        (b"USD", r("USD", 1.1, 1_000)),
        (None, r("USD", 9.9, 1_500)),                      # upsert_record_without_key
        (b"USD", r("USD", 1.2, 5_000)),
        (b"ANY", r("ANY", 1.0, 100_000)),
    ])
    h.run()
    h.pipe(0, [(None, o(4, "USD", 40.0, 500), rk("+I"))])  # behind the watermark: late
    h.run()

    # The output is the join of the good records alone.
    assert h.retract_table() == Counter({(1, "USD", 10.0, 1.1): 1, (3, "USD", 30.0, 1.2): 1,
                                         (99, "ANY", 1.0, 1.0): 1})
    letters = h.dead_letters()
    reasons = Counter(dict(r.headers)["reason"].decode() for r in letters)
    assert reasons == Counter([*bad_orders, "too_large", "upsert_record_without_key", "late"])
    by_reason = {dict(r.headers)["reason"].decode(): r for r in letters}
    for reason, (key, value, headers) in bad_orders.items():  # the original key, value and headers
        letter = by_reason[reason]
        assert (letter.key, letter.value) == (key, value)
        assert [hd for hd in letter.headers if hd[0] == "rowkind"] == (headers or [])
        assert dict(letter.headers)["source.topic"].decode() == h.orders
    assert dict(by_reason["upsert_record_without_key"].headers)["source.topic"].decode() == h.prices
    assert dict(by_reason["late"].headers)["source.offset"] == b"%d" % (len(bad_orders) + 4)
    counted = Counter()
    for batch in h.batches:  # both runs' micro-batches
        counted.update(batch.dead_letters)
    assert counted == reasons  # counted per reason
    assert f"{h.output}-value" in fake_schema_registry.subjects()  # the output schema was registered


def test_upsert_inputs_with_join_key_equal_to_and_different_from_the_primary_key():
    h = QueryDriver(JOIN_SQL=LEFT_JOIN, LEFT_CHANGELOG_MODE="upsert", RIGHT_CHANGELOG_MODE="upsert")
    # orders: keyed by order_id, joined on product (normalized first); prices: keyed by product = join key.
    h.pipe(0, [
        (b"1", avro(ORDERS, order(1, "book", 2))),
        (b"2", avro(ORDERS, order(2, "pen", 10))),
        (b"3", avro(ORDERS, order(3, "ink", 1))),
        (b"2", avro(ORDERS, order(2, "pen", 12))),   # an update with no -U: the upsert way
        (b"1", avro(ORDERS, order(1, "ink", 2))),    # moves to another join key
        (b"3", None),                                # delete
        (None, avro(ORDERS, order(5, "pen", 1))),    # no key: dead letter
    ])
    h.pipe(1, [
        (b"book", avro(PRICES, price("book", 12.5))),
        (b"pen", avro(PRICES, price("pen", 1.2))),
        (b"pen", avro(PRICES, price("pen", 1.5))),
        (b"ink", avro(PRICES, price("ink", 7.0))),
        (b"book", None),
    ])
    h.run()
    assert h.plan.left.normalized
    assert h.retract_table() == Counter({(1, "ink", 2, 7.0): 1, (2, "pen", 12, 1.5): 1})
    assert [dict(r.headers)["reason"] for r in h.dead_letters()] == [b"upsert_record_without_key"]


def test_an_upsert_input_keyed_by_its_join_key_is_joined_directly_with_avro_keys(fake_schema_registry,
                                                                                 schema_registry_url):
    orders_id = fake_schema_registry.register("orders-value", ORDERS)
    prices_id = fake_schema_registry.register("prices-value", PRICES)
    key_schema = {"type": "record", "name": "PriceKey", "fields": [{"name": "product", "type": "string"}]}
    key_id = fake_schema_registry.register("prices-key", key_schema)
    h = QueryDriver(JOIN_SQL=LEFT_JOIN, SCHEMA_REGISTRY_URL=schema_registry_url, LEFT_SCHEMA_FILE="",
                    RIGHT_SCHEMA_FILE="", RIGHT_CHANGELOG_MODE="upsert")
    key = lambda product: wire(key_id, key_schema, {"product": product})  # noqa: E731
    h.pipe(0, [(None, wire(orders_id, ORDERS, order(i, p, 1)), [("rowkind", b"+I")])
               for i, p in ((1, "book"), (2, "pen"), (3, "ink"))])
    h.pipe(1, [
        (key("book"), wire(prices_id, PRICES, price("book", 12.5))),
        (key("pen"), wire(prices_id, PRICES, price("pen", 1.2))),
        (key("pen"), wire(prices_id, PRICES, price("pen", 1.5))),   # a bare update
        (key("pen"), wire(prices_id, PRICES, price("pen", 1.5))),   # the same row again: no change
        (key("ink"), wire(prices_id, PRICES, price("ink", 7.0))),
        (key("book"), None),                                        # a tombstone: only the key says which row
    ])
    service = h.run()
    assert service.plan.right.direct_upsert and not service.plan.right.normalized
    # retract_table checks every retraction retracts a row the output holds: a full changelog.
    assert h.retract_table() == Counter({(1, "book", 1, None): 1, (2, "pen", 1, 1.5): 1, (3, "ink", 1, 7.0): 1})
    kinds = Counter(c.kind for c in h.changelog())
    assert kinds["-D"] >= 2 and kinds["+U"] == 0  # outer-join retractions are -D/+I, as in Flink
    assert h.dead_letters() == []

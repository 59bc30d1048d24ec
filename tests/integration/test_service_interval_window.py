"""Interval and window joins end to end, on a real broker and Spark: JOIN_SQL and environment
variables in, the joined table and the dead letters out, one event-time interval join and one
window join through Spark's watermark and timers. The processing-time interval join and a HOP
window join: tests/service/test_joins_interval_window.py, on the in-memory query driver."""
from collections import Counter

import pytest

from tests.support.service_harness import DATA, FAR_FUTURE, SHIPMENTS, TIMED_ORDERS, JoinHarness, at, shipment
from tests.support.service_harness import window_order as timed_order

pytestmark = pytest.mark.integration


@pytest.fixture
def shipping(kafka_bootstrap, spark, tmp_path, new_topic):
    def make(sql, **env):
        settings = dict(
            JOIN_SQL=sql, LEFT_SCHEMA_FILE=str(DATA / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(DATA / "shipments.avsc"),
            RIGHT_TABLE="shipments", LEFT_PRIMARY_KEY="order_id", RIGHT_PRIMARY_KEY="ship_id",
            LEFT_CHANGELOG_MODE="append", RIGHT_CHANGELOG_MODE="append",
            LEFT_EVENT_TIME_COLUMN="order_time", RIGHT_EVENT_TIME_COLUMN="ship_time",
        )
        settings.update(env)
        h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, **settings)
        h.send_orders = lambda rows: h.send(h.orders, TIMED_ORDERS, [(None, r) for r in rows])
        h.send_shipments = lambda rows: h.send(h.prices, SHIPMENTS, [(None, r) for r in rows])
        return h

    return make


def late_letters(h):
    return [r for r in h.dead_letters() if dict(r.headers)["reason"] == b"late"]


ONE_KEY_ROWS = 3
"""State rows of one key with a timer, in buckets: the bucket value, the timer's chunk and the
count of its chunks (sparkstate.py)."""


def state_rows(service) -> int:
    """Rows in the join's state store after the last micro-batch (Spark's numRowsTotal)."""
    return sum(op["numRowsTotal"] for op in service.query.lastProgress["stateOperators"])


def test_event_time_left_interval_join_pads_orders_whose_range_expired(shipping):
    h = shipping("SELECT o.order_id, s.ship_id, s.carrier FROM orders o LEFT JOIN shipments s "
                 "ON o.order_id = s.order_id AND s.ship_time BETWEEN o.order_time AND o.order_time + INTERVAL '10' SECOND")
    h.send_orders([timed_order(1, 1_000), timed_order(2, 2_000), timed_order(3, 3_000), timed_order(4, 4_000),
                   timed_order(99, FAR_FUTURE)])
    h.send_shipments([
        shipment(10, 1, 5_000),            # within order 1's 10 s
        shipment(11, 2, 20_000, "late"),   # 18 s after order 2: outside its range
        shipment(12, 3, 3_000, "dhl"),     # at the order's own time: the range is inclusive
        shipment(99, 99, FAR_FUTURE),
    ])
    service = h.run()
    assert service.plan.kind == "interval_event_time"
    # The watermark (100 s) is past every range but order 99's: orders 2 and 4 never shipped in
    # time and are null-padded when their range expires; order 99 is joined, its range still open.
    expected = Counter({(1, 10, "ups"): 1, (3, 12, "dhl"): 1, (2, None, None): 1, (4, None, None): 1,
                        (99, 99, "ups"): 1})
    assert h.retract_table() == expected
    assert {kind for kind, *_ in h.changelog()} == {"+I"}
    # State is cleaned up by the watermark: only order 99's key is left (in buckets: its bucket's
    # value, its timer's chunk and the chunk count of that time).
    assert state_rows(service) <= ONE_KEY_ROWS
    # A shipment behind the watermark is not dropped (Flink drops no interval-join row): it probes
    # what is still stored, and order 2 is gone, so it joins nothing.
    h.send_shipments([shipment(13, 2, 2_500)])
    h.run()
    assert h.retract_table() == expected
    assert h.dead_letters() == []


TUMBLE_SQL = (
    "SELECT o.order_id, s.ship_id, o.window_start, s.window_start AS ship_window FROM "
    "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(order_time), INTERVAL '10' SECOND)) o FULL JOIN "
    "TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(ship_time), INTERVAL '10' SECOND)) s "
    "ON o.order_id = s.order_id AND o.window_start = s.window_start AND o.window_end = s.window_end"
)


def test_tumble_full_window_join_and_late_rows_in_the_dead_letter_topic(shipping, kafka_bootstrap):
    from tests.support.kafka_fixture import produce
    from tests.support.service_harness import avro

    h = shipping(TUMBLE_SQL)
    h.send_orders([timed_order(1, 1_000), timed_order(2, 2_000), timed_order(3, 12_000), timed_order(99, FAR_FUTURE)])
    h.send_shipments([
        shipment(10, 1, 5_000),    # window [0 s, 10 s) with order 1
        shipment(11, 2, 15_000),   # window [10 s, 20 s), order 2 is in [0 s, 10 s)
        shipment(12, 5, 8_000),    # no such order
        shipment(99, 99, FAR_FUTURE),
    ])
    service = h.run()
    assert service.plan.kind == "window"
    expected = Counter({
        (1, 10, at(0), at(0)): 1,
        (2, None, at(0), None): 1, (None, 11, None, at(10_000)): 1,
        (None, 12, None, at(0)): 1,
        (3, None, at(10_000), None): 1,
    })
    assert h.retract_table() == expected  # window [100 s, 110 s) has not fired
    assert state_rows(service) <= ONE_KEY_ROWS
    # Rows for windows that have fired are late: not joined, in the dead-letter topic with their
    # original key, value and headers.
    late_order = avro(TIMED_ORDERS, timed_order(4, 3_000))
    produce(kafka_bootstrap, h.orders, [(b"order-4", late_order, [("trace", b"abc")], None)])
    h.send_shipments([shipment(13, 1, 9_000)])
    service = h.run()
    assert h.retract_table() == expected
    letters = late_letters(h)
    assert len(letters) == 2
    by_topic = {dict(r.headers)["source.topic"].decode(): r for r in letters}
    order_letter = by_topic[h.orders]
    assert order_letter.key == b"order-4" and order_letter.value == late_order
    assert dict(order_letter.headers)["trace"] == b"abc" and dict(order_letter.headers)["source.offset"] == b"4"
    assert by_topic[h.prices].value == avro(SHIPMENTS, shipment(13, 1, 9_000))
    assert sum(b.dead_letters.get("late", 0) for b in service.batches) == 2

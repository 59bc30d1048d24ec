"""Interval and window joins on the in-memory query driver (tests/support/query_driver.py): the
processing-time interval join on the driver's clock, and a HOP semi window join with a row late
for two windows. Moved from tests/integration/test_service_interval_window.py, which keeps one
event-time interval join and one window join on a real broker and Spark query."""
from collections import Counter

from tests.support.query_driver import QueryDriver
from tests.support.service_harness import DATA, FAR_FUTURE, SHIPMENTS, TIMED_ORDERS, at, shipment
from tests.support.service_harness import window_order as timed_order


def shipping(sql, **env) -> QueryDriver:
    settings = dict(
        JOIN_SQL=sql, LEFT_SCHEMA_FILE=str(DATA / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(DATA / "shipments.avsc"),
        RIGHT_TABLE="shipments", LEFT_PRIMARY_KEY="order_id", RIGHT_PRIMARY_KEY="ship_id",
        LEFT_CHANGELOG_MODE="append", RIGHT_CHANGELOG_MODE="append",
        LEFT_EVENT_TIME_COLUMN="order_time", RIGHT_EVENT_TIME_COLUMN="ship_time",
    )
    settings.update(env)
    h = QueryDriver(**settings)
    h.send_orders = lambda rows: h.send(0, TIMED_ORDERS, [(None, r) for r in rows])
    h.send_shipments = lambda rows: h.send(1, SHIPMENTS, [(None, r) for r in rows])
    return h


def late_letters(h):
    return [r for r in h.dead_letters() if dict(r.headers)["reason"] == b"late"]


def test_processing_time_interval_join_matches_rows_arriving_within_the_interval():
    h = shipping("SELECT o.order_id, s.ship_id FROM orders o LEFT JOIN shipments s ON o.order_id = s.order_id "
                 "AND s.proctime BETWEEN o.proctime AND o.proctime + INTERVAL '2' SECOND",
                 LEFT_EVENT_TIME_COLUMN="", RIGHT_EVENT_TIME_COLUMN="")
    # Order 1 and its shipment arrive together; order 2's shipment comes after its 2 s are over.
    h.send_orders([timed_order(1, 0), timed_order(2, 0)])
    h.send_shipments([shipment(10, 1, 0)])
    service = h.run()
    assert service.plan.kind == "interval_processing_time"
    h.advance(3_000)
    h.send_shipments([shipment(11, 2, 0)])
    h.run()
    assert h.retract_table() == Counter({(1, 10): 1, (2, None): 1})


def test_hop_semi_window_join_emits_each_order_once_per_shared_window():
    hop = "TABLE(HOP(TABLE {t}, DESCRIPTOR({c}), INTERVAL '5' SECOND, INTERVAL '10' SECOND))"
    h = shipping(
        f"SELECT o.order_id, o.window_start, o.window_end FROM {hop.format(t='orders', c='order_time')} o "
        f"WHERE o.order_id IN (SELECT s.order_id FROM {hop.format(t='shipments', c='ship_time')} s "
        "WHERE o.window_start = s.window_start AND o.window_end = s.window_end)"
    )
    h.send_orders([timed_order(1, 6_000), timed_order(2, 21_000), timed_order(3, 30_000), timed_order(99, FAR_FUTURE)])
    h.send_shipments([
        shipment(10, 1, 12_000),   # shares [5 s, 15 s) with order 1
        shipment(11, 2, 23_000),   # shares both of order 2's windows
        shipment(12, 2, 24_000),   # a second match: SEMI still emits order 2 once per window
        shipment(99, 98, FAR_FUTURE),
    ])
    h.run()
    expected = Counter({(1, at(5_000), at(15_000)): 1, (2, at(15_000), at(25_000)): 1,
                        (2, at(20_000), at(30_000)): 1})
    assert h.retract_table() == expected
    # A HOP row belongs to two windows; late for both, it is one dead letter saying so.
    h.send_shipments([shipment(13, 3, 31_000)])
    h.run()
    assert h.retract_table() == expected
    (letter,) = late_letters(h)
    assert b"2 window(s)" in dict(letter.headers)["reason.detail"]

"""Temporal joins and state TTL on the in-memory query driver (tests/support/query_driver.py):
versions by event time, late probe rows dead-lettered, an upsert versioned table normalized
first, the processing-time join refused against a versioned table, and rows expiring after
STATE_TTL of processing time. Moved from tests/integration/test_service_temporal.py, which keeps
one event-time join and the processing-time join on a real broker and Spark query."""
from collections import Counter

import pytest

from tests.support.query_driver import QueryDriver
from tests.support.service_harness import RATES, TEMPORAL, avro, event_time_inputs, order, price, rate, timed_order

EVENT_TIME_SQL = (
    "SELECT o.order_id, o.currency, o.amount, r.rate FROM orders AS o {join} JOIN rates "
    "FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency"
)


def temporal(sql, **env) -> QueryDriver:
    settings = {k: v for k, v in TEMPORAL.items() if k != "RIGHT_EVENT_TIME_COLUMN"}  # each test says
    return QueryDriver(**{**settings, "JOIN_SQL": sql, **env})


@pytest.mark.parametrize("join, padded", [("LEFT", True), ("", False)], ids=["left", "inner"])
def test_event_time_join_uses_the_version_at_the_probe_time_and_dead_letters_late_rows(join, padded):
    h = temporal(EVENT_TIME_SQL.format(join=join), RIGHT_EVENT_TIME_COLUMN="rate_time",
                 LEFT_WATERMARK_DELAY="1s", RIGHT_WATERMARK_DELAY="1s")
    # Versions arrive out of order; so do orders (within the 1 s watermark delay).
    rates, orders, expected, unmatched = event_time_inputs()
    h.send_rates(rates)
    h.send_orders(orders)
    h.run()
    if padded:
        expected[unmatched] = 1
    # Order 9 waits: the watermark (100 s minus the 1 s delay) has not passed it.
    assert h.watermark == 99_000
    assert h.retract_table() == Counter(expected)
    # A probe row behind the watermark is late: dropped from the join, kept in the dead-letter topic.
    h.send_orders([("+I", timed_order(4, "USD", 40, 500))])
    service = h.run()
    assert h.retract_table() == Counter(expected)
    late = [r for r in h.dead_letters() if dict(r.headers)["reason"] == b"late"]
    assert len(late) == 1 and dict(late[0].headers)["rowkind"] == b"+I" and late[0].value is not None
    assert int(dict(late[0].headers)["source.offset"]) == 5
    assert sum(b.dead_letters.get("late", 0) for b in service.batches) == 1


def test_event_time_join_over_an_upsert_versioned_table():
    """An upsert topic as the versioned table: normalized first, its -U dropped before the join (as
    Flink does), so an update adds a version instead of erasing the one before it."""
    h = temporal(EVENT_TIME_SQL.format(join="LEFT"), RIGHT_EVENT_TIME_COLUMN="rate_time",
                 RIGHT_CHANGELOG_MODE="upsert")
    h.pipe(1, [
        (b"USD", avro(RATES, rate("USD", 1.1, 1_000)), []),
        (b"EUR", avro(RATES, rate("EUR", 0.9, 1_000)), []),
        (b"USD", avro(RATES, rate("USD", 1.2, 5_000)), []),   # a new version of USD
        (b"EUR", None, []),                                   # deletes EUR's (only) version
        (b"ANY", avro(RATES, rate("ANY", 1.0, 100_000)), []),
    ])
    h.send_orders([("+I", timed_order(1, "USD", 10, 2_000)), ("+I", timed_order(3, "USD", 30, 6_000)),
                   ("+I", timed_order(2, "EUR", 20, 3_000)), ("+I", timed_order(9, "ANY", 1, 100_000))])
    service = h.run()
    assert service.plan.right.normalized
    assert h.retract_table() == Counter({(1, "USD", 10.0, 1.1): 1, (3, "USD", 30.0, 1.2): 1,
                                         (2, "EUR", 20.0, None): 1, (9, "ANY", 1.0, 1.0): 1})


def test_processing_time_join_against_a_versioned_table_is_refused():
    from service.config import load_settings
    from service.plan import PlanError
    from service.catalog import plan_for

    env = {**TEMPORAL, "KAFKA_BOOTSTRAP_SERVERS": "in-memory:9092", "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "rates",
           "OUTPUT_TOPIC": "output", "CHECKPOINT_LOCATION": "/nonexistent",
           "JOIN_SQL": "SELECT o.order_id, r.rate FROM orders AS o JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r "
                       "ON o.currency = r.currency", "RIGHT_EVENT_TIME_COLUMN": "rate_time"}
    with pytest.raises(PlanError, match="processing-time temporal join"):
        plan_for(load_settings(env))


@pytest.mark.parametrize("ttl, joined", [("2s", False), ("1h", True)], ids=["expired", "kept"])
def test_state_ttl_expires_rows_not_written_within_the_ttl(ttl, joined):
    h = QueryDriver(STATE_TTL=ttl, JOIN_SQL="SELECT o.order_id, p.price FROM orders o JOIN prices p ON o.product = p.product")
    h.send_orders([("+I", order(1, "book", 2))])
    h.run()
    h.advance(3_000)  # let the 2 s TTL pass (processing time); the 1 h one does not
    h.send_prices([("+I", price("book", 12.5))])
    h.run()
    assert h.retract_table() == (Counter({(1, 12.5): 1}) if joined else Counter())

"""Temporal joins end to end, on a real broker and Spark: an event-time join through Spark's
watermark and timers, and the processing-time join. The inner event-time join, an upsert versioned
table, the refused processing-time join of a versioned table and state TTL:
tests/service/test_joins_temporal.py, on the in-memory query driver."""
from collections import Counter

import pytest

from tests.support.service_harness import TEMPORAL, JoinHarness, event_time_inputs, rate, timed_order

pytestmark = pytest.mark.integration

@pytest.fixture
def temporal(kafka_bootstrap, spark, tmp_path, new_topic):
    def make(sql, **env):
        settings = {k: v for k, v in TEMPORAL.items() if k != "RIGHT_EVENT_TIME_COLUMN"}  # each test says
        return JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, **{**settings, "JOIN_SQL": sql, **env})

    return make


EVENT_TIME_SQL = (
    "SELECT o.order_id, o.currency, o.amount, r.rate FROM orders AS o {join} JOIN rates "
    "FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency"
)


@pytest.mark.parametrize("join, padded", [("LEFT", True)], ids=["left"])
def test_event_time_join_uses_the_version_at_the_probe_time_and_dead_letters_late_rows(temporal, join, padded):
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
    assert h.retract_table() == Counter(expected)
    # A probe row behind the watermark is late: dropped from the join, kept in the dead-letter topic.
    h.send_orders([("+I", timed_order(4, "USD", 40, 500))])
    service = h.run()
    assert h.retract_table() == Counter(expected)
    late = [r for r in h.dead_letters() if dict(r.headers)["reason"] == b"late"]
    assert len(late) == 1 and dict(late[0].headers)["rowkind"] == b"+I" and late[0].value is not None
    assert int(dict(late[0].headers)["source.offset"]) == 5
    assert sum(b.dead_letters.get("late", 0) for b in service.batches) == 1


def test_processing_time_join_uses_the_build_row_present_at_arrival(temporal):
    h = temporal("SELECT o.order_id, r.rate FROM orders AS o LEFT JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r "
                 "ON o.currency = r.currency", RIGHT_PRIMARY_KEY="currency")
    h.send_rates([("+I", rate("USD", 1.1, 0))])
    h.run()
    h.send_orders([("+I", timed_order(1, "USD", 10, 0)), ("+I", timed_order(2, "EUR", 10, 0))])
    h.run()
    h.send_rates([("-U", rate("USD", 1.1, 0)), ("+U", rate("USD", 1.3, 0))])
    h.run()
    h.send_orders([("+I", timed_order(3, "USD", 10, 0))])
    h.run()
    # Earlier results are never revised: order 1 keeps the rate it saw.
    assert h.retract_table() == Counter({(1, 1.1): 1, (2, None): 1, (3, 1.3): 1})

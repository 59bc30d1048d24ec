"""Regular joins' semantics through the service's stages (decode, join, upsert materializer,
encode) on the in-memory query driver (tests/support/query_driver.py): every join type, the
output modes, Kafka records in and out. Moved from tests/integration/test_service_e2e.py, which
keeps one join, its dead letters and a restart on a real broker and Spark query."""
from collections import Counter

import pytest

from tests.support.query_driver import QueryDriver
from tests.support.service_harness import ORDER_CHANGES, ORDERS_LEFT_JOIN_PRICES, PRICE_CHANGES, order, price


def test_left_join_upsert_output_is_keyed_by_the_output_key():
    h = QueryDriver(JOIN_SQL=ORDERS_LEFT_JOIN_PRICES, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id")
    h.send_orders(ORDER_CHANGES)
    h.send_prices(PRICE_CHANGES)
    h.run()
    assert h.plan.upsert_materializer
    table = h.upsert_table()
    assert sorted(table.values()) == [(1, "ink", 2, 7.0), (2, "pen", 12, 1.5), (4, "paper", 5, None)]
    assert all(c.kind == "" for c in h.changelog()), "upsert output carries no RowKind header"
    assert any(c.row is None for c in h.changelog()), "deletes are tombstones"


def test_inner_join_upsert_output_deletes_the_key_a_row_leaves():
    """OUTPUT_KEY holds the join key: no materializer stage; order 1 moves from book to ink, and
    book's -U must delete its old key (-U is only dropped where the same key is written again)."""
    h = QueryDriver(JOIN_SQL="SELECT o.order_id, o.product, o.quantity, p.price FROM orders o JOIN prices p "
                             "ON o.product = p.product", OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    h.send_prices(PRICE_CHANGES[:5])  # book, pen and ink priced; book's price stays
    h.send_orders(ORDER_CHANGES)
    h.run()
    assert not h.plan.upsert_materializer
    assert sorted(h.upsert_table().values()) == [(1, "ink", 2, 7.0), (2, "pen", 12, 1.5)]


@pytest.mark.parametrize(
    "sql, expected",
    [
        (
            "SELECT o.order_id, p.product, p.price FROM orders o JOIN prices p ON o.product = p.product",
            {(1, "ink", 7.0): 1, (2, "pen", 1.5): 1},
        ),
        (
            "SELECT o.order_id, p.product, p.price FROM orders o FULL OUTER JOIN prices p ON o.product = p.product",
            {(1, "ink", 7.0): 1, (2, "pen", 1.5): 1, (4, None, None): 1, (None, "glue", 3.0): 1},
        ),
        (
            "SELECT o.order_id, o.product FROM orders AS o WHERE o.product IN (SELECT p.product FROM prices AS p)",
            {(1, "ink"): 1, (2, "pen"): 1},
        ),
        (
            "SELECT o.order_id, o.product FROM orders o WHERE NOT EXISTS "
            "(SELECT 1 FROM prices p WHERE p.product = o.product)",
            {(4, "paper"): 1},
        ),
        (
            "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p "
            "ON o.product = p.product AND p.price * o.quantity > 15",
            {(1, None): 1, (2, 1.5): 1, (4, None): 1},
        ),
    ],
    ids=["inner", "full", "semi", "anti", "extra-condition"],
)
def test_join_types_over_two_partitions_per_topic(sql, expected):
    h = QueryDriver(partitions=2, JOIN_SQL=sql)
    # Each order's changes stay in one partition (its id's parity), as a keyed producer would do.
    h.send_orders([(kind, row, row["order_id"] % 2) for kind, row in ORDER_CHANGES])
    h.send_prices([(kind, row, len(row["product"]) % 2) for kind, row in PRICE_CHANGES])
    h.run()
    assert h.retract_table() == Counter(expected)


def test_a_micro_batch_replayed_after_an_abort_writes_the_records_of_its_first_attempt():
    """A micro-batch run again on the state it started from (a task or the driver failed before
    it committed) writes the same records under the same batch and seq headers, so a consumer's
    drop_replays keeps one of each; the join's state after it is the first attempt's."""
    h = QueryDriver(JOIN_SQL=ORDERS_LEFT_JOIN_PRICES)
    h.send_orders(ORDER_CHANGES[:5])
    h.batch()
    h.send_prices(PRICE_CHANGES)
    h.send_orders(ORDER_CHANGES[5:])
    first = h.batch()
    state = h.state().values, h.state().maps
    replay = h.abort_and_replay(keep_output=True)
    assert replay == [w._replace(offset=w.offset + len(first)) for w in first]  # written again, after
    assert (h.state().values, h.state().maps) == state
    assert h.retract_table() == Counter({(1, "ink", 2, 7.0): 1, (2, "pen", 12, 1.5): 1, (4, "paper", 5, None): 1})
    h.send_orders([("-D", order(4, "paper", 5))])
    h.send_prices([("+I", price("paper", 0.5))])
    h.batch()
    assert h.retract_table() == Counter({(1, "ink", 2, 7.0): 1, (2, "pen", 12, 1.5): 1})

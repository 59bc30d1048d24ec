"""A hot join key on the in-memory query driver (tests/support/query_driver.py): one product with
more orders than a key's value holds, so its side is split into map state
(operators/splitside.py), then updates and deletes of single hot rows. Moved from
tests/integration/test_service_hot_key.py; Spark's map state across restarts is the checkpoint
tests' (tests/integration/test_service_checkpoint_compat.py)."""
from collections import Counter

from operators.regular import _KeyedJoin
from tests.support.query_driver import QueryDriver
from tests.support.service_harness import order, price

LEFT_JOIN = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"


def test_a_hot_key_split_into_map_state_joins_updates_and_deletes_across_restarts():
    hot = 2 * _KeyedJoin.split_at + 7
    h = QueryDriver(partitions=2, JOIN_SQL=LEFT_JOIN)
    orders = {i: ("book", i % 5) for i in range(hot)} | {hot + i: ("pen", 1) for i in range(3)}
    # each order's changes in one partition (i % 2), so its -U comes before its +U
    h.send_orders([("+I", order(i, product, q), i % 2) for i, (product, q) in orders.items()])
    h.run()
    h.send_prices([("+I", price("book", 2.5)), ("+I", price("pen", 1.0))], partition=0)
    # updates and deletes of single hot rows, one moving to another key, after a restart
    h.restart().run()
    changes = []
    for i in (3, 10, 100):
        product, q = orders[i]
        changes += [("-U", order(i, product, q), i % 2), ("+U", order(i, product, q + 100), i % 2)]
        orders[i] = (product, q + 100)
    changes += [("-D", order(7, *orders.pop(7)), 1)]
    changes += [("-U", order(8, *orders[8]), 0), ("+U", order(8, "pen", 9), 0)]
    orders[8] = ("pen", 9)
    h.send_orders(changes)
    h.send_prices([("-U", price("book", 2.5)), ("+U", price("book", 3.0))], partition=0)
    h.restart().run()
    prices = {"book": 3.0, "pen": 1.0}
    expected = Counter({(i, product, q, prices[product]): 1 for i, (product, q) in orders.items()})
    assert h.retract_table() == expected
    # the hot side is in the join's map state, one entry per order; the small keys are not
    hot_rows = sum(1 for product, _ in orders.values() if product == "book")
    assert sum(len(entries) for (name, _), entries in h.state().maps.items() if name == "left") == hot_rows

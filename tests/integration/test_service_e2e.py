"""The service end to end: Kafka (Avro, RowKind headers) -> Spark -> Kafka, on a real broker."""
from collections import Counter

import pytest

from service_harness import JoinHarness, order, price

pytestmark = pytest.mark.integration

ORDERS_LEFT_JOIN_PRICES = (
    "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
)

# A changelog with inserts, updates (-U/+U) and deletes on both sides.
ORDER_CHANGES = [
    ("+I", order(1, "book", 2)),
    ("+I", order(2, "pen", 10)),
    ("+I", order(3, "ink", 1)),
    ("-U", order(2, "pen", 10)),
    ("+U", order(2, "pen", 12)),
    ("-D", order(3, "ink", 1)),
    ("+I", order(4, "paper", 5)),
    ("-U", order(1, "book", 2)),
    ("+U", order(1, "ink", 2)),  # moves to another join key
]
PRICE_CHANGES = [
    ("+I", price("book", 12.5)),
    ("+I", price("pen", 1.2)),
    ("-U", price("pen", 1.2)),
    ("+U", price("pen", 1.5)),
    ("+I", price("ink", 7.0)),
    ("+I", price("glue", 3.0)),
    ("-D", price("book", 12.5)),
]


@pytest.fixture
def harness(kafka_bootstrap, spark, tmp_path, new_topic):
    def make(partitions=1, **env):
        return JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, partitions, **env)

    return make


def test_left_join_with_retractions_materializes_to_the_joined_table(harness):
    h = harness(JOIN_SQL=ORDERS_LEFT_JOIN_PRICES)
    h.send_orders(ORDER_CHANGES)
    h.send_prices(PRICE_CHANGES)
    h.run()
    assert h.retract_table() == Counter({(1, "ink", 2, 7.0): 1, (2, "pen", 12, 1.5): 1, (4, "paper", 5, None): 1})
    kinds = Counter(c.kind for c in h.changelog())
    assert kinds["-D"] > 0 and kinds["+U"] == 0, "outer joins retract with -D and never emit +U"
    assert all(c.headers["changejoin.batch"] and c.headers["changejoin.seq"] for c in h.changelog())


def test_left_join_upsert_output_is_keyed_by_the_output_key(harness):
    h = harness(JOIN_SQL=ORDERS_LEFT_JOIN_PRICES, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id")
    h.send_orders(ORDER_CHANGES)
    h.send_prices(PRICE_CHANGES)
    h.run()
    table = h.upsert_table()
    assert sorted(table.values()) == [(1, "ink", 2, 7.0), (2, "pen", 12, 1.5), (4, "paper", 5, None)]
    assert all(c.kind == "" for c in h.changelog()), "upsert output carries no RowKind header"
    assert any(c.row is None for c in h.changelog()), "deletes are tombstones"


def test_inner_join_upsert_output_deletes_the_key_a_row_leaves(harness):
    """OUTPUT_KEY holds the join key: no materializer stage; order 1 moves from book to ink, and
    book's -U must delete its old key (-U is only dropped where the same key is written again)."""
    h = harness(JOIN_SQL="SELECT o.order_id, o.product, o.quantity, p.price FROM orders o JOIN prices p "
                         "ON o.product = p.product", OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    h.send_prices(PRICE_CHANGES[:5])  # book, pen and ink priced; book's price stays
    h.send_orders(ORDER_CHANGES)
    h.run()
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
def test_join_types_over_two_partitions_per_topic(harness, sql, expected):
    h = harness(partitions=2, JOIN_SQL=sql)
    # Each order's changes stay in one partition (its id's parity), as a keyed producer would do.
    h.send_orders([(kind, row, row["order_id"] % 2) for kind, row in ORDER_CHANGES])
    h.send_prices([(kind, row, len(row["product"]) % 2) for kind, row in PRICE_CHANGES])
    h.run()
    assert h.retract_table() == Counter(expected)


def test_bad_records_go_to_the_dead_letter_topic_and_the_join_goes_on(harness):
    h = harness(JOIN_SQL=ORDERS_LEFT_JOIN_PRICES)
    h.send_orders([("+I", order(1, "book", 2)), ("+I", b"\x00garbage that is not avro")])
    h.send_orders([(None, order(2, "pen", 1))])  # no RowKind header
    h.send_orders([("+X", order(5, "pen", 1))])  # unknown RowKind
    h.send_prices([("+I", price("book", 12.5)), ("+I", price("pen", 1.5))])
    service = h.run()
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1})
    letters = h.dead_letters()
    reasons = sorted(dict(r.headers)["reason"].decode() for r in letters)
    assert reasons == ["missing_rowkind", "undecodable", "unknown_rowkind"]
    for record in letters:
        headers = dict(record.headers)
        assert headers["source.topic"].decode() == h.orders
        assert int(headers["source.offset"]) in (1, 2, 3)
        assert record.value is not None  # the original bytes travel with the reason
    assert sum(sum(b.dead_letters.values()) for b in service.batches) == 3


def test_restart_on_the_same_checkpoint_continues_the_join_state(harness):
    h = harness(JOIN_SQL=ORDERS_LEFT_JOIN_PRICES)
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3))])
    h.run()
    assert h.retract_table() == Counter({(1, "book", 2, None): 1, (2, "pen", 3, None): 1})
    first_run_records = len(h.changelog())
    # A second run on the same checkpoint: only new input is read, and it joins the old state.
    h.send_prices([("+I", price("book", 12.5))])
    h.send_orders([("-D", order(2, "pen", 3))])
    h.run()
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1})
    assert len(h.changelog()) == first_run_records + 3  # -D padded book, +I joined book, -D pen

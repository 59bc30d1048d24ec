"""The service end to end: Kafka (Avro, RowKind headers) -> Spark -> Kafka, on a real broker: one
regular join through every stage of a real query, dead letters to their topic, and a restart on the
checkpoint. The join types and the output modes: tests/service/test_joins_regular.py, on the
in-memory query driver."""
from collections import Counter

import pytest

from tests.support.service_harness import (ORDER_CHANGES, ORDERS_LEFT_JOIN_PRICES, PRICE_CHANGES, JoinHarness, order,
                                           price)

pytestmark = pytest.mark.integration


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

"""How the transactional producers start (service/transactions.py), without a broker: librdkafka's
reconnect backoff lowered unless the user set one, and the start-up abort's producers reading
their first metadata before ``init_transactions()`` (a task's does not: its micro-batch was
written later). What they save is measured by ``bench.transaction_bench`` (a task's init 55-79 ->
about 20 ms median), never asserted here."""
from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from service import transactions
from service.shipping import Delivery
from service.transactions import TaskTransaction, TransactionError, abort_transactional_ids


def delivery(**kafka) -> Delivery:
    return Delivery(prefix="shop", progress_topic="shop.progress", timeout_ms=60_000, location="/ck",
                    output_topic="out", kafka=(("bootstrap.servers", "b:9092"), *kafka.items()), checkpoint_id="c",
                    partitions=2)


class FakeProducer:
    """Records the calls a task's producer gets; ``fail`` names calls that raise."""

    made: list = []

    def __init__(self, conf: dict, fail=()):
        self.conf, self.calls, self.fail = conf, [], fail
        FakeProducer.made.append(self)

    def _call(self, name, *args):
        self.calls.append((name, *args))
        if name in self.fail:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{name} timed out"))

    def list_topics(self, topic=None, timeout=-1):
        self._call("list_topics", topic, timeout)

    def init_transactions(self, timeout):
        self._call("init_transactions", timeout)

    def close(self):
        self._call("close")


@pytest.fixture
def producers(monkeypatch):
    FakeProducer.made = []
    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)
    return FakeProducer.made


def test_a_tasks_producer_initializes_at_once_with_the_lower_backoff(producers):
    task = TaskTransaction(delivery(), partition=1, batch_id=4)
    task.ready()
    task.close()
    (producer,) = producers
    assert producer.conf["transactional.id"] == "shop-1"
    assert producer.conf["reconnect.backoff.ms"] == 20
    assert producer.calls == [("init_transactions", 60.0), ("close",)]


def test_the_start_up_abort_reads_metadata_first_and_leaves_a_silent_broker_to_the_init(producers, monkeypatch):
    abort_transactional_ids(delivery(), ["shop-0", "shop-1"])
    assert sorted(p.conf["transactional.id"] for p in producers) == ["shop-0", "shop-1"]
    for producer in producers:
        assert producer.calls == [("list_topics", "shop.progress", transactions._METADATA_WAIT_S),
                                  ("init_transactions", 120.0), ("close",)]

    monkeypatch.setattr(confluent_kafka, "Producer", lambda conf: FakeProducer(conf, fail=("list_topics",)))
    abort_transactional_ids(delivery(), ["shop-0"])  # no metadata: the init ran and succeeded
    assert [c[0] for c in producers[-1].calls] == ["list_topics", "init_transactions", "close"]

    monkeypatch.setattr(confluent_kafka, "Producer",
                        lambda conf: FakeProducer(conf, fail=("list_topics", "init_transactions")))
    with pytest.raises(TransactionError, match="init_transactions timed out"):
        abort_transactional_ids(delivery(), ["shop-0"])


def test_the_reconnect_backoff_is_lowered_unless_the_user_set_one(producers):
    assert transactions.RECONNECT_BACKOFF_MS == 20
    assert transactions._conf_of(delivery(), "shop-0")["reconnect.backoff.ms"] == 20
    assert transactions._conf_of(delivery(**{"reconnect.backoff.ms": "250"}), "shop-0")["reconnect.backoff.ms"] == "250"

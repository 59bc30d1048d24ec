"""How a task's transactional producer starts (service/transactions.py), without a broker: its
first metadata before ``init_transactions()``, and librdkafka's reconnect backoff lowered unless
the user set one. What they save is measured by ``bench.transaction_bench`` (a third of the inits
took 510 ms, the others 55 ms, against about 19 ms with both), never asserted here."""
from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from service import transactions
from service.shipping import Delivery
from service.transactions import TaskTransaction, TransactionError


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


def test_a_tasks_producer_reads_its_first_metadata_then_initializes(producers):
    task = TaskTransaction(delivery(), partition=1, batch_id=4)
    task.ready()
    task.close()
    (producer,) = producers
    assert producer.conf["transactional.id"] == "shop-1"
    assert producer.calls[:2] == [("list_topics", "shop.progress", transactions._METADATA_WAIT_S),
                                  ("init_transactions", 60.0)]


def test_metadata_that_does_not_come_is_left_to_the_init_to_report(producers, monkeypatch):
    monkeypatch.setattr(confluent_kafka, "Producer", lambda conf: FakeProducer(conf, fail=("list_topics",)))
    task = TaskTransaction(delivery(), partition=0, batch_id=4)
    task.ready()  # the init ran and succeeded
    task.close()
    assert [c[0] for c in producers[0].calls[:2]] == ["list_topics", "init_transactions"]

    monkeypatch.setattr(confluent_kafka, "Producer",
                        lambda conf: FakeProducer(conf, fail=("list_topics", "init_transactions")))
    task = TaskTransaction(delivery(), partition=0, batch_id=5)
    with pytest.raises(TransactionError, match="init_transactions timed out"):
        task.ready()
    task.close()


def test_the_reconnect_backoff_is_lowered_unless_the_user_set_one(producers):
    assert transactions._conf_of(delivery(), "shop-0")["reconnect.backoff.ms"] == transactions.RECONNECT_BACKOFF_MS == 20
    assert transactions._conf_of(delivery(**{"reconnect.backoff.ms": "250"}), "shop-0")["reconnect.backoff.ms"] == "250"

"""How the transactional producers start (service/transactions.py), without a broker: librdkafka's
reconnect backoff lowered unless the user set one, and ``init_transactions()`` called again every
20 ms until it returns. What they save is measured by ``bench.transaction_bench`` and the latency
runs (bench/results/RESULTS.md), never asserted here."""
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
    assert producer.calls == [("init_transactions", transactions.INIT_NUDGE_S), ("close",)]


def test_the_start_up_abort_initializes_every_id_and_names_a_failure(producers, monkeypatch):
    abort_transactional_ids(delivery(), ["shop-0", "shop-1"])
    assert sorted(p.conf["transactional.id"] for p in producers) == ["shop-0", "shop-1"]
    for producer in producers:
        assert [c[0] for c in producer.calls] == ["init_transactions", "close"]

    monkeypatch.setattr(confluent_kafka, "Producer", lambda conf: FakeProducer(conf, fail=("init_transactions",)))
    with pytest.raises(TransactionError, match="init_transactions timed out"):
        abort_transactional_ids(delivery(), ["shop-0"], timeout_s=0.1)
    assert producers[-1].calls[-1] == ("close",)


class SlowInit(FakeProducer):
    """A producer whose init_transactions() times out (librdkafka still asking for its producer id)
    until its ``late``-th call, which returns, or raises ``error``; ``late`` None: never returns."""

    def __init__(self, conf, late=None, error=None):
        super().__init__(conf)
        self.late, self.error = late, error

    def init_transactions(self, timeout):
        self.calls.append(("init_transactions", timeout))
        if len(self.calls) == self.late:
            if self.error is not None:
                raise KafkaException(self.error)
            return
        raise KafkaException(self.error if self.late is None else KafkaError(
            KafkaError._TIMED_OUT, "Failed to initialize Producer ID: timed out", retriable=True))


def test_init_transactions_is_called_again_every_step_until_it_returns():
    producer = SlowInit({}, late=4)
    transactions.init_transactions(producer, 5.0)
    steps = [c[1] for c in producer.calls]
    assert len(steps) == 4 and all(0 < step <= transactions.INIT_NUDGE_S for step in steps)


def test_init_transactions_keeps_at_a_refused_request_until_the_deadline_and_then_names_it():
    # what librdkafka reports at a call's timeout once the coordinator refused the request
    busy = KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, "Failed to initialize Producer ID: concurrent transactions")
    producer = SlowInit({}, error=busy)
    with pytest.raises(KafkaException) as raised:
        transactions.init_transactions(producer, 0.1)
    assert raised.value.args[0].code() == KafkaError.CONCURRENT_TRANSACTIONS
    assert len(producer.calls) >= 3


def test_init_transactions_ends_at_a_fatal_error_at_once():
    denied = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized", fatal=True)
    producer = SlowInit({}, late=2, error=denied)
    with pytest.raises(KafkaException) as raised:
        transactions.init_transactions(producer, 60.0)
    assert raised.value.args[0].fatal() and len(producer.calls) == 2


def test_the_reconnect_backoff_is_lowered_unless_the_user_set_one(producers):
    assert transactions.RECONNECT_BACKOFF_MS == 20
    assert transactions._conf_of(delivery(), "shop-0")["reconnect.backoff.ms"] == 20
    assert transactions._conf_of(delivery(**{"reconnect.backoff.ms": "250"}), "shop-0")["reconnect.backoff.ms"] == "250"

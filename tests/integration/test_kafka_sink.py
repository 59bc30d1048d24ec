"""service/sink.py against a real broker (see tests/support/kafka_fixture.py for where it comes from)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.kafka_fixture import consume_all, end_offsets
from devkit.broker_process import free_port
from service.sink import (
    DEFAULT_DELIVERY_TIMEOUT_MS,
    KafkaDeliveryError,
    KafkaSink,
    ensure_topics,
    producer_config,
)

pytestmark = pytest.mark.integration

# Extra client properties of the sinks under test: none, the product's defaults (they batch).
TEST_PROPS: dict = {}


def test_producer_config_is_idempotent_with_generous_timeout():
    conf = producer_config("b:9092", {"security.protocol": "SASL_SSL", "linger.ms": 1})
    assert conf["enable.idempotence"] is True
    assert conf["acks"] == "all"
    assert conf["message.timeout.ms"] == DEFAULT_DELIVERY_TIMEOUT_MS >= 120_000
    assert conf["security.protocol"] == "SASL_SSL" and conf["linger.ms"] == 1
    assert producer_config("b", {"delivery.timeout.ms": 1234})["message.timeout.ms"] == 1234
    assert producer_config("b", {}, delivery_timeout_ms=99)["message.timeout.ms"] == 99
    assert "delivery.timeout.ms" not in producer_config("b", {"delivery.timeout.ms": 5})
    with pytest.raises(ValueError, match="enable.idempotence"):
        producer_config("b", {"enable.idempotence": "false"})
    with pytest.raises(ValueError, match="acks"):
        producer_config("b", {"acks": "1"})


def test_delivers_keys_headers_and_tombstones_in_order(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    records = []
    for i in range(30):
        key = f"key-{i % 4}".encode()
        value = None if i % 7 == 3 else f"value-{i}".encode()
        headers = [("seq", str(i).encode()), ("empty", None)] if i % 2 else []
        records.append((topic, key, value, headers))
    records.append((topic, None, b"no key", [("h", b"x")]))

    with KafkaSink(kafka_bootstrap, TEST_PROPS) as sink:
        assert sink.produce_all(records) == len(records)

    got = consume_all(kafka_bootstrap, topic)
    assert len(got) == len(records)
    by_key = {}
    for r in got:
        by_key.setdefault(r.key, []).append(r)
    # Every record of a key is in one partition, in the order produced.
    for key, recs in by_key.items():
        if key is None:
            continue
        assert len({r.partition for r in recs}) == 1
        expected = [(v, h) for t, k, v, h in records if k == key]
        assert [(r.value, r.headers) for r in sorted(recs, key=lambda r: r.offset)] == [
            (v, list(h)) for v, h in expected
        ]
    tombstones = [r for r in got if r.value is None]
    assert len(tombstones) == sum(1 for r in records if r[2] is None) > 0
    assert [r.value for r in by_key[None]] == [b"no key"]


def test_produce_all_of_nothing(kafka_bootstrap):
    with KafkaSink(kafka_bootstrap, TEST_PROPS) as sink:
        assert sink.produce_all([]) == 0


def test_ensure_topics_creates_missing_and_ignores_existing(kafka_bootstrap, new_topic):
    a, b = new_topic(create=False), new_topic(create=False)
    assert sorted(ensure_topics(kafka_bootstrap, {}, {a: 2, b: 1})) == sorted([a, b])
    assert ensure_topics(kafka_bootstrap, {}, {a: 2, b: 1}) == []
    assert sorted(end_offsets(kafka_bootstrap, a)) == [0, 1]
    assert sorted(end_offsets(kafka_bootstrap, b)) == [0]
    assert ensure_topics(kafka_bootstrap, {}, {}) == []


def test_raises_naming_the_topic_when_the_broker_is_gone():
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    sink = KafkaSink(nobody, {}, delivery_timeout_ms=1500)
    with pytest.raises(KafkaDeliveryError, match="orders-out") as info:
        sink.produce_all([("orders-out", b"k", b"v", []), ("orders-out", b"k2", None, [])])
    assert "timed out" in str(info.value)
    assert [t for t, _ in info.value.failures] == ["orders-out", "orders-out"]


def test_raises_when_the_topic_cannot_exist(kafka_bootstrap):
    with KafkaSink(kafka_bootstrap, TEST_PROPS, delivery_timeout_ms=10_000) as sink:
        with pytest.raises(KafkaDeliveryError, match="bad topic!"):
            sink.produce_all([("bad topic!", b"k", b"v", [])])


def test_ensure_topics_rejects_invalid_topics(kafka_bootstrap):
    # Checked before asking the broker, which would refuse them with a less helpful error.
    with pytest.raises(ValueError, match="bad topic!"):
        ensure_topics(kafka_bootstrap, {}, {"bad topic!": 1})
    with pytest.raises(ValueError, match="partitions"):
        ensure_topics(kafka_bootstrap, {}, {"fine": 0})


def test_waits_while_the_broker_is_unreachable(restartable_broker):
    """Records produced while the broker is down are delivered once it is back."""
    bootstrap = restartable_broker.bootstrap
    ensure_topics(bootstrap, {}, {"outage": 1})
    # The sink has its producer id before the outage; Kafka keeps producer state across restarts.
    sink = KafkaSink(bootstrap, TEST_PROPS, delivery_timeout_ms=120_000)
    assert sink.produce_all([("outage", b"k", b"before", [])]) == 1
    restartable_broker.stop()
    outcome = {}

    def produce():
        try:
            outcome["n"] = sink.produce_all([("outage", b"k", f"v{i}".encode(), []) for i in range(10)])
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=produce)
    thread.start()
    time.sleep(2)  # not a timed assertion: only makes sure the sink runs into the outage
    assert thread.is_alive(), outcome
    restartable_broker.start()
    thread.join(timeout=180)
    assert outcome == {"n": 10}
    got = consume_all(bootstrap, "outage")
    assert [r.value for r in got] == [b"before"] + [f"v{i}".encode() for i in range(10)]


def test_topic_partitions(kafka_bootstrap, new_topic):
    from service.sink import topic_partitions

    assert topic_partitions(kafka_bootstrap, {}, new_topic(partitions=3)) == 3
    missing = new_topic(create=False)
    assert topic_partitions(kafka_bootstrap, {}, missing) is None
    assert topic_partitions(kafka_bootstrap, {}, missing) is None  # and it was not created


def test_an_explicit_partition_is_kept(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    with KafkaSink(kafka_bootstrap, TEST_PROPS) as sink:
        assert sink.produce_all([(topic, b"k", f"v{p}".encode(), [], p) for p in (2, 0, 1)]) == 3
    got = consume_all(kafka_bootstrap, topic)
    assert [(r.partition, r.value) for r in got] == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


def test_a_failing_record_iterator_fails_the_batch_but_not_the_sink(kafka_bootstrap, new_topic):
    topic = new_topic()

    def records():
        yield (topic, b"k", b"one", [])
        raise ValueError("cannot encode")

    sink = KafkaSink(kafka_bootstrap, TEST_PROPS)
    with pytest.raises(ValueError, match="cannot encode"):
        sink.produce_all(records())
    assert sink.produce_all([(topic, b"k", b"two", [])]) == 1
    sink.close()
    assert b"two" in [r.value for r in consume_all(kafka_bootstrap, topic)]


def test_a_sink_that_failed_works_again_for_the_next_batch(restartable_broker):
    """A sink kept across batches (as the pipeline does) must not stay broken: a batch that
    timed out while the broker was down fails, and the next batch, once it is back, goes through."""
    bootstrap = restartable_broker.bootstrap
    ensure_topics(bootstrap, {}, {"kept": 1})
    sink = KafkaSink(bootstrap, TEST_PROPS, delivery_timeout_ms=3000)
    assert sink.produce_all([("kept", b"k", b"before", [])]) == 1
    restartable_broker.stop()
    with pytest.raises(KafkaDeliveryError, match="kept"):
        sink.produce_all([("kept", b"k", b"lost", [])])
    restartable_broker.start()
    assert sink.produce_all([("kept", b"k", b"after", [])]) == 1
    sink.close()
    assert [r.value for r in consume_all(bootstrap, "kept")] == [b"before", b"after"]


def test_more_records_than_one_report_interval_are_all_delivered_in_order(kafka_bootstrap, new_topic):
    """Delivery reports are served every so many records and at the end: all of them count."""
    from service.sink import _POLL_EVERY

    topic = new_topic()
    records = [(topic, b"k", f"v{i}".encode(), [("i", str(i).encode())]) for i in range(2 * _POLL_EVERY + 7)]
    with KafkaSink(kafka_bootstrap, TEST_PROPS) as sink:
        assert sink.produce_all(records) == len(records)
    assert [r.value for r in consume_all(kafka_bootstrap, topic)] == [v for _, _, v, _ in records]


def test_one_failing_record_among_many_fails_the_batch(kafka_bootstrap, new_topic):
    topic = new_topic()
    records = [(topic, b"k", f"v{i}".encode(), []) for i in range(1500)]
    records.insert(1200, ("bad topic!", b"k", b"v", []))
    sink = KafkaSink(kafka_bootstrap, TEST_PROPS, delivery_timeout_ms=10_000)
    with pytest.raises(KafkaDeliveryError, match="bad topic!"):
        sink.produce_all(records)
    assert sink.produce_all([(topic, b"k", b"next batch", [])]) == 1
    sink.close()

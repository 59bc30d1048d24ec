"""Kafka for the tests: a broker, unique topics, and helpers to produce and to read whole topics.

Where the broker comes from (the ``kafka_bootstrap`` session fixture), first that works:
1. ``KAFKA_BOOTSTRAP_SERVERS`` from the environment (a real Kafka you run yourself);
2. a testcontainers Kafka container, if testcontainers is installed and a Docker daemon answers;
3. a single-node Apache Kafka (KRaft) started from jars fetched from Maven Central
   (devkit/kafka_broker.py, jars cached by devkit/jars.py).

Tests that stop and restart a broker (``restartable_broker``) always get their own local KRaft
broker, which keeps its data across restarts as any Kafka does.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pytest

from devkit.kafka_broker import KafkaBroker
from tests.support.jvm_archives import broker_jvm_options
from service.source import KafkaRecord


# --------------------------------------------------------------------------------------------
# Where the broker comes from
# --------------------------------------------------------------------------------------------


def _docker_answers() -> bool:
    try:
        import docker  # installed along with testcontainers

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _testcontainers_kafka() -> Optional[Tuple[str, Callable[[], None]]]:
    """(bootstrap, stop) of a Kafka container, or None if testcontainers/Docker is missing."""
    try:
        from testcontainers.kafka import KafkaContainer  # imported lazily: optional
    except ImportError:
        return None
    if not _docker_answers():
        return None
    container = KafkaContainer()
    container.start()
    return container.get_bootstrap_server(), container.stop


def wait_for_kafka(bootstrap: str, timeout: float = 60.0) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=2.0)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Kafka broker answers on {bootstrap}") from None
            time.sleep(0.2)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A bootstrap string for a broker shared by the whole test session."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        wait_for_kafka(external)
        yield external
        return
    container = _testcontainers_kafka()
    if container is not None:
        bootstrap, stop = container
        try:
            wait_for_kafka(bootstrap)
            yield bootstrap
        finally:
            stop()
        return
    broker = KafkaBroker(jvm_options=broker_jvm_options(short_lived=False))
    try:
        yield broker.start()
    finally:
        broker.close()


@pytest.fixture
def restartable_broker(tmp_path) -> Iterator[KafkaBroker]:
    """A private KRaft broker for one test, which the test may stop() and start() again: same
    port, same data directory, so topics, records and producer state survive a restart."""
    broker = KafkaBroker(data_dir=str(tmp_path / "kafka"), jvm_options=broker_jvm_options())
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


# --------------------------------------------------------------------------------------------
# Topics
# --------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)
    # Wait until the metadata shows every partition (a real Kafka propagates asynchronously).
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return name
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} did not show {partitions} partitions")
        time.sleep(0.1)


def recreate_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again under the same name (a new topic id, its offsets from 0)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 60
    while True:  # the deletion completes asynchronously; creating too early fails
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture
def new_topic(kafka_bootstrap: str, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``new_topic(partitions=1, create=True) -> name``: a topic name unique to this call, created
    on the session broker unless ``create=False``."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40] or "t"

    def make(partitions: int = 1, create: bool = True) -> str:
        name = f"{stem}-{uuid.uuid4().hex[:8]}"
        if create:
            create_topic(kafka_bootstrap, name, partitions)
        return name

    return make


# --------------------------------------------------------------------------------------------
# Producing and reading
# --------------------------------------------------------------------------------------------

Headers = Sequence[Tuple[str, Optional[bytes]]]


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Any],
    partition: Optional[int] = None,
    **client_props: Any,
) -> List[Tuple[int, int]]:
    """Produce records and wait for all of them; return their (partition, offset) in order.

    A record is ``value`` or a tuple ``(key, value)``, ``(key, value, headers)`` or
    ``(key, value, headers, partition)``; str keys/values are UTF-8 encoded. ``partition``
    applies to records that do not name one. The producer batches as librdkafka does by default.
    """
    from confluent_kafka import Producer

    conf: Dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all"}
    conf.update(client_props)
    producer = Producer(conf)
    results: List[Any] = []
    errors: List[str] = []

    def enc(x: Any) -> Any:
        return x.encode() if isinstance(x, str) else x

    for i, rec in enumerate(records):
        if not isinstance(rec, tuple):
            rec = (None, rec)
        key, value = enc(rec[0]), enc(rec[1])
        headers = list(rec[2]) if len(rec) > 2 and rec[2] is not None else None
        part = rec[3] if len(rec) > 3 and rec[3] is not None else partition
        results.append(None)

        def on_delivery(err: Any, msg: Any, i: int = i) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                results[i] = (msg.partition(), msg.offset())

        kwargs: Dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
        if headers:
            kwargs["headers"] = headers
        if part is not None:
            kwargs["partition"] = part
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"producing to {topic} failed: {remaining} undelivered, {errors[:3]}")
    return results


def end_offsets(bootstrap: str, topic: str, isolation: str = "read_committed") -> Dict[int, Tuple[int, int]]:
    """{partition: (low, high)} watermarks, asked of the broker; ``high`` is the last stable offset
    under ``read_committed`` (an open transaction holds it back), the high watermark under
    ``read_uncommitted``."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-unused", "isolation.level": isolation})
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        offsets = {}
        deadline = time.monotonic() + 30
        for p in sorted(md.partitions):
            while p not in offsets:
                try:
                    offsets[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                except KafkaException as exc:
                    # A partition created a moment ago may have no leader yet (seen on a loaded
                    # machine right after create_topics): asked again until it has one.
                    if exc.args[0].code() not in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE) \
                            or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        return offsets
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0,
                isolation: str = "read_committed") -> List[KafkaRecord]:
    """Every record of ``topic`` (assign each partition, read from its start to its current end),
    ordered by partition then offset. ``read_committed`` (librdkafka's default, and what consumers
    of exactly-once output set): records of committed transactions and non-transactional ones,
    up to the last stable offset, which waits for transactions still open; ``read_uncommitted``:
    every record written, aborted transactions' too."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    ends = end_offsets(bootstrap, topic, isolation)
    todo = {p: hi for p, (lo, hi) in ends.items() if hi > lo}
    if not todo:
        return []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    out: List[KafkaRecord] = []
    try:
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in todo])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} timed out; still waiting for {todo}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= todo.get(msg.partition(), -1):
                        todo.pop(msg.partition(), None)
                    continue
                raise RuntimeError(f"reading {topic}: {msg.error()}")
            p = msg.partition()
            if p not in todo or msg.offset() >= todo[p]:
                continue
            ts_type, ts = msg.timestamp()
            out.append(
                KafkaRecord(
                    msg.topic(), p, msg.offset(), ts if ts_type else None,
                    msg.key(), msg.value(), list(msg.headers() or []),
                )
            )
            if msg.offset() + 1 >= todo[p]:
                todo.pop(p)
    finally:
        consumer.close()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out

"""Producing to Kafka: an idempotent producer that waits for every delivery, and topic creation.

    sink = KafkaSink("broker:9092", {"security.protocol": "SASL_SSL", ...})
    n = sink.produce_all([(topic, key, value, [("h", b"v")]), ...])   # raises on any failure
    sink.close()

``produce_all`` returns only once every record is acknowledged by all in-sync replicas, and
raises :class:`KafkaDeliveryError` (naming the topic and the error) if any record could not be
delivered, so a Spark task that calls it fails and is retried instead of losing data. While the
broker is unreachable librdkafka keeps retrying, up to ``delivery.timeout.ms`` per record
(default: :data:`DEFAULT_DELIVERY_TIMEOUT_MS`, five minutes).

Records with the same key go to the same partition (librdkafka's ``murmur2_random`` partitioner,
the Java client's default, so keys land where Java producers put them) and, with idempotence,
keep their order through retries.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .errors import ChangejoinError
from .logs import kafka_logger

if TYPE_CHECKING:
    from .shipping import WorkerConfig

log = logging.getLogger(__name__)

DEFAULT_DELIVERY_TIMEOUT_MS = 300_000
# A transactional producer's records must time out before its transaction does (librdkafka refuses
# the producer otherwise): message.timeout.ms stays this far below transaction.timeout.ms.
MESSAGE_TIMEOUT_MARGIN_MS = 10_000

#: (topic, key, value, headers), optionally followed by an explicit partition.
Record = Tuple[Any, ...]

# Properties that break the guarantees above; client_props may not override them.
_REQUIRED = {"enable.idempotence": "true", "acks": "all"}
_ACKS_ALL = {"all", "-1"}
# librdkafka's "any partition": the partitioner chooses (from the key).
_ANY_PARTITION = -1
# Delivery reports are served every this many records while producing (and at the end).
_POLL_EVERY = 1000


class KafkaDeliveryError(RuntimeError, ChangejoinError):
    """Some records could not be delivered; ``failures`` lists (topic, error) pairs."""

    def __init__(self, message: str, failures: Sequence[Tuple[str, str]] = ()):
        super().__init__(message)
        self.failures = list(failures)


def producer_config(
    bootstrap: str,
    client_props: Optional[Mapping[str, Any]] = None,
    delivery_timeout_ms: Optional[int] = None,
    transactional_id: Optional[str] = None,
    transaction_timeout_ms: Optional[int] = None,
) -> Dict[str, Any]:
    """librdkafka configuration of the sink's producer.

    ``client_props`` (security, SASL, tuning...) override the defaults, except idempotence and
    ``acks=all``, which are required. ``delivery_timeout_ms`` (or ``delivery.timeout.ms`` /
    ``message.timeout.ms`` in client_props) bounds how long a record may wait, e.g. for an
    unreachable broker, before its delivery fails. With ``transactional_id`` the producer is
    transactional (``transactions.py``): its records time out at least
    :data:`MESSAGE_TIMEOUT_MARGIN_MS` before its ``transaction_timeout_ms``."""
    props = {str(k): v for k, v in (client_props or {}).items()}
    for key, required in _REQUIRED.items():
        if key in props:
            value = str(props[key]).strip().lower()
            ok = value in _ACKS_ALL if key == "acks" else value == required
            if not ok:
                raise ValueError(f"the Kafka sink requires {key}={required}, got {props[key]!r}")
    conf: Dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "changejoin-sink",
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "compression.type": "lz4",
        # Python callbacks for failed deliveries only; produce_all counts on flush() for the rest.
        "delivery.report.only.error": True,
    }
    conf.update(props)
    # message.timeout.ms is librdkafka's name, delivery.timeout.ms its alias: keep one.
    timeout = conf.pop("delivery.timeout.ms", None)
    timeout = conf.pop("message.timeout.ms", timeout)
    if delivery_timeout_ms is not None:
        timeout = delivery_timeout_ms
    conf["message.timeout.ms"] = int(timeout if timeout is not None else DEFAULT_DELIVERY_TIMEOUT_MS)
    if transactional_id is not None:
        if transaction_timeout_ms is None:
            raise ValueError("a transactional producer needs its transaction timeout")
        conf["transactional.id"] = transactional_id
        conf["transaction.timeout.ms"] = int(transaction_timeout_ms)
        conf["message.timeout.ms"] = min(conf["message.timeout.ms"], int(transaction_timeout_ms) - MESSAGE_TIMEOUT_MARGIN_MS)
    conf["enable.idempotence"] = True
    conf["acks"] = "all"
    conf["bootstrap.servers"] = bootstrap
    conf["logger"] = kafka_logger(props)
    return conf


class KafkaSink:
    """An idempotent producer. Not thread-safe: one per task/thread. Usable as a context manager."""

    def __init__(
        self,
        bootstrap: str,
        client_props: Optional[Mapping[str, Any]] = None,
        delivery_timeout_ms: Optional[int] = None,
    ):
        from confluent_kafka import Producer

        self._conf = producer_config(bootstrap, client_props, delivery_timeout_ms)
        self._producer = Producer(self._conf)
        self._timeout_s = self._conf["message.timeout.ms"] / 1000.0
        self._broken = False

    @classmethod
    def from_config(cls, config: WorkerConfig) -> "KafkaSink":
        """The sink of a worker config (``shipping.WorkerConfig``; its Kafka properties are a secret part)."""
        kafka = dict(config.secrets.kafka)
        return cls(kafka.pop("bootstrap.servers"), kafka)

    def _renew(self) -> None:
        """A fresh producer (a new producer id) after a failure: an idempotent producer can be
        left unusable (fatal error, or a producer id the broker no longer knows), and a caller
        that keeps this sink for the next batch must not inherit that."""
        from confluent_kafka import Producer

        try:
            self._producer.purge()
            self._producer.flush(0)
        except Exception:  # noqa: BLE001 - it is being replaced
            pass
        self._producer = Producer(self._conf)
        self._broken = False

    def produce_all(self, records: Iterable[Record]) -> int:
        """Produce ``(topic, key, value, headers)`` records (optionally a fifth element, the
        partition) in order and wait until each one is delivered. Returns how many were
        delivered; raises KafkaDeliveryError if any was not. After a failure the next call
        starts with a fresh producer.

        Only failed deliveries call back into Python (``delivery.report.only.error``): once
        the producer's queue is empty, every record has either been acknowledged or been
        reported as a failure here."""
        if self._broken:
            self._renew()
        failures, on_delivery = failure_collector()

        try:
            sent = self._produce_each(records, on_delivery, failures)
        except BaseException:
            # A failed produce, or the caller's record iterator failed: the batch is incomplete
            # anyway, and what is still queued is dropped before the next batch.
            self._broken = True
            raise
        try:
            self._wait_all(sent)
        except KafkaDeliveryError:
            self._broken = True
            raise
        if failures:
            self._broken = True
            raise delivery_failure(failures, sent)
        return sent

    def _produce_each(
        self, records: Iterable[Record], on_delivery: Any, failures: List[Tuple[str, str]]
    ) -> int:
        return produce_each(self._producer, records, on_delivery, failures)

    def _wait_all(self, sent: int) -> None:
        # Every queued record gets its delivery report within message.timeout.ms; the margin
        # covers the time spent queueing. flush() serves the reports and returns how many
        # records are still queued or in flight.
        deadline = time.monotonic() + self._timeout_s + 60
        while True:
            remaining = self._producer.flush(1.0)
            if remaining == 0:
                return
            if time.monotonic() > deadline:
                raise KafkaDeliveryError(
                    f"{remaining} of {sent} records got no delivery report within "
                    f"{self._timeout_s + 60:.0f}s",
                )

    def flush(self, timeout: float = 30.0) -> int:
        return self._producer.flush(timeout)

    def close(self) -> None:
        """Wait for whatever is still queued (up to the delivery timeout)."""
        self._producer.flush(self._timeout_s)

    def __enter__(self) -> "KafkaSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def produce_each(producer: Any, records: Iterable[Record], on_delivery: Any,
                 failures: List[Tuple[str, str]]) -> int:
    """Queue ``records`` on ``producer`` in order (waiting for room when its queue is full) and
    return how many; stops early once ``on_delivery`` has recorded a failure in ``failures``."""
    from confluent_kafka import KafkaException

    produce, poll = producer.produce, producer.poll
    sent = 0
    for record in records:
        if len(record) == 5:
            topic, key, value, headers, partition = record
            if partition is None:
                partition = _ANY_PARTITION
        else:
            topic, key, value, headers = record
            partition = _ANY_PARTITION
        if headers and type(headers) is not list:
            headers = list(headers)
        while True:
            try:
                produce(topic, value, key, partition, on_delivery, headers=headers or None)
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                poll(0.1)
            except KafkaException as exc:
                raise KafkaDeliveryError(
                    f"cannot produce to topic {topic!r}: {exc}", [(topic, str(exc))]
                ) from exc
        sent += 1
        if not sent % _POLL_EVERY:
            poll(0)
            if failures:
                break  # no point queueing more: this batch fails anyway
    return sent


def failure_collector() -> Tuple[List[Tuple[str, str]], Any]:
    """(failures, on_delivery): a delivery callback that appends (topic, error) of each record
    that could not be delivered to ``failures``."""
    failures: List[Tuple[str, str]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append((msg.topic(), err.str() if hasattr(err, "str") else str(err)))

    return failures, on_delivery


def delivery_failure(failures: Sequence[Tuple[str, str]], sent: int) -> KafkaDeliveryError:
    """The error that reports ``failures`` (topic, error) of ``sent`` records."""
    topics = sorted({t for t, _ in failures})
    first_topic, first_error = failures[0]
    return KafkaDeliveryError(
        f"{len(failures)} of {sent} records could not be delivered to topic"
        f"{'s' if len(topics) > 1 else ''} {', '.join(topics)}: "
        f"{first_error} (topic {first_topic})",
        failures,
    )


def admin_props(client_props: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The client properties an AdminClient understands (drops producer/consumer tuning)."""
    skip = (
        "linger.", "batch.", "queue.buffering", "compression.", "partitioner", "acks",
        "enable.idempotence", "message.timeout", "delivery.timeout", "retries",
        "max.in.flight", "transactional.", "group.", "enable.auto", "auto.", "fetch.",
        "queued.", "isolation.level",
    )
    return {k: v for k, v in (client_props or {}).items() if not str(k).startswith(skip)}


_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules (not every broker enforces them on creation)."""
    if not _TOPIC_NAME.match(name or "") or name in (".", ".."):
        raise ValueError(
            f"invalid Kafka topic name {name!r}: use 1-249 of the characters [A-Za-z0-9._-]"
        )


def ensure_topics(
    bootstrap: str,
    client_props: Optional[Mapping[str, Any]],
    topics: Mapping[str, int],
    replication_factor: int = -1,
    timeout: float = 60.0,
    configs: Optional[Mapping[str, Mapping[str, str]]] = None,
) -> List[str]:
    """Create the topics ``{name: partitions}`` that do not exist yet (``replication_factor=-1``:
    the broker's default; ``configs``: topic configs by name) and wait until their metadata is visible. Topics that exist already,
    or that another client creates meanwhile, are left as they are (a different partition count
    is only logged). Returns the names created here."""
    from confluent_kafka.admin import AdminClient

    if not topics:
        return []
    for name, partitions in topics.items():
        validate_topic_name(name)
        if int(partitions) < 1:
            raise ValueError(f"topic {name!r}: partitions must be at least 1, got {partitions}")
    conf = {"bootstrap.servers": bootstrap, **admin_props(client_props), "logger": kafka_logger(client_props)}
    admin = AdminClient(conf)
    try:
        return _ensure_topics(admin, topics, replication_factor, timeout, configs)
    finally:
        admin.poll(0)  # hands its log lines to the logger


def _ensure_topics(admin: Any, topics: Mapping[str, int], replication_factor: int, timeout: float,
                   configs: Optional[Mapping[str, Mapping[str, str]]]) -> List[str]:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    # list_topics() without a topic name: naming a missing topic may auto-create it.
    existing = admin.list_topics(timeout=timeout).topics
    for name, partitions in topics.items():
        md = existing.get(name)
        if md is not None and md.error is None and len(md.partitions) != partitions:
            log.warning(
                "topic %s exists with %d partitions, not %d", name, len(md.partitions), partitions
            )
    missing = [name for name in topics if name not in existing]
    created: List[str] = []
    if missing:
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=topics[n], replication_factor=replication_factor,
                      config=dict((configs or {}).get(n, {}))) for n in missing],
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
                created.append(name)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                raise RuntimeError(f"cannot create topic {name!r}: {exc}") from exc
        deadline = time.monotonic() + timeout
        while True:
            seen = admin.list_topics(timeout=timeout).topics
            if all(n in seen and seen[n].error is None and seen[n].partitions for n in missing):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"created topics {missing} did not appear in the metadata")
            time.sleep(0.1)
    return created


def topic_partitions(
    bootstrap: str, client_props: Optional[Mapping[str, Any]], topic: str, timeout: float = 60.0
) -> Optional[int]:
    """How many partitions ``topic`` has, or None if it does not exist (never creates it)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_props(client_props),
                         "logger": kafka_logger(client_props)})
    try:
        # All topics' metadata: naming one topic in the request may auto-create it.
        md = admin.list_topics(timeout=timeout).topics.get(topic)
    finally:
        admin.poll(0)  # hands its log lines to the logger
    if md is None or md.error is not None:
        return None
    return len(md.partitions)

"""Exactly-once output (``DELIVERY=exactly-once``): one Kafka transaction per producing task,
made idempotent per micro-batch by a progress marker written in the same transaction.

librdkafka cannot commit a transaction another process opened (Flink resumes its pre-committed
transactions by producer id and epoch; there is no such API here, nor KIP-939's two-phase one), and
Spark records a micro-batch as done only after all its tasks have returned. So each task that
produces its share of micro-batch N (task partition p, fixed for the life of a checkpoint: the
partition of the last stateful stage) does, with a producer of its own (:class:`TaskTransaction`):

1. at task start, in a thread while the join runs: a new producer with the transactional id
   ``<KAFKA_TRANSACTIONAL_ID_PREFIX>-<p>``, and ``init_transactions()``, which fences every older
   producer of that id (an earlier attempt of the task, a zombie on a lost executor, a worker of a
   killed driver) and completes or aborts whatever transaction it left;
2. once the task has output, the last committed marker of p in the progress topic
   (``PROGRESS_TOPIC``, compacted, partition p, key ``<checkpoint id>:<p>``), read ``read_committed``
   after the init, so that no older attempt can commit after it is read (:class:`ProgressReader`);
3. if the marker says N is written already (a replay after a driver crash, a retry of a task whose
   first attempt committed and then died), it drains its rows (the join's state must still advance)
   and writes nothing, reporting the marker's counts; otherwise it writes its output, its dead letters
   and the marker ``{"batch": N, ...}`` in one transaction and commits.

This rests on a replayed micro-batch computing the same records as the first run (same offsets,
state, batch timestamp and watermark, same order), which the service keeps true and tests. The
marker carries the checkpoint's id (``checkpoint.py``), so a new ``CHECKPOINT_LOCATION``, whose
batch ids start at 0 again, never takes an old checkpoint's markers for its own.

A producer never outlives its task attempt nor an error: every exit closes it, which aborts an open
transaction (a producer merely dropped would leave it open, holding back every ``read_committed``
reader of the partitions it wrote until the transaction timeout). Before the query starts,
:func:`abort_open_transactions` initializes every task partition's id once, which aborts what a
killed run left open and checks the timeout and the ACLs against the broker.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional

from .sink import admin_props, delivery_failure, failure_collector, produce_each, producer_config

log = logging.getLogger(__name__)

#: Consumer properties of the marker reader: a read ends at the partition's end (the last stable
#: offset under read_committed), and a fetch at the end waits 10 ms, not librdkafka's 500.
_READER = {"isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False,
           "fetch.wait.max.ms": 10, "auto.offset.reset": "earliest"}
#: The marker reader first reads this many offsets back from a partition's end (each transaction
#: adds its marker and a commit record), then 8 times as many, until it finds the key or the start.
_READ_BACK = 16


class TransactionError(RuntimeError):
    """A task's transaction failed; the message names the setting involved where one is."""


def delivery_config(settings, checkpoint_id: Optional[str] = None) -> dict:
    """What the producing tasks' transactions need of the settings (``config["delivery"]`` of a
    worker config), with the checkpoint's id (``checkpoint.py``) for the markers."""
    return {"prefix": settings.transactional_id_prefix, "progress_topic": settings.progress_topic_name,
            "checkpoint_id": checkpoint_id, "timeout_ms": settings.kafka_transaction_timeout_ms}


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def marker_key(checkpoint_id: str, partition: int) -> bytes:
    return f"{checkpoint_id}:{partition}".encode()


def _conf(config: dict, partition: int, **extra) -> dict:
    delivery, kafka = config["delivery"], dict(config["kafka"])
    bootstrap = kafka.pop("bootstrap.servers")
    conf = producer_config(bootstrap, kafka, transactional_id=transactional_id(delivery["prefix"], partition),
                           transaction_timeout_ms=delivery["timeout_ms"])
    conf.update(extra)
    return conf


def _explained(err: BaseException, config: dict, partition: int) -> BaseException:
    """``err`` of a transactional call, as one line naming the setting to look at when it is one's."""
    from confluent_kafka import KafkaError, KafkaException

    kafka_error = err.args[0] if isinstance(err, KafkaException) and err.args else None
    if not isinstance(kafka_error, KafkaError):
        return err
    delivery, code = config["delivery"], kafka_error.code()
    tid = transactional_id(delivery["prefix"], partition)
    if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return TransactionError(f"KAFKA_TRANSACTION_TIMEOUT_MS={delivery['timeout_ms']} is above the broker's "
                                f"transaction.max.timeout.ms: lower it, or raise the broker's maximum")
    if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return TransactionError(f"the Kafka principal may not use the transactional id {tid!r}: grant WRITE on "
                                f"transactional ids with the prefix KAFKA_TRANSACTIONAL_ID_PREFIX="
                                f"{delivery['prefix']!r}, or set a prefix it may use")
    if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        return TransactionError(f"the transaction of {tid!r} was fenced: a newer attempt of this task started, or the "
                                f"transaction outlived KAFKA_TRANSACTION_TIMEOUT_MS={delivery['timeout_ms']} (then "
                                f"lower MAX_RECORDS_PER_TRIGGER or raise the timeout): {kafka_error.str()}")
    return TransactionError(f"transaction of {tid!r}: {kafka_error.str()}")


class ProgressReader:
    """The last committed marker of a task partition (a ``read_committed`` consumer, one per worker
    process: :func:`shipping.built`)."""

    def __init__(self, config: dict):
        from confluent_kafka import Consumer

        kafka = dict(config["kafka"])
        self.topic = config["delivery"]["progress_topic"]
        self.checkpoint_id = config["delivery"]["checkpoint_id"]
        self._consumer = Consumer({"bootstrap.servers": kafka.pop("bootstrap.servers"), **admin_props(kafka),
                                   "group.id": "changejoin-progress-reader", **_READER})
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: dict) -> "ProgressReader":
        return cls(config)

    def last(self, partition: int, timeout_s: float = 60.0) -> Optional[dict]:
        """The newest committed marker of this checkpoint's ``partition``, or None."""
        from confluent_kafka import TopicPartition

        key = marker_key(self.checkpoint_id, partition)
        with self._lock:
            low, high = self._watermarks(partition, timeout_s)
            back = _READ_BACK
            while high > low:
                start = max(low, high - back)
                found = self._scan(partition, start, key, timeout_s)
                if found is not None or start == low:
                    return found
                back *= 8
            return None

    def _watermarks(self, partition: int, timeout_s: float) -> tuple[int, int]:
        """The partition's low and high watermarks. A partition added since this reader (kept by
        its worker process) last fetched the topic's metadata, as ``changejoin rescale`` adds them,
        is unknown to it until it fetches them again."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        try:
            return self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=timeout_s,
                                                        cached=False)
        except KafkaException as err:
            if err.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
        self._consumer.list_topics(self.topic, timeout=timeout_s)
        return self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=timeout_s,
                                                    cached=False)

    def _scan(self, partition: int, start: int, key: bytes, timeout_s: float) -> Optional[dict]:
        from confluent_kafka import KafkaError, TopicPartition

        self._consumer.assign([TopicPartition(self.topic, partition, start)])
        found, deadline = None, time.monotonic() + timeout_s
        try:
            while True:
                msg = self._consumer.poll(0.05)
                if msg is None:
                    if time.monotonic() > deadline:
                        raise TransactionError(f"reading {self.topic} partition {partition} timed out")
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return found
                    raise TransactionError(f"reading {self.topic} partition {partition}: {msg.error()}")
                if msg.key() == key and msg.value() is not None:
                    found = json.loads(msg.value())
        finally:
            self._consumer.unassign()


class TaskTransaction:
    """One attempt of one task partition's share of a micro-batch. Create it when the task starts
    (the producer's ``init_transactions()`` begins at once, in a thread: it takes 60-510 ms, mostly
    waiting), then call :meth:`written` or :meth:`write` once, and :meth:`close` in every case."""

    def __init__(self, config: dict, partition: int, batch_id: int, attempt: int = 0):
        self.config, self.partition, self.batch_id, self.attempt = config, partition, batch_id, attempt
        self.timeout_s = config["delivery"]["timeout_ms"] / 1000.0
        self.init_seconds: Optional[float] = None
        self.transaction_seconds: Optional[float] = None
        self._producer: Any = None
        self._error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._init, name=f"changejoin-txn-{partition}", daemon=True)
        self._thread.start()

    def _init(self) -> None:
        from confluent_kafka import Producer

        started = time.perf_counter()
        try:
            producer = Producer(_conf(self.config, self.partition))
            with self._lock:
                self._producer = producer
            producer.init_transactions(self.timeout_s)
        except BaseException as err:  # noqa: BLE001 - reported by ready()
            self._error = err
        finally:
            self.init_seconds = time.perf_counter() - started

    def ready(self) -> None:
        """Wait for the producer's initialization; raise what it failed with."""
        self._thread.join()
        if self._error is not None:
            raise _explained(self._error, self.config, self.partition) from self._error

    def written(self, reader: ProgressReader) -> Optional[dict]:
        """The marker of this micro-batch (or a later one) if this task partition has committed it
        already, else None. Only after the initialization: no older attempt can commit after it."""
        self.ready()
        marker = reader.last(self.partition)
        if marker is not None and marker["batch"] >= self.batch_id:
            return marker
        return None

    def write(self, records: Iterable[tuple], counts: dict, crash: Optional[Callable[[str, int], None]] = None) -> int:
        """Produce ``records`` and the marker (with ``counts``, filled while ``records`` are
        produced) in one transaction, and commit it. Returns how many records were written."""
        from confluent_kafka import KafkaException

        self.ready()
        producer, delivery = self._producer, self.config["delivery"]
        failures, on_delivery = failure_collector()

        started = time.perf_counter()
        try:
            producer.begin_transaction()
            sent = produce_each(producer, records, on_delivery, failures)
            if crash is not None:
                producer.flush(self.timeout_s)
                crash("mid-produce", self.batch_id)
            marker = {"batch": self.batch_id, "partition": self.partition, "attempt": self.attempt,
                      "records": sent, "counts": [[t, label, n] for (t, label), n in sorted(counts.items())]}
            producer.produce(delivery["progress_topic"], json.dumps(marker, sort_keys=True).encode(),
                             marker_key(delivery["checkpoint_id"], self.partition), self.partition, on_delivery)
            if crash is not None:
                producer.flush(self.timeout_s)
                crash("before-commit", self.batch_id)
            producer.commit_transaction(self.timeout_s)
        except KafkaException as err:
            raise _explained(err, self.config, self.partition) from err
        if failures:
            raise delivery_failure(failures, sent)
        self.transaction_seconds = time.perf_counter() - started
        return sent

    def close(self) -> None:
        """Close the producer, which aborts a transaction still open, once its initialization has
        ended: an initialization left to finish later (after this task, say one without output)
        could fence the producer of the next task attempt or micro-batch of this partition, which
        would then fail."""
        self._thread.join()
        self._close_producer()

    def _close_producer(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            _close(producer)


def _close(producer: Any) -> None:
    """``producer.close()``, which aborts an open transaction; after a failure it may fail or warn
    too (its abort fails after a fenced commit): the first failure is what matters."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            producer.close()
    except Exception:  # noqa: BLE001
        log.debug("closing the transactional producer failed", exc_info=True)


def abort_open_transactions(config: dict, partitions: int, timeout_s: float = 120.0) -> float:
    """Initialize the transactional id of every task partition once, in parallel, which aborts any
    transaction a killed run left open (and completes one whose commit had begun), and checks the
    transaction timeout and the ACLs against the broker. Returns the seconds it took."""
    from confluent_kafka import Producer

    def init(partition: int) -> None:
        producer = Producer(_conf(config, partition))
        try:
            producer.init_transactions(timeout_s)
        except BaseException as err:  # noqa: BLE001
            raise _explained(err, config, partition) from err
        finally:
            _close(producer)

    started = time.perf_counter()
    with ThreadPoolExecutor(min(16, max(1, partitions))) as pool:
        for future in [pool.submit(init, p) for p in range(partitions)]:
            future.result()
    return time.perf_counter() - started

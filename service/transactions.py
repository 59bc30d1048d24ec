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
2. it takes its whole share from the join and encodes it (:class:`Share`: in memory, on local disk
   past :func:`spill_bytes_default`), so that no transaction is open while the join computes (its
   keys, its timers, its state commit): a transaction lasts as long as writing the share does;
3. the last committed marker of p in the progress topic (``PROGRESS_TOPIC``, compacted, partition
   p, key ``<checkpoint id>:<p>``), read ``read_committed`` after the init, so that no older attempt
   can commit after it is read (:class:`ProgressReader`);
4. if the marker says N is written already (a replay after a driver crash, a retry of a task whose
   first attempt committed and then died), it writes nothing, reporting what it had computed;
   otherwise it writes its output, its dead letters and the marker ``{"batch": N, ...}`` in one
   transaction and commits.

This rests on a replayed micro-batch computing the same records as the first run (same offsets,
state, batch timestamp and watermark, same order), which the service keeps true and tests, and on a
batch id standing for the same input for the life of a checkpoint. Both are checked, never assumed
(:func:`written_already`): a marker carries a digest of its micro-batch's offset-log entry
(``"input"``: where each source's share of the batch starts and ends, with the batch's timestamp
and watermark) and of the records the share wrote (``"output"``). A replay whose offsets differ (the
checkpoint was restored from an older copy, or lost ``offsets/N``), or whose records differ (the
input was compacted, or its log start moved, between the first run and the replay), stops the
service with one line (:class:`ProgressMismatch`) instead of skipping a share written for other
input. A marker of a later micro-batch than the one to write means the checkpoint is behind its
output: checked for every task partition by the driver before the first micro-batch of a run writes
anything (:func:`check_progress`).

The marker carries the checkpoint's id (``checkpoint.py``), so a new ``CHECKPOINT_LOCATION``, whose
batch ids start at 0 again, never takes an old checkpoint's markers for its own. A checkpoint keeps
its progress topic (by default ``<KAFKA_TRANSACTIONAL_ID_PREFIX>.progress``: a deployment's own) and
the topic's end offsets when it began using it, below which none of its markers lies, so that the
scan for a marker never reads what came before (:func:`progress_topic`).

A producer never outlives its task attempt nor an error: every exit closes it, which aborts an open
transaction (a producer merely dropped would leave it open, holding back every ``read_committed``
reader of the partitions it wrote until the transaction timeout). Before the query starts,
:func:`abort_transactional_ids` initializes every transactional id the checkpoint has ever used
(``checkpoint.used_transactional_ids``: older prefixes and task counts too), which aborts what a
killed run left open and checks the timeout and the ACLs against the broker.
"""
from __future__ import annotations

import hashlib
import json
import logging
import marshal
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Optional

from .errors import ChangejoinError
from .logs import kafka_logger
from .resources import memory_limit
from .shipping import Delivery
from .sink import admin_props, delivery_failure, failure_collector, produce_each, producer_config

log = logging.getLogger(__name__)

#: Consumer properties of the marker reader: a read ends at the partition's end (the last stable
#: offset under read_committed), and a fetch at the end waits 10 ms, not librdkafka's 500.
_READER = {"isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False,
           "fetch.wait.max.ms": 10, "auto.offset.reset": "earliest"}
#: The marker reader first reads this many offsets back from a partition's end (each transaction
#: adds its marker and a commit record), then 8 times as many further back, until it finds the key
#: or the checkpoint's origin in the topic (or the log start).
_READ_BACK = 16
#: The marker reader reads at most this many offsets of a partition, then gives up with one line.
SCAN_LIMIT = 1_000_000
#: A marker read that receives nothing for this long gives up.
_STALL_S = 60.0
#: Records per chunk of a share, one marshal blob: read back, a chunk of output records is about 500
#: objects, fewer than the garbage collector's first threshold (700), so that they die young while
#: the share is written (chunks of 1,000 cost the bulk benchmark 15% more Python CPU, RESULTS.md).
_CHUNK = 100
_MARSHAL = 2  # marshal's format version for a share's chunks: the newest without references
#: The prefix of a share digest: sha256 (128 bits, hex) of its chunks' marshal blobs. A marker's
#: digest without it was made by an earlier changejoin (:func:`_first_digest`).
DIGEST_TAG = "m2:"
#: Headers whose values a share's digest leaves out: a dead letter's reason text may name objects
#: by their address, which a replay does not reproduce.
_UNDIGESTED_HEADERS = frozenset({"reason.detail"})
_UNDIGESTED = b"reason.detail"
_DOCS = "docs/operations.md, \"What operations do\""


class TransactionError(RuntimeError, ChangejoinError):
    """A task's transaction failed; the message names the setting involved where one is."""


class ProgressMismatch(TransactionError):
    """The progress markers say a micro-batch was written for other input, or that the checkpoint
    is behind its output: skipping or writing would lose or repeat output."""


def delivery_config(settings, checkpoint_id: Optional[str] = None, progress: Optional[dict] = None,
                    partitions: Optional[int] = None) -> Delivery:
    """What the producing tasks' transactions need of the settings (``WorkerConfig.delivery``): the
    checkpoint's id (``checkpoint.py``) for the markers, its progress topic and that topic's origin
    (:func:`progress_topic`), its task partitions, and the producers' Kafka properties."""
    progress = progress or {"progress_topic": settings.progress_topic_name, "progress_origin": None}
    origin = progress.get("progress_origin")
    return Delivery(prefix=settings.transactional_id_prefix, progress_topic=progress["progress_topic"],
                    timeout_ms=settings.kafka_transaction_timeout_ms, location=settings.checkpoint_location,
                    output_topic=settings.output_topic, kafka=tuple(settings.kafka_properties().items()),
                    checkpoint_id=checkpoint_id, origin=None if origin is None else tuple(origin),
                    partitions=partitions)


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def marker_key(checkpoint_id: str, partition: int) -> bytes:
    return f"{checkpoint_id}:{partition}".encode()


# -- which progress topic a checkpoint uses ------------------------------------------------------------
def legacy_progress_topic(settings) -> str:
    """The default progress topic of changejoin before a checkpoint recorded its own: shared by
    every deployment writing to the output topic."""
    return f"{settings.output_topic}.progress"


def progress_topic(settings, store) -> str:
    """The progress topic of the checkpoint in ``store``: ``PROGRESS_TOPIC`` when set; else the one
    the checkpoint recorded (``checkpoint.DELIVERY``, by :func:`keep_progress_topic`), which a changed
    ``KAFKA_TRANSACTIONAL_ID_PREFIX`` does not change; else, for a checkpoint that has run without
    recording one (an earlier changejoin), :func:`legacy_progress_topic`; else the default,
    ``<KAFKA_TRANSACTIONAL_ID_PREFIX>.progress``, a deployment's own: two deployments writing to one
    output topic, each with its prefix, never read past each other's open transactions."""
    from . import checkpoint

    if settings.progress_topic:
        return settings.progress_topic
    if not store.readable:
        return settings.progress_topic_name  # a remote checkpoint read without Spark (check-config)
    recorded = checkpoint.delivery_record(store).get("progress_topic")
    if recorded:
        return recorded
    if store.newest_planned() is not None:
        return legacy_progress_topic(settings)
    return settings.progress_topic_name


def keep_progress_topic(settings, store) -> str:
    """Record the checkpoint's progress topic (at every start, whatever ``DELIVERY``: a checkpoint
    switched to exactly-once later keeps its deployment's topic) and return it. A ``PROGRESS_TOPIC``
    that moves an exactly-once checkpoint to another topic while a micro-batch is pending (planned,
    not committed: its replay needs the markers) is refused with one line."""
    from . import checkpoint

    record = checkpoint.delivery_record(store)
    topic = progress_topic(settings, store)
    was = record.get("progress_topic")
    if was == topic:
        return topic
    pending = store.pending_batch()
    if was and settings.exactly_once and pending is not None:
        raise TransactionError(
            f"PROGRESS_TOPIC={topic}: the checkpoint's micro-batch {pending} is not committed and its progress markers "
            f"are in {was}; start once with PROGRESS_TOPIC={was} (or unset) so that it is, then change it")
    values: dict = {"progress_topic": topic}
    if not was and store.newest_planned() is not None:
        # A checkpoint of an earlier changejoin: its markers may lie anywhere in the topic.
        values["progress_origin"] = {"topic": topic, "offsets": None}
    checkpoint.write_delivery_record(store, **values)
    return topic


def checkpoint_progress(settings, store, delivery: Delivery, partitions: int) -> dict:
    """With exactly-once delivery, the checkpoint's progress topic (:func:`keep_progress_topic`)
    and its origin there (``"progress_origin"``: the topic's end offsets when the checkpoint began
    writing markers to it, recorded then; None for a checkpoint of an earlier changejoin): what
    :func:`delivery_config` needs. Call once the topic exists."""
    from . import checkpoint

    topic = keep_progress_topic(settings, store)
    origin = checkpoint.delivery_record(store).get("progress_origin")
    if not origin or origin.get("topic") != topic:
        origin = {"topic": topic, "offsets": progress_origin(delivery, topic, partitions)}
        checkpoint.write_delivery_record(store, progress_origin=origin)
    offsets = origin["offsets"]
    if offsets is not None and len(offsets) < partitions:
        offsets = list(offsets) + [None] * (partitions - len(offsets))  # partitions added since: from their start
    return {"progress_topic": topic, "progress_origin": offsets}


def progress_origin(delivery: Delivery, topic: str, partitions: int) -> list:
    """The end offsets of the progress topic's first ``partitions`` partitions now: a checkpoint that
    begins writing markers to the topic writes none below them."""
    from confluent_kafka import Consumer, TopicPartition

    kafka = dict(delivery.kafka)
    consumer = Consumer({"bootstrap.servers": kafka.pop("bootstrap.servers"), **admin_props(kafka),
                         "group.id": "changejoin-progress-reader", "isolation.level": "read_uncommitted",
                         "logger": kafka_logger(kafka)})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=60, cached=False)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def _conf(delivery: Delivery, partition: int, **extra) -> dict:
    return _conf_of(delivery, transactional_id(delivery.prefix, partition), **extra)


#: A transactional producer's ``reconnect.backoff.ms`` unless KAFKA_CLIENT_RECONNECT_BACKOFF_MS sets
#: one (librdkafka's default is 100). Its half (at least 11 ms) also spaces the connections a new
#: client opens, and every task's new producer opens a second one as soon as its first metadata
#: names the broker behind the bootstrap address: at 100, 50 ms of each task's
#: ``init_transactions()`` went to that wait (``bench.transaction_bench``). Reconnections to a
#: broker that is down still back off exponentially, up to ``reconnect.backoff.max.ms``.
RECONNECT_BACKOFF_MS = 20
#: How often :func:`init_transactions` calls librdkafka's again while it has not returned.
INIT_NUDGE_S = 0.02


def _conf_of(delivery: Delivery, tid: str, **extra) -> dict:
    kafka = dict(delivery.kafka)
    bootstrap = kafka.pop("bootstrap.servers")
    kafka.setdefault("reconnect.backoff.ms", RECONNECT_BACKOFF_MS)
    conf = producer_config(bootstrap, kafka, transactional_id=tid, transaction_timeout_ms=delivery.timeout_ms)
    conf.update(extra)
    return conf


def _explained(err: BaseException, delivery: Delivery, tid: str) -> BaseException:
    """``err`` of a transactional call, as one line naming the setting to look at when it is one's."""
    from confluent_kafka import KafkaError, KafkaException

    kafka_error = err.args[0] if isinstance(err, KafkaException) and err.args else None
    if not isinstance(kafka_error, KafkaError):
        return err
    code = kafka_error.code()
    if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return TransactionError(f"KAFKA_TRANSACTION_TIMEOUT_MS={delivery.timeout_ms} is above the broker's "
                                f"transaction.max.timeout.ms: lower it, or raise the broker's maximum")
    if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return TransactionError(f"the Kafka principal may not use the transactional id {tid!r}: grant WRITE on "
                                f"transactional ids with the prefix KAFKA_TRANSACTIONAL_ID_PREFIX="
                                f"{delivery.prefix!r}, or set a prefix it may use")
    if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        return TransactionError(f"the transaction of {tid!r} was fenced: a newer attempt of this task started, or "
                                f"writing the task's share outlived KAFKA_TRANSACTION_TIMEOUT_MS={delivery.timeout_ms} "
                                f"(raise it, up to the broker's transaction.max.timeout.ms: "
                                f"{_DOCS}): {kafka_error.str()}")
    return TransactionError(f"transaction of {tid!r}: {kafka_error.str()}")


# -- the progress markers ------------------------------------------------------------------------------
class ProgressReader:
    """The last committed marker of a task partition (a ``read_committed`` consumer, one per worker
    process: :func:`shipping.built`).

    The read goes back from the partition's last stable offset, window after window, to the
    checkpoint's origin in the topic at most (``Delivery.origin``, else the log start), and gives
    up with one line past :data:`SCAN_LIMIT` offsets or after :data:`_STALL_S` without a record.
    Under ``read_committed`` a read ends at the last stable offset, before the first transaction
    still open: another producer's (a deployment sharing the progress topic) would hide the markers
    behind it, so the read first waits until no transaction that was open when it began still is."""

    def __init__(self, delivery: Delivery):
        from confluent_kafka import Consumer

        kafka = dict(delivery.kafka)
        self.topic = delivery.progress_topic
        self.checkpoint_id = delivery.checkpoint_id
        self.origin = list(delivery.origin or ())
        self.wait_s = delivery.timeout_ms / 1000.0 + 15.0
        self.scanned = 0  # offsets read, in all (for the tests)
        common = {"bootstrap.servers": kafka.pop("bootstrap.servers"), **admin_props(kafka),
                  "group.id": "changejoin-progress-reader", "logger": kafka_logger(kafka)}
        self._consumer = Consumer({**common, **_READER})
        self._uncommitted = Consumer({**common, "isolation.level": "read_uncommitted"})
        self._lock = threading.Lock()

    def last(self, partition: int, timeout_s: float = 60.0) -> Optional[dict]:
        """The newest committed marker of this checkpoint's ``partition``, or None."""
        from confluent_kafka import TopicPartition

        key = marker_key(self.checkpoint_id, partition)
        with self._lock:
            tp = TopicPartition(self.topic, partition)
            low, stable = self._watermarks(tp, timeout_s)
            stable = self._stable_past_open_transactions(tp, stable, timeout_s)
            origin = self.origin[partition] if partition < len(self.origin) else None
            floor = max(low, origin or 0)
            end, back, limit = stable, _READ_BACK, stable - SCAN_LIMIT
            while end > floor:
                if end <= limit:
                    raise TransactionError(
                        f"PROGRESS_TOPIC={self.topic} partition {partition}: no progress marker of this checkpoint in "
                        f"the {SCAN_LIMIT} offsets before offset {stable}, and the marker scan reads no further: other "
                        f"checkpoints or deployments crowd the topic; give this deployment a PROGRESS_TOPIC of its own "
                        f"once its last micro-batch is committed ({_DOCS})")
                start = max(floor, end - back, limit)
                found = self._scan(partition, start, end, key)
                if found is not None:
                    return found
                end, back = start, back * 8
            return None

    def _watermarks(self, tp, timeout_s: float) -> tuple[int, int]:
        """The partition's low and high watermarks. A partition added since this reader (kept by
        its worker process) last fetched the topic's metadata, as ``changejoin rescale`` adds them,
        is unknown to it until it fetches them again."""
        from confluent_kafka import KafkaError, KafkaException

        try:
            return self._consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        except KafkaException as err:
            if err.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
        self._consumer.list_topics(self.topic, timeout=timeout_s)
        return self._consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)

    def _stable_past_open_transactions(self, tp, stable: int, timeout_s: float) -> int:
        """The last stable offset once every transaction open in the partition now has ended: the
        markers behind another producer's open transaction are invisible until then."""
        high = self._uncommitted.get_watermark_offsets(tp, timeout=timeout_s, cached=False)[1]
        if stable >= high:
            return stable
        log.warning("PROGRESS_TOPIC=%s partition %d: another producer's transaction is open at offset %d (the "
                    "partition ends at %d); waiting for it to end before reading the progress markers",
                    tp.topic, tp.partition, stable, high)
        deadline = time.monotonic() + self.wait_s
        while stable < high:
            if time.monotonic() > deadline:
                raise TransactionError(
                    f"PROGRESS_TOPIC={tp.topic} partition {tp.partition}: a transaction of another producer has been "
                    f"open at offset {stable} for over {self.wait_s:.0f} s, and the progress markers after it cannot "
                    f"be read until it ends: give each deployment a PROGRESS_TOPIC of its own, or release it with "
                    f"changejoin abort-transactions in the environment of the deployment that left it ({_DOCS})")
            time.sleep(0.1)
            stable = self._consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)[1]
        return stable

    def _scan(self, partition: int, start: int, end: int, key: bytes) -> Optional[dict]:
        """The newest marker of ``key`` in offsets ``[start, end)``, or None."""
        from confluent_kafka import KafkaError, TopicPartition

        self._consumer.assign([TopicPartition(self.topic, partition, start)])
        found, deadline = None, time.monotonic() + _STALL_S
        try:
            while True:
                msg = self._consumer.poll(0.05)
                if msg is None:
                    if time.monotonic() > deadline:
                        raise TransactionError(f"reading PROGRESS_TOPIC={self.topic} partition {partition}: nothing "
                                               f"received for {_STALL_S:.0f} s at offset {start}")
                    continue
                deadline = time.monotonic() + _STALL_S
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return found
                    raise TransactionError(f"reading PROGRESS_TOPIC={self.topic} partition {partition}: {msg.error()}")
                if msg.offset() >= end:
                    return found
                self.scanned += 1
                if msg.key() == key and msg.value() is not None:
                    found = json.loads(msg.value())
        finally:
            self._consumer.unassign()

    def close(self) -> None:
        self._consumer.close()
        self._uncommitted.close()


def input_digest(previous: Optional[str], entry: Optional[str]) -> str:
    """What micro-batch N read, as a digest of Spark's offset-log entries N-1 (where each source's
    share starts) and N (its metadata, with the batch's timestamp and watermark, and where each
    share ends): a replay reads the same offsets and has the same digest; a batch planned again
    after ``offsets/N`` was lost (the checkpoint restored from a copy, the file deleted) does not."""
    def lines(text: Optional[str], skip: int) -> list:
        return [line.strip() for line in (text or "").splitlines()[skip:] if line.strip()]

    metadata = json.loads((lines(entry, 1) or ["{}"])[0])
    timing = {k: metadata.get(k) for k in ("batchTimestampMs", "batchWatermarkMs")}
    text = json.dumps([lines(previous, 2), timing, lines(entry, 2)], sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def written_already(marker: Optional[dict], batch_id: int, partition: int, input_hash: Optional[str],
                    share: "Share", delivery: Delivery) -> bool:
    """Whether this task partition's share of micro-batch ``batch_id`` is in Kafka already, by its
    newest ``marker``: False when the marker is of an earlier micro-batch (or none); True when it is of
    this one, read from the same offsets (``input_hash``, :func:`input_digest`) and holding the same
    records as ``share`` (a replay); :class:`ProgressMismatch` otherwise. A marker of a later
    micro-batch is a zombie's (a task attempt that outlived its micro-batch, whose failure Spark
    ignores) or a checkpoint behind its output (:func:`check_progress` stops that first)."""
    if marker is None or marker["batch"] < batch_id:
        return False
    if marker["batch"] > batch_id:
        raise ProgressMismatch(_behind(delivery, batch_id, partition, marker["batch"]))
    if marker.get("input") is not None and input_hash is not None and marker["input"] != input_hash:
        raise ProgressMismatch(_other_input(delivery, batch_id, partition))
    if marker.get("output") is not None and not share.matches(marker["output"]):
        raise ProgressMismatch(
            f"the replay of micro-batch {batch_id} computed other records for task partition {partition} than its "
            f"first run wrote to {delivery.output_topic} ({marker.get('records')} records then, {share.records} "
            f"now): its input changed in between (compacted, records deleted by retention with "
            f"FAIL_ON_DATA_LOSS=false) or the configuration did; skipping it would leave the join's state and its "
            f"output disagreeing. Restore the previous configuration until the micro-batch is committed if it "
            f"changed, else start again from a new CHECKPOINT_LOCATION into a new OUTPUT_TOPIC ({_DOCS})")
    return True


def _behind(delivery: Delivery, batch_id: int, partition: int, written: int) -> str:
    return (f"CHECKPOINT_LOCATION={delivery.location} is behind its output: micro-batch {batch_id} is next "
            f"here, but task partition {partition} already wrote micro-batch {written} to {delivery.output_topic} "
            f"(its marker is in PROGRESS_TOPIC={delivery.progress_topic}): the checkpoint was restored from an "
            f"older copy, or lost files of its offsets/ and commits/ logs, and going on would write records again "
            f"or skip them. Restore its newest state, or start again from a new CHECKPOINT_LOCATION into a new "
            f"OUTPUT_TOPIC ({_DOCS})")


def _other_input(delivery: Delivery, batch_id: int, partition: int) -> str:
    return (f"CHECKPOINT_LOCATION={delivery.location}: micro-batch {batch_id} was written by task partition "
            f"{partition} for other input offsets than the checkpoint now holds for it (its offsets/{batch_id} was "
            f"deleted, or the checkpoint restored from an older copy): skipping it would lose records, writing it "
            f"would repeat them. Restore the checkpoint's newest state, or start again from a new "
            f"CHECKPOINT_LOCATION into a new OUTPUT_TOPIC ({_DOCS})")


def check_progress(delivery: Delivery, batch_id: int, input_hash: Optional[str], partitions: int,
                   reader: Optional[ProgressReader] = None) -> None:
    """Before the first micro-batch of a run writes anything (on the driver): no task partition's
    newest marker is of a later micro-batch, nor of this one read from other offsets; else
    :class:`ProgressMismatch`, and nothing is written."""
    own = reader is None
    reader = reader or ProgressReader(delivery)
    try:
        for partition in range(partitions):
            marker = reader.last(partition)
            if marker is None or marker["batch"] < batch_id:
                continue
            if marker["batch"] > batch_id:
                raise ProgressMismatch(_behind(delivery, batch_id, partition, marker["batch"]))
            if marker.get("input") is not None and input_hash is not None and marker["input"] != input_hash:
                raise ProgressMismatch(_other_input(delivery, batch_id, partition))
    finally:
        if own:
            reader.close()


# -- a task's share ------------------------------------------------------------------------------------
class Share:
    """One task's share of a micro-batch, encoded, held until it is complete.

    Records are held in chunks of :data:`_CHUNK`, each one ``marshal`` blob (format version 2: no
    references and no interning, so the same records always make the same bytes): the chunk's
    bytes are its digest's input and what is kept, in memory up to ``spill_bytes`` of blobs, then
    in a temporary file on local disk (``TMPDIR``). A held share is bytes, not objects: a million
    records held as tuples and lists cost the garbage collector about a microsecond each while the
    join runs (``bench/share_bench.py``). Its :meth:`digest` (of each record's topic, key, value,
    headers and partition, in order) tells a replay that computed the same records from one that
    did not; :meth:`matches` also reads a digest of an earlier changejoin's marker."""

    def __init__(self, spill_bytes: Optional[int] = None):
        self.spill_bytes = spill_bytes_default() if spill_bytes is None else spill_bytes
        self._stored = 0  # records in stored chunks
        self.rows = 0  # the join's rows it was made of (a row may encode to no record)
        self._memory: list[bytes] = []
        self._chunk: list = []
        self._bytes = 0
        self._file: Any = None
        self._hash = hashlib.sha256()

    @classmethod
    def of(cls, records: Iterable[tuple], spill_bytes: Optional[int] = None) -> "Share":
        share = cls(spill_bytes)
        share.extend(records)
        return share

    def extend(self, records: Iterable[tuple]) -> None:
        chunk, full = self._chunk, _CHUNK
        for record in records:
            chunk.append(record)
            if len(chunk) >= full:
                self._store(chunk)
                chunk = self._chunk = []

    def _store(self, chunk: list) -> None:
        blob = marshal.dumps(chunk, _MARSHAL)
        # A dead letter's reason text is left out of the digest; a chunk that may hold one is found
        # by a search of its bytes, and only such a chunk is digested from a copy without it.
        self._hash.update(marshal.dumps(_digested(chunk), _MARSHAL) if _UNDIGESTED in blob else blob)
        self._stored += len(chunk)
        self._bytes += len(blob)
        if self._file is None and self._bytes <= self.spill_bytes:
            self._memory.append(blob)
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="changejoin-share-")
        self._file.write(len(blob).to_bytes(8, "big"))
        self._file.write(blob)

    def _complete(self) -> None:
        if self._chunk:
            self._store(self._chunk)
            self._chunk = []

    @property
    def records(self) -> int:
        return self._stored + len(self._chunk)

    @property
    def spilled(self) -> bool:
        self._complete()
        return self._file is not None

    def digest(self) -> str:
        """The digest of the share's records, tagged with how it was made (:data:`DIGEST_TAG`)."""
        self._complete()
        return DIGEST_TAG + self._hash.hexdigest()[:32]

    def matches(self, digest: str) -> bool:
        """Whether ``digest``, a marker's, is of these records: one made as :meth:`digest` is, or,
        untagged, one of an earlier changejoin's (a replay after an upgrade), made again here."""
        if digest.startswith(DIGEST_TAG):
            return digest == self.digest()
        return digest == _first_digest(self)

    def __iter__(self) -> Iterator[tuple]:
        self._complete()
        for blob in self._memory:
            yield from marshal.loads(blob)
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            while size := self._file.read(8):
                yield from marshal.loads(self._file.read(int.from_bytes(size, "big")))

    def close(self) -> None:
        self._memory, self._chunk = [], []
        if self._file is not None:
            self._file.close()
            self._file = None


def _digested(chunk: list) -> list:
    """``chunk`` without the headers a digest leaves out (:data:`_UNDIGESTED_HEADERS`)."""
    return [record if not record[3] else
            record[:3] + ([h for h in record[3] if h[0] not in _UNDIGESTED_HEADERS],) + tuple(record[4:])
            for record in chunk]


def _first_digest(records: Iterable[tuple]) -> str:
    """The share digest of the changejoin releases before :data:`DIGEST_TAG`: blake2b-128 over
    each record's topic, key, value and headers. Made only to read such a release's marker."""
    digest = hashlib.blake2b(digest_size=16)
    update = digest.update
    for record in records:
        key, value, headers = record[1], record[2], record[3]
        update(record[0].encode())
        update(b"\x00%d\x00" % (-1 if key is None else len(key)))
        if key:
            update(key)
        update(b"\x00%d\x00" % (-1 if value is None else len(value)))
        if value:
            update(value)
        for name, header in headers or ():
            if name not in _UNDIGESTED_HEADERS:
                update(b"\x00" + name.encode() + b"=")
                if header:
                    update(header)
        update(b"\x01")
    return digest.hexdigest()


def spill_bytes_default(memory: Optional[int] = None) -> int:
    """How many bytes of a share a task holds in memory: a sixteenth of the ``memory`` this process
    may use (by default its cgroup's limit, else the machine's), from 64 MiB to 1 GiB."""
    return max(64 << 20, min(1 << 30, (memory_limit() if memory is None else memory) // 16))


def init_transactions(producer: Any, timeout_s: float) -> None:
    """``producer.init_transactions()`` within ``timeout_s``, called again every
    :data:`INIT_NUDGE_S` until it returns. librdkafka (2.16) asks for a producer id again only on a
    fixed 500 ms timer once a request could not be sent or was refused: at a new producer's start,
    when the request comes before its connection to the broker the first metadata names is up (a
    third of the tasks' inits took 500-515 ms), and while the coordinator still completes the id's
    last transaction (a retried task, the start-up abort after a kill). A new call runs the request
    at once. Until the deadline only a fatal error ends the wait (librdkafka keeps trying the
    others, and names the last one at its timeout); at the deadline the last error is raised."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        step = min(INIT_NUDGE_S, deadline - time.monotonic())
        try:
            producer.init_transactions(max(step, 0.001))
            return
        except KafkaException as err:
            error = err.args[0] if err.args else None
            if not isinstance(error, KafkaError) or error.fatal() or time.monotonic() >= deadline:
                raise


class TaskTransaction:
    """One attempt of one task partition's share of a micro-batch. Create it when the task starts
    (the producer's ``init_transactions()`` begins at once, in a thread: about 18 ms against a
    local broker, mostly waiting: :func:`init_transactions`), then, once
    the share is complete, call :meth:`committed` and :meth:`write` if it is not written already,
    and :meth:`close` in every case."""

    def __init__(self, delivery: Delivery, partition: int, batch_id: int, attempt: int = 0):
        self.delivery, self.partition, self.batch_id, self.attempt = delivery, partition, batch_id, attempt
        self.tid = transactional_id(delivery.prefix, partition)
        self.timeout_s = delivery.timeout_ms / 1000.0
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
            producer = Producer(_conf(self.delivery, self.partition))
            with self._lock:
                self._producer = producer
            init_transactions(producer, self.timeout_s)
        except BaseException as err:  # noqa: BLE001 - reported by ready()
            self._error = err
        finally:
            self.init_seconds = time.perf_counter() - started

    def ready(self) -> None:
        """Wait for the producer's initialization; raise what it failed with."""
        self._thread.join()
        if self._error is not None:
            raise _explained(self._error, self.delivery, self.tid) from self._error

    def committed(self, reader: ProgressReader) -> Optional[dict]:
        """This task partition's newest committed marker. Only after the initialization: no older
        attempt can commit after it is read."""
        self.ready()
        return reader.last(self.partition)

    def write(self, share: Share, counts: dict, input_hash: Optional[str] = None,
              crash: Optional[Callable[[str, int], None]] = None) -> int:
        """Produce the ``share`` and the marker (with ``counts``, the share's digest and the batch's
        ``input_hash``) in one transaction, opened only now, and commit it. Returns how many records
        were written."""
        from confluent_kafka import KafkaException

        self.ready()
        producer, delivery = self._producer, self.delivery
        failures, on_delivery = failure_collector()

        started = time.perf_counter()
        try:
            producer.begin_transaction()
            sent = produce_each(producer, share, on_delivery, failures)
            if crash is not None:
                producer.flush(self.timeout_s)
                crash("mid-produce", self.batch_id)
            marker = {"batch": self.batch_id, "partition": self.partition, "attempt": self.attempt,
                      "records": sent, "counts": [[t, label, n] for (t, label), n in sorted(counts.items())],
                      "input": input_hash, "output": share.digest()}
            producer.produce(delivery.progress_topic, json.dumps(marker, sort_keys=True).encode(),
                             marker_key(delivery.checkpoint_id, self.partition), self.partition, on_delivery)
            if crash is not None:
                producer.flush(self.timeout_s)
                crash("before-commit", self.batch_id)
            producer.commit_transaction(self.timeout_s)
        except KafkaException as err:
            raise _explained(err, self.delivery, self.tid) from err
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
    """``producer.close()`` (confluent-kafka 2.13 and later), which aborts an open transaction;
    after a failure it may fail or warn too (its abort fails after a fenced commit): the first
    failure is what matters."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            producer.close()
    except Exception:  # noqa: BLE001
        log.debug("closing the transactional producer failed", exc_info=True)


# -- the start-up abort --------------------------------------------------------------------------------
def abort_transactional_ids(delivery: Delivery, ids: Iterable[str], timeout_s: float = 120.0,
                            required: Optional[Iterable[str]] = None) -> float:
    """Initialize each transactional id once, in parallel, which aborts any transaction a killed
    run left open (and completes one whose commit had begun), fences any producer still using it,
    and checks the transaction timeout and the ACLs against the broker. An id outside ``required``
    (all of them by default: ids of an older prefix) that the principal may no longer use is logged
    and passed over. Returns the seconds it took."""
    from confluent_kafka import KafkaError, Producer

    ids = sorted(set(ids))
    required = set(ids if required is None else required)

    def init(tid: str) -> None:
        producer = Producer(_conf_of(delivery, tid))
        try:
            init_transactions(producer, timeout_s)
        except BaseException as err:  # noqa: BLE001
            kafka_error = err.args[0] if err.args else None
            if (tid not in required and getattr(kafka_error, "code", lambda: None)()
                    == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
                log.warning("the transactional id %r, which this checkpoint used before, may no longer be used: what "
                            "it left open is aborted by the broker after its transaction timeout", tid)
                return
            raise _explained(err, delivery, tid) from err
        finally:
            _close(producer)

    started = time.perf_counter()
    with ThreadPoolExecutor(min(16, max(1, len(ids)))) as pool:
        for future in [pool.submit(init, tid) for tid in ids]:
            future.result()
    return time.perf_counter() - started


def abort_open_transactions(delivery: Delivery, partitions: int, timeout_s: float = 120.0) -> float:
    """:func:`abort_transactional_ids` of ``<prefix>-0`` .. ``<prefix>-<partitions - 1>``."""
    return abort_transactional_ids(delivery, [transactional_id(delivery.prefix, p) for p in range(partitions)],
                                   timeout_s)

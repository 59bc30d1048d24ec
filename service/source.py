"""Kafka source for Spark Structured Streaming, as a PySpark Python Data Source.

The JVM Kafka connector is not available to this project, so Kafka is read from Python with
confluent-kafka (librdkafka). The source is registered under the short name
``changejoin_kafka``::

    register(spark)
    df = (spark.readStream.format("changejoin_kafka")
          .option("bootstrap.servers", "broker:9092")
          .option("topic", "orders")
          .option("startingOffsets", "earliest")
          .option("maxRecordsPerTrigger", "10000")
          .option("kafka.security.protocol", "SASL_SSL")
          .load())

Options (all strings, names are case-insensitive):

``bootstrap.servers``      required.
``topic``                  required; one topic.
``startingOffsets``        ``earliest`` (default) or ``latest``; only used when the query has no
                           checkpoint yet.
``maxRecordsPerTrigger``   optional cap on the records of one micro-batch, over all partitions,
                           shared max-min fairly between the partitions that have data.
``failOnDataLoss``         ``true`` (default): fail when records that should be read are gone
                           (retention, topic re-created); ``false``: log, skip what is gone, and
                           read a re-created partition again from its beginning.
``readTimeoutSeconds``     a task fails when it makes no progress for this long (default 300).
``offsetsTimeoutSeconds``  the driver retries offset look-ups this long before failing (default 300);
                           each attempt waits up to ``kafka.socket.timeout.ms`` (librdkafka's
                           timeout of admin requests), 30 s if it is not set.
``mapper``, ``mapper.config``, ``mapper.secret``  see below.
``rawArrow``               ``true`` (default): raw rows are handed to Spark as Arrow batches
                           (about 1.7x the throughput of tuples); ``false``: as tuples.
``idleTimeoutMs``          optional; heartbeats while the topic is idle (below). Needs a mapper
                           with a ``heartbeat`` method.
``stopFile``               optional; a path: while a file exists there, the source plans no new
                           input (a graceful stop: the micro-batch in flight ends, no other begins).
``kafka.<property>``       passed to librdkafka as ``<property>`` (security, SASL, tuning...).
                           Their values are never logged.

Offsets are a JSON dict ``{"<partition>": next_offset}`` kept by Spark in the query checkpoint,
so a restarted query resumes exactly where it stopped. They also hold ``"topic_id"``, Kafka's id of
the topic they are offsets of, so that a topic deleted and re-created under the same name is
noticed whatever its offsets (data loss, as above); ``"lost"``, the records skipped as lost since
the checkpoint began, when any were; and with ``idleTimeoutMs``, ``"heartbeat"`` (see below).
Partitions that appear later are read from their beginning: the micro-batch that first sees one
logs where it starts and reads none of it, so that every range read is in Spark's offset log and a
replay reads what the first run read. Each
micro-batch has one Spark input partition per Kafka partition that has records in the batch's
range; a task assigns a consumer the partition at the range start and reads up to the range
end (exclusive). It never subscribes, never commits offsets and does not depend on
consumer-group state. The consumers outlive their tasks: each Python worker process keeps the ones
its tasks read whole ranges with, idle and unassigned, for its next tasks (:class:`ConsumerPool`).

Rows: by default the raw schema :data:`RAW_SCHEMA`. With ``mapper = "package.module:factory"``
and ``mapper.config = <JSON>``, ``factory(json.loads(config))`` must return an object with a
``schema`` attribute (a Spark DDL string, which becomes the source's schema) and a
``map(record: KafkaRecord) -> Iterable[tuple]`` method; it runs inside the reading task, so the
records are decoded without another Python hop. A mapper that also has
``map_all(records: Iterable[KafkaRecord]) -> Iterable[tuple]`` is given the task's records
together instead (to pack rows of several records into one). The module must be importable by Spark's Python
workers. ``mapper.secret`` (JSON object, optional) is merged into the config: its option name
matches Spark's ``spark.redaction.regex``, so Spark hides its value wherever it shows options.

Idle heartbeats (``idleTimeoutMs``): an input that receives nothing holds an event-time query's
watermark back (Spark's global watermark is the minimum over the inputs). With this option the
driver, when planning, notices that the topic has had nothing new to read for ``idleTimeoutMs``
of wall-clock time and advances the offset's ``"heartbeat"`` component to the current wall-clock
epoch milliseconds; while the topic stays idle, again each time ``idleTimeoutMs`` has passed
since the previous heartbeat's micro-batch was done (so heartbeats are at least that far apart,
and the query sees the topic with nothing new in between). The micro-batch that reads up to such
an offset has one extra input partition, whose task yields the mapper's
``heartbeat(event_time_ms) -> Iterable[tuple]`` rows for that instant. A query that takes its
watermark from those rows sees this input's watermark jump to about now minus its delay, so the
input stops holding the global watermark back. The heartbeat's time is part of the offset, which
Spark logs in the checkpoint before running the batch, so a replayed batch replays the same
heartbeat. The idle clock itself is driver memory: it restarts with the query. No heartbeats
under ``Trigger.AvailableNow`` (its run ends when the records available at its start are read).
"""

from __future__ import annotations

import atexit
import datetime as _dt
import importlib
import json
import logging
import os
import threading
import time
import uuid
from collections import namedtuple
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .errors import ChangejoinError
from .logs import kafka_logger

log = logging.getLogger(__name__)

SHORT_NAME = "changejoin_kafka"

RAW_SCHEMA = (
    "topic string, partition int, offset long, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)

_RAW_FIELDS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]

#: One Kafka record as handed to a mapper. ``timestamp_ms`` is None when the record has none;
#: ``headers`` is a list of ``(str, bytes | None)`` (empty when the record has no headers).
KafkaRecord = namedtuple(
    "KafkaRecord", ["topic", "partition", "offset", "timestamp_ms", "key", "value", "headers"]
)

KAFKA_PREFIX = "kafka."
DEFAULT_READ_TIMEOUT_S = 300.0
DEFAULT_OFFSETS_TIMEOUT_S = 300.0
_RETRY_WARNING_INTERVAL_S = 60.0  # while the brokers do not answer, one warning a minute
_ARROW_BATCH_ROWS = 10_000
_CONSUME_BATCH = 1_000
#: How long one ``consume`` call waits for its batch to fill. librdkafka returns a batch when it
#: holds as many messages as asked for or when this has passed, and a range whose last offsets are
#: transaction markers (every range of a live transactional input that ends at the log's end)
#: never fills its batch: markers take offsets but are no messages. A long wait here is paid by
#: every such reading task of every micro-batch (it was 1 s); a short one only makes a reader that
#: outpaces its fetches ask again. Progress, not this, decides when a read gives up
#: (``readTimeoutSeconds``).
_CONSUME_WAIT_S = 0.02
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
#: The offset component holding the time of the latest idle heartbeat (epoch milliseconds).
HEARTBEAT = "heartbeat"
#: The offset component counting the records lost since the checkpoint began: gone (retention, a
#: re-created topic) before they were read, skipped with failOnDataLoss=false. Absent while 0.
LOST = "lost"
#: The offset component naming the topic the offsets are of (Kafka's topic id): a topic deleted and
#: re-created under the same name has another id, and its offsets start again at 0.
TOPIC_ID = "topic_id"
_NOT_PARTITIONS = (HEARTBEAT, LOST, TOPIC_ID)


class KafkaSourceError(RuntimeError, ChangejoinError):
    """The source cannot read what it must read (timeouts, lost data, bad options)."""


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise KafkaSourceError(f"option {name!r} must be true or false, got {raw!r}")


def _float_option(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise KafkaSourceError(f"option {name!r} must be a number, got {raw!r}") from None
    if value <= 0:
        raise KafkaSourceError(f"option {name!r} must be positive, got {raw!r}")
    return value


def _positive_int_option(options: Mapping[str, str], name: str) -> Optional[int]:
    """An optional positive integer option; None when absent or blank."""
    raw = options.get(name.lower())
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise KafkaSourceError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaSourceError(f"option {name!r} must be positive")
    return value


class SourceOptions:
    """The parsed, validated options of one source. Picklable (plain data only)."""

    def __init__(self, options: Mapping[str, str]):
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        self.bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
        if not self.bootstrap:
            raise KafkaSourceError("option 'bootstrap.servers' is required")
        self.topic = opts.get("topic")
        if not self.topic:
            raise KafkaSourceError("option 'topic' is required")
        self.starting = opts.get("startingoffsets", "earliest").strip().lower()
        if self.starting not in ("earliest", "latest"):
            raise KafkaSourceError(
                f"option 'startingOffsets' must be 'earliest' or 'latest', got {self.starting!r}"
            )
        self.max_records = _positive_int_option(opts, "maxRecordsPerTrigger")
        self.fail_on_data_loss = _bool_option(opts, "failOnDataLoss", True)
        self.read_timeout_s = _float_option(opts, "readTimeoutSeconds", DEFAULT_READ_TIMEOUT_S)
        self.offsets_timeout_s = _float_option(
            opts, "offsetsTimeoutSeconds", DEFAULT_OFFSETS_TIMEOUT_S
        )
        self.mapper_spec = opts.get("mapper") or None
        self.mapper_config = opts.get("mapper.config", "{}")
        self.mapper_secret = opts.get("mapper.secret")
        self.idle_timeout_ms = _positive_int_option(opts, "idleTimeoutMs")
        self.stop_file = opts.get("stopfile") or None
        # Client properties: secrets may be among them, so they are never logged.
        self.client_props: Dict[str, str] = {
            k[len(KAFKA_PREFIX) :]: v
            for k, v in opts.items()
            if k.startswith(KAFKA_PREFIX) and k != "kafka.bootstrap.servers"
        }

    def describe(self) -> str:
        """A loggable summary: client property names only, never their values."""
        props = ",".join(sorted(self.client_props)) or "-"
        return (
            f"topic={self.topic} bootstrap={self.bootstrap} startingOffsets={self.starting} "
            f"maxRecordsPerTrigger={self.max_records} idleTimeoutMs={self.idle_timeout_ms} "
            f"mapper={self.mapper_spec} clientProps=[{props}]"
        )

    def admin_config(self) -> Dict[str, Any]:
        # librdkafka's informational lines (level 6, e.g. "Purging 1 unserved events from background
        # queue" when the planner's process ends) tell nobody anything: warnings and errors only,
        # unless the kafka.log_level option says otherwise.
        conf: Dict[str, Any] = {"bootstrap.servers": self.bootstrap, "log_level": 4}
        conf.update(_only_common_props(self.client_props))
        conf["logger"] = kafka_logger(self.client_props)
        return conf

    def consumer_config(self) -> Dict[str, Any]:
        conf: Dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            # librdkafka insists on a group.id; it is never used for anything (no subscribe, no
            # commits), so its value does not matter.
            "group.id": "changejoin-source-" + uuid.uuid4().hex[:12],
            "client.id": "changejoin-source",
            "auto.offset.reset": "error" if self.fail_on_data_loss else "earliest",
            "allow.auto.create.topics": False,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) whenever its
            # prefetch queue is full; a reader that drains the queue as fast as it can loses
            # most of a second per pause (measured: 1M rec/s -> 170k rec/s on 200k records).
            "fetch.queue.backoff.ms": 20,
            # A kept consumer (ConsumerPool) whose previous range ended at the log end has a long
            # poll in flight there, and librdkafka sends a broker one fetch at a time: the next
            # range's first fetch waits for it, up to this long (500 ms by default). A range's
            # records exist when it is read, so only the poll past its end ever waits.
            "fetch.wait.max.ms": 10,
        }
        conf.update(self.client_props)
        conf["logger"] = kafka_logger(self.client_props)
        # Not overridable: the reader depends on these.
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        conf["enable.partition.eof"] = True
        return conf


# Properties that only make sense for a consumer; an AdminClient would warn about them.
_CONSUMER_ONLY_PREFIXES = (
    "group.",
    "enable.auto",
    "auto.",
    "fetch.",
    "max.partition.fetch",
    "queued.",
    "isolation.level",
    "session.timeout",
    "heartbeat.",
    "max.poll",
    "partition.assignment",
    "check.crcs",
    "enable.partition.eof",
    "allow.auto.create.topics",
    "client.rack",
    "consume.",
    "coordinator.",
)


def _only_common_props(props: Mapping[str, str]) -> Dict[str, str]:
    return {k: v for k, v in props.items() if not k.startswith(_CONSUMER_ONLY_PREFIXES)}


# --------------------------------------------------------------------------------------------
# Mapper hook
# --------------------------------------------------------------------------------------------


def load_mapper(spec: str, config_json: str, secret_json: str | None = None) -> Any:
    """Import ``package.module:factory`` and return ``factory(config)``: ``config_json`` with
    ``secret_json``'s entries merged in."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise KafkaSourceError(f"option 'mapper' must look like 'package.module:factory', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise KafkaSourceError(
            f"cannot import mapper module {module_name!r} (is it on the Python workers' "
            f"PYTHONPATH?): {exc}"
        ) from exc
    factory: Any = module
    for part in attr.split("."):
        factory = getattr(factory, part)
    try:
        config = json.loads(config_json) if config_json else {}
    except ValueError as exc:
        raise KafkaSourceError(f"option 'mapper.config' is not valid JSON: {exc}") from exc
    if secret_json:
        try:
            config.update(json.loads(secret_json))
        except (ValueError, TypeError, AttributeError):
            raise KafkaSourceError("option 'mapper.secret' is not a JSON object") from None
    mapper = factory(config)
    if not isinstance(getattr(mapper, "schema", None), str) or not callable(
        getattr(mapper, "map", None)
    ):
        raise KafkaSourceError(
            f"mapper factory {spec!r} must return an object with a 'schema' DDL string and a "
            "'map(record)' method"
        )
    return mapper


# --------------------------------------------------------------------------------------------
# Offsets planning (driver side)
# --------------------------------------------------------------------------------------------


def _offsets_dict(
    offsets: Mapping[int, int], heartbeat: Optional[int] = None, lost: int = 0, topic_id: Optional[str] = None
) -> Dict[str, Any]:
    """The JSON form Spark stores: string partition keys, in partition order (Spark compares
    offsets by their JSON text, so the order must be stable), then the heartbeat, the count of
    lost records and the topic's id if any."""
    out: Dict[str, Any] = {str(p): int(offsets[p]) for p in sorted(offsets)}
    if heartbeat is not None:
        out[HEARTBEAT] = int(heartbeat)
    if lost:
        out[LOST] = int(lost)
    if topic_id:
        out[TOPIC_ID] = str(topic_id)
    return out


def _parse_offsets(offsets: Optional[Mapping[str, Any]]) -> Dict[int, int]:
    return {int(p): int(o) for p, o in (offsets or {}).items() if p not in _NOT_PARTITIONS}


def _lost_of(offsets: Optional[Mapping[str, Any]]) -> int:
    return int((offsets or {}).get(LOST, 0))


def _topic_id_of(offsets: Optional[Mapping[str, Any]]) -> Optional[str]:
    value = (offsets or {}).get(TOPIC_ID)
    return None if value is None else str(value)


def _heartbeat_of(offsets: Optional[Mapping[str, Any]]) -> Optional[int]:
    value = (offsets or {}).get(HEARTBEAT)
    return None if value is None else int(value)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def fair_shares(lags: Mapping[int, int], limit: int) -> Dict[int, int]:
    """Split ``limit`` records between partitions with the given lags, max-min fairly: every
    partition gets an equal share, and what a partition cannot use goes to the others. The
    result never exceeds a partition's lag, and sums to ``min(limit, sum(lags))``."""
    shares = {p: 0 for p in lags}
    pending = sorted((lag, p) for p, lag in lags.items() if lag > 0)
    remaining = limit
    for i, (lag, p) in enumerate(pending):
        share = remaining // (len(pending) - i)
        if i == len(pending) - 1:
            share = remaining
        take = min(lag, share)
        shares[p] = take
        remaining -= take
    # Rounding can leave records unassigned while some partition still has lag: hand them out
    # one at a time, round robin, lowest partition first (deterministic).
    while remaining > 0:
        open_ = [p for lag, p in sorted(pending, key=lambda item: item[1]) if shares[p] < lag]
        if not open_:
            break
        for p in open_[:remaining]:
            shares[p] += 1
            remaining -= 1
    return shares


class KafkaInputPartition(InputPartition):
    """One Kafka partition's offset range ``[start, end)`` in one micro-batch, and the id of the
    topic the offsets are of (None when the offsets do not name it): a reading task never reads a
    topic re-created under the same name with a consumer that knew the one before
    (:class:`ConsumerPool`)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, topic_id: Optional[str] = None):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.topic_id = topic_id

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] {self.start}..{self.end})"


class HeartbeatInputPartition(InputPartition):
    """The idle heartbeat of one micro-batch: the mapper's heartbeat rows for ``event_time_ms``."""

    def __init__(self, topic: str, event_time_ms: int):
        super().__init__((topic, HEARTBEAT, event_time_ms))
        self.topic = topic
        self.event_time_ms = event_time_ms

    def __repr__(self) -> str:
        return f"HeartbeatInputPartition({self.topic} at {self.event_time_ms})"


class _OffsetsClient:
    """Driver-side look-ups of a topic's partitions and offsets, with retries."""

    def __init__(self, opts: SourceOptions):
        self._opts = opts
        # Each attempt's bound: librdkafka's for admin requests when it is set (it defaults to 60 s).
        self._request_timeout_s = float(opts.client_props.get("socket.timeout.ms", 30_000)) / 1000.0
        self._admin = self._new_admin()
        self._warned_missing = False
        self._warned_at = -_RETRY_WARNING_INTERVAL_S  # when a retry was last warned of
        #: The topic's id as of the latest look-up of its partitions (None while it does not exist).
        self.topic_id: Optional[str] = None

    def _new_admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._opts.admin_config())

    def _retrying(self, what: str, fn: Callable[[], Any]) -> Any:
        started = time.monotonic()
        deadline = started + self._opts.offsets_timeout_s
        delay = 0.2
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - retried, then re-raised
                self._admin.poll(0)  # hands the client's log lines (why it failed) to the logger
                if _is_permanent(exc) or time.monotonic() + delay > deadline:
                    raise KafkaSourceError(
                        f"{what} for topic {self._opts.topic!r} failed: {exc}"
                    ) from exc
                self._warn_retrying(what, exc, time.monotonic() - started)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                # A fresh client: librdkafka's admin client keeps the partition leaders and
                # leader epochs it cached, and after a leader change (a broker restart) it
                # sends the stale epoch again and again (FENCED_LEADER_EPOCH) for minutes.
                self._admin = self._new_admin()

    def _warn_retrying(self, what: str, exc: BaseException, waited_s: float) -> None:
        """One warning a minute while the brokers do not answer (an outage is ridden out, for up to
        ``offsetsTimeoutSeconds``; the client's own lines say why, once per 30 s)."""
        now = time.monotonic()
        if now - self._warned_at < _RETRY_WARNING_INTERVAL_S:
            return
        self._warned_at = now
        error = exc.args[0] if getattr(exc, "args", None) else exc
        reason = error.str() if hasattr(error, "str") else str(exc)
        log.warning("topic %s: %s failed, retrying (for %.0f s so far, up to %.0f s): %s", self._opts.topic, what,
                    waited_s, self._opts.offsets_timeout_s, reason)

    def partitions(self) -> List[int]:
        """The topic's partitions; empty if the topic does not exist (yet). Also updates
        :attr:`topic_id`."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        def describe() -> tuple:
            futures = self._admin.describe_topics(
                TopicCollection([self._opts.topic]), request_timeout=self._request_timeout_s
            )
            try:
                desc = futures[self._opts.topic].result()
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if getattr(err, "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return None, []
                raise
            topic_id = str(desc.topic_id) if getattr(desc, "topic_id", None) is not None else None
            return topic_id, sorted(p.id for p in desc.partitions)

        self.topic_id, found = self._retrying("describing partitions", describe)
        if not found and not self._warned_missing:
            log.warning("topic %s does not exist (yet); reading nothing from it", self._opts.topic)
            self._warned_missing = True
        return found

    def offsets(self, partitions: Sequence[int], which: str) -> Dict[int, int]:
        """``earliest`` (log start) or ``latest`` offsets of the given partitions. ``latest`` is
        the last stable offset under the consumer's isolation level (read_committed unless the
        ``kafka.isolation.level`` option says otherwise), i.e. the end of what a consumer can read."""
        if not partitions:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        level = self._opts.client_props.get("isolation.level", "read_committed").lower()
        isolation = (
            IsolationLevel.READ_UNCOMMITTED
            if level == "read_uncommitted"
            else IsolationLevel.READ_COMMITTED
        )
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()

        def lookup() -> Dict[int, int]:
            futures = self._admin.list_offsets(
                {TopicPartition(self._opts.topic, p): spec for p in partitions},
                isolation_level=isolation,
                request_timeout=self._request_timeout_s,
            )
            return {tp.partition: int(f.result().offset) for tp, f in futures.items()}

        return self._retrying(f"listing {which} offsets", lookup)

    def latest(self) -> Dict[int, int]:
        return self.offsets(self.partitions(), "latest")


def _is_permanent(exc: BaseException) -> bool:
    """Errors that retrying cannot fix (authorization, bad configuration)."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, (ValueError, TypeError)):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
        if err.fatal():
            return True
        return err.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError._AUTHENTICATION,
            KafkaError._INVALID_ARG,
        )
    return False


# --------------------------------------------------------------------------------------------
# Consumers kept between micro-batches (executor side)
# --------------------------------------------------------------------------------------------

#: At most this many idle consumers per process; the least recently used is closed first. A Spark
#: Python worker runs one task at a time, so it needs one per consumer configuration (the inputs of
#: one service share theirs).
POOL_MAX_IDLE = 4
#: An idle consumer unused for this long is closed.
POOL_IDLE_TIMEOUT_S = 300.0


class _ClientLog:
    """A kept consumer's logger: the service's Kafka logger (:func:`kafka_logger`), which can be
    muted. librdkafka hands a client's lines over when the client is polled or closed, so the lines
    of an idle consumer (a broker that went away meanwhile: connections no read waited for) come
    at its next read or its close; they are dropped there. A read's own lines, and those of a
    consumer closed after a failed read, go through."""

    __slots__ = ("logger", "muted")

    def __init__(self, logger: logging.Logger):
        self.logger = logger
        self.muted = False

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        if not self.muted:
            self.logger.log(level, msg, *args, **kwargs)


#: At most this many events (errors) of an idle consumer are drained before a read.
_STALE_EVENTS = 1000


class _Kept:
    """A consumer of the pool, with what it was made for."""

    __slots__ = ("consumer", "log", "key", "topic_ids", "idle_since")

    def __init__(self, consumer: Any, log: _ClientLog, key: tuple):
        self.consumer = consumer
        self.log = log
        self.key = key
        #: The id of each topic (by name) it has read: a topic re-created since is another log.
        self.topic_ids: Dict[str, str] = {}
        self.idle_since = 0.0


def _consumer_key(conf: Mapping[str, Any]) -> tuple:
    """Everything of a consumer configuration that makes the client, but its random ``group.id``
    (never used) and its logger (the one named logger; its level follows the ``debug`` property,
    which is in the key)."""
    return tuple(sorted((k, str(v)) for k, v in conf.items() if k not in ("group.id", "logger")))


class ConsumerPool:
    """The Kafka consumers of one process, kept from one reading task to the next.

    Spark runs a micro-batch's reading tasks in its Python workers and reuses a worker for task
    after task (``spark.python.worker.reuse``, the default), so a consumer kept by the worker's
    process spares the next task a new one: the client, its connections, the metadata and the close
    (bench/results/RESULTS.md found ~8 ms of a reading task's 80-90). Measured on 2 cores with a
    local broker and librdkafka 2.16: outside Spark 7-9 ms median, 16-19 ms p90 per range with a new
    consumer against 1-4 ms with a kept one; inside Spark (local[2], two partitions, ~65 records a
    range, two runs each) a task's read took 7.8-15.3 ms median, 15-50 ms p90 with a new consumer,
    2.4-2.6 ms median, 6-8 ms p90 with kept ones (one per worker throughout, against one per read).

    A read takes an idle consumer of its configuration (:func:`_consumer_key`) or creates one,
    assigns it its partition at the range's start, and gives it back once it has read the whole
    range. After an error, a timeout, or a task that stopped reading early (its generator closed)
    the consumer is closed instead, so no kept consumer carries a failure into another range. What
    a consumer fetched past its range's end is dropped: every read assigns its own start, so a
    replayed micro-batch or a retried task reads exactly its range, and a stale end-of-partition
    event of an earlier assignment never ends a read (librdkafka drops the events of an assignment
    once another replaces it; the reader also ignores those of other partitions).

    Keyed by configuration, not by partition, and idle consumers unassigned (they fetch nothing):

    - Spark gives a partition's next range to any idle Python worker, rarely the one that read the
      previous range (measured: a partition's ranges alternate between the workers). Kept per
      partition, a consumer would seldom read on, and every worker would keep one per partition.
    - An assigned consumer goes on fetching while idle, up to ``queued.max.messages.kbytes`` (64 MB
      by default; measured: 33,203 records, 64,841 KB queued after a 100-record range of a backlog)
      in every worker, for ranges that other workers mostly read. Unassigning empties that queue, as
      pausing does; a resumed partition then waited ~400 ms for its next fetch (measured).
    - Reading on without a new assignment takes ~0.1 ms instead of 1-4 ms, but only when one worker
      reads a partition's consecutive ranges. A pool kept per partition and paused between
      micro-batches, measured inside Spark, made the reading tasks slower (bench/results/RESULTS.md).
    - A consumer given back after reading up to the log end has a long poll in flight, which the
      next assignment's first fetch waits for: the source's ``fetch.wait.max.ms`` is 10 ms
      (:meth:`SourceOptions.consumer_config`; measured: p90 100 ms per read with the default 500).

    A consumer that has read a topic under one topic id is not used for the topic under another
    (deleted and re-created: its client's metadata is of the old log; librdkafka 2.16 read the new
    log right, 0.5 s later); a read whose partition does not name the id (offsets of an older
    checkpoint) takes any. The assignment at the range's start makes ``auto.offset.reset``
    (``failOnDataLoss``) act as on a new consumer. What an idle consumer queued (errors and
    librdkafka's lines of connections no read waited for, a broker gone meanwhile) is dropped when
    it is taken or closed (:class:`_ClientLog`).

    Bounds: at most :data:`POOL_MAX_IDLE` idle consumers (the least recently used is closed), none
    idle longer than :data:`POOL_IDLE_TIMEOUT_S` (closed by a timer thread, or by the next read).
    The pool closes its consumers at the process's exit (``atexit``); Spark's daemon ends a worker
    with ``os._exit``, which runs no exit handler, and the operating system closes its sockets
    then: a consumer that never joined a group leaves nothing on the brokers. A forked child
    process forgets its parent's consumers (their librdkafka threads are not in it). Thread-safe,
    though a Spark worker reads one range at a time. :attr:`created` counts the consumers this
    process created (tests prove reuse with it: :func:`consumers_created`)."""

    def __init__(
        self,
        max_idle: int = POOL_MAX_IDLE,
        idle_timeout_s: float = POOL_IDLE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_idle = max_idle
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: List[_Kept] = []  # least recently given back first
        self._timer: Optional[threading.Timer] = None
        self.created = 0
        self.closed = 0

    def take(self, opts: SourceOptions, topic: str, topic_id: Optional[str]) -> _Kept:
        """An idle consumer of ``opts``'s configuration that may read ``topic`` (the most recently
        given back), else a new one."""
        conf = opts.consumer_config()
        key = _consumer_key(conf)
        found: Optional[_Kept] = None
        with self._lock:
            stale = self._expired()
            for i in range(len(self._idle) - 1, -1, -1):
                kept = self._idle[i]
                if kept.key != key:
                    continue
                seen = kept.topic_ids.get(topic)
                if topic_id is not None and seen is not None and seen != topic_id:
                    stale.append(self._idle.pop(i))  # the topic was re-created since it read it
                    continue
                found = self._idle.pop(i)
                break
        self._close_all(stale, quiet=True)
        if found is None:
            from confluent_kafka import Consumer

            client_log = _ClientLog(conf["logger"])
            found = _Kept(Consumer({**conf, "logger": client_log}), client_log, key)
            with self._lock:
                self.created += 1
        else:
            # What it queued while idle (lines, errors of its connections) is not this read's.
            found.log.muted = True
            try:
                for _ in range(_STALE_EVENTS):
                    if found.consumer.poll(0) is None:
                        break
            finally:
                found.log.muted = False
        if topic_id is not None:
            found.topic_ids[topic] = topic_id
        return found

    def give_back(self, kept: _Kept) -> None:
        """Keep ``kept``, unassigned (it fetches nothing while idle); close what that puts over
        the bounds."""
        try:
            kept.consumer.unassign()
        except Exception:  # noqa: BLE001 - a client that cannot unassign is not kept
            self.discard(kept)
            return
        with self._lock:
            kept.idle_since = self._clock()
            self._idle.append(kept)
            stale = self._expired()
            while len(self._idle) > self.max_idle:
                stale.append(self._idle.pop(0))
            if self._idle and self._timer is None:
                self._timer = threading.Timer(self.idle_timeout_s, self._reap)
                self._timer.daemon = True
                self._timer.start()
        self._close_all(stale, quiet=True)

    def discard(self, kept: _Kept) -> None:
        """Close ``kept`` rather than keep it (after a failed read: its lines go through)."""
        self._close_all([kept], quiet=False)

    def idle(self) -> int:
        """How many consumers are idle in the pool."""
        with self._lock:
            return len(self._idle)

    def close_idle(self) -> None:
        """Close the consumers idle for :attr:`idle_timeout_s` or longer."""
        with self._lock:
            stale = self._expired()
        self._close_all(stale, quiet=True)

    def close_all(self) -> None:
        """Close every idle consumer (at the process's exit)."""
        with self._lock:
            stale, self._idle = self._idle, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._close_all(stale, quiet=True)

    def forget(self) -> None:
        """Drop every idle consumer without closing it: in a forked child, whose process has none
        of their librdkafka threads (closing one would wait for them)."""
        self._lock = threading.Lock()
        self._idle = []
        self._timer = None

    def _reap(self) -> None:
        with self._lock:
            self._timer = None
            stale = self._expired()
            if self._idle:
                self._timer = threading.Timer(self.idle_timeout_s, self._reap)
                self._timer.daemon = True
                self._timer.start()
        self._close_all(stale, quiet=True)

    def _expired(self) -> List[_Kept]:
        """Take the consumers idle too long out of the pool (the lock held)."""
        now = self._clock()
        stale = [k for k in self._idle if now - k.idle_since >= self.idle_timeout_s]
        if stale:
            self._idle = [k for k in self._idle if now - k.idle_since < self.idle_timeout_s]
        return stale

    def _close_all(self, kept: Iterable[_Kept], quiet: bool) -> None:
        for k in kept:
            k.log.muted = quiet  # an idle consumer's lines are of connections nobody waited for
            try:
                k.consumer.close()
            except Exception as exc:  # noqa: BLE001 - closing is best effort
                log.debug("closing a Kafka consumer failed: %s", exc)
            with self._lock:
                self.closed += 1


_CONSUMERS = ConsumerPool()
atexit.register(_CONSUMERS.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_CONSUMERS.forget)


def consumers_created() -> int:
    """How many Kafka consumers this process has created to read ranges (tests count reuse)."""
    return _CONSUMERS.created


# --------------------------------------------------------------------------------------------
# Reading one offset range (executor side)
# --------------------------------------------------------------------------------------------


def _iter_records(
    opts: SourceOptions, part: KafkaInputPartition, pool: Optional[ConsumerPool] = None
) -> Iterator[Any]:
    """Yield the confluent-kafka messages of ``part`` in offset order: every record in
    ``[start, end)`` that a consumer can see (compaction and transaction markers leave gaps).
    Raises KafkaSourceError when no progress is made for ``readTimeoutSeconds``. The consumer
    comes from ``pool`` (this process's by default) and goes back to it only when the whole range
    was read: not after an error, nor when the caller stops early (the generator closed)."""
    from confluent_kafka import KafkaError, TopicPartition

    if part.end <= part.start:
        return
    pool = _CONSUMERS if pool is None else pool
    kept = pool.take(opts, part.topic, getattr(part, "topic_id", None))
    consumer = kept.consumer
    read_whole_range = False
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        next_offset = part.start
        last_progress = time.monotonic()
        last_error: Optional[str] = None
        while next_offset < part.end:
            msgs = consumer.consume(min(_CONSUME_BATCH, part.end - next_offset), _CONSUME_WAIT_S)
            progressed = False
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if msg.topic() is not None and (msg.topic(), msg.partition()) != (part.topic, part.partition):
                        continue  # of a partition the consumer read before (librdkafka drops those anyway)
                    if err.code() == KafkaError._PARTITION_EOF:
                        # The end of the log is at msg.offset(): everything before it was seen.
                        if msg.offset() >= part.end:
                            next_offset = part.end
                            progressed = True
                            break
                        continue
                    if err.code() == KafkaError._AUTO_OFFSET_RESET or err.fatal():
                        raise KafkaSourceError(
                            f"cannot read {part.topic}[{part.partition}] offsets "
                            f"{next_offset}..{part.end}: {err.str()} (records may have been "
                            "deleted by retention or the topic re-created; set "
                            "failOnDataLoss=false to skip them)"
                            if err.code() == KafkaError._AUTO_OFFSET_RESET
                            else f"fatal error reading {part.topic}[{part.partition}]: {err.str()}"
                        )
                    last_error = err.str()
                    continue
                offset = msg.offset()
                if offset < next_offset:
                    continue  # already yielded (cannot happen after an assignment, but be safe)
                if offset >= part.end:
                    next_offset = part.end
                    progressed = True
                    break
                next_offset = offset + 1
                progressed = True
                yield msg
            if progressed:
                last_progress = time.monotonic()
                continue
            if next_offset >= part.end:
                break
            if not msgs:
                # Control records (transaction markers) advance the position without a message.
                pos = consumer.position([TopicPartition(part.topic, part.partition)])
                if pos and pos[0].offset >= part.end:
                    break
            if time.monotonic() - last_progress > opts.read_timeout_s:
                raise KafkaSourceError(
                    f"timed out reading {part.topic}[{part.partition}]: no progress for "
                    f"{opts.read_timeout_s:.0f}s at offset {next_offset}, the range ends at "
                    f"{part.end}" + (f"; last error: {last_error}" if last_error else "")
                )
        read_whole_range = True
    finally:
        if read_whole_range:
            pool.give_back(kept)
        else:
            pool.discard(kept)


def _timestamp_ms(msg: Any) -> Optional[int]:
    ts_type, ts = msg.timestamp()
    if ts_type == 0 or ts is None or ts < 0:  # TIMESTAMP_NOT_AVAILABLE
        return None
    return ts


def _to_record(msg: Any) -> KafkaRecord:
    headers = msg.headers()
    return KafkaRecord(
        msg.topic(),
        msg.partition(),
        msg.offset(),
        _timestamp_ms(msg),
        msg.key(),
        msg.value(),
        list(headers) if headers else [],
    )


def _raw_batches(msgs: Iterable[Any], arrow_schema: Any) -> Iterator[Any]:
    """Raw rows as pyarrow RecordBatches of the exact type Spark expects."""
    import pyarrow as pa

    types = [f.type for f in arrow_schema]
    header_type = types[6]
    header_fields = list(header_type.value_type)
    ms_type = pa.timestamp("ms", tz="UTC")

    def build(rows: List[Any]) -> Any:
        # Column by column (C-level method calls in comprehensions beat one loop of appends).
        stamps = [m.timestamp() for m in rows]
        ts = pa.array(
            [t if kind != 0 and t is not None and t >= 0 else None for kind, t in stamps],
            type=pa.int64(),
        )
        hkeys: List[str] = []
        hvalues: List[Optional[bytes]] = []
        hoffsets = [0]
        for hs in [m.headers() for m in rows]:
            if hs:
                for k, v in hs:
                    hkeys.append(k)
                    hvalues.append(v)
            hoffsets.append(len(hkeys))
        header_values = pa.StructArray.from_arrays(
            [pa.array(hkeys, type=header_fields[0].type), pa.array(hvalues, type=header_fields[1].type)],
            fields=header_fields,
        )
        arrays = [
            pa.array([m.topic() for m in rows], type=types[0]),
            pa.array([m.partition() for m in rows], type=types[1]),
            pa.array([m.offset() for m in rows], type=types[2]),
            ts.cast(ms_type).cast(types[3]),
            pa.array([m.key() for m in rows], type=types[4]),
            pa.array([m.value() for m in rows], type=types[5]),
            pa.ListArray.from_arrays(
                pa.array(hoffsets, type=pa.int32()), header_values, type=header_type
            ),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    chunk: List[Any] = []
    for m in msgs:
        chunk.append(m)
        if len(chunk) >= _ARROW_BATCH_ROWS:
            yield build(chunk)
            chunk = []
    if chunk:
        yield build(chunk)


def _raw_tuples(msgs: Iterable[Any]) -> Iterator[tuple]:
    for m in msgs:
        ts = _timestamp_ms(m)
        hs = m.headers()
        yield (
            m.topic(),
            m.partition(),
            m.offset(),
            None if ts is None else _EPOCH + _dt.timedelta(milliseconds=ts),
            m.key(),
            m.value(),
            list(hs) if hs else [],
        )


# --------------------------------------------------------------------------------------------
# The data source
# --------------------------------------------------------------------------------------------


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from Kafka offsets (driver) and reads offset ranges (executors).

    Instances are pickled into Spark's read function, so they hold plain options only; the
    driver-side AdminClient is created lazily and never pickled."""

    def __init__(self, options: Mapping[str, str], schema: StructType, raw_arrow: bool = True):
        self.opts = SourceOptions(options)
        self.schema = schema
        self.raw_arrow = raw_arrow
        self._client: Optional[_OffsetsClient] = None
        self._target: Optional[Dict[int, int]] = None
        self._last_latest: Optional[Dict[int, int]] = None
        # Idle heartbeats (driver only): the wall clock (epoch ms; replaceable in tests), the
        # latest offsets seen, when the topic was last seen with something new, and the latest
        # heartbeat whose batch is known to be done.
        self._clock: Callable[[], int] = _wall_clock_ms
        self._idle_latest: Optional[Dict[int, int]] = None
        self._active_at_ms: Optional[int] = None
        self._heartbeat_done: Optional[int] = None

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    # -- driver side ----------------------------------------------------------------------

    @property
    def client(self) -> _OffsetsClient:
        if self._client is None:
            from .logs import configure_spark_python_process

            configure_spark_python_process()  # this runs in Spark's source runner process
            log.info("changejoin_kafka source: %s", self.opts.describe())
            self._client = _OffsetsClient(self.opts)
        return self._client

    def initialOffset(self) -> dict:
        partitions = self.client.partitions()
        return _offsets_dict(
            self.client.offsets(partitions, self.opts.starting), topic_id=getattr(self.client, "topic_id", None)
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records is not None:
            return ReadMaxRows(self.opts.max_records)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.client.latest()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self.opts.stop_file and os.path.exists(self.opts.stop_file):
            return start  # the service is stopping: no new input, so no new micro-batch
        begin = _parse_offsets(start)
        latest = self.client.latest()
        self._last_latest = latest
        topic_id = getattr(self.client, "topic_id", None) or _topic_id_of(start)
        if begin and latest and _topic_id_of(start) not in (None, topic_id):
            # Deleted and re-created: the offsets of the checkpoint are of another log.
            self._topic_recreated(_topic_id_of(start), topic_id)  # raises unless failOnDataLoss=false
            return _offsets_dict(
                self.client.offsets(sorted(latest), "earliest"), _heartbeat_of(start), _lost_of(start), topic_id
            )
        if self._target is not None:
            # Trigger.AvailableNow: never go past what existed when the query started.
            latest = {p: min(o, self._target[p]) for p, o in latest.items() if p in self._target}
        new = [p for p in latest if p not in begin and latest[p] > 0]
        begin_new = self.client.offsets(new, "earliest") if new else {}
        # Where there is something to read, it may be partly gone: the log may start later now.
        pending = [p for p in latest if p in begin and begin[p] < latest[p]]
        log_start = self.client.offsets(pending, "earliest") if pending else {}
        lost = _lost_of(start)
        lags: Dict[int, int] = {}
        starts: Dict[int, int] = {}
        went_back: List[int] = []
        for p, end in latest.items():
            if p not in begin:
                # A new partition's start is logged first, by this micro-batch, which reads none of it:
                # a replay of the next one reads it from there, wherever its log starts by then.
                if p in begin_new:
                    starts[p] = begin_new[p]
                continue
            s = begin[p]
            if end < s:
                self._offsets_went_back(p, s, end)  # raises unless failOnDataLoss=false
                went_back.append(p)
                continue
            if log_start.get(p, s) > s:
                lost += self._records_lost(p, s, log_start[p])  # raises unless failOnDataLoss=false
                s = log_start[p]
            starts[p] = s
            lags[p] = end - s
        if isinstance(limit, ReadMaxRows):
            shares = fair_shares(lags, int(limit.max_rows))
        else:
            shares = lags
        result = dict(begin)  # partitions that vanished from the metadata keep their offset
        for p, s in starts.items():
            result[p] = s + shares.get(p, 0)
        if went_back:
            # The partition was re-created: everything in it now is new. This batch moves the
            # offset back to its beginning (reading nothing); the next batches read it.
            result.update(self.client.offsets(went_back, "earliest"))
        heartbeat = _heartbeat_of(start)  # carried along unchanged unless a new one is due
        if self.opts.idle_timeout_ms is not None and self._target is None:
            heartbeat = self._plan_heartbeat(begin, result, self._last_latest, heartbeat)
        return _offsets_dict(result, heartbeat, lost, topic_id)

    def _plan_heartbeat(
        self,
        begin: Mapping[int, int],
        result: Mapping[int, int],
        latest: Mapping[int, int],
        previous: Optional[int],
    ) -> Optional[int]:
        """The heartbeat component of the next offset: a new one (now) when the topic has had
        nothing new for ``idleTimeoutMs``, counted from the later of the last records and the
        end of the previous heartbeat's batch; else the previous one."""
        now = self._clock()
        timeout = self.opts.idle_timeout_ms
        assert timeout is not None
        if (
            dict(result) != dict(begin)
            or self._idle_latest != latest
            or self._active_at_ms is None
            or previous != self._heartbeat_done
        ):
            # Records to read, records produced since the last look, the first look, or the
            # batch of the latest heartbeat is done (Spark plans the next batch only then): the
            # idle clock restarts. So a heartbeat is always followed by a full idle timeout with
            # nothing new from this topic, however long its batch took.
            self._idle_latest = dict(latest)
            self._heartbeat_done = previous
            self._active_at_ms = now
            return previous
        if now - self._active_at_ms < timeout:
            return previous
        log.debug("topic %s idle for %d ms: heartbeat at %d", self.opts.topic, now - self._active_at_ms, now)
        return now

    def _offsets_went_back(self, partition: int, start: int, latest: int) -> None:
        msg = (
            f"topic {self.opts.topic!r} partition {partition}: the latest offset {latest} is "
            f"below the next offset to read {start}: records were lost (topic deleted and "
            "re-created, or the broker lost its data)"
        )
        if self.opts.fail_on_data_loss:
            raise KafkaSourceError(
                msg + "; set failOnDataLoss=false (FAIL_ON_DATA_LOSS=false) to read the partition again from "
                "its beginning, keeping the join state"
            )
        log.warning("%s; reading the partition again from its beginning", msg)

    def _topic_recreated(self, before: Optional[str], now: Optional[str]) -> None:
        msg = (
            f"topic {self.opts.topic!r} was deleted and re-created (topic id {before}, now {now}): the "
            "records it had after the checkpointed offsets were lost, however many there were"
        )
        if self.opts.fail_on_data_loss:
            raise KafkaSourceError(
                msg + "; set failOnDataLoss=false (FAIL_ON_DATA_LOSS=false) to read the new topic from its "
                "beginning, keeping the join state"
            )
        log.warning("%s; reading the new topic from its beginning", msg)

    def _records_lost(self, partition: int, start: int, log_start: int) -> int:
        """Records ``start`` .. ``log_start`` - 1 of a partition are gone (deleted by retention) before
        they were read: fail, or count them and go on from the log start."""
        msg = (
            f"topic {self.opts.topic!r} partition {partition}: offsets {start} to {log_start - 1} "
            f"({log_start - start} records) were deleted before they were read (retention)"
        )
        if self.opts.fail_on_data_loss:
            raise KafkaSourceError(
                msg + "; set failOnDataLoss=false (FAIL_ON_DATA_LOSS=false) to skip them and go on from "
                f"offset {log_start}, keeping the join state"
            )
        log.warning("%s; skipping them: reading on from offset %d", msg, log_start)
        return log_start - start

    def reportLatestOffset(self) -> Optional[dict]:
        if self._last_latest is None:
            return None
        return _offsets_dict(self._last_latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = _parse_offsets(start)
        finish = _parse_offsets(end)
        if _topic_id_of(start) not in (None, _topic_id_of(end)):
            return []  # the batch that moves to the beginning of a re-created topic reads nothing
        missing = [p for p in finish if p not in begin]
        if missing:
            begin.update(self.client.offsets(missing, "earliest"))
        out: List[InputPartition] = []
        for p in sorted(finish):
            s, e = begin.get(p, finish[p]), finish[p]
            if e > s:
                out.append(KafkaInputPartition(self.opts.topic, p, s, e, _topic_id_of(end)))
        heartbeat = _heartbeat_of(end)
        if heartbeat is not None and heartbeat != _heartbeat_of(start):
            out.append(HeartbeatInputPartition(self.opts.topic, heartbeat))
        return out

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing is committed to Kafka.
        pass

    def stop(self) -> None:
        self._client = None

    # -- executor side --------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, HeartbeatInputPartition):
            heartbeat = None
            if self.opts.mapper_spec:
                mapper = load_mapper(self.opts.mapper_spec, self.opts.mapper_config, self.opts.mapper_secret)
                heartbeat = getattr(mapper, "heartbeat", None)
            return iter(heartbeat(partition.event_time_ms) if callable(heartbeat) else ())
        assert isinstance(partition, KafkaInputPartition), partition
        msgs = _iter_records(self.opts, partition)
        if self.opts.mapper_spec:
            mapper = load_mapper(self.opts.mapper_spec, self.opts.mapper_config, self.opts.mapper_secret)
            return _mapped(mapper, msgs)
        if self.raw_arrow:
            from pyspark.sql.pandas.types import to_arrow_schema

            return _raw_batches(msgs, to_arrow_schema(self.schema, timezone="UTC"))
        return _raw_tuples(msgs)


def _mapped(mapper: Any, msgs: Iterable[Any]) -> Iterator[tuple]:
    map_all = getattr(mapper, "map_all", None)
    if map_all is not None:  # the mapper sees the task's records together (it may pack them)
        yield from map_all(_to_record(m) for m in msgs)
        return
    map_record = mapper.map
    for m in msgs:
        yield from map_record(_to_record(m))


class KafkaDataSource(DataSource):
    """``spark.readStream.format("changejoin_kafka")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        spec = self.options.get("mapper")
        if spec:
            return load_mapper(spec, self.options.get("mapper.config", "{}"), self.options.get("mapper.secret")).schema
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = {str(k).lower(): v for k, v in dict(self.options).items()}
        if not options.get("mapper") and schema.fieldNames() != _RAW_FIELDS:
            raise KafkaSourceError(
                f"without a mapper the schema is {RAW_SCHEMA!r}; got {schema.simpleString()}"
            )
        raw_arrow = _bool_option(options, "rawArrow", True)
        if options.get("idletimeoutms"):
            mapper = options.get("mapper")
            if not mapper or not callable(
                getattr(load_mapper(mapper, options.get("mapper.config", "{}")), "heartbeat", None)
            ):
                raise KafkaSourceError(
                    "option 'idleTimeoutMs' needs a mapper with a 'heartbeat(event_time_ms)' method"
                )
        return KafkaStreamReader(self.options, schema, raw_arrow=raw_arrow)


def register(spark: Any) -> None:
    """Register the ``changejoin_kafka`` data source on ``spark``."""
    spark.dataSource.register(KafkaDataSource)

"""Prometheus metrics, ``/healthz`` and ``/readyz`` for one running join.

:class:`JoinMetrics` holds the metrics in its own ``CollectorRegistry`` (several services can run in
one process, e.g. in tests) and is fed from two places, both on the driver:

* the streaming query's progress (a ``StreamingQueryListener`` in ``app.py`` hands the progress
  JSON of every micro-batch to :meth:`JoinMetrics.observe_progress`): input records per side, batch
  duration and size, the last committed batch, state size, input lag;
* the counts the producing tasks report for every micro-batch (``pipeline.BatchCounts``, through
  :meth:`JoinMetrics.observe_batch`): output records by RowKind and dead letters by reason, input
  records, and their end-to-end latencies (``latency.py``), which arrive as bucket counts and are
  exported by :class:`BucketHistogram`.

:class:`MetricsServer` serves ``/metrics``, ``/healthz`` and ``/readyz`` from one small WSGI
server (``wsgiref`` + ``prometheus_client.make_wsgi_app``) on a daemon thread.

Where the numbers come from (Spark's ``StreamingQueryProgress``):

* the query reads ``unionByName(left, right)``; Spark lists a query's sources in plan order, so
  ``sources[0]`` is the left input and ``sources[1]`` the right one (their descriptions do not name
  the topic; the order is also what the checkpoint's offset log relies on);
* a source's ``endOffset`` is ``{"<partition>": next offset to read}`` after the batch and its
  ``latestOffset`` the newest offsets the Kafka source saw when it planned the batch, before
  ``maxRecordsPerTrigger`` capped the range (``KafkaStreamReader.reportLatestOffset``), so their
  difference is the records left behind in each partition. No extra Kafka call is made;
* a source is *caught up* after a batch whose end offsets are its latest offsets in every
  partition; the time of the last such batch is exported, so that ``time() - it`` is how long the
  side has been behind (0 while it keeps up; an upper bound: it counts from when the side last had
  nothing unread, not from the age of the oldest unread record, which would cost a Kafka call);
* ``eventTime["watermark"]`` (event-time joins only) is the query's watermark: Spark's global
  one, the smallest of the inputs' (the progress does not report each input's own), and
  ``eventTime["max"]`` the newest event time of the batch's rows;
* ``stateOperators[i]``: ``numRowsTotal`` is the number of state rows, exported as such: one per
  key (``STATE_BUCKETS=0``), or one per bucket plus one per large key and per split side's entry
  (``sparkstate.py``). ``memoryUsedBytes`` and the RocksDB ``customMetrics["rocksdbSstFileSize"]``
  are exported as state bytes.

Besides, sampled rather than reported: the Spark JVM's heap (``observe_jvm_memory``, fed by
``app.py`` from ``java.lang.Runtime`` at every progress and idle event), the driver's own Python
process (``prometheus_client``'s process collector: ``changejoin_process_*``, whose
``start_time_seconds`` changes at every restart of the container) and, at scrape time, the resident
memory of the Python processes started under the driver: PySpark's daemon and its workers in local
mode (``SPARK_MASTER=local[...]``, the chart's default); in cluster mode the workers run on the
executors and this is 0.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from socketserver import ThreadingMixIn

from datetime import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, make_wsgi_app
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from .deadletters import Reason
from .latency import LATENCY_BUCKETS

log = logging.getLogger(__name__)

PREFIX = "changejoin_"
SIDES = ("left", "right")
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: The RowKinds of the output records (``changejoin_output_records_total{kind}``).
ROW_KINDS = ("+I", "-U", "+U", "-D")
#: The kinds of database error a lookup counts (``service/database/``), served at 0 from the start.
LOOKUP_ERROR_KINDS = ("connection", "timeout", "conflict", "data", "query")
RECORD_BUCKETS = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)


def ready_window_seconds(trigger_interval_ms: int, max_trigger_intervals: int) -> float:
    """How long the query may go without progress and still be ready: that many trigger
    intervals, an interval counting as at least one second (``TRIGGER_INTERVAL=0`` runs batches
    back to back)."""
    return max(trigger_interval_ms / 1000.0, 1.0) * max_trigger_intervals


class JoinMetrics:
    """The metrics of one join, and its readiness.

    ``is_active`` tells whether the streaming query is running (called at scrape time and by
    ``/readyz``); ``clock`` is a monotonic clock in seconds (injectable for tests)."""

    def __init__(self, ready_window_s: float = 10.0, is_active: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic, registry: CollectorRegistry | None = None,
                 liveness_timeout_s: float | None = None, sides: tuple[str, ...] = SIDES,
                 topics: tuple[str, ...] = (), trigger_interval_s: float = 0.0):
        """``sides``: the inputs the query reads, in the order of its sources (a lookup join's
        right side is a table, not a source); ``topics``: their topics, in the same order."""
        self.sides = sides
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.ready_window_s = ready_window_s
        self.liveness_timeout_s = liveness_timeout_s
        self._is_active = is_active or (lambda: False)
        self._clock = clock
        self._created = clock()
        self._lock = threading.Lock()
        self._last_progress: float | None = None
        self._warned_sources = False
        r = self.registry

        self.input_records = Counter(
            PREFIX + "input_records", "Records read from the input topics (left, right), as the reading tasks "
            "counted them.", ["side"], registry=r)
        self.output_records = Counter(
            PREFIX + "output_records", "Records written to the output topic, by RowKind (+I, -U, +U, -D).",
            ["kind"], registry=r)
        self.dead_letters = Counter(
            PREFIX + "dead_letter_records", "Records written to the dead-letter topic, by reason.",
            ["reason"], registry=r)
        # Every side, RowKind and reason served at 0 from the start: a counter that first appears at
        # 1 shows Prometheus no increase (rate() and the dead-letter alert would miss it).
        for side in sides:
            self.input_records.labels(side=side)
        for kind in ROW_KINDS:
            self.output_records.labels(kind=kind)
        for reason in Reason:
            self.dead_letters.labels(reason=reason.value)
        self.lost_records = Gauge(
            PREFIX + "input_lost_records", "Input records deleted (retention, a re-created topic) before they were "
            "read, skipped with FAIL_ON_DATA_LOSS=false, since the checkpoint began (0 until a progress reported "
            "the side; NaN once the side's topic was deleted and re-created, losing what it held unread, in a number not "
            "known).", ["side"], registry=r)
        self._lost_unknown: set[str] = set()
        self.late_probe_rows = Counter(
            PREFIX + "late_probe_rows", "Records dropped as late, sent to the dead-letter topic with reason "
            "'late': probe rows of event-time temporal joins at or behind the watermark, records of window "
            "joins for windows that had fired (one per record).", registry=r)
        self.batch_duration = Histogram(
            PREFIX + "batch_duration_seconds", "Micro-batch duration (Spark's triggerExecution).",
            buckets=DURATION_BUCKETS, registry=r)
        self.end_to_end_latency = BucketHistogram(
            PREFIX + "end_to_end_latency_seconds", "Input records from their Kafka timestamp to the commit of their "
            "micro-batch's output (every producing task's transaction committed, or its records acknowledged), "
            "records without output included.", LATENCY_BUCKETS, registry=r)
        self.batch_input = Histogram(
            PREFIX + "batch_input_records", "Input records per micro-batch (both sides).",
            buckets=RECORD_BUCKETS, registry=r)
        self.last_batch_id = Gauge(
            PREFIX + "last_committed_batch_id", "Id of the last micro-batch committed to the checkpoint (-1 until "
            "this process committed one).", registry=r)
        self.last_batch_id.set(-1)
        self.last_progress_time = Gauge(
            PREFIX + "last_progress_timestamp_seconds", "Unix time of the last progress (or idle) report of the "
            "streaming query.", registry=r)
        self.query_active = Gauge(
            PREFIX + "query_active", "1 while the streaming query runs, else 0.", registry=r)
        self.query_active.set_function(lambda: 1.0 if self.is_active() else 0.0)
        self.input_lag = Gauge(
            PREFIX + "input_lag_records", "Records in an input partition not read yet: the newest offset the "
            "source saw when planning the last batch minus the batch's end offset.", ["side", "partition"], registry=r)
        self.caught_up_time = Gauge(
            PREFIX + "input_caught_up_timestamp_seconds", "Unix time of the last micro-batch after which the side "
            "had no unread record in any partition, or of the start until then (time() minus it: how long the side "
            "has been behind).",
            ["side"], registry=r)
        for side in sides:  # until a side first has nothing unread, it has been behind since the start
            self.caught_up_time.labels(side=side).set(time.time())
        self.topic_info = Gauge(
            PREFIX + "input_topic_info", "1 for each input side, labelled with its topic.", ["side", "topic"],
            registry=r)
        for side, topic in zip(sides, topics):
            self.topic_info.labels(side=side, topic=topic).set(1)
        self.trigger_interval = Gauge(
            PREFIX + "trigger_interval_seconds", "TRIGGER_INTERVAL: how often a micro-batch starts (0: back to "
            "back).", registry=r)
        self.trigger_interval.set(trigger_interval_s)
        self.watermark = Gauge(
            PREFIX + "watermark_timestamp_seconds", "Event-time joins: the query's watermark as Unix time (the "
            "smallest of the inputs' watermarks), from the last micro-batch's progress.", registry=r)
        self.event_time_max = Gauge(
            PREFIX + "event_time_max_timestamp_seconds", "Event-time joins: the newest event time among the last "
            "micro-batch's input rows, as Unix time.", registry=r)
        self.jvm_memory = Gauge(
            PREFIX + "jvm_memory_bytes", "The driver's Spark JVM heap ('used', 'committed', 'max'; Java's "
            "Runtime), sampled at each progress or idle report.", ["area"], registry=r)
        self.python_workers_memory = Gauge(
            PREFIX + "python_workers_resident_memory_bytes", "Resident memory of the Python processes started "
            "under the driver (PySpark's daemon and workers in local mode; 0 in cluster mode, where they run on "
            "the executors), at scrape time.", registry=r)
        self.python_workers_memory.set_function(lambda: float(descendant_python_rss()))
        ProcessCollector(namespace=PREFIX.rstrip("_"), registry=r)
        self.state_rows = Gauge(
            PREFIX + "state_rows", "Rows in the stage's state store (Spark's numRowsTotal): per key with "
            "STATE_BUCKETS=0; else per bucket of keys, plus one per large key and per split side's entry.",
            ["operator"], registry=r)
        self.transactions = Counter(
            PREFIX + "kafka_transactions", "DELIVERY=exactly-once: task shares of micro-batches written in a "
            "committed transaction ('committed'), or found committed already by an earlier attempt or run and not "
            "written again ('replay_skipped').", ["outcome"], registry=r)
        for outcome in ("committed", "replay_skipped"):
            self.transactions.labels(outcome=outcome)
        self.transaction_seconds = Histogram(
            PREFIX + "kafka_transaction_seconds", "DELIVERY=exactly-once: one task's transaction, from its begin to "
            "its commit (writing the task's share, computed and encoded before the transaction begins).",
            buckets=DURATION_BUCKETS, registry=r)
        self.transaction_init_seconds = Histogram(
            PREFIX + "kafka_transaction_init_seconds", "DELIVERY=exactly-once: a task's new transactional producer "
            "until init_transactions() returned (it runs while the task computes its rows).",
            buckets=DURATION_BUCKETS, registry=r)
        self.task_retries = Counter(
            PREFIX + "task_retries", "Producing tasks that ran again after a failed attempt (Spark's task retries).",
            registry=r)
        self.state_bytes = Gauge(
            PREFIX + "state_bytes", "Size of the join state: 'memory' is Spark's memoryUsedBytes, 'sst_files' the "
            "RocksDB SST files of the committed version.", ["operator", "kind"], registry=r)
        self.skipped_records = Counter(
            PREFIX + "skipped_input_records", "Input records that carry no row change, read and skipped, by reason "
            "(Debezium formats: 'debezium_tombstone' after a delete, 'debezium_truncate', 'debezium_message').",
            ["reason"], registry=r)
        self.lookup_queries = Counter(
            PREFIX + "lookup_queries", "Lookup join: queries sent to the database (each asks up to "
            "LOOKUP_BATCH_SIZE keys).", registry=r)
        self.lookup_keys = Counter(
            PREFIX + "lookup_keys", "Lookup join: distinct keys asked of the database (cache hits and pinned "
            "lookups excepted).", registry=r)
        self.lookup_rows = Counter(
            PREFIX + "lookup_rows", "Lookup join: table rows the database returned.", registry=r)
        self.lookup_cache = Counter(
            PREFIX + "lookup_cache", "Lookup join, LOOKUP_CACHE=partial: keys found in a worker's cache ('hit'), "
            "not found ('miss'), and entries evicted for LOOKUP_CACHE_MAX_ROWS ('evicted').", ["result"], registry=r)
        for result in ("hit", "miss", "evicted"):
            self.lookup_cache.labels(result=result)
        self.lookup_query_seconds = Histogram(
            PREFIX + "lookup_query_seconds", "Lookup join: one query to the database.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0), registry=r)
        self.lookup_retries = Counter(
            PREFIX + "lookup_retries", "Lookup join: lookups retried after a database error (LOOKUP_MAX_RETRIES).",
            registry=r)
        self.lookup_errors = Counter(
            PREFIX + "lookup_errors", "Lookup join: database errors, by kind ('connection', 'timeout', 'conflict', "
            "'data', 'query').", ["kind"], registry=r)
        for kind in LOOKUP_ERROR_KINDS:
            self.lookup_errors.labels(kind=kind)
        self.lookup_pinned_reuse = Counter(
            PREFIX + "lookup_pinned_reuse", "Lookup join: reading tasks that reused the lookups an earlier attempt "
            "of their micro-batch pinned (a retried task or a replayed micro-batch), instead of asking the database.",
            registry=r)

    # -- feeding --------------------------------------------------------------------------

    def is_active(self) -> bool:
        try:
            return bool(self._is_active())
        except Exception:  # noqa: BLE001 - e.g. the JVM is gone after Spark stopped
            return False

    def mark_progress(self) -> None:
        """The query reported progress or that it is idle and waiting for data: it is alive."""
        with self._lock:
            self._last_progress = self._clock()
        self.last_progress_time.set(time.time())

    def observe_progress(self, progress: Mapping[str, Any]) -> None:
        """One micro-batch's ``StreamingQueryProgress`` as a dict (``json.loads(progress.json)``)."""
        sources = progress.get("sources") or []
        if len(sources) != len(self.sides) and not self._warned_sources:
            self._warned_sources = True
            log.warning("the query progress lists %d sources, expected %d (%s)", len(sources), len(self.sides),
                        ", ".join(self.sides))
        for side, source in zip(self.sides, sources):
            lags = input_lag(source)
            for partition, lag in lags.items():
                self.input_lag.labels(side=side, partition=partition).set(lag)
            if lags and not any(lags.values()):
                self.caught_up_time.labels(side=side).set(time.time())
            end, start = source.get("endOffset"), source.get("startOffset")
            if isinstance(end, Mapping) and isinstance(start, Mapping) \
                    and start.get("topic_id") not in (None, end.get("topic_id")):
                self._lost_unknown.add(side)  # the topic re-created: what it held unread is not known
            if side in self._lost_unknown:
                self.lost_records.labels(side=side).set(float("nan"))
            elif isinstance(end, Mapping):
                lost = end.get("lost", 0)
                self.lost_records.labels(side=side).set(lost if isinstance(lost, int) else 0)
        event_time = progress.get("eventTime") or {}
        for gauge, key in ((self.watermark, "watermark"), (self.event_time_max, "max")):
            seconds = unix_seconds(event_time.get(key))
            if seconds is not None:
                gauge.set(seconds)
        duration_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        if duration_ms is not None:
            self.batch_duration.observe(duration_ms / 1000.0)
        if progress.get("batchId") is not None:
            self.last_batch_id.set(progress["batchId"])
        for name, operator in _operators(progress.get("stateOperators") or []):
            if operator.get("numRowsTotal") is not None:
                self.state_rows.labels(operator=name).set(operator["numRowsTotal"])
            if operator.get("memoryUsedBytes") is not None:
                self.state_bytes.labels(operator=name, kind="memory").set(operator["memoryUsedBytes"])
            sst = (operator.get("customMetrics") or {}).get("rocksdbSstFileSize")
            if sst is not None:
                self.state_bytes.labels(operator=name, kind="sst_files").set(sst)
        self.mark_progress()

    def observe_jvm_memory(self, used: int, committed: int, maximum: int) -> None:
        """The Spark JVM's heap: used, committed (``totalMemory``) and its limit (``maxMemory``)."""
        for area, n in (("used", used), ("committed", committed), ("max", maximum)):
            self.jvm_memory.labels(area=area).set(n)

    def observe_batch(self, counts) -> None:
        """One micro-batch's ``pipeline.BatchCounts`` (what the producing tasks wrote, and what the
        reading tasks read: Spark's ``numInputRows`` counts rows, and a row packs a bucket's records)."""
        for side in self.sides:
            if counts.input.get(side):
                self.input_records.labels(side=side).inc(counts.input[side])
        self.batch_input.observe(sum(counts.input.values()))
        if counts.latency is not None and counts.latency.count:
            self.end_to_end_latency.add(counts.latency.counts, counts.latency.sum_seconds)
        for kind, n in counts.output.items():
            if n:
                self.output_records.labels(kind=kind).inc(n)
        for reason, n in counts.dead_letters.items():
            if n:
                self.dead_letters.labels(reason=reason).inc(n)
                if reason == Reason.LATE:
                    self.late_probe_rows.inc(n)
        if counts.committed:
            self.transactions.labels(outcome="committed").inc(len(counts.committed))
        if counts.skipped:
            self.transactions.labels(outcome="replay_skipped").inc(len(counts.skipped))
        for seconds in counts.transaction_seconds:
            self.transaction_seconds.observe(seconds)
        for seconds in counts.init_seconds:
            self.transaction_init_seconds.observe(seconds)
        if counts.retries:
            self.task_retries.inc(counts.retries)
        if counts.lookup:
            self._observe_lookup(counts.lookup)
        for reason, n in counts.ignored.items():
            if n:
                self.skipped_records.labels(reason=reason).inc(n)

    def _observe_lookup(self, lookup: Mapping[str, Any]) -> None:
        """A micro-batch's lookup counts (``lookup.lookup_partition``: what its reading tasks asked)."""
        for counter, name in ((self.lookup_queries, "queries"), (self.lookup_keys, "keys"),
                              (self.lookup_rows, "rows"), (self.lookup_retries, "retries"),
                              (self.lookup_pinned_reuse, "pinned_reuse")):
            if lookup.get(name):
                counter.inc(lookup[name])
        for result in ("hit", "miss", "evicted"):
            if lookup.get(f"cache_{result}"):
                self.lookup_cache.labels(result=result).inc(lookup[f"cache_{result}"])
        for name, n in lookup.items():
            if name.startswith("error:") and n:
                self.lookup_errors.labels(kind=name[len("error:"):]).inc(n)
        for seconds in lookup.get("query_seconds", ()):
            self.lookup_query_seconds.observe(seconds)

    # -- readiness ------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason): ready when the query is active and reported progress (or idleness)
        within the last ``ready_window_s`` seconds."""
        if not self.is_active():
            return False, "streaming query not active"
        with self._lock:
            last = self._last_progress
        if last is None:
            return False, "no progress reported yet"
        age = self._clock() - last
        if age > self.ready_window_s:
            return False, f"no progress for {age:.1f}s (limit {self.ready_window_s:g}s)"
        return True, "ready"


    def liveness(self) -> tuple[bool, str]:
        """(alive, reason) for ``/healthz``: not alive once the query has neither reported progress
        nor idleness for ``liveness_timeout_s`` (counted from this object's creation until the first
        report), so that a wedged query gets its process restarted. None: always alive."""
        if not self.liveness_timeout_s:
            return True, "ok"
        with self._lock:
            last = self._last_progress if self._last_progress is not None else self._created
        age = self._clock() - last
        if age > self.liveness_timeout_s:
            return False, f"no progress or idle report for {age:.0f}s (LIVENESS_TIMEOUT {self.liveness_timeout_s:g}s)"
        return True, "ok"


class BucketHistogram:
    """A Prometheus histogram fed with counts per bucket rather than one value at a time (the
    end-to-end latency: tens of thousands of records a micro-batch, filed in buckets by the
    workers, ``latency.py``). ``prometheus_client``'s ``Histogram`` only observes values, so this
    is a custom collector of the registry, exposing a ``HistogramMetricFamily``: cumulative
    ``_bucket`` counts by ``le``, ``_count`` and ``_sum``."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry):
        self.name, self.documentation = name, documentation
        self.bounds = tuple(buckets)
        self._counts = [0] * (len(self.bounds) + 1)  # per bound, the last past every bound
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def add(self, counts: Iterable[int], sum_value: float) -> None:
        """Records per bucket (not cumulative: ``counts[i]`` of them at most ``bounds[i]`` and
        above the bound before; one more count for those above every bound), their sum."""
        counts = list(counts)
        if len(counts) != len(self._counts):
            raise ValueError(f"{self.name}: {len(counts)} bucket counts for {len(self._counts)} buckets")
        with self._lock:
            self._counts = [a + b for a, b in zip(self._counts, counts)]
            self._sum += sum_value

    def describe(self):
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self):
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, n in zip(self.bounds + (float("inf"),), counts):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=total)


def input_lag(source: Mapping[str, Any]) -> dict[str, int]:
    """Per partition: latest offset minus end offset (never negative) of one progress source."""
    latest, end = source.get("latestOffset"), source.get("endOffset")
    if not isinstance(latest, Mapping) or not isinstance(end, Mapping):
        return {}
    lags = {}
    for partition, newest in latest.items():
        done = end.get(partition)
        if isinstance(newest, int) and isinstance(done, int):
            lags[str(partition)] = max(0, newest - done)
    return lags


def unix_seconds(timestamp: Any) -> float | None:
    """A progress timestamp (``2026-11-26T15:04:05.123Z``) as Unix seconds; None when there is none."""
    if not isinstance(timestamp, str):
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def descendant_python_rss(root_pid: int | None = None, proc: Path = Path("/proc")) -> int:
    """Bytes of resident memory of the Python processes descending from ``root_pid`` (this
    process), itself excluded: PySpark's daemon and workers, children of the Spark JVM the driver
    started. Read from ``/proc`` (0 where there is none, e.g. not Linux)."""
    root = os.getpid() if root_pid is None else root_pid
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    rss: dict[int, int] = {}
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return 0
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for entry in entries:
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        pid = int(entry.name)
        parents[pid], names[pid], rss[pid] = int(rest[1]), name, int(statm[1]) * page
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if names.get(pid, "").startswith("python"):
            total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def _operators(operators: Iterable[Mapping[str, Any]]):
    """(label, operator) pairs; the index is added when two operators share a name."""
    operators = list(operators)
    names = [op.get("operatorName") or "stateful" for op in operators]
    for i, (name, op) in enumerate(zip(names, operators)):
        yield (f"{name}_{i}" if names.count(name) > 1 else name), op


# --------------------------------------------------------------------------------------------
# HTTP: /metrics, /healthz, /readyz
# --------------------------------------------------------------------------------------------


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - probes every few seconds: no access log
        pass


class MetricsServer:
    """One HTTP server on ``host:port`` (port 0: any free port, see :attr:`port`) serving
    ``/metrics`` (Prometheus text format), ``/healthz`` (200 while the process serves) and
    ``/readyz`` (200 when :meth:`JoinMetrics.readiness` says so, else 503 with the reason)."""

    def __init__(self, metrics: JoinMetrics, port: int, host: str = "0.0.0.0"):
        self.metrics = metrics
        self._prometheus = make_wsgi_app(metrics.registry)
        self._httpd = make_server(host, port, self._app, server_class=_Server, handler_class=_QuietHandler)
        self.port = self._httpd.server_port
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name=f"metrics-http-{self.port}",
            daemon=True)

    def start(self) -> "MetricsServer":
        self._thread.start()
        log.info("metrics on http://0.0.0.0:%d/metrics (/healthz, /readyz)", self.port)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def _app(self, environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        if path == "/healthz":
            alive, reason = self.metrics.liveness()
            return _text(start_response, "200 OK" if alive else "503 Service Unavailable", reason + "\n")
        if path == "/readyz":
            ready, reason = self.metrics.readiness()
            return _text(start_response, "200 OK" if ready else "503 Service Unavailable", reason + "\n")
        if path in ("/metrics", "/"):
            return self._prometheus(environ, start_response)
        return _text(start_response, "404 Not Found", "not found: try /metrics, /healthz or /readyz\n")


def _text(start_response, status: str, body: str):
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))])
    return [data]

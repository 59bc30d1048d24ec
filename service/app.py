"""The running service: plan, topics, Spark query, lifecycle (start, drain, stop on SIGTERM).

Observability (``service/metrics.py``): a ``StreamingQueryListener`` registered on the Spark
session for the life of the query feeds the Prometheus metrics from every micro-batch's progress
and logs one line per batch; the counts the producing tasks report (``BatchCounts``, through
``on_batch``) feed the output and dead-letter metrics. ``METRICS_PORT`` serves ``/metrics``,
``/healthz`` and ``/readyz``.

Why a listener rather than reading ``query.lastProgress`` in ``on_batch``: ``on_batch`` runs inside
the micro-batch, before Spark commits it and builds its progress, so it could only ever see the
previous batch's progress, and it is not called at all while the query is idle. The listener
receives each batch's progress once, after the commit, and the idle events that tell ``/readyz``
that a query with no new input is still alive.
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from contextlib import contextmanager

from pyspark.sql.streaming import StreamingQueryListener

from . import checkpoint
from .catalog import plan_for
from .config import Settings
from .explain import explain
from .faults import CrashPoint
from .metrics import JoinMetrics, MetricsServer, ready_window_seconds
from .pipeline import BatchCounts, JoinPipeline
from .plan import JoinPlan, TimeMode
from .session import SHUFFLE_PARTITIONS, expect_stop, finish_class_archive, query_start_properties, spark_session
from .shipping import Delivery
from .transactions import keep_progress_topic

log = logging.getLogger(__name__)


class _QueryListener(StreamingQueryListener):
    """Hands this service's query events to the service. Events of other queries, and of earlier
    runs of the same query (same id, another run id), are ignored.

    The JVM calls this object itself (py4j), with Spark's Java events: a progress is read as one
    JSON string, in four py4j calls. PySpark's own bridge (``JStreamingQueryListener``) builds a
    Python copy of every event field by field, a py4j call per value; each Java map it copies ends
    in a Java exception, which PySpark classifies by looking up exception classes by name through
    py4j, a search of the whole class path per lookup. At 1,000 input rows/s that was a quarter of
    the Spark JVM's Java samples (Java Flight Recorder; bench/results/RESULTS.md)."""

    def __init__(self, service: "Service"):
        self._service = service
        self._wrapper = None

    @property
    def _jlistener(self):
        """What ``StreamingQueryManager.addListener`` and ``removeListener`` hand the JVM."""
        if self._wrapper is None:
            from pyspark import SparkContext

            self._wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper(self)
        return self._wrapper

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress()
        self._service._on_progress(progress.runId().toString(), progress.json())

    def onQueryIdle(self, event) -> None:
        self._service._on_idle(event.runId().toString())

    def onQueryTerminated(self, event) -> None:
        self._service._on_terminated(event.runId().toString())

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class Service:
    """One join, from two input topics to the output topic and the dead-letter topic."""

    def __init__(self, settings: Settings, plan: JoinPlan | None = None, spark=None, on_batch=None,
                 crash: CrashPoint | None = None):
        """``crash``: a crash point of the recovery tests (``faults.in_process``)."""
        self.settings = settings
        self._crash = crash
        self.plan = plan or plan_for(settings)
        self._spark = spark
        self._spark_given = spark is not None
        self._spark_launch: Future | None = None  # Spark, started in the background by start()
        self._class_archive = False  # SPARK_CLASS_ARCHIVE_DIR applies to the service as a process (run_forever)
        self._listeners = [on_batch] if on_batch else []
        self.query = None
        self.batches: list[BatchCounts] = []
        self.metrics = JoinMetrics(
            ready_window_seconds(settings.trigger_interval_ms, settings.ready_max_trigger_intervals),
            is_active=self._query_active,
            liveness_timeout_s=(settings.liveness_timeout_ms or 0) / 1000 or None,
            sides=("left",) if settings.lookup else ("left", "right"),
            topics=(settings.left_topic,) if settings.lookup else (settings.left_topic, settings.right_topic),
            trigger_interval_s=settings.trigger_interval_ms / 1000.0,
        )
        self.metrics_server: MetricsServer | None = None
        self._query_listener: _QueryListener | None = None
        self._run_id: str | None = None
        self._query_known = threading.Event()
        self._terminated = threading.Event()  # the listener heard of the query's end
        self._pending: dict[int, BatchCounts] = {}  # counts waiting for their batch's progress
        self._checkpoint_lock = None  # held while the service runs (checkpoint.CheckpointLock)
        self._pending_lock = threading.Lock()
        self._committed = -1  # the newest micro-batch of this run whose progress was reported
        # While this file exists the sources plan no new input (source.py, "stopFile"): a graceful
        # stop lets the micro-batch in flight finish, and no other begin.
        self._stop_file = os.path.join(tempfile.gettempdir(), f"changejoin-stop-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    @property
    def spark(self):
        if self._spark is None:
            if self._spark_launch is not None:
                self._spark = self._spark_launch.result()
            else:
                self._spark = spark_session(self.settings, class_archive=self._class_archive)
        return self._spark

    def _launch_spark(self) -> None:
        """Start Spark in the background: its JVM boots for seconds while the start takes the
        checkpoint, ensures the topics and initializes the transactional ids (which abort what a
        stopped run left open), all waiting on the disk and the brokers rather than the CPU.
        ``spark`` waits for it; a failure to start is raised there."""
        if self._spark is not None or self._spark_launch is not None:
            return
        launch: Future = Future()

        def run():
            started = time.monotonic()
            try:
                launch.set_result(spark_session(self.settings, class_archive=self._class_archive))
            except BaseException as err:  # noqa: BLE001 - raised where the session is asked for
                launch.set_exception(err)
            else:
                log.info("Spark started in %.1f s", time.monotonic() - started)

        self._spark_launch = launch
        threading.Thread(target=run, name="spark-launch").start()

    def _query_active(self) -> bool:
        return self.query is not None and self.query.isActive

    def _on_batch(self, counts: BatchCounts) -> None:
        self.batches.append(counts)
        self.metrics.observe_batch(counts)
        with self._pending_lock:
            self._pending[counts.batch_id] = counts
        for listener in self._listeners:
            listener(counts)

    def _ours(self, run_id: str) -> bool:
        # Events can in principle arrive before start() has returned the query: wait for its id.
        self._query_known.wait(timeout=60)
        return run_id == self._run_id

    def _on_progress(self, run_id: str, progress_json: str) -> None:
        try:
            if not self._ours(run_id):
                return
            progress = json.loads(progress_json)
            if isinstance(progress.get("batchId"), int):
                self._committed = max(self._committed, progress["batchId"])
            self.metrics.observe_progress(progress)
            self._sample_jvm_memory()
            self._log_batch(progress)
        except Exception:  # noqa: BLE001 - a metrics bug must never disturb the query
            log.exception("could not record the query progress")

    def _on_idle(self, run_id: str) -> None:
        try:
            if self._ours(run_id):
                self.metrics.mark_progress()
                self._sample_jvm_memory()
        except Exception:  # noqa: BLE001
            log.exception("could not record the query idle event")

    def _sample_jvm_memory(self) -> None:
        """The Spark JVM's heap, from ``java.lang.Runtime`` (four py4j calls, on the listener's
        thread, once per progress or idle event)."""
        runtime = self.spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        total, free = runtime.totalMemory(), runtime.freeMemory()
        self.metrics.observe_jvm_memory(used=total - free, committed=total, maximum=runtime.maxMemory())

    def _on_terminated(self, run_id: str) -> None:
        if self._ours(run_id):
            self._terminated.set()

    def _log_batch(self, progress: dict) -> None:
        batch_id = progress.get("batchId")
        with self._pending_lock:
            counts = self._pending.pop(batch_id, None) or BatchCounts(batch_id)
            for stale in [b for b in self._pending if b < batch_id]:
                del self._pending[stale]
        inputs = counts.input  # records, as the reading tasks counted them (a row of Spark's packs many)
        duration_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        replayed = sorted(counts.skipped)
        log.info(
            "batch %s committed: input left %d, right %d; output %s; dead letters %s; %s ms%s",
            batch_id, inputs.get("left", 0), inputs.get("right", 0), counts.output, counts.dead_letters, duration_ms,
            f"; written before, not again: task partitions {replayed} ({counts.replayed_records} records)"
            if replayed else "",
            extra={
                "batch_id": batch_id, "input_left": inputs.get("left", 0), "input_right": inputs.get("right", 0),
                "output": counts.output, "dead_letters": counts.dead_letters, "duration_ms": duration_ms,
                "replayed_partitions": replayed, "replayed_records": counts.replayed_records,
            },
        )

    def ensure_topics(self, task_partitions: int | None = None, progress_topic: str | None = None) -> int:
        """Create the output and dead-letter topics if missing (as many partitions as the left
        input), and with ``task_partitions`` (exactly-once) the compacted progress topic with one
        partition per producing task; returns the output topic's partition count."""
        from .sink import ensure_topics, topic_partitions

        s = self.settings
        kafka = s.kafka_properties()
        bootstrap = kafka.pop("bootstrap.servers")
        partitions = max(1, topic_partitions(bootstrap, kafka, s.left_topic) or 1)
        topics, configs = {s.output_topic: partitions, s.dead_letter_topic: 1}, {}
        progress_topic = progress_topic or s.progress_topic_name
        if task_partitions:
            topics[progress_topic] = task_partitions
            # Compacted, in segments of an hour: a marker scan reads only what compaction left and
            # the last hour of markers (a key's newest committed marker always survives).
            configs[progress_topic] = {"cleanup.policy": "compact", "segment.ms": "3600000"}
        ensure_topics(bootstrap, kafka, topics, configs=configs)
        if task_partitions:
            have = topic_partitions(bootstrap, kafka, progress_topic) or 0
            if have < task_partitions:
                raise RuntimeError(
                    f"PROGRESS_TOPIC={progress_topic!r} has {have} partitions; DELIVERY=exactly-once needs one "
                    f"per task partition ({task_partitions}): add partitions to it, or name a new topic")
        return topic_partitions(bootstrap, kafka, s.output_topic) or partitions

    def _delivery(self, store: checkpoint.Checkpoint, partitions: int, progress_topic: str) -> Delivery:
        """With exactly-once delivery, what the producing tasks' transactions need; first every
        transactional id the checkpoint has used initialized once (this run's, and those of an older
        prefix or task count: ``checkpoint.used_transactional_ids``), which aborts what a killed run
        left open, then this run's ids recorded (``transactions.py``)."""
        from .transactions import abort_transactional_ids, checkpoint_progress, delivery_config, transactional_id

        s = self.settings
        unbound = delivery_config(s)  # no checkpoint id yet: for the abort and the topic's origin
        current = [transactional_id(s.transactional_id_prefix, p) for p in range(partitions)]
        older = [tid for tid in checkpoint.used_transactional_ids(store) if tid not in current]
        seconds = abort_transactional_ids(unbound, current + older, required=current)
        checkpoint.record_transactional_ids(store, s.transactional_id_prefix, partitions)
        progress = checkpoint_progress(s, store, unbound, partitions)
        delivery = delivery_config(s, store.identity(), progress, partitions)
        log.info("exactly-once delivery: %d transactional ids %s-0..%d initialized in %.2f s (what a stopped run "
                 "left open is aborted%s); progress markers in %s", partitions, s.transactional_id_prefix,
                 partitions - 1, seconds, f"; also {len(older)} this checkpoint used before: {', '.join(older)}"
                 if older else "", progress_topic)
        return delivery

    def start(self):
        expect_stop(False)
        log.info("join plan:\n%s", explain(self.plan))
        if self.settings.metrics_port and self.metrics_server is None:
            # First, so that /healthz answers (and /readyz says why it is not ready) while starting.
            try:
                self.metrics_server = MetricsServer(self.metrics, self.settings.metrics_port).start()
            except OSError as err:
                raise RuntimeError(f"cannot serve metrics on METRICS_PORT={self.settings.metrics_port}: {err}") from err
        self._launch_spark()
        try:
            # Before anything runs: state made for another join must not be touched.
            store = checkpoint.Checkpoint(self.settings.checkpoint_location, lambda: self.spark)
            if self._checkpoint_lock is None:
                self._checkpoint_lock = store.lock("changejoin run")
            self.plan = checkpoint.reconcile(self.plan, self.settings.checkpoint_location, store,
                                             buckets_set=self.settings.state_buckets is not None)
            # A new checkpoint's first micro-batch is planned with the session's count: the one
            # ``spark_session`` set from SHUFFLE_PARTITIONS, or a given session's own. Only a given
            # session is asked: the service's own is still starting (``_launch_spark``), and the
            # topics and the transactional ids below are to be done meanwhile.
            configured = (int(self.spark.conf.get(SHUFFLE_PARTITIONS, str(self.settings.shuffle_partitions)))
                          if self._spark_given and not self.settings.shuffle_partitions_set
                          else self.settings.shuffle_partitions)
            partitions = checkpoint.task_partitions(store, configured, self.settings.shuffle_partitions_set,
                                                    self.plan.state_buckets)
            checkpoint.record_task_partitions(store, partitions)
            task_partitions = partitions if self.settings.exactly_once else None
            progress_topic = keep_progress_topic(self.settings, store)
            output_partitions = self.ensure_topics(task_partitions, progress_topic)
            delivery = self._delivery(store, task_partitions, progress_topic) if task_partitions else None
            self._query_known.clear()
            self._terminated.clear()
            self._query_listener = _QueryListener(self)
            self.spark.streams.addListener(self._query_listener)
            try:
                with self._idle_events_within_ready_window():
                    _remove(self._stop_file)
                    self.query = JoinPipeline(
                        self.settings, self.plan, self.spark, self._on_batch, output_partitions, delivery,
                        stop_file=self._stop_file, checkpoint=store, crash=self._crash).start()
                self._run_id = str(self.query.runId)
            finally:
                self._query_known.set()
        except BaseException:
            self._stop_observability()
            self._release_checkpoint()
            raise
        return self.query

    def _release_checkpoint(self) -> None:
        if self._checkpoint_lock is not None:
            self._checkpoint_lock.release()
            self._checkpoint_lock = None

    @contextmanager
    def _idle_events_within_ready_window(self):
        """Spark reports an idle query every ``noDataProgressEventInterval`` (10 s by default),
        which can be longer than the readiness window: the query is started with a third of the
        window (at least 1 s) unless SPARK_CONF_ sets it (``session.query_start_properties``).
        Spark copies the session's SQL configuration when a query starts, so the session's own
        values are restored afterwards."""
        properties = query_start_properties(self.settings)
        if not properties:
            yield
            return
        conf = self.spark.conf
        previous = {key: conf.get(key, None) for key in properties}
        for key, value in properties.items():
            conf.set(key, value)
        try:
            yield
        finally:
            for key, value in previous.items():
                if value is None:
                    conf.unset(key)
                else:
                    conf.set(key, value)

    def process_available(self, timeout_s: float = 900.0) -> None:
        """Block until every record available now has been joined and written.

        A query whose join uses processing-time timers runs a micro-batch at every trigger, even
        without data, so Spark's ``processAllAvailable`` never sees it idle: it is then done when
        a committed micro-batch read nothing and every source's end offset is its latest offset."""
        if self.plan.time_mode is not TimeMode.PROCESSING_TIME:
            self.query.processAllAvailable()
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.query.exception() is not None:
                raise self.query.exception()
            progress = self.query.lastProgress
            if progress and progress["numInputRows"] == 0 and all(
                _offsets(src.get("endOffset")) == _offsets(src.get("latestOffset")) for src in progress["sources"]
            ):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the query did not catch up with its input within {timeout_s:.0f} s")

    def _stop_observability(self) -> None:
        if self._query_listener is not None:
            try:
                self.spark.streams.removeListener(self._query_listener)
            except Exception:  # noqa: BLE001 - Spark may already be stopped
                log.debug("could not remove the query listener", exc_info=True)
            self._query_listener = None
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None

    def _hold_input(self) -> None:
        """From now on the sources plan no new input (their ``stopFile`` exists)."""
        try:
            with open(self._stop_file, "w"):
                pass
        except OSError:  # the graceful stop then takes longer, no more
            log.warning("could not create %s: micro-batches go on until the query stops", self._stop_file)

    def stop(self, graceful_timeout_s: float = 0.0) -> None:
        """Stop the query. With a timeout, first let the micro-batch in flight commit (waiting up to
        the timeout) and no other begin, so that a planned stop leaves nothing to replay: from now on
        the sources plan no new input (``stopFile``), and the query stops once no trigger is active
        or a micro-batch that was in flight has committed, whichever comes first (a join with
        processing-time timers runs a micro-batch at every trigger, input or not)."""
        expect_stop()  # the workers' connections closing now are no news (session.py)
        try:
            if self.query is not None and self.query.isActive:
                committed = self._committed
                if graceful_timeout_s > 0:
                    self._hold_input()
                deadline = time.monotonic() + graceful_timeout_s
                while (time.monotonic() < deadline and self.query.status.get("isTriggerActive")
                       and self._committed <= committed):
                    time.sleep(0.02)
                self.query.stop()
            if self.query is not None and self._query_listener is not None:
                # Spark tells listeners of the query's end asynchronously: let that call reach this
                # process before the listener goes (and the process, maybe, with it), or the JVM
                # logs the call it could not make with a stack trace.
                self._terminated.wait(timeout=10)
        finally:
            _remove(self._stop_file)
            self._stop_observability()
            self._release_checkpoint()

    def run_forever(self) -> int:
        """Run until SIGTERM/SIGINT (graceful stop after the current micro-batch) or a failure."""
        stopping = threading.Event()

        def request_stop(signum, frame):
            log.info("signal %d received: stopping after the current micro-batch", signum)
            # At once, not when the loop below next looks (up to a second later, when micro-batches
            # of a few hundred milliseconds would keep starting): the sources plan no new input.
            self._hold_input()
            stopping.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        self._class_archive = True
        try:
            self.start()
            while not stopping.is_set():
                if self.query.awaitTermination(1):
                    break
            self.stop(graceful_timeout_s=60)
            exception = self.query.exception()
            if exception is None:  # SPARK_CLASS_ARCHIVE_DIR: the archive Spark's JVM writes as it exits
                finish_class_archive(self.spark)
        except Exception as err:  # noqa: BLE001 - any failure ends the service with one clear line
            exception = err
            try:
                self.stop()
            except Exception:  # noqa: BLE001 - already failing; the cause is what matters
                pass
        if exception is not None:
            log_fatal(exception)
            return 1
        return 0


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def log_fatal(error: BaseException) -> None:
    """The one log line of a service that stops on a failure: its cause in ``message`` and
    ``cause``; the full text goes to ``detail``. JSON with ``LOG_FORMAT=json``, like every line.

    The cause is what an operator can act on: when the error carries a Python traceback (an
    exception raised by changejoin's code in a Spark Python process, wrapped by Spark in its own
    error), the exception that traceback ends with (``KafkaSourceError: topic 'orders' partition
    0: ...``), whose type is then ``error_type``; a refusal of the configuration or the checkpoint
    (a ``PlanError``, such as an incompatible checkpoint's: what changed, what to do), whole;
    otherwise the error's first line, without the JVM's stack trace."""
    from .plan import PlanError

    text = str(error).strip() or type(error).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = lines[0] if lines else type(error).__name__
    if isinstance(error, PlanError):
        cause = text  # changejoin's own words, written for the operator: every line of them
    error_type = type(error).__name__
    raised = python_exception_in(text)
    if raised is not None:
        error_type, message = raised
        cause = f"{error_type}: {message}" if message else error_type
    log.critical("changejoin stopped: %s", cause, extra={"event": "fatal", "cause": cause,
                                                        "error_type": error_type, "exit_code": 1,
                                                        "detail": text[:20_000]})


_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*)(?::\s?(.*))?$")


def python_exception_in(text: str) -> tuple[str, str] | None:
    """(type name without its module, message) of the exception the last Python traceback in
    ``text`` ends with, or None when ``text`` holds no traceback. A traceback's frames are indented;
    the first line after them that is not is the exception."""
    start = text.rfind(_TRACEBACK)
    if start < 0:
        return None
    for line in text[start + len(_TRACEBACK):].splitlines()[1:]:
        if not line.strip() or line[0].isspace():
            continue
        match = _EXCEPTION_LINE.match(line.strip())
        if match is None:
            return None
        return match.group(1), (match.group(2) or "").strip()
    return None


def _offsets(value) -> object:
    """A source offset from query progress (a JSON string or already parsed) as a comparable value:
    its partitions' offsets only (an end offset also carries the topic's id, the count of lost
    records and the idle heartbeat, which the latest offset does not)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if str(k).isdigit()}
    return value

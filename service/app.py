"""The running service: plan, topics, Spark query, lifecycle (start, drain, stop on SIGTERM)."""
from __future__ import annotations

import logging
import signal
import threading

from .config import Settings
from .pipeline import BatchCounts, JoinPipeline, spark_session
from .plan import JoinPlan, build_plan

log = logging.getLogger(__name__)


class Service:
    """One join, from two input topics to the output topic and the dead-letter topic."""

    def __init__(self, settings: Settings, plan: JoinPlan | None = None, spark=None, on_batch=None):
        self.settings = settings
        self.plan = plan or build_plan(settings)
        self._spark = spark
        self._listeners = [on_batch] if on_batch else []
        self.query = None
        self.batches: list[BatchCounts] = []

    @property
    def spark(self):
        if self._spark is None:
            self._spark = spark_session(self.settings)
        return self._spark

    def _on_batch(self, counts: BatchCounts) -> None:
        self.batches.append(counts)
        for listener in self._listeners:
            listener(counts)

    def ensure_topics(self) -> int:
        """Create the output and dead-letter topics if missing (as many partitions as the left
        input); returns the output topic's partition count."""
        from .sink import ensure_topics, topic_partitions

        kafka = self.settings.kafka_properties()
        bootstrap = kafka.pop("bootstrap.servers")
        partitions = max(1, topic_partitions(bootstrap, kafka, self.settings.left_topic) or 1)
        ensure_topics(bootstrap, kafka, {self.settings.output_topic: partitions, self.settings.dead_letter_topic: 1})
        return topic_partitions(bootstrap, kafka, self.settings.output_topic) or partitions

    def start(self):
        log.info("join plan:\n%s", self.plan.explain())
        output_partitions = self.ensure_topics()
        self.query = JoinPipeline(self.settings, self.plan, self.spark, self._on_batch, output_partitions).start()
        return self.query

    def process_available(self) -> None:
        """Block until every record available now has been joined and written."""
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def run_forever(self) -> int:
        """Run until SIGTERM/SIGINT (graceful stop after the current micro-batch) or a failure."""
        stopping = threading.Event()

        def request_stop(signum, frame):
            log.info("signal %d received: stopping after the current micro-batch", signum)
            stopping.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        self.start()
        while not stopping.is_set():
            if self.query.awaitTermination(1):
                break
        self.stop()
        exception = self.query.exception()
        if exception is not None:
            log.error("the streaming query failed: %s", exception)
            return 1
        return 0

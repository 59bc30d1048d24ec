"""How long a reading task waits on librdkafka at the end of its range, on a clock of the test's.

librdkafka's ``consume(n, timeout)`` returns once it holds ``n`` messages or once ``timeout`` has
passed. Transaction markers take offsets but are no messages, so a range whose last offsets are
markers (every range of a live transactional input that ends at the log's end: another
deployment's exactly-once output, Flink's) never fills its batch: each such task waited the whole
timeout, a second, in every micro-batch. The consumer here is librdkafka's batch rule over a log of
records and markers; a real broker's transactional input is read in
tests/integration/test_kafka_source.py.
"""
from __future__ import annotations

import types

from confluent_kafka import KafkaError

from service import source


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _Error:
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def fatal(self):
        return False

    def str(self):
        return "end of partition"


class _Message:
    def __init__(self, topic, partition, offset, error=None):
        self._topic, self._partition, self._offset, self._error = topic, partition, offset, error

    def error(self):
        return self._error

    def offset(self):
        return self._offset

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition


class LogConsumer:
    """One partition's log: ``markers`` are offsets of transaction markers, every other offset
    below ``end`` a record. ``consume`` collects records from the position (markers advance it
    silently), an end-of-partition event when it reaches the log's end, and waits out its timeout
    on the clock unless it filled its batch, as librdkafka does."""

    def __init__(self, clock: Clock, end: int, markers=()):
        self.clock, self.end, self.markers = clock, end, set(markers)
        self.position_at = 0
        self.waited = 0.0
        self.topic = self.partition = None

    def assign(self, partitions):
        (tp,) = partitions
        self.topic, self.partition, self.position_at = tp.topic, tp.partition, tp.offset
        self._eof_sent = False

    def consume(self, n, timeout):
        out = []
        while len(out) < n and self.position_at < self.end:
            if self.position_at not in self.markers:
                out.append(_Message(self.topic, self.partition, self.position_at))
            self.position_at += 1
        if len(out) < n and self.position_at >= self.end and not self._eof_sent:
            out.append(_Message(self.topic, self.partition, self.end, _Error(KafkaError._PARTITION_EOF)))
            self._eof_sent = True
        if len(out) < n:
            self.clock.now += timeout
            self.waited += timeout
        return out

    def position(self, partitions):
        return [types.SimpleNamespace(offset=self.position_at)]


class OnePool:
    """The reader's pool, holding the one consumer."""

    def __init__(self, consumer):
        self.kept = types.SimpleNamespace(consumer=consumer)

    def take(self, opts, topic, topic_id):
        return self.kept

    def give_back(self, kept):
        pass

    def discard(self, kept):
        raise AssertionError("the read failed")


def read(monkeypatch, consumer, start, end) -> list:
    monkeypatch.setattr(source, "time", types.SimpleNamespace(monotonic=consumer.clock.monotonic))
    opts = source.SourceOptions({"bootstrap.servers": "b:9092", "topic": "orders"})
    part = source.KafkaInputPartition("orders", 0, start, end)
    return [m.offset() for m in source._iter_records(opts, part, OnePool(consumer))]


def test_a_range_ending_on_a_marker_at_the_log_end_is_read_without_waiting_for_records_that_cannot_come(monkeypatch):
    # Five committed transactions of ten records, each followed by its marker: 55 offsets.
    markers = {10, 21, 32, 43, 54}
    consumer = LogConsumer(Clock(), end=55, markers=markers)
    assert read(monkeypatch, consumer, 0, 55) == [o for o in range(55) if o not in markers]
    assert consumer.waited <= 0.05, f"the reader waited {consumer.waited:.2f} s at the end of its range"
    # The next micro-batch's range, one more transaction later, the same.
    consumer.end, consumer.markers = 66, markers | {65}
    consumer.waited = 0.0
    assert read(monkeypatch, consumer, 55, 66) == list(range(55, 65))
    assert consumer.waited <= 0.05, f"the reader waited {consumer.waited:.2f} s at the end of its range"


def test_a_range_of_records_only_waits_for_nothing(monkeypatch):
    consumer = LogConsumer(Clock(), end=3000)
    assert read(monkeypatch, consumer, 0, 3000) == list(range(3000))
    assert consumer.waited == 0.0

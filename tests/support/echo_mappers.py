"""Mappers for the Kafka source's mapper hook (``service/source.py``), named by
tests/integration/test_kafka_source.py as ``tests.support.echo_mappers:make_echo_mapper``: Spark's
Python workers import this module by that name (the conftest puts the repository's root on their
PYTHONPATH)."""
from __future__ import annotations

import os
from typing import Any, Dict

from service.source import KafkaRecord, consumers_created


class EchoMapper:
    schema = "k string, v string, part int, off long, ts_ms long, header_keys string, tag string"

    def __init__(self, config: Dict[str, Any]):
        self.tag = config["tag"]

    def map(self, record: KafkaRecord):
        assert isinstance(record, KafkaRecord)
        if record.value == b"skip":
            return
        copies = 2 if record.value == b"twice" else 1
        for i in range(copies):
            yield (
                None if record.key is None else record.key.decode(),
                None if record.value is None else record.value.decode(),
                record.partition,
                record.offset,
                record.timestamp_ms,
                ",".join(k for k, _ in record.headers),
                f"{self.tag}{i}",
            )


def make_echo_mapper(config: Dict[str, Any]) -> EchoMapper:
    return EchoMapper(config)


class BeatingMapper(EchoMapper):
    """An EchoMapper that also answers idle heartbeats."""

    def heartbeat(self, event_time_ms: int):
        yield (None, None, -1, -1, event_time_ms, "", f"{self.tag}heartbeat")


def make_beating_mapper(config: Dict[str, Any]) -> BeatingMapper:
    return BeatingMapper(config)


class ConsumerCountingMapper:
    """Each record as (the reading worker's process id, partition, offset, the consumers that
    process has created so far): proves that a worker reads micro-batch after micro-batch with the
    consumers it kept (``service.source.ConsumerPool``)."""

    schema = "pid int, part int, off long, consumers long"

    def __init__(self, config: Dict[str, Any]):
        pass

    def map(self, record: KafkaRecord):
        yield (os.getpid(), record.partition, record.offset, consumers_created())


def make_consumer_counting_mapper(config: Dict[str, Any]) -> ConsumerCountingMapper:
    return ConsumerCountingMapper(config)

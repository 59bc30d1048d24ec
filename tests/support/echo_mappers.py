"""Mappers for the Kafka source's mapper hook (``service/source.py``), named by
tests/integration/test_kafka_source.py as ``tests.support.echo_mappers:make_echo_mapper``: Spark's
Python workers import this module by that name (the conftest puts the repository's root on their
PYTHONPATH)."""
from __future__ import annotations

from typing import Any, Dict

from service.source import KafkaRecord


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

"""The driver's catalog: everything planning reads from outside the configuration, read once, before
planning, into the planner's ``InputCatalog``.

Each input's reader schema comes from where its format says (``service/formats/``): a schema file,
the Schema Registry's latest ``<topic>-value``, or the schema the topic's newest message embeds
(:func:`newest_values`, a Kafka consumer); a lookup join's table is described by the PostgreSQL
catalog (``database.describe_table``). The planner (``planner.build_plan(settings, catalog)``)
then reads nothing: a test builds the catalog it plans against. :func:`plan_for` is both, in turn.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from .avro import SchemaRegistry, load_schema_file
from .config import Settings
from .formats import InputSide, ReaderSchemaError, SchemaSources, format_of
from .logs import kafka_logger
from .plan import JoinPlan, PlanError, record_name
from .planner import InputCatalog, build_plan


def plan_for(settings: Settings, table=None) -> JoinPlan:
    """The plan the driver runs: the inputs' catalog read (:func:`read_catalog`), then planned."""
    return build_plan(settings, read_catalog(settings, table))


def read_catalog(settings: Settings, table=None, sources: SchemaSources | None = None) -> InputCatalog:
    """The catalog of the configured inputs (``table``: a lookup join's table as already described,
    not asked again; ``sources``: where the formats find the reader schemas, the servers and files
    the settings name unless a test gives others); raises PlanError naming what to fix."""
    if settings.lookup and table is None:
        table = describe_lookup_table(settings)
    sources = sources or _Sources(settings)
    left = _reader_schema(settings, "LEFT", sources)
    right = None if settings.lookup else _reader_schema(settings, "RIGHT", sources)
    return InputCatalog(left, right, table)


def _reader_schema(settings: Settings, side: str, sources: SchemaSources) -> dict:
    prefix = side.lower()
    topic = getattr(settings, f"{prefix}_topic")
    found = InputSide(side, topic, getattr(settings, f"{prefix}_schema_file"), record_name(topic))
    try:
        return format_of(getattr(settings, f"{prefix}_format")).reader_schema(found, sources)
    except ReaderSchemaError as err:
        raise PlanError(str(err)) from None


class _Sources:
    """The I/O a format may ask for its reader schema (``formats.SchemaSources``)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._registry = None

    def schema_file(self, path: str) -> dict:
        return load_schema_file(path)

    def latest(self, subject: str):
        if self._registry is None and self.settings.schema_registry_url:
            self._registry = SchemaRegistry(self.settings.schema_registry_url,
                                            self.settings.schema_registry_basic_auth_user_info)
        return self._registry.latest(subject)

    def newest_values(self, topic: str) -> list[bytes]:
        return newest_values(self.settings.kafka_bootstrap_servers, self.settings.consumer_properties(), topic)


def describe_lookup_table(settings: Settings):
    """The catalog of the table RIGHT_LOOKUP_URL / RIGHT_LOOKUP_TABLE name (``service/database.py``)."""
    from .database import DatabaseError, describe_table

    try:
        return describe_table(settings.right_lookup_url, settings.right_lookup_password, settings.lookup_table_name)
    except DatabaseError as err:
        raise PlanError(f"RIGHT_LOOKUP_URL: {err}") from None


def newest_values(bootstrap: str, client_props: Optional[Mapping[str, Any]], topic: str, per_partition: int = 5,
                  timeout: float = 30.0) -> list[bytes]:
    """The values of up to ``per_partition`` newest records of each partition of ``topic``, newest
    first (what a topic's embedded schema is read from at start: ``formats.SchemaSource.MESSAGES``); [] for an empty or
    missing topic."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, **dict(client_props or {}), "group.id": "changejoin-peek",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "logger": kafka_logger(client_props)})
    try:
        md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            return []
        found: list[tuple[int, bytes]] = []
        for partition in md.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, max(low, high - per_partition))])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    break  # the partition's end (or an error): what was read is enough
                if msg.value() is not None:
                    found.append((msg.timestamp()[1], msg.value()))
                if msg.offset() + 1 >= high:
                    break
        return [value for _, value in sorted(found, key=lambda f: f[0], reverse=True)]
    finally:
        consumer.close()

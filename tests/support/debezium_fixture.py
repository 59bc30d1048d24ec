"""A real Debezium capture of PostgreSQL into the session's Kafka broker, for the tests and
benchmarks that read Debezium changelogs: no Docker, no fake envelopes.

The ``debezium_capture`` fixture (session scope) is a :class:`DebeziumCapture`: a PostgreSQL server
of its own with ``wal_level=logical`` (devkit/postgres.py; the session's ``postgres_url`` server is
not logical) and a Kafka Connect worker (devkit/kafka_connect.py, Debezium's PostgreSQL connector
on its classpath, jars fetched on first use) writing to ``kafka_bootstrap``. A test makes its
tables, writes the rows that the snapshot should read, starts a connector on them, and reads the
topic:

    def test_x(debezium_capture):
        cdc = debezium_capture
        table = cdc.create_table("customers", "id int primary key, name text")  # "schema.customers"
        cdc.execute(f"INSERT INTO {table} VALUES (1, 'a')")        # read by the snapshot (op r)
        capture = cdc.capture([table], schemas=False)              # running, snapshot under way
        topic = capture.topic(table)                               # PREFIX.SCHEMA.TABLE
        read_changes(cdc.bootstrap, topic, 1)                      # the snapshot's record
        cdc.execute(f"UPDATE {table} SET name = 'b'")              # streamed (op u)
        records = read_changes(cdc.bootstrap, topic, 2)            # [ChangeRecord], .op, .envelope

Each capture is its own connector with a unique ``topic.prefix``, replication slot and publication
(``pgoutput``, created for its tables only), ``snapshot.mode=initial`` by default; its topics have
one partition, so a topic's order is the commit order. The slot outlives a stop of the worker
(``debezium.connect.stop()`` and ``start()`` resume the capture where it was, changes made
meanwhile included). :meth:`CaptureConnector.stop` removes a connector with its slot and
publication; the session's end removes the connectors and the whole server.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pytest

from devkit.kafka_connect import KafkaConnect, debezium_postgres_config
from devkit.postgres import PostgresServer

#: What the capture needs of PostgreSQL beyond devkit/postgres.py's settings (its defaults of 10
#: replication slots and 10 WAL senders are plenty: one of each per connector).
LOGICAL_SETTINGS = {"wal_level": "logical", "max_replication_slots": "20", "max_wal_senders": "20"}


@dataclass(frozen=True)
class ChangeRecord:
    """One record of a Debezium topic as Kafka holds it: the exact key and value bytes, and their
    JSON (None for a null key or value: a tombstone has a key and no value)."""

    topic: str
    partition: int
    offset: int
    timestamp: Optional[int]
    raw_key: Optional[bytes]
    raw_value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]] = field(default_factory=list)

    @property
    def key(self) -> Any:
        return None if self.raw_key is None else json.loads(self.raw_key)

    @property
    def value(self) -> Any:
        return None if self.raw_value is None else json.loads(self.raw_value)

    @staticmethod
    def _payload(doc: Any) -> Any:
        """The converter's payload: ``doc["payload"]`` with schemas, ``doc`` itself without."""
        if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
            return doc["payload"]
        return doc

    @property
    def key_payload(self) -> Any:
        return self._payload(self.key)

    @property
    def envelope(self) -> Optional[Dict[str, Any]]:
        """The change event (``before``, ``after``, ``source``, ``op``, ``ts_ms``...), None for a tombstone."""
        return self._payload(self.value)

    @property
    def op(self) -> Optional[str]:
        """``r``, ``c``, ``u``, ``d``; None for a tombstone."""
        envelope = self.envelope
        return None if envelope is None else envelope["op"]

    def as_sample(self) -> Dict[str, Any]:
        """The record as a JSON document, key and value as the exact text Debezium wrote."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "headers": [[k, None if v is None else v.decode()] for k, v in self.headers],
            "key": None if self.raw_key is None else self.raw_key.decode(),
            "value": None if self.raw_value is None else self.raw_value.decode(),
        }


def _topic_partitions(admin: Any, topic: str) -> Optional[List[int]]:
    md = admin.list_topics(topic, timeout=5).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        return None
    return sorted(md.partitions)


def read_changes(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> List[ChangeRecord]:
    """The first ``count`` records of ``topic`` (at least; every record there when they are read),
    waiting for the topic to exist and for them to arrive. Ordered by partition, then offset."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while True:
        try:
            partitions = _topic_partitions(admin, topic)
        except Exception:
            partitions = None
        if partitions:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} was not made within {timeout:.0f} s")
        time.sleep(0.1)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "tests-unused", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest", "log_level": 0,
    })
    out: List[ChangeRecord] = []
    at_end = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        while len(out) < count or len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: {len(out)} of {count} records within {timeout:.0f} s: "
                                     f"{[(r.op, r.key_payload) for r in out]}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"reading {topic}: {msg.error()}")
            at_end.discard(msg.partition())
            ts_type, ts = msg.timestamp()
            out.append(ChangeRecord(msg.topic(), msg.partition(), msg.offset(), ts if ts_type else None,
                                    msg.key(), msg.value(), list(msg.headers() or [])))
    finally:
        consumer.close()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


def unique_name(stem: str) -> str:
    """A lowercase identifier unique to this call (a topic prefix, slot and publication name)."""
    stem = re.sub(r"[^a-z0-9]+", "_", stem.lower()).strip("_")[:30] or "cdc"
    return f"{stem}_{uuid.uuid4().hex[:8]}"


@dataclass
class CaptureConnector:
    """One running Debezium PostgreSQL connector."""

    owner: "DebeziumCapture"
    name: str
    topic_prefix: str
    config: Dict[str, str]

    def topic(self, table: str) -> str:
        """The topic of ``table`` (``schema.table``, or ``table`` in ``public``)."""
        return f"{self.topic_prefix}.{table if '.' in table else 'public.' + table}"

    def status(self) -> Dict[str, Any]:
        return self.owner.connect.status(self.name)

    @property
    def slot(self) -> str:
        return self.config["slot.name"]

    def stop(self, timeout: float = 30.0) -> None:
        """Remove the connector, then its replication slot and publication (a slot left behind
        keeps the server's write-ahead log)."""
        self.owner.connect.remove_connector(self.name)
        deadline = time.monotonic() + timeout
        while self.owner.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active",
                               (self.slot,)):
            if time.monotonic() > deadline:
                raise AssertionError(f"replication slot {self.slot} still in use {timeout:.0f} s after "
                                     f"connector {self.name} was removed")
            time.sleep(0.1)
        self.owner.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                           "WHERE slot_name = %s", (self.slot,))
        self.owner.execute(f'DROP PUBLICATION IF EXISTS "{self.config["publication.name"]}"')


class DebeziumCapture:
    """A logical-decoding PostgreSQL and a Connect worker with Debezium, writing to ``bootstrap``."""

    def __init__(self, bootstrap: str, heap: str = "384m"):
        self.bootstrap = bootstrap
        self.postgres = PostgresServer(settings=LOGICAL_SETTINGS)
        self.connect = KafkaConnect(bootstrap, heap=heap)
        self.url: Optional[str] = None
        self.schemas_made: List[str] = []

    def start(self) -> "DebeziumCapture":
        """Start both, side by side (the worker's JVM is the slow one); returns self."""
        self.connect.spawn()
        try:
            self.url = self.postgres.start()
            self.connect.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for name in list(self.connect.connectors):
            try:
                self.connect.remove_connector(name)
            except Exception:
                pass
        self.connect.close()
        self.postgres.close()

    # ---- the database --------------------------------------------------------------------------

    def execute(self, statement: str, params: Optional[Sequence[Any]] = None) -> None:
        """Run one statement in its own transaction (autocommit)."""
        import psycopg

        assert self.url is not None
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(statement, params)

    def execute_many(self, statements: Iterable[str]) -> None:
        """Run statements one after the other, each committed on its own (so each change is its
        own transaction, in this order)."""
        import psycopg

        assert self.url is not None
        with psycopg.connect(self.url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def query(self, statement: str, params: Optional[Sequence[Any]] = None) -> List[tuple]:
        import psycopg

        assert self.url is not None
        with psycopg.connect(self.url, autocommit=True) as conn:
            return list(conn.execute(statement, params).fetchall())

    def create_table(self, name: str, columns: str, replica_identity_full: bool = True,
                     schema: Optional[str] = None) -> str:
        """``CREATE TABLE schema.name (columns)`` in a new schema of its own (or ``schema``), with
        ``REPLICA IDENTITY FULL`` by default (updates and deletes then carry the whole old row,
        not only its key); returns ``schema.name``."""
        if schema is None:
            schema = unique_name(name)
            self.execute(f'CREATE SCHEMA "{schema}"')
            self.schemas_made.append(schema)
        table = f'"{schema}"."{name}"'
        self.execute(f"CREATE TABLE {table} ({columns})")
        if replica_identity_full:
            self.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
        return f"{schema}.{name}"

    # ---- connectors ----------------------------------------------------------------------------

    def capture(self, tables: Sequence[str], schemas: bool = True, snapshot_mode: str = "initial",
                name: Optional[str] = None, extra: Optional[Dict[str, Any]] = None,
                wait: bool = True) -> CaptureConnector:
        """Start a Debezium connector on ``tables`` (``schema.table``) writing JSON with the schema
        in each record (``schemas``) or without; wait until it and its task run (``wait``). Its
        topics are ``PREFIX.SCHEMA.TABLE``, made by the worker."""
        assert self.url is not None
        name = name or unique_name("cdc")
        config = debezium_postgres_config(self.url, topic_prefix=name, tables=tables, slot=name,
                                          snapshot_mode=snapshot_mode, schemas=schemas, extra=extra)
        self.connect.add_connector(name, config, wait=wait)
        return CaptureConnector(self, name, name, config)


@pytest.fixture(scope="session")
def debezium_capture(kafka_bootstrap: str) -> Iterator[DebeziumCapture]:
    """A PostgreSQL with logical decoding and a Kafka Connect worker with Debezium's PostgreSQL
    connector, capturing into the session's broker; shared by the session's tests (each makes its
    own tables and connectors: unique names), so that its JVM starts once, not once per module."""
    capture = DebeziumCapture(kafka_bootstrap).start()
    try:
        yield capture
    finally:
        capture.close()

"""The one end-to-end driver of the tests: produce input changelogs, run the real service (in
process on the session's Spark, or as a process: see service_process.ServiceProcess), read the
output and dead-letter topics back, drop replays and materialize the output.

The inputs' Avro schemas are the ones the service is configured with (``LEFT_SCHEMA_FILE``,
``RIGHT_SCHEMA_FILE``), so a test that changes them sends in the new schema.
"""
from __future__ import annotations

import copy
import io
import datetime as dt
import json
import os
import subprocess
import sys
from collections import Counter, namedtuple
from pathlib import Path
from typing import Dict, Iterable, List

import fastavro

from tests.support.jvm_archives import service_jvm_options
from tests.support.kafka_fixture import consume_all, produce
from service import faults
from service.app import Service
from service.checkpoint import Checkpoint
from service.config import load_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = REPO_ROOT / "schemas"

DATA = Path(__file__).resolve().parents[1] / "data"
ORDERS = json.loads((SCHEMAS / "orders.avsc").read_text())
PRICES = json.loads((SCHEMAS / "prices.avsc").read_text())
TIMED_ORDERS = json.loads((DATA / "orders_timed.avsc").read_text())
RATES = json.loads((DATA / "rates.avsc").read_text())
SHIPMENTS = json.loads((DATA / "shipments.avsc").read_text())
#: Interval and window joins (orders and their shipments): a record at this time on both inputs
#: moves the watermark past everything before it.
FAR_FUTURE = 100_000


def event_time_inputs():
    """The event-time temporal join's scenario (``TEMPORAL``, 1 s watermark delays): rate versions
    and orders arriving out of order (within the delay), an order with no rate (GBP), and a rate
    and an order at 100 s that move the watermark to 99 s. Returns (rates, orders, the joined
    table of an INNER join, the row a LEFT join adds)."""
    rates = [("+I", rate("USD", 1.2, 5_000)), ("+I", rate("USD", 1.1, 1_000)), ("+I", rate("EUR", 0.9, 1_000)),
             ("+I", rate("ANY", 1.0, 100_000))]
    orders = [("+I", timed_order(3, "USD", 30, 6_000)), ("+I", timed_order(1, "USD", 10, 2_000)),
              ("+I", timed_order(2, "EUR", 20, 3_000)), ("+I", timed_order(5, "GBP", 5, 4_000)),
              ("+I", timed_order(9, "ANY", 1, 100_000))]
    inner = {(1, "USD", 10.0, 1.1): 1, (2, "EUR", 20.0, 0.9): 1, (3, "USD", 30.0, 1.2): 1}
    return rates, orders, inner, (5, "GBP", 5.0, None)


def window_order(order_id, at):
    """An order of the interval and window joins (``TIMED_ORDERS``), at event time ``at`` (ms)."""
    return {"order_id": order_id, "currency": "EUR", "amount": float(order_id), "order_time": at}


def shipment(ship_id, order_id, at, carrier="ups"):
    return {"ship_id": ship_id, "order_id": order_id, "carrier": carrier, "ship_time": at}


def at(ms):
    """A window column as the output's timestamp-millis field reads back."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)

#: Orders with an event time joined with a versioned table of currency rates.
TEMPORAL = dict(
    JOIN_SQL="SELECT o.order_id, o.currency, o.amount, r.rate FROM orders AS o JOIN rates "
             "FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency",
    LEFT_SCHEMA_FILE=str(DATA / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(DATA / "rates.avsc"),
    LEFT_TABLE="orders", RIGHT_TABLE="rates", LEFT_PRIMARY_KEY="order_id", RIGHT_PRIMARY_KEY="currency",
    RIGHT_EVENT_TIME_COLUMN="rate_time",
)


#: What a ``python -m service run`` that a test starts gets besides its own settings: its Spark JVM
#: compiles with C1 only, and maps the class-data-sharing archive of jvm_archives.py when
#: ``./dev test`` has made it (``CHANGEJOIN_TEST_SERVICE_JVM_OPTIONS`` replaces both, empty for the
#: JVM's defaults). A test's service lives for seconds to a minute, in which C2 compiling Spark's
#: hot methods costs more CPU than it saves, and loading Spark's classes from their jars is most
#: of its start; the suite is CPU-bound on two cores. The tests' own Spark session, which lives
#: for the whole run, keeps the defaults.
SERVICE_JVM_OPTIONS = os.environ.get("CHANGEJOIN_TEST_SERVICE_JVM_OPTIONS",
                                      service_jvm_options())
SERVICE_PROCESS_ENV = {"SPARK_CONF_spark_driver_defaultJavaOptions": SERVICE_JVM_OPTIONS} if SERVICE_JVM_OPTIONS else {}


def start_service_process(env: Dict[str, str], log) -> subprocess.Popen:
    """``python -m service run`` with ``env`` (over this process's environment and
    :data:`SERVICE_PROCESS_ENV`) in its own process group, its output to the open file ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "service", "run"], cwd=REPO_ROOT,
        env={**os.environ, **SERVICE_PROCESS_ENV, **env},
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def next_batch(checkpoint: Path) -> int:
    """The id of the first micro-batch of a run started now on ``checkpoint`` (a local one)."""
    newest = Checkpoint(str(checkpoint)).newest_committed()
    return 0 if newest is None else newest + 1


def avro(schema: dict, row: dict) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), row)
    return buffer.getvalue()


def order(order_id, product, quantity):
    return {"order_id": order_id, "product": product, "quantity": quantity}


def price(product, value, currency="EUR"):
    return {"product": product, "price": value, "currency": currency}


def timed_order(order_id, currency, amount, at):
    return {"order_id": order_id, "currency": currency, "amount": amount, "order_time": at}


def rate(currency, value, at):
    return {"currency": currency, "rate": value, "rate_time": at}


#: orders LEFT JOIN prices, the join of the end-to-end tests.
ORDERS_LEFT_JOIN_PRICES = (
    "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
)

#: A changelog with inserts, updates (-U/+U) and deletes on both sides.
ORDER_CHANGES = [
    ("+I", order(1, "book", 2)),
    ("+I", order(2, "pen", 10)),
    ("+I", order(3, "ink", 1)),
    ("-U", order(2, "pen", 10)),
    ("+U", order(2, "pen", 12)),
    ("-D", order(3, "ink", 1)),
    ("+I", order(4, "paper", 5)),
    ("-U", order(1, "book", 2)),
    ("+U", order(1, "ink", 2)),  # moves to another join key
]
PRICE_CHANGES = [
    ("+I", price("book", 12.5)),
    ("+I", price("pen", 1.2)),
    ("-U", price("pen", 1.2)),
    ("+U", price("pen", 1.5)),
    ("+I", price("ink", 7.0)),
    ("+I", price("glue", 3.0)),
    ("-D", price("book", 12.5)),
]


# -- output: decode, drop replays, materialize ---------------------------------------------------
#: One output record: its RowKind header ("" in upsert mode), decoded row (None for a tombstone),
#: message key, headers, replay identity and where it was written.
Change = namedtuple("Change", "kind row key headers batch seq partition offset")


def read_changelog(bootstrap: str, topic: str, output_schema: dict, wire: bool = False, start: int = 0) -> List[Change]:
    """The records of an output topic from the ``start``-th on, decoded in ``output_schema``
    (``wire``: values in Confluent wire format)."""
    return decode_changelog(consume_all(bootstrap, topic)[start:], output_schema, wire)


def decode_changelog(records, output_schema: dict, wire: bool = False) -> List[Change]:
    """Output records (with ``key``, ``value``, ``headers``, ``partition``, ``offset``), decoded in
    ``output_schema`` (``wire``: values in Confluent wire format)."""
    schema = fastavro.parse_schema(output_schema)
    skip = 5 if wire else 0
    out = []
    for record in records:
        headers = dict(record.headers)
        row = None if record.value is None else tuple(
            fastavro.schemaless_reader(io.BytesIO(record.value[skip:]), schema, None).values())
        out.append(Change(
            headers.get("rowkind", b"").decode(), row, record.key, headers, int(headers["changejoin.batch"]),
            headers["changejoin.seq"].decode(), record.partition, record.offset,
        ))
    return out


def dead_letters(bootstrap: str, topic: str) -> List[Change]:
    """The records of a dead-letter topic, as changes whose ``kind`` is their ``reason`` header and
    whose ``row`` is their value (so that drop_replays drops their replays too)."""
    out = []
    for record in consume_all(bootstrap, topic):
        headers = dict(record.headers)
        out.append(Change(headers["reason"].decode(), record.value, record.key, headers,
                          int(headers["changejoin.batch"]), headers["changejoin.seq"].decode(), record.partition,
                          record.offset))
    return out


def drop_replays(changes: Iterable[Change]):
    """(first writes, replays): a record whose (batch, seq) was seen already is a replay. A replay
    must be the very record written the first time."""
    first: Dict[tuple, Change] = {}
    kept, replays = [], []
    for change in changes:
        ident = (change.batch, change.seq)
        if ident in first:
            original = first[ident]
            assert (change.kind, change.row, change.key) == (original.kind, original.row, original.key), (
                f"the replay of batch {change.batch} seq {change.seq} is not the record written first: "
                f"{original} then {change}")
            replays.append(change)
        else:
            first[ident] = change
            kept.append(change)
    return kept, replays


def retract_table(changes: Iterable[Change]) -> Counter:
    """The multiset a retract changelog materializes to; every retraction must retract a row the
    output holds (a full changelog)."""
    table: Counter = Counter()
    for c in changes:
        table[c.row] += 1 if c.kind in ("+I", "+U") else -1
        assert table[c.row] >= 0, f"{c.kind} {c.row} (batch {c.batch} seq {c.seq}) retracts a row not in the output"
    return +table


def upsert_table(changes: Iterable[Change]) -> dict:
    """Message key -> latest row of an upsert changelog (tombstones delete)."""
    table: dict = {}
    for c in changes:
        if c.row is None:
            table.pop(c.key, None)
        else:
            table[c.key] = c.row
    return table


# -- the service in process ------------------------------------------------------------------------
class JoinHarness:
    """Two input topics (left: orders, right: prices unless the environment says otherwise), an
    output topic, and the service's environment."""

    def __init__(self, bootstrap: str, spark, tmp_path: Path, new_topic, partitions: int = 1, **env):
        self.bootstrap = bootstrap
        self.spark = spark
        self.orders = new_topic(partitions)
        self.prices = new_topic(partitions)
        self.output = new_topic(partitions, create=False)
        self.env = {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "LEFT_TOPIC": self.orders, "RIGHT_TOPIC": self.prices, "OUTPUT_TOPIC": self.output,
            "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices",
            "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"),
            "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
            "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"),
            "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
            **env,
        }
        self.service = None
        self.services: List[Service] = []  # every run's, the newest last
        self._schemas: Dict[str, dict] = {}

    def alongside(self, tmp_path: Path, **env) -> "JoinHarness":
        """Another deployment reading the same input topics: its own checkpoint under ``tmp_path``,
        ``env`` over this one's settings."""
        other = copy.copy(self)
        other.env = {**self.env, "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"), **env}
        other.service, other.services, other._schemas = None, [], dict(self._schemas)
        return other

    def send(self, topic: str, schema: dict, changes, partition=None):
        """changes: (kind, row dict[, partition]); kind None sends no RowKind header."""
        records = []
        for change in changes:
            kind, row = change[0], change[1]
            part = change[2] if len(change) > 2 else partition
            headers = [("rowkind", kind.encode())] if kind else None
            records.append((None, avro(schema, row) if isinstance(row, dict) else row, headers, part))
        produce(self.bootstrap, topic, records)

    def _schema(self, variable: str) -> dict:
        """The Avro schema in the file ``variable`` names (read once: a test may delete the file
        once the service has read it)."""
        path = self.env[variable]
        if path not in self._schemas:
            self._schemas[path] = json.loads(Path(path).read_text())
        return self._schemas[path]

    def send_left(self, changes, partition=None):
        """Rows written in the left input's configured schema."""
        self.send(self.orders, self._schema("LEFT_SCHEMA_FILE"), changes, partition)

    def send_right(self, changes, partition=None):
        self.send(self.prices, self._schema("RIGHT_SCHEMA_FILE"), changes, partition)

    send_orders = send_left
    send_prices = send_rates = send_right

    def start(self, crash: faults.CrashPoint | None = None, **env) -> Service:
        """Start the service (same checkpoint as any earlier run); the caller stops it."""
        self.service = Service(load_settings({**self.env, **env}), spark=self.spark, crash=crash)
        self.services.append(self.service)
        self.service.start()
        return self.service

    def next_batch(self) -> int:
        """The id of the first micro-batch of a run started now."""
        return next_batch(Path(self.env["CHECKPOINT_LOCATION"]))

    def crash(self, point: str, timeout_s: float = 300.0, later: int = 0, **env) -> int:
        """Run the service until it crashes at ``point`` (``faults.in_process``) of its first
        micro-batch (or the ``later``-th after it): a task's point kills its Python worker, its
        transaction left open, and the driver's fails the micro-batch before Spark records it.
        Returns the micro-batch's id."""
        batch = self.next_batch() + later
        service = self.start(crash=faults.in_process(point, batch), **env)
        try:
            try:
                ended = service.query.awaitTermination(timeout_s)
            except Exception:  # noqa: BLE001 - the query's failure, read below
                ended = True
            assert ended, f"the service did not reach {point} of micro-batch {batch} within {timeout_s:.0f} s"
        finally:
            service.stop()
        error = str(service.query.exception())
        assert (f"crash point {point} of micro-batch {batch}" if point == faults.DRIVER_POINT else
                "Python worker exited unexpectedly") in error, f"{point}@{batch}: the query ended with {error[:2000]}"
        return batch

    def run(self, **env) -> Service:
        """Start the service, join everything available, stop."""
        self.start(**env)
        try:
            self.service.process_available()
        finally:
            self.service.stop()
        return self.service

    def changelog(self, start: int = 0) -> List[Change]:
        """The output records from the ``start``-th on, decoded in the last run's output schema."""
        return read_changelog(self.bootstrap, self.output, self.service.plan.output_schema,
                              wire=bool(self.service.settings.schema_registry_url), start=start)

    def retract_table(self) -> Counter:
        """The output as a consumer applies it: replays dropped (a micro-batch interrupted by a stop
        is written again at the next start), then every change applied."""
        return retract_table(drop_replays(self.changelog())[0])

    def upsert_table(self) -> dict:
        return upsert_table(drop_replays(self.changelog())[0])

    def dead_letters(self) -> list:
        return consume_all(self.bootstrap, self.service.settings.dead_letter_topic)

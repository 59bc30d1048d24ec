"""The service's query in memory: the real stages of a record's path (``decode.py``'s
:class:`~service.decode.InputDecoder`, a lookup join's ``lookup.lookup_partition`` on a table in
memory (:class:`FakeTable`), the normalize, join and upsert processors of ``processor.py`` and
``encode.py``'s :class:`~service.encode.OutputEncoder`) run on Spark's state faked in memory
(``spark_fakes.KeyedHandle``), without a broker and without a Spark query, as Kafka Streams'
TopologyTestDriver runs a topology.

Kafka records go in as bytes and headers (:meth:`QueryDriver.pipe`, or the changelog helpers
:meth:`QueryDriver.send_left` / ``send_right`` that :class:`service_harness.JoinHarness` has too),
a micro-batch runs them (:meth:`QueryDriver.batch`, or :meth:`QueryDriver.run`, which also runs
the batch without data that Spark runs when the watermark moves), and the Kafka records written
come out as bytes and headers, kept in an output log read back as the harness reads a topic
(:meth:`QueryDriver.changelog`, :meth:`QueryDriver.retract_table`, ...). What Spark does around the
stages, the driver does as Spark does it (and only that is not proven here, but in
``tests/integration``):

- a micro-batch reads every record piped since the last one; each input partition is one reading
  task, as the Kafka source plans it;
- the stateful stages get their rows grouped by their grouping key, keys in order, then the timers
  due (by the processing clock, or by the watermark in an event-time join);
- the processing clock is the driver's (:meth:`QueryDriver.advance`), so a test of state TTL waits
  for nothing; Kafka timestamps are taken from it as records are piped;
- the watermark of a micro-batch is the one the micro-batch before it left: per input the latest
  event time it has read less its delay, the least of the inputs that have read any (Spark's
  default ``min`` policy), never going back; :meth:`QueryDriver.run` runs a micro-batch without
  data when it moves, as Spark does for a stateful query;
- a run (:meth:`QueryDriver.run`) is a restart: the plan is made again and reconciled with the
  checkpoint's file, as the service does at start;
- :meth:`QueryDriver.abort_and_replay` runs the last micro-batch again on the state it started
  from, as Spark does after a task or a driver failed before the batch committed.

Spark's grouping into shuffle partitions, its checkpoints, its ``withWatermark`` and its idle
heartbeats are Spark's: the integration tier proves those on a real query.
"""
from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from collections import Counter, namedtuple
from pathlib import Path
from typing import Iterable

import fastavro

from service import checkpoint
from service.catalog import plan_for
from service.config import load_settings
from service.decode import InputDecoder
from service.encode import OutputEncoder
from service.envelope import ENVELOPE_FIELDS, EVENT_TIME, JK, TAG, Tag
from service.lookup import LookupStage, lookup_partition
from service.pipeline import BatchCounts
from service.plan import PlanKind
from service.processor import JoinProcessor, NormalizeProcessor, UpsertProcessor
from service.shipping import built, worker_config, worker_secrets
from service.source import KafkaRecord
from tests.support.service_harness import SCHEMAS, avro, decode_changelog, drop_replays, retract_table, upsert_table
from tests.support.spark_fakes import KeyedHandle

#: One record the query wrote (an output or a dead-letter record), as a consumer reads it back.
Written = namedtuple("Written", "topic partition offset key value headers")

#: The topics the driver's settings name (nothing is sent to them: they label the records).
TOPICS = {"LEFT_TOPIC": "orders", "RIGHT_TOPIC": "prices", "OUTPUT_TOPIC": "output"}
#: The processing clock at the start (epoch milliseconds): a day in, well clear of zero.
START_MS = 86_400_000


class QueryDriver:
    """One join's query in memory. ``env``: the service's environment variables, over the
    settings :class:`service_harness.JoinHarness` starts with (orders LEFT JOIN prices inputs)."""

    def __init__(self, tmp_path: Path | None = None, partitions: int = 1, table: "FakeTable | None" = None, **env):
        """``tmp_path``: where the checkpoint's file goes (``changejoin-state.json``; the state
        itself stays in memory), else a temporary directory of the driver's own; ``partitions``:
        of each input topic; ``table``: a lookup join's table (``RIGHT_LOOKUP_URL`` is then never
        connected to). An ``env`` value None removes the variable."""
        self.table = table
        self._temp = None if tmp_path else tempfile.TemporaryDirectory(prefix="query-driver-")
        self.env = {
            "KAFKA_BOOTSTRAP_SERVERS": "in-memory:9092", **TOPICS,
            "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices",
            "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"),
            "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
            "CHECKPOINT_LOCATION": str(Path(tmp_path or self._temp.name) / "checkpoint"),
            "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
            **env,
        }
        self.partitions = partitions
        self.orders, self.prices, self.output = self.env["LEFT_TOPIC"], self.env["RIGHT_TOPIC"], self.env["OUTPUT_TOPIC"]
        self.clock = START_MS
        self.watermark = 0  # Spark's first micro-batch runs at watermark 0
        self._latest: dict[int, int] = {}  # per input side: the latest event time read (ms)
        self._pending: list[tuple[int, KafkaRecord]] = []
        self._offsets: dict[tuple[int, int], int] = {}
        self._schemas: dict[str, dict] = {}
        self.written: list[Written] = []  # every record written, in order (both topics)
        self.batches: list[BatchCounts] = []
        self.batch_id = 0
        self._last = None  # what the last micro-batch started from (abort_and_replay)
        self.restart()

    # -- the query -------------------------------------------------------------------------------
    def restart(self, **env) -> "QueryDriver":
        """Plan the query again, from the environment with ``env`` over it for this run only, and
        reconcile the plan with the checkpoint (``checkpoint.reconcile``: a refused change raises
        before anything changes; evolved schemas get their state generations), keeping the
        state, as a service restarted on the same checkpoint does. A lookup join's client starts
        afresh (its cache empty), as a restarted service's workers do."""
        settings = load_settings({k: v for k, v in {**self.env, **env}.items() if v is not None})
        os.makedirs(settings.checkpoint_location, exist_ok=True)
        plan = checkpoint.reconcile(plan_for(settings, table=self.table and self.table.info),
                                    settings.checkpoint_location, buckets_set=settings.state_buckets is not None)
        self.settings, self.plan = settings, plan
        config = worker_config(settings, plan, secrets=worker_secrets(settings, kafka=False))
        sides = (0,) if plan.kind is PlanKind.LOOKUP else (0, 1)
        self.decoders = {side: InputDecoder.from_config(config.for_side(side)) for side in sides}
        self.encoder = OutputEncoder.from_config(config)
        self.lookup = None
        if plan.kind is PlanKind.LOOKUP:
            assert self.table is not None, "a lookup join needs the driver's table (QueryDriver(table=FakeTable(...)))"
            # The reading tasks' stage, as lookup_partition builds it (once per worker process and
            # config); its client is made afresh here and reaches the table in memory.
            stage = built(LookupStage.from_config, config)
            stage.client = LookupStage(plan, None).client
            stage.client._conn = _TableConnection(self.table, stage.client)
            stage.client.clock = lambda: self.clock / 1000
            self.lookup = lookup_partition(config, None)
        if not hasattr(self, "handles"):  # Spark's state of each stateful stage, kept across batches
            self.handles = {"normalize-0": KeyedHandle(), "normalize-1": KeyedHandle(), "join": KeyedHandle(),
                            "upsert": KeyedHandle()}
        return self

    def advance(self, ms: int) -> None:
        """Let ``ms`` of processing time pass."""
        self.clock += ms

    def pipe(self, side: int, records: Iterable[tuple]) -> None:
        """Kafka records into input ``side`` (0 left, 1 right): ``(key, value[, headers[, partition[,
        timestamp_ms]]])`` with bytes (or None) and headers a list of (name, bytes) pairs, as
        ``kafka_fixture.produce`` takes them; each partition's offsets count from 0, the timestamp
        is the processing clock unless given."""
        topic = self.orders if side == 0 else self.prices
        for record in records:
            key, value = record[:2]
            headers = record[2] if len(record) > 2 else None
            partition = (record[3] if len(record) > 3 else None) or 0
            assert 0 <= partition < self.partitions, f"partition {partition} of a topic of {self.partitions}"
            timestamp = record[4] if len(record) > 4 else self.clock
            offset = self._offsets.get((side, partition), 0)
            self._offsets[(side, partition)] = offset + 1
            self._pending.append((side, KafkaRecord(topic, partition, offset, timestamp, key, value, list(headers or []))))

    def batch(self) -> list[Written]:
        """One micro-batch of every record piped since the last one: the records it wrote."""
        self._last = (self.batch_id, self._pending, copy.deepcopy(self.handles), self.watermark, dict(self._latest),
                      self.clock, len(self.written), len(self.batches))
        pending, self._pending = self._pending, []
        return self._run(pending)

    def run(self, **env) -> "QueryDriver":
        """Restart (``env``: settings of this run, over the environment) and join everything piped:
        one micro-batch, then one without data if the watermark moved, as Spark runs them."""
        self.restart(**env)
        watermark = self.watermark
        self.batch()
        if self.plan.is_event_time and self.watermark > watermark:
            self.batch()
        return self

    def abort_and_replay(self, keep_output: bool = False) -> list[Written]:
        """The last micro-batch failed before it committed: run it again on the state, watermark
        and clock it started from. Its first attempt's records stay in the output log only with
        ``keep_output`` (at-least-once delivery; exactly-once aborts them). Returns the replay's
        records."""
        assert self._last is not None, "no micro-batch to replay"
        batch_id, pending, handles, watermark, latest, clock, written, batches = self._last
        self.batch_id, self.handles, self.watermark, self._latest, self.clock = (
            batch_id, copy.deepcopy(handles), watermark, dict(latest), clock)
        if not keep_output:
            del self.written[written:]
        del self.batches[batches:]
        self._last = (batch_id, pending, handles, watermark, latest, clock, len(self.written), len(self.batches))
        return self._run(list(pending))

    def _run(self, pending: list) -> list[Written]:
        plan, now, watermark = self.plan, self.clock, self.watermark
        envelopes = []
        for side in self.decoders:
            rows = []
            tasks: dict[int, list] = {}
            for s, record in pending:
                if s == side:
                    tasks.setdefault(record.partition, []).append(record)
            for partition in sorted(tasks):  # one reading task per input partition
                rows += list(self.decoders[side].map_all(tasks[partition]))
            if plan.sides[side].normalized:
                processor = NormalizeProcessor(plan.to_json(), side)
                rows = self._stage(processor, f"normalize-{side}", rows, lambda r: r[JK], now, watermark)
            self._observe(side, rows)
            if self.lookup is not None:  # a lookup join: the reading tasks look their rows up
                rows = _looked_up(self.lookup, rows)
            envelopes += rows
        until = {"EventTime": watermark, "ProcessingTime": now}.get(plan.time_mode.value)
        out = self._stage(JoinProcessor(plan.to_json()), "join", envelopes, lambda r: r[0], now, watermark, until)
        if plan.upsert_materializer:
            out = self._stage(UpsertProcessor(plan.to_json()), "upsert", out, lambda r: r.okey, now, watermark)
        counts: dict = {}
        start = len(self.written)
        offsets = Counter((w.topic, w.partition) for w in self.written)
        for record in self.encoder.records(((r.target, r.kind, r.payload, r.okey) for r in out),
                                           self.batch_id, 0, counts):
            # (topic, key, value, headers[, partition]): a keyed record's partition (None) is the
            # producer's choice; the driver's topics have one partition.
            topic, key, value, headers = record[:4]
            partition = (record[4] if len(record) > 4 else None) or 0
            self.written.append(Written(topic, partition, offsets[(topic, partition)], key, value, list(headers)))
            offsets[(topic, partition)] += 1
        batch = BatchCounts(self.batch_id)
        for (target, label), n in counts.items():
            batch.add(target, label, n)
        self.batches.append(batch)
        self.batch_id += 1
        self._advance_watermark()
        return self.written[start:]

    def _stage(self, processor, name: str, rows: list, group, now: int, watermark: int, until=None) -> list:
        """A stateful stage's micro-batch: a new processor, as each Spark task makes one, on the
        stage's state."""
        handle = self.handles[name]
        processor.init(handle)
        return handle.run(processor, rows, group, now, watermark, until)

    def _observe(self, side: int, rows: list) -> None:
        """What ``withWatermark`` sees of an input: the event times of its envelopes."""
        if not self.plan.is_event_time:
            return
        times = [int(r[EVENT_TIME].timestamp() * 1000) for r in rows
                 if r[EVENT_TIME] is not None and r[TAG] != int(Tag.DEAD_LETTER)]
        if times:
            self._latest[side] = max(self._latest.get(side, times[0]), max(times))

    def _advance_watermark(self) -> None:
        if self._latest:
            chosen = min(self._latest[side] - self.plan.sides[side].watermark_delay_ms for side in self._latest)
            self.watermark = max(self.watermark, chosen)

    # -- input as the harness sends it -----------------------------------------------------------
    def _schema(self, variable: str) -> dict:
        path = self.env[variable]
        if path not in self._schemas:
            self._schemas[path] = json.loads(Path(path).read_text())
        return self._schemas[path]

    def send(self, side: int, schema: dict, changes, partition=None) -> None:
        """changes: (kind, row dict or bytes[, partition]); kind None sends no RowKind header."""
        records = []
        for change in changes:
            kind, row = change[0], change[1]
            part = change[2] if len(change) > 2 else partition
            headers = [("rowkind", kind.encode())] if kind else []
            records.append((None, avro(schema, row) if isinstance(row, dict) else row, headers, part))
        self.pipe(side, records)

    def send_left(self, changes, partition=None) -> None:
        """Rows written in the left input's configured schema."""
        self.send(0, self._schema("LEFT_SCHEMA_FILE"), changes, partition)

    def send_right(self, changes, partition=None) -> None:
        self.send(1, self._schema("RIGHT_SCHEMA_FILE"), changes, partition)

    send_orders = send_left
    send_prices = send_rates = send_right

    # -- output as the harness reads it ----------------------------------------------------------
    def records(self, topic: str) -> list[Written]:
        """The records of ``topic``, by partition then offset, as a consumer reads a topic."""
        return sorted((w for w in self.written if w.topic == topic), key=lambda w: (w.partition, w.offset))

    def changelog(self, start: int = 0) -> list:
        """The output records from the ``start``-th on, decoded as service_harness decodes them."""
        return decode_changelog(self.records(self.output)[start:], self.plan.output_schema,
                                wire=bool(self.settings.schema_registry_url))

    def retract_table(self) -> Counter:
        return retract_table(drop_replays(self.changelog())[0])

    def upsert_table(self) -> dict:
        return upsert_table(drop_replays(self.changelog())[0])

    def dead_letters(self) -> list[Written]:
        return self.records(self.settings.dead_letter_topic)

    def state_rows(self) -> int:
        """Rows in the stages' state after the last micro-batch (Spark's numRowsTotal, summed over
        the stateful operators as the service's metrics sum them)."""
        return sum(handle.rows() for handle in self.handles.values())

    def state(self, stage: str = "join") -> KeyedHandle:
        """A stateful stage's state (``join``, ``upsert``, ``normalize-0``, ``normalize-1``)."""
        return self.handles[stage]


def _looked_up(lookup, envelopes: list) -> list:
    """``lookup_partition``'s function on the envelopes of a task, through Arrow as in Spark."""
    import pyarrow as pa

    from service.lookup import _arrow_schema

    if not envelopes:
        return []
    batch = pa.RecordBatch.from_pylist([dict(zip(ENVELOPE_FIELDS, e)) for e in envelopes], schema=_arrow_schema())
    return [tuple(row[f] for f in ENVELOPE_FIELDS) for out in lookup(iter([batch])) for row in out.to_pylist()]


class FakeTable:
    """A lookup join's PostgreSQL table in memory: its catalog (``info``, as
    ``database.TableInfo.from_dict`` takes it) and its rows (dicts by column name, values as psycopg
    loads them: ``Decimal`` for numeric), which a test changes between micro-batches. The service's
    LookupClient runs as it is, its key checks, value checks and cache included; only its
    connection is this table's (:class:`_TableConnection`)."""

    def __init__(self, info: dict, rows: Iterable[dict] = ()):
        from service.database import TableInfo

        self.info = TableInfo.from_dict(info)
        self.rows = [dict(r) for r in rows]
        self.queries = 0

    def update(self, where: dict, **values) -> None:
        """``UPDATE ... SET values WHERE where``."""
        for row in self.rows:
            if all(row[k] == v for k, v in where.items()):
                row.update(values)


class _TableConnection:
    """What LookupClient asks of a psycopg connection, answered from a :class:`FakeTable`: a
    transaction, and the lookup statement with the keys as one array per key column."""

    def __init__(self, table: FakeTable, client):
        self.table, self.client = table, client

    def transaction(self):
        import contextlib

        return contextlib.nullcontext()

    def execute(self, statement, params):
        self.table.queries += 1
        keys = set(zip(*params))
        key_columns, columns = self.client.key_columns, self.client.columns
        rows = [tuple(r.get(c) for c in columns) for r in self.table.rows
                if tuple(r.get(k) for k in key_columns) in keys]
        return _Cursor(rows)


class _Cursor:
    description = None  # no result types to check against the catalog's

    def __init__(self, rows: list):
        self._rows = rows

    def fetchall(self) -> list:
        return self._rows


def avro_row(schema: dict, value: bytes) -> dict:
    """An Avro value read back (no wire-format prefix)."""
    return fastavro.schemaless_reader(io.BytesIO(value), fastavro.parse_schema(schema), None)

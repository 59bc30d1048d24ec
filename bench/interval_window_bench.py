"""Events per second through the interval and window join operators on in-memory state.

    python -m bench.interval_window_bench [--events 200000] [--keys 10000] [--batch 5000]
                                          [--pipeline] [--pipeline-rows 50000]

Two append-only streams share ``--keys`` join keys: orders at a steady 10 ms apart in event time
(shuffled within a 5 s watermark delay, 0.5 % of them 2 min behind) and shipments 0-60 s after
an order of the same key. They are replayed through the real operators the way the Spark adapter
drives them: micro-batches of ``--batch`` records, one ``process`` call per key and batch, then the
watermark (the smaller of the two inputs' largest time minus the delay) or the clock advances and
the due timers fire, each an ``on_timer`` call. Printed per join: events/s, output rows, rows
dropped as late, and the input rows held in state at each quarter of the run: they stay flat (the
state is bounded by time, not by the input), and nothing is left after the end-of-input watermark.

With ``--pipeline`` the same kind of streams (``--pipeline-rows`` per input, append-only Avro)
are preloaded into the embedded broker and joined by the whole service (Kafka -> Spark -> Kafka,
local[2]) with an event-time LEFT interval join and a TUMBLE FULL window join; printed: input
rows/s from query start until every row is processed, and the micro-batch duration p50.
"""
from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict
from pathlib import Path

from operators import (
    EVENT,
    PROC,
    InputSpec,
    IntervalJoinSpec,
    JoinType,
    WindowJoinSpec,
    WindowKind,
    WindowSpec,
    make_interval_join,
    make_window_join,
)
from operators.testing import InMemoryState, LocalRunner  # noqa: E402

DELAY_MS = 5_000
MINUTE = 60_000


def streams(n: int, keys: int, seed: int = 11) -> list[tuple]:
    """``n`` records (side, kind, row) in arrival order; rows are (id, key, time)."""
    rng = random.Random(seed)
    records = []
    for i in range(n // 2):
        t = i * 10
        key = rng.randrange(keys)
        jitter = -rng.randrange(DELAY_MS) if rng.random() < 0.995 else -2 * MINUTE
        records.append((t + rng.randrange(DELAY_MS), (0, 0, (i, key, t + jitter))))
        ship = t + rng.randrange(MINUTE)
        records.append((ship + rng.randrange(DELAY_MS), (1, 0, (i, key, ship - rng.randrange(DELAY_MS)))))
    records.sort(key=lambda r: r[0])  # arrival order
    return [r for _, r in records]


def joins():
    left = InputSpec(("order_id", "key", "order_time"), (1,))
    right = InputSpec(("ship_id", "key", "ship_time"), (1,))
    interval = dict(left=left, right=right, lower_ms=-MINUTE, upper_ms=0)  # ship_time in [order_time, +1 min]
    window = dict(left=left, right=right, left_time=2, right_time=2)
    return {
        "interval event-time LEFT": make_interval_join(IntervalJoinSpec(
            JoinType.LEFT, left_time=2, right_time=2, **interval)),
        "interval processing-time INNER": make_interval_join(IntervalJoinSpec(JoinType.INNER, **interval)),
        "window TUMBLE 1 min FULL": make_window_join(WindowJoinSpec(
            JoinType.FULL, window=WindowSpec(WindowKind.TUMBLE, MINUTE), **window)),
        "window HOP 30 s / 1 min SEMI": make_window_join(WindowJoinSpec(
            JoinType.SEMI, window=WindowSpec(WindowKind.HOP, MINUTE, slide_ms=MINUTE // 2), **window)),
        "window CUMULATE 20 s / 1 min INNER": make_window_join(WindowJoinSpec(
            JoinType.INNER, window=WindowSpec(WindowKind.CUMULATE, MINUTE, step_ms=MINUTE // 3), **window)),
    }


def replay(operator, records: list, batch: int) -> dict:
    # As Spark runs a micro-batch: its records at the clock and the watermark of the batch before,
    # then the due timers. The protocol checks are left out: what is timed is the operators.
    runner = LocalRunner(operator, key=lambda record: record[2][1], check=False)
    domain = operator.time_domain
    largest = [None, None]
    clock = 0
    output = late = 0
    peak_keys = 0
    stored = []  # rows held in state after each micro-batch
    start = time.perf_counter()
    for first in range(0, len(records), batch):
        chunk = records[first:first + batch]
        clock += len(chunk) * 5  # processing time keeps pace with event time (two records per 10 ms)
        runner.now = clock
        runner.process(chunk)
        for side, _, row in chunk:
            largest[side] = row[2] if largest[side] is None else max(largest[side], row[2])
        if None not in largest:
            runner.watermark = max(runner.watermark or 0, min(largest) - DELAY_MS)
        runner.fire(domain)
        rows, dropped = runner.drain()
        output += len(rows)
        late += len(dropped)
        peak_keys = max(peak_keys, len(runner.state.keys()))
        stored.append(stored_rows(runner.state))
    elapsed = time.perf_counter() - start
    end_keys = len(runner.state.keys())
    runner.now = runner.watermark = 1 << 62  # end of input: everything fires
    runner.fire(domain)
    return dict(elapsed=elapsed, output=output + len(runner.drain()[0]), late=late, peak_keys=peak_keys,
                end_keys=end_keys, left=len(runner.state.keys()), stored=stored)


def stored_rows(state: InMemoryState) -> int:
    """Input rows held in state: interval joins store (left rows, right rows, ...), window joins
    {window_end: [window_start, left rows, right rows]}."""
    total = 0
    for key in state.keys():
        value = state.for_key(key).get()
        if isinstance(value, dict):
            total += sum(len(w[1]) + len(w[2]) for w in value.values())
        elif value is not None:
            total += len(value[0]) + len(value[1])
    return total


ORDERS = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "long"}, {"name": "key", "type": "long"},
    {"name": "order_time", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
SHIPMENTS = {"type": "record", "name": "Shipment", "fields": [
    {"name": "ship_id", "type": "long"}, {"name": "key", "type": "long"}, {"name": "ship_time", "type": "long"}]}
PIPELINE_SQL = {
    "interval event-time LEFT": (
        "SELECT o.order_id, s.ship_id FROM orders o LEFT JOIN shipments s ON o.key = s.key "
        "AND s.ship_time BETWEEN o.order_time AND o.order_time + INTERVAL '1' MINUTE"),
    "window TUMBLE 1 min FULL": (
        "SELECT o.order_id, s.ship_id, o.window_start FROM "
        "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(order_time), INTERVAL '1' MINUTE)) o FULL JOIN "
        "TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(ship_time), INTERVAL '1' MINUTE)) s "
        "ON o.key = s.key AND o.window_start = s.window_start AND o.window_end = s.window_end"),
}


def pipeline(rows: int, keys: int) -> None:
    import io
    import json
    import statistics
    import tempfile

    import fastavro
    from confluent_kafka import Producer

    from service.app import Service
    from service.config import load_settings
    from devkit.embedded_broker import EmbeddedBroker
    from service.sink import ensure_topics

    records = streams(2 * rows, keys)
    schemas = (fastavro.parse_schema(ORDERS), fastavro.parse_schema(SHIPMENTS))

    def body(side, row):
        buffer = io.BytesIO()
        names = ("order_id", "key", "order_time") if side == 0 else ("ship_id", "key", "ship_time")
        fastavro.schemaless_writer(buffer, schemas[side], dict(zip(names, row)))
        return buffer.getvalue()

    with EmbeddedBroker() as bootstrap, tempfile.TemporaryDirectory() as work:
        schema_files = []
        for name, schema in (("orders", ORDERS), ("shipments", SHIPMENTS)):
            path = Path(work) / f"{name}.avsc"
            path.write_text(json.dumps(schema))
            schema_files.append(str(path))
        for name, sql in PIPELINE_SQL.items():
            tag = "interval" if name.startswith("interval") else "window"
            topics = (f"orders-{tag}", f"shipments-{tag}")
            ensure_topics(bootstrap, {}, {topics[0]: 2, topics[1]: 2})
            # One record per produce request: Tansu reports wrong end offsets for multi-record batches.
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                                 "queue.buffering.max.messages": 1_000_000})
            for side, _, row in records:
                while True:
                    try:
                        producer.produce(topics[side], value=body(side, row), partition=row[1] % 2)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            producer.flush(600)
            settings = load_settings({
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": topics[0], "RIGHT_TOPIC": topics[1],
                "OUTPUT_TOPIC": f"out-{tag}", "LEFT_TABLE": "orders", "RIGHT_TABLE": "shipments",
                "LEFT_SCHEMA_FILE": schema_files[0], "RIGHT_SCHEMA_FILE": schema_files[1], "JOIN_SQL": sql,
                "LEFT_CHANGELOG_MODE": "append", "RIGHT_CHANGELOG_MODE": "append",
                "LEFT_EVENT_TIME_COLUMN": "order_time", "RIGHT_EVENT_TIME_COLUMN": "ship_time",
                "LEFT_WATERMARK_DELAY": f"{DELAY_MS}ms", "RIGHT_WATERMARK_DELAY": f"{DELAY_MS}ms",
                "CHECKPOINT_LOCATION": f"{work}/cp-{tag}", "SPARK_MASTER": "local[2]", "SHUFFLE_PARTITIONS": "2",
                "TRIGGER_INTERVAL": "0", "MAX_RECORDS_PER_TRIGGER": "20000", "METRICS_PORT": "0",
            })
            service = Service(settings)
            service.spark  # noqa: B018 - start Spark before the clock starts
            start = time.perf_counter()
            query = service.start()
            service.process_available()
            elapsed = time.perf_counter() - start
            progress = list(query.recentProgress)
            service.stop()
            durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"])
            late = sum(b.dead_letters.get("late", 0) for b in service.batches)
            output = sum(sum(b.output.values()) for b in service.batches)
            print(f"pipeline {name:30s} {len(records):,} input rows in {elapsed:.1f} s = "
                  f"{len(records) / elapsed:,.0f} rows/s; output {output:,}, late {late:,}; "
                  f"{len(durations)} micro-batches, p50 {statistics.median(durations) / 1000:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=5_000, help="records per micro-batch")
    parser.add_argument("--pipeline", action="store_true", help="also run the whole service on the embedded broker")
    parser.add_argument("--pipeline-rows", type=int, default=50_000, help="rows per input for --pipeline")
    args = parser.parse_args()
    records = streams(args.events, args.keys)
    print(f"{len(records):,} events, {args.keys:,} join keys, micro-batches of {args.batch:,}")
    for name, operator in joins().items():
        r = replay(operator, records, args.batch)
        stored = r["stored"]
        quarters = ", ".join(f"{stored[min(len(stored) - 1, len(stored) * q // 4)]:,}" for q in (1, 2, 3, 4))
        print(f"{name:36s} {len(records) / r['elapsed']:>9,.0f} events/s  output {r['output']:>9,}  "
              f"late {r['late']:>5,}  rows in state at 1/4, 1/2, 3/4, end: {quarters}; keys peak "
              f"{r['peak_keys']:,}, after end of input {r['left']}")
    if args.pipeline:
        pipeline(args.pipeline_rows, args.keys)


if __name__ == "__main__":
    main()

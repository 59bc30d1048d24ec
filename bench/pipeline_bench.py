"""The whole service, Kafka -> Spark -> Kafka, on a local Apache Kafka broker (KRaft).

    python bench/pipeline_bench.py [--rows 200000] [--keys 10000] [--max-per-trigger 100000]
                                   [--shuffle-partitions 2]

Two scenarios, each with ``--rows`` changelog rows per side over ``--keys`` join keys, preloaded
before the service starts into a single-node Kafka started from the cached Maven Central jars
(service/kafka_broker.py), or into ``KAFKA_BOOTSTRAP_SERVERS`` when that is set:

- ``left-pk``: a LEFT join of orders (primary key order_id, joined on product) with prices
  (primary key = join key), with -U/+U updates on both sides;
- ``inner-nopk``: an INNER join of two inputs without unique keys (multiset state).

Printed: input rows/s (all rows / time from query start until every row is processed),
micro-batch duration p50/p99, and time to first output.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fastavro  # noqa: E402

from service.app import Service  # noqa: E402
from service.config import load_settings  # noqa: E402
from service.kafka_broker import KafkaBroker  # noqa: E402
from service.sink import ensure_topics  # noqa: E402

ORDERS = fastavro.parse_schema(fastavro.schema.load_schema(str(ROOT / "schemas" / "orders.avsc")))
PRICES = fastavro.parse_schema(fastavro.schema.load_schema(str(ROOT / "schemas" / "prices.avsc")))


def body(schema, row) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, row)
    return buffer.getvalue()


def changelogs(rows: int, keys: int, scenario: str, seed: int = 3):
    rng = random.Random(seed)
    orders, prices = [], []
    live_orders: dict[int, dict] = {}
    live_prices: dict[str, dict] = {}
    next_id = 0
    while len(orders) < rows:
        if scenario == "left-pk" and live_orders and rng.random() < 0.3:
            # one of the last 1,000 orders inserted (ids are consecutive and never removed): the
            # same draw as choosing from the last 1,000 keys of live_orders, in O(1)
            oid = rng.choice(range(max(1, next_id - 999), next_id + 1))
            old = live_orders[oid]
            new = dict(old, quantity=old["quantity"] + 1)
            live_orders[oid] = new
            orders += [("-U", old), ("+U", new)]
        else:
            next_id += 1
            row = {"order_id": next_id, "product": f"p{rng.randrange(keys)}", "quantity": rng.randrange(1, 9)}
            live_orders[next_id] = row
            orders.append(("+I", row))
    while len(prices) < rows:
        product = f"p{rng.randrange(keys)}"
        new = {"product": product, "price": float(rng.randrange(100)), "currency": "EUR"}
        old = live_prices.get(product)
        if scenario == "left-pk" and old is not None:
            prices += [("-U", old), ("+U", new)]
        else:
            prices.append(("+I", new))
        live_prices[product] = new
    return orders[:rows], prices[:rows]


def preload(bootstrap: str, topic: str, schema, changes, partition_of) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    for kind, row in changes:
        while True:
            try:
                producer.produce(topic, value=body(schema, row), headers=[("rowkind", kind.encode())],
                                 partition=partition_of(row))  # a key's changes stay in order
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(600)


def scenario_sql(scenario: str) -> tuple[str, dict]:
    """The join of ``scenario`` and the primary keys the service is told about."""
    if scenario == "left-pk":
        sql = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"
        return sql, {"LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product"}
    return "SELECT o.order_id, p.price FROM orders o JOIN prices p ON o.product = p.product", {}


def topics(scenario: str) -> tuple[str, str, str]:
    return f"orders-{scenario}", f"prices-{scenario}", f"out-{scenario}"


def load(bootstrap: str, scenario: str, rows: int, keys: int, changes=None) -> float:
    """Create the scenario's two input topics (2 partitions) and preload them; seconds taken."""
    orders_topic, prices_topic, _ = topics(scenario)
    ensure_topics(bootstrap, {}, {orders_topic: 2, prices_topic: 2})
    orders, prices = changes or changelogs(rows, keys, scenario)
    t0 = time.perf_counter()
    preload(bootstrap, orders_topic, ORDERS, orders, lambda row: row["order_id"] % 2)
    preload(bootstrap, prices_topic, PRICES, prices, lambda row: int(row["product"][1:]) % 2)
    return time.perf_counter() - t0


def service_settings(bootstrap: str, scenario: str, max_per_trigger: int, shuffle_partitions: int,
                     checkpoint: str, out: str | None = None, extra: dict | None = None):
    orders_topic, prices_topic, default_out = topics(scenario)
    sql, pks = scenario_sql(scenario)
    return load_settings({
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": orders_topic, "RIGHT_TOPIC": prices_topic,
        "OUTPUT_TOPIC": out or default_out, "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices",
        "LEFT_SCHEMA_FILE": str(ROOT / "schemas" / "orders.avsc"),
        "RIGHT_SCHEMA_FILE": str(ROOT / "schemas" / "prices.avsc"), "JOIN_SQL": sql,
        "CHECKPOINT_LOCATION": checkpoint, "SPARK_MASTER": "local[2]", "SHUFFLE_PARTITIONS": str(shuffle_partitions),
        "TRIGGER_INTERVAL": "0", "MAX_RECORDS_PER_TRIGGER": str(max_per_trigger), "METRICS_PORT": "0", **pks,
        **(extra or {}),
    })


def run_changejoin(bootstrap: str, scenario: str, rows: int, max_per_trigger: int, shuffle_partitions: int,
                   out: str | None = None, on_start=None, on_end=None, extra: dict | None = None) -> dict:
    """The service on the preloaded topics until every input row is processed; its figures."""
    with tempfile.TemporaryDirectory() as work:
        settings = service_settings(bootstrap, scenario, max_per_trigger, shuffle_partitions, f"{work}/cp", out, extra)
        first_output = []
        service = Service(settings, on_batch=lambda c: first_output.append(time.perf_counter()) if c.output else None)
        service.spark  # noqa: B018 - start Spark before the clock starts
        if on_start:
            on_start()
        start = time.perf_counter()
        query = service.start()
        service.process_available()
        elapsed = time.perf_counter() - start
        if on_end:
            on_end()
        progress = list(query.recentProgress)
        service.stop()
        service.spark.stop()
    durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"])
    return {"elapsed": elapsed, "durations": durations,
            "first_output": first_output[0] - start if first_output else None}


def run(bootstrap: str, scenario: str, rows: int, keys: int, max_per_trigger: int, shuffle_partitions: int) -> None:
    load_s = load(bootstrap, scenario, rows, keys)
    result = run_changejoin(bootstrap, scenario, rows, max_per_trigger, shuffle_partitions)
    elapsed, durations = result["elapsed"], result["durations"]
    total = 2 * rows
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
    print(f"{scenario}: {total:,} input rows in {elapsed:.1f} s = {total / elapsed:,.0f} rows/s; "
          f"{len(durations)} micro-batches, duration p50 {statistics.median(durations) / 1000:.1f} s, "
          f"p99 {p99 / 1000:.1f} s; first output after {result['first_output']:.1f} s "
          f"(preload {load_s:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2, help="SHUFFLE_PARTITIONS (Spark runs local[2])")
    parser.add_argument("--scenario", choices=["left-pk", "inner-nopk"], action="append")
    args = parser.parse_args()
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        for scenario in args.scenario or ["left-pk", "inner-nopk"]:
            run(bootstrap, scenario, args.rows, args.keys, args.max_per_trigger, args.shuffle_partitions)


if __name__ == "__main__":
    main()

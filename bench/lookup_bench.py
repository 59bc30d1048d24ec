"""The lookup join's throughput: batched lookups per reading task against one query per key
(Flink's JDBC lookup pattern, ``LOOKUP_BATCH_SIZE=1``), with and without the partial cache.

    python -m bench.lookup_bench [--orders 100000] [--products 10000] [--rounds 2] [--record]

A real Kafka broker and a real PostgreSQL server (``devkit``) on this machine; the orders
(``schemas/orders.avsc``) are an append-only topic of ``--orders`` rows over ``--products``
products (uniform), joined ``LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME()`` with a
``products(product text primary key, name text, price numeric(10,2))`` table. Each variant runs
the service in this process from a fresh checkpoint until every order is processed
(``MAX_RECORDS_PER_TRIGGER=20000``, 2 shuffle partitions, at-least-once), variants alternating
within each round, after a warm-up run that is not counted (the JVM's JIT, the first Python
workers). Prints input rows/s (min and median over the rounds), the queries sent and the
database's share of the time (the sum of the query latencies), and checks that every variant wrote
the same output; ``--record`` appends the table and a plot to bench/results/RESULTS.md.
"""
from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import tempfile
import time
from datetime import datetime, timezone

import psycopg

from bench.harness import ROOT
from bench.harness.data import body
from bench.harness.report import append_results, results_png
from devkit.kafka_broker import KafkaBroker
from devkit.postgres import PostgresServer
from service.app import Service
from service.config import load_settings
from service.sink import ensure_topics

VARIANTS = {
    "batched (1000 keys a query)": {"LOOKUP_BATCH_SIZE": "1000"},
    "one query per key": {"LOOKUP_BATCH_SIZE": "1"},
    "batched + partial cache": {"LOOKUP_BATCH_SIZE": "1000", "LOOKUP_CACHE": "partial",
                                "LOOKUP_CACHE_EXPIRE_AFTER_WRITE": "10m"},
    "one query per key + partial cache": {"LOOKUP_BATCH_SIZE": "1", "LOOKUP_CACHE": "partial",
                                          "LOOKUP_CACHE_EXPIRE_AFTER_WRITE": "10m"},
}
ORDERS_SCHEMA = ROOT / "schemas" / "orders.avsc"


def load(bootstrap: str, url: str, orders: int, products: int) -> str:
    import json

    from confluent_kafka import Producer

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE products (product text PRIMARY KEY, name text, price numeric(10,2))")
        with conn.cursor().copy("COPY products FROM STDIN") as copy:
            for i in range(products):
                copy.write_row((f"p{i}", f"product {i}", f"{i % 1000}.{i % 100:02d}"))
    topic = f"lookup-bench-orders-{orders}"
    ensure_topics(bootstrap, {}, {topic: 2})
    schema = json.loads(ORDERS_SCHEMA.read_text())
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 500_000})
    rng = random.Random(7)
    for i in range(orders):
        row = {"order_id": i, "product": f"p{rng.randrange(products)}", "quantity": 1 + i % 5}
        producer.produce(topic, body(schema, row), partition=i % 2)
        if i % 50_000 == 0:
            producer.flush()
    producer.flush()
    return topic


def run(bootstrap: str, url: str, topic: str, name: str, env: dict, round_: int, spark: list) -> dict:
    out = f"lookup-bench-out-{abs(hash((name, round_))) % 10**8}"
    with tempfile.TemporaryDirectory() as work:
        settings = load_settings({
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": topic, "OUTPUT_TOPIC": out,
            "LEFT_SCHEMA_FILE": str(ORDERS_SCHEMA), "LEFT_TABLE": "orders", "LEFT_CHANGELOG_MODE": "append",
            "RIGHT_LOOKUP_URL": url, "RIGHT_TABLE": "products",
            "JOIN_SQL": "SELECT o.order_id, o.product, o.quantity, p.name, p.price FROM orders AS o LEFT JOIN "
                        "products FOR SYSTEM_TIME AS OF PROCTIME() AS p ON o.product = p.product",
            "CHECKPOINT_LOCATION": f"{work}/cp", "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
            "MAX_RECORDS_PER_TRIGGER": "20000", "SHUFFLE_PARTITIONS": "2", "DELIVERY": "at-least-once", **env})
        service = Service(settings, spark=spark[0])
        spark[0] = service.spark
        start = time.perf_counter()
        service.start()
        service.process_available()
        elapsed = time.perf_counter() - start
        get = service.metrics.registry.get_sample_value
        figures = {"elapsed": elapsed, "queries": get("changejoin_lookup_queries_total") or 0,
                   "query_s": get("changejoin_lookup_query_seconds_sum") or 0,
                   "hits": get("changejoin_lookup_cache_total", {"result": "hit"}) or 0,
                   "output": sum(c for b in service.batches for c in b.output.values())}
        service.stop()
    figures["digest"] = output_digest(bootstrap, out)
    return figures


def output_digest(bootstrap: str, topic: str) -> str:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"digest-{topic}", "enable.auto.commit": False})
    values = []
    for partition in consumer.list_topics(topic).topics[topic].partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition))
        consumer.assign([TopicPartition(topic, partition, low)])
        while low < high:
            for msg in consumer.consume(10_000, timeout=5):
                if not msg.error():
                    values.append(msg.value())
                    low = msg.offset() + 1
    consumer.close()
    return hashlib.sha256(b"".join(sorted(values))).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with KafkaBroker(heap="1g") as bootstrap, PostgresServer() as url:
        topic = load(bootstrap, url, args.orders, args.products)
        spark = [None]  # the first run's session, reused (started before its clock: run())
        warm = run(bootstrap, url, topic, "warm-up", VARIANTS[next(iter(VARIANTS))], -1, spark)
        print(f"warm-up (not counted): {args.orders / warm['elapsed']:,.0f} rows/s", flush=True)
        for round_ in range(args.rounds):
            for name, env in VARIANTS.items():
                figures = run(bootstrap, url, topic, name, env, round_, spark)
                runs[name].append(figures)
                print(f"round {round_} {name}: {args.orders / figures['elapsed']:,.0f} rows/s, "
                      f"{figures['queries']:,.0f} queries ({figures['query_s']:.1f} s in the database), "
                      f"{figures['hits']:,.0f} cache hits, output {figures['output']:,} ({figures['digest']})", flush=True)
        spark[0].stop()
    digests = {f["digest"] for fs in runs.values() for f in fs}
    assert len(digests) == 1, f"the variants wrote different outputs: {digests}"
    text = render(args, runs, started, plot(runs, args.orders, started) if args.record else None)
    print(text)
    if args.record:
        append_results(text)


def render(args, runs, started, png) -> str:
    lines = [f"\n## Lookup join: batched lookups against one query per key ({started:%Y-%m-%d %H:%M} UTC)\n",
             f"`python -m bench.lookup_bench --orders {args.orders} --products {args.products} --rounds {args.rounds}`: "
             "an append-only orders topic (2 partitions) LEFT JOIN a PostgreSQL `products` table on its primary key, "
             "the service in process, 2 shuffle partitions, `MAX_RECORDS_PER_TRIGGER=20000`, at-least-once; a real "
             "Kafka broker and PostgreSQL 15 on this machine (loopback: every query's round trip is ~0.1 ms here, "
             "more across a network). Variants alternate within each round; all wrote the same output.\n",
             "| variant | input rows/s, min | median | queries per run | seconds in the database per run | cache hits |",
             "| --- | --- | --- | --- | --- | --- |"]
    base = statistics.median(args.orders / f["elapsed"] for f in runs[next(iter(runs))])
    for name, figures in runs.items():
        rates = [args.orders / f["elapsed"] for f in figures]
        med = statistics.median(rates)
        lines.append(f"| {name} | {min(rates):,.0f} | {med:,.0f} ({med / base:.2f}x) | "
                     f"{statistics.median(f['queries'] for f in figures):,.0f} | "
                     f"{statistics.median(f['query_s'] for f in figures):.1f} | "
                     f"{statistics.median(f['hits'] for f in figures):,.0f} |")
    if png is not None:
        lines.append(f"\n![lookup join throughput]({png.name})\n")
    return "\n".join(lines) + "\n"


def plot(runs, orders: int, started):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = results_png("lookup", started)
    names = list(runs)
    medians = [statistics.median(orders / f["elapsed"] for f in runs[n]) for n in names]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.barh(names, medians, color=["#4477aa", "#cc6677", "#228833", "#ccbb44"])
    ax.set_xlabel("input rows/s (median)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    main()

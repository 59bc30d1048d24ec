"""The whole service, Kafka -> Spark -> Kafka, on a local Apache Kafka broker (KRaft).

    python bench/pipeline_bench.py [--rows 200000] [--keys 10000] [--max-per-trigger 100000]
                                   [--shuffle-partitions 2]

Scenarios, each with ``--rows`` changelog rows per side over ``--keys`` join keys, preloaded
before the service starts into a single-node Kafka started from the cached Maven Central jars
(devkit/kafka_broker.py), or into ``KAFKA_BOOTSTRAP_SERVERS`` when that is set:

- ``left-pk``: a LEFT join of orders (primary key order_id, joined on product) with prices
  (primary key = join key), with -U/+U updates on both sides;
- ``inner-nopk``: an INNER join of two inputs without unique keys (multiset state);
- ``left-pk-mb``, ``inner-nopk-mb``: the same joins on the same topics with ``MINI_BATCH_SIZE``;
- ``temporal-left``: an event-time temporal LEFT join (``FOR SYSTEM_TIME AS OF``) of insert-only
  orders with a versioned prices table (primary key product, -U/+U updates), both with an event
  time (bench/schemas/*_timed.avsc) that grows by 1 s per row of each side; a last row on each
  side far in the future moves the watermark past every real row, so every order is emitted
  (the left one of these two rows waits for ever and is never part of the output).

The generator is linear in ``--rows`` and the preload hands librdkafka whole batches (linger,
1 MB batches), so 1M rows per side take about a minute to generate and load.

Printed: input rows/s (all rows / time from query start until every row is processed),
micro-batch duration p50/p99, and time to first output.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
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
from devkit.kafka_broker import KafkaBroker  # noqa: E402
from service.sink import ensure_topics  # noqa: E402

ORDERS = fastavro.parse_schema(fastavro.schema.load_schema(str(ROOT / "schemas" / "orders.avsc")))
PRICES = fastavro.parse_schema(fastavro.schema.load_schema(str(ROOT / "schemas" / "prices.avsc")))
TIMED_SCHEMAS = ROOT / "bench" / "schemas"
TIMED_ORDERS = fastavro.parse_schema(fastavro.schema.load_schema(str(TIMED_SCHEMAS / "orders_timed.avsc")))
TIMED_PRICES = fastavro.parse_schema(fastavro.schema.load_schema(str(TIMED_SCHEMAS / "prices_timed.avsc")))

SCENARIOS = ("left-pk", "inner-nopk", "left-pk-mb", "inner-nopk-mb", "temporal-left")
#: temporal-left: event times (epoch ms) of the i-th order / price row, and the watermark delay of
#: both inputs (changejoin and Flink alike): far more than the few rows by which one partition
#: of an input can be behind the other, so no row is ever late.
T0, STEP_MS, WATERMARK_DELAY_S = 1_700_000_000_000, 1000, 300
END_TIME = T0 + 10**12  # the two closing rows: the watermark passes every real row
END_ORDER_ID = 0        # the closing order (ids of real orders start at 1): never in any output


def data_of(scenario: str) -> str:
    """The changelogs (and topics) a scenario reads: the mini-batch variants share them."""
    return scenario.removesuffix("-mb")


def mini_batch(scenario: str) -> bool:
    return scenario.endswith("-mb")


def body(schema, row) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, row)
    return buffer.getvalue()


def changelogs(rows: int, keys: int, scenario: str, seed: int = 3):
    """``rows`` changes per side (left-pk and inner-nopk: the same draws, seed for seed, as ever).
    temporal-left: insert-only orders and left-pk's prices, each row with its event time, plus
    the two closing rows (so ``rows + 1`` per side)."""
    scenario = data_of(scenario)
    if scenario == "temporal-left":
        orders, _ = changelogs(rows, keys, "inner-nopk", seed)
        _, prices = changelogs(rows, keys, "left-pk", seed)
        for i, (_, row) in enumerate(orders):
            row["order_time"] = T0 + i * STEP_MS
        n = 0
        for kind, row in prices:
            if kind != "-U":  # a -U is the row before, already timed (its dict is that row's)
                row["price_time"] = T0 + n * STEP_MS + STEP_MS // 2
                n += 1
        orders.append(("+I", {"order_id": END_ORDER_ID, "product": "p-end", "quantity": 1, "order_time": END_TIME}))
        prices.append(("+I", {"product": "p-end", "price": 0.0, "currency": "EUR", "price_time": END_TIME}))
        return orders, prices
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

    # idempotent: without it a retried produce request (a loaded broker times out) lands after the
    # requests sent behind it, and a key's changes arrive out of order (seen: a -U before its +I)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
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


def scenario_sql(scenario: str, mini_batch_size: int = 1000) -> tuple[str, dict]:
    """The join of ``scenario`` and the service settings that go with it (keys, schemas, time)."""
    env = {"MINI_BATCH_SIZE": str(mini_batch_size)} if mini_batch(scenario) else {}
    scenario = data_of(scenario)
    if scenario == "left-pk":
        sql = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"
        return sql, {"LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product", **env}
    if scenario == "temporal-left":
        sql = ("SELECT o.order_id, o.product, o.quantity, p.price FROM orders o "
               "LEFT JOIN prices FOR SYSTEM_TIME AS OF o.order_time AS p ON o.product = p.product")
        return sql, {"RIGHT_PRIMARY_KEY": "product", "LEFT_EVENT_TIME_COLUMN": "order_time",
                     "RIGHT_EVENT_TIME_COLUMN": "price_time", "LEFT_WATERMARK_DELAY": f"{WATERMARK_DELAY_S}s",
                     "RIGHT_WATERMARK_DELAY": f"{WATERMARK_DELAY_S}s",
                     "LEFT_SCHEMA_FILE": str(TIMED_SCHEMAS / "orders_timed.avsc"),
                     "RIGHT_SCHEMA_FILE": str(TIMED_SCHEMAS / "prices_timed.avsc")}
    return "SELECT o.order_id, p.price FROM orders o JOIN prices p ON o.product = p.product", env


def schemas(scenario: str):
    """The parsed Avro schemas of the scenario's two input topics."""
    return (TIMED_ORDERS, TIMED_PRICES) if data_of(scenario) == "temporal-left" else (ORDERS, PRICES)


def topics(scenario: str) -> tuple[str, str, str]:
    return f"orders-{data_of(scenario)}", f"prices-{data_of(scenario)}", f"out-{scenario}"


def load(bootstrap: str, scenario: str, rows: int, keys: int, changes=None) -> float:
    """Create the scenario's two input topics (2 partitions) and preload them; seconds taken."""
    orders_topic, prices_topic, _ = topics(scenario)
    ensure_topics(bootstrap, {}, {orders_topic: 2, prices_topic: 2})
    orders, prices = changes or changelogs(rows, keys, scenario)
    orders_schema, prices_schema = schemas(scenario)
    t0 = time.perf_counter()
    preload(bootstrap, orders_topic, orders_schema, orders, lambda row: row["order_id"] % 2)
    preload(bootstrap, prices_topic, prices_schema, prices, price_partition)
    return time.perf_counter() - t0


def price_partition(row) -> int:
    return int(row["product"][1:]) % 2 if row["product"][1:].isdigit() else 0


def service_settings(bootstrap: str, scenario: str, max_per_trigger: int | None, shuffle_partitions: int,
                     checkpoint: str, out: str | None = None, mini_batch_size: int = 1000,
                     orders_topic: str | None = None, prices_topic: str | None = None, sql: str | None = None,
                     extra: dict | None = None):
    """The service's settings for ``scenario``; ``max_per_trigger`` None and ``extra``
    ``TRIGGER_INTERVAL`` unset: the service's defaults (the latency runs)."""
    default_orders, default_prices, default_out = topics(scenario)
    scenario_query, env = scenario_sql(scenario, mini_batch_size)
    env = {"LEFT_SCHEMA_FILE": str(ROOT / "schemas" / "orders.avsc"),
           "RIGHT_SCHEMA_FILE": str(ROOT / "schemas" / "prices.avsc"), "TRIGGER_INTERVAL": "0",
           # every micro-batch's progress, for the duration percentiles (Spark keeps 100)
           "SPARK_CONF_spark_sql_streaming_numRecentProgressUpdates": "100000", **env, **(extra or {})}
    if max_per_trigger is not None:
        env["MAX_RECORDS_PER_TRIGGER"] = str(max_per_trigger)
    return load_settings({
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": orders_topic or default_orders,
        "RIGHT_TOPIC": prices_topic or default_prices, "OUTPUT_TOPIC": out or default_out,
        "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices", "JOIN_SQL": sql or scenario_query,
        "CHECKPOINT_LOCATION": checkpoint, "SPARK_MASTER": "local[2]", "SHUFFLE_PARTITIONS": str(shuffle_partitions),
        "METRICS_PORT": "0", **{k: v for k, v in env.items() if v is not None},
    })


TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_stat(path: str) -> tuple[int, str, float, int] | None:
    """(parent pid, command, CPU seconds, RSS bytes) from a ``/proc/<pid>[/task/<tid>]/stat`` file;
    None once the process is gone."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


def processes() -> dict[int, tuple[int, str, float, int]]:
    """:func:`proc_stat` of every live process, by pid."""
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(f"/proc/{name}/stat")
            if stat is not None:
                stats[int(name)] = stat
    return stats


def process_tree(stats: dict, root: int) -> set[int]:
    """``root`` and its descendants among ``stats`` (:func:`processes`)."""
    tree, frontier = set(), {root}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, s in stats.items() if s[0] in frontier and pid not in tree}
    return tree


def directory_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (0 if it is gone)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def percentile(sorted_values, q: float):
    """The ``q`` quantile (0..1) of already sorted values, nearest rank; None when empty."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def run_changejoin(bootstrap: str, scenario: str, rows: int, max_per_trigger: int, shuffle_partitions: int,
                   out: str | None = None, on_start=None, on_end=None, mini_batch_size: int = 1000,
                   extra: dict | None = None) -> dict:
    """The service on the preloaded topics until every input row is processed; its figures:
    elapsed seconds, micro-batch durations (ms, sorted), first output (s after the start, when the
    first batch with output was produced), checkpoint size on disk at the end (bytes: offsets,
    commits and the RocksDB state versions Spark keeps)."""
    with tempfile.TemporaryDirectory() as work:
        settings = service_settings(bootstrap, scenario, max_per_trigger, shuffle_partitions, f"{work}/cp", out,
                                    mini_batch_size, extra=extra)
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
        state_bytes = directory_bytes(f"{work}/cp")
        service.spark.stop()
    durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"])
    return {"elapsed": elapsed, "durations": durations, "state_bytes": state_bytes,
            "first_output": first_output[0] - start if first_output else None}


def run(bootstrap: str, scenario: str, rows: int, keys: int, max_per_trigger: int, shuffle_partitions: int) -> None:
    load_s = load(bootstrap, scenario, rows, keys)
    result = run_changejoin(bootstrap, scenario, rows, max_per_trigger, shuffle_partitions)
    elapsed, durations = result["elapsed"], result["durations"]
    total = 2 * rows
    p99 = percentile(durations, 0.99)
    print(f"{scenario}: {total:,} input rows in {elapsed:.1f} s = {total / elapsed:,.0f} rows/s; "
          f"{len(durations)} micro-batches, duration p50 {statistics.median(durations) / 1000:.1f} s, "
          f"p99 {p99 / 1000:.1f} s; first output after {result['first_output']:.1f} s "
          f"(preload {load_s:.0f} s); checkpoint {result['state_bytes'] / 2**20:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2, help="SHUFFLE_PARTITIONS (Spark runs local[2])")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append")
    args = parser.parse_args()
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        for scenario in args.scenario or ["left-pk", "inner-nopk"]:
            run(bootstrap, scenario, args.rows, args.keys, args.max_per_trigger, args.shuffle_partitions)


if __name__ == "__main__":
    main()

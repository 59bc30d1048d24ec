"""The scenarios and their inputs: the seeded, linear changelog generator and the preloads.

Every scenario reads two changelogs (orders, prices) of ``rows`` changes per side, generated
from a fixed seed (the same draws at every size and in every benchmark), preloaded into Kafka
as Avro with the change kind in a ``rowkind`` header, as debezium-json (for Flink, and for the
``debezium`` scenario, in which changejoin reads those very topics), and for Spark's native join
as Parquet files.
"""
from __future__ import annotations

import io
import json
import random
import time
from pathlib import Path

import fastavro

from service.sink import ensure_topics

from . import ROOT

ORDERS = fastavro.parse_schema(fastavro.schema.load_schema(str(ROOT / "schemas" / "orders.avsc")))
PRICES = fastavro.parse_schema(fastavro.schema.load_schema(str(ROOT / "schemas" / "prices.avsc")))
TIMED_SCHEMAS = ROOT / "bench" / "schemas"
TIMED_ORDERS = fastavro.parse_schema(fastavro.schema.load_schema(str(TIMED_SCHEMAS / "orders_timed.avsc")))
TIMED_PRICES = fastavro.parse_schema(fastavro.schema.load_schema(str(TIMED_SCHEMAS / "prices_timed.avsc")))

SCENARIOS = ("left-pk", "inner-nopk", "left-pk-mb", "inner-nopk-mb", "temporal-left", "debezium")
#: debezium: left-pk's changes (its data set) read by every system from their debezium-json topics
#: (``debezium_topics``: the ones Flink reads in left-pk), changejoin with ``*_FORMAT=debezium-json``.
DEBEZIUM = "debezium"
#: temporal-left: event times (epoch ms) of the i-th order / price row, and the watermark delay of
#: both inputs (changejoin and Flink alike): far more than the few rows by which one partition
#: of an input can be behind the other, so no row is ever late.
T0, STEP_MS, WATERMARK_DELAY_S = 1_700_000_000_000, 1000, 300
END_TIME = T0 + 10**12  # the two closing rows: the watermark passes every real row
END_ORDER_ID = 0        # the closing order (ids of real orders start at 1): never in any output


def data_of(scenario: str) -> str:
    """The changelogs a scenario reads: the mini-batch variants share them, and the debezium
    scenario reads left-pk's (as debezium-json)."""
    return "left-pk" if scenario == DEBEZIUM else scenario.removesuffix("-mb")


def input_format(scenario: str) -> str:
    """How changejoin reads the scenario's inputs: its ``LEFT_FORMAT`` / ``RIGHT_FORMAT``."""
    return "debezium-json" if scenario == DEBEZIUM else "rowkind"


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


def schemas(scenario: str):
    """The parsed Avro schemas of the scenario's two input topics."""
    return (TIMED_ORDERS, TIMED_PRICES) if data_of(scenario) == "temporal-left" else (ORDERS, PRICES)


def topics(scenario: str) -> tuple[str, str, str]:
    """(orders, prices, output) topics of a scenario: its data set's inputs in its input format."""
    if input_format(scenario) == "debezium-json":
        return *debezium_topics(data_of(scenario)), f"out-{scenario}"
    return f"orders-{data_of(scenario)}", f"prices-{data_of(scenario)}", f"out-{scenario}"


def debezium_topics(data: str) -> tuple[str, str]:
    """The debezium-json topics of a data set's changelogs (2 partitions, as the Avro ones)."""
    return f"orders-{data}-dbz", f"prices-{data}-dbz"


def load_debezium(bootstrap: str, data: str, orders=None, prices=None) -> float:
    """Create ``data``'s debezium-json topics and preload the sides given (``debezium`` messages:
    a -U/+U pair one ``u``; a key's changes in one partition, the Avro topics' partitioning);
    seconds taken."""
    names = debezium_topics(data)
    ensure_topics(bootstrap, {}, {t: 2 for t in names})
    t0 = time.perf_counter()
    if orders is not None:
        preload_json(bootstrap, names[0], debezium(orders), lambda row: row["order_id"] % 2)
    if prices is not None:
        preload_json(bootstrap, names[1], debezium(prices), price_partition)
    return time.perf_counter() - t0


def load(bootstrap: str, scenario: str, rows: int, keys: int, changes=None) -> float:
    """Create the scenario's two input topics (2 partitions) and preload them (in the scenario's
    input format); seconds taken."""
    orders, prices = changes or changelogs(rows, keys, scenario)
    if input_format(scenario) == "debezium-json":
        return load_debezium(bootstrap, data_of(scenario), orders, prices)
    orders_topic, prices_topic, _ = topics(scenario)
    ensure_topics(bootstrap, {}, {orders_topic: 2, prices_topic: 2})
    orders_schema, prices_schema = schemas(scenario)
    t0 = time.perf_counter()
    preload(bootstrap, orders_topic, orders_schema, orders, lambda row: row["order_id"] % 2)
    preload(bootstrap, prices_topic, prices_schema, prices, price_partition)
    return time.perf_counter() - t0


def price_partition(row) -> int:
    return int(row["product"][1:]) % 2 if row["product"][1:].isdigit() else 0


def debezium(changes) -> list[tuple[dict, int]]:
    """A changelog as debezium-json messages: -U/+U pairs become one ``u`` with before/after
    (a -U whose +U was cut off by the row count is a ``d``); the int is the rows it carries."""
    messages, pending = [], None
    for kind, row in changes:
        if kind == "-U":
            pending = row
        elif kind == "+U":
            assert pending is not None, "+U without its -U"
            messages.append(({"before": pending, "after": row, "op": "u"}, 2))
            pending = None
        elif kind == "+I":
            messages.append(({"before": None, "after": row, "op": "c"}, 1))
        else:  # -D
            messages.append(({"before": row, "after": None, "op": "d"}, 1))
    if pending is not None:
        messages.append(({"before": pending, "after": None, "op": "d"}, 1))
    return messages


def new_producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    # idempotent: retries never reorder a partition (preload)
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True, **extra})


def produce_retrying(producer, topic, value, partition, headers=None) -> None:
    while True:
        try:
            producer.produce(topic, value=value, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def json_value(message: dict) -> bytes:
    """A debezium-json message's record value as preloaded (bare JSON: no Connect schema)."""
    return json.dumps(message, separators=(",", ":")).encode()


def preload_json(bootstrap: str, topic: str, messages, partition_of) -> None:
    producer = new_producer(bootstrap)
    for message, _ in messages:
        produce_retrying(producer, topic, json_value(message), partition_of(message["after"] or message["before"]))
        producer.poll(0)
    producer.flush(600)


def write_parquet(directory: Path, rows: list[dict], chunk: int, types: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    for n, i in enumerate(range(0, len(rows), chunk)):
        part = rows[i:i + chunk]
        table = pa.table({name: pa.array([r[name] for r in part], kind) for name, kind in types.items()})
        pq.write_table(table, directory / f"part-{n:05d}.parquet")

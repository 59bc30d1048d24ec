"""Make ``first-layout.tar.gz``: a checkpoint written by changejoin's first bucket layout (main at
23c7187: 64 buckets whose value holds the index of every large key and every key's timers, one
Spark timer per bucket, grouping keys ``\\x03`` + bucket), for
tests/integration/test_service_checkpoint_compat.py.

    PYTHONPATH=<a checkout of 23c7187> python tests/data/checkpoints/make_first_layout.py BOOTSTRAP

It joins ``INPUT`` (below) with the service of the checkout on ``PYTHONPATH`` on a broker at
BOOTSTRAP, then writes the checkpoint and, in ``first-layout.json``, its settings, the input
(a test produces it again, so that the offsets are the same) and the topics' ids the offsets name. Uses only what every version has: ``Service``, ``load_settings``.
"""
from __future__ import annotations

import io
import json
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE.parents[2] / "schemas"
SETTINGS = {
    "JOIN_SQL": "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p "
                "ON o.product = p.product",
    "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product", "STATE_TTL": "1h",
    "SHUFFLE_PARTITIONS": "2", "TRIGGER_INTERVAL": "0", "DELIVERY": "at-least-once", "METRICS_PORT": "0",
    "SPARK_MASTER": "local[2]",
}


def first_input() -> tuple[list, list]:
    """(orders, prices) changes: 12 products, one of them ("hot") with 120 orders, so that its
    value is a large key of its bucket; each order once, some updated and deleted."""
    orders, prices = [], []
    for i in range(12):
        prices.append(("+I", {"product": f"p{i}", "price": float(i), "currency": "EUR"}))
    for i in range(60):
        orders.append(("+I", {"order_id": i, "product": f"p{i % 12}", "quantity": 1}))
    for i in range(120):
        orders.append(("+I", {"order_id": 1000 + i, "product": "hot", "quantity": 1}))
    prices.append(("+I", {"product": "hot", "price": 99.0, "currency": "EUR"}))
    for i in range(0, 60, 5):
        old = {"order_id": i, "product": f"p{i % 12}", "quantity": 1}
        orders += [("-U", old), ("+U", {**old, "quantity": 2})]
    for i in range(1, 60, 7):
        orders.append(("-D", {"order_id": i, "product": f"p{i % 12}", "quantity": 1}))
    return orders, prices


def main() -> None:
    import fastavro
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from service.app import Service
    from service.config import load_settings

    bootstrap = sys.argv[1]
    tag = uuid.uuid4().hex[:8]
    topics = {"orders": f"first-layout-orders-{tag}", "prices": f"first-layout-prices-{tag}",
              "out": f"first-layout-out-{tag}"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topics["orders"], 1), NewTopic(topics["prices"], 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    orders, prices = first_input()
    for topic, schema_file, changes in ((topics["orders"], "orders.avsc", orders), (topics["prices"], "prices.avsc", prices)):
        schema = fastavro.parse_schema(json.loads((SCHEMAS / schema_file).read_text()))
        for kind, row in changes:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, schema, row)
            producer.produce(topic, buffer.getvalue(), headers=[("rowkind", kind.encode())], partition=0)
    producer.flush(60)
    with tempfile.TemporaryDirectory() as work:
        checkpoint = Path(work) / "checkpoint"
        settings = load_settings({
            **SETTINGS, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": topics["orders"],
            "RIGHT_TOPIC": topics["prices"], "OUTPUT_TOPIC": topics["out"], "LEFT_TABLE": "orders",
            "RIGHT_TABLE": "prices", "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"),
            "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"), "CHECKPOINT_LOCATION": str(checkpoint)})
        service = Service(settings)
        service.start()
        service.process_available()
        service.stop(graceful_timeout_s=30)
        service.spark.stop()
        ids = {}
        for name in sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
            if name.name.isdigit():
                lines = name.read_text().splitlines()
                ids = {"orders": json.loads(lines[2]).get("topic_id"), "prices": json.loads(lines[3]).get("topic_id")}
        with tarfile.open(HERE / "first-layout.tar.gz", "w:gz") as tar:
            for path in sorted(checkpoint.rglob("*")):
                if path.is_file() and path.name != "changejoin.lock":
                    tar.add(path, arcname=str(path.relative_to(checkpoint)))
    (HERE / "first-layout.json").write_text(json.dumps({"settings": SETTINGS, "topic_ids": ids, "orders": orders,
                                                        "prices": prices}) + "\n")


if __name__ == "__main__":
    main()

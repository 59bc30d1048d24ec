"""Drive the real service against the test broker: produce input changelogs, run the join
(in-process, on the session's Spark), read the output and dead-letter topics back."""
from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import fastavro

from kafka_fixture import consume_all, produce
from service.app import Service
from service.config import load_settings

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
ORDERS = json.loads((SCHEMAS / "orders.avsc").read_text())
PRICES = json.loads((SCHEMAS / "prices.avsc").read_text())


def avro(schema: dict, row: dict) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), row)
    return buffer.getvalue()


def order(order_id, product, quantity):
    return {"order_id": order_id, "product": product, "quantity": quantity}


def price(product, value, currency="EUR"):
    return {"product": product, "price": value, "currency": currency}


class JoinHarness:
    """Two input topics (orders, prices), an output topic, and the service's environment."""

    def __init__(self, bootstrap: str, spark, tmp_path: Path, new_topic, partitions: int = 1, **env):
        self.bootstrap = bootstrap
        self.spark = spark
        self.orders = new_topic(partitions)
        self.prices = new_topic(partitions)
        self.output = new_topic(partitions, create=False)
        self.env = {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "LEFT_TOPIC": self.orders, "RIGHT_TOPIC": self.prices, "OUTPUT_TOPIC": self.output,
            "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices",
            "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"),
            "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
            "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"),
            "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
            **env,
        }
        self.service = None

    def send(self, topic: str, schema: dict, changes, partition=None):
        """changes: (kind, row dict[, partition]); kind None sends no RowKind header."""
        records = []
        for change in changes:
            kind, row = change[0], change[1]
            part = change[2] if len(change) > 2 else partition
            headers = [("rowkind", kind.encode())] if kind else None
            records.append((None, avro(schema, row) if isinstance(row, dict) else row, headers, part))
        produce(self.bootstrap, topic, records)

    def send_orders(self, changes, partition=None):
        self.send(self.orders, ORDERS, changes, partition)

    def send_prices(self, changes, partition=None):
        self.send(self.prices, PRICES, changes, partition)

    def run(self, **env) -> Service:
        """Start the service (same checkpoint as any earlier run), join everything available, stop."""
        self.service = Service(load_settings({**self.env, **env}), spark=self.spark)
        self.service.start()
        try:
            self.service.process_available()
        finally:
            self.service.stop()
        return self.service

    def changelog(self, start: int = 0) -> list[tuple[str, tuple]]:
        """The output records from the ``start``-th on, decoded in the last run's output schema."""
        schema = fastavro.parse_schema(self.service.plan.output_schema)
        skip = 5 if self.service.settings.schema_registry_url else 0  # Confluent wire format header
        out = []
        for record in consume_all(self.bootstrap, self.output)[start:]:
            headers = dict(record.headers)
            value = None if record.value is None else tuple(
                fastavro.schemaless_reader(io.BytesIO(record.value[skip:]), schema, None).values())
            out.append((headers.get("rowkind", b"").decode(), value, record.key, headers))
        return out

    def retract_table(self) -> Counter:
        table = Counter()
        for kind, row, _, _ in self.changelog():
            table[row] += 1 if kind in ("+I", "+U") else -1
            assert table[row] >= 0, f"{kind} {row} retracts a row that is not in the output"
        return +table

    def upsert_table(self) -> dict:
        table = {}
        for _, row, key, _ in self.changelog():
            if row is None:
                table.pop(key, None)
            else:
                table[key] = row
        return table

    def dead_letters(self) -> list:
        return consume_all(self.bootstrap, self.service.settings.dead_letter_topic)

"""The left join of orders and prices (:data:`LEFT_JOIN`) in the per-key layout, as the decode and
encode stages see it without Spark: its plan, its encoder, and its input as decoded envelopes."""
from __future__ import annotations

from service import catalog
from service.config import load_settings
from service.decode import InputDecoder
from service.encode import OutputEncoder
from service.source import KafkaRecord
from tests.support.service_env import VALID
from tests.support.service_harness import ORDERS, PRICES, avro

LEFT_JOIN = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"


# The per-key layout (STATE_BUCKETS=0): one call per join key; the bucket layout's calls are
# checked against it in test_buckets.py.
PER_KEY = {"STATE_BUCKETS": "0"}


def plan_for(**env):
    return catalog.plan_for(load_settings({**VALID, **PER_KEY, "JOIN_SQL": LEFT_JOIN, **env}))


def encoder_for(plan, **env):
    settings = load_settings({**VALID, "JOIN_SQL": LEFT_JOIN, **env})
    return OutputEncoder(plan, "out", "out.dlq", settings.output_mode, "rowkind", settings.max_output_record_bytes,
                         None, output_partitions=3)


def envelopes(side, changes, first_offset):
    decoder = InputDecoder(plan_for(), side, "rowkind", None)
    schema = ORDERS if side == 0 else PRICES
    out = []
    for i, (kind, row) in enumerate(changes):
        value = avro(schema, row) if isinstance(row, dict) else row
        out += decoder.map(KafkaRecord("orders" if side == 0 else "prices", 0, first_offset + i, 1000 + first_offset + i,
                                       None, value, [("rowkind", kind.encode())]))
    return out

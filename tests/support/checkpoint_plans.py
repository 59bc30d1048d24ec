"""Plans of the left join of orders and prices (per key) over an orders schema that evolves: what
tests/service/test_checkpoint_compat.py and test_sparkstate.py reconcile against a checkpoint."""
from __future__ import annotations

import json

from service.catalog import plan_for
from service.config import load_settings
from tests.support.service_env import SCHEMAS, VALID

ORDERS = json.loads((SCHEMAS / "orders.avsc").read_text())
LEFT = "SELECT o.order_id, o.product, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"


def plan(tmp_path, orders=None, **env):
    settings = {**VALID, "STATE_BUCKETS": "0", "JOIN_SQL": LEFT, **env}  # per key; buckets: test_buckets.py
    if orders is not None:
        path = tmp_path / f"orders-{abs(hash(json.dumps(orders)))}.avsc"
        path.write_text(json.dumps(orders))
        settings["LEFT_SCHEMA_FILE"] = str(path)
    return plan_for(load_settings(settings))


def with_fields(*fields, drop=()):
    return {**ORDERS, "fields": [f for f in ORDERS["fields"] if f["name"] not in drop] + list(fields)}


UPSERT = {"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id"}  # not determined by the join key: a materializer
NOTE = {"name": "note", "type": ["null", "string"], "default": None}

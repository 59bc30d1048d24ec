"""The plan the driver ships to the workers (``JoinPlan.to_json``) and the facts a checkpoint keeps
about its join (``checkpoint.facts``, in ``changejoin-state.json``) are formats: golden files under
tests/data/plans/ hold them for one configuration of each kind of join. The planner must build
exactly those bytes, and the workers must read them back into the same plan. A change fails here
until the golden files are rewritten on purpose (a checkpoint-facts change also needs a look at
service/checkpoint.py's compatibility rules).

    python -m tests.service.test_plan_golden --write    # (re)write the golden files
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from service import checkpoint
from service.catalog import plan_for
from service.config import load_settings
from service.database import TableInfo
from service.plan import JoinPlan

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "plans"
BASE = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "out"}
PRICES = {**BASE, "RIGHT_TOPIC": "prices", "LEFT_SCHEMA_FILE": "schemas/orders.avsc",
          "RIGHT_SCHEMA_FILE": "schemas/prices.avsc"}
RATES = {**BASE, "RIGHT_TOPIC": "rates", "LEFT_SCHEMA_FILE": "tests/data/orders_timed.avsc",
         "RIGHT_SCHEMA_FILE": "tests/data/rates.avsc"}
SHIPMENTS = {**BASE, "RIGHT_TOPIC": "shipments", "LEFT_SCHEMA_FILE": "tests/data/orders_timed.avsc",
             "RIGHT_SCHEMA_FILE": "tests/data/shipments.avsc", "LEFT_CHANGELOG_MODE": "append",
             "RIGHT_CHANGELOG_MODE": "append"}
TIMED = {"LEFT_EVENT_TIME_COLUMN": "order_time", "RIGHT_EVENT_TIME_COLUMN": "ship_time"}
HOP = "HOP(TABLE {}, DESCRIPTOR({}), INTERVAL '5' SECOND, INTERVAL '10' SECOND, INTERVAL '1' SECOND)"
CUMULATE = "CUMULATE(TABLE {}, DESCRIPTOR({}), INTERVAL '1' MINUTE, INTERVAL '1' HOUR)"

CASES = {
    "regular_left": {
        **PRICES, "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
        "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product",
    },
    "regular_upsert_materialized": {
        **PRICES, "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product", "RIGHT_CHANGELOG_MODE": "upsert",
        "OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id,product", "STATE_TTL": "1h", "RIGHT_STATE_TTL": "10m",
        "JOIN_SQL": "SELECT o.order_id, p.product, p.price AS unit_price FROM orders o FULL JOIN prices p "
                    "ON o.product = p.product AND p.price * o.quantity > 10 AND p.currency IS NOT NULL",
    },
    "regular_mini_batch_null_safe": {
        **PRICES, "MINI_BATCH_SIZE": "100",
        "JOIN_SQL": "SELECT o.*, p.price, p.currency FROM orders o JOIN prices p ON o.product IS NOT DISTINCT FROM p.product "
                    "WHERE o.quantity BETWEEN 1 AND 5",
    },
    "semi_in": {
        **PRICES, "LEFT_PRIMARY_KEY": "order_id",
        "JOIN_SQL": "SELECT o.* FROM orders o WHERE o.product IN (SELECT p.product FROM prices p WHERE p.price > 1)",
    },
    "anti_not_exists": {
        **PRICES, "RIGHT_PRIMARY_KEY": "product",
        "JOIN_SQL": "SELECT order_id, quantity FROM orders o WHERE NOT EXISTS "
                    "(SELECT 1 FROM prices p WHERE p.product = o.product AND p.currency = 'EUR')",
    },
    "temporal_event_time": {
        **RATES, "RIGHT_PRIMARY_KEY": "currency", "RIGHT_EVENT_TIME_COLUMN": "rate_time",
        "LEFT_WATERMARK_DELAY": "5s", "RIGHT_WATERMARK_DELAY": "1s",
        "JOIN_SQL": "SELECT o.order_id, o.amount, r.rate AS eur_rate FROM orders o LEFT JOIN rates "
                    "FOR SYSTEM_TIME AS OF o.order_time AS r ON o.currency = r.currency",
    },
    "temporal_processing_time": {
        **RATES, "RIGHT_PRIMARY_KEY": "currency", "STATE_TTL": "30m",
        "JOIN_SQL": "SELECT o.order_id, r.rate FROM orders o JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r "
                    "ON o.currency = r.currency",
    },
    "interval_event_time": {
        **SHIPMENTS, **TIMED, "LEFT_WATERMARK_DELAY": "2s",
        "JOIN_SQL": "SELECT o.order_id, s.ship_id, s.ship_time FROM orders o LEFT JOIN shipments s "
                    "ON o.order_id = s.order_id AND s.ship_time BETWEEN o.order_time - INTERVAL '10' MINUTE "
                    "AND o.order_time + INTERVAL '1' HOUR AND s.carrier <> 'none'",
    },
    "interval_processing_time": {
        **SHIPMENTS,
        "JOIN_SQL": "SELECT o.order_id, s.carrier FROM orders o FULL JOIN shipments s ON o.order_id = s.order_id "
                    "AND s.proctime >= o.proctime AND s.proctime < o.proctime + INTERVAL '5' SECOND",
    },
    "window_hop_full": {
        **SHIPMENTS, **TIMED,
        "JOIN_SQL": f"SELECT a.order_id, a.window_start, a.window_end, b.ship_time "
                    f"FROM TABLE({HOP.format('orders', 'order_time')}) a "
                    f"FULL JOIN TABLE({HOP.format('shipments', 'ship_time')}) b "
                    "ON a.window_start = b.window_start AND a.window_end = b.window_end AND a.order_id = b.order_id",
    },
    "window_cumulate_semi": {
        **SHIPMENTS, **TIMED,
        "JOIN_SQL": f"SELECT a.order_id, a.window_time FROM TABLE({CUMULATE.format('orders', 'order_time')}) a "
                    f"WHERE a.order_id IN (SELECT b.order_id FROM TABLE({CUMULATE.format('shipments', 'ship_time')}) b "
                    "WHERE a.window_start = b.window_start AND a.window_end = b.window_end)",
    },
    "regular_debezium_upsert": {
        **PRICES, "LEFT_FORMAT": "debezium-json", "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
        "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product",
    },
    "lookup_left_retract": {
        **BASE, "LEFT_SCHEMA_FILE": "schemas/orders.avsc", "LEFT_PRIMARY_KEY": "order_id", "LEFT_STATE_TTL": "1d",
        "RIGHT_LOOKUP_URL": "postgresql://app:pw@db:5432/shop", "RIGHT_TABLE": "products",
        "RIGHT_LOOKUP_TABLE": "crm.products", "LOOKUP_CACHE": "partial", "LOOKUP_CACHE_EXPIRE_AFTER_WRITE": "1m",
        "JOIN_SQL": "SELECT o.order_id, p.name, p.price FROM orders o LEFT JOIN products FOR SYSTEM_TIME AS OF "
                    "PROCTIME() AS p ON o.product = p.product AND p.price > 0",
    },
}

#: The catalog of a lookup join's table, as the database would describe it.
TABLES = {
    "lookup_left_retract": TableInfo.from_dict({
        "table": "crm.products", "primary_key": ["product"], "unique_keys": [["product"]],
        "columns": [
            {"name": "product", "pg_type": "text", "cast": "text", "avro_type": "string", "nullable": False},
            {"name": "name", "pg_type": "character varying(40)", "cast": "varchar", "avro_type": "string",
             "nullable": True},
            {"name": "price", "pg_type": "numeric(10,2)", "cast": "numeric", "nullable": True,
             "avro_type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "tags", "pg_type": "text[]", "cast": "_text", "avro_type": None, "nullable": True,
             "unsupported": "arrays are not read"},
            {"name": "supplier", "pg_type": "text", "cast": "text", "avro_type": "string", "nullable": False},
        ]}),
}


def _plan(case: str):
    env = {k: str(ROOT / v) if k.endswith("_SCHEMA_FILE") else v for k, v in CASES[case].items()}
    return plan_for(load_settings(env), table=TABLES.get(case))


def golden(case: str) -> dict:
    plan = _plan(case)
    return {"plan": json.loads(plan.to_json()), "checkpoint": checkpoint.facts(plan)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_planner_builds_the_golden_plan_and_checkpoint_facts(case):
    expected = json.loads((GOLDEN / f"{case}.json").read_text())
    plan = _plan(case)
    assert plan.to_json() == json.dumps(expected["plan"], separators=(",", ":"))  # the same bytes
    assert JoinPlan.from_json(json.dumps(expected["plan"])) == plan  # and the workers read them back
    assert checkpoint.facts(plan) == expected["checkpoint"]


def test_every_kind_of_join_has_a_golden_plan():
    kinds = {json.loads(path.read_text())["plan"]["kind"] for path in GOLDEN.glob("*.json")}
    assert kinds == {"regular", "temporal_event_time", "temporal_processing_time", "interval_event_time",
                     "interval_processing_time", "window", "lookup"}
    assert {path.stem for path in GOLDEN.glob("*.json")} == set(CASES)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        (GOLDEN / f"{name}.json").write_text(json.dumps(golden(name), indent=1) + "\n")
        print(f"wrote {GOLDEN / name}.json")

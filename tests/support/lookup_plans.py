"""A lookup join's configuration (:data:`LOOKUP`: orders looked up in a PostgreSQL table of
products) and its plan with a catalog given (:data:`PRODUCTS`), without a database."""
from __future__ import annotations

from pathlib import Path

from service.catalog import plan_for
from service.config import load_settings
from service.database import TableInfo

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
LOOKUP = {
    "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "out",
    "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "LEFT_PRIMARY_KEY": "order_id",
    "RIGHT_LOOKUP_URL": "postgresql://app:hunter2@db:5432/shop", "RIGHT_TABLE": "products",
    "JOIN_SQL": "SELECT o.order_id, p.name FROM orders o LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                "ON o.product = p.product",
}
PRODUCTS = TableInfo.from_dict({
    "table": "products", "primary_key": ["product"], "unique_keys": [["product"]],
    "columns": [
        {"name": "product", "pg_type": "text", "cast": "text", "avro_type": "string", "nullable": False},
        {"name": "name", "pg_type": "text", "cast": "text", "avro_type": "string", "nullable": True},
        {"name": "shape", "pg_type": "point", "cast": "point", "avro_type": None, "nullable": True,
         "unsupported": "geometric types are not read"},
    ]})


def plan(**env):
    return plan_for(load_settings({k: v for k, v in {**LOOKUP, **env}.items() if v is not None}), table=PRODUCTS)

"""A lookup join's configuration and plan, without a database: the catalog is given."""
from __future__ import annotations

from pathlib import Path

import pytest

from operators.lookup import Identity
from service.config import ConfigError, load_settings
from service.database import TableInfo
from service.plan import PlanError, PlanKind
from service.planner import build_plan, explain
from service.shipping import worker_config, worker_secrets

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
    return build_plan(load_settings({k: v for k, v in {**LOOKUP, **env}.items() if v is not None}), table=PRODUCTS)


def problems(**env) -> str:
    with pytest.raises(ConfigError) as err:
        load_settings({k: v for k, v in {**LOOKUP, **env}.items() if v is not None})
    return str(err.value)


def test_the_right_side_needs_no_topic_and_refuses_what_a_table_has_not():
    assert load_settings(LOOKUP).lookup
    text = problems(RIGHT_TOPIC="prices", RIGHT_PRIMARY_KEY="product", RIGHT_SCHEMA_FILE=str(SCHEMAS / "prices.avsc"))
    for var in ("RIGHT_TOPIC", "RIGHT_PRIMARY_KEY", "RIGHT_SCHEMA_FILE"):
        assert f"{var}: not used by a lookup join" in text


def test_lookup_variables_need_the_url_and_cache_variables_the_cache():
    text = problems(RIGHT_LOOKUP_URL=None, RIGHT_TOPIC="prices", RIGHT_SCHEMA_FILE=str(SCHEMAS / "prices.avsc"),
                    LOOKUP_BATCH_SIZE="10")
    assert "LOOKUP_BATCH_SIZE: applies to a lookup join only" in text
    assert "LOOKUP_CACHE_MAX_ROWS: applies to LOOKUP_CACHE=partial only" in problems(LOOKUP_CACHE_MAX_ROWS="5")
    assert load_settings({**LOOKUP, "LOOKUP_CACHE": "partial", "LOOKUP_CACHE_MAX_ROWS": "5"}).lookup_cache_max_rows == 5


def test_the_url_the_table_name_and_the_checkpoint_are_checked():
    assert "RIGHT_LOOKUP_URL: expected postgresql://" in problems(RIGHT_LOOKUP_URL="mysql://db/shop")
    assert "RIGHT_TABLE: required with RIGHT_LOOKUP_URL" in problems(RIGHT_TABLE=None)
    assert "CHECKPOINT_LOCATION: a lookup join pins" in problems(CHECKPOINT_LOCATION="s3a://bucket/cp")
    without_name = {k: v for k, v in LOOKUP.items() if k != "RIGHT_TABLE"}
    assert load_settings({**without_name, "RIGHT_LOOKUP_TABLE": "crm.products"}).right_table_name == "products"


def test_the_password_is_never_shown_and_reaches_the_workers_apart():
    settings = load_settings(LOOKUP)
    assert "hunter2" not in str(settings.redacted())
    p = plan()
    assert "hunter2" not in p.to_json() and "hunter2" not in str(worker_config(settings, p))
    assert worker_secrets(settings, kafka=False)["lookup_password"] == "hunter2"
    assert worker_secrets(load_settings({**LOOKUP, "RIGHT_LOOKUP_PASSWORD": "s3cret!"}), kafka=False)[
        "lookup_password"] == "s3cret!"
    assert "s3cret!" not in str(load_settings({**LOOKUP, "RIGHT_LOOKUP_PASSWORD": "s3cret!"}).redacted())


def test_the_stream_is_grouped_by_its_identity():
    assert plan().lookup_identity is Identity.KEY
    assert plan(LEFT_PRIMARY_KEY=None).lookup_identity is Identity.ROW
    assert plan(LEFT_CHANGELOG_MODE="append").lookup_identity is Identity.NONE
    assert plan(LEFT_CHANGELOG_MODE="upsert").left.normalized is False  # the join normalizes it itself
    p = plan()
    assert p.kind is PlanKind.LOOKUP and p.left.join_key == (0,) and p.lookup["left_key"] == [1]
    assert p.join_key_of(0)((7, "p1", 3)) == (7,)


def test_upsert_output_needs_the_materializer_unless_keyed_by_the_left_primary_key():
    assert not plan(OUTPUT_MODE="upsert", OUTPUT_KEY="order_id").upsert_materializer
    # without a primary key the rows of one output key may come from several groups (whole rows)
    assert plan(OUTPUT_MODE="upsert", OUTPUT_KEY="order_id", LEFT_PRIMARY_KEY=None).upsert_materializer
    with pytest.raises(PlanError, match="OUTPUT_KEY"):
        plan(OUTPUT_MODE="upsert", OUTPUT_KEY="name")  # wholly from the padded table side


def test_only_a_lookup_join_and_only_readable_columns():
    with pytest.raises(PlanError, match="joined by a lookup join"):
        plan(JOIN_SQL="SELECT o.order_id FROM orders o JOIN products p ON o.product = p.product")
    with pytest.raises(PlanError, match="column shape of products has type point"):
        plan(JOIN_SQL="SELECT o.order_id, p.shape FROM orders o JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                      "ON o.product = p.product")
    with pytest.raises(PlanError, match="INNER or LEFT"):
        plan(JOIN_SQL="SELECT o.order_id FROM orders o RIGHT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                      "ON o.product = p.product")
    with pytest.raises(PlanError, match="compares values SQL cannot compare"):
        plan(JOIN_SQL="SELECT o.order_id FROM orders o JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                      "ON o.quantity = p.product")


def test_check_config_explains_the_table_and_its_types():
    text = explain(plan(LOOKUP_CACHE="partial", LOOKUP_CACHE_EXPIRE_AFTER_WRITE="30s"))
    assert "lookup LEFT OUTER JOIN" in text
    assert "right: table products in postgresql://app@db:5432/shop as products; looked up by (product)" in text
    assert "column name: text -> Avro string" in text
    assert "column shape: point -> not read (geometric types are not read)" in text
    assert "partial cache per Python worker of at most 100000 keys (write 30.0 s" in text
    assert "stages: lookup (in each reading task" in text and "hunter2" not in text


def test_left_state_ttl_bounds_the_lookup_state_and_is_unused_without_state():
    from service.config import unused_settings

    keyed = load_settings({**LOOKUP, "LEFT_STATE_TTL": "1d"})
    assert unused_settings(keyed, plan(LEFT_STATE_TTL="1d")) == []
    assert plan(LEFT_STATE_TTL="1d").left.state_ttl_ms == 86_400_000
    append = load_settings({**LOOKUP, "LEFT_STATE_TTL": "1d", "LEFT_CHANGELOG_MODE": "append"})
    assert unused_settings(append, plan(LEFT_STATE_TTL="1d", LEFT_CHANGELOG_MODE="append")) == [
        "LEFT_STATE_TTL is set but not used: a lookup join over an append-only input keeps no state"]

"""A lookup join's configuration and plan, without a database: the catalog is given."""
from __future__ import annotations

import pytest

from operators.lookup import Identity
from service.catalog import plan_for
from service.config import ConfigError, load_settings
from service.database import TableInfo
from service.explain import explain
from service.plan import PlanError, PlanKind
from service.shipping import worker_config, worker_secrets

from tests.support.lookup_plans import LOOKUP, plan
from tests.support.service_env import SCHEMAS


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
    assert worker_secrets(settings, kafka=False).lookup_password == "hunter2"
    config = worker_config(settings, p, secrets=worker_secrets(settings, kafka=False))
    assert "hunter2" not in repr(config) and "hunter2" not in config.to_json()  # mapper.config: no secret
    assert "hunter2" in worker_secrets(settings, kafka=False).to_json()  # mapper.secret
    assert worker_secrets(load_settings({**LOOKUP, "RIGHT_LOOKUP_PASSWORD": "s3cret!"}), kafka=False
                          ).lookup_password == "s3cret!"
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
    with pytest.raises(PlanError, match="compares INT with STRING"):
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


def table(*columns, name="products"):
    """A catalog: (name, pg_type, cast, avro_type, nullable) per column."""
    return TableInfo.from_dict({"table": name, "primary_key": ["product"], "unique_keys": [["product"]], "columns": [
        {"name": n, "pg_type": pg, "cast": cast, "avro_type": avro, "nullable": nullable}
        for n, pg, cast, avro, nullable in columns]})


PRODUCT = ("product", "text", "text", "string", False)
NAME = ("name", "text", "text", "string", True)
DECIMAL_10_2 = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}


def test_the_join_reads_only_the_table_columns_its_query_uses():
    wide = table(PRODUCT, ("supplier", "text", "text", "string", False), NAME,
                 ("price", "numeric(10,2)", "numeric", DECIMAL_10_2, True), ("legacy", "integer", "int4", "int", True))
    p = plan_for(load_settings({**LOOKUP, "JOIN_SQL": (
        "SELECT o.order_id, p.name FROM orders o LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
        "ON o.product = p.product AND p.price > 0")}), table=wide)
    assert p.right.columns == ("product", "name", "price")  # the key, the SELECT list's and the condition's
    assert p.right.join_key == (0,) and p.projection == ((0, 0), (1, 1))
    text = explain(p)
    assert "column supplier: text -> not read (the query does not use it)" in text
    assert "column price: numeric(10,2) -> Avro" in text


def reconcile(tmp_path, catalog, **env):
    from service import checkpoint

    return checkpoint.reconcile(plan_for(load_settings({**LOOKUP, **env}), table=catalog), str(tmp_path))


def test_the_checkpoint_holds_only_what_the_join_reads_of_the_table(tmp_path):
    """A NOT NULL column added to the table, or any change to a column the query does not read,
    leaves the checkpoint valid; a column the query reads anew that stored rows have no value for,
    or a read column's type changed beyond what stored values are, is refused naming the table and
    the column."""
    from service.checkpoint import CheckpointMismatch

    reconcile(tmp_path, table(PRODUCT, NAME, ("legacy", "integer", "int4", "int", True)))
    # ALTER TABLE products ADD COLUMN region text NOT NULL DEFAULT 'eu'; ... DROP COLUMN legacy
    region = ("region", "text", "text", "string", False)
    reconcile(tmp_path, table(PRODUCT, NAME, region))
    reconcile(tmp_path, table(PRODUCT, ("name", "character varying(50)", "varchar", "string", True), region))
    with pytest.raises(CheckpointMismatch) as refused:
        reconcile(tmp_path, table(PRODUCT, NAME, region), JOIN_SQL=(
            "SELECT o.order_id, p.name, p.region FROM orders o LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() "
            "AS p ON o.product = p.product"))
    assert ("the lookup table products: JOIN_SQL now reads column 'region' (text NOT NULL), which the join's "
            "stored rows were read without, so they have no value for it") in str(refused.value)
    assert "RIGHT_SCHEMA_FILE" not in str(refused.value) and "registry" not in str(refused.value)
    with pytest.raises(CheckpointMismatch) as refused:
        reconcile(tmp_path, table(PRODUCT, ("name", "integer", "int4", "int", True), region))
    assert ("the lookup table products: column 'name' changed type from character varying(50) to integer (Avro "
            "[\"null\", \"string\"] -> [\"null\", \"int\"]), which the join's stored rows are not values of"
            ) in str(refused.value)
    # A nullable column read anew is NULL in the stored rows (as an Avro field added with a null default).
    reconcile(tmp_path, table(PRODUCT, NAME, region, ("tier", "text", "text", "string", True)), JOIN_SQL=(
        "SELECT o.order_id, p.name, p.tier FROM orders o LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() "
        "AS p ON o.product = p.product"))


@pytest.mark.parametrize("stream_column, table_column, cast", [
    ("quantity_d", ("product", "integer", "int4", "int", False), "double precision"),
    ("amount", ("product", "bigint", "int8", "long", False), "numeric"),
    ("quantity_d", ("product", "numeric(10,2)", "numeric", DECIMAL_10_2, False), "double precision"),
])
def test_a_lookup_key_of_two_kinds_of_number_is_refused_naming_the_cast(tmp_path, stream_column, table_column, cast):
    """Flink refuses a lookup key of two types ("Temporal table join requires equivalent condition
    of the same type"); these pairs would also fail every row (3.0 is no integer to send)."""
    import json

    schema = json.loads((SCHEMAS / "orders.avsc").read_text())
    schema["fields"] += [{"name": "quantity_d", "type": "double"},
                         {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                                     "scale": 2}}]
    (tmp_path / "orders.avsc").write_text(json.dumps(schema))
    env = {**LOOKUP, "LEFT_SCHEMA_FILE": str(tmp_path / "orders.avsc"), "JOIN_SQL": (
        f"SELECT o.order_id, p.name FROM orders o JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
        f"ON o.{stream_column} = p.product")}
    with pytest.raises(PlanError) as refused:
        plan_for(load_settings(env), table=table(table_column, NAME))
    message = str(refused.value)
    assert message.startswith(f"JOIN_SQL: the lookup key orders.{stream_column} (")
    assert f"AS {cast}) AS product_{cast.split()[0]}" in message and "Flink" in message and "\n" not in message
    # The same stream column against a table column of its kind is planned.
    same = {"quantity_d": ("product", "double precision", "float8", "double", False),
            "amount": ("product", "numeric(9,2)", "numeric", {**DECIMAL_10_2, "precision": 9}, False)}[stream_column]
    assert plan_for(load_settings(env), table=table(same, NAME)).kind is PlanKind.LOOKUP


def test_a_read_column_made_not_null_is_refused_saying_so(tmp_path):
    from service.checkpoint import CheckpointMismatch

    reconcile(tmp_path, table(PRODUCT, NAME))
    with pytest.raises(CheckpointMismatch, match="the lookup table products: column 'name' was made NOT NULL, but the "
                                                 "join's stored rows may hold NULL in it"):
        reconcile(tmp_path, table(PRODUCT, ("name", "text", "text", "string", False)))

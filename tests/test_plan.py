"""The join plan: layouts from keys, output schema nullability, when the upsert materializer runs."""
import re

import pytest

from service.config import load_settings
from service.plan import JoinPlan, PlanError, build_plan
from test_config import VALID


def plan_for(**env):
    settings = load_settings({**VALID, **env})
    return settings, build_plan(settings)


def test_layouts_follow_join_key_and_primary_key():
    _, plan = plan_for()
    assert plan.left.layout.value == "InputSideHasUniqueKey"  # order_id is not the join key
    assert plan.right.layout.value == "JoinKeyContainsUniqueKey"  # product is the join key
    _, plan = plan_for(LEFT_PRIMARY_KEY="", RIGHT_PRIMARY_KEY="")
    assert {plan.left.layout.value, plan.right.layout.value} == {"InputSideHasNoUniqueKey"}


def test_outer_padded_columns_are_nullable_in_the_output_schema():
    _, plan = plan_for(JOIN_SQL="SELECT o.order_id, p.product, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product")
    types = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    assert types["order_id"] == "long"
    assert types["product"] == ["null", "string"] and types["price"] == ["null", "double"]


def test_plan_survives_the_trip_to_the_workers():
    _, plan = plan_for()
    assert JoinPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    "sql, key, needed",
    [
        ("SELECT o.order_id, o.product, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product", "order_id", True),
        ("SELECT o.order_id, o.product, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product", "order_id,product", False),
        ("SELECT o.order_id, p.product, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product", "order_id,product", True),
        ("SELECT o.order_id, p.product, p.price FROM orders o JOIN prices p ON o.product = p.product", "order_id,product", False),
    ],
)
def test_upsert_materializer_only_when_the_join_key_does_not_determine_the_output_key(sql, key, needed):
    _, plan = plan_for(JOIN_SQL=sql, OUTPUT_MODE="upsert", OUTPUT_KEY=key)
    assert plan.upsert_materializer is needed
    assert ("upsert materializer" in plan.explain()) is needed


def test_processing_time_temporal_join_against_a_versioned_table_is_refused():
    with pytest.raises(PlanError, match="RIGHT_EVENT_TIME_COLUMN"):
        plan_for(JOIN_SQL="SELECT o.order_id, p.price FROM orders o JOIN prices FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                          "ON o.product = p.product", RIGHT_EVENT_TIME_COLUMN="price")



def test_an_event_time_join_drops_the_versioned_tables_update_before():
    from pathlib import Path

    from operators import Context, InMemoryState, Output, RowKind

    data = Path(__file__).parent / "data"
    _, plan = plan_for(
        LEFT_SCHEMA_FILE=str(data / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(data / "rates.avsc"),
        RIGHT_TABLE="rates", RIGHT_PRIMARY_KEY="currency", RIGHT_EVENT_TIME_COLUMN="rate_time",
        JOIN_SQL="SELECT o.order_id, r.rate FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
                 "ON o.currency = r.currency")
    state, out = InMemoryState(), Output()
    records = [(1, RowKind.INSERT, ("USD", 1.1, 10)), (1, RowKind.UPDATE_BEFORE, ("USD", 1.1, 10)),
               (1, RowKind.UPDATE_AFTER, ("USD", 1.2, 50)), (0, RowKind.INSERT, (7, "USD", 5.0, 20))]
    plan.operator.process(state.for_key(("USD",)), records, Context(), out)
    plan.operator.on_timer(state.for_key(("USD",)), "event", 20, Context(watermark=100), out)
    assert out.rows == [(RowKind.INSERT, (7, 1.1))]  # the version of time 10 still holds at 20


@pytest.mark.parametrize("sql, problem", [
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND o.product > 5",
     "'l.product > 5' compares a string with an integer"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND o.product + 1 > p.price",
     "'l.product + 1' computes with a string"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND p.price LIKE 'x%'",
     "matches a float with LIKE"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND o.quantity IN (1, 'two')",
     "compares an integer with a string"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND (o.quantity OR p.price > 1)",
     "applies OR to an integer"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.price", "the join key orders.product (string) = "
     "prices.price (float) compares values SQL cannot compare"),
])
def test_a_join_that_would_fail_on_every_record_is_refused_at_configuration(sql, problem):
    with pytest.raises(PlanError, match="^JOIN_SQL: .*" + re.escape(problem)):
        plan_for(JOIN_SQL=sql)


def test_conditions_sql_can_evaluate_are_accepted():
    plan_for(JOIN_SQL="SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product "
                      "AND o.quantity * 2 > p.price AND p.currency IS NULL AND NOT (o.product LIKE 'x%')")


def test_an_event_time_column_must_hold_times():
    from test_idle_timeout import TEMPORAL

    env = {**TEMPORAL, "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "rates"}
    plan_for(**env)  # rate_time is an epoch-millis long
    with pytest.raises(PlanError, match="^RIGHT_EVENT_TIME_COLUMN: column 'currency' of rates holds string values"):
        plan_for(**{**env, "RIGHT_EVENT_TIME_COLUMN": "currency"})


def test_numbers_of_different_types_meet_under_one_join_key(tmp_path):
    from decimal import Decimal

    import json

    from service.envelope import join_key_group

    schemas = {}
    for name, avro_type in (("left", "long"), ("right", "double"), ("dec2", {"type": "bytes", "logicalType": "decimal",
                                                                           "precision": 6, "scale": 2})):
        path = tmp_path / f"{name}.avsc"
        path.write_text(json.dumps({"type": "record", "name": name, "fields": [{"name": "k", "type": avro_type}]}))
        schemas[name] = str(path)
    sql = "SELECT a.k FROM a JOIN b ON a.k = b.k"
    _, mixed = plan_for(JOIN_SQL=sql, LEFT_TABLE="a", RIGHT_TABLE="b", LEFT_PRIMARY_KEY="", RIGHT_PRIMARY_KEY="",
                        LEFT_SCHEMA_FILE=schemas["left"], RIGHT_SCHEMA_FILE=schemas["right"])
    assert join_key_group(mixed.join_key_of(0)((1,))) == join_key_group(mixed.join_key_of(1)((1.0,)))
    _, decimals = plan_for(JOIN_SQL=sql, LEFT_TABLE="a", RIGHT_TABLE="b", LEFT_PRIMARY_KEY="", RIGHT_PRIMARY_KEY="",
                           LEFT_SCHEMA_FILE=schemas["dec2"], RIGHT_SCHEMA_FILE=schemas["left"])
    assert join_key_group(decimals.join_key_of(0)((Decimal("7.00"),))) == join_key_group(decimals.join_key_of(1)((7,)))
    _, same = plan_for(JOIN_SQL=sql, LEFT_TABLE="a", RIGHT_TABLE="b", LEFT_PRIMARY_KEY="", RIGHT_PRIMARY_KEY="",
                       LEFT_SCHEMA_FILE=schemas["left"], RIGHT_SCHEMA_FILE=schemas["left"])
    assert same.join_key_of(0)((5,)) == (5,)

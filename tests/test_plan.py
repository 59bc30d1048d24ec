"""The join plan: layouts from keys, output schema nullability, when the upsert materializer runs."""
import pytest

from service.config import load_settings
from service.pipeline import needs_upsert_materializer
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
    settings, plan = plan_for(JOIN_SQL=sql, OUTPUT_MODE="upsert", OUTPUT_KEY=key)
    assert needs_upsert_materializer(settings, plan) is needed


def test_processing_time_temporal_join_against_a_versioned_table_is_refused():
    with pytest.raises(PlanError, match="RIGHT_EVENT_TIME_COLUMN"):
        plan_for(JOIN_SQL="SELECT o.order_id, p.price FROM orders o JOIN prices FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                          "ON o.product = p.product", RIGHT_EVENT_TIME_COLUMN="price")

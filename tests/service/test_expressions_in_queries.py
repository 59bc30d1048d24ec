"""Expressions where a query has them (issue 39), from JOIN_SQL to the plan, the operator's
changelog, the decoder and the checkpoint: the select list, the ON condition and computed
equi-keys, WHERE on every join type, input subqueries; the output's Avro types; dead letters
where Flink would fail."""
import datetime as dt
import json
import pickle
from decimal import Decimal
from pathlib import Path

import pytest

from operators import RowKind
from operators.testing import LocalRunner
from service import catalog
from service import checkpoint
from service.config import load_settings
from service.decode import InputDecoder
from service.envelope import Tag, join_key_group
from service.explain import explain
from service.plan import JoinPlan, PlanError
from service.source import KafkaRecord
from tests.support.service_harness import avro

DATA = Path(__file__).resolve().parents[1] / "data"
LINES = json.loads((DATA / "lines.avsc").read_text())
CUSTOMERS = json.loads((DATA / "customers.avsc").read_text())
ENV = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "lines", "RIGHT_TOPIC": "customers",
       "OUTPUT_TOPIC": "out", "LEFT_SCHEMA_FILE": str(DATA / "lines.avsc"),
       "RIGHT_SCHEMA_FILE": str(DATA / "customers.avsc"), "LEFT_PRIMARY_KEY": "order_id",
       "RIGHT_PRIMARY_KEY": "customer_id"}
ON = "ON LOWER(l.email) = LOWER(c.email)"
I, D = int(RowKind.INSERT), int(RowKind.DELETE)
T0 = dt.datetime(2024, 1, 5, 10, 20, 30, 123000, tzinfo=dt.timezone.utc)


def plan_for(sql: str, **env) -> JoinPlan:
    return catalog.plan_for(load_settings({**ENV, "JOIN_SQL": sql, **env}))


def line(order_id, email="A@x.io", quantity=2, price="12.50", status="NEW", code=None, product="book"):
    return (order_id, product, quantity, Decimal(price), status, email, T0, code)


def customer(customer_id, email="a@X.io", name="Ann", tier="gold", discount=0.1):
    return (customer_id, email, name, tier, discount, dt.date(2020, 2, 29))


def run(plan: JoinPlan, records) -> list:
    """The changes the plan's operator emits for ``records`` (side, kind, input row): each input
    row first goes through what JOIN_SQL does before the join, as decode does."""
    calcs = [plan.sides[s].input_calc() for s in (0, 1)]
    runner = LocalRunner(plan.operator)
    for side, kind, row in records:
        if calcs[side] is not None:
            row = calcs[side](row)
            if row is None:
                continue
        runner.process([(side, kind, row)])
    return [(int(k), r) for k, r in runner.output.rows], runner.output.failed


def fields(plan: JoinPlan) -> dict:
    return {f["name"]: f["type"] for f in plan.output_schema["fields"]}


# -- the select list ----------------------------------------------------------------------------------
def test_select_expressions_compute_the_output_with_flinks_types():
    plan = plan_for("SELECT l.order_id, l.quantity * l.unit_price AS total, UPPER(c.name) AS customer, "
                    "COALESCE(c.tier, 'none') AS tier, CAST(l.order_time AS DATE) AS day, "
                    f"TIMESTAMPADD(DAY, 1, l.order_time) AS due FROM lines l LEFT JOIN customers c {ON}")
    types = fields(plan)
    assert types["order_id"] == "long"
    # INT * DECIMAL(10, 2): DECIMAL(21, 2), as bytes with the decimal logical type
    assert types["total"] == {"type": "bytes", "logicalType": "decimal", "precision": 21, "scale": 2}
    assert types["customer"] == ["null", "string"]  # the customer side is padded
    assert types["tier"] == "string"  # COALESCE with a literal is NOT NULL, padded or not
    assert types["day"] == {"type": "int", "logicalType": "date"}
    assert types["due"] == {"type": "long", "logicalType": "timestamp-millis"}
    changes, failed = run(plan, [(0, I, line(1)), (1, I, customer(7)), (0, I, line(2, email=None))])
    due = T0 + dt.timedelta(days=1)
    assert changes == [
        (I, (1, Decimal("25.00"), None, "none", dt.date(2024, 1, 5), due)),
        (D, (1, Decimal("25.00"), None, "none", dt.date(2024, 1, 5), due)),  # the padded row, computed as it was
        (I, (1, Decimal("25.00"), "ANN", "gold", dt.date(2024, 1, 5), due)),
        (I, (2, Decimal("25.00"), None, "none", dt.date(2024, 1, 5), due)),
    ]
    assert not failed
    assert "output computed from the joined rows: total = l.quantity * l.unit_price (DECIMAL(21, 2) NOT NULL)" \
        in explain(plan)
    assert JoinPlan.from_json(plan.to_json()) == plan


def test_an_expression_without_an_alias_is_named_as_flink_names_it():
    plan = plan_for(f"SELECT l.order_id, l.quantity + 1 FROM lines l JOIN customers c {ON}")
    assert plan.output_names == ("order_id", "EXPR$1") and "EXPR_1" in fields(plan)


def test_an_output_expression_that_fails_is_a_dead_letter_and_so_is_its_retraction():
    plan = plan_for(f"SELECT l.order_id, CAST(l.code AS INT) AS code FROM lines l JOIN customers c {ON}")
    changes, failed = run(plan, [(1, I, customer(7)), (0, I, line(1, code="12")), (0, I, line(2, code="x12")),
                                 (0, D, line(2, code="x12"))])
    assert changes == [(I, (1, 12))]
    assert [(kind, why) for kind, _, why in failed] == [
        (I, "CAST(l.code AS INT): 'x12' is not a number"), (D, "CAST(l.code AS INT): 'x12' is not a number")]



def test_a_retraction_of_a_row_with_a_negative_zero_is_computed_for_itself():
    """The plan tells the operator where a double's zero may be: (1, -0.0) and (1, 0.0) are equal
    joined rows, yet CAST(-0.0 AS STRING) is '-0.0', so the retraction of the first takes its own
    computed row, not the one kept for the other."""
    plan = plan_for(f"SELECT l.order_id, CAST(c.discount AS STRING) AS d FROM lines l JOIN customers c {ON}")
    changes, failed = run(plan, [(1, I, customer(7, discount=-0.0)), (1, I, customer(8, discount=0.0)),
                                 (0, I, line(1)), (1, D, customer(7, discount=-0.0)),
                                 (1, D, customer(8, discount=0.0))])
    assert not failed
    assert changes == [(I, (1, "-0.0")), (I, (1, "0.0")), (D, (1, "-0.0")), (D, (1, "0.0"))]


# -- WHERE --------------------------------------------------------------------------------------------
def test_where_on_a_left_join_filters_the_preserved_input_before_the_join():
    plan = plan_for(f"SELECT l.order_id, c.name FROM lines l LEFT JOIN customers c {ON} WHERE l.status <> 'CANCELLED'")
    assert plan.join_type == "LEFT" and plan.left.calc["filter_sql"] == "l.status <> 'CANCELLED'"
    assert plan.output is None
    changes, _ = run(plan, [(0, I, line(1, status="CANCELLED")), (0, I, line(2)), (0, D, line(1, status="CANCELLED"))])
    assert changes == [(I, (2, None))]
    assert "before the shuffle: filtered by l.status <> 'CANCELLED'" in explain(plan)


def test_a_where_no_padded_row_passes_makes_an_outer_join_inner_as_flink_does():
    plan = plan_for(f"SELECT l.order_id, c.name FROM lines l LEFT JOIN customers c {ON} WHERE c.discount > 0.05")
    assert plan.join_type == "INNER" and plan.condition_sql == "r.discount > 0.05" and plan.output is None
    plan = plan_for(f"SELECT l.order_id, c.name FROM lines l FULL JOIN customers c {ON} WHERE c.discount > 0.05")
    assert plan.join_type == "RIGHT"


def test_a_where_on_the_padded_side_is_applied_to_the_output_changelog():
    plan = plan_for(f"SELECT l.order_id, c.name FROM lines l LEFT JOIN customers c {ON} WHERE c.tier IS NULL")
    assert plan.join_type == "LEFT" and plan.output["where_sql"] == "c.tier IS NULL"
    changes, _ = run(plan, [(0, I, line(1)), (1, I, customer(7)), (1, D, customer(7)), (1, I, customer(8, tier=None))])
    # the padded row passes, its retraction too when the customer arrives; the matched row with
    # a tier does not, nor its retraction; a customer without a tier passes
    assert changes == [(I, (1, None)), (D, (1, None)), (I, (1, None)), (D, (1, None)), (I, (1, "Ann"))]
    assert "output filtered after the join: WHERE c.tier IS NULL" in explain(plan)


def test_where_on_an_anti_join_filters_its_left_input():
    plan = plan_for("SELECT l.order_id FROM lines l WHERE l.quantity > 1 AND NOT EXISTS "
                    "(SELECT 1 FROM customers c WHERE LOWER(c.email) = LOWER(l.email))")
    assert plan.join_type == "ANTI" and plan.left.calc["filter_sql"] == "l.quantity > 1"
    changes, _ = run(plan, [(0, I, line(1, quantity=1)), (0, I, line(2))])
    assert changes == [(I, (2,))]


# -- ON: the condition and computed equi-keys -----------------------------------------------------------
def test_an_equality_of_expressions_of_each_input_is_a_computed_equi_key():
    plan = plan_for(f"SELECT l.order_id, c.name FROM lines l JOIN customers c {ON} AND SUBSTRING(c.name FROM 1 FOR 1) = 'A'")
    assert plan.left.state_columns[-1] == "$k0" and plan.right.state_columns[-1] == "$k0"
    assert plan.left.join_key == (len(plan.left.columns),) and plan.condition_sql == "SUBSTRING(r.name, 1, 1) = 'A'"
    assert "keys LOWER(l.email) = LOWER(c.email)" in plan.description
    changes, _ = run(plan, [(0, I, line(1, email="A@X.IO")), (1, I, customer(7, email="a@x.io")),
                            (1, I, customer(8, email="a@x.io", name="Bob"))])
    assert changes == [(I, (1, "Ann"))]
    assert "computes $k0 = LOWER(l.email) (STRING)" in explain(plan)


def test_a_cast_equi_key_joins_values_of_two_types():
    plan = plan_for("SELECT l.order_id, c.name FROM lines l JOIN customers c ON CAST(l.code AS BIGINT) = c.customer_id")
    assert plan.left.computed[0][1] == "BIGINT" and plan.right.computed == ()
    changes, _ = run(plan, [(1, I, customer(7)), (0, I, line(1, code="7")), (0, I, line(2, code=" 7 "))])
    assert changes == [(I, (1, "Ann")), (I, (2, "Ann"))]


def test_the_decoder_computes_the_key_before_the_shuffle_and_dead_letters_a_failure():
    plan = plan_for("SELECT l.order_id, c.name FROM lines l JOIN customers c ON CAST(l.code AS BIGINT) = c.customer_id")
    decoder = InputDecoder(plan, 0, "rowkind", None)

    def record(code):
        value = {"order_id": 1, "product": "p", "quantity": 1, "unit_price": Decimal("1.00"), "status": "NEW",
                 "email": None, "order_time": T0, "code": code}
        return KafkaRecord("lines", 0, 5, 1000, None, avro(LINES, value), [("rowkind", b"+I")])

    (envelope,) = decoder.map(record("42"))
    assert envelope[0] == join_key_group((42,)) and pickle.loads(envelope[3])[-1] == 42
    (letter,) = decoder.map(record("4x"))
    assert letter[1] == Tag.DEAD_LETTER
    assert pickle.loads(letter[3])["reason"] == "expression_error"
    assert pickle.loads(letter[3])["detail"] == "CAST(l.code AS BIGINT): '4x' is not a number"


def test_a_condition_with_functions_is_compiled_typed():
    plan = plan_for(f"SELECT l.order_id FROM lines l JOIN customers c {ON} AND c.since < CAST(l.order_time AS DATE) "
                    "AND c.name LIKE 'A%' AND CHAR_LENGTH(l.status) BETWEEN 2 AND 5")
    changes, _ = run(plan, [(1, I, customer(7)), (0, I, line(1)), (0, I, line(2, status="X"))])
    assert changes == [(I, (1,))]


# -- input subqueries -----------------------------------------------------------------------------------
SUBQUERY = ("SELECT o.order_id, o.total, c.name FROM (SELECT order_id, email, quantity * unit_price AS total "
            "FROM lines WHERE status = 'NEW') AS o JOIN customers c ON LOWER(o.email) = LOWER(c.email)")


def test_an_input_subquery_filters_and_projects_before_the_join():
    plan = plan_for(SUBQUERY)
    calc = plan.left.calc
    assert calc["filter_sql"] == "status = 'NEW'" and calc["kept"] == ["order_id", "email"]
    assert [c[0] for c in plan.left.computed] == ["$c0", "$k0"]
    assert fields(plan)["total"] == {"type": "bytes", "logicalType": "decimal", "precision": 21, "scale": 2}
    row = plan.left.input_calc()(line(1))
    # the columns the query does not keep are NULL in the join's state; the computed ones follow
    assert row == (1, None, None, None, None, "A@x.io", None, None, Decimal("25.00"), "a@x.io")
    assert plan.left.input_calc()(line(2, status="OLD")) is None
    changes, _ = run(plan, [(1, I, customer(7)), (0, I, line(1)), (0, I, line(2, status="OLD"))])
    assert changes == [(I, (1, Decimal("25.00"), "Ann"))]


def test_a_subquery_that_keeps_the_primary_key_keeps_the_unique_key_and_one_that_drops_it_does_not():
    plan = plan_for(SUBQUERY)
    assert plan.left.unique_key == (0,) and plan.left.layout.value == "InputSideHasUniqueKey"
    plan = plan_for(SUBQUERY.replace("SELECT order_id, email,", "SELECT email,").replace("o.order_id, ", ""))
    assert plan.left.unique_key is None and plan.left.layout.value == "InputSideHasNoUniqueKey"
    assert "does not keep the whole primary key: no unique key" in explain(plan)


def test_an_upsert_input_a_query_filters_is_normalized_first():
    sql = ("SELECT o.order_id, c.name FROM (SELECT * FROM lines WHERE status = 'NEW') o "
           "JOIN customers c ON o.order_id = c.customer_id")
    assert plan_for(sql.replace(" WHERE status = 'NEW'", ""), LEFT_CHANGELOG_MODE="upsert").left.direct_upsert
    plan = plan_for(sql, LEFT_CHANGELOG_MODE="upsert")
    assert not plan.left.direct_upsert and plan.left.normalized
    assert "after the normalize stage: filtered by status = 'NEW'" in explain(plan)


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT o.x FROM (SELECT order_id, email, NOW() AS x FROM lines) o JOIN customers c ON o.order_id = c.customer_id",
     "not deterministic"),
    ("SELECT o.order_id FROM (SELECT order_id FROM lines l JOIN customers c ON l.order_id = c.customer_id) o "
     "JOIN customers c ON o.order_id = c.customer_id", "joins tables"),
    ("SELECT o.order_id FROM (SELECT order_id FROM lines) JOIN customers c ON order_id = c.customer_id", "alias"),
    ("SELECT o.status FROM (SELECT order_id FROM lines) o JOIN customers c ON o.order_id = c.customer_id",
     "unknown column 'status'"),
])
def test_what_an_input_subquery_may_not_do(sql, fragment):
    with pytest.raises(PlanError, match=fragment):
        plan_for(sql)


# -- the checkpoint ---------------------------------------------------------------------------------------
def test_a_checkpoint_refuses_a_changed_computed_key_or_filter_in_one_line_each(tmp_path):
    location = str(tmp_path / "cp")
    checkpoint.reconcile(plan_for(f"SELECT l.order_id FROM lines l JOIN customers c {ON}"), location)
    checkpoint.reconcile(plan_for(f"SELECT l.order_id FROM lines l JOIN customers c {ON}"), location)  # the same: fine
    with pytest.raises(checkpoint.CheckpointMismatch) as info:
        checkpoint.reconcile(plan_for("SELECT l.order_id FROM lines l JOIN customers c ON UPPER(l.email) = UPPER(c.email)"),
                             location)
    problems = [p for p in str(info.value).splitlines() if p.strip().startswith("- ")]
    assert problems == [
        "    - JOIN_SQL: what the left input goes through before the join (its subquery, a WHERE on it, a computed "
        "equi-key) changed from ($k0 = LOWER(l.email)) to ($k0 = UPPER(l.email)): the stored left rows hold what the "
        "old one computed",
        "    - JOIN_SQL: what the right input goes through before the join (its subquery, a WHERE on it, a computed "
        "equi-key) changed from ($k0 = LOWER(c.email)) to ($k0 = UPPER(c.email)): the stored right rows hold what the "
        "old one computed"]


def test_output_expressions_leave_the_checkpoint_alone_unless_the_upsert_materializer_keeps_the_rows(tmp_path):
    location = str(tmp_path / "cp")
    checkpoint.reconcile(plan_for(f"SELECT l.order_id, UPPER(c.name) AS n FROM lines l JOIN customers c {ON}"), location)
    checkpoint.reconcile(plan_for(f"SELECT l.order_id, LOWER(c.name) AS n FROM lines l JOIN customers c {ON}"), location)
    upsert = {"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "n"}
    location = str(tmp_path / "cp2")
    checkpoint.reconcile(plan_for(f"SELECT l.order_id, UPPER(c.name) AS n FROM lines l JOIN customers c {ON}", **upsert),
                         location)
    with pytest.raises(checkpoint.CheckpointMismatch, match="upsert materializer"):
        checkpoint.reconcile(plan_for(f"SELECT l.order_id, LOWER(c.name) AS n FROM lines l JOIN customers c {ON}",
                                      **upsert), location)


def test_a_computed_output_key_needs_the_upsert_materializer_and_a_kept_primary_key_does_not():
    upsert = {"OUTPUT_MODE": "upsert"}
    kept = plan_for("SELECT l.order_id, UPPER(c.name) AS n FROM lines l JOIN customers c ON l.order_id = c.customer_id",
                    OUTPUT_KEY="order_id", **upsert)
    assert not kept.upsert_materializer
    computed = plan_for("SELECT l.order_id + 0 AS id, c.name FROM lines l JOIN customers c ON l.order_id = c.customer_id",
                        OUTPUT_KEY="id", **upsert)
    assert computed.upsert_materializer


# -- the other kinds of join ------------------------------------------------------------------------
TIMED = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "out",
         "LEFT_SCHEMA_FILE": str(DATA / "orders_timed.avsc")}


def timed_plan(sql: str, **env) -> JoinPlan:
    return catalog.plan_for(load_settings({**TIMED, "JOIN_SQL": sql, **env}))


def test_a_temporal_join_takes_a_subquery_of_its_probe_side_and_expressions():
    plan = timed_plan(
        "SELECT o.order_id, ROUND(o.doubled * r.rate, 2) AS eur FROM (SELECT order_id, currency, amount * 2 AS doubled, "
        "order_time FROM orders WHERE amount > 0) AS o JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
        "ON UPPER(o.currency) = r.currency",
        RIGHT_TOPIC="rates", RIGHT_SCHEMA_FILE=str(DATA / "rates.avsc"), RIGHT_PRIMARY_KEY="currency",
        RIGHT_EVENT_TIME_COLUMN="rate_time")
    assert plan.kind.value == "temporal_event_time" and plan.left.columns[plan.left.time_column] == "order_time"
    assert plan.left.calc["filter_sql"] == "amount > 0" and plan.right.calc is None
    assert fields(plan)["eur"] == "double"  # an inner join of NOT NULL columns: NOT NULL


def test_a_temporal_join_refuses_what_would_change_its_versions():
    env = dict(RIGHT_TOPIC="rates", RIGHT_SCHEMA_FILE=str(DATA / "rates.avsc"), RIGHT_PRIMARY_KEY="currency",
               RIGHT_EVENT_TIME_COLUMN="rate_time")
    with pytest.raises(PlanError, match="versioned table"):
        timed_plan("SELECT o.order_id FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
                   "ON o.currency = LOWER(r.currency)", **env)
    # a WHERE on the versioned table of a LEFT temporal join is applied to the output, not to the versions
    plan = timed_plan("SELECT o.order_id, r.rate FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
                      "ON o.currency = r.currency WHERE r.rate IS NULL OR r.rate < 2", **env)
    assert plan.right.calc is None and plan.output["where_sql"] == "r.rate IS NULL OR r.rate < 2"


SHIPMENTS = dict(RIGHT_TOPIC="shipments", RIGHT_SCHEMA_FILE=str(DATA / "shipments.avsc"), LEFT_CHANGELOG_MODE="append",
                 RIGHT_CHANGELOG_MODE="append", LEFT_EVENT_TIME_COLUMN="order_time", RIGHT_EVENT_TIME_COLUMN="ship_time")


def test_an_interval_join_with_expressions_in_every_place():
    plan = timed_plan(
        "SELECT o.order_id, s.ship_time / 60000 - EXTRACT(EPOCH FROM o.order_time) / 60 AS waited "
        "FROM orders o LEFT JOIN (SELECT ship_id, order_id, UPPER(carrier) AS carrier, ship_time FROM shipments) s "
        "ON o.order_id = s.order_id AND s.ship_time BETWEEN o.order_time - INTERVAL '10' MINUTE "
        "AND o.order_time + INTERVAL '1' HOUR AND s.carrier <> 'NONE' WHERE o.amount > 1", **SHIPMENTS)
    assert plan.kind.value == "interval_event_time" and plan.interval_ms == (-3_600_000, 600_000)
    assert plan.left.calc["filter_sql"] == "o.amount > 1" and plan.right.calc["kept"] == ["ship_id", "order_id", "ship_time"]
    assert plan.condition_sql == "r.\"$c0\" <> 'NONE'" and plan.output is not None


def test_a_computed_stream_key_of_a_lookup_join():
    from tests.support.lookup_plans import plan as lookup_plan

    plan = lookup_plan(JOIN_SQL="SELECT o.order_id, UPPER(p.name) AS name FROM orders o JOIN products FOR SYSTEM_TIME "
                                "AS OF PROCTIME() AS p ON LOWER(o.product) = p.product")
    assert plan.lookup["left_key"] == [3] and plan.left.state_columns[3] == "$k0"
    assert plan.lookup["key_columns"] == ["product"]
    with pytest.raises(PlanError, match="columns of the versioned table products"):
        lookup_plan(JOIN_SQL="SELECT o.order_id FROM orders o JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                             "ON o.product = LOWER(p.product)")


def test_a_window_join_computes_from_its_window_columns_after_the_join():
    tvf = "TABLE(TUMBLE(TABLE {}, DESCRIPTOR({}), INTERVAL '5' MINUTE))"
    plan = timed_plan(
        f"SELECT o.order_id, DATE_FORMAT(o.window_start, 'HH:mm') AS slot, s.ship_id FROM {tvf.format('orders', 'order_time')} o "
        f"LEFT JOIN {tvf.format('shipments', 'ship_time')} s ON o.order_id + 0 = s.order_id "
        "AND o.window_start = s.window_start AND o.window_end = s.window_end "
        "WHERE o.amount > 1 AND HOUR(o.window_end) < 23", **SHIPMENTS)
    assert plan.kind.value == "window" and plan.left.computed[0][0] == "$k0"
    # the window columns exist only in the join: a WHERE on them is applied after it
    assert plan.left.calc["filter_sql"] == "o.amount > 1" and plan.output["where_sql"] == "HOUR(o.window_end) < 23"
    assert fields(plan)["slot"] == ["null", "string"]  # DATE_FORMAT is always nullable, as Flink's


def test_a_semi_join_on_expressions_and_an_input_subquery_in_its_subquery():
    plan = plan_for("SELECT l.order_id FROM lines l WHERE LOWER(l.email) IN "
                    "(SELECT LOWER(c.email) FROM (SELECT email FROM customers WHERE tier = 'gold') c)")
    assert plan.join_type == "SEMI" and plan.right.calc["filter_sql"] == "tier = 'gold'"
    assert [c[3] for c in plan.left.computed] == ["LOWER(l.email)"]
    changes, _ = run(plan, [(1, I, customer(7)), (1, I, customer(8, email="b@x.io", tier="silver")), (0, I, line(1)),
                            (0, I, line(2, email="B@x.io"))])
    assert changes == [(I, (1,))]

"""The join plan: layouts from keys, output schema nullability, when the upsert materializer runs."""
import re

import pytest

from service.avro import load_schema_file
from service.catalog import read_catalog
from service.config import load_settings
from service.explain import explain
from service.plan import JoinPlan, PlanError
from service.planner import build_plan
from tests.support.service_env import VALID


def plan_for(**env):
    settings = load_settings({**VALID, **env})
    return settings, build_plan(settings, read_catalog(settings))


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
    assert ("upsert materializer" in explain(plan)) is needed


def test_processing_time_temporal_join_against_a_versioned_table_is_refused():
    with pytest.raises(PlanError, match="RIGHT_EVENT_TIME_COLUMN"):
        plan_for(JOIN_SQL="SELECT o.order_id, p.price FROM orders o JOIN prices FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                          "ON o.product = p.product", RIGHT_EVENT_TIME_COLUMN="price")



def test_an_event_time_join_drops_the_versioned_tables_update_before():
    from pathlib import Path

    from operators import EVENT, RowKind
    from operators.testing import LocalRunner

    data = Path(__file__).resolve().parents[1] / "data"
    _, plan = plan_for(
        LEFT_SCHEMA_FILE=str(data / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(data / "rates.avsc"),
        RIGHT_TABLE="rates", RIGHT_PRIMARY_KEY="currency", RIGHT_EVENT_TIME_COLUMN="rate_time",
        JOIN_SQL="SELECT o.order_id, r.rate FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
                 "ON o.currency = r.currency")
    runner = LocalRunner(plan.operator)
    runner.process([(1, RowKind.INSERT, ("USD", 1.1, 10)), (1, RowKind.UPDATE_BEFORE, ("USD", 1.1, 10)),
                    (1, RowKind.UPDATE_AFTER, ("USD", 1.2, 50)), (0, RowKind.INSERT, (7, "USD", 5.0, 20))])
    runner.watermark = 100
    runner.fire(EVENT)
    assert runner.output.rows == [(RowKind.INSERT, (7, 1.1))]  # the version of time 10 still holds at 20


@pytest.mark.parametrize("sql, problem", [
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND o.product > 5",
     "'o.product > 5': > compares STRING with INT"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND o.product + 1 > p.price",
     "'o.product + 1': + takes numbers, not STRING"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND p.price LIKE 'x%'",
     "LIKE matches strings, not DOUBLE"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND o.quantity IN (1, 'two')",
     "IN compares INT with CHAR(3)"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND (o.quantity OR p.price > 1)",
     "OR takes conditions (BOOLEAN), not INT"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.price",
     "'o.product = p.price': = compares STRING with DOUBLE"),
])
def test_a_join_that_would_fail_on_every_record_is_refused_at_configuration(sql, problem):
    with pytest.raises(PlanError, match="^JOIN_SQL: .*" + re.escape(problem)):
        plan_for(JOIN_SQL=sql)


def test_conditions_sql_can_evaluate_are_accepted():
    plan_for(JOIN_SQL="SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product "
                      "AND o.quantity * 2 > p.price AND p.currency IS NULL AND NOT (o.product LIKE 'x%')")


def test_an_event_time_column_must_hold_times():
    from tests.support.service_harness import TEMPORAL

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


# -- interval and window joins ------------------------------------------------------------------
from tests.support.service_env import DATA, TIMED  # noqa: E402
INTERVAL_SQL = ("SELECT o.order_id, s.ship_id, s.carrier FROM orders o LEFT JOIN shipments s ON o.order_id = s.order_id "
                "AND s.ship_time BETWEEN o.order_time - INTERVAL '10' MINUTE AND o.order_time + INTERVAL '1' HOUR")
PROCTIME_SQL = ("SELECT o.order_id, s.ship_id FROM orders o JOIN shipments s ON o.order_id = s.order_id "
                "AND s.proctime BETWEEN o.proctime AND o.proctime + INTERVAL '5' SECOND")
WINDOW_SQL = ("SELECT o.order_id, o.window_start, o.window_end, s.ship_id FROM "
              "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(order_time), INTERVAL '10' SECOND)) o FULL JOIN "
              "TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(ship_time), INTERVAL '10' SECOND)) s "
              "ON o.order_id = s.order_id AND o.window_start = s.window_start AND o.window_end = s.window_end")


def timed_plan(sql, **env):
    return plan_for(**{**TIMED, "JOIN_SQL": sql, **env})[1]


def test_an_event_time_interval_join_runs_on_the_watermark_of_both_inputs():
    plan = timed_plan(INTERVAL_SQL)
    assert plan.kind == "interval_event_time" and plan.time_mode == "EventTime" and plan.is_event_time
    assert plan.interval_ms == (-3_600_000, 600_000)
    assert (plan.left.time_column, plan.right.time_column) == (3, 3)
    assert plan.late_sides == ()  # an interval join drops no row as late
    assert plan.operator.time_domain == "event" and plan.operator.output_watermark_delay_ms == 3_600_000
    assert JoinPlan.from_json(plan.to_json()) == plan
    explained = explain(plan)
    assert "kind: interval_event_time" in explained
    assert "r.ship_time - 3600000 ms <= l.order_time <= r.ship_time + 600000 ms" in explained
    assert "a left row until the operator time passes its time + 3600000 ms" in explained
    assert "unmatched left rows are null-padded then" in explained and "state layout" not in explained


def test_a_processing_time_interval_join_has_no_time_columns_and_processing_time_timers():
    plan = timed_plan(PROCTIME_SQL, LEFT_EVENT_TIME_COLUMN="", RIGHT_EVENT_TIME_COLUMN="")
    assert plan.kind == "interval_processing_time" and plan.time_mode == "ProcessingTime"
    assert (plan.left.time_column, plan.right.time_column) == (None, None) and not plan.is_event_time
    assert plan.operator.time_domain == "proc"
    assert "processing time: a row's time is the clock" in explain(plan)


def test_a_window_join_adds_the_window_columns_and_dead_letters_late_rows_of_both_inputs():
    from operators import EVENT
    from operators.testing import LocalRunner

    plan = timed_plan(WINDOW_SQL)
    assert plan.kind == "window" and plan.time_mode == "EventTime" and plan.late_sides == (0, 1)
    assert plan.window == {"kind": "TUMBLE", "size_ms": 10_000, "slide_ms": None, "step_ms": None, "offset_ms": 0}
    assert JoinPlan.from_json(plan.to_json()) == plan
    types = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    assert types["window_start"] == ["null", {"type": "long", "logicalType": "timestamp-millis"}]
    assert "window: TUMBLE (size INTERVAL '10' SECOND) on l.order_time and r.ship_time" in explain(plan)
    assert "dead-letter topic (reason late)" in explain(plan)
    runner = LocalRunner(plan.operator)
    runner.process([(0, 0, (1, "EUR", 5.0, 12_000)), (1, 0, (7, 1, "ups", 15_000))])
    runner.watermark = 19_999
    runner.fire(EVENT)
    assert runner.output.rows == [(0, (1, 10_000, 20_000, 7))]
    runner.process([(1, 0, (8, 1, "dhl", 19_000))])
    assert runner.output.late == [(0, (8, 1, "dhl", 19_000))] and runner.state.keys() == []  # fired windows leave no state


@pytest.mark.parametrize(
    "sql, change, variable, fragment",
    [
        (INTERVAL_SQL, {"LEFT_CHANGELOG_MODE": "retract"}, "LEFT_CHANGELOG_MODE", "must be append-only"),
        (WINDOW_SQL, {"RIGHT_CHANGELOG_MODE": "upsert"}, "RIGHT_CHANGELOG_MODE", "must be append-only"),
        (INTERVAL_SQL, {"LEFT_EVENT_TIME_COLUMN": ""}, "LEFT_EVENT_TIME_COLUMN", "required"),
        (WINDOW_SQL, {"RIGHT_EVENT_TIME_COLUMN": ""}, "RIGHT_EVENT_TIME_COLUMN", "set RIGHT_EVENT_TIME_COLUMN=ship_time"),
        (WINDOW_SQL, {"LEFT_EVENT_TIME_COLUMN": "amount"}, "LEFT_EVENT_TIME_COLUMN", "one time attribute"),
        (WINDOW_SQL, {"LEFT_EVENT_TIME_COLUMN": "nope"}, "LEFT_EVENT_TIME_COLUMN", "no column 'nope'"),
        (PROCTIME_SQL, {}, "LEFT_EVENT_TIME_COLUMN", "processing time"),
        (INTERVAL_SQL, {"STATE_TTL": "1h"}, "STATE_TTL", "does not apply"),
        (WINDOW_SQL, {"RIGHT_STATE_TTL": "1h"}, "RIGHT_STATE_TTL", "does not apply"),
        (WINDOW_SQL, {"MINI_BATCH_SIZE": "10"}, "MINI_BATCH_SIZE", "regular joins only"),
    ],
)
def test_interval_and_window_joins_refuse_what_they_cannot_run(sql, change, variable, fragment):
    with pytest.raises(PlanError) as info:
        timed_plan(sql, **change)
    assert str(info.value).startswith(variable) and fragment in str(info.value)


def test_an_event_time_temporal_join_refuses_another_left_time_column():
    with pytest.raises(PlanError, match="LEFT_EVENT_TIME_COLUMN: is amount"):
        plan_for(LEFT_SCHEMA_FILE=str(DATA / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(DATA / "rates.avsc"),
                 RIGHT_TABLE="rates", RIGHT_PRIMARY_KEY="currency", RIGHT_EVENT_TIME_COLUMN="rate_time",
                 LEFT_EVENT_TIME_COLUMN="amount",
                 JOIN_SQL="SELECT o.order_id, r.rate FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
                          "ON o.currency = r.currency")


def test_check_config_explains_a_window_join_its_window_and_its_state():
    from tests.support.service_env import VALID as BASE
    from tests.support.service_env import changejoin

    proc = changejoin("check-config", env={**BASE, **TIMED, "JOIN_SQL": WINDOW_SQL})
    assert proc.returncode == 0, proc.stderr
    assert "kind: window" in proc.stdout
    assert "window: TUMBLE (size INTERVAL '10' SECOND) on l.order_time and r.ship_time" in proc.stdout
    assert "state per join key and window" in proc.stdout and "reason late" in proc.stdout
    refused = changejoin("check-config", env={**BASE, **TIMED, "JOIN_SQL": WINDOW_SQL, "LEFT_CHANGELOG_MODE": "retract"})
    assert refused.returncode == 2 and "LEFT_CHANGELOG_MODE: is retract" in refused.stderr


# -- Debezium inputs -----------------------------------------------------------------------------
ORDERS_CDC = [{"field": "order_id", "type": "int64", "optional": False},
              {"field": "product", "type": "string", "optional": False},
              {"field": "quantity", "type": "int32", "optional": True},
              {"field": "tags", "type": "array", "optional": True, "items": {"type": "string", "optional": False}}]
DEBEZIUM_AVRO = {"LEFT_FORMAT": "debezium-avro", "LEFT_SCHEMA_FILE": None}


class Registry:
    """Where the catalog finds the reader schemas, as the test gives them (``formats.SchemaSources``):
    schema files, and the subjects' latest schemas; no server."""

    def __init__(self, **subjects):
        self.subjects = subjects

    def schema_file(self, path: str) -> dict:
        return load_schema_file(path)

    def latest(self, subject: str):
        if subject not in self.subjects:
            raise LookupError(f"subject {subject} not found")
        return 1, self.subjects[subject]

    def newest_values(self, topic: str):
        raise AssertionError(f"no topic is read here ({topic})")


def registered_orders(columns=ORDERS_CDC) -> Registry:
    """orders-value: a Debezium envelope as Confluent's AvroConverter registers it."""
    from tests.support.debezium_avro import avro_schema, connect_envelope

    return Registry(**{"orders-value": avro_schema(connect_envelope(columns))})


def avro_plan(registry: Registry, **env):
    settings = load_settings({k: v for k, v in {**VALID, **DEBEZIUM_AVRO, "SCHEMA_REGISTRY_URL": "http://registry:8081",
                                                 **env}.items() if v is not None})
    return build_plan(settings, read_catalog(settings, sources=registry))


def test_a_debezium_avro_topics_row_schema_is_the_registrys():
    registry = registered_orders()
    plan = avro_plan(registry)
    assert plan.left.columns == ("order_id", "product", "quantity", "tags") and plan.left.format == "debezium-avro"
    assert plan.left.nullable == (False, False, True, True) and plan.left.changelog_mode == "upsert"
    assert plan.left.source_types["order_id"] == "int64"
    assert JoinPlan.from_json(plan.to_json()) == plan
    explained = explain(plan)
    assert ("left: topic orders as orders (debezium-avro: upserts of the primary key (c, r, u: its row; d: its "
            "delete); row schema the registry's latest of orders-value, each message read with its own") in explained
    assert "right: topic prices as prices (retract" in explained
    keyless = explain(avro_plan(registry, LEFT_PRIMARY_KEY=None))
    assert "debezium-avro: c, r -> +I; u -> -U before, +U after; d -> -D before" in keyless


def test_a_debezium_avro_column_the_format_cannot_read_is_refused_by_name_when_used():
    registry = registered_orders()
    avro_plan(registry)  # tags unused: fine
    with pytest.raises(PlanError, match="^JOIN_SQL: column tags of the left Debezium topic has type array, which the "
                                        "debezium-avro format does not read"):
        avro_plan(registry, JOIN_SQL="SELECT o.order_id, o.tags FROM orders o JOIN prices p ON o.product = p.product")


def test_a_debezium_avro_topic_without_a_registered_envelope_is_refused():
    with pytest.raises(PlanError, match="^SCHEMA_REGISTRY_URL: cannot get the latest schema of subject orders-value "
                                        r"\(subject orders-value not found\); LEFT_FORMAT=debezium-avro reads"):
        avro_plan(Registry())
    registry = Registry(**{"orders-value": {"type": "record", "name": "Order", "fields": [
        {"name": "order_id", "type": "long"}]}})
    with pytest.raises(PlanError, match="^LEFT_FORMAT: subject orders-value's latest schema is no Debezium envelope"):
        avro_plan(registry)


RATES_CDC = dict(LEFT_SCHEMA_FILE=str(DATA / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(DATA / "rates.avsc"),
                 RIGHT_TABLE="rates", RIGHT_PRIMARY_KEY="currency", LEFT_FORMAT="debezium-json",
                 RIGHT_FORMAT="debezium-json", LEFT_EVENT_TIME_COLUMN="source.ts_ms",
                 RIGHT_EVENT_TIME_COLUMN="source.ts_ms",
                 JOIN_SQL='SELECT o.order_id, o."source.ts_ms" AS ordered_at, r.rate FROM orders o JOIN rates FOR '
                          'SYSTEM_TIME AS OF o."source.ts_ms" AS r ON o.currency = r.currency')


def test_source_ts_ms_is_a_debezium_inputs_time_attribute():
    """``*_EVENT_TIME_COLUMN=source.ts_ms``: the row gets a last column of that name, a timestamp,
    which JOIN_SQL names quoted and which is the side's event time."""
    _, plan = plan_for(**RATES_CDC)
    assert plan.kind == "temporal_event_time"
    for side, width in ((plan.left, 5), (plan.right, 4)):
        assert side.columns[-1] == "source.ts_ms" and len(side.columns) == width
        assert side.time_column == width - 1 and side.families[-1] == "timestamp" and not side.nullable[-1]
    types = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    assert types["ordered_at"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert JoinPlan.from_json(plan.to_json()) == plan
    assert "column source.ts_ms: the envelope's source.ts_ms" in explain(plan)
    assert "event time source.ts_ms" in explain(plan)
    # The keyed versioned table's deletes are dated by their messages; the probe's are not keyed here.
    assert plan.dated_deletes == (1,)
    assert plan_for(**{**RATES_CDC, "RIGHT_PRIMARY_KEY": ""})[1].dated_deletes == ()


@pytest.mark.parametrize("change, message", [
    ({"RIGHT_FORMAT": None, "RIGHT_PRIMARY_KEY": None},
     "(?m)^  RIGHT_EVENT_TIME_COLUMN: source.ts_ms is a Debezium envelope's; RIGHT_FORMAT=rowkind has none"),
    ({"LEFT_SCHEMA_FILE": str(DATA / "shipments.avsc"), "RIGHT_SCHEMA_FILE": str(DATA / "orders_timed.avsc"),
      "RIGHT_TABLE": "shipments", "RIGHT_PRIMARY_KEY": None,
      "JOIN_SQL": 'SELECT o.order_id FROM orders o JOIN shipments s ON o.order_id = s.order_id AND '
                  's."source.ts_ms" BETWEEN o."source.ts_ms" AND o."source.ts_ms" + INTERVAL \'1\' HOUR'},
     "^LEFT_FORMAT: a debezium-json topic is a changelog .*for an insert-only table set LEFT_CHANGELOG_MODE=append"),
])
def test_source_ts_ms_where_it_cannot_be(change, message):
    from service.config import ConfigError

    env = {k: v for k, v in {**VALID, **RATES_CDC, **change}.items() if v is not None}
    with pytest.raises((PlanError, ConfigError), match=message):
        settings = load_settings(env)
        build_plan(settings, read_catalog(settings))


# Insert-only CDC topics (*_CHANGELOG_MODE=append): interval and window joins take them.
CDC_APPEND = {**TIMED, "LEFT_FORMAT": "debezium-json", "RIGHT_FORMAT": "debezium-json",
              "LEFT_EVENT_TIME_COLUMN": "source.ts_ms"}
CDC_INTERVAL_SQL = ('SELECT o.order_id, s.ship_id, s.carrier FROM orders o JOIN shipments s ON o.order_id = s.order_id '
                    'AND s.ship_time BETWEEN o."source.ts_ms" - INTERVAL \'10\' MINUTE AND o."source.ts_ms" '
                    '+ INTERVAL \'1\' HOUR')
CDC_WINDOW_SQL = ("SELECT o.order_id, o.window_start, s.ship_id FROM "
                  "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(\"source.ts_ms\"), INTERVAL '10' SECOND)) o JOIN "
                  "TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(ship_time), INTERVAL '10' SECOND)) s "
                  "ON o.order_id = s.order_id AND o.window_start = s.window_start AND o.window_end = s.window_end")


@pytest.mark.parametrize("sql, kind", [(CDC_INTERVAL_SQL, "interval_event_time"), (CDC_WINDOW_SQL, "window")])
@pytest.mark.parametrize("primary_keys", [True, False])
def test_insert_only_debezium_topics_join_by_interval_and_window(sql, kind, primary_keys):
    keys = {} if primary_keys else {"LEFT_PRIMARY_KEY": "", "RIGHT_PRIMARY_KEY": ""}
    _, plan = plan_for(**{**CDC_APPEND, "JOIN_SQL": sql, **keys})
    assert plan.kind == kind
    # append with or without a primary key, as a rowkind input: inserts, never upserts nor normalized
    assert [(s.format, s.changelog_mode, s.normalized) for s in plan.sides] == [("debezium-json", "append", False)] * 2
    assert plan.left.columns[plan.left.time_column] == "source.ts_ms"
    assert plan.right.columns[plan.right.time_column] == "ship_time"
    assert JoinPlan.from_json(plan.to_json()) == plan
    explained = explain(plan)
    assert explained.count("debezium-json: inserts only (append): c, r -> +I; u, d: dead letters "
                           "(debezium_change_on_append_topic)") == 2


@pytest.mark.parametrize("sql", [CDC_INTERVAL_SQL, CDC_WINDOW_SQL])
def test_a_debezium_changelog_is_still_refused_by_interval_and_window_joins(sql):
    with pytest.raises(PlanError) as info:
        plan_for(**{k: v for k, v in CDC_APPEND.items() if k != "RIGHT_CHANGELOG_MODE"}, JOIN_SQL=sql)
    message = str(info.value)
    assert message.startswith("RIGHT_FORMAT: a debezium-json topic is a changelog")
    assert "for an insert-only table set RIGHT_CHANGELOG_MODE=append" in message


def test_an_insert_only_debezium_topic_in_a_regular_join_is_read_as_inserts():
    env = {"LEFT_FORMAT": "debezium-json", "LEFT_CHANGELOG_MODE": "append"}
    _, plan = plan_for(**env)
    assert (plan.left.changelog_mode, plan.left.normalized, plan.left.primary_key) == ("append", False, (0,))
    _, changelog = plan_for(LEFT_FORMAT="debezium-json")
    assert changelog.left.changelog_mode == "upsert" and changelog.left.normalized


@pytest.mark.parametrize("fmt", ["debezium-json", "debezium-avro"])
def test_a_keyed_debezium_topic_in_retract_mode_joins_directly_as_a_rowkind_retract_topic(fmt):
    rowkind = plan_for()[1]
    both = {"LEFT_FORMAT": "debezium-json", "RIGHT_FORMAT": "debezium-json"}
    registry = Registry()
    if fmt == "debezium-avro":
        both = {"LEFT_FORMAT": fmt, "LEFT_SCHEMA_FILE": None, "RIGHT_FORMAT": fmt, "RIGHT_SCHEMA_FILE": None,
                "SCHEMA_REGISTRY_URL": "http://registry:8081"}
        registry = _registered_envelopes()
    env = {k: v for k, v in both.items() if v is not None}
    nulls = [k for k, v in both.items() if v is None]

    def plan(**more):
        settings = load_settings({k: v for k, v in {**VALID, **env, **more}.items() if k not in nulls})
        return build_plan(settings, read_catalog(settings, sources=registry))

    retract = plan(LEFT_CHANGELOG_MODE="retract", RIGHT_CHANGELOG_MODE="retract")
    # the before images retract: each side as the rowkind retract side with the same primary key
    for s, r in zip(retract.sides, rowkind.sides):
        assert (s.format, s.changelog_mode, s.normalized, s.direct_upsert) == (fmt, "retract", False, False)
        assert (s.primary_key, s.join_key, s.layout) == (r.primary_key, r.join_key, r.layout)
    assert retract.stages() == rowkind.stages() and not any(st.startswith("normalize") for st in retract.stages())
    assert JoinPlan.from_json(retract.to_json()) == retract
    explained = explain(retract)
    assert explained.count(f"{fmt}: c, r -> +I; u -> -U before, +U after; d -> -D before; tombstones and t skipped; "
                           "the before images retract (REPLICA IDENTITY FULL required); joined directly, no "
                           "normalize stage") == 2
    # unset, or upsert: upserts of the key through the normalize stage, as before
    default, upsert = plan(), plan(LEFT_CHANGELOG_MODE="upsert", RIGHT_CHANGELOG_MODE="upsert")
    assert default == upsert
    assert [(s.changelog_mode, s.normalized) for s in default.sides] == [("upsert", True)] * 2
    assert sum(st.startswith("normalize") for st in default.stages()) == 2
    # one side in each mode
    mixed = plan(RIGHT_CHANGELOG_MODE="retract")
    assert [(s.changelog_mode, s.normalized) for s in mixed.sides] == [("upsert", True), ("retract", False)]
    # without a primary key, retract is the default: declaring it changes nothing
    keyless = {"LEFT_PRIMARY_KEY": "", "RIGHT_PRIMARY_KEY": ""}
    assert plan(**keyless, LEFT_CHANGELOG_MODE="retract", RIGHT_CHANGELOG_MODE="retract") == plan(**keyless)


def _registered_envelopes() -> Registry:
    from tests.support.debezium_avro import avro_schema, connect_envelope

    registry = Registry()
    for topic, fields in (("orders", [("order_id", "int64", False), ("product", "string", False),
                                      ("quantity", "int32", False)]),
                          ("prices", [("product", "string", False), ("price", "float64", False),
                                      ("currency", "string", True)])):
        columns = [{"field": f, "type": t, "optional": o} for f, t, o in fields]
        registry.subjects[f"{topic}-value"] = avro_schema(connect_envelope(columns))
    return registry


def test_check_config_shows_how_an_insert_only_debezium_topic_is_read():
    from tests.support.service_env import VALID as BASE
    from tests.support.service_env import changejoin

    proc = changejoin("check-config", env={**BASE, **CDC_APPEND, "JOIN_SQL": CDC_INTERVAL_SQL})
    assert proc.returncode == 0, proc.stderr
    assert "left: topic orders as orders (debezium-json: inserts only (append)" in proc.stdout
    assert "u, d: dead letters (debezium_change_on_append_topic)" in proc.stdout


def test_the_planner_reads_nothing_but_the_catalog_it_is_given(monkeypatch):
    """``build_plan(settings, catalog)`` plans from the catalog alone: with files and sockets
    refused, it builds the plan the driver builds (``catalog.plan_for``: the catalog read, then planned)."""
    import builtins
    import socket

    from service.catalog import plan_for as driver_plan

    settings = load_settings({**VALID, "LEFT_FORMAT": "debezium-json"})
    catalog = read_catalog(settings)  # the schema files, read here

    def refused(*args, **kwargs):
        raise AssertionError(f"the planner reads {args!r}")

    with monkeypatch.context() as m:
        m.setattr(builtins, "open", refused)
        m.setattr(socket, "socket", refused)
        m.setattr(socket, "create_connection", refused)
        plan = build_plan(settings, catalog)
    assert plan == driver_plan(settings)
    assert plan.left.format == "debezium-json" and plan.left.changelog_mode == "upsert"


def test_every_kind_of_join_has_its_planning_steps():
    """The planner's per-kind steps are one table (``planner.KIND_STEPS``): every kind is in it."""
    from service.plan import TIME_BOUNDED_KINDS, PlanKind
    from service.planner import KIND_STEPS

    assert set(KIND_STEPS) == set(PlanKind)
    assert {k for k, steps in KIND_STEPS.items() if steps.lookup} == {PlanKind.LOOKUP}
    assert {k for k, steps in KIND_STEPS.items() if not steps.checks} == {PlanKind.REGULAR}
    assert {k for k, steps in KIND_STEPS.items() if len(steps.checks) == 2} == set(TIME_BOUNDED_KINDS)

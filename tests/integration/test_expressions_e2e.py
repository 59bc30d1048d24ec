"""Expressions end to end on a real broker and a real Spark query (issue 39): each place a query
holds them (the select list, ON's extra condition and a computed equi-key, WHERE pushed below an
outer join and WHERE applied to its output, an input subquery's filter and projection), the
output's Avro types, and dead letters where Flink's job would fail; then an upsert input that the
query filters, which goes through the normalize stage first."""
import datetime as dt
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support.kafka_fixture import produce
from tests.support.service_harness import ORDERS, PRICES, JoinHarness, avro, order, price

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
LINES = json.loads((DATA / "lines.avsc").read_text())
T0 = dt.datetime(2024, 1, 5, 10, 20, 30, 123000, tzinfo=dt.timezone.utc)

ENRICHMENT = (
    "SELECT l.order_id, l.quantity * l.unit_price AS total, UPPER(c.name) AS customer, "
    "COALESCE(c.tier, 'none') AS tier, l.code_number, 100 / l.quantity AS per_item "
    "FROM (SELECT order_id, quantity, unit_price, email, CAST(code AS INT) AS code_number FROM lines "
    "WHERE status <> 'CANCELLED') AS l "
    "LEFT JOIN customers c ON LOWER(l.email) = LOWER(c.email) AND CHAR_LENGTH(c.name) > 0 "
    "WHERE (c.tier IS NULL OR c.tier <> 'blocked') AND l.quantity < 1000"
)


def line(order_id, quantity, unit_price, status, email, code):
    return {"order_id": order_id, "product": "p", "quantity": quantity, "unit_price": Decimal(unit_price),
            "status": status, "email": email, "order_time": T0, "code": code}


def customer(customer_id, email, name, tier, discount=0.1):
    return {"customer_id": customer_id, "email": email, "name": name, "tier": tier, "discount": discount,
            "since": dt.date(2020, 2, 29)}


def test_expressions_in_every_place_of_a_left_join_with_an_input_subquery(kafka_bootstrap, spark, tmp_path, new_topic):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=ENRICHMENT, LEFT_TABLE="lines",
                    RIGHT_TABLE="customers", LEFT_SCHEMA_FILE=str(DATA / "lines.avsc"),
                    RIGHT_SCHEMA_FILE=str(DATA / "customers.avsc"), LEFT_PRIMARY_KEY="order_id",
                    RIGHT_PRIMARY_KEY="customer_id")
    h.send_right([
        ("+I", customer(1, "Ann@X.io", "Ann", "gold")),
        ("+I", customer(2, "bob@x.io", "Bob", "blocked")),
        ("+I", customer(3, "cy@x.io", "", None)),  # ON's CHAR_LENGTH(c.name) > 0 fails: no match
    ])
    h.send_left([
        ("+I", line(10, 2, "12.50", "NEW", "ann@x.io", "7")),  # matches Ann through LOWER(email)
        ("+I", line(11, 3, "1.00", "CANCELLED", "ann@x.io", "1")),  # the subquery's WHERE drops it
        ("+I", line(12, 1, "2.00", "NEW", "bob@x.io", "2")),  # matches Bob, blocked: WHERE drops the row
        ("+I", line(13, 4, "3.00", "NEW", "cy@x.io", "3")),  # padded: its tier is NULL, WHERE keeps it
        ("+I", line(14, 0, "5.00", "NEW", "nobody@x.io", "4")),  # 100 / 0: the output change is a dead letter
        ("+I", line(15, 1, "1.00", "NEW", "ann@x.io", "x5")),  # CAST('x5' AS INT) in the subquery: a dead letter
        ("+I", line(16, 5000, "1.00", "NEW", "ann@x.io", "6")),  # WHERE l.quantity < 1000, pushed below the join
        ("-U", line(10, 2, "12.50", "NEW", "ann@x.io", "7")),
        ("+U", line(10, 3, "12.50", "NEW", "ann@x.io", "7")),
    ])
    h.run()
    assert h.retract_table() == Counter({
        (10, Decimal("37.50"), "ANN", "gold", 7, 33): 1,
        (13, Decimal("12.00"), None, "none", 3, 25): 1,
    })
    types = {f["name"]: f["type"] for f in h.service.plan.output_schema["fields"]}
    assert types["total"] == {"type": "bytes", "logicalType": "decimal", "precision": 21, "scale": 2}
    assert types["tier"] == "string" and types["customer"] == ["null", "string"] and types["per_item"] == "int"
    letters = sorted((dict(r.headers)["reason"], dict(r.headers)["reason.detail"]) for r in h.dead_letters())
    assert letters == [(b"expression_error", b"100 / l.quantity: / by zero"),
                       (b"expression_error", b"CAST(code AS INT): 'x5' is not a number")]


UPSERT_FILTERED = ("SELECT o.order_id, ROUND(o.quantity * p.price, 1) AS cost FROM orders o "
                   "JOIN prices p ON UPPER(o.product) = UPPER(p.product) WHERE o.quantity > 1")


def test_an_upsert_input_the_query_filters_is_normalized_then_filtered(kafka_bootstrap, spark, tmp_path, new_topic):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=UPSERT_FILTERED, LEFT_CHANGELOG_MODE="upsert")
    produce(kafka_bootstrap, h.prices, [(None, avro(PRICES, price("Book", 12.5)), [("rowkind", b"+I")]),
                                        (None, avro(PRICES, price("pen", 1.25)), [("rowkind", b"+I")])])
    produce(kafka_bootstrap, h.orders, [
        (b"1", avro(ORDERS, order(1, "book", 2))),
        (b"2", avro(ORDERS, order(2, "PEN", 10))),
        (b"2", avro(ORDERS, order(2, "PEN", 1))),  # leaves the filter: its earlier row is retracted
        (b"3", avro(ORDERS, order(3, "pen", 4))),
        (b"3", None),  # deleted
    ])
    h.run()
    assert "normalize left" in " ".join(h.service.plan.stages())
    assert h.retract_table() == Counter({(1, 25.0): 1})

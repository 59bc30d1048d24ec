"""The lookup join's semantics on the in-memory query driver (tests/support/query_driver.py), its
table in memory (``FakeTable``: the service's LookupClient with its key checks, value checks and
cache, on a connection that answers from the test's rows): an upsert input in both output modes
while the table changes, and a composite non-unique key with a condition and a poison key.
Moved from tests/integration/test_lookup_join.py, which keeps the lookup join end to end on
Kafka, Spark and PostgreSQL."""
from __future__ import annotations

from decimal import Decimal

import pytest

from tests.support.query_driver import FakeTable, QueryDriver
from tests.support.service_harness import ORDERS, avro, order

LEFT_JOIN = ("SELECT o.order_id, o.product, o.quantity, p.name, p.price FROM orders AS o "
             "LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p ON o.product = p.product")
DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}


def column(name, pg_type, cast, avro_type, nullable=True) -> dict:
    return {"name": name, "pg_type": pg_type, "cast": cast, "avro_type": avro_type, "nullable": nullable}


#: products(product text primary key, name text, price numeric(10,2), tier text), as the catalog says.
PRODUCTS = {"table": "test.products", "primary_key": ["product"], "unique_keys": [["product"]], "columns": [
    column("product", "text", "text", "string", nullable=False), column("name", "text", "text", "string"),
    column("price", "numeric(10,2)", "numeric", DECIMAL), column("tier", "text", "text", "string")]}
#: inventory(product text, size smallint, label text): no key.
INVENTORY = {"table": "test.inventory", "primary_key": None, "unique_keys": [], "columns": [
    column("product", "text", "text", "string"), column("size", "smallint", "int2", "int"),
    column("label", "text", "text", "string")]}


def product(code, name, price, tier) -> dict:
    return {"product": code, "name": name, "price": price, "tier": tier}


def lookup_driver(table: FakeTable, **env) -> QueryDriver:
    return QueryDriver(table=table, **{
        "RIGHT_LOOKUP_URL": "postgresql://tests@in-memory/tests", "RIGHT_LOOKUP_TABLE": table.info.table,
        "RIGHT_TABLE": "products", "JOIN_SQL": LEFT_JOIN, "DELIVERY": "at-least-once",
        "RIGHT_TOPIC": None, "RIGHT_SCHEMA_FILE": None, "RIGHT_PRIMARY_KEY": None, **env})


def rows(changes):
    return [(c.kind, c.row) for c in changes]


@pytest.mark.parametrize("output_mode", ["retract", "upsert"])
def test_upsert_input_in_both_output_modes(output_mode):
    table = FakeTable(PRODUCTS, [product("p1", "apple", Decimal("1.50"), "gold"),
                                 product("p2", "pear", Decimal("2.00"), "std")])
    env = {"LEFT_CHANGELOG_MODE": "upsert", "OUTPUT_MODE": output_mode}
    if output_mode == "upsert":
        env["OUTPUT_KEY"] = "order_id"
    h = lookup_driver(table, **env)
    upserts = lambda *orders: h.pipe(0, [  # noqa: E731 - keyed by order_id
        (str(o["order_id"]).encode(), avro(ORDERS, o) if o.get("product") else None) for o in orders])
    upserts(order(1, "p1", 3), order(2, "p2", 1), order(3, "p2", 1))
    h.run()
    table.update({"product": "p1"}, name="green apple")
    upserts(order(1, "p1", 3),  # identical: nothing changes, the old name stays
            order(2, "p1", 5),  # order 2 moves to p1: joined with the new name
            {"order_id": 3})  # a tombstone
    h.batch()
    assert table.queries == 2
    if output_mode == "retract":
        assert h.retract_table() == {(1, "p1", 3, "apple", Decimal("1.50")): 1,
                                     (2, "p1", 5, "green apple", Decimal("1.50")): 1}
    else:
        assert sorted(h.upsert_table().values()) == [(1, "p1", 3, "apple", Decimal("1.50")),
                                                     (2, "p1", 5, "green apple", Decimal("1.50"))]


def test_inner_composite_non_unique_key_with_a_condition_and_poison_keys():
    """INNER drops misses; a composite lookup key (product, size) finds several rows; the extra
    condition filters them; a quantity a smallint column cannot hold is a dead letter."""
    table = FakeTable(INVENTORY, [{"product": p, "size": s, "label": label} for p, s, label in (
        ("p1", 3, "a"), ("p1", 3, "b"), ("p1", 3, "hidden"), ("p1", 4, "c"), ("p2", 1, "d"))])
    h = lookup_driver(table, RIGHT_TABLE="inventory", LEFT_CHANGELOG_MODE="append", LEFT_PRIMARY_KEY=None,
                      JOIN_SQL="SELECT o.order_id, i.label FROM orders AS o JOIN inventory FOR SYSTEM_TIME AS OF "
                               "PROCTIME() AS i ON o.product = i.product AND o.quantity = i.size AND i.label <> 'hidden'")
    h.send_left([(None, order(1, "p1", 3)), (None, order(2, "p1", 4)), (None, order(3, "p9", 3)),
                 (None, order(4, "p1", 70_000)), (None, order(5, "p2", 2))])
    h.run()
    assert sorted(rows(h.changelog())) == [("+I", (1, "a")), ("+I", (1, "b")), ("+I", (2, "c"))]
    letters = h.dead_letters()
    assert [dict(letter.headers)["reason"] for letter in letters] == [b"lookup_key_invalid"]
    assert b"70000" in dict(letters[0].headers)["reason.detail"] and dict(letters[0].headers)["source.offset"] == b"3"

"""Restarts on an existing checkpoint, on the in-memory query driver (tests/support/query_driver.py,
whose runs reconcile the plan with the checkpoint's file as the service's start does): an evolved
input schema is accepted and its old rows keep joining and retracting, through the upsert
materializer too; another join is refused before it touches the state. Moved from
tests/integration/test_service_checkpoint_compat.py, which keeps what Spark's state store does
with a checkpoint (RocksDB's changelog checkpointing switched, the first bucket layout's)."""
import json
from collections import Counter

import pytest

from tests.support.query_driver import QueryDriver
from service.checkpoint import CheckpointMismatch
from tests.support.service_harness import ORDERS, drop_replays, order, price, retract_table, upsert_table

SQL = "SELECT o.*, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"


def test_an_added_optional_column_upgrades_the_stored_rows(tmp_path):
    h = QueryDriver(tmp_path, JOIN_SQL=SQL)
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3))])
    h.run()
    first = h.changelog()
    assert Counter(kind for kind, *_ in first) == Counter({"+I": 2})

    evolved = {**ORDERS, "fields": ORDERS["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}]}
    path = tmp_path / "orders-v2.avsc"
    path.write_text(json.dumps(evolved))
    h.env["LEFT_SCHEMA_FILE"] = str(path)
    h.send_prices([("+I", price("book", 12.5))])
    h.send(0, evolved, [("-D", {**order(2, "pen", 3), "note": None}), ("+I", {**order(3, "ink", 1), "note": "gift"})])
    h.run()
    assert len(h.plan.state_generations) == 2
    second = h.changelog(start=len(first))  # written in the evolved output schema

    # The first run's rows in the evolved output schema (note takes its default), as a consumer reads them.
    upgraded = [c._replace(row=c.row[:3] + (None,) + c.row[3:]) for c in first]
    assert retract_table(upgraded + second) == Counter({(1, "book", 2, None, 12.5): 1, (3, "ink", 1, "gift", None): 1})


def test_upsert_output_keyed_by_order_follows_an_added_column_through_the_materializer(tmp_path):
    """OUTPUT_KEY order_id is not determined by the join key (product): the upsert materializer
    keeps output rows per order. After a column is added to the orders, those stored rows must
    take its default, or the join's retractions of them (in the new output) would never match and
    a deleted order would come back as its stale row."""
    h = QueryDriver(tmp_path, JOIN_SQL=SQL, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id")
    h.send_prices([("+I", price("book", 12.5))])
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3)), ("+I", order(3, "book", 1))])
    h.run()
    assert h.plan.upsert_materializer
    first = h.changelog()

    evolved = {**ORDERS, "fields": ORDERS["fields"] + [{"name": "placed", "type": "string", "default": "unknown"}]}
    path = tmp_path / "orders-v2.avsc"
    path.write_text(json.dumps(evolved))
    h.env["LEFT_SCHEMA_FILE"] = str(path)
    h.send_prices([("+I", price("pen", 1.5)), ("-U", price("book", 12.5)), ("+U", price("book", 13.0))])
    h.send(0, evolved, [
        ("-U", {**order(1, "book", 2), "placed": "unknown"}), ("+U", {**order(1, "pen", 2), "placed": "web"}),
        ("-D", {**order(2, "pen", 3), "placed": "unknown"}),
        ("-D", {**order(3, "book", 1), "placed": "unknown"}),
    ])
    h.run()
    second = h.changelog(start=len(first))  # written in the evolved output schema
    table = upsert_table(drop_replays(first + second)[0])
    assert sorted(table.values()) == [(1, "pen", 2, "web", 1.5)]


def test_another_join_on_the_same_checkpoint_is_refused(tmp_path):
    h = QueryDriver(tmp_path, JOIN_SQL=SQL)
    h.send_orders([("+I", order(1, "book", 2))])
    h.run()
    with pytest.raises(CheckpointMismatch, match="the join type changed from 'LEFT' to 'INNER'"):
        h.run(JOIN_SQL=SQL.replace("LEFT JOIN", "JOIN"))
    h.send_prices([("+I", price("book", 12.5))])
    h.run()  # the previous configuration still runs on its state
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1})

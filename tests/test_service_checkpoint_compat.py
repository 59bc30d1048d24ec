"""Restarts on an existing checkpoint, end to end: an evolved input schema is accepted and its
old rows keep joining and retracting; another join is refused before it touches the state."""
import json
from collections import Counter

import pytest

from service.checkpoint import CheckpointMismatch
from service_harness import ORDERS, JoinHarness, order, price, retract_table

pytestmark = pytest.mark.integration

SQL = "SELECT o.*, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"


def test_an_added_optional_column_upgrades_the_stored_rows(kafka_bootstrap, spark, tmp_path, new_topic):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=SQL)
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3))])
    h.run()
    first = h.changelog()
    assert Counter(kind for kind, *_ in first) == Counter({"+I": 2})

    evolved = {**ORDERS, "fields": ORDERS["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}]}
    path = tmp_path / "orders-v2.avsc"
    path.write_text(json.dumps(evolved))
    h.env["LEFT_SCHEMA_FILE"] = str(path)
    h.send_prices([("+I", price("book", 12.5))])
    h.send(h.orders, evolved, [("-D", {**order(2, "pen", 3), "note": None}), ("+I", {**order(3, "ink", 1), "note": "gift"})])
    h.run()
    second = h.changelog(start=len(first))  # written in the evolved output schema

    # The first run's rows in the evolved output schema (note takes its default), as a consumer reads them.
    upgraded = [c._replace(row=c.row[:3] + (None,) + c.row[3:]) for c in first]
    assert retract_table(upgraded + second) == Counter({(1, "book", 2, None, 12.5): 1, (3, "ink", 1, "gift", None): 1})


def test_another_join_on_the_same_checkpoint_is_refused(kafka_bootstrap, spark, tmp_path, new_topic):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=SQL)
    h.send_orders([("+I", order(1, "book", 2))])
    h.run()
    with pytest.raises(CheckpointMismatch, match="the join type changed from 'LEFT' to 'INNER'"):
        h.run(JOIN_SQL=SQL.replace("LEFT JOIN", "JOIN"))
    h.send_prices([("+I", price("book", 12.5))])
    h.run()  # the previous configuration still runs on its state
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1})

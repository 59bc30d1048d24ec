"""A checkpoint's join state serves only the join it was made for: incompatible changes are
refused with what changed and what to do; compatible schema evolution upgrades stored rows."""
import datetime as dt
import json
import pickle

import pytest

from operators.testing import LocalRunner
from service import checkpoint
from service.checkpoint import CheckpointMismatch, reconcile
from service.sparkstate import KeyCodec, SparkKeyState
from tests.support.checkpoint_plans import LEFT, NOTE, ORDERS, UPSERT, plan, with_fields
from tests.support.service_env import SCHEMAS, VALID


@pytest.fixture
def location(tmp_path, request):
    """A checkpoint that already holds the state of the LEFT join of orders and prices."""
    where = str(tmp_path / "checkpoint")
    reconcile(plan(tmp_path), where)
    return where


@pytest.mark.parametrize("change, names", [
    ({"JOIN_SQL": LEFT.replace("LEFT JOIN", "JOIN")}, "JOIN_SQL: the join type changed from 'LEFT' to 'INNER'"),
    ({"JOIN_SQL": LEFT + " AND p.price > 2"}, "JOIN_SQL: the join condition changed"),
    ({"JOIN_SQL": LEFT.replace("o.product = p.product", "o.product IS NOT DISTINCT FROM p.product")},
     "JOIN_SQL: = vs IS NOT DISTINCT FROM"),
    ({"LEFT_PRIMARY_KEY": "order_id,product"}, "LEFT_PRIMARY_KEY: (order_id) -> (order_id, product)"),
    ({"RIGHT_PRIMARY_KEY": ""}, "RIGHT_PRIMARY_KEY: (product) -> none"),
    ({"LEFT_CHANGELOG_MODE": "upsert"}, "LEFT_CHANGELOG_MODE: retract -> upsert"),
    ({"LEFT_TOPIC": "orders_v2", "LEFT_TABLE": "orders"}, "LEFT_TOPIC: 'orders' -> 'orders_v2'"),
    ({"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id"}, "OUTPUT_MODE / OUTPUT_KEY / JOIN_SQL: the upsert materializer"),
])
def test_an_incompatible_change_is_refused_naming_it_and_what_to_do(tmp_path, location, change, names):
    changed = plan(tmp_path, **change)
    with pytest.raises(CheckpointMismatch) as refused:
        reconcile(changed, location)
    message = str(refused.value)
    assert message.startswith(f"CHECKPOINT_LOCATION={location}: its join state was made for another join")
    assert names in message and "new CHECKPOINT_LOCATION" in message
    assert "INCOMPATIBLE" in checkpoint.describe(changed, location)
    reconcile(plan(tmp_path), location)  # the refused start changed nothing


@pytest.mark.parametrize("orders, names", [
    (with_fields({"name": "note", "type": "string"}), "column 'note' was added without a default"),
    ({**ORDERS, "fields": [{**f, "type": "string"} if f["name"] == "quantity" else f for f in ORDERS["fields"]]},
     "column 'quantity' changed type from \"int\" to \"string\""),
    ({**ORDERS, "fields": [{**f, "type": "int"} if f["name"] == "order_id" else f for f in ORDERS["fields"]]},
     "column 'order_id' changed type from \"long\" to \"int\""),
])
def test_an_incompatible_schema_change_is_refused(tmp_path, location, orders, names):
    with pytest.raises(CheckpointMismatch, match="LEFT_SCHEMA_FILE or the registry's orders-value: " + names):
        reconcile(plan(tmp_path, orders), location)


@pytest.mark.parametrize("change", [
    {"STATE_TTL": "1h"}, {"MINI_BATCH_SIZE": "100"}, {"TRIGGER_INTERVAL": "5s"},
    {"JOIN_SQL": LEFT.replace("SELECT o.order_id, o.product, p.price", "SELECT o.*, p.price")},
])
def test_changes_that_leave_the_state_valid_are_accepted_as_they_are(tmp_path, location, change):
    upgraded = reconcile(plan(tmp_path, **change), location)
    assert upgraded.state_generation == 0 and checkpoint.describe(upgraded, location).endswith(": compatible")


def test_compatible_schema_evolution_is_a_new_generation_whose_rows_are_upgraded(tmp_path, location):
    evolved = with_fields(
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
        drop=("quantity",))  # quantity is not used by the join
    widened = {**evolved, "fields": [{**f, "type": ["null", "long"]} if f["name"] == "order_id" else f
                                     for f in evolved["fields"]]}
    new = reconcile(plan(tmp_path, widened), location)
    assert new.state_generation == 1
    assert new.state_generations[0][0] == ("order_id", "product", "quantity")
    assert new.row_upgrade(0, 0)((7, "ink", 2)) == (7, "ink", None, dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc))
    assert new.row_upgrade(0, 1)(("ink", 2.5, "EUR")) == ("ink", 2.5, "EUR")
    assert reconcile(plan(tmp_path, widened), location).state_generation == 1  # no change, no new generation
    assert "input schemas evolved" in checkpoint.describe(new, location)


def test_a_checkpoint_of_an_earlier_changejoin_is_taken_as_this_join(tmp_path):
    where = tmp_path / "old"
    (where / "commits").mkdir(parents=True)
    (where / "commits" / "0").write_text("v1")
    assert "earlier changejoin" in checkpoint.describe(plan(tmp_path), str(where))
    assert reconcile(plan(tmp_path), str(where)).state_generation == 0
    assert (where / checkpoint.FILE_NAME).exists()


class _Value:
    def __init__(self, stored=None):
        self.stored = stored

    def get(self):
        return None if self.stored is None else (self.stored,)

    def update(self, row):
        self.stored = row[0]


def test_stored_values_carry_their_generation_and_older_ones_are_upgraded_when_read():
    upgraded = []

    def upgrade(value, generation):
        upgraded.append(generation)
        return [row + ("new",) for row in value]

    legacy = _Value(pickle.dumps([(1, "ink")], protocol=5))  # written by generation 0: a plain pickle
    state = SparkKeyState(legacy, None, None, KeyCodec(2, upgrade))
    assert state.get() == [(1, "ink", "new")] and upgraded == [0]
    state.put([(1, "ink", "new")])
    assert legacy.stored[:3] == b"\x01\x00\x02"
    assert state.get() == [(1, "ink", "new")] and upgraded == [0]  # current generation: as stored
    assert SparkKeyState(_Value(), None, None).get() is None
    plain = _Value()
    SparkKeyState(plain, None, None).put((1,))
    assert plain.stored == pickle.dumps((1,), protocol=5)  # generation 0 writes what it always wrote


def test_the_operators_state_upgrade_keeps_a_multiset_side_retractable(tmp_path, location):
    """Through the processor's path: JoinPlan.row_upgrade + operator.map_rows."""
    old = plan(tmp_path, JOIN_SQL=LEFT, LEFT_PRIMARY_KEY="")
    before = LocalRunner(old.operator)
    before.process([(0, 0, (7, "ink", 2))])
    where = str(tmp_path / "multiset")
    reconcile(old, where)
    new = reconcile(plan(tmp_path, with_fields({"name": "note", "type": ["null", "string"], "default": None}),
                         LEFT_PRIMARY_KEY=""), where)
    after = LocalRunner(new.operator, state=before.state)  # the same state, read by the new plan's join
    stored = after.state.for_key(("ink",))
    stored.put(new.operator.map_rows(stored.get(), new.row_upgrade(0, 0), new.row_upgrade(0, 1)))
    after.process([(0, 3, (7, "ink", 2, None))])
    assert [kind for kind, _ in before.output.rows + after.output.rows] == [0, 3] and after.state.keys() == []


# -- the upsert materializer's stored output rows ------------------------------------------------

PLACED = {"name": "placed", "type": "string", "default": "unknown"}


@pytest.fixture
def upsert_location(tmp_path):
    where = str(tmp_path / "upsert-checkpoint")
    first = reconcile(plan(tmp_path, JOIN_SQL="SELECT o.*, p.price FROM orders o LEFT JOIN prices p "
                                             "ON o.product = p.product", **UPSERT), where)
    assert first.upsert_materializer and first.output_generation == 0
    return where


def test_an_output_that_gains_an_added_input_column_upgrades_the_materializers_rows(tmp_path, upsert_location):
    sql = "SELECT o.*, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"
    new = reconcile(plan(tmp_path, with_fields(NOTE, PLACED), JOIN_SQL=sql, **UPSERT), upsert_location)
    assert new.output_generation == 1
    upgrade = new.output_upgrade(0)
    # rows of (order_id, product, quantity, price): the left side is never padded in a LEFT join
    assert upgrade((7, "ink", 2, None)) == (7, "ink", 2, None, "unknown", None)
    assert [n for n in new.output_names] == ["order_id", "product", "quantity", "note", "placed", "price"]
    assert upgrade((7, "ink", 2, 2.5)) == (7, "ink", 2, None, "unknown", 2.5)
    assert "compatible" in checkpoint.describe(new, upsert_location)
    # the processor reads a row stored in generation 0 as today's output row
    from service.processor import UpsertProcessor
    from tests.support.spark_fakes import FakeHandle

    handle = FakeHandle()
    handle.states["rows"] = _stored_rows([(7, "ink", 2, 2.5)])
    processor = UpsertProcessor(new.to_json())
    processor.init(handle)
    assert processor.state.get() == ((7, "ink", 2, None, "unknown", 2.5),)


def _stored_rows(rows):
    from tests.support.spark_fakes import FakeValueState

    state = FakeValueState()
    state.value = (pickle.dumps(tuple(rows), protocol=5),)  # written in generation 0: no prefix
    return state


def test_a_padded_sides_added_column_is_null_in_padded_rows_and_its_default_in_real_ones(tmp_path):
    where = str(tmp_path / "cp")
    prices = json.loads((SCHEMAS / "prices.avsc").read_text())
    sql = "SELECT o.order_id, p.* FROM orders o LEFT JOIN prices p ON o.product = p.product"
    reconcile(plan(tmp_path, JOIN_SQL=sql, **UPSERT), where)
    path = tmp_path / "prices-v2.avsc"
    path.write_text(json.dumps({**prices, "fields": prices["fields"] + [PLACED]}))
    new = reconcile(plan(tmp_path, JOIN_SQL=sql, RIGHT_SCHEMA_FILE=str(path), **UPSERT), where)
    upgrade = new.output_upgrade(0)
    # prices.product is not nullable: None there means the right side was padded
    assert upgrade((7, "ink", 2.5, "EUR")) == (7, "ink", 2.5, "EUR", "unknown")
    assert upgrade((8, None, None, None)) == (8, None, None, None, None)


@pytest.mark.parametrize("before, after, names", [
    # a column the input already had: stored rows have no value for it
    ("SELECT o.order_id, o.product, p.price", "SELECT o.order_id, o.product, o.quantity, p.price",
     "the output gained 'quantity', a column the left input already had"),
    # the right side is padded, and the previous output holds no non-nullable right column to tell
    ("SELECT o.order_id, o.product, p.currency", "SELECT o.order_id, o.product, p.currency, p.placed",
     "the output gained 'placed' of the right input, which the join pads with NULLs"),
])
def test_an_output_change_the_materializer_cannot_follow_is_refused(tmp_path, before, after, names):
    where = str(tmp_path / "cp")
    tail = " FROM orders o LEFT JOIN prices p ON o.product = p.product"
    reconcile(plan(tmp_path, JOIN_SQL=before + tail, **UPSERT), where)
    prices = json.loads((SCHEMAS / "prices.avsc").read_text())
    path = tmp_path / "prices-v2.avsc"
    path.write_text(json.dumps({**prices, "fields": prices["fields"] + [PLACED]}))
    with pytest.raises(CheckpointMismatch, match=names):
        reconcile(plan(tmp_path, JOIN_SQL=after + tail, RIGHT_SCHEMA_FILE=str(path), **UPSERT), where)


def test_a_materializer_checkpoint_of_an_earlier_changejoin_is_accepted_unchanged(tmp_path, upsert_location):
    store = checkpoint.Checkpoint(upsert_location)
    stored = store.read()
    del stored["facts"]["materializer"]["sources"], stored["output_generations"]  # as written before sources
    store.write(stored)
    sql = "SELECT o.*, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"
    same = reconcile(plan(tmp_path, JOIN_SQL=sql, **UPSERT), upsert_location)
    assert same.output_generation == 0


def test_the_service_refusing_a_checkpoint_logs_the_whole_reason_in_its_text_logs(tmp_path, location):
    """``changejoin run`` (the default LOG_FORMAT=text) on a checkpoint of another join stops before
    Spark starts, and its log says every change and what to do, not only its first line."""
    from tests.support.service_env import changejoin

    env = {**VALID, "STATE_BUCKETS": "0", "JOIN_SQL": LEFT.replace("LEFT JOIN", "JOIN"), "LEFT_PRIMARY_KEY": "",
           "CHECKPOINT_LOCATION": location, "METRICS_PORT": "0"}
    proc = changejoin("run", env=env)
    assert proc.returncode == 1, proc.stderr
    fatal = proc.stderr[proc.stderr.index("changejoin stopped:"):]
    assert f"CHECKPOINT_LOCATION={location}: its join state was made for another join" in fatal
    assert "JOIN_SQL: the join type changed from 'LEFT' to 'INNER'" in fatal
    assert "LEFT_PRIMARY_KEY: (order_id) -> none" in fatal
    assert "Start from a new CHECKPOINT_LOCATION" in fatal and "or restore the previous configuration" in fatal

"""The service half of the checkpoint format (service/sparkstate.py): which Spark state variables
each stage opens, with which schemas, and the one upgrade of values stored in an older generation.
The bytes of a value are held by test_checkpoint_compat.py and the golden files of test_state_format.py."""
import pickle

from operators import Context, Output
from operators.testing import InMemoryState
from service import sparkstate
from service.checkpoint import reconcile
from service.plan import JoinPlan
from service.processor import JoinProcessor, NormalizeProcessor, UpsertProcessor
from tests.support.spark_fakes import FakeHandle, FakeValueState
from tests.support.checkpoint_plans import NOTE, UPSERT, plan, with_fields

TEMPORAL = ("SELECT o.order_id, p.price FROM orders AS o LEFT JOIN prices FOR SYSTEM_TIME AS OF o.proc_time AS p "
            "ON o.product = p.product")


class RecordingHandle(FakeHandle):
    """A FakeHandle that records each state variable opened: (kind, name, schemas)."""

    def __init__(self):
        super().__init__()
        self.opened = []

    def getValueState(self, name, schema):
        self.opened.append(("value", name, schema.simpleString()))
        return super().getValueState(name, schema)

    def getMapState(self, name, key_schema, value_schema):
        self.opened.append(("map", name, key_schema.simpleString(), value_schema.simpleString()))
        return super().getMapState(name, key_schema, value_schema)


def opened(processor) -> list:
    handle = RecordingHandle()
    processor.init(handle)
    return handle.opened


def test_each_stage_opens_its_state_variables_under_their_names_and_schemas(tmp_path):
    """Spark checks names and schemas on restart: a change here loses every checkpoint's state."""
    value, map_key = "struct<v:binary>", "struct<k:binary>"
    regular = plan(tmp_path)
    assert opened(JoinProcessor(regular.to_json())) == [
        ("map", "left", map_key, value), ("map", "right", map_key, value), ("value", "join", value)]
    temporal = plan(tmp_path, JOIN_SQL=TEMPORAL)
    assert opened(JoinProcessor(temporal.to_json())) == [("value", "join", value)]  # no split sides
    assert opened(UpsertProcessor(plan(tmp_path, **UPSERT).to_json())) == [("value", "rows", value)]
    assert opened(UpsertProcessor()) == [("value", "rows", value)]
    normalized = plan(tmp_path, LEFT_CHANGELOG_MODE="upsert", LEFT_PRIMARY_KEY="order_id")
    assert normalized.sides[0].normalized
    assert opened(NormalizeProcessor(normalized.to_json(), 0)) == [("value", "last", value)]


def test_the_upgrade_builds_each_stored_generations_row_maps_once():
    built, mapped = [], []

    class Operator:
        def map_rows(self, value, left, right):
            mapped.append(value)
            return [left(row) for row in value]

    upgrade = sparkstate.upgrader(Operator(), lambda g: (built.append(g) or (lambda row: row + (g,)), None))
    assert upgrade([(1,)], 0) == [(1, 0)] and upgrade([(2,)], 0) == [(2, 0)] and upgrade([(3,)], 1) == [(3, 1)]
    assert built == [0, 1] and len(mapped) == 3


def _evolved(tmp_path, **env):
    """A plan whose left input gained a column (``note``, default None) since the checkpoint's first run."""
    where = str(tmp_path / "checkpoint")
    old = reconcile(plan(tmp_path, **env), where)
    new = reconcile(plan(tmp_path, with_fields(NOTE), **env), where)
    assert (old.state_generation, new.state_generation) == (0, 1)
    return old, new


def _stored(value) -> FakeValueState:
    state = FakeValueState()
    state.value = (pickle.dumps(value, protocol=5),)  # written in generation 0: no prefix
    return state


def test_the_join_stage_reads_a_value_of_an_older_generation_in_todays_columns(tmp_path, monkeypatch):
    old, new = _evolved(tmp_path)
    store = InMemoryState()
    old.operator.process(store.for_key("ink"), [(0, 0, (7, "ink", 2))], Context(), Output())
    calls = []
    row_upgrade = JoinPlan.row_upgrade
    monkeypatch.setattr(JoinPlan, "row_upgrade", lambda self, g, side: calls.append((g, side)) or row_upgrade(self, g, side))
    join = JoinProcessor(new.to_json())
    handle = FakeHandle()
    handle.states["join"] = _stored(store.for_key("ink").get())
    join.init(handle)
    for _ in range(2):  # the row maps are built once per stored generation, not per read
        left, right = join.state.get()[:2]
        assert [entry[0] for entry in left.values()] == [(7, "ink", 2, None)] and right == {}
    assert calls == [(0, 0), (0, 1)]
    join.state.put(join.state.get())  # written back in today's generation
    assert handle.states["join"].value[0][:3] == b"\x01\x00\x01"


def test_the_normalize_stage_reads_a_last_row_of_an_older_generation_in_todays_columns(tmp_path):
    upsert_left = {"LEFT_CHANGELOG_MODE": "upsert", "LEFT_PRIMARY_KEY": "order_id"}
    _, new = _evolved(tmp_path, **upsert_left)
    normalize = NormalizeProcessor(new.to_json(), 0)
    handle = FakeHandle()
    handle.states["last"] = _stored((7, "ink", 2))
    normalize.init(handle)
    assert normalize.state.get() == (7, "ink", 2, None)

"""A side too large for a key's value lives in a map of its own (operators/splitside.py).

The split is invisible in the output: every conformance case and random changelogs give the same
changelog whether a side stays in the key's value or is split from its first row, on a state that
keeps everything pickled as Spark does (an entry changed in place and not written back is lost
there). And it pays where it should: changing one row of a hot key reads and writes that row,
not the key's other rows.
"""
import json
import pickle
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators import Context, InMemoryState, InputSpec, JoinSpec, JoinType, Output, RowKind, make_join
from operators import conformance
from operators.regular import _KeyedJoin
from operators.splitside import SplitSide
from operators.state import PickledMap
from operators.stateformat import map_key

from test_operators_property import CONDITIONS, build, changelog, host_calls, layouts_, ops, settings_

CASES = Path(__file__).resolve().parent / "data" / "conformance_cases.json"
REGULAR_KINDS = {"regular", "semi_anti", "mini_batch"}


def regular_cases():
    cases = json.loads(CASES.read_text())["cases"]
    return [c for c in cases if c["kind"] in REGULAR_KINDS]


@pytest.mark.parametrize("case", regular_cases(), ids=lambda c: c["name"])
def test_every_regular_case_passes_with_every_side_split(monkeypatch, case):
    state = InMemoryState(pickled=True)
    monkeypatch.setattr(_KeyedJoin, "split_at", 0)
    observed = conformance.run_case(case, state)
    assert conformance.compare(case, observed) is None
    # the cases did run on split sides: some key has (or had and emptied) a map
    assert any(slot.maps for slot in state._slots.values())


def run(join, records, state, bundles=None):
    """Each call's output, as a multiset: the rows one record matches come in the order its key's
    state iterates them, insertion order in a dict, key order in Spark's map state (as in Flink's
    RocksDB map state)."""
    out = Output()
    outputs = []
    for calls in host_calls(records, bundles):
        for key, group in calls:
            join.process(state.for_key(key), group, Context(), out)
            outputs.append(Counter(out.rows))
            out.rows.clear()
    return outputs


@pytest.mark.parametrize("join_type", list(JoinType))
@settings_
@given(operations=ops, layouts=layouts_, cond_sql=st.sampled_from(CONDITIONS), null_safe=st.booleans(),
       split_at=st.sampled_from([0, 1, 3]), bundles=st.none() | st.lists(st.integers(1, 8), max_size=8))
def test_split_sides_emit_exactly_what_whole_values_emit(join_type, operations, layouts, cond_sql, null_safe,
                                                         split_at, bundles):
    if bundles is not None and join_type.is_semi_anti:
        bundles = None  # mini-batch is for the regular joins
    records = changelog(operations, layouts)
    whole, _ = build(join_type, layouts, cond_sql, null_safe, mini_batch=bundles is not None)
    split, _ = build(join_type, layouts, cond_sql, null_safe, mini_batch=bundles is not None)
    getattr(split, "join", split).split_at = split_at
    expected = run(whole, list(records), InMemoryState(), bundles)
    state = InMemoryState(pickled=True)
    assert run(split, list(records), state, bundles) == expected


class CountingMap(PickledMap):
    """A pickled map that counts what is asked of it."""

    def __init__(self):
        super().__init__()
        self.gets = self.puts = self.removes = self.scans = 0

    def get(self, key, default=None):
        self.gets += 1
        return super().get(key, default)

    def put(self, key, value):
        self.puts += 1
        super().put(key, value)

    def remove(self, key):
        self.removes += 1
        super().remove(key)

    def items(self):
        self.scans += 1
        return super().items()


class CountingState:
    """One key's state: a pickled value and counting maps."""

    def __init__(self):
        self.value = None
        self.maps: dict[str, CountingMap] = {}
        self.timers = set()

    def get(self):
        return None if self.value is None else pickle.loads(self.value)

    def put(self, value):
        self.value = pickle.dumps(value)

    def clear(self):
        self.value = None

    def map(self, name):
        return self.maps.setdefault(name, CountingMap())

    def register_timer(self, domain, ts):
        self.timers.add((domain, ts))

    def delete_timer(self, domain, ts):
        self.timers.discard((domain, ts))


def hot_key_join(join_type=JoinType.LEFT, left_layout=(1,), ttl=None):
    columns = ("k", "id", "v")
    left = InputSpec(columns, (0,), left_layout, state_ttl_ms=ttl)
    right = InputSpec(columns, (0,), (1,), state_ttl_ms=ttl)
    return make_join(JoinSpec(join_type, left, right, (True,)))


@pytest.mark.parametrize("join_type", [JoinType.INNER, JoinType.LEFT, JoinType.FULL, JoinType.SEMI])
def test_updating_one_row_of_a_hot_key_touches_that_row_only(join_type):
    join = hot_key_join(join_type)
    state = CountingState()
    rows = 3 * join.split_at
    join.process(state, [(0, RowKind.INSERT, (7, i, i)) for i in range(rows)], Context(), Output())
    join.process(state, [(1, RowKind.INSERT, (7, i, 0)) for i in range(3)], Context(), Output())
    left = state.maps["left"]
    assert len(left) == rows and "right" not in state.maps  # the big side split, the small one not
    left.gets = left.puts = left.removes = left.scans = 0

    out = Output()
    update = [(0, RowKind.UPDATE_BEFORE, (7, 5, 5)), (0, RowKind.UPDATE_AFTER, (7, 5, 50))]
    join.process(state, update, Context(), out)

    assert (left.scans, left.gets, left.puts, left.removes) == (0, 1, 1, 0)
    expected = {JoinType.INNER: 6, JoinType.LEFT: 6, JoinType.FULL: 6, JoinType.SEMI: 2}[join_type]
    assert len(out.rows) == expected
    assert len(state.value) < 200  # the key's value holds the small side and a marker


def test_a_record_of_the_small_side_reads_the_big_side_once_and_writes_what_changed():
    join = hot_key_join(JoinType.LEFT)
    state = CountingState()
    rows = 2 * join.split_at
    join.process(state, [(0, RowKind.INSERT, (7, i, i)) for i in range(rows)], Context(), Output())
    left = state.maps["left"]
    left.gets = left.puts = left.scans = 0
    out = Output()
    join.process(state, [(1, RowKind.INSERT, (7, 0, 0))], Context(), out)
    # every left row gains its first match: read once, all written back (association counts)
    assert left.scans == 1 and left.puts == rows and left.gets == 0
    assert Counter(kind for kind, _ in out.rows) == {RowKind.DELETE: rows, RowKind.INSERT: rows}
    left.puts = left.scans = 0
    join.process(state, [(1, RowKind.INSERT, (7, 1, 0))], Context(), Output())
    assert left.scans == 1 and left.puts == rows  # a second match: counts change again
    # an INNER join keeps no association counts: a right record reads the left side, writes nothing
    inner, state = hot_key_join(JoinType.INNER), CountingState()
    inner.process(state, [(0, RowKind.INSERT, (7, i, i)) for i in range(rows)], Context(), Output())
    state.maps["left"].puts = 0
    inner.process(state, [(1, RowKind.INSERT, (7, 0, 0))], Context(), Output())
    assert state.maps["left"].puts == 0


def test_a_split_side_that_empties_returns_to_the_value_and_its_map_is_cleared():
    join = hot_key_join(JoinType.INNER)
    state = CountingState()
    rows = join.split_at + 1
    join.process(state, [(0, RowKind.INSERT, (7, i, i)) for i in range(rows)], Context(), Output())
    assert len(state.maps["left"]) == rows
    join.process(state, [(0, RowKind.DELETE, (7, i, i)) for i in range(rows - 1)], Context(), Output())
    assert len(state.maps["left"]) == 1  # stays split while it holds rows
    join.process(state, [(0, RowKind.DELETE, (7, rows - 1, rows - 1))], Context(), Output())
    assert len(state.maps["left"]) == 0 and state.value is None  # nothing left of the key


def test_ttl_expires_a_split_side_with_its_timer():
    join = hot_key_join(JoinType.LEFT, ttl=1_000)
    state = CountingState()
    rows = join.split_at + 5
    join.process(state, [(0, RowKind.INSERT, (7, i, i)) for i in range(rows)], Context(now=100), Output())
    join.process(state, [(0, RowKind.UPDATE_AFTER, (7, 3, 33))], Context(now=600), Output())
    (timer,) = state.timers
    assert timer == ("proc", 1_600)  # the latest write's expiry, without reading the side
    out = Output()
    join.process(state, [(1, RowKind.INSERT, (7, 0, 0))], Context(now=1_300), out)
    assert len([r for r in out.rows if r[0] == RowKind.INSERT]) == 1  # only the row written at 600 is alive
    join.on_timer(state, "proc", 2_300, Context(now=2_300), Output())
    assert state.value is None and len(state.maps["left"]) == 0


def test_stored_rows_of_an_older_schema_are_upgraded_in_a_split_side():
    join = hot_key_join(JoinType.INNER)
    state = CountingState()
    rows = join.split_at + 1
    join.process(state, [(0, RowKind.INSERT, (7, i, i)) for i in range(rows)], Context(), Output())
    # a field was added to both inputs: rows stored before get its default, as the host upgrades
    # a value of an older state generation when it reads it (service/sparkstate.py)
    upgraded = join.map_rows(state.get(), lambda row: row + ("d",), lambda row: row + ("d",))
    state.get = lambda: upgraded
    out = Output()
    join.process(state, [(1, RowKind.INSERT, (7, 0, 0, "x"))], Context(), out)
    assert sorted(r[1] for r in out.rows)[:2] == [(7, 0, 0, "d", 7, 0, 0, "x"), (7, 1, 1, "d", 7, 0, 0, "x")]
    assert len(out.rows) == rows
    assert all(len(entry[0]) == 4 for _, entry in state.maps["left"].items())


def test_split_side_flush_writes_only_changes():
    store = PickledMap()
    side = SplitSide.moved(store, {(i,): [(i,), 1, 0, 0] for i in range(4)})
    assert side.flush() == [4, 0] and len(store) == 4
    side = SplitSide(store, 4, 0)
    entry = side.get((2,))
    entry[2] += 1  # changed in place
    side[(9,)] = [(9,), 1, 0, 5]
    side.pop((1,))
    side[(10,)] = [(10,), 1, 0, 0]
    del side[(10,)]  # set and removed within the call: never stored
    assert len(side) == 4
    assert side.flush() == [4, 5]
    assert {k: v[2] for k, v in store.items()} == {(0,): 0, (2,): 1, (3,): 0, (9,): 0}


# -- in the service: the JoinProcessor on Spark's map state (faked) -------------------------------

def test_the_join_processor_keeps_a_hot_sides_rows_in_spark_map_state_and_a_failed_call_writes_nothing():
    from service.envelope import Target, unpack
    from service.processor import JoinProcessor
    from spark_fakes import FakeHandle, FakeTimerValues
    from test_encode import envelopes, plan_for
    from service_harness import order, price

    join = JoinProcessor(plan_for().to_json())
    handle = FakeHandle()
    join.init(handle)
    join.operator.split_at = 3
    books = envelopes(0, [("+I", order(i, "book", i)) for i in range(6)], 0)
    list(join.handleInputRows((b"book",), iter(books), FakeTimerValues()))
    left = handle.maps["left"].entries
    assert len(left) == 6 and not handle.maps["right"].entries
    assert {pickle.loads(k[0]) for k in left} == {(i,) for i in range(6)}  # by the orders' key
    value = pickle.loads(handle.states["join"].value[0])
    assert value[0] == [6, value[0][1]] and value[1] == {}

    rows = list(join.handleInputRows((b"book",), iter(envelopes(1, [("+I", price("book", 2.5))], 0)),
                                     FakeTimerValues()))
    changes = [c for r in rows if r.target == Target.PACKED for c in unpack(r.payload)]
    assert Counter(kind for kind, _ in changes) == {RowKind.DELETE: 6, RowKind.INSERT: 6}

    before = (dict(left), handle.states["join"].value)
    inner = join.operator

    class FailsAfterWriting:
        def process(self, state, records, ctx, out):
            inner.process(state, records, ctx, out)  # changes the split side and the value, then:
            raise ValueError("boom")

    join.operator = FailsAfterWriting()
    update = envelopes(0, [("-U", order(2, "book", 2)), ("+U", order(2, "book", 20))], 10)
    rows = list(join.handleInputRows((b"book",), iter(update), FakeTimerValues()))
    assert [r.target for r in rows] == [Target.DEAD_LETTER] * 2
    assert (dict(left), handle.states["join"].value) == before

    join.operator = inner
    rows = list(join.handleInputRows((b"book",), iter(update), FakeTimerValues()))
    changes = [c for r in rows if r.target == Target.PACKED for c in unpack(r.payload)]
    assert [kind for kind, _ in changes] == [RowKind.DELETE, RowKind.INSERT]  # a LEFT join re-emits
    assert pickle.loads(left[(map_key((2,)),)][0])[0] == (2, "book", 20)
    assert sum(1 for k, v in before[0].items() if left[k] != v) == 1  # that row, and no other, rewritten

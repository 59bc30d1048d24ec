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

from operators import InputSpec, JoinSpec, JoinType, RowKind, make_join
from operators import conformance
from operators.regular import _KeyedJoin
from operators.splitside import SplitSide
from operators.stateformat import map_key
from operators.testing import InMemoryState, LocalRunner, PickledMap

from tests.support.operator_changelogs import CONDITIONS, build, bundles, changelog, layouts_, ops, settings_

CASES = Path(__file__).resolve().parents[1] / "conformance" / "cases.json"
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
    assert any(state.maps(key) for key in state.keys(ever=True))


class PerCall(LocalRunner):
    """A runner that keeps each call's output apart (``calls``), as a multiset: the rows one record
    matches come in the order its key's state iterates them, insertion order in a dict, key order
    in Spark's map state (as in Flink's RocksDB map state)."""

    def __init__(self, join, pickled):
        super().__init__(join, pickled=pickled)
        self.calls = []

    def after_call(self, key):
        self.calls.append(Counter(self.drain()[0]))


def run(join, records, pickled, bundle_sizes=None):
    runner = PerCall(join, pickled)
    for batch in bundles(records, bundle_sizes):
        runner.process(batch)
    return runner.calls


@pytest.mark.parametrize("join_type", list(JoinType))
@settings_
@given(operations=ops, layouts=layouts_, cond_sql=st.sampled_from(CONDITIONS), null_safe=st.booleans(),
       split_at=st.sampled_from([0, 1, 3]), sizes=st.none() | st.lists(st.integers(1, 8), max_size=8))
def test_split_sides_emit_exactly_what_whole_values_emit(join_type, operations, layouts, cond_sql, null_safe,
                                                         split_at, sizes):
    if sizes is not None and join_type.is_semi_anti:
        sizes = None  # mini-batch is for the regular joins
    records = changelog(operations, layouts)
    whole, _ = build(join_type, layouts, cond_sql, null_safe, mini_batch=sizes is not None)
    split, _ = build(join_type, layouts, cond_sql, null_safe, mini_batch=sizes is not None)
    getattr(split, "join", split).split_at = split_at
    # the split join on a state that keeps everything pickled, as Spark does
    assert run(split, list(records), True, sizes) == run(whole, list(records), False, sizes)


def hot_key_join(join_type=JoinType.LEFT, left_layout=(1,), ttl=None):
    columns = ("k", "id", "v")
    left = InputSpec(columns, (0,), left_layout, state_ttl_ms=ttl)
    right = InputSpec(columns, (0,), (1,), state_ttl_ms=ttl)
    return make_join(JoinSpec(join_type, left, right, (True,)))


KEY = (7,)  # the hot key


def hot_key(join_type=JoinType.LEFT, left_layout=(1,), ttl=None, pickled=True):
    """A runner of the hot-key join on a state that keeps everything pickled, as Spark does."""
    return LocalRunner(hot_key_join(join_type, left_layout, ttl), pickled=pickled)


def inserts(side, ids, v=None):
    return [(side, RowKind.INSERT, (7, i, i if v is None else v)) for i in ids]


@pytest.mark.parametrize("join_type", [JoinType.INNER, JoinType.LEFT, JoinType.FULL, JoinType.SEMI])
def test_updating_one_row_of_a_hot_key_touches_that_row_only(join_type):
    runner = hot_key(join_type)
    rows = 3 * runner.operator.split_at
    runner.process(inserts(0, range(rows)))
    runner.process(inserts(1, range(3), v=0))
    maps = runner.state.maps(KEY)
    assert len(maps["left"]) == rows and "right" not in maps  # the big side split, the small one not
    runner.drain()

    runner.process([(0, RowKind.UPDATE_BEFORE, (7, 5, 5)), (0, RowKind.UPDATE_AFTER, (7, 5, 50))])

    left = runner.last_call.maps["left"]
    assert (left.scans, left.gets, left.puts, left.removes) == (0, 1, 1, 0)
    expected = {JoinType.INNER: 6, JoinType.LEFT: 6, JoinType.FULL: 6, JoinType.SEMI: 2}[join_type]
    assert len(runner.output.rows) == expected
    assert len(pickle.dumps(runner.state.for_key(KEY).get())) < 200  # the value: the small side and a marker


def test_a_record_of_the_small_side_reads_the_big_side_once_and_writes_what_changed():
    runner = hot_key(JoinType.LEFT)
    rows = 2 * runner.operator.split_at
    runner.process(inserts(0, range(rows)))
    runner.drain()
    runner.process(inserts(1, [0], v=0))
    # every left row gains its first match: read once, all written back (association counts)
    left = runner.last_call.maps["left"]
    assert left.scans == 1 and left.puts == rows and left.gets == 0
    assert Counter(kind for kind, _ in runner.output.rows) == {RowKind.DELETE: rows, RowKind.INSERT: rows}
    runner.process(inserts(1, [1], v=0))
    left = runner.last_call.maps["left"]
    assert left.scans == 1 and left.puts == rows  # a second match: counts change again
    # an INNER join keeps no association counts: a right record reads the left side, writes nothing
    inner = hot_key(JoinType.INNER)
    inner.process(inserts(0, range(rows)))
    inner.process(inserts(1, [0], v=0))
    left = inner.last_call.maps["left"]
    assert left.scans == 1 and left.puts == 0


def test_a_split_side_that_empties_returns_to_the_value_and_its_map_is_cleared():
    runner = hot_key(JoinType.INNER)
    rows = runner.operator.split_at + 1
    runner.process(inserts(0, range(rows)))
    assert len(runner.state.maps(KEY)["left"]) == rows
    runner.process([(0, RowKind.DELETE, (7, i, i)) for i in range(rows - 1)])
    assert len(runner.state.maps(KEY)["left"]) == 1  # stays split while it holds rows
    runner.process([(0, RowKind.DELETE, (7, rows - 1, rows - 1))])
    assert len(runner.state.maps(KEY)["left"]) == 0 and runner.state.keys() == []  # nothing left of the key


def test_ttl_expires_a_split_side_with_its_timer():
    runner = hot_key(JoinType.LEFT, ttl=1_000)
    rows = runner.operator.split_at + 5
    runner.now = 100
    runner.process(inserts(0, range(rows)))
    runner.now = 600
    runner.process([(0, RowKind.UPDATE_AFTER, (7, 3, 33))])
    assert runner.state.timers(KEY) == {("proc", 1_600)}  # the latest write's expiry, without reading the side
    runner.drain()
    runner.now = 1_300
    runner.process(inserts(1, [0], v=0))
    assert len([r for r in runner.output.rows if r[0] == RowKind.INSERT]) == 1  # only the row written at 600 is alive
    runner.advance_clock(2_300)  # the right row's expiry, now the key's timer
    assert runner.state.for_key(KEY).get() is None and len(runner.state.maps(KEY)["left"]) == 0


def test_stored_rows_of_an_older_schema_are_upgraded_in_a_split_side():
    runner = hot_key(JoinType.INNER, pickled=False)  # the upgraded value below holds the row maps
    rows = runner.operator.split_at + 1
    runner.process(inserts(0, range(rows)))
    # a field was added to both inputs: rows stored before get its default, as the host upgrades
    # a value of an older state generation when it reads it (service/sparkstate.py)
    stored = runner.state.for_key(KEY)
    stored.put(runner.operator.map_rows(stored.get(), lambda row: row + ("d",), lambda row: row + ("d",)))
    runner.process([(1, RowKind.INSERT, (7, 0, 0, "x"))])
    out = runner.output.rows
    assert sorted(r[1] for r in out)[:2] == [(7, 0, 0, "d", 7, 0, 0, "x"), (7, 1, 1, "d", 7, 0, 0, "x")]
    assert len(out) == rows
    assert all(len(entry[0]) == 4 for _, entry in runner.state.maps(KEY)["left"].items())


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
    from tests.support.spark_fakes import FakeHandle, FakeTimerValues
    from tests.support.left_join_stages import envelopes, plan_for
    from tests.support.service_harness import order, price

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

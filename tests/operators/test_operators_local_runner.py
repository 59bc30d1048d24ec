"""The in-memory host itself (operators/testing.py): it routes records by key, keeps time, fires
timers in order, collects output and late rows, and catches an operator that breaks the state
protocol of operators/state.py."""
import re

import pytest

from operators import EVENT, PROC, InputSpec, JoinSpec, JoinType, RowKind, WindowJoinSpec, WindowKind, WindowSpec
from operators import make_join, make_window_join
from operators.testing import LocalRunner, StateProtocolError

I, D = int(RowKind.INSERT), int(RowKind.DELETE)


class Timers:
    """Each record (side, kind, (key, domain, time)) registers that timer of its key (a -D deletes
    it) and stores the key's name. A timer emits (key, domain, time, now, watermark), and may then
    register or delete another timer of its key: ``then`` maps a time to (register?, domain, time)."""

    def __init__(self, then=None):
        self.then = then or {}

    def process(self, state, records, ctx, out):
        for _, kind, (key, domain, ts) in records:
            (state.delete_timer if kind == D else state.register_timer)(domain, ts)
        state.put(key)

    def on_timer(self, state, domain, ts, ctx, out):
        out.rows.append((I, (state.get(), domain, ts, ctx.now, ctx.watermark)))
        if ts in self.then:
            register, other_domain, other_ts = self.then[ts]
            (state.register_timer if register else state.delete_timer)(other_domain, other_ts)


def timer_runner(then=None):
    return LocalRunner(Timers(then), key=lambda record: record[2][0])


def timers(runner, *requests, kind=I):
    runner.process([(0, kind, request) for request in requests])


def fired(runner):
    return [row for _, row in runner.drain()[0]]


class Calls:
    """Emits, per call, the rows it was handed."""

    def process(self, state, records, ctx, out):
        out.rows.append((I, tuple(r[2] for r in records)))

    def on_timer(self, state, domain, ts, ctx, out):
        pass


# -- routing -----------------------------------------------------------------------------------
def test_a_join_is_fed_by_the_join_key_of_each_side():
    orders, prices = InputSpec(("id", "product"), (1,)), InputSpec(("product", "price"), (0,))
    runner = LocalRunner(make_join(JoinSpec(JoinType.INNER, orders, prices)))
    runner.process([(0, I, (1, "ink")), (1, I, ("pen", 2.0)), (1, I, ("ink", 3.5)), (0, I, (2, "pen"))])
    assert runner.state.keys() == [("ink",), ("pen",)]
    assert runner.output.rows == [(I, (1, "ink", "ink", 3.5)), (I, (2, "pen", "pen", 2.0))]


def test_records_go_one_call_per_key_in_order_of_their_first_record_or_sorted_or_to_one_key():
    records = [(0, I, ("b", 1)), (0, I, ("a", 2)), (1, I, ("b", 3)), (0, I, ("c", 4)), (1, I, ("a", 5))]
    runner = LocalRunner(Calls(), key=lambda record: record[2][0])
    runner.process(records)
    assert fired(runner) == [(("b", 1), ("b", 3)), (("a", 2), ("a", 5)), (("c", 4),)]
    runner.process(records, sort_keys=True)
    assert fired(runner) == [(("a", 2), ("a", 5)), (("b", 1), ("b", 3)), (("c", 4),)]
    runner.process(records, key="all")
    assert fired(runner) == [tuple(r[2] for r in records)]


def test_kinds_reach_the_operator_as_plain_ints():
    seen = []

    class Kinds(Calls):
        def process(self, state, records, ctx, out):
            seen.extend(type(r[1]) for r in records)

    LocalRunner(Kinds(), key=lambda record: 0).process([(0, RowKind.UPDATE_AFTER, ("a",)), (0, 0, ("b",))])
    assert seen == [int, int]


# -- time and timers ---------------------------------------------------------------------------
def test_due_timers_fire_in_time_order_and_on_ties_in_the_order_the_keys_first_held_state():
    runner = timer_runner()
    timers(runner, ("b", PROC, 40))  # b holds state first
    timers(runner, ("a", PROC, 20))
    timers(runner, ("b", PROC, 20))  # registered after a's
    timers(runner, ("c", PROC, 10))
    runner.advance_clock(30)
    assert fired(runner) == [("c", PROC, 10, 30, None), ("b", PROC, 20, 30, None), ("a", PROC, 20, 30, None)]
    runner.advance_clock(25)  # the clock never goes back
    assert runner.now == 30 and fired(runner) == []
    runner.advance_clock(40)
    assert fired(runner) == [("b", PROC, 40, 40, None)]
    assert all(runner.state.timers(key) == set() for key in "abc")


def test_processing_and_event_time_timers_fire_apart_and_the_combined_watermark_is_the_smaller():
    runner = timer_runner()
    timers(runner, ("a", PROC, 5), ("a", EVENT, 5))
    runner.advance_clock(100)
    assert fired(runner) == [("a", PROC, 5, 100, None)]
    assert runner.advance_watermark(0, 7) is False  # one input has none yet: no combined watermark
    assert runner.watermark is None and fired(runner) == []
    assert runner.advance_watermark(1, 6) is True
    assert runner.watermark == 6 and fired(runner) == [("a", EVENT, 5, 100, 6)]
    assert runner.advance_watermark(1, 9) is True and runner.watermark == 7
    assert runner.advance_watermark(1, 3) is False and runner.watermark == 7  # it never goes back


def test_a_timer_deleted_by_an_earlier_one_does_not_fire_and_one_registered_in_a_round_waits():
    runner = timer_runner(then={1: (False, PROC, 2), 3: (True, PROC, 4)})
    timers(runner, ("a", PROC, 1), ("a", PROC, 2), ("a", PROC, 3), ("b", PROC, 2))
    runner.advance_clock(10)
    assert fired(runner) == [("a", PROC, 1, 10, None), ("b", PROC, 2, 10, None), ("a", PROC, 3, 10, None)]
    assert runner.state.timers("a") == {(PROC, 4)}  # registered during the round, due, not fired yet
    runner.fire(PROC)
    assert fired(runner) == [("a", PROC, 4, 10, None)]


def test_setting_the_time_does_not_fire_until_asked():
    runner = timer_runner()
    timers(runner, ("a", EVENT, 5), ("a", PROC, 5))
    runner.now, runner.watermark = 50, 50  # a micro-batch's time, as Spark runs it: records first
    timers(runner, ("b", EVENT, 7))
    assert fired(runner) == []
    runner.fire(EVENT)
    assert fired(runner) == [("a", EVENT, 5, 50, 50), ("b", EVENT, 7, 50, 50)]
    runner.fire(PROC, upto=4)
    assert fired(runner) == []
    runner.fire(PROC)
    assert fired(runner) == [("a", PROC, 5, 50, 50)]


def test_the_calls_see_the_clock_and_the_watermark():
    seen = []

    class Sees(Calls):
        def process(self, state, records, ctx, out):
            seen.append((ctx.now, ctx.watermark))

    runner = LocalRunner(Sees(), key=lambda record: 0)
    runner.process([(0, I, ())])
    runner.advance_clock(3)
    runner.advance_watermark(0, 8)
    runner.advance_watermark(1, 9)
    runner.process([(0, I, ())])
    assert seen == [(0, None), (3, 8)]


# -- output ------------------------------------------------------------------------------------
def test_late_rows_are_counted_per_input_side_and_drained_with_the_changelog():
    window = WindowSpec(WindowKind.TUMBLE, 10)
    side = InputSpec(("k", "t"), (0,))
    runner = LocalRunner(make_window_join(WindowJoinSpec(JoinType.INNER, side, side, window, 1, 1)))
    runner.advance_watermark(0, 20)
    runner.advance_watermark(1, 20)
    runner.process([(0, I, ("a", 5)), (1, I, ("a", 3)), (1, I, ("b", 12)), (0, I, ("a", 25)), (1, I, ("a", 25))])
    assert runner.late_by_side == [1, 2]
    rows, late = runner.drain()
    assert rows == [] and late == [(I, ("a", 5)), (I, ("a", 3)), (I, ("b", 12))]
    runner.advance_watermark(0, 40)
    runner.advance_watermark(1, 40)
    rows, late = runner.drain()
    assert rows == [(I, ("a", 25, 20, 30, 29, "a", 25, 20, 30, 29))] and late == []
    assert runner.output.rows == [] and runner.state.keys() == []


# -- the state protocol ------------------------------------------------------------------------
class Misbehaves:
    """Does to its key's state what ``act(state)`` does."""

    def __init__(self, act):
        self.act = act

    def process(self, state, records, ctx, out):
        self.act(state)

    def on_timer(self, state, domain, ts, ctx, out):
        self.act(state)


def test_an_operator_that_reads_its_state_twice_in_one_call_fails_with_its_name_and_key():
    runner = LocalRunner(Misbehaves(lambda state: (state.get(), state.get())), key=lambda record: record[2][0])
    with pytest.raises(AssertionError) as failure:
        runner.process([(0, I, ("ink", 1))])
    assert isinstance(failure.value, StateProtocolError)
    assert str(failure.value).startswith("Misbehaves.process for key 'ink': read the key's value a second time")
    assert "operators/state.py" in str(failure.value)


@pytest.mark.parametrize("act, problem", [
    (lambda state: (state.put(1), state.put(2)), "wrote the key's value a second time in one call (put)"),
    (lambda state: (state.put(1), state.clear()), "wrote the key's value a second time in one call (clear)"),
    (lambda state: state.put({"rows": {1, 2}}), "stored a value that is not plain builtins"),
    (lambda state: state.put([RowKind.INSERT]), "stored a value that is not plain builtins"),
    (lambda state: state.put({frozenset(): 0}), "stored a value that is not plain builtins"),
    (lambda state: (state.map("left").get((1,)), state.map("left").get((1,))),
     "map 'left': read entry (1,) a second time in one call"),
    (lambda state: (list(state.map("left").items()), state.map("left").get((1,))),
     "map 'left': read entry (1,) after reading the whole map in the same call"),
    (lambda state: (state.map("left").items(), state.map("left").items()),
     "map 'left': read the whole map a second time in one call"),
    (lambda state: (state.map("right").put((1,), [1]), state.map("right").remove((1,))),
     "map 'right': wrote entry (1,) a second time in one call"),
    (lambda state: state.map("right").put([1], 0), "map 'right': an entry key that is not a hashable builtin"),
    (lambda state: state.map("right").put((1,), object()), "map 'right': stored an entry that is not plain builtins"),
    (lambda state: state.register_timer("wall", 5), "registered a timer in domain 'wall'"),
], ids=["put-twice", "put-then-clear", "a-set", "an-enum", "a-frozenset-as-dict-key", "entry-read-twice",
        "entry-read-after-scan", "map-scanned-twice", "entry-written-twice", "list-entry-key", "object-entry",
        "unknown-timer-domain"])
def test_every_breach_of_the_protocol_fails_the_call(act, problem):
    runner = LocalRunner(Misbehaves(act), key=lambda record: record[2][0])
    with pytest.raises(StateProtocolError, match="^" + re.escape(f"Misbehaves.process for key 'k': {problem}")):
        runner.process([(0, I, ("k",))])


def test_a_timer_call_is_checked_too():
    def act(state):
        if state.get() is None:
            state.register_timer(PROC, 5)
            state.put(1)
        else:
            state.put(2)
            state.put(3)

    runner = LocalRunner(Misbehaves(act), key=lambda record: record[2][0])
    runner.process([(0, I, ("k",))])
    with pytest.raises(StateProtocolError, match="^Misbehaves.on_timer for key 'k': wrote the key's value a second"):
        runner.advance_clock(5)


def test_what_the_protocol_allows_passes_and_each_call_is_counted():
    def act(state):
        value = state.get()
        left = state.map("left")
        left.get((1,))
        left.get((2,))
        left.put((1,), [value])
        left.remove((2,))
        left.clear()  # a map may be cleared, and written after
        left.put((3,), [0])
        list(left.items())
        state.put(b"bytes and builtins" if value is None else (value, 1.5, None, True, {"k": [1]}))

    runner = LocalRunner(Misbehaves(act), key=lambda record: record[2][0])
    runner.process([(0, I, ("k",))])
    runner.process([(0, I, ("k",))])
    call = runner.last_call
    left = call.maps["left"]
    assert (call.reads, call.writes) == (1, 1)
    assert (left.gets, left.puts, left.removes, left.scans, left.clears) == (2, 2, 1, 1, 1)


def test_without_checks_the_runner_only_drives():
    runner = LocalRunner(Misbehaves(lambda state: (state.get(), state.get(), state.put({1}))), key=lambda r: 0,
                         check=False)
    runner.process([(0, I, ())])
    assert runner.last_call is None and runner.state.for_key(0).get() == {1}


def test_a_pickled_state_keeps_only_what_was_written_back():
    def act(state):
        value = state.get()
        if value is None:
            state.put([1])
        else:
            value.append(2)  # changed in place, never put: lost, as in Spark

    for pickled, kept in ((True, [1]), (False, [1, 2])):
        runner = LocalRunner(Misbehaves(act), key=lambda record: 0, pickled=pickled)
        runner.process([(0, I, ())])
        runner.process([(0, I, ())])
        assert runner.state.for_key(0).get() == kept
